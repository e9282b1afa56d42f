// SPDX-License-Identifier: Apache-2.0
// ExtNat over the loaded object's maps (the rest of ExtNat, in ext_nat.cc, runs over any BpfMap).
#include "lib/base/status.h"

#include "agent/dataplane/extnat/ext_nat.h"
#include "bpf/ext_nat.skel.h"

namespace sluice::extnat {

absl::StatusOr<std::unique_ptr<ExtNat>> ExtNat::Create(const LoadOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<NatObject> object, NatObject::Load(options));
  const ext_nat_bpf& s = object->skel();
  auto km = std::unique_ptr<KernelMaps>(
      new KernelMaps{.svc = fastpath::KernelBpfMap(s.maps.sluice_nat_svc),
                     .slot = fastpath::KernelBpfMap(s.maps.sluice_nat_slot),
                     .member = fastpath::KernelBpfMap(s.maps.sluice_nat_member),
                     .stats = fastpath::KernelBpfMap(s.maps.sluice_nat_stats),
                     .ranges = fastpath::KernelBpfMap(s.maps.sluice_nat_range),
                     .flows = fastpath::KernelBpfMap(s.maps.sluice_nat_ct),
                     .traffic = fastpath::KernelBpfMap(s.maps.sluice_nat_traffic),
                     .drops = fastpath::KernelBpfMap(s.maps.sluice_nat_drops),
                     .remote = fastpath::KernelBpfMap(s.maps.sluice_nat_rmt),
                     .snat = fastpath::KernelBpfMap(s.maps.sluice_nat_snat)});
  const Maps maps{
      .services = {.svc = km->svc, .slot = km->slot, .member = km->member, .stats = km->stats},
      .ranges = km->ranges,
      .flows = km->flows,
      .traffic = km->traffic,
      .drops = km->drops,
      .remote = km->remote,
      .snat = km->snat};
  std::unique_ptr<ExtNat> nat(new ExtNat(maps, options));
  nat->kernel_maps_ = std::move(km);
  nat->object_ = std::move(object);
  return nat;
}

}  // namespace sluice::extnat
