// SPDX-License-Identifier: Apache-2.0
#include "agent/sources/kube_source.h"

#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "simdjson.h"

#include "agent/base/log.h"
#include "agent/base/status.h"
#include "agent/config/decode.h"

namespace sluice::sources {

namespace {

constexpr char kZoneLabel[] = "topology.kubernetes.io/zone";

double NowSeconds() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

struct ServiceKind {
  using Object = config::Service;
  static constexpr char kName[] = "Service";
  static absl::StatusOr<config::ServicePtr> Decode(const simdjson::dom::element& e,
                                                   const config::AddressPolicy& policy) {
    return config::DecodeService(e, policy);
  }
  static void Push(config::SourceChannel* c, config::Op op, std::vector<config::ServicePtr> v) {
    c->UpdateServices(op, std::move(v));
  }
  static base::Gauge& Count(SourceMetrics& m) { return m.services; }
};

struct EndpointSliceKind {
  using Object = config::EndpointSlice;
  static constexpr char kName[] = "EndpointSlice";
  static absl::StatusOr<config::EndpointSlicePtr> Decode(const simdjson::dom::element& e,
                                                         const config::AddressPolicy& policy) {
    return config::DecodeEndpointSlice(e, policy);
  }
  static void Push(config::SourceChannel* c, config::Op op,
                   std::vector<config::EndpointSlicePtr> v) {
    c->UpdateEndpointSlices(op, std::move(v));
  }
  static base::Gauge& Count(SourceMetrics& m) { return m.endpoint_slices; }
};

// Mirrors one kind into the source's channel and remembers what it pushed, so that a refused
// object keeps its last good version across events and relists.
// Thread: its ListWatcher's.
template <typename Kind>
class ObjectMirror final : public kube::WatchHandler {
 public:
  using Ptr = std::shared_ptr<const typename Kind::Object>;

  ObjectMirror(config::SourceChannel* channel, SourceMetrics& metrics,
               const config::AddressPolicy& policy, absl::AnyInvocable<void()> on_first_list)
      : channel_(channel),
        metrics_(metrics),
        policy_(policy),
        on_first_list_(std::move(on_first_list)) {}

  // kube::WatchHandler
  void OnListBegin() override { listing_.clear(); }

  void OnListItem(const simdjson::dom::element& object) override {
    absl::StatusOr<Ptr> decoded = Kind::Decode(object, policy_);
    if (decoded.ok()) {
      const config::NamespacedName id = (*decoded)->meta.id;
      listing_[id] = *std::move(decoded);
      return;
    }
    Refuse(decoded.status());
    if (std::optional<config::NamespacedName> id = config::ReadObjectId(object)) {
      if (auto it = current_.find(*id); it != current_.end()) {
        listing_[*id] = it->second;
      }
    }
  }

  void OnListEnd() override {
    current_ = std::move(listing_);
    listing_.clear();
    std::vector<Ptr> all;
    all.reserve(current_.size());
    for (const auto& [id, object] : current_) {
      all.push_back(object);
    }
    Kind::Push(channel_, config::Op::kSet, std::move(all));
    Applied();
    if (listed_) {
      metrics_.relists.Inc();
    } else {
      listed_ = true;
      on_first_list_();
    }
  }

  void OnWatchEvent(kube::EventType type, const simdjson::dom::element& object) override {
    metrics_.Event(kube::EventTypeName(type)).Inc();
    if (type == kube::EventType::kDeleted) {
      std::optional<config::NamespacedName> id = config::ReadObjectId(object);
      if (!id) {
        Refuse(absl::InvalidArgumentError(
            absl::StrCat(Kind::kName, " DELETED event: metadata.name: required")));
        return;
      }
      if (current_.erase(*id) > 0) {
        auto gone = std::make_shared<typename Kind::Object>();
        gone->meta.id = *id;
        Kind::Push(channel_, config::Op::kRemove, {std::move(gone)});
      }
      Applied();
      return;
    }
    absl::StatusOr<Ptr> decoded = Kind::Decode(object, policy_);
    if (!decoded.ok()) {
      Refuse(decoded.status());  // the last good version stays
      return;
    }
    current_[(*decoded)->meta.id] = *decoded;
    Kind::Push(channel_, config::Op::kAdd, {*std::move(decoded)});
    Applied();
  }

  void OnBookmark() override {
    metrics_.Event("BOOKMARK").Inc();
    metrics_.last_sync.Set(NowSeconds());
  }

  void OnError(std::string_view reason) override { metrics_.Error(std::string(reason)).Inc(); }

 private:
  void Refuse(const absl::Status& status) {
    LOG(ERROR) << channel_->name() << ": skipping " << status.message();
    metrics_.decode_errors.Inc();
  }
  void Applied() {
    metrics_.updates.Inc();
    Kind::Count(metrics_).Set(static_cast<double>(current_.size()));
    metrics_.last_sync.Set(NowSeconds());
  }

  config::SourceChannel* const channel_;
  SourceMetrics& metrics_;
  const config::AddressPolicy policy_;
  absl::AnyInvocable<void()> on_first_list_;
  bool listed_ = false;
  std::map<config::NamespacedName, Ptr> current_;
  std::map<config::NamespacedName, Ptr> listing_;
};

// Follows this node's Node object (a field selector on its name) for its zone label.
// Thread: its ListWatcher's.
class NodeZoneWatch final : public kube::WatchHandler {
 public:
  NodeZoneWatch(std::string node, SourceMetrics& metrics,
                absl::AnyInvocable<void(const std::string&)> on_zone,
                absl::AnyInvocable<void()> on_first_list)
      : node_(std::move(node)),
        metrics_(metrics),
        on_zone_(std::move(on_zone)),
        on_first_list_(std::move(on_first_list)) {}

