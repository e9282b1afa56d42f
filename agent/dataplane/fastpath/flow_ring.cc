// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/fastpath/flow_ring.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf/include/sluice/bpf_abi.h"

namespace sluice::fastpath {

absl::StatusOr<std::unique_ptr<FlowRing>> FlowRing::Create(SockmapFastPath& fast_path,
                                                           uint32_t index, Handler handler) {
  // Same type and size as the ring array's inner template (bpf/sockmap.bpf.c).
  base::UniqueFd map(
      bpf_map_create(BPF_MAP_TYPE_RINGBUF, "sluice_ring", 0, 0, SLUICE_RING_BYTES, nullptr));
  if (!map) {
    return base::ErrnoStatus(errno, "bpf_map_create(ringbuf)");
  }
  std::unique_ptr<FlowRing> ring(
      new FlowRing(fast_path, index, std::move(map), std::move(handler)));
  ring->ring_ = ring_buffer__new(ring->map_.get(), &FlowRing::OnSample, ring.get(), nullptr);
  if (ring->ring_ == nullptr) {
    return base::ErrnoStatus(errno, "ring_buffer__new");
  }
  RETURN_IF_ERROR(fast_path.SetRing(index, ring->map_.get()));
  return ring;
}

FlowRing::FlowRing(SockmapFastPath& fast_path, uint32_t index, base::UniqueFd map, Handler handler)
    : fast_path_(fast_path), index_(index), map_(std::move(map)), handler_(std::move(handler)) {}

FlowRing::~FlowRing() {
  if (ring_ != nullptr) {
    fast_path_.ClearRing(index_);
    ring_buffer__free(ring_);
  }
}

int FlowRing::fd() const { return ring_buffer__epoll_fd(ring_); }

void FlowRing::Consume() { (void)ring_buffer__consume(ring_); }

int FlowRing::OnSample(void* ctx, void* data, size_t size) {
  if (size < sizeof(sluice_event)) {
    return 0;
  }
  sluice_event ev;
  memcpy(&ev, data, sizeof(ev));
  static_cast<FlowRing*>(ctx)->handler_(ev.cookie, ev.bytes);
  return 0;
}

}  // namespace sluice::fastpath
