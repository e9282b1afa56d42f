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

TEST(RegistryTest, FamiliesReadTogetherRenderFromOneRead) {
  Registry r;
  int reads = 0;
  r.AddCounterFamiliesFunc({{"a_total", "Column a."}, {"b_total", "Column b."}}, {"service"},
                           [&](MetricRows& rows) {
                             ++reads;
                             rows.Add({"ns/x:p"}, {1, 2});
                             rows.Add({"q\"\\\n"}, {0.5, 1e16});
                           });
  r.AddGauge("after", "Rendered after the group.").Get().Set(4);
  const std::string text = r.Render();
  EXPECT_EQ(reads, 1);
  EXPECT_NE(text.find("# HELP a_total Column a.\n# TYPE a_total counter\n"
                      "a_total{service=\"ns/x:p\"} 1\n"
                      "a_total{service=\"q\\\"\\\\\\n\"} 0.5\n"
                      "# HELP b_total Column b.\n# TYPE b_total counter\n"
                      "b_total{service=\"ns/x:p\"} 2\n"
                      "b_total{service=\"q\\\"\\\\\\n\"} 1e+16\n"
                      "# HELP after"),
            std::string::npos)
      << text;
  r.Render();
  EXPECT_EQ(reads, 2);  // each scrape reads afresh
}

TEST(RegistryTest, FamiliesWithoutChildrenRenderTheirHeaders) {
  Registry r;
  r.AddCounterFamiliesFunc({{"none_total", "Nothing yet."}}, {"k"}, [](MetricRows&) {});
  EXPECT_EQ(r.Render(), "# HELP none_total Nothing yet.\n# TYPE none_total counter\n");
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