  // kube::WatchHandler
  void OnListBegin() override { listed_.reset(); }
  void OnListItem(const simdjson::dom::element& object) override { listed_ = ReadZone(object); }
  void OnListEnd() override {
    if (listed_) {
      Apply(*listed_);
    } else {
      LOG(WARNING) << "kube: Node \"" << node_ << "\" not found (check --hostname-override); "
                   << "topology hints stay off until it appears";
    }
    if (!listed_once_) {
      listed_once_ = true;
      on_first_list_();
    }
  }
  void OnWatchEvent(kube::EventType type, const simdjson::dom::element& object) override {
    if (type != kube::EventType::kDeleted) {
      Apply(ReadZone(object));
    }
  }
  void OnBookmark() override {}
  void OnError(std::string_view reason) override {
    metrics_.Error("node_" + std::string(reason)).Inc();
  }

 private:
  static std::string ReadZone(const simdjson::dom::element& object) {
    std::string_view zone;
    if (object["metadata"]["labels"][kZoneLabel].get(zone) != simdjson::SUCCESS) {
      return "";
    }
    return std::string(zone);
  }
  void Apply(const std::string& zone) {
    if (zone_ && *zone_ == zone) {
      return;
    }
    LOG(INFO) << "kube: Node \"" << node_ << "\" is in zone \"" << zone << "\"";
    zone_ = zone;
    on_zone_(zone);
  }

  const std::string node_;
  SourceMetrics& metrics_;
  absl::AnyInvocable<void(const std::string&)> on_zone_;
  absl::AnyInvocable<void()> on_first_list_;
  bool listed_once_ = false;
  std::optional<std::string> listed_;
  std::optional<std::string> zone_;
};

}  // namespace

std::string KubeLabelSelector(const std::string& service_proxy_name) {
  const std::string proxy =
      service_proxy_name.empty()
          ? absl::StrCat("!", config::kServiceProxyNameLabel)
          : absl::StrCat(config::kServiceProxyNameLabel, "=", service_proxy_name);
  return absl::StrCat(proxy, ",!", config::kHeadlessLabel);
}

KubeSource::KubeSource(Options options, config::SourceChannel* channel,
                       SourceMetricFamilies& metrics)
    : options_(std::move(options)), channel_(channel), metrics_(metrics, channel->name()) {}

KubeSource::~KubeSource() {
  for (auto& w : watchers_) {
    w->Stop();
  }
  watchers_.clear();
}

void KubeSource::OnKindListed() {
  // handlers_ is fixed before the watchers start: one per kind listed before MarkSynced.
  if (static_cast<size_t>(kinds_listed_.fetch_add(1)) + 1 == handlers_.size()) {
    LOG(INFO) << channel_->name() << ": initial state received";
    channel_->MarkSynced();
  }
}

absl::StatusOr<std::unique_ptr<KubeSource>> KubeSource::Create(Options options,
                                                               config::SourceChannel* channel,
                                                               SourceMetricFamilies& metrics) {
  ASSIGN_OR_RETURN(kube::ClientConfig config,
                   kube::ResolveClientConfig(options.kubeconfig, options.master));
  auto source = std::unique_ptr<KubeSource>(new KubeSource(std::move(options), channel, metrics));
  KubeSource* self = source.get();
  auto token = kube::BearerToken::Create(config.token, config.token_file,
                                         source->options_.token_reload_period);
  if (!token.ok()) {
    return base::Annotate(token.status(), absl::StrCat("API token of ", config.origin));
  }
  source->token_ = std::move(*token);
  const std::string selector = KubeLabelSelector(source->options_.service_proxy_name);
  std::vector<kube::ResourceSpec> specs = {
      {.name = "services", .path = "/api/v1/services", .label_selector = selector},
      {.name = "endpointslices",
       .path = "/apis/discovery.k8s.io/v1/endpointslices",
       .label_selector = selector},
  };
  const config::AddressPolicy policy{
      .api_validated = true, .allow_loopback_endpoints = source->options_.allow_loopback_endpoints};
  source->handlers_.push_back(std::make_unique<ObjectMirror<ServiceKind>>(
      channel, source->metrics_, policy, [self] { self->OnKindListed(); }));
  source->handlers_.push_back(std::make_unique<ObjectMirror<EndpointSliceKind>>(
      channel, source->metrics_, policy, [self] { self->OnKindListed(); }));
  if (source->options_.on_zone) {
    specs.push_back({.name = "node",
                     .path = "/api/v1/nodes",
                     .field_selector = "metadata.name=" + source->options_.node_name});
    source->handlers_.push_back(std::make_unique<NodeZoneWatch>(
        source->options_.node_name, source->metrics_, std::move(source->options_.on_zone),
        [self] { self->OnKindListed(); }));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSIGN_OR_RETURN(auto watcher,
                     kube::ListWatcher::Create(specs[i], source->options_.watch, config,
                                               *source->token_, *source->handlers_[i]));
    source->watchers_.push_back(std::move(watcher));
  }
  LOG(INFO) << channel->name() << ": API server " << config.server << " (" << config.origin
            << "), label selector " << selector;
  for (auto& w : source->watchers_) {
    w->Start();
  }
  return source;
}

}  // namespace sluice::sources
