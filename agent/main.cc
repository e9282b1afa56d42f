// SPDX-License-Identifier: Apache-2.0
// sluice-agent: flags -> wiring, nothing else.
#include <signal.h>

#include <cstdio>

#include "agent/app/agent.h"
#include "agent/app/options.h"
#include "agent/base/flags.h"
#include "agent/base/log.h"

int main(int argc, char** argv) {
  // Block the shutdown signals before any thread starts, so only the signalfd sees them.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);

  sluice::app::AgentOptions opts;
  sluice::base::FlagSet flags("sluice-agent");
  sluice::app::RegisterFlags(flags, opts);
  if (absl::Status st = sluice::app::ParseAgentOptions(argc, argv, flags, opts); !st.ok()) {
    std::fprintf(stderr, "sluice-agent: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  if (opts.help) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (opts.version) {
    std::printf("sluice-agent %s\n", SLUICE_VERSION);
    return 0;
  }
  sluice::base::SetVerbosity(static_cast<int>(opts.v));
  if (opts.cleanup) {
    if (absl::Status st = sluice::app::Agent::Cleanup(opts); !st.ok()) {
      LOG(ERROR) << "cleanup: " << st;
      return 1;
    }
    return 0;
  }
  auto agent = sluice::app::Agent::Create(opts);
  if (!agent.ok()) {
    LOG(ERROR) << "start: " << agent.status();
    return 1;
  }
  if (absl::Status st = (*agent)->Run(); !st.ok()) {
    LOG(ERROR) << st;
    return 1;
  }
  return 0;
}
