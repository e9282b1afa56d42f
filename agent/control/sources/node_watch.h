// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "lib/kube/list_watch.h"
#include "simdjson.h"

#include "agent/control/sources/source_metrics.h"

namespace sluice::sources {

// kube-proxy's ToBeDeletedTaint: the Cluster Autoscaler's mark on a node it is about to remove.
inline constexpr char kToBeDeletedTaint[] = "ToBeDeletedByClusterAutoscaler";

// What the agent reads from this node's Node object.
struct NodeFacts {
  std::string zone;  // the topology.kubernetes.io/zone label; "" when unlabelled
  // KEP-3836, as kube-proxy's SyncNode: false when metadata.deletionTimestamp is set or a
  // taint with key ToBeDeletedByClusterAutoscaler is present (any effect or value).
  bool eligible = true;
  std::string why;  // for the log when not eligible
  friend bool operator==(const NodeFacts&, const NodeFacts&) = default;
};

NodeFacts ReadNodeFacts(const simdjson::dom::element& node);

// Follows this node's Node object (listed and watched with a field selector on its name) for
// its zone label and its eligibility for load balancer traffic. Each callback fires when first
// read and on every change; a DELETED event updates the eligibility from the object it
// carries, as kube-proxy's OnNodeDelete does, and keeps the zone.
// Thread: its ListWatcher's.
class NodeWatch final : public kube::WatchHandler {
 public:
  struct Callbacks {
    absl::AnyInvocable<void(const std::string& zone)> on_zone;  // optional
    absl::AnyInvocable<void(bool eligible)> on_eligible;        // optional
    absl::AnyInvocable<void()> on_first_list;                   // optional
  };
  NodeWatch(std::string node, SourceMetrics& metrics, Callbacks callbacks);

  // kube::WatchHandler
  void OnListBegin() override { listed_.reset(); }
  void OnListItem(const simdjson::dom::element& object) override {
    listed_ = ReadNodeFacts(object);
  }
  void OnListEnd() override;
  void OnWatchEvent(kube::EventType type, const simdjson::dom::element& object) override;
  void OnBookmark() override {}
  void OnError(std::string_view reason) override;

 private:
  void ApplyZone(const std::string& zone);
  void ApplyEligibility(const NodeFacts& facts);

  const std::string node_;
  SourceMetrics& metrics_;
  Callbacks callbacks_;
  bool listed_once_ = false;
  std::optional<NodeFacts> listed_;
  std::optional<std::string> zone_;
  std::optional<bool> eligible_;
};

}  // namespace sluice::sources
