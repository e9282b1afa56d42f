// SPDX-License-Identifier: Apache-2.0
#include "agent/control/sources/node_watch.h"

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"

namespace sluice::sources {

namespace {

constexpr char kZoneLabel[] = "topology.kubernetes.io/zone";

}  // namespace

NodeFacts ReadNodeFacts(const simdjson::dom::element& node) {
  NodeFacts facts;
  std::string_view zone;
  if (node["metadata"]["labels"][kZoneLabel].get(zone) == simdjson::SUCCESS) {
    facts.zone = std::string(zone);
  }
  // kube-proxy tests !DeletionTimestamp.IsZero(): any value but null counts.
  simdjson::dom::element deletion;
  if (node["metadata"]["deletionTimestamp"].get(deletion) == simdjson::SUCCESS &&
      !deletion.is_null()) {
    facts.eligible = false;
    facts.why = "it is being deleted (metadata.deletionTimestamp is set)";
    return facts;
  }
  simdjson::dom::array taints;
  if (node["spec"]["taints"].get(taints) != simdjson::SUCCESS) {
    return facts;
  }
  for (simdjson::dom::element taint : taints) {
    std::string_view key;
    if (taint["key"].get(key) == simdjson::SUCCESS && key == kToBeDeletedTaint) {
      facts.eligible = false;
      facts.why = absl::StrCat("it carries the taint ", kToBeDeletedTaint);
      break;
    }
  }
  return facts;
}

NodeWatch::NodeWatch(std::string node, SourceMetrics& metrics, Callbacks callbacks)
    : node_(std::move(node)), metrics_(metrics), callbacks_(std::move(callbacks)) {}

void NodeWatch::OnListEnd() {
  if (listed_) {
    ApplyZone(listed_->zone);
    ApplyEligibility(*listed_);
  } else {
    LOG(WARNING) << "kube: Node \"" << node_ << "\" not found (check --hostname-override): "
                 << "no zone for topology hints, and the node counts as eligible until it "
                 << "appears";
  }
  if (!listed_once_) {
    listed_once_ = true;
    if (callbacks_.on_first_list) {
      callbacks_.on_first_list();
    }
  }
}

void NodeWatch::OnWatchEvent(kube::EventType type, const simdjson::dom::element& object) {
  const NodeFacts facts = ReadNodeFacts(object);
  if (type != kube::EventType::kDeleted) {
    ApplyZone(facts.zone);
  }
  ApplyEligibility(facts);
}

void NodeWatch::OnError(std::string_view reason) {
  metrics_.Error("node_" + std::string(reason)).Inc();
}

void NodeWatch::ApplyZone(const std::string& zone) {
  if (!callbacks_.on_zone || (zone_ && *zone_ == zone)) {
    return;
  }
  LOG(INFO) << "kube: Node \"" << node_ << "\" is in zone \"" << zone << "\"";
  zone_ = zone;
  callbacks_.on_zone(zone);
}

void NodeWatch::ApplyEligibility(const NodeFacts& facts) {
  if (!callbacks_.on_eligible || (eligible_ && *eligible_ == facts.eligible)) {
    return;
  }
  if (facts.eligible) {
    LOG(INFO) << "kube: Node \"" << node_ << "\" is eligible for load balancer traffic";
  } else {
    LOG(WARNING) << "kube: Node \"" << node_
                 << "\" is not eligible for load balancer traffic: " << facts.why
                 << "; /healthz answers 503 (KEP-3836)";
  }
  eligible_ = facts.eligible;
  callbacks_.on_eligible(facts.eligible);
}

}  // namespace sluice::sources
