// SPDX-License-Identifier: Apache-2.0
// sluice-agent's option table: every flag, its default (AgentOptions' initialisers), help, the
// kube-proxy setting it stands for and whether sluice uses it. Registration, --help, both
// --config formats, --write-config-to, the report of unused kube-proxy settings and the table
// in docs/configuration.md come from these rows.
#include "agent/app/options.h"

namespace sluice::app {

std::vector<base::Option> AgentOptionTable(AgentOptions& o) {
  using O = base::Option;
  constexpr O::Origin kSluice = O::Origin::kSluice;
  constexpr O::Origin kUpstream = O::Origin::kUpstream;  // kube-proxy's flag too
  std::vector<O> table = {
      {"source", &o.sources,
       "Config source: file:PATH (a manifest file or directory), kube, or "
       "etcd:URL[,URL...]; all sources are merged",
       kSluice, "", "", O::kRepeated},
      {"config", &o.config_file,
       "YAML file with these settings (keys are flag names; flags given on the command "
       "line win), or kube-proxy's KubeProxyConfiguration (v1alpha1) file",
       kUpstream},
      {"etcd-prefix", &o.etcd_prefix,
       "Key prefix of etcd sources: Services under PREFIX/services/NAMESPACE/NAME, "
       "EndpointSlices under PREFIX/endpointslices/NAMESPACE/NAME",
       kSluice},
      {"etcd-cafile", &o.etcd_cafile,
       "PEM CA bundle to verify https etcd servers (default: the system's)", kSluice},
      {"etcd-certfile", &o.etcd_certfile,
       "PEM client certificate for https etcd servers (with --etcd-keyfile)", kSluice},
      {"etcd-keyfile", &o.etcd_keyfile, "PEM key of --etcd-certfile", kSluice},
      {"hostname-override", &o.hostname_override,
       "Node name used for traffic policy Local (default: the host name)", kUpstream,
       "hostnameOverride"},
      {"zone", &o.zone, "This node's topology zone, for topology-aware hints", kSluice},
      {"service-proxy-name", &o.service_proxy_name,
       "Serve only services labelled service.kubernetes.io/service-proxy-name=NAME "
       "(default: only unlabelled services)",
       kSluice},
      {"kubeconfig", &o.kubeconfig,
       "--source=kube: kubeconfig file with the API server and credentials (default: "
       "the pod's service account)",
       kUpstream, "clientConnection.kubeconfig", "", O::kFileWins},
      {"master", &o.master,
       "--source=kube: API server address, overriding the kubeconfig's (alone: with the "
       "pod's service account credentials when mounted)",
       kUpstream},
      {"allow-loopback", &o.allow_loopback,
       "Accept EndpointSlice addresses (which the API server refuses there) and, from "
       "the file and etcd sources, cluster IPs on loopback (127.0.0.0/8, ::1): for local "
       "demos, tests and benchmarks",
       kSluice},
      {"healthz-bind-address", &o.healthz_bind_address,
       "IP:PORT for /healthz and /livez; empty disables", kUpstream, "healthzBindAddress", "",
       O::kFileWins},
      {"metrics-bind-address", &o.metrics_bind_address,
       "IP:PORT for /metrics, /proxyMode and /debug/services; empty disables", kUpstream,
       "metricsBindAddress", "", O::kFileWins},
      {"sync-period", &o.sync_period,
       "Longest time between syncs; /healthz fails when an update waits 2x this", kSluice},
      {"min-sync-period", &o.min_sync_period,
       "Shortest time between syncs; changes within it are applied together", kSluice},
      {"workers", &o.workers, "Data-path threads, each with its own listeners (0: one per CPU)",
       kSluice},
      {"vip-interface", &o.vip_interface,
       "Interface for service VIPs (default: a dummy link sluice0 when the kernel has "
       "the type, else lo)",
       kSluice},
      {"keep-vips", &o.keep_vips,
       "Leave the VIPs in place at shutdown, so a restart does not interrupt services", kSluice},
      {"service-cluster-ip-range", &o.service_cluster_ip_range,
       "The cluster's service CIDRs (kube-apiserver's flag of that name; one per family): "
       "each is made local by one route instead of an address per ClusterIP, which is "
       "much faster with thousands of services; every address in them then answers "
       "locally (refused without a service)",
       kSluice},
      {"nodeport-addresses", &o.nodeport_addresses,
       "CIDRs of the node addresses NodePorts listen on (default: all addresses)", kUpstream,
       "nodePortAddresses", "", O::kFileWins},
      {"dial-timeout", &o.dial_timeout,
       "Total time to find an answering endpoint for a new TCP connection", kSluice},
      {"tcp-idle-timeout", &o.tcp_idle_timeout,
       "Reset a proxied TCP connection after this long without traffic", kSluice},
      {"drain-timeout", &o.drain_timeout,
       "Reset connections of a removed service port after this long (0: let them finish)", kSluice},
      {"udp-idle-timeout", &o.udp_idle_timeout,
       "Close a UDP flow (client address -> endpoint) after this long without datagrams", kSluice},
      {"max-connections-per-worker", &o.max_connections_per_worker,
       "Open proxied TCP connections a worker holds; beyond it new ones are reset at "
       "accept (sluice_connections_limited_total)",
       kSluice},
      {"udp-max-flows-per-worker", &o.udp_max_flows_per_worker,
       "UDP flows a worker holds over all of its listeners; beyond it a new client's flow "
       "replaces the least recently used one (sluice_udp_flows_evicted_total)",
       kSluice},
      {"max-source-connections-per-worker", &o.max_source_connections_per_worker,
       "Open proxied TCP connections one client IP holds on a worker; beyond it its new "
       "ones are reset at accept (sluice_connections_source_limited_total)",
       kSluice},
      {"udp-max-source-flows-per-worker", &o.udp_max_source_flows_per_worker,
       "UDP flows one client IP holds on a worker; beyond it a new flow of that client "
       "replaces its own least recently used one (sluice_udp_flows_evicted_total)",
       kSluice},
      {"max-listeners", &o.max_listeners,
       "Listening addresses (service port x address with endpoints) of the userspace "
       "proxy on this node; Services beyond it are not served, smallest admitted first "
       "(sluice_unserved_service_ports, /debug/services)",
       kSluice},
      {"max-listeners-per-service", &o.max_listeners_per_service,
       "Listening addresses one Service may take (all of its ports); a Service over it is "
       "not served (sluice_unserved_service_ports, /debug/services)",
       kSluice},
      {"reuseport-sockets", &o.reuseport_sockets,
       "Sockets of per-worker SO_REUSEPORT groups, which spread new TCP connections over "
       "the workers in turn; TCP addresses beyond it get one socket all workers watch",
       kSluice},
      {"fd-reserve", &o.fd_reserve,
       "File descriptors the data path leaves free for the control plane (API watches, "
       "status servers, files, the tunnel agent), at most half the process's limit",
       kSluice},
      {"datapath", &o.datapath,
       "TCP data path: auto (sockmap if the kernel and capabilities allow it, else "
       "splice), splice, or sockmap (refuse to start without it)",
       kSluice},
      {"socket-lb", &o.socket_lb,
       "Socket-level balancing for clients on this node (connect()/sendmsg() go straight "
       "to a backend, no proxy in the path): auto (on if the kernel, capabilities and "
       "cgroup allow it and a self-test passes), on (refuse to start without it) or off",
       kSluice},
      {"socket-lb-cgroup", &o.socket_lb_cgroup,
       "cgroup v2 directory whose processes are balanced at the socket (default: the "
       "root of the cgroup v2 hierarchy, which must then be the host's)",
       kSluice},
      {"socket-lb-host-netns-only", &o.socket_lb_host_netns_only,
       "Balance at the socket only in the agent's network namespace (the host's), so "
       "service meshes that intercept pod traffic by destination still see service IPs",
       kSluice},
      {"socket-lb-algorithm", &o.socket_lb_algorithm,
       "Backend choice of socket-level balancing: round-robin (as the proxy) or random", kSluice},
      {"socket-lb-max-frontends", &o.socket_lb_max_frontends,
       "Frontends socket-level balancing can hold (ClusterIP, external IP and node "
       "address + NodePort, per port and protocol); the rest is left to the proxy",
       kSluice},
      {"socket-lb-max-backends", &o.socket_lb_max_backends,
       "Backends of all services socket-level balancing can hold, counting a changing "
       "service's twice while its new set is swapped in",
       kSluice},
      {"socket-lb-max-affinity", &o.socket_lb_max_affinity,
       "ClientIP affinity entries (client network namespace x service) socket-level "
       "balancing keeps, least recently used forgotten first; preallocated",
       kSluice},
      {"external-datapath", &o.external_datapath,
       "Path of remote clients to NodePorts, external IPs and LoadBalancer IPs: auto (eBPF "
       "NAT on the node's devices, keeping the client's address, if the kernel and "
       "capabilities allow it and a self-test passes; else the proxy), bpf (refuse to start "
       "without it) or proxy. Flows to an endpoint on another node (eTP Cluster) are SNATed "
       "to the node",
       kSluice},
      {"external-devices", &o.external_devices,
       "Devices the eBPF NAT of remote clients is attached to (default: those holding the "
       "addresses --nodeport-addresses selects, loopback, veths and bridges excepted; followed "
       "as links and addresses change)",
       kSluice},
      {"external-algorithm", &o.external_algorithm,
       "Backend choice of the eBPF NAT of remote clients: round-robin (as the proxy) or random",
       kSluice},
      {"external-max-flows", &o.external_max_flows,
       "Connection-tracking entries of the eBPF NAT of remote clients, two per flow, "
       "preallocated: each is a 40 B key and a 56 B value, 160 B with the hash table's "
       "overhead (40 MiB at the default); a closed connection holds its two for 10 s, so the "
       "default takes ~13k new connections/s; a new flow beyond it is left to the proxy and "
       "counted",
       kSluice},
      {"bpf-root", &o.bpf_root,
       "bpffs directory where socket-level balancing and the eBPF NAT of remote clients "
       "pin their programs and maps, so they keep working while the agent restarts "
       "(\"\": no pinning)",
       kSluice},
      {"strict-arp", &o.strict_arp,
       "Once the node has VIPs, set net.ipv4.conf.all.arp_ignore=1 and arp_announce=2 (as "
       "kube-proxy's IPVS strictARP) so that the node does not answer ARP on its links "
       "for externalIPs and LoadBalancer IPs; --cleanup restores the earlier values",
       kSluice},
      {"state-dir", &o.state_dir,
       "Directory for what must outlive a restart but not a reboot: the sysctl values "
       "--strict-arp changed, for --cleanup (keep it on the host, e.g. a hostPath)",
       kSluice},
      {"cleanup", &o.cleanup,
       "Remove what sluice leaves on the node (VIPs, pinned BPF programs and maps under "
       "--bpf-root, the eBPF NAT's tc filters) and exit",
       kUpstream},
      {"tunnel-server-address", &o.tunnel_servers,
       "HOST:PORT[,...] of Konnectivity servers' agent ports: runs the tunnel agent", kSluice},
      {"tunnel-ca-cert", &o.tunnel_ca_cert, "CA that signs the tunnel servers' certificate",
       kSluice},
      {"tunnel-cert", &o.tunnel_cert, "Client certificate for the tunnel servers (mTLS)", kSluice},
      {"tunnel-key", &o.tunnel_key, "Key of --tunnel-cert", kSluice},
      {"tunnel-token-path", &o.tunnel_token_path,
       "Bearer token file sent to the tunnel servers (re-read on every connect)", kSluice},
      {"tunnel-agent-identifiers", &o.tunnel_identifiers,
       "URL-query encoded identifiers sent to the tunnel servers (default: "
       "host=<node name>)",
       kSluice},
      {"tunnel-allowed-destinations", &o.tunnel_allowed_destinations,
       "CIDR[:PORT[-PORT]] the tunnel agent may dial (default: any but loopback, "
       "link-local and this agent's own ports, which only entries naming them open)",
       kSluice},
      {"tunnel-drain-period", &o.tunnel_drain_period,
       "On SIGTERM with the tunnel on: tell the servers we are draining and keep "
       "serving this long before stopping (a second signal stops at once)",
       kSluice},
      {"tunnel-max-connection-buffer", &o.tunnel_max_connection_buffer,
       "Bytes the tunnel agent queues toward one backend before that connection is closed "
       "(sluice-proxy-agent's --max-connection-buffer)",
       kSluice},
      {"tunnel-window-extension", &o.tunnel_window_extension,
       "Per-connection flow control with tunnel servers that offer it too (sluice's): a "
       "backend that reads nothing pauses only its own connection",
       kSluice},
      {"tunnel-stall-timeout", &o.tunnel_stall_timeout,
       "With a tunnel server without the window extension: a backend that reads nothing for "
       "this long while bytes wait for it is closed",
       kSluice},
  };
  for (O row : base::KlogOptions(o.klog)) {
    if (row.name == "v") {
      row.maps_to = "logging.verbosity";
    } else if (row.name == "vmodule") {
      row.maps_to = "logging.vmodule";
      row.traits |= O::kNoWrite;
    }
    table.push_back(row);
  }
  // kube-proxy's flags that sluice has no option of its own for (KubeProxyFlags).
  const O kube_proxy[] = {
      {"write-config-to", &o.kube_proxy.write_config_to,
       "(kube-proxy) Write the effective configuration as a KubeProxyConfiguration to this "
       "file and exit",
       kUpstream},
      {"init-only", &o.kube_proxy.init_only,
       "(kube-proxy) Do the privileged initialisation (strict ARP's sysctls; a bpffs and cgroup2 "
       "for socket-level balancing where the node has none) and exit",
       kUpstream},
      {"feature-gates", &o.kube_proxy.feature_gates, "(kube-proxy) Accepted; reported, no effect",
       kUpstream, "featureGates",
       "sluice has no feature gates; the behaviours they guard are fixed", O::kFileWins},
      {"kube-api-content-type", &o.kube_proxy.kube_api_content_type,
       "(kube-proxy) Accepted; sluice reads the API as JSON", kUpstream,
       "clientConnection.contentType", "sluice reads the API as application/json", O::kFileWins},
      {"kube-api-qps", &o.kube_proxy.kube_api_qps, "(kube-proxy) Accepted; reported, no effect",
       kUpstream, "clientConnection.qps",
       "sluice sends one list and one watch per resource, with backoff", O::kFileWins},
      {"kube-api-burst", &o.kube_proxy.kube_api_burst, "(kube-proxy) Accepted; reported, no effect",
       kUpstream, "clientConnection.burst",
       "sluice sends one list and one watch per resource, with backoff", O::kFileWins},
      {"bind-address", &o.kube_proxy.bind_address,
       "(kube-proxy) The node's primary IP; an IPv6 one makes the health and metrics "
       "servers default to [::]:10256 and [::1]:10249, and it is the 'primary' of "
       "--nodeport-addresses",
       kUpstream, "bindAddress", "", O::kFileWins},
      {"bind-address-hard-fail", &o.kube_proxy.bind_address_hard_fail,
       "(kube-proxy) Accepted; sluice always exits when it cannot bind", kUpstream,
       "bindAddressHardFail", "sluice always exits when it cannot bind a port it serves",
       O::kFileWins},
      {"profiling", &o.kube_proxy.profiling, "(kube-proxy) Accepted; reported, no effect",
       kUpstream, "enableProfiling", "sluice serves no pprof endpoints", O::kFileWins},
      {"show-hidden-metrics-for-version", &o.kube_proxy.show_hidden_metrics_for_version,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "showHiddenMetricsForVersion",
       "sluice hides no metrics", O::kFileWins},
      {"proxy-mode", &o.kube_proxy.proxy_mode,
       "(kube-proxy) Accepted, any value; selects which sync-period flags apply (ipvs: "
       "--ipvs-*, else --iptables-*); /proxyMode says what sluice runs",
       kUpstream, "mode", "", O::kFileWins},
      {"iptables-masquerade-bit", &o.kube_proxy.iptables_masquerade_bit,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "iptables.masqueradeBit",
       "sluice marks no packets: its eBPF NAT masquerades without a netfilter mark",
       O::kGoPointer | O::kFileWins},
      {"masquerade-all", &o.kube_proxy.masquerade_all, "(kube-proxy) Accepted; reported, no effect",
       kUpstream, "iptables.masqueradeAll",
       "sluice masquerades only remote clients' eTP Cluster flows to a backend on another node "
       "(its eBPF NAT); local clients, balanced at the socket, need none",
       O::kFileWins},
      {"iptables-localhost-nodeports", &o.kube_proxy.iptables_localhost_nodeports,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "iptables.localhostNodePorts",
       "NodePorts answer on the addresses --nodeport-addresses selects",
       O::kGoPointer | O::kFileWins},
      {"iptables-sync-period", &o.kube_proxy.iptables_sync_period,
       "(kube-proxy) --sync-period, unless --proxy-mode=ipvs", kUpstream, "iptables.syncPeriod", "",
       O::kFileWins},
      {"iptables-min-sync-period", &o.kube_proxy.iptables_min_sync_period,
       "(kube-proxy) --min-sync-period, unless --proxy-mode=ipvs", kUpstream,
       "iptables.minSyncPeriod", "", O::kFileWins},
      {"ipvs-sync-period", &o.kube_proxy.ipvs_sync_period,
       "(kube-proxy) --sync-period with --proxy-mode=ipvs", kUpstream, "ipvs.syncPeriod", "",
       O::kFileWins},
      {"ipvs-min-sync-period", &o.kube_proxy.ipvs_min_sync_period,
       "(kube-proxy) --min-sync-period with --proxy-mode=ipvs", kUpstream, "ipvs.minSyncPeriod", "",
       O::kFileWins},
      {"ipvs-scheduler", &o.kube_proxy.ipvs_scheduler, "(kube-proxy) Accepted; reported, no effect",
       kUpstream, "ipvs.scheduler",
       "sluice balances round-robin (--socket-lb-algorithm for local clients, "
       "--external-algorithm for remote ones)",
       O::kFileWins},
      {"ipvs-exclude-cidrs", &o.kube_proxy.ipvs_exclude_cidrs,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "ipvs.excludeCIDRs",
       "sluice writes no IPVS rules", O::kFileWins},
      {"ipvs-strict-arp", &o.kube_proxy.ipvs_strict_arp,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "ipvs.strictARP",
       "sluice's VIPs are always local, so --strict-arp (default on) decides", O::kFileWins},
      {"ipvs-tcp-timeout", &o.kube_proxy.ipvs_tcp_timeout,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "ipvs.tcpTimeout",
       "sluice writes no IPVS rules; see --tcp-idle-timeout", O::kFileWins},
      {"ipvs-tcpfin-timeout", &o.kube_proxy.ipvs_tcpfin_timeout,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "ipvs.tcpFinTimeout",
       "sluice writes no IPVS rules", O::kFileWins},
      {"ipvs-udp-timeout", &o.kube_proxy.ipvs_udp_timeout,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "ipvs.udpTimeout",
       "sluice writes no IPVS rules; see --udp-idle-timeout", O::kFileWins},
      {"detect-local-mode", &o.kube_proxy.detect_local_mode,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "detectLocalMode",
       "sluice needs no local-traffic detection: local clients are balanced at the socket, remote "
       "ones by the eBPF NAT on the node's devices",
       O::kFileWins},
      {"pod-bridge-interface", &o.kube_proxy.pod_bridge_interface,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "detectLocal.bridgeInterface",
       "sluice needs no local-traffic detection: local clients are balanced at the socket, remote "
       "ones by the eBPF NAT on the node's devices",
       O::kFileWins},
      {"pod-interface-name-prefix", &o.kube_proxy.pod_interface_name_prefix,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "detectLocal.interfaceNamePrefix",
       "sluice needs no local-traffic detection: local clients are balanced at the socket, remote "
       "ones by the eBPF NAT on the node's devices",
       O::kFileWins},
      {"cluster-cidr", &o.kube_proxy.cluster_cidr, "(kube-proxy) Accepted; reported, no effect",
       kUpstream, "clusterCIDR",
       "sluice needs no local-traffic detection: local clients are balanced at the socket, remote "
       "ones by the eBPF NAT on the node's devices",
       O::kFileWins},
      {"oom-score-adj", &o.kube_proxy.oom_score_adj,
       "(kube-proxy) oom_score_adj of the process, in [-1000, 1000]", kUpstream, "oomScoreAdj", "",
       O::kGoPointer | O::kFileWins},
      {"conntrack-max-per-core", &o.kube_proxy.conntrack_max_per_core,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "conntrack.maxPerCore",
       "sluice leaves the kernel's conntrack sysctls alone; its eBPF NAT's table is "
       "--external-max-flows",
       O::kGoPointer | O::kFileWins},
      {"conntrack-min", &o.kube_proxy.conntrack_min, "(kube-proxy) Accepted; reported, no effect",
       kUpstream, "conntrack.min",
       "sluice leaves the kernel's conntrack sysctls alone; its eBPF NAT's table is "
       "--external-max-flows",
       O::kGoPointer | O::kFileWins},
      {"conntrack-tcp-timeout-established", &o.kube_proxy.conntrack_tcp_timeout_established,
       "(kube-proxy) Idle time after which the eBPF NAT of remote clients forgets an "
       "established TCP flow (0: 24h); the proxy's is --tcp-idle-timeout",
       kUpstream, "conntrack.tcpEstablishedTimeout", "", O::kGoPointer | O::kFileWins},
      {"conntrack-tcp-timeout-close-wait", &o.kube_proxy.conntrack_tcp_timeout_close_wait,
       "(kube-proxy) Idle time after which the eBPF NAT of remote clients forgets a half-closed "
       "TCP flow (a FIN from one side only; 0: 1h)",
       kUpstream, "conntrack.tcpCloseWaitTimeout", "", O::kGoPointer | O::kFileWins},
      {"conntrack-tcp-be-liberal", &o.kube_proxy.conntrack_tcp_be_liberal,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "conntrack.tcpBeLiberal",
       "sluice leaves the kernel's conntrack sysctls alone; its eBPF NAT does not check TCP "
       "windows",
       O::kFileWins},
      {"conntrack-udp-timeout", &o.kube_proxy.conntrack_udp_timeout,
       "(kube-proxy) Idle time after which the eBPF NAT of remote clients forgets a UDP flow "
       "(0: --udp-idle-timeout)",
       kUpstream, "conntrack.udpTimeout", "", O::kFileWins},
      {"conntrack-udp-timeout-stream", &o.kube_proxy.conntrack_udp_timeout_stream,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "conntrack.udpStreamTimeout",
       "sluice's eBPF NAT ages every UDP flow by --conntrack-udp-timeout; the proxy's by "
       "--udp-idle-timeout",
       O::kFileWins},
      {"config-sync-period", &o.kube_proxy.config_sync_period,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "configSyncPeriod",
       "sluice keeps its watches' state without periodic resync; see --sync-period", O::kFileWins},
      {"healthz-port", &o.kube_proxy.healthz_port,
       "(kube-proxy, deprecated) 0 disables the health server; otherwise the port of a "
       "--healthz-bind-address given without one (ignored with --config)",
       kUpstream, "", "", O::kFileWins},
      {"metrics-port", &o.kube_proxy.metrics_port,
       "(kube-proxy, deprecated) 0 disables the metrics server; otherwise the port of a "
       "--metrics-bind-address given without one (ignored with --config)",
       kUpstream, "", "", O::kFileWins},
      {"proxy-port-range", &o.kube_proxy.proxy_port_range,
       "(kube-proxy, deprecated) Accepted; reported, no effect", kUpstream, "portRange",
       "unused since kube-proxy's userspace mode", O::kFileWins},
      {"udp-timeout", &o.kube_proxy.udp_timeout,
       "(kube-proxy <= 1.28) --udp-idle-timeout, unless that is given", kUpstream, "udpIdleTimeout",
       "", O::kNoWrite | O::kFileWins},
      {"azure-container-registry-config", &o.kube_proxy.azure_container_registry_config,
       "(kube-proxy <= 1.29) Accepted; reported, no effect", kUpstream, "",
       "sluice pulls no images"},
      {"logging-format", &o.kube_proxy.logging_format, "(kube-proxy) Accepted; sluice logs text",
       kUpstream, "logging.format", "sluice logs in klog's text format"},
      {"log-flush-frequency", &o.kube_proxy.log_flush_frequency,
       "(kube-proxy) Accepted; sluice writes each line at once", kUpstream,
       "logging.flushFrequency", "sluice writes each log line at once"},
      {"log-json-split-stream", &o.kube_proxy.log_json_split_stream,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "logging.options.json.splitStream",
       "sluice logs in klog's text format", O::kNoWrite},
      {"log-json-info-buffer-size", &o.kube_proxy.log_json_info_buffer_size,
       "(kube-proxy) Accepted; reported, no effect", kUpstream,
       "logging.options.json.infoBufferSize", "sluice logs in klog's text format", O::kNoWrite},
      {"log-text-split-stream", &o.kube_proxy.log_text_split_stream,
       "(kube-proxy) Accepted; reported, no effect", kUpstream, "logging.options.text.splitStream",
       "sluice writes every line to stderr", O::kNoWrite},
      {"log-text-info-buffer-size", &o.kube_proxy.log_text_info_buffer_size,
       "(kube-proxy) Accepted; reported, no effect", kUpstream,
       "logging.options.text.infoBufferSize", "sluice writes each log line at once", O::kNoWrite},
  };
  table.insert(table.end(), std::begin(kube_proxy), std::end(kube_proxy));
  return table;
}

}  // namespace sluice::app
