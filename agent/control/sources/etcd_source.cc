// SPDX-License-Identifier: Apache-2.0
#include "agent/control/sources/etcd_source.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/clock.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace sluice::sources {

namespace {

// A restarted etcd member is found again within 10 s; many agents spread their retries over the
// jitter instead of arriving together.
constexpr absl::Duration kInitialBackoff = absl::Milliseconds(200);
constexpr absl::Duration kMaxBackoff = absl::Seconds(10);
// A member that answers does so in milliseconds; a probe must not hold up the next one long.
constexpr absl::Duration kProbeTimeout = absl::Seconds(1);
// Compaction can overtake a re-read too (between its pages, or before the next watch starts);
// after this many re-reads in a row without a watch, back off like any other failure.
constexpr int kMaxQuickRelists = 3;

template <typename T>
using Objects = std::map<config::NamespacedName, std::shared_ptr<const T>>;

template <typename T>
std::vector<std::shared_ptr<const T>> Values(const Objects<T>& objects) {
  std::vector<std::shared_ptr<const T>> out;
  out.reserve(objects.size());
  for (const auto& [id, object] : objects) {
    out.push_back(object);
  }
  return out;
}

// Pushes a watch batch (nullptr = deleted) as one kAdd and one kRemove, and records it in
// `store`. Each key appears once in a batch, so the order of the two does not matter.
template <typename T, typename Update>
void Commit(Objects<T>& batch, Objects<T>& store, Update update) {
  std::vector<std::shared_ptr<const T>> added;
  std::vector<std::shared_ptr<const T>> removed;
  for (auto& [id, object] : batch) {
    if (object) {
      store[id] = object;
      added.push_back(std::move(object));
    } else {
      store.erase(id);
      auto stub = std::make_shared<T>();  // kRemove matches by namespace/name only
      stub->meta.id = id;
      removed.push_back(std::move(stub));
    }
  }
  if (!added.empty()) {
    update(config::Op::kAdd, std::move(added));
  }
  if (!removed.empty()) {
    update(config::Op::kRemove, std::move(removed));
  }
}

// Keeps the last good object of a key whose new value was rejected.
template <typename T>
void KeepLastGood(const config::NamespacedName& id, Objects<T>& batch, const Objects<T>& store) {
  if (auto it = store.find(id); it != store.end()) {
    batch.try_emplace(id, it->second);
  }
}

}  // namespace

EtcdSource::EtcdSource(std::unique_ptr<etcd::Client> client, const std::string& prefix,
                       const config::AddressPolicy& policy, config::SourceChannel* channel,
                       SourceMetricFamilies& metrics)
    : client_(std::move(client)),
      layout_(prefix),
      decoder_(policy),
      channel_(channel),
      metrics_(metrics, channel->name()) {}

absl::StatusOr<std::unique_ptr<EtcdSource>> EtcdSource::Create(const EtcdSourceOptions& options,
                                                               config::SourceChannel* channel,
                                                               SourceMetricFamilies& metrics) {
  etcd::ClientOptions client_options;
  client_options.endpoints = options.endpoints;
  client_options.ca_file = options.ca_file;
  client_options.cert_file = options.cert_file;
  client_options.key_file = options.key_file;
  ASSIGN_OR_RETURN(std::unique_ptr<etcd::Client> client,
                   etcd::Client::Create(std::move(client_options)));
  auto source = std::unique_ptr<EtcdSource>(
      new EtcdSource(std::move(client), options.prefix, {.allow_loopback = options.allow_loopback},
                     channel, metrics));
  LOG(INFO) << channel->name() << ": reading " << source->layout_.RangeStart()
            << "{services,endpointslices}/";
  EtcdSource* self = source.get();
  source->probe_ = std::make_unique<base::OutageProbe>(
      base::OutageProbe::Options{.server = channel->name(), .interval = options.probe_interval},
      base::OutageProbe::Callbacks{
          .probe = [self] { return self->Probe(); },
          .cancel = [self] { self->client_->Cancel(); },
          .on_failed = [self] { self->metrics_.Error("unreachable").Inc(); }},
      base::RealClock::Get());
  source->thread_ = std::thread([self] { self->Run(); });
  return source;
}

