// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/fastpath/sockmap_fast_path.h"

#include <sys/socket.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"

#include "bpf/include/sluice/bpf_abi.h"
#include "bpf/sockmap.skel.h"

namespace sluice::fastpath {

static_assert(sizeof(sluice_limit) == 32, "bpf_abi.h: struct sluice_limit");
static_assert(sizeof(sluice_count) == 32, "bpf_abi.h: struct sluice_count");
static_assert(sizeof(sluice_event) == 16, "bpf_abi.h: struct sluice_event");

namespace {

absl::Status MapError(const char* op, const char* map, uint64_t cookie) {
  return fastpath::MapError(absl::StrCat(op, " ", map, "[", cookie, "]"));
}

}  // namespace

absl::StatusOr<uint64_t> SocketCookie(int fd) {
  uint64_t cookie = 0;
  socklen_t len = sizeof(cookie);
  if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("getsockopt(fd ", fd, ", SO_COOKIE)"));
  }
  return cookie;
}

absl::StatusOr<std::unique_ptr<SockmapFastPath>> SockmapFastPath::Create(const Options& options) {
  const uint32_t sockets = 2 * options.max_connections;
  ASSIGN_OR_RETURN(
      auto skel, Skeleton<sockmap_bpf>::Create([&](sockmap_bpf& s) {
        for (bpf_map* m :
             {s.maps.sluice_peer, s.maps.sluice_attach, s.maps.sluice_count, s.maps.sluice_limit}) {
          if (int err = bpf_map__set_max_entries(m, sockets); err != 0) {
            return base::ErrnoStatus(-err, "bpf_map__set_max_entries");
          }
        }
        if (int err = bpf_map__set_max_entries(s.maps.sluice_rings, options.rings); err != 0) {
          return base::ErrnoStatus(-err, "bpf_map__set_max_entries(sluice_rings)");
        }
        return absl::OkStatus();
      }));
  std::unique_ptr<SockmapFastPath> fp(new SockmapFastPath(options, std::move(skel)));
  ASSIGN_OR_RETURN(fp->attach_,
                   ScopedProgAttach::Create(bpf_program__fd((*fp->skel_)->progs.sluice_verdict),
                                            fp->attach_fd_, BPF_SK_SKB_STREAM_VERDICT));
  return fp;
}

SockmapFastPath::SockmapFastPath(const Options& options,
                                 std::unique_ptr<Skeleton<sockmap_bpf>> skel)
    : options_(options),
      skel_(std::move(skel)),
      peer_fd_(bpf_map__fd((*skel_)->maps.sluice_peer)),
      attach_fd_(bpf_map__fd((*skel_)->maps.sluice_attach)),
      count_fd_(bpf_map__fd((*skel_)->maps.sluice_count)),
      limit_fd_(bpf_map__fd((*skel_)->maps.sluice_limit)),
      rings_fd_(bpf_map__fd((*skel_)->maps.sluice_rings)) {}

SockmapFastPath::~SockmapFastPath() = default;

absl::Status SockmapFastPath::Track(uint64_t cookie, const Instructions& instructions) {
  const sluice_count zero{};
  if (bpf_map_update_elem(count_fd_, &cookie, &zero, BPF_NOEXIST) != 0) {
    return MapError("insert", "sluice_count", cookie);
  }
  if (absl::Status st = Instruct(cookie, instructions); !st.ok()) {
    (void)bpf_map_delete_elem(count_fd_, &cookie);
    return st;
  }
  return absl::OkStatus();
}

void SockmapFastPath::Untrack(uint64_t cookie) {
  (void)bpf_map_delete_elem(limit_fd_, &cookie);
  (void)bpf_map_delete_elem(count_fd_, &cookie);
}

absl::StatusOr<SockmapFastPath::Counts> SockmapFastPath::Count(uint64_t cookie) const {
  sluice_count count{};
  if (bpf_map_lookup_elem(count_fd_, &cookie, &count) != 0) {
    return MapError("lookup", "sluice_count", cookie);
  }
  if ((count.flags & SLUICE_SEQ_BROKEN) != 0) {
    return absl::DataLossError(
        absl::StrCat("socket ", cookie,
                     ": the kernel handed the verdict bytes it already had, and they could "
                     "not be cut off"));
  }
  return Counts{.redirected = count.redirected, .passed = count.passed, .repeated = count.repeated};
}

absl::Status SockmapFastPath::Instruct(uint64_t cookie, const Instructions& in) {
  const sluice_limit limit{.notify_at = in.notify_at,
                           .resume_at = in.resume_at,
                           .ring = in.ring,
                           .pass = in.pass ? 1u : 0u};
  if (bpf_map_update_elem(limit_fd_, &cookie, &limit, BPF_ANY | BPF_F_LOCK) != 0) {
    return MapError("update", "sluice_limit", cookie);
  }
  return absl::OkStatus();
}

absl::Status SockmapFastPath::AddPeer(uint64_t src_cookie, int peer_fd) {
  const uint64_t value = static_cast<uint64_t>(peer_fd);  // sockhash updates take an fd
  if (bpf_map_update_elem(peer_fd_, &src_cookie, &value, BPF_NOEXIST) != 0) {
    return MapError("insert", "sluice_peer", src_cookie);
  }
  return absl::OkStatus();
}

void SockmapFastPath::RemovePeer(uint64_t src_cookie) {
  (void)bpf_map_delete_elem(peer_fd_, &src_cookie);
}

absl::Status SockmapFastPath::Attach(uint64_t cookie, int fd) {
  const uint64_t value = static_cast<uint64_t>(fd);
  if (bpf_map_update_elem(attach_fd_, &cookie, &value, BPF_NOEXIST) != 0) {
    return MapError("insert", "sluice_attach", cookie);
  }
  return absl::OkStatus();
}

absl::Status SockmapFastPath::Detach(uint64_t cookie) {
  if (bpf_map_delete_elem(attach_fd_, &cookie) != 0) {
    return MapError("delete", "sluice_attach", cookie);
  }
  return absl::OkStatus();
}

bool SockmapFastPath::Attached(uint64_t cookie) const {
  uint64_t value = 0;  // a sockhash lookup from userspace returns the socket's cookie
  return bpf_map_lookup_elem(attach_fd_, &cookie, &value) == 0;
}

absl::Status SockmapFastPath::SetRing(uint32_t index, int ring_fd) {
  const uint32_t value = static_cast<uint32_t>(ring_fd);
  if (bpf_map_update_elem(rings_fd_, &index, &value, BPF_ANY) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("update sluice_rings[", index, "]"));
  }
  return absl::OkStatus();
}

void SockmapFastPath::ClearRing(uint32_t index) { (void)bpf_map_delete_elem(rings_fd_, &index); }

}  // namespace sluice::fastpath
