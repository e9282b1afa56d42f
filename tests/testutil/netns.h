// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/unique_fd.h"

namespace sluice::testutil {

// Moves the calling thread into a new, empty network namespace with `lo` up, for the lifetime of
// the object. The destructor moves the thread back; the kernel frees the namespace once no
// thread, process or socket holds it, so destroy everything created inside first. Child
// processes spawned by this thread meanwhile (RunCommand) start inside it.
// Thread: the creating thread only; network namespaces are per thread.
class NetNs final {
 public:
  // PermissionDenied without CAP_SYS_ADMIN; tests GTEST_SKIP on that.
  static absl::StatusOr<std::unique_ptr<NetNs>> Create();
  ~NetNs();
  NetNs(const NetNs&) = delete;
  NetNs& operator=(const NetNs&) = delete;

  // The new namespace, e.g. for setns(2) from another thread.
  int fd() const { return created_.get(); }

 private:
  NetNs(base::UniqueFd original, base::UniqueFd created)
      : original_(std::move(original)), created_(std::move(created)) {}

  base::UniqueFd original_;
  base::UniqueFd created_;
};

// A host beside the calling thread's namespace: a named namespace ("ip netns") joined to it by a
// veth pair, "<tag>0" here and "<tag>1" there, both up with the given addresses ("10.88.1.2/24";
// IPv6 ones without duplicate address detection), and default routes there via `gateways`. For
// clients and backends that must not be on the node. The destructor deletes the namespace: end
// its processes first. Thread: the creating thread (it must stay in the same namespace).
class PeerHost final {
 public:
  static absl::StatusOr<std::unique_ptr<PeerHost>> Create(
      const std::string& tag, const std::vector<std::string>& local_addresses,
      const std::vector<std::string>& peer_addresses, const std::vector<std::string>& gateways);
  ~PeerHost();
  PeerHost(const PeerHost&) = delete;
  PeerHost& operator=(const PeerHost&) = delete;

  // `argv` run inside the namespace ("ip netns exec <name> ...").
  std::vector<std::string> Exec(std::vector<std::string> argv) const;
  const std::string& name() const { return name_; }

 private:
  explicit PeerHost(std::string name) : name_(std::move(name)) {}
  const std::string name_;
};

// curl's body for `url`, fetched from inside `from`'s namespace when given (else this
// thread's), or "exit N" when curl failed (5 s at most).
std::string Curl(const std::string& url, const PeerHost* from = nullptr);

}  // namespace sluice::testutil
