// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

// A minimal Prometheus registry rendered in the text exposition format (version 0.0.4).
// Metric updates are lock-free atomics, so data-path threads may hold a Counter& and bump it;
// only creating a labelled child or rendering takes the family's mutex. Thread-safe.

namespace sluice::base {

class Counter final {
 public:
  void Inc(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge final {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram final {
 public:
  explicit Histogram(const std::vector<double>* bounds);
  void Observe(double v);
  // Cumulative counts per bound, then +Inf; sum; count.
  void Snapshot(std::vector<uint64_t>* cumulative, double* sum, uint64_t* count) const;
  double Bound(size_t i) const { return (*bounds_)[i]; }

 private:
  const std::vector<double>* bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // one per bound, plus +Inf
  std::atomic<double> sum_{0};
  std::atomic<uint64_t> count_{0};
};

// Exponential buckets as Prometheus' client_golang ExponentialBuckets(start, factor, n).
std::vector<double> ExponentialBuckets(double start, double factor, int n);

template <typename T>
class Family final {
 public:
  Family(std::vector<std::string> label_names, std::vector<double> bounds = {})
      : label_names_(std::move(label_names)), bounds_(std::move(bounds)) {}

  // Returns the child for these label values (in label-name order), creating it once.
  // The reference stays valid for the registry's lifetime.
  T& WithLabels(const std::vector<std::string>& values) ABSL_LOCKS_EXCLUDED(mu_);
  T& Get() { return WithLabels({}); }

  const std::vector<std::string>& label_names() const { return label_names_; }
  template <typename Fn>
  void ForEach(Fn fn) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    for (const auto& [values, child] : children_) {
      fn(values, *child);
    }
  }

 private:
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

class Registry final {
 public:
  Family<Counter>& AddCounter(std::string name, std::string help,
                              std::vector<std::string> labels = {});
  Family<Gauge>& AddGauge(std::string name, std::string help, std::vector<std::string> labels = {});
  Family<Histogram>& AddHistogram(std::string name, std::string help, std::vector<double> bounds,
                                  std::vector<std::string> labels = {});
  // A gauge computed at scrape time (e.g. a size owned by another thread's atomic).
  void AddGaugeFunc(std::string name, std::string help, std::function<double()> fn);
  // A counter kept by another component (e.g. behind its own lock), read at scrape time.
  void AddCounterFunc(std::string name, std::string help, std::function<double()> fn);

  // A labelled counter family kept by another component, read at scrape time: `fn` returns
  // each child's label values (in `labels` order) and value.
  using Samples = std::vector<std::pair<std::vector<std::string>, double>>;
  void AddCounterFamilyFunc(std::string name, std::string help, std::vector<std::string> labels,
                            std::function<Samples()> fn);

  std::string Render() const;

 private:
  struct Entry {
    std::string name;
    std::string help;
    std::unique_ptr<Family<Counter>> counter;
    std::unique_ptr<Family<Gauge>> gauge;
    std::unique_ptr<Family<Histogram>> histogram;
    std::function<double()> value_fn;
    std::vector<std::string> family_labels;
    std::function<Samples()> family_fn;
    bool fn_is_counter = false;
  };
  Entry& NewEntry(std::string name, std::string help) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::base
