// SPDX-License-Identifier: Apache-2.0
#include "agent/app/agent.h"

#include <signal.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/file.h"
#include "lib/base/log.h"
#include "lib/base/process_metrics.h"
#include "lib/base/status.h"

#include "agent/control/admin/debug_services.h"
#include "agent/dataplane/proxy/sockmap_probe.h"
#include "agent/dataplane/socklb/cgroup.h"
#include "agent/dataplane/socklb/probe.h"
#include "agent/dataplane/vip/netlink_vip_manager.h"
#include "agent/dataplane/vip/strict_arp.h"

namespace sluice::app {
namespace {

std::string StrictArpRecord(const AgentOptions& opts) { return opts.state_dir + "/strict-arp"; }

}  // namespace

Agent::Agent(const AgentOptions& opts, base::Clock& clock)
    : opts_(opts), clock_(clock), started_(clock.Now()) {}

Agent::~Agent() {
  // Sources and admin threads first: nothing may call into the pipeline while it goes away.
  admin_.reset();
  service_health_.reset();
  tunnel_.reset();  // cancels its streams and waits for their connections
  file_sources_.clear();
  kube_source_.reset();
  etcd_sources_.clear();
  data_path_.reset();  // workers stop; listeners and connections close
  if (vips_ && !opts_.keep_vips) {
    if (absl::Status st = vips_->RemoveAll(); !st.ok()) {
      LOG(ERROR) << "removing VIPs: " << st;
    }
  }
}

absl::Status Agent::ChooseDataPath(int workers) {
  auto& in_use = metrics_.AddGauge("sluice_datapath",
                                   "The node's TCP data path: 1 for the one in use", {"path"});
  auto& unavailable = metrics_.AddGauge(
      "sluice_sockmap_unavailable",
      "1, labelled with the reason, when the node does not use the sockmap fast path", {"reason"});
  if (opts_.datapath == "splice") {
    unavailable.WithLabels({"disabled"}).Set(1);
    in_use.WithLabels({"splice"}).Set(1);
    return absl::OkStatus();
  }
  proxy::ProbeResult probe = proxy::ProbeSockmap({.rings = static_cast<uint32_t>(workers)});
  if (probe.fast_path == nullptr) {
    if (opts_.datapath == "sockmap") {
      return base::Annotate(probe.status,
                            absl::StrCat("--datapath=sockmap: the sockmap fast path is "
                                         "unavailable (",
                                         probe.reason, ")"));
    }
    LOG(WARNING) << "datapath auto: using splice, sockmap unavailable (" << probe.reason
                 << "): " << probe.status.message();
    unavailable.WithLabels({probe.reason}).Set(1);
    in_use.WithLabels({"splice"}).Set(1);
    return absl::OkStatus();
  }
  sockmap_ = std::move(probe.fast_path);
  datapath_ = "sockmap";
  in_use.WithLabels({"sockmap"}).Set(1);
  return absl::OkStatus();
}

absl::Status Agent::StartDataPath() {
  base::RaiseFileLimit();
  auto vips = vip::NetlinkVipManager::Create(opts_.vip_interface, opts_.service_cidrs);
  if (!vips.ok()) {
    return base::Annotate(vips.status(), "VIP interface (needs CAP_NET_ADMIN)");
  }
  vips_ = std::move(*vips);
  data_path_metrics_ = std::make_unique<proxy::DataPathMetrics>(metrics_);
  proxier::DataPath::Options dp;
  dp.workers = opts_.workers > 0
                   ? static_cast<int>(opts_.workers)
                   : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  dp.nodeport_cidrs = opts_.nodeport_cidrs;
  dp.worker.dial_budget = opts_.dial_timeout;
  dp.worker.drain_timeout = opts_.drain_timeout;
  dp.worker.session.idle_timeout = opts_.tcp_idle_timeout;
  dp.worker.udp.idle_timeout = opts_.udp_idle_timeout;
  dp.worker.max_connections = static_cast<size_t>(opts_.max_connections_per_worker);
  dp.worker.udp.max_flows = static_cast<size_t>(opts_.udp_max_flows_per_worker);
  dp.worker.udp.max_flows_per_source = static_cast<size_t>(opts_.udp_max_source_flows_per_worker);
  dp.worker.max_connections_per_source =
      static_cast<size_t>(opts_.max_source_connections_per_worker);
  dp.caps = {.max_listeners = static_cast<size_t>(opts_.max_listeners),
             .max_listeners_per_service = static_cast<size_t>(opts_.max_listeners_per_service)};
  dp.fd_reserve = opts_.fd_reserve;
  dp.reuseport_sockets = static_cast<size_t>(opts_.reuseport_sockets);
  RETURN_IF_ERROR(ChooseDataPath(dp.workers));
  dp.worker.sockmap = sockmap_.get();
  dp.worker.clock = &clock_;
  if (dp.workers > 1) {
    auto balancer = fastpath::ReuseportBalancer::Create(static_cast<uint32_t>(dp.workers));
    if (balancer.ok()) {
      tcp_balancer_ = std::move(*balancer);
      dp.tcp_balancer = tcp_balancer_.get();
    } else {
      LOG(WARNING) << "new TCP connections are spread over the workers by the kernel's hash, "
                   << "not in turn: " << balancer.status().message();
    }
  }
  ASSIGN_OR_RETURN(data_path_, proxier::DataPath::Create(dp, *vips_, *data_path_metrics_));
  // Socket LB and the eBPF NAT first: within a sync, a client is balanced in the kernel before
  // the proxy listens, and the listener of a removed port closes after its frontends went.
  RETURN_IF_ERROR(StartSocketLb());
  RETURN_IF_ERROR(StartExternalNat());
  proxier_->AddConsumer(data_path_.get(), "proxy");
  LOG(INFO) << "data path: " << datapath_ << ", " << dp.workers << " workers, VIPs on "
            << vips_->interface_name();
  return absl::OkStatus();
}

absl::Status Agent::StartSocketLb() {
  auto& unavailable = metrics_.AddGauge(
      "sluice_socket_lb_unavailable",
      "1, labelled with the reason, when local clients are not balanced at the socket", {"reason"});
  if (opts_.socket_lb == "off") {
    unavailable.WithLabels({"disabled"}).Set(1);
    // Pinned programs of an earlier agent would go on translating with stale maps.
    if (!opts_.bpf_root.empty()) {
      RETURN_IF_ERROR(socklb::SocketLb::Cleanup(opts_.bpf_root));
    }
    return absl::OkStatus();
  }
  socklb::ProbeResult probe =
      socklb::ProbeSocketLb({.cgroup = opts_.socket_lb_cgroup,
                             .bpf_root = opts_.bpf_root,
                             .host_netns_only = opts_.socket_lb_host_netns_only,
                             .max_frontends = static_cast<uint32_t>(opts_.socket_lb_max_frontends),
                             .max_slots = static_cast<uint32_t>(opts_.socket_lb_max_backends),
                             .max_sticky = static_cast<uint32_t>(opts_.socket_lb_max_affinity)});
  if (probe.lb == nullptr) {
    if (opts_.socket_lb == "on") {
      return base::Annotate(probe.status, absl::StrCat("--socket-lb=on: socket-level balancing "
                                                       "is unavailable (",
                                                       probe.reason, ")"));
    }
    LOG(WARNING) << "socket-lb auto: off, unavailable (" << probe.reason
                 << "): " << probe.status.message();
    unavailable.WithLabels({probe.reason}).Set(1);
    return absl::OkStatus();
  }
  socket_lb_ = std::move(probe.lb);
  if (!opts_.socket_lb_cgroup.empty() && !socklb::IsHierarchyRoot(opts_.socket_lb_cgroup)) {
    LOG(WARNING) << "socket LB: " << opts_.socket_lb_cgroup
                 << " is not the cgroup v2 root: only its processes are balanced at the socket";
  }
  proxier::SocketBalancing::Options sb{
      .node_ips = [this] { return proxier::NodeAddresses(opts_.nodeport_cidrs, vips_->Owned()); },
      .random = opts_.socket_lb_algorithm == "random",
      .node_name = opts_.node_name};
  socket_balancing_ = std::make_unique<proxier::SocketBalancing>(*socket_lb_, std::move(sb));
  proxier_->AddConsumer(socket_balancing_.get(), "socket-lb");
  proxier::SocketBalancing* balancing = socket_balancing_.get();
  metrics_.AddCounterFamiliesFunc(
      {{"sluice_socket_lb_translations_total",
        "Connects and datagrams of local clients sent straight to a backend by socket-level "
        "balancing"},
       {"sluice_socket_lb_refused_total",
        "Connects and datagrams of local clients refused at the socket: the service had no "
        "usable endpoint"}},
      {"service"}, [balancing](base::MetricRows& rows) {
        balancing->ForEachCounter([&](std::string_view port, const socklb::SocketLb::Counts& c) {
          rows.Add({port}, {static_cast<double>(c.translated), static_cast<double>(c.refused)});
        });
      });
  if (socket_lb_->can_reap()) {
    socklb::SocketLb* lb = socket_lb_.get();
    metrics_.AddCounterFunc("sluice_socket_lb_stale_udp_closed_total",
                            "Connected UDP sockets of local clients closed because their backend "
                            "left the service",
                            [lb] { return static_cast<double>(lb->reaped()); });
  }
  LOG(INFO) << "socket LB: on for "
            << (opts_.socket_lb_cgroup.empty() ? "the cgroup v2 root" : opts_.socket_lb_cgroup)
            << (socket_lb_->adopted() ? ", adopted the pinned programs and maps" : "")
            << (opts_.socket_lb_host_netns_only ? ", host network namespace only" : "")
            << (socket_lb_->can_reap() ? ""
                                       : "; stale connected UDP sockets are not closed "
                                         "(needs kernel >= 6.5 and CAP_PERFMON)");
  return absl::OkStatus();
}

std::string Agent::ProxyMode() const {
  return absl::StrCat(datapath_, socket_lb_ ? "+socket-lb" : "", ext_nat_ ? "+external-bpf" : "");
}

absl::Status Agent::Cleanup(const AgentOptions& opts) {
  absl::Status result;
  if (!opts.bpf_root.empty()) {
    result.Update(socklb::SocketLb::Cleanup(opts.bpf_root));
    result.Update(extnat::ExtNat::Cleanup(opts.bpf_root));
  }
  result.Update(vip::RestoreStrictArp(StrictArpRecord(opts)));
  // No local ranges: Create then removes every service-CIDR route an earlier run installed.
  auto vips = vip::NetlinkVipManager::Create(opts.vip_interface, {});
  if (!vips.ok()) {
    result.Update(vips.status());
    return result;
  }
  (*vips)->MarkStale();
  result.Update((*vips)->Reconcile({}));  // adopts ours from the kernel and removes them
  result.Update((*vips)->RemoveAll());
  return result;
}

absl::Status Agent::InitOnly(const AgentOptions& opts) {
  absl::Status result;
  if (opts.socket_lb != "off" || opts.external_datapath != "proxy") {
    // Mounts in the host's namespaces (the init container's volumes propagate Bidirectional),
    // where the host lacks them: a bpffs for the pins, cgroup2 for the hooks.
    absl::Status st;
    if (!opts.bpf_root.empty()) {
      st.Update(socklb::EnsureBpfFs(opts.bpf_root));
    }
    if (opts.socket_lb != "off" && !opts.socket_lb_cgroup.empty()) {
      st.Update(socklb::EnsureCgroup2(opts.socket_lb_cgroup).status());
    }
    if (opts.socket_lb == "on" || opts.external_datapath == "bpf") {
      result.Update(st);
    } else if (!st.ok()) {
      LOG(WARNING) << "--init-only: the kernel paths may be unavailable: " << st;
    }
  }
  if (opts.strict_arp) {
    result.Update(vip::EnsureStrictArp(StrictArpRecord(opts)));
  }
  return result;
}

void Agent::EnsureStrictArp() {
  // Local routes for the service CIDRs make their every address local, as VIPs are.
  if (!opts_.strict_arp || strict_arp_tried_ ||
      (vips_->Owned().empty() && opts_.service_cidrs.empty())) {
    return;
  }
  absl::Status st = vip::EnsureStrictArp(StrictArpRecord(opts_));
  // Out of descriptors or memory passes, so the next sync tries again; a read-only /proc/sys
  // (a container without the init step) does not, and would only repeat the error.
  strict_arp_tried_ = !absl::IsResourceExhausted(st);
  if (!st.ok()) {
    LOG(ERROR) << "strict ARP (--strict-arp): " << st.message()
               << "; this node may answer ARP for every VIP on its links";
  }
}

absl::StatusOr<std::unique_ptr<sources::EtcdSource>> Agent::CreateEtcdSource(
    const SourceSpec& spec, config::SourceChannel* channel) {
  sources::EtcdSourceOptions options;
  for (const std::string& url : spec.urls) {
    ASSIGN_OR_RETURN(etcd::Endpoint endpoint, etcd::ParseEndpoint(url));
    if (!endpoint.tls) {
      LOG(WARNING) << "etcd source " << url << " is plaintext http: anyone on the path can "
                   << "read and rewrite the services this node serves; use https:// with "
                   << "--etcd-cafile, --etcd-certfile and --etcd-keyfile";
    }
    options.endpoints.push_back(std::move(endpoint));
  }
  options.allow_loopback = opts_.allow_loopback;
  options.prefix = opts_.etcd_prefix;
  options.ca_file = opts_.etcd_cafile;
  options.cert_file = opts_.etcd_certfile;
  options.key_file = opts_.etcd_keyfile;
  return sources::EtcdSource::Create(options, channel, *source_metrics_);
}

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(const AgentOptions& opts, base::Clock& clock) {
  auto agent = std::unique_ptr<Agent>(new Agent(opts, clock));
  RETURN_IF_ERROR(agent->Start());
  return agent;
}

absl::Status Agent::Start() {
  ASSIGN_OR_RETURN(loop_, event::EventLoop::Create(clock_));
  tracker_ = std::make_unique<proxier::ChangeTracker>(clock_, [this] {
    if (runner_) {
      runner_->Request();
    }
  });
  mux_.AddServiceHandler(tracker_.get());
  mux_.AddEndpointSliceHandler(tracker_.get());
  mux_.AddBatchHandler(tracker_.get());
  proxier_ = std::make_unique<proxier::Proxier>(
      *tracker_, proxier::NodeInfo{opts_.node_name, opts_.zone, opts_.service_proxy_name}, clock_,
      metrics_);
  // Failed syncs retry after the min period, but no sooner than 1s, to avoid a hot loop.
  proxier::RunPolicy policy(opts_.min_sync_period, opts_.sync_period,
                            std::max(opts_.min_sync_period, absl::Seconds(1)));
  runner_ = std::make_unique<proxier::SyncRunner>(*loop_, policy, [this] {
    absl::StatusOr<bool> synced = proxier_->Sync();
    EnsureStrictArp();
    return synced;
  });
  RegisterMetrics();

  // Sources before the data path: their first read (an etcd range of 100,000 endpoints takes
  // ~250 ms) overlaps the probes and BPF loads below. What they deliver meanwhile is only
  // recorded; the first sync runs on the loop, once every consumer is in place.
  // Every channel exists before any source pushes, so "all synced" waits for all of them.
  std::vector<config::SourceChannel*> channels;
  for (const auto& spec : opts_.source_specs) {
    channels.push_back(mux_.Channel(spec.ToString()));
  }
  source_metrics_ = std::make_unique<sources::SourceMetricFamilies>(metrics_);
  for (size_t i = 0; i < opts_.source_specs.size(); ++i) {
    if (opts_.source_specs[i].kind == SourceSpec::Kind::kKube) {
      RETURN_IF_ERROR(StartKubeSource(channels[i]));
      continue;
    }
    if (opts_.source_specs[i].kind == SourceSpec::Kind::kEtcd) {
      ASSIGN_OR_RETURN(auto source, CreateEtcdSource(opts_.source_specs[i], channels[i]));
      etcd_sources_.push_back(std::move(source));
      continue;
    }
    ASSIGN_OR_RETURN(auto source,
                     sources::FileSource::Create(opts_.source_specs[i].path,
                                                 {.allow_loopback = opts_.allow_loopback},
                                                 channels[i], *loop_, *source_metrics_));
    file_sources_.push_back(std::move(source));
  }
  RETURN_IF_ERROR(StartDataPath());
  StartServiceHealth();

  RETURN_IF_ERROR(StartTunnel());
  admin::AdminSources admin_sources{
      .health = [this] { return Health(); },
      .proxy_mode = [this] { return ProxyMode(); },
      .debug_services =
          [this] {
            return admin::RenderDebugServices(
                *proxier_->table(),
                {.listeners = data_path_->Listeners(),
                 .socket_lb = socket_balancing_ ? socket_balancing_->Frontends()
                                                : std::map<std::string, std::vector<std::string>>{},
                 .external_bpf = external_nat_ ? external_nat_->Frontends()
                                               : std::map<std::string, std::vector<std::string>>{},
                 .unserved = data_path_->Unserved()});
          },
      .debug_connections =
          [this] { return admin::RenderDebugConnections(data_path_->Connections()); },
      .not_ready =
          [this] {
            return tunnel_ != nullptr && tunnel_->ConnectedServers() == 0
                       ? std::string("no tunnel server connected")
                       : std::string();
          },
      .metrics = &metrics_};
  ASSIGN_OR_RETURN(
      admin_, admin::AdminServer::Create(opts_.healthz_bind_address, opts_.metrics_bind_address,
                                         std::move(admin_sources)));

  ASSIGN_OR_RETURN(shutdown_, cli::LoopShutdown::Create(
                                  *loop_, [this](int signo) { return Drain(signo); },
                                  [this] { loop_->Stop(); }));
  return absl::OkStatus();
}

absl::Status Agent::StartTunnel() {
  if (opts_.tunnel_servers.empty()) {
    return absl::OkStatus();
  }
  tunnel::agent::TunnelAgentConfig c;
  c.servers = opts_.tunnel_servers;
  c.ca_cert = opts_.tunnel_ca_cert;
  c.agent_cert = opts_.tunnel_cert;
  c.agent_key = opts_.tunnel_key;
  c.token_path = opts_.tunnel_token_path;
  c.agent_id = opts_.node_name;
  // The node name lets the servers' destHost strategy route dials for this node to us.
  c.identifiers =
      opts_.tunnel_identifiers.empty() ? "host=" + opts_.node_name : opts_.tunnel_identifiers;
  c.allowed_destinations = opts_.tunnel_allowed_destinations;
  c.max_connection_buffer = static_cast<size_t>(opts_.tunnel_max_connection_buffer);
  c.window_extension = opts_.tunnel_window_extension;
  c.stall_timeout = opts_.tunnel_stall_timeout;
  c.clock = &clock_;
  // The agent's own status ports stay closed to the tunnel unless listed (AllowList).
  for (const std::string& bind : {opts_.healthz_bind_address, opts_.metrics_bind_address}) {
    std::string host;
    uint16_t port = 0;
    if (tunnel::agent::SplitHostPort(bind, &host, &port)) {
      c.own_ports.push_back(port);
    }
  }
  ASSIGN_OR_RETURN(tunnel_, tunnel::agent::TunnelAgent::Create(std::move(c), metrics_));
  LOG(INFO) << "tunnel agent: serving " << absl::StrJoin(opts_.tunnel_servers, ",");
  return absl::OkStatus();
}

absl::Duration Agent::Drain(int signo) {
  // SIGTERM with the tunnel on drains it (servers route new dials elsewhere) while everything
  // keeps serving; anything else stops at once.
  if (signo != SIGTERM || tunnel_ == nullptr || opts_.tunnel_drain_period <= absl::ZeroDuration()) {
    return absl::ZeroDuration();
  }
  LOG(INFO) << "SIGTERM: draining the tunnel for " << opts_.tunnel_drain_period
            << ", then shutting down (another signal stops at once)";
  tunnel_->Drain();
  return opts_.tunnel_drain_period;
}

absl::Status Agent::StartKubeSource(config::SourceChannel* channel) {
  sources::KubeSource::Options kube{.kubeconfig = opts_.kubeconfig,
                                    .master = opts_.master,
                                    .service_proxy_name = opts_.service_proxy_name,
                                    .node_name = opts_.node_name,
                                    .allow_loopback = opts_.allow_loopback,
                                    .on_eligible = [this](bool e) { node_eligible_ = e; }};
  if (opts_.zone.empty()) {
    // --zone wins; otherwise the Node's label, which the proxier applies on the control plane.
    kube.on_zone = [this](const std::string& zone) {
      loop_->Post([this, zone] {
        proxier_->SetZone(zone);
        runner_->Request();
      });
    };
  }
  ASSIGN_OR_RETURN(kube_source_,
                   sources::KubeSource::Create(std::move(kube), channel, *source_metrics_));
  return absl::OkStatus();
}

void Agent::RegisterMetrics() {
  proxier::ChangeTracker* t = tracker_.get();
  metrics_.AddGaugeFunc("kubeproxy_sync_proxy_rules_service_changes_pending",
                        "Pending proxy rules Service changes",
                        [t] { return static_cast<double>(t->PendingServices()); });
  metrics_.AddCounterFunc("kubeproxy_sync_proxy_rules_service_changes_total",
                          "Cumulative proxy rules Service changes",
                          [t] { return static_cast<double>(t->ServiceChangesTotal()); });
  metrics_.AddGaugeFunc("kubeproxy_sync_proxy_rules_endpoint_changes_pending",
                        "Pending proxy rules Endpoint changes",
                        [t] { return static_cast<double>(t->PendingSlices()); });
  metrics_.AddCounterFunc("kubeproxy_sync_proxy_rules_endpoint_changes_total",
                          "Cumulative proxy rules Endpoint changes",
                          [t] { return static_cast<double>(t->SliceChangesTotal()); });
  metrics_.AddGauge("sluice_build_info", "sluice version", {"version"})
      .WithLabels({SLUICE_VERSION})
      .Set(1);
  base::AddProcessMetrics(metrics_);
}

admin::HealthInputs Agent::Health() const {
  return admin::HealthInputs{.now = clock_.Now(),
                             .started = started_,
                             .last_updated = proxier_->LastSync(),
                             .oldest_pending = tracker_->OldestPending(),
                             .sources_synced = mux_.AllSynced(),
                             .timeout = 2 * opts_.sync_period,
                             .node_eligible = node_eligible_.load(),
                             .zone = absl::LocalTimeZone()};
}

void Agent::StartServiceHealth() {
  admin::ServiceHealthServers::Options o{
      .node_name = opts_.node_name,
      .listen_hosts =
          [this] {
            // kube-proxy: every address without --nodeport-addresses, else the node's
            // addresses in those ranges.
            if (opts_.nodeport_cidrs.empty()) {
              return std::vector<std::string>{""};
            }
            std::vector<std::string> hosts;
            for (const auto& ip : proxier::NodeAddresses(opts_.nodeport_cidrs, vips_->Owned())) {
              hosts.push_back(ip.ToString());
            }
            return hosts;
          },
      .proxy_healthy = [this] { return admin::ProxierHealthy(Health()); },
      .metrics = &metrics_};
  service_health_ = std::make_unique<admin::ServiceHealthServers>(std::move(o));
  proxier_->AddConsumer(service_health_.get(), "health-check");
}

absl::Status Agent::Run() {
  LOG(INFO) << "sluice-agent " << SLUICE_VERSION << " running on node " << opts_.node_name;
  loop_->Run();
  return absl::OkStatus();
}

}  // namespace sluice::app
