// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/socklb/socket_lb.h"

#include "lib/base/log.h"
#include "lib/base/status.h"

#include "bpf/sock_lb.skel.h"

namespace sluice::socklb {

SocketLb::KernelMaps::KernelMaps(const sock_lb_bpf& s)
    : svc(s.maps.sluice_lb_svc),
      slot(s.maps.sluice_lb_slot),
      member(s.maps.sluice_lb_member),
      stats(s.maps.sluice_lb_stats),
      gone(s.maps.sluice_lb_gone) {}

absl::StatusOr<std::unique_ptr<SocketLb>> SocketLb::Create(const Options& options) {
  ASSIGN_OR_RETURN(auto object, SockLbObject::Load(options));
  std::unique_ptr<SocketLb> lb(new SocketLb());
  lb->kernel_maps_ = std::make_unique<KernelMaps>(object->skel());
  KernelMaps& m = *lb->kernel_maps_;
  lb->services_ = std::make_unique<ServiceMaps>(
      ServiceMaps::Maps{.svc = m.svc, .slot = m.slot, .member = m.member, .stats = m.stats});
  if (fastpath::LinkPtr iterator = object->TakeReapIterator(); iterator != nullptr) {
    lb->reaper_ =
        std::make_unique<UdpReaper>(std::move(iterator), m.gone, object->skel().bss->reaped);
  }
  lb->object_ = std::move(object);
  return lb;
}

std::unique_ptr<SocketLb> SocketLb::ForMaps(ServiceMaps::Maps maps) {
  std::unique_ptr<SocketLb> lb(new SocketLb());
  lb->services_ = std::make_unique<ServiceMaps>(maps);
  return lb;
}

SocketLb::~SocketLb() = default;

absl::Status SocketLb::Apply(const std::vector<Change>& changes) {
  std::vector<Gone> gone;
  absl::Status result = services_->Apply(changes, gone);
  Reap(gone);
  return result;
}

absl::Status SocketLb::ApplyAll(const std::map<std::string, Service>& all) {
  std::vector<Gone> gone;
  absl::Status result = services_->ApplyAll(all, gone);
  Reap(gone);
  return result;
}

void SocketLb::Reap(const std::vector<Gone>& gone) {
  if (reaper_ == nullptr || gone.empty()) {
    return;
  }
  if (absl::Status st = reaper_->Reap(gone); !st.ok()) {
    // Best effort: the services are programmed; an unreachable namespace keeps its sockets.
    LOG(WARNING) << "socket LB: closing UDP sockets of removed backends: " << st;
  }
}

}  // namespace sluice::socklb