EtcdSource::~EtcdSource() {
  stopping_ = true;
  client_->Cancel();
  probe_->Wake();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void EtcdSource::Run() {
  base::Backoff backoff(
      {.initial = kInitialBackoff, .max = kMaxBackoff, .jitter_min = 0.8, .jitter_max = 1.2});
  while (!client_->cancelled()) {
    const char* stage = need_list_ ? "list" : "watch";
    absl::Status status = absl::OkStatus();
    if (need_list_ && (status = List()).ok()) {
      backoff.Reset();  // the member answered: a failure from here on starts the backoff anew
    }
    if (status.ok()) {
      stage = "watch";
      status = Watch(backoff);
    }
    if (client_->cancelled()) {
      return;
    }
    if (absl::IsOutOfRange(status) && need_list_ && quick_relists_++ < kMaxQuickRelists) {
      // Compacted history: no backoff, the member is fine; read everything again.
      LOG(INFO) << channel_->name() << ": " << status.message() << "; reading everything again";
      continue;
    }
    metrics_.Error(stage).Inc();
    if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) {
      // No backoff that grows with the outage: the probe finds a member again within its
      // interval. The watch then resumes from revision_ (etcd keeps its history across
      // restarts; a compaction meanwhile makes it re-read).
      LOG(WARNING) << channel_->name() << ": " << status << "; retrying when etcd answers";
      client_->NextEndpoint();  // the probe tries the failed endpoint last
      const base::OutageProbe::Wait wait = probe_->Await(probe_->Unreachable(), stopping_);
      if (wait == base::OutageProbe::Wait::kStopped) {
        return;
      }
      if (wait == base::OutageProbe::Wait::kRecovered) {
        backoff.Reset();
        continue;
      }
      // A member answered at once: only this call failed. Back off as for other failures, on
      // the endpoint that answered.
      client_->Sleep(backoff.Next());
      continue;
    }
    const absl::Duration delay = backoff.Next();
    client_->NextEndpoint();
    LOG(WARNING) << channel_->name() << ": " << status << "; retrying with "
                 << client_->endpoint().url << " in " << absl::FormatDuration(delay);
    client_->Sleep(delay);
  }
}

absl::Status EtcdSource::Probe() {
  // Every endpoint in turn, each on a fresh channel (NextEndpoint): a failed one would wait out
  // gRPC's reconnect backoff. The one that answers is where Run goes on.
  absl::Status status;
  for (size_t i = 0; i < client_->endpoints(); ++i) {
    status = client_->Probe(layout_.RangeStart(), kProbeTimeout);
    if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) {
      return absl::IsCancelled(status) ? status : absl::OkStatus();  // any answer will do
    }
    client_->NextEndpoint();
  }
  return status;
}

absl::Status EtcdSource::List() {
  const base::MonoTime start = base::MonotonicNow();
  Batch next;
  ASSIGN_OR_RETURN(const int64_t revision,
                   client_->RangeAll(layout_.RangeStart(), layout_.RangeEnd(),
                                     [&](const mvccpb::KeyValue& kv) { Put(kv, next); }));
  // kSet: whatever this source provided before and is gone now is removed. One batch: a sync
  // never pairs the Services read at this revision with slices from before it (a relist).
  channel_->Batch([&] {
    channel_->UpdateServices(config::Op::kSet, Values(next.services));
    channel_->UpdateEndpointSlices(config::Op::kSet, Values(next.slices));
  });
  store_ = std::move(next);
  revision_ = revision;
  need_list_ = false;
  metrics_.updates.Inc();
  if (synced_) {
    metrics_.relists.Inc();
  }
  LOG(INFO) << channel_->name() << ": read " << store_.services.size() << " services and "
            << store_.slices.size() << " endpoint slices at revision " << revision << " from "
            << client_->endpoint().url << " in "
            << absl::FormatDuration(base::MonotonicNow() - start);
  Synced();
  return absl::OkStatus();
}

