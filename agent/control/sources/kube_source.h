// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "lib/base/outage_probe.h"
#include "lib/kube/bearer_token.h"
#include "lib/kube/http_client.h"
#include "lib/kube/list_watch.h"

#include "agent/control/config/mux.h"
#include "agent/control/sources/relist_gate.h"
#include "agent/control/sources/source_metrics.h"

namespace sluice::sources {

// The label selector both kinds are listed and watched with, as kube-proxy's: objects of other
// service proxies and headless services' slices stay on the server. With a proxy name, only
// objects labelled with that name (the EndpointSlice controller copies a Service's labels to
// its slices).
std::string KubeLabelSelector(const std::string& service_proxy_name);

// --source=kube: Services and EndpointSlices of all namespaces from the Kubernetes API, and
// this node's zone and eligibility (KEP-3836) from its Node object. Each kind is listed, then
// watched (kube::ListWatcher); a list replaces the kind's state (kSet, so objects deleted
// meanwhile go), watch events add or remove single objects. A malformed object is skipped,
// logged and counted, keeping its last good version. MarkSynced follows the first complete
// list of both kinds and, when the zone is read from the Node, of the Node, so that the first
// sync already knows this node's zone. The watchers share one OutageProbe of the API server:
// while it is unreachable a GET /version every probe_interval finds it back, and all watchers
// list again at once; until both kinds have (or relist_hold passed), a RelistGate holds back
// what they push, so Services and EndpointSlices from after the outage are applied together.
// Thread: created and destroyed on the control plane; the watchers' threads push into the
// channel (thread-safe) and call on_zone and on_eligible.
class KubeSource final {
 public:
  struct Options {
    std::string kubeconfig;  // see kube::ResolveClientConfig
    std::string master;
    std::string service_proxy_name;
    std::string node_name;
    // Endpoint addresses on loopback accepted (--allow-loopback); see
    // config::AddressPolicy. The API server's other address rules apply to this source too.
    bool allow_loopback = false;
    // Receives the Node's topology.kubernetes.io/zone label ("" when unlabelled) when first
    // read and on every change, on a watcher thread. The Node is watched when this or
    // on_eligible is set.
    absl::AnyInvocable<void(const std::string& zone)> on_zone;
    // Receives whether the Node is eligible for load balancer traffic (KEP-3836: not being
    // deleted, not tainted ToBeDeletedByClusterAutoscaler) when first read and on every change,
    // on a watcher thread. Unlike the zone, not waited for before MarkSynced.
    absl::AnyInvocable<void(bool eligible)> on_eligible;
    kube::ListWatchOptions watch;
    absl::Duration token_reload_period = kube::BearerToken::kReloadPeriod;
    // How often an unreachable API server is probed: a change made once it answers again is
    // applied within about this plus one list of each kind.
    absl::Duration probe_interval = absl::Milliseconds(500);
    // The longest that one kind's relist after an outage holds back the other's updates.
    absl::Duration relist_hold = absl::Seconds(10);
  };

  static absl::StatusOr<std::unique_ptr<KubeSource>> Create(Options options,
                                                            config::SourceChannel* channel,
                                                            SourceMetricFamilies& metrics);
  // Stops every watcher at once, then joins them; then the probe and the gate.
  ~KubeSource();

 private:
  KubeSource(Options options, config::SourceChannel* channel, SourceMetricFamilies& metrics);
  void OnKindListed();

  Options options_;
  config::SourceChannel* channel_;
  SourceMetrics metrics_;
  std::atomic<int> kinds_listed_{0};
  int gating_kinds_ = 2;  // the kinds listed before MarkSynced: services, slices, [the Node]
  std::unique_ptr<kube::BearerToken> token_;
  // Each before what uses it: the probe uses its client and the gate, the handlers the gate,
  // the watchers the probe.
  std::unique_ptr<kube::HttpClient> probe_client_;
  std::unique_ptr<RelistGate> gate_;
  std::unique_ptr<base::OutageProbe> probe_;
  // Handlers before watchers: a watcher calls its handler until it is joined.
  std::vector<std::unique_ptr<kube::WatchHandler>> handlers_;
  std::vector<std::unique_ptr<kube::ListWatcher>> watchers_;
};

}  // namespace sluice::sources
