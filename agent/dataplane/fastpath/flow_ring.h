// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "lib/base/unique_fd.h"

#include "agent/dataplane/fastpath/sockmap_fast_path.h"

struct ring_buffer;

namespace sluice::fastpath {

// One worker's ring of flow-control signals from the verdict program (a BPF ring buffer at
// `index` of the shared ring array): "source socket `cookie` has redirected `bytes`, past the
// mark you set". It lets a worker watch thousands of kernel-pumped connections without polling
// any of them. Thread: owning worker loop.
class FlowRing final {
 public:
  using Handler = absl::AnyInvocable<void(uint64_t cookie, uint64_t bytes)>;

  static absl::StatusOr<std::unique_ptr<FlowRing>> Create(SockmapFastPath& fast_path,
                                                          uint32_t index, Handler handler);
  ~FlowRing();  // unregisters from the ring array first
  FlowRing(const FlowRing&) = delete;
  FlowRing& operator=(const FlowRing&) = delete;

  // Readable (level-triggered) while signals wait; watch it in the worker's loop.
  int fd() const;
  // Runs the handler for every waiting signal.
  void Consume();
  uint32_t index() const { return index_; }

 private:
  FlowRing(SockmapFastPath& fast_path, uint32_t index, base::UniqueFd map, Handler handler);
  static int OnSample(void* ctx, void* data, size_t size);

  SockmapFastPath& fast_path_;
  const uint32_t index_;
  base::UniqueFd map_;
  Handler handler_;
  ring_buffer* ring_ = nullptr;
};

}  // namespace sluice::fastpath
