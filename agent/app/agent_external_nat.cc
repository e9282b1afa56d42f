// SPDX-License-Identifier: Apache-2.0
// The Agent's wiring of the eBPF NAT of remote clients (--external-datapath): the kernel object,
// its consumer of the sync delta, the link watcher, conntrack ageing and metrics.
#include <net/if.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

#include "agent/app/agent.h"

namespace sluice::app {
namespace {

// How often idle conntrack entries of the eBPF NAT are removed: well under its shortest age
// (UDP's, 30 s by default), so a flow outlives its age by at most a third.
constexpr absl::Duration kFlowCollectPeriod = absl::Seconds(10);

extnat::LoadOptions ExternalNatLoadOptions(const AgentOptions& opts) {
  extnat::LoadOptions load{.bpf_root = opts.bpf_root,
                           .max_flows = static_cast<uint32_t>(opts.external_max_flows)};
  // kube-proxy's conntrack settings (0 there: leave the default).
  const KubeProxyFlags& k = opts.kube_proxy;
  if (k.conntrack_tcp_timeout_established > absl::ZeroDuration()) {
    load.tcp_established = k.conntrack_tcp_timeout_established;
  }
  if (k.conntrack_tcp_timeout_close_wait > absl::ZeroDuration()) {
    load.tcp_close_wait = k.conntrack_tcp_timeout_close_wait;
  }
  load.udp = k.conntrack_udp_timeout > absl::ZeroDuration() ? k.conntrack_udp_timeout
                                                            : opts.udp_idle_timeout;
  return load;
}

// An earlier agent's filters would go on translating to backends nobody keeps up to date. As
// for socket LB, only with a bpf root: --bpf-root= (tests, demos) leaves the node's devices
// alone.
void RemoveStaleExternalNat(const std::string& bpf_root) {
  if (bpf_root.empty()) {
    return;
  }
  if (absl::Status st = extnat::ExtNat::Cleanup(bpf_root); !st.ok()) {
    LOG(ERROR) << "removing an earlier agent's eBPF NAT: " << st;
  }
}

}  // namespace

absl::Status Agent::StartExternalNat() {
  auto& unavailable = metrics_.AddGauge("sluice_external_nat_unavailable",
                                        "1, labelled with the reason, when remote clients of "
                                        "NodePorts, external and LoadBalancer IPs go through the "
                                        "proxy instead of the eBPF NAT",
                                        {"reason"});
  if (opts_.external_datapath == "proxy") {
    unavailable.WithLabels({"disabled"}).Set(1);
    RemoveStaleExternalNat(opts_.bpf_root);
    return absl::OkStatus();
  }
  absl::Status self_test = extnat::SelfTest();
  absl::StatusOr<std::unique_ptr<extnat::ExtNat>> nat =
      self_test.ok() ? extnat::ExtNat::Create(ExternalNatLoadOptions(opts_)) : self_test;
  if (!nat.ok()) {
    const std::string reason = absl::IsPermissionDenied(nat.status()) ? "permission"
                               : absl::IsUnimplemented(nat.status())  ? "unsupported"
                               : self_test.ok()                       ? "load"
                                                                      : "self_test";
    if (opts_.external_datapath == "bpf") {
      return base::Annotate(nat.status(), absl::StrCat("--external-datapath=bpf: the eBPF NAT "
                                                       "is unavailable (",
                                                       reason, ")"));
    }
    LOG(WARNING) << "external-datapath auto: proxy, the eBPF NAT is unavailable (" << reason
                 << "): " << nat.status().message();
    unavailable.WithLabels({reason}).Set(1);
    RemoveStaleExternalNat(opts_.bpf_root);
    return absl::OkStatus();
  }
  ext_nat_ = std::move(*nat);
  return WireExternalNat();
}

absl::Status Agent::WireExternalNat() {
  external_nat_ = std::make_unique<proxier::ExternalNat>(
      *ext_nat_,
      proxier::ExternalNat::Options{
          .node_ips =
              [this] { return proxier::NodeAddresses(opts_.nodeport_cidrs, vips_->Owned()); },
          .devices = [this] { return ExternalDevices(); },
          .snat_addresses =
              [this](const std::vector<std::string>& devices) {
                return proxier::SnatDevices(devices, vips_->Owned());
              },
          .random = opts_.external_algorithm == "random",
          .node_name = opts_.node_name});
  // Beside socket LB: a full table's maps (the cold start's) are written while socket LB
  // writes its own, instead of after them (docs/performance.md, issue 25).
  proxier_->AddConsumer(external_nat_.get(), "external-nat", proxier::Proxier::Order::kBeside);
  // New links and addresses: this consumer alone re-reads the devices and NodePort addresses,
  // at most once per min-sync-period (pods come and go with links of their own).
  devices_timer_ = loop_->CreateTimer([this] { RefreshExternalNat(); });
  ASSIGN_OR_RETURN(link_watcher_, vip::LinkWatcher::Create(*loop_, vips_->interface_name(), [this] {
                     if (!devices_timer_->armed()) {
                       devices_timer_->Arm(std::max(opts_.min_sync_period, absl::Seconds(1)));
                     }
                   }));
  flow_timer_ = loop_->CreateTimer([this] {
    // bpf_ktime_get_ns() is CLOCK_MONOTONIC, the base clock's monotonic origin.
    if (auto left = ext_nat_->CollectFlows(clock_.MonotonicNow() - base::MonoTime()); !left.ok()) {
      LOG(ERROR) << "eBPF NAT conntrack ageing: " << left.status();
    }
    flow_timer_->Arm(kFlowCollectPeriod);
  });
  flow_timer_->Arm(kFlowCollectPeriod);
  RegisterExternalNatMetrics();
  LOG(INFO) << "eBPF NAT of remote clients: on"
            << (ext_nat_->adopted() ? ", adopted the pinned maps" : "") << ", devices "
            << (opts_.external_devices.empty() ? "holding the NodePort addresses"
                                               : absl::StrJoin(opts_.external_devices, ","));
  return absl::OkStatus();
}

void Agent::RegisterExternalNatMetrics() {
  proxier::ExternalNat* consumer = external_nat_.get();
  metrics_.AddCounterFamiliesFunc(
      {{"sluice_external_nat_flows_total",
        "Flows of remote clients the eBPF NAT sent to a backend"},
       {"sluice_external_nat_packets_total", "Packets the eBPF NAT translated, both directions"},
       {"sluice_external_nat_bytes_total",
        "Bytes of the packets the eBPF NAT translated, both directions"}},
      {"service_port"}, [consumer](base::MetricRows& rows) {
        consumer->ForEachCounter([&](std::string_view port, const extnat::ExtNat::Counts& c) {
          rows.Add({port}, {static_cast<double>(c.flows), static_cast<double>(c.packets),
                            static_cast<double>(c.bytes)});
        });
      });
  extnat::ExtNat* nat = ext_nat_.get();
  metrics_.AddCounterFamiliesFunc(
      {{"sluice_external_nat_drops_total",
        "Packets to a frontend the eBPF NAT did not translate: dropped (source_range; mtu, "
        "no_route of SNATed flows; mtu_icmp, answered with ICMP fragmentation needed) or passed "
        "to the proxy (conntrack_full, fragment, malformed, snat_ports, no_route of new flows)"}},
      {"reason"}, [nat](base::MetricRows& rows) {
        for (const auto& [reason, n] : nat->Drops()) {
          rows.Add({reason}, {static_cast<double>(n)});
        }
      });
  metrics_.AddGaugeFunc("sluice_external_nat_conntrack_entries",
                        "Connection-tracking entries of the eBPF NAT (two per flow) at the last "
                        "ageing pass",
                        [nat] { return static_cast<double>(nat->flows()); });
}

void Agent::RefreshExternalNat() {
  // Until the first sync the table is not the cluster's: applying it would remove what an
  // earlier agent programmed. That first sync is full anyway.
  if (proxier_->LastSync() == absl::InfinitePast()) {
    external_nat_->Invalidate();
    return;
  }
  absl::Status st = external_nat_->Apply({.table = proxier_->table(), .full = true});
  if (!st.ok()) {
    LOG(ERROR) << "eBPF NAT after a link or address change: " << st;
    external_nat_->Invalidate();  // the next sync tries again, in full
    runner_->Request();
  }
}

std::vector<std::string> Agent::ExternalDevices() const {
  if (opts_.external_devices.empty()) {
    return proxier::NodeDevices(opts_.nodeport_cidrs, vips_->Owned());
  }
  // A listed device that is not there (yet) is skipped: the link watcher resyncs when it comes.
  std::vector<std::string> present;
  for (const std::string& device : opts_.external_devices) {
    if (if_nametoindex(device.c_str()) != 0) {
      present.push_back(device);
    } else {
      LOG(WARNING) << "--external-devices: no device " << device << " (yet)";
    }
  }
  return present;
}

}  // namespace sluice::app
