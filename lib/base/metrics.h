// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
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

// The children of AddCounterFamiliesFunc's families, as one scrape reads them: each child's
// labels are rendered once, whatever the number of families. Thread: the scrape's.
class MetricRows final {
 public:
  // `values`: the label values, in the families' label order; `per_family`: one value for each
  // family, in their order.
  void Add(std::initializer_list<std::string_view> values,
           std::initializer_list<double> per_family);

 private:
  friend class Registry;
  MetricRows(const std::vector<std::string>* label_names, size_t families)
      : label_names_(label_names), families_(families) {}

  size_t size() const { return ends_.size(); }
  // Child i's labels, "{name=\"value\",...}" (empty without labels).
  std::string_view labels(size_t i) const {
    const size_t begin = i == 0 ? 0 : ends_[i - 1];
    return std::string_view(labels_).substr(begin, ends_[i] - begin);
  }

  const std::vector<std::string>* label_names_;
  const size_t families_;
  std::string labels_;          // every child's, back to back: one allocation, not one per child
  std::vector<size_t> ends_;    // where each child's labels end in labels_
  std::vector<double> values_;  // per child, `families_` of them
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

  // Labelled counter families kept by another component and read together at scrape time:
  // `fn` runs once per Render and adds every child (label values in `labels` order, one value
  // per family in `families` order); the families render one after another. One read serves
  // them all: at 10,000 services a read per family was most of a scrape's CPU.
  struct FamilyInfo {
    std::string name;
    std::string help;
  };
  void AddCounterFamiliesFunc(std::vector<FamilyInfo> families, std::vector<std::string> labels,
                              std::function<void(MetricRows&)> fn);

  std::string Render() const;

 private:
  struct Entry {
    std::string name;
    std::string help;
    std::unique_ptr<Family<Counter>> counter;
    std::unique_ptr<Family<Gauge>> gauge;
    std::unique_ptr<Family<Histogram>> histogram;
    std::function<double()> value_fn;
    // AddCounterFamiliesFunc: the group's read, shared by its families, and this one's column.
    struct Group {
      std::vector<std::string> labels;
      size_t families = 0;
      std::function<void(MetricRows&)> fn;
    };
    std::shared_ptr<const Group> group;
    size_t column = 0;
    bool fn_is_counter = false;
  };
  Entry& NewEntry(std::string name, std::string help) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  mutable size_t last_size_ ABSL_GUARDED_BY(mu_) = 0;  // the last text's: reserved up front
};

}  // namespace sluice::base
