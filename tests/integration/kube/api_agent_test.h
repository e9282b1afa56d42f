// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>

#include "tests/integration/agent_fixture.h"
#include "tests/integration/kube/fake_apiserver.h"

namespace sluice::testing {

// AgentTest plus the test API server (TLS), started inside the test's network namespace so
// that it listens there, for agents run with --source=kube. The agent stops first.
class ApiAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    if (IsSkipped()) {
      return;
    }
    api_ = FakeApiServer::Start({.tls = true});
    ASSERT_NE(api_, nullptr);
  }
  void TearDown() override {
    AgentTest::TearDown();
    api_.reset();
  }

  std::unique_ptr<FakeApiServer> api_;
};

}  // namespace sluice::testing
