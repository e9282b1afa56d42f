// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/listener_admission.h"

#include <map>
#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace sluice::proxier {
namespace {

// A table of services "ns/<name>" with `ports` ports each needing one listener.
ServiceTable Table(const std::map<std::string, int>& services) {
  std::map<ServicePortName, ServicePortInfoPtr> ports;
  for (const auto& [name, count] : services) {
    for (int i = 0; i < count; ++i) {
      auto info = std::make_shared<ServicePortInfo>();
      info->name = ServicePortName{.service = {"ns", name}, .port = "p" + std::to_string(i)};
      ports.emplace(info->name, std::move(info));
    }
  }
  return ServiceTable(std::move(ports));
}

size_t One(const ServicePortInfo&) { return 1; }

TEST(ListenerAdmissionTest, ServiceOverItsCapIsSkippedWholeAndTheRestServed) {
  const ServiceTable table = Table({{"big", 5}, {"small", 2}});
  ListenerAdmission a =
      AdmitServices(table, {.max_listeners = 100, .max_listeners_per_service = 4}, {}, One);
  EXPECT_TRUE(a.services.contains(config::NamespacedName{"ns", "small"}));
  EXPECT_FALSE(a.services.contains(config::NamespacedName{"ns", "big"}));
  EXPECT_EQ(a.skipped.size(), 5u);
  EXPECT_NE(a.skipped["ns/big:p0"].find("--max-listeners-per-service=4"), std::string::npos);
  EXPECT_EQ(a.skipped_ports["service_cap"], 5u);
  EXPECT_EQ(a.skipped_services.size(), 1u);
}

TEST(ListenerAdmissionTest, NodeCapAdmitsTheSmallestFirst) {
  const ServiceTable table = Table({{"a-big", 6}, {"b", 2}, {"c", 3}});
  ListenerAdmission a =
      AdmitServices(table, {.max_listeners = 6, .max_listeners_per_service = 10}, {}, One);
  EXPECT_EQ(a.services.size(), 2u);
  EXPECT_FALSE(a.services.contains(config::NamespacedName{"ns", "a-big"}));
  EXPECT_EQ(a.skipped_ports["node_cap"], 6u);
  EXPECT_NE(a.skipped["ns/a-big:p5"].find("--max-listeners=6"), std::string::npos);
}

TEST(ListenerAdmissionTest, NewcomerNeverDisplacesAnAdmittedService) {
  const ServiceTable table = Table({{"old", 5}, {"new", 1}});
  ListenerAdmission a = AdmitServices(table, {.max_listeners = 5, .max_listeners_per_service = 10},
                                      {config::NamespacedName{"ns", "old"}}, One);
  EXPECT_TRUE(a.services.contains(config::NamespacedName{"ns", "old"}));
  EXPECT_FALSE(a.services.contains(config::NamespacedName{"ns", "new"}));
}

TEST(ListenerAdmissionTest, ServiceListenersCountsOnlyThatService) {
  const ServiceTable table = Table({{"a", 3}, {"b", 4}, {"c", 1}});
  EXPECT_EQ(ServiceListeners(table, {"ns", "b"}, One), 4u);
  EXPECT_EQ(ServiceListeners(table, {"ns", "zz"}, One), 0u);
}

}  // namespace
}  // namespace sluice::proxier
