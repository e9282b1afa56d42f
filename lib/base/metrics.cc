// SPDX-License-Identifier: Apache-2.0
#include "lib/base/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "lib/base/log.h"
#include "lib/base/strings.h"

namespace sluice::base {

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    buckets_[i].store(0, std::memory_order_relaxed);
  }
}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_->size() && v > (*bounds_)[i]) {
    ++i;
  }
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void Histogram::Snapshot(std::vector<uint64_t>* cumulative, double* sum, uint64_t* count) const {
  cumulative->clear();
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    cumulative->push_back(running);
  }
  *sum = sum_.load(std::memory_order_relaxed);
  *count = running;
}

std::vector<double> ExponentialBuckets(double start, double factor, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i, start *= factor) {
    out.push_back(start);
  }
  return out;
}

template <typename T>
T& Family<T>::WithLabels(const std::vector<std::string>& values) {
  SLUICE_CHECK(values.size() == label_names_.size()) << "label count mismatch";
  absl::MutexLock lock(&mu_);
  auto& child = children_[values];
  if (!child) {
    if constexpr (std::is_same_v<T, Histogram>) {
      child = std::make_unique<T>(&bounds_);
    } else {
      child = std::make_unique<T>();
    }
  }
  return *child;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

Registry::Entry& Registry::NewEntry(std::string name, std::string help) {
  for (const auto& e : entries_) {
    SLUICE_CHECK(e->name != name) << "metric registered twice: " << name;
  }
  auto entry = std::make_unique<Entry>();
  entry->name = std::move(name);
  entry->help = std::move(help);
  entries_.push_back(std::move(entry));
  return *entries_.back();
}

Family<Counter>& Registry::AddCounter(std::string name, std::string help,
                                      std::vector<std::string> labels) {
  absl::MutexLock lock(&mu_);
  Entry& e = NewEntry(std::move(name), std::move(help));
  e.counter = std::make_unique<Family<Counter>>(std::move(labels));
  return *e.counter;
}

Family<Gauge>& Registry::AddGauge(std::string name, std::string help,
                                  std::vector<std::string> labels) {
  absl::MutexLock lock(&mu_);
  Entry& e = NewEntry(std::move(name), std::move(help));
  e.gauge = std::make_unique<Family<Gauge>>(std::move(labels));
  return *e.gauge;
}

Family<Histogram>& Registry::AddHistogram(std::string name, std::string help,
                                          std::vector<double> bounds,
                                          std::vector<std::string> labels) {
  absl::MutexLock lock(&mu_);
  Entry& e = NewEntry(std::move(name), std::move(help));
  e.histogram = std::make_unique<Family<Histogram>>(std::move(labels), std::move(bounds));
  return *e.histogram;
}

void Registry::AddGaugeFunc(std::string name, std::string help, std::function<double()> fn) {
  absl::MutexLock lock(&mu_);
  NewEntry(std::move(name), std::move(help)).value_fn = std::move(fn);
}

void Registry::AddCounterFunc(std::string name, std::string help, std::function<double()> fn) {
  absl::MutexLock lock(&mu_);
  Entry& e = NewEntry(std::move(name), std::move(help));
  e.value_fn = std::move(fn);
  e.fn_is_counter = true;
}

void Registry::AddCounterFamiliesFunc(std::vector<FamilyInfo> families,
                                      std::vector<std::string> labels,
                                      std::function<void(MetricRows&)> fn) {
  auto group = std::make_shared<Entry::Group>(
      Entry::Group{std::move(labels), families.size(), std::move(fn)});
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < families.size(); ++i) {
    Entry& e = NewEntry(std::move(families[i].name), std::move(families[i].help));
    e.group = group;
    e.column = i;
    e.fn_is_counter = true;
  }
}

