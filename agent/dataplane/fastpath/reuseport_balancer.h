// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "agent/dataplane/fastpath/skeleton.h"

struct reuseport_bpf;

namespace sluice::fastpath {

// Hands new TCP connections to the workers in turn instead of by the kernel's 4-tuple hash,
// which can pile a few long-lived connections onto one worker (bpf/reuseport.bpf.c). One
// program serves every listener group; Attach it to one socket of each group of per-worker
// SO_REUSEPORT listeners, which must have joined in worker order. UDP groups keep the hash: a
// flow's datagrams must all reach the worker that holds its flow. Thread-safe (no state after
// Create; the turn counter is the kernel's).
class ReuseportBalancer final {
 public:
  // PermissionDenied without CAP_BPF (or CAP_SYS_ADMIN); the caller then keeps the hash.
  static absl::StatusOr<std::unique_ptr<ReuseportBalancer>> Create(uint32_t workers);
  ~ReuseportBalancer();

  // SO_ATTACH_REUSEPORT_EBPF on `listen_fd`: the program then picks for its whole group.
  absl::Status Attach(int listen_fd) const;

 private:
  explicit ReuseportBalancer(std::unique_ptr<Skeleton<reuseport_bpf>> skel);
  std::unique_ptr<Skeleton<reuseport_bpf>> skel_;
};

}  // namespace sluice::fastpath
