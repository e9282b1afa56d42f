// SPDX-License-Identifier: Apache-2.0
#include "lib/base/metrics.h"

#include "gtest/gtest.h"

namespace sluice::base {
namespace {

TEST(RegistryTest, RendersPrometheusText) {
  Registry r;
  r.AddCounter("c_total", "A counter.", {"reason"}).WithLabels({"a\"b"}).Inc(2);
  r.AddGauge("g", "A gauge.").Get().Set(1.5);
  r.AddGaugeFunc("gf", "A func.", [] { return 7.0; });
  r.AddCounterFunc("cf_total", "A counter func.", [] { return 3.0; });
  auto& h = r.AddHistogram("h_seconds", "A histogram.", {0.1, 1}).Get();
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(5);
  std::string text = r.Render();
  EXPECT_NE(text.find("# TYPE c_total counter\nc_total{reason=\"a\\\"b\"} 2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("g 1.5\n"), std::string::npos);
  EXPECT_NE(text.find("gf 7\n"), std::string::npos);
  r.AddCounter("big_total", "Exact at scale.").Get().Inc(1073741824.0 + 3);
  EXPECT_NE(r.Render().find("big_total 1073741827\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE cf_total counter\ncf_total 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("h_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("h_seconds_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("h_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("h_seconds_count 3\n"), std::string::npos);
}

TEST(RegistryTest, ChildIsStable) {
  Registry r;
  auto& f = r.AddCounter("x_total", "x", {"k"});
  Counter& a = f.WithLabels({"1"});
  f.WithLabels({"2"}).Inc();
  EXPECT_EQ(&a, &f.WithLabels({"1"}));
}

}  // namespace
}  // namespace sluice::base