namespace {

void AppendValue(double v, std::string* out) {
  if (std::isnan(v)) {
    out->append("NaN");
    return;
  }
  if (std::isinf(v)) {
    out->append(v > 0 ? "+Inf" : "-Inf");
    return;
  }
  // Counters are mostly integers (bytes, connections): print them exactly. absl::StrCat(double)
  // keeps only 6 significant digits, which would make a byte counter stall in 1e3 steps.
  if (v == std::trunc(v) && std::fabs(v) < 1e15) {
    absl::StrAppend(out, static_cast<int64_t>(v));
    return;
  }
  // The shortest of 15 or 17 digits that reads back exactly ("0.1", not "0.10000000000000001").
  std::string text = absl::StrFormat("%.15g", v);
  out->append(std::strtod(text.c_str(), nullptr) == v ? text : absl::StrFormat("%.17g", v));
}

std::string FormatValue(double v) {
  std::string out;
  AppendValue(v, &out);
  return out;
}

// Appends name="value" pairs, comma-separated, values escaped.
template <typename Values>
void AppendPairs(const std::vector<std::string>& names, const Values& values, std::string* out) {
  size_t i = 0;
  for (std::string_view value : values) {
    absl::StrAppend(out, i == 0 ? "" : ",", names[i], "=\"");
    // Most values need no escaping: look before building a replacement (one pass, where
    // find_first_of searches the set once per character).
    if (std::none_of(value.begin(), value.end(),
                     [](char c) { return c == '\\' || c == '"' || c == '\n'; })) {
      out->append(value);
    } else {
      out->append(
          absl::StrReplaceAll(Absl(value), {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}}));
    }
    out->push_back('"');
    ++i;
  }
}

std::string Labels(const std::vector<std::string>& names, const std::vector<std::string>& values,
                   const std::string& extra = "") {
  std::string out;
  AppendPairs(names, values, &out);
  if (!extra.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : ",", extra);
  }
  return out.empty() ? "" : absl::StrCat("{", out, "}");
}

template <typename T>
void RenderSimple(const std::string& name, const Family<T>& family, std::string* out) {
  family.ForEach([&](const std::vector<std::string>& values, const T& m) {
    absl::StrAppend(out, name, Labels(family.label_names(), values), " ");
    AppendValue(m.Value(), out);
    out->push_back('\n');
  });
}

}  // namespace

void MetricRows::Add(std::initializer_list<std::string_view> values,
                     std::initializer_list<double> per_family) {
  SLUICE_CHECK(values.size() == label_names_->size() && per_family.size() == families_)
      << "label or value count mismatch";
  if (values.size() > 0) {
    labels_.push_back('{');
    AppendPairs(*label_names_, values, &labels_);
    labels_.push_back('}');
  }
  ends_.push_back(labels_.size());
  values_.insert(values_.end(), per_family.begin(), per_family.end());
}

std::string Registry::Render() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  out.reserve(last_size_ + last_size_ / 8);
  // The rows of the group being rendered: its families are consecutive entries.
  const Entry::Group* group = nullptr;
  std::optional<MetricRows> rows;
  for (const auto& e : entries_) {
    const char* type = (e->counter || e->fn_is_counter) ? "counter"
                       : e->histogram                   ? "histogram"
                                                        : "gauge";
    absl::StrAppend(&out, "# HELP ", e->name, " ", e->help, "\n# TYPE ", e->name, " ", type, "\n");
    if (e->counter) {
      RenderSimple(e->name, *e->counter, &out);
    } else if (e->gauge) {
      RenderSimple(e->name, *e->gauge, &out);
    } else if (e->value_fn) {
      absl::StrAppend(&out, e->name, " ");
      AppendValue(e->value_fn(), &out);
      out.push_back('\n');
    } else if (e->group) {
      if (group != e->group.get()) {
        group = e->group.get();
        rows.emplace(MetricRows(&group->labels, group->families));
        group->fn(*rows);
      }
      for (size_t i = 0; i < rows->size(); ++i) {
        absl::StrAppend(&out, e->name, Absl(rows->labels(i)), " ");
        AppendValue(rows->values_[i * group->families + e->column], &out);
        out.push_back('\n');
      }
    } else {
      e->histogram->ForEach([&](const std::vector<std::string>& values, const Histogram& h) {
        std::vector<uint64_t> cumulative;
        double sum;
        uint64_t count;
        h.Snapshot(&cumulative, &sum, &count);
        const auto& names = e->histogram->label_names();
        for (size_t i = 0; i < cumulative.size(); ++i) {
          std::string le = i + 1 < cumulative.size()
                               ? absl::StrCat("le=\"", FormatValue(h.Bound(i)), "\"")
                               : std::string("le=\"+Inf\"");
          absl::StrAppend(&out, e->name, "_bucket", Labels(names, values, le), " ", cumulative[i],
                          "\n");
        }
        absl::StrAppend(&out, e->name, "_sum", Labels(names, values), " ", FormatValue(sum), "\n",
                        e->name, "_count", Labels(names, values), " ", count, "\n");
      });
    }
  }
  last_size_ = out.size();
  return out;
}

}  // namespace sluice::base
