// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/backoff.h"
#include "lib/base/outage_probe.h"
#include "lib/etcd/client.h"

#include "agent/control/config/mux.h"
#include "agent/control/sources/etcd_registry.h"
#include "agent/control/sources/source_metrics.h"

namespace sluice::sources {

struct EtcdSourceOptions {
  std::vector<etcd::Endpoint> endpoints;
  std::string prefix = "/sluice/registry";
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // No API server validated what is stored here: config::AddressPolicy's strict rules apply.
  bool allow_loopback = false;
  // How often unreachable endpoints are probed.
  absl::Duration probe_interval = absl::Milliseconds(500);
};

// --source=etcd:URL[,URL...]. Reads Services and EndpointSlices stored as Kubernetes JSON under
// the prefix (RegistryLayout): one paged Range at a single revision delivers the complete state
// (kSet per kind, then MarkSynced the first time), then a Watch from the next revision delivers
// changes. A watch that fell behind etcd's compaction re-reads everything, and kSet removes what
// vanished meanwhile. While no endpoint can be reached (refused, reset, timed out, no leader), a
// base::OutageProbe reads one key from each endpoint in turn every probe_interval, and the watch
// resumes from its revision, without re-reading, as soon as one answers; other failures move to
// the next endpoint after a backoff. A malformed value is logged with its key and field path,
// counted, and skipped: the key keeps its last good object, if it had one. Thread: its own (one per
// source), pushing into the thread-safe channel; Create and the destructor run on the control
// plane.
class EtcdSource final {
 public:
  static absl::StatusOr<std::unique_ptr<EtcdSource>> Create(const EtcdSourceOptions& options,
                                                            config::SourceChannel* channel,
                                                            SourceMetricFamilies& metrics);
  // Cancels the call in progress and joins the thread.
  ~EtcdSource();

 private:
  template <typename T>
  using Objects = std::map<config::NamespacedName, std::shared_ptr<const T>>;
  // Objects by key; in a watch batch, nullptr marks a deleted key.
  struct Batch {
    Objects<config::Service> services;
    Objects<config::EndpointSlice> slices;
  };

  EtcdSource(std::unique_ptr<etcd::Client> client, const std::string& prefix,
             const config::AddressPolicy& policy, config::SourceChannel* channel,
             SourceMetricFamilies& metrics);
  void Run();
  // Called on the probe's thread while Run waits for it, so the client has one user at a time.
  absl::Status Probe();
  absl::Status List();
  absl::Status Watch(base::Backoff& backoff);
  // Folds one key's new value (or its deletion) into `batch`.
  void Put(const mvccpb::KeyValue& kv, Batch& batch);
  void Delete(const std::string& key, Batch& batch);
  void ApplyEvents(Batch& batch);
  void Synced();

  const std::unique_ptr<etcd::Client> client_;
  const RegistryLayout layout_;
  RegistryDecoder decoder_;
  config::SourceChannel* const channel_;
  SourceMetrics metrics_;
  Batch store_;           // what this source currently provides: the last good object per key
  int64_t revision_ = 0;  // the last revision applied
  bool need_list_ = true;
  bool synced_ = false;
  int quick_relists_ = 0;  // re-reads after compaction since the last watch was created
  std::atomic<bool> stopping_{false};
  std::unique_ptr<base::OutageProbe> probe_;  // uses client_
  std::thread thread_;
};

}  // namespace sluice::sources
