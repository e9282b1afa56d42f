// SPDX-License-Identifier: Apache-2.0
#include "agent/control/sources/kube_source.h"

#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "lib/base/clock.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "simdjson.h"

#include "agent/control/config/decode.h"
#include "agent/control/sources/node_watch.h"

namespace sluice::sources {

namespace {

// A probe of an unreachable API server is over within this: an answer from a live server takes
// milliseconds, and a dead one must not keep the probe from its next interval for long.
constexpr absl::Duration kProbeTimeout = absl::Seconds(1);
// The kinds of the RelistGate.
constexpr int kServicesKind = 0;
constexpr int kSlicesKind = 1;

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

// Mirrors one kind into the source's channel (through the gate) and remembers what it pushed,
// so that a refused object keeps its last good version across events and relists.
// Thread: its ListWatcher's.
template <typename Kind>
class ObjectMirror final : public kube::WatchHandler {
 public:
  using Ptr = std::shared_ptr<const typename Kind::Object>;

  ObjectMirror(config::SourceChannel* channel, RelistGate& gate, int gate_kind,
               SourceMetrics& metrics, const config::AddressPolicy& policy,
               absl::AnyInvocable<void()> on_first_list)
      : channel_(channel),
        gate_(gate),
        gate_kind_(gate_kind),
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
    Push(config::Op::kSet, std::move(all));
    if (listed_) {
      metrics_.relists.Inc();
    } else {
      listed_ = true;
      // Through the gate too, so that "synced" never overtakes the state it announces (a first
      // list held back when the server was away at startup).
      gate_.Push([this] { on_first_list_(); });
    }
    gate_.Listed(gate_kind_);
    Applied();
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
        Push(config::Op::kRemove, {std::move(gone)});
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
    Push(config::Op::kAdd, {*std::move(decoded)});
    Applied();
  }

  void OnBookmark() override {
    metrics_.Event("BOOKMARK").Inc();
    metrics_.last_sync.Set(NowSeconds());
  }

  void OnError(std::string_view reason) override { metrics_.Error(std::string(reason)).Inc(); }

 private:
  void Push(config::Op op, std::vector<Ptr> objects) {
    gate_.Push([channel = channel_, op, objects = std::move(objects)]() mutable {
      Kind::Push(channel, op, std::move(objects));
    });
  }
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
  RelistGate& gate_;
  const int gate_kind_;
  SourceMetrics& metrics_;
  const config::AddressPolicy policy_;
  absl::AnyInvocable<void()> on_first_list_;
  bool listed_ = false;
  std::map<config::NamespacedName, Ptr> current_;
  std::map<config::NamespacedName, Ptr> listing_;
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
  // Before the handlers: the gate's thread may still let held pushes through, and they call
  // the handlers; the probe's thread holds the gate.
  probe_.reset();
  gate_.reset();
}

void KubeSource::OnKindListed() {
  // gating_kinds_ is fixed before the watchers start.
  if (kinds_listed_.fetch_add(1) + 1 == gating_kinds_) {
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
  ASSIGN_OR_RETURN(source->probe_client_, kube::HttpClient::Create(config, *source->token_));
  source->gate_ = std::make_unique<RelistGate>(
      std::vector<std::string>{"services", "endpointslices"}, source->options_.relist_hold,
      base::RealClock::Get(),
      [channel](absl::FunctionRef<void()> pushes) { channel->Batch(pushes); });
  source->probe_ = std::make_unique<base::OutageProbe>(
      base::OutageProbe::Options{.server = absl::StrCat("API server ", config.server),
                                 .interval = source->options_.probe_interval},
      base::OutageProbe::Callbacks{
          // Any HTTP answer will do: a server that answers 429 or 5xx is back too, and its
          // answer to the watchers' requests says how long to wait.
          .probe = [client = source->probe_client_.get()]() -> absl::Status {
            return client
                ->Get("/version", kProbeTimeout, [](std::string_view) { return absl::OkStatus(); })
                .status();
          },
          .cancel = [client = source->probe_client_.get()] { client->Stop(); },
          .on_recovered = [gate = source->gate_.get()] { gate->Hold(); },
          .on_failed = [self] { self->metrics_.Error("unreachable").Inc(); },
      },
      base::RealClock::Get());
  const std::string selector = KubeLabelSelector(source->options_.service_proxy_name);
  std::vector<kube::ResourceSpec> specs = {
      {.name = "services", .path = "/api/v1/services", .label_selector = selector},
      {.name = "endpointslices",
       .path = "/apis/discovery.k8s.io/v1/endpointslices",
       .label_selector = selector},
  };
  const config::AddressPolicy policy{.api_validated = true,
                                     .allow_loopback = source->options_.allow_loopback};
  source->handlers_.push_back(std::make_unique<ObjectMirror<ServiceKind>>(
      channel, *source->gate_, kServicesKind, source->metrics_, policy,
      [self] { self->OnKindListed(); }));
  source->handlers_.push_back(std::make_unique<ObjectMirror<EndpointSliceKind>>(
      channel, *source->gate_, kSlicesKind, source->metrics_, policy,
      [self] { self->OnKindListed(); }));
  source->gating_kinds_ = 2;
  if (source->options_.on_zone || source->options_.on_eligible) {
    specs.push_back({.name = "node",
                     .path = "/api/v1/nodes",
                     .field_selector = "metadata.name=" + source->options_.node_name});
    // Only the zone is waited for: the first sync must know it. Eligibility starts true, as
    // kube-proxy's, so a missing Node (or RBAC) with --zone given holds nothing up.
    NodeWatch::Callbacks callbacks{.on_zone = std::move(source->options_.on_zone),
                                   .on_eligible = std::move(source->options_.on_eligible)};
    if (callbacks.on_zone) {
      ++source->gating_kinds_;
      callbacks.on_first_list = [self] { self->OnKindListed(); };
    }
    source->handlers_.push_back(std::make_unique<NodeWatch>(
        source->options_.node_name, source->metrics_, std::move(callbacks)));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSIGN_OR_RETURN(auto watcher, kube::ListWatcher::Create(
                                       specs[i], source->options_.watch, config, *source->token_,
                                       *source->handlers_[i], source->probe_.get()));
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
