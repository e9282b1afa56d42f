// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

#include "agent/control/config/handler.h"
#include "agent/control/config/model.h"

namespace sluice::config {

// How a source's update applies to its own store (kube-proxy's original config ops).
enum class Op {
  kSet,     // the objects are the source's complete state of that kind
  kAdd,     // add or replace these objects
  kRemove,  // remove these objects (matched by namespace/name)
};

class Mux;

// One source's named channel into the mux. Owned by the Mux; valid for its lifetime.
// Thread-safe.
class SourceChannel final {
 public:
  const std::string& name() const { return name_; }
  void UpdateServices(Op op, std::vector<ServicePtr> objects);
  void UpdateEndpointSlices(Op op, std::vector<EndpointSlicePtr> objects);
  // The source has delivered its initial state (both kinds).
  void MarkSynced();
  // Runs `updates` (calls on this or other channels) as one change of the merged view: batch
  // handlers see them between OnBatchBegin and OnBatchEnd, so a sync never applies part of it.
  // `updates` runs without the mux's lock; batches nest (also across channels).
  void Batch(absl::FunctionRef<void()> updates);

 private:
  friend class Mux;
  SourceChannel(Mux* mux, std::string name, int rank)
      : mux_(mux), name_(std::move(name)), rank_(rank) {}
  Mux* mux_;
  const std::string name_;
  const int rank_;  // registration order; an earlier source wins a namespace/name both provide
};

// Merges per-source stores into one view and broadcasts changes of that view to handlers.
// An object present in several sources is taken from the earliest-registered one, so removing
// it from one source never removes what another source still provides. Thread-safe.
class Mux final {
 public:
  Mux() = default;
  Mux(const Mux&) = delete;
  Mux& operator=(const Mux&) = delete;

  // Returns the channel for `name`, creating it on first use. Register every source before
  // it starts pushing, so "all synced" waits for each of them.
  SourceChannel* Channel(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);

  // Handlers must outlive the mux and be registered before sources start.
  void AddServiceHandler(ServiceHandler* h) ABSL_LOCKS_EXCLUDED(mu_);
  void AddEndpointSliceHandler(EndpointSliceHandler* h) ABSL_LOCKS_EXCLUDED(mu_);
  void AddBatchHandler(BatchHandler* h) ABSL_LOCKS_EXCLUDED(mu_);

  // The full merged view, sorted by namespace/name.
  std::vector<ServicePtr> Services() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<EndpointSlicePtr> EndpointSlices() const ABSL_LOCKS_EXCLUDED(mu_);
  bool AllSynced() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class SourceChannel;
  template <typename T>
  using Store = std::map<NamespacedName, std::shared_ptr<const T>>;
  template <typename T>
  struct Kind {
    std::vector<Store<T>> by_source;  // indexed by channel rank
    Store<T> merged;
  };

  template <typename T, typename Notify>
  void Apply(Kind<T>& kind, int rank, Op op, std::vector<std::shared_ptr<const T>> objects,
             Notify notify) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  template <typename T, typename Notify>
  void Remerge(Kind<T>& kind, const NamespacedName& id, Notify notify)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkSynced(int rank) ABSL_LOCKS_EXCLUDED(mu_);
  void BeginBatch() ABSL_LOCKS_EXCLUDED(mu_);
  void EndBatch() ABSL_LOCKS_EXCLUDED(mu_);
  void NotifyService(const ServicePtr& prev, const ServicePtr& cur)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifySlice(const EndpointSlicePtr& prev, const EndpointSlicePtr& cur)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<SourceChannel>> channels_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> synced_ ABSL_GUARDED_BY(mu_);
  bool all_synced_ ABSL_GUARDED_BY(mu_) = false;
  Kind<Service> services_ ABSL_GUARDED_BY(mu_);
  Kind<EndpointSlice> slices_ ABSL_GUARDED_BY(mu_);
  std::vector<ServiceHandler*> service_handlers_ ABSL_GUARDED_BY(mu_);
  std::vector<EndpointSliceHandler*> slice_handlers_ ABSL_GUARDED_BY(mu_);
  std::vector<BatchHandler*> batch_handlers_ ABSL_GUARDED_BY(mu_);
  int batch_depth_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::config