absl::Status EtcdSource::Watch(base::Backoff& backoff) {
  etcdserverpb::WatchCreateRequest create;
  create.set_key(layout_.RangeStart());
  create.set_range_end(layout_.RangeEnd());
  create.set_start_revision(revision_ + 1);
  // Periodic empty responses carry the current revision, so a quiet watch that reconnects
  // resumes from a recent revision rather than one compaction may have removed.
  create.set_progress_notify(true);
  ASSIGN_OR_RETURN(std::unique_ptr<etcd::WatchStream> stream, client_->Watch(create));
  etcdserverpb::WatchResponse response;
  while (stream->Read(&response)) {
    if (response.compact_revision() != 0) {
      need_list_ = true;
      return absl::OutOfRangeError(absl::StrCat("watch ", client_->endpoint().url, ": revision ",
                                                revision_ + 1, " is compacted (the oldest kept is ",
                                                response.compact_revision(), ")"));
    }
    if (response.canceled()) {
      return absl::UnavailableError(absl::StrCat(
          "watch ", client_->endpoint().url, ": cancelled by etcd: ", response.cancel_reason()));
    }
    if (response.created()) {
      // Its header revision is etcd's current one, not what we have seen: events may follow.
      VLOG(1) << channel_->name() << ": watching from revision " << revision_ + 1 << " on "
              << client_->endpoint().url;
      backoff.Reset();
      quick_relists_ = 0;
      continue;
    }
    if (response.events().empty()) {
      // A progress notification: etcd sends them only to watchers that have caught up.
      revision_ = std::max(revision_, response.header().revision());
    } else {
      Batch batch;
      for (const mvccpb::Event& event : response.events()) {
        if (event.type() == mvccpb::Event::DELETE) {
          Delete(event.kv().key(), batch);
        } else {
          Put(event.kv(), batch);
        }
        revision_ = std::max(revision_, event.kv().mod_revision());
      }
      ApplyEvents(batch);
      metrics_.updates.Inc(response.events_size());
    }
    Synced();
  }
  absl::Status status = stream->Finish();
  if (absl::IsResourceExhausted(status)) {
    // A backlog bigger than one message: read the state in pages instead of replaying it.
    need_list_ = true;
  }
  return status;
}

void EtcdSource::Put(const mvccpb::KeyValue& kv, Batch& batch) {
  absl::StatusOr<std::optional<RegistryKey>> key = layout_.Parse(kv.key());
  absl::Status error;
  if (!key.ok()) {
    error = key.status();
  } else if (!key->has_value()) {
    return;  // another resource under the prefix
  } else if (const RegistryKey& k = **key; k.kind == RegistryKey::Kind::kService) {
    absl::StatusOr<config::ServicePtr> service = decoder_.Service(k.id, kv.value());
    if (service.ok()) {
      // A read comes in key order, which is the maps' order but for namespaces that are
      // prefixes of others: end() is the place, the hint costs one comparison when it is not.
      batch.services.insert_or_assign(batch.services.end(), k.id, *std::move(service));
      return;
    }
    error = service.status();
    KeepLastGood(k.id, batch.services, store_.services);
  } else {
    absl::StatusOr<config::EndpointSlicePtr> slice = decoder_.EndpointSlice(k.id, kv.value());
    if (slice.ok()) {
      batch.slices.insert_or_assign(batch.slices.end(), k.id, *std::move(slice));
      return;
    }
    error = slice.status();
    KeepLastGood(k.id, batch.slices, store_.slices);
  }
  LOG(ERROR) << channel_->name() << ": skipping " << absl::CHexEscape(kv.key()) << " (revision "
             << kv.mod_revision() << "): " << error.message();
  metrics_.decode_errors.Inc();
}

void EtcdSource::Delete(const std::string& key, Batch& batch) {
  absl::StatusOr<std::optional<RegistryKey>> parsed = layout_.Parse(key);
  if (!parsed.ok() || !parsed->has_value()) {
    return;  // never provided anything
  }
  const RegistryKey& k = **parsed;
  if (k.kind == RegistryKey::Kind::kService) {
    batch.services[k.id] = nullptr;
  } else {
    batch.slices[k.id] = nullptr;
  }
}

void EtcdSource::ApplyEvents(Batch& batch) {
  // One watch response (a transaction may put a Service and its slice together): one change.
  channel_->Batch([&] {
    Commit(batch.services, store_.services, [this](config::Op op, auto objects) {
      channel_->UpdateServices(op, std::move(objects));
    });
    Commit(batch.slices, store_.slices, [this](config::Op op, auto objects) {
      channel_->UpdateEndpointSlices(op, std::move(objects));
    });
  });
}

void EtcdSource::Synced() {
  metrics_.services.Set(static_cast<double>(store_.services.size()));
  metrics_.endpoint_slices.Set(static_cast<double>(store_.slices.size()));
  metrics_.last_sync.Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  if (!synced_) {
    synced_ = true;
    channel_->MarkSynced();
  }
}

}  // namespace sluice::sources
