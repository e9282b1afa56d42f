// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/fastpath/reuseport_balancer.h"

#include <sys/socket.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"

#include "bpf/reuseport.skel.h"

namespace sluice::fastpath {

absl::StatusOr<std::unique_ptr<ReuseportBalancer>> ReuseportBalancer::Create(uint32_t workers) {
  ASSIGN_OR_RETURN(auto skel, Skeleton<reuseport_bpf>::Create([workers](reuseport_bpf& s) {
                     s.rodata->workers = workers;
                     return absl::OkStatus();
                   }));
  return std::unique_ptr<ReuseportBalancer>(new ReuseportBalancer(std::move(skel)));
}

ReuseportBalancer::ReuseportBalancer(std::unique_ptr<Skeleton<reuseport_bpf>> skel)
    : skel_(std::move(skel)) {}

ReuseportBalancer::~ReuseportBalancer() = default;

absl::Status ReuseportBalancer::Attach(int listen_fd) const {
  // The group keeps its own reference to the program: it outlives this object's fd.
  const int prog = bpf_program__fd((*skel_)->progs.sluice_pick_worker);
  if (setsockopt(listen_fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_EBPF, &prog, sizeof(prog)) != 0) {
    return base::ErrnoStatus(
        errno, absl::StrCat("setsockopt(fd ", listen_fd, ", SO_ATTACH_REUSEPORT_EBPF)"));
  }
  return absl::OkStatus();
}

}  // namespace sluice::fastpath
