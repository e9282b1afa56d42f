// SPDX-License-Identifier: Apache-2.0
#include "agent/control/config/mux.h"

namespace sluice::config {

void SourceChannel::UpdateServices(Op op, std::vector<ServicePtr> objects) {
  absl::MutexLock lock(&mux_->mu_);
  mux_->Apply(mux_->services_, rank_, op, std::move(objects),
              [this](const ServicePtr& p, const ServicePtr& c) {
                // Called by Apply with mu_ held; the analysis does not follow into lambdas.
                mux_->mu_.AssertHeld();
                mux_->NotifyService(p, c);
              });
}

void SourceChannel::UpdateEndpointSlices(Op op, std::vector<EndpointSlicePtr> objects) {
  absl::MutexLock lock(&mux_->mu_);
  mux_->Apply(mux_->slices_, rank_, op, std::move(objects),
              [this](const EndpointSlicePtr& p, const EndpointSlicePtr& c) {
                mux_->mu_.AssertHeld();  // as above
                mux_->NotifySlice(p, c);
              });
}

void SourceChannel::MarkSynced() { mux_->MarkSynced(rank_); }

void SourceChannel::Batch(absl::FunctionRef<void()> updates) {
  mux_->BeginBatch();
  updates();
  mux_->EndBatch();
}

SourceChannel* Mux::Channel(const std::string& name) {
  absl::MutexLock lock(&mu_);
  for (auto& c : channels_) {
    if (c->name() == name) {
      return c.get();
    }
  }
  const int rank = static_cast<int>(channels_.size());
  channels_.push_back(std::unique_ptr<SourceChannel>(new SourceChannel(this, name, rank)));
  synced_.push_back(false);
  all_synced_ = false;
  services_.by_source.emplace_back();
  slices_.by_source.emplace_back();
  return channels_.back().get();
}

void Mux::AddServiceHandler(ServiceHandler* h) {
  absl::MutexLock lock(&mu_);
  service_handlers_.push_back(h);
}

void Mux::AddEndpointSliceHandler(EndpointSliceHandler* h) {
  absl::MutexLock lock(&mu_);
  slice_handlers_.push_back(h);
}

void Mux::AddBatchHandler(BatchHandler* h) {
  absl::MutexLock lock(&mu_);
  batch_handlers_.push_back(h);
}

void Mux::BeginBatch() {
  absl::MutexLock lock(&mu_);
  if (batch_depth_++ == 0) {
    for (auto* h : batch_handlers_) {
      h->OnBatchBegin();
    }
  }
}

void Mux::EndBatch() {
  absl::MutexLock lock(&mu_);
  if (--batch_depth_ == 0) {
    for (auto* h : batch_handlers_) {
      h->OnBatchEnd();
    }
  }
}

template <typename T, typename Notify>
void Mux::Apply(Kind<T>& kind, int rank, Op op, std::vector<std::shared_ptr<const T>> objects,
                Notify notify) {
  Store<T>& store = kind.by_source[rank];
  std::vector<NamespacedName> touched;
  if (op == Op::kSet) {
    Store<T> next;
    for (auto& obj : objects) {
      // Sources list in name order: end() is the place (one comparison when it is not).
      next.insert_or_assign(next.end(), obj->meta.id, std::move(obj));
    }
    for (const auto& [id, obj] : store) {
      if (!next.contains(id)) {
        touched.push_back(id);
      }
    }
    for (const auto& [id, obj] : next) {
      touched.push_back(id);
    }
    store = std::move(next);
  } else {
    for (auto& obj : objects) {
      touched.push_back(obj->meta.id);
      if (op == Op::kAdd) {
        store[obj->meta.id] = std::move(obj);
      } else {
        store.erase(obj->meta.id);
      }
    }
  }
  for (const auto& id : touched) {
    Remerge(kind, id, notify);
  }
}

// Recomputes the merged object for `id` and notifies when it changed by value.
template <typename T, typename Notify>
void Mux::Remerge(Kind<T>& kind, const NamespacedName& id, Notify notify) {
  std::shared_ptr<const T> winner;
  for (const auto& store : kind.by_source) {
    if (auto it = store.find(id); it != store.end()) {
      winner = it->second;
      break;
    }
  }
  auto it = kind.merged.lower_bound(id);
  const bool found = it != kind.merged.end() && it->first == id;
  std::shared_ptr<const T> prev = found ? it->second : nullptr;
  if (prev == winner || (prev && winner && *prev == *winner)) {
    return;
  }
  if (!winner) {
    kind.merged.erase(it);
  } else if (found) {
    it->second = winner;
  } else {
    kind.merged.emplace_hint(it, id, winner);
  }
  notify(prev, winner);
}

void Mux::MarkSynced(int rank) {
  absl::MutexLock lock(&mu_);
  synced_[rank] = true;
  if (all_synced_) {
    return;
  }
  for (bool s : synced_) {
    if (!s) {
      return;
    }
  }
  all_synced_ = true;
  for (auto* h : service_handlers_) {
    h->OnServicesSynced();
  }
  for (auto* h : slice_handlers_) {
    h->OnEndpointSlicesSynced();
  }
}

void Mux::NotifyService(const ServicePtr& prev, const ServicePtr& cur) {
  for (auto* h : service_handlers_) {
    h->OnServiceUpdate(prev, cur);
  }
}

void Mux::NotifySlice(const EndpointSlicePtr& prev, const EndpointSlicePtr& cur) {
  for (auto* h : slice_handlers_) {
    h->OnEndpointSliceUpdate(prev, cur);
  }
}

std::vector<ServicePtr> Mux::Services() const {
  absl::MutexLock lock(&mu_);
  std::vector<ServicePtr> out;
  for (const auto& [id, obj] : services_.merged) {
    out.push_back(obj);
  }
  return out;
}

std::vector<EndpointSlicePtr> Mux::EndpointSlices() const {
  absl::MutexLock lock(&mu_);
  std::vector<EndpointSlicePtr> out;
  for (const auto& [id, obj] : slices_.merged) {
    out.push_back(obj);
  }
  return out;
}

bool Mux::AllSynced() const {
  absl::MutexLock lock(&mu_);
  return all_synced_;
}

}  // namespace sluice::config
