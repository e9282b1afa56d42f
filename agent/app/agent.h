// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/clock.h"
#include "lib/base/metrics.h"
#include "lib/cli/shutdown.h"
#include "lib/event/event_loop.h"

#include "agent/app/options.h"
#include "agent/control/admin/admin_server.h"
#include "agent/control/admin/service_health.h"
#include "agent/control/config/mux.h"
#include "agent/control/proxier/change_tracker.h"
#include "agent/control/proxier/data_path.h"
#include "agent/control/proxier/external_nat.h"
#include "agent/control/proxier/proxier.h"
#include "agent/control/proxier/socket_balancing.h"
#include "agent/control/proxier/sync_runner.h"
#include "agent/control/sources/etcd_source.h"
#include "agent/control/sources/file_source.h"
#include "agent/control/sources/kube_source.h"
#include "agent/dataplane/extnat/ext_nat.h"
#include "agent/dataplane/fastpath/reuseport_balancer.h"
#include "agent/dataplane/fastpath/sockmap_fast_path.h"
#include "agent/dataplane/proxy/data_path_metrics.h"
#include "agent/dataplane/socklb/socket_lb.h"
#include "agent/dataplane/vip/link_watcher.h"
#include "agent/dataplane/vip/vip_manager.h"
#include "tunnel/agent/tunnel_agent.h"

namespace sluice::app {

// Wires sluice-agent together: sources -> mux -> change tracker -> sync runner -> proxier ->
// consumers, plus the admin servers. Owns every component; the control plane runs on the
// thread that calls Run(). Thread: control plane.
class Agent final {
 public:
  // SIGINT and SIGTERM must already be blocked in every thread (cli::Main does it first). `clock`,
  // the process's one clock, must outlive the agent.
  static absl::StatusOr<std::unique_ptr<Agent>> Create(const AgentOptions& opts,
                                                       base::Clock& clock = base::RealClock::Get());
  // --cleanup: removes our VIPs, the objects pinned under --bpf-root and the eBPF NAT's tc
  // filters, and restores the sysctls strict ARP raised.
  static absl::Status Cleanup(const AgentOptions& opts);
  // --init-only (kube-proxy's step for a privileged init container): strict ARP, which needs a
  // writable /proc/sys, unless --strict-arp=false; unless --socket-lb=off, a bpffs at
  // --bpf-root (also unless --external-datapath=proxy) and cgroup2 at --socket-lb-cgroup (or
  // its unified/) where the host has none.
  static absl::Status InitOnly(const AgentOptions& opts);
  ~Agent();

  // Serves until SIGINT or SIGTERM, then shuts down cleanly.
  absl::Status Run();

 private:
  Agent(const AgentOptions& opts, base::Clock& clock);
  absl::Status Start();
  void RegisterMetrics();
  absl::Status StartDataPath();
  absl::Status StartKubeSource(config::SourceChannel* channel);
  absl::StatusOr<std::unique_ptr<sources::EtcdSource>> CreateEtcdSource(
      const SourceSpec& spec, config::SourceChannel* channel);
  // Applies --datapath: probes the sockmap fast path unless "splice". Fails only for "sockmap".
  absl::Status ChooseDataPath(int workers);
  // Applies --socket-lb: probes socket-level balancing unless "off" (which removes what an
  // earlier agent pinned). Fails only for "on".
  absl::Status StartSocketLb();
  // Applies --external-datapath: the eBPF NAT of remote clients unless "proxy" (which removes
  // what an earlier agent left). Fails only for "bpf".
  absl::Status StartExternalNat();
  // After StartExternalNat loaded ext_nat_: its consumer, link watcher, timers and metrics.
  absl::Status WireExternalNat();
  // The devices the eBPF NAT is attached to: --external-devices (those present), else those
  // holding the NodePort addresses.
  std::vector<std::string> ExternalDevices() const;
  void RegisterExternalNatMetrics();
  // A full apply of the eBPF NAT's consumer alone, with the table of the last sync: devices
  // and NodePort addresses re-read (after vip::LinkWatcher saw a change).
  void RefreshExternalNat();
  // What /proxyMode reports: the proxy's TCP path, plus "+socket-lb" and "+external-bpf" for
  // the kernel paths that are on.
  std::string ProxyMode() const;
  admin::HealthInputs Health() const;
  // kube-proxy's health check node ports, a consumer of every synced table.
  void StartServiceHealth();
  absl::Status StartTunnel();
  // The first SIGTERM or SIGINT (cli::LoopShutdown): how long to keep serving.
  absl::Duration Drain(int signo);
  // --strict-arp, once this node has a VIP: see vip/strict_arp.h.
  void EnsureStrictArp();

  const AgentOptions opts_;
  base::Clock& clock_;
  const absl::Time started_;  // wall time, as /healthz shows it
  base::Registry metrics_;
  std::unique_ptr<event::EventLoop> loop_;
  config::Mux mux_;
  std::unique_ptr<proxier::ChangeTracker> tracker_;
  std::unique_ptr<proxier::Proxier> proxier_;
  std::unique_ptr<proxier::SyncRunner> runner_;
  std::unique_ptr<vip::VipManager> vips_;
  bool strict_arp_tried_ = false;
  std::unique_ptr<proxy::DataPathMetrics> data_path_metrics_;
  std::unique_ptr<fastpath::SockmapFastPath> sockmap_;  // outlives the workers that use it
  // Hands new TCP connections to the workers in turn (null: the kernel's hash). Its program
  // stays attached to the listener groups on its own reference.
  std::unique_ptr<fastpath::ReuseportBalancer> tcp_balancer_;
  std::string datapath_ = "splice";  // the path in use, for /proxyMode
  std::unique_ptr<proxier::DataPath> data_path_;
  std::unique_ptr<socklb::SocketLb> socket_lb_;  // outlives socket_balancing_
  std::unique_ptr<proxier::SocketBalancing> socket_balancing_;
  std::unique_ptr<extnat::ExtNat> ext_nat_;  // outlives external_nat_
  std::unique_ptr<proxier::ExternalNat> external_nat_;
  std::unique_ptr<vip::LinkWatcher> link_watcher_;  // arms devices_timer_
  std::unique_ptr<event::Timer> devices_timer_;     // RefreshExternalNat
  std::unique_ptr<event::Timer> flow_timer_;        // ages ext_nat_'s conntrack entries
  std::unique_ptr<sources::SourceMetricFamilies> source_metrics_;
  std::vector<std::unique_ptr<sources::FileSource>> file_sources_;
  std::unique_ptr<tunnel::agent::TunnelAgent> tunnel_;
  std::unique_ptr<sources::KubeSource> kube_source_;
  std::vector<std::unique_ptr<sources::EtcdSource>> etcd_sources_;
  std::unique_ptr<admin::AdminServer> admin_;
  std::unique_ptr<admin::ServiceHealthServers> service_health_;
  std::atomic<bool> node_eligible_{true};  // KEP-3836, from the Node (kube source)
  std::unique_ptr<cli::LoopShutdown> shutdown_;
};

}  // namespace sluice::app
