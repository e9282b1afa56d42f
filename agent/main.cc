// SPDX-License-Identifier: Apache-2.0
// sluice-agent: flags -> wiring, nothing else.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "lib/base/flags.h"
#include "lib/base/klog.h"
#include "lib/base/log.h"

#include "agent/app/agent.h"
#include "agent/app/options.h"

int main(int argc, char** argv) {
  // Block the shutdown signals before any thread starts, so only the signalfd sees them.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Installed as kube-proxy too (an existing kube-proxy DaemonSet runs it unchanged).
  const std::string program = std::filesystem::path(argv[0]).filename();
  sluice::app::AgentOptions opts;
  sluice::base::FlagSet flags(program == "kube-proxy" ? program : "sluice-agent");
  sluice::app::RegisterFlags(flags, opts);
  if (absl::Status st = sluice::app::ParseAgentOptions(argc, argv, flags, opts); !st.ok()) {
    std::fprintf(stderr, "%s: %s\n", flags.program().c_str(), std::string(st.message()).c_str());
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
  auto log = sluice::base::LogOutput::Start(opts.klog, flags.program());  // lives until exit
  if (!log.ok()) {
    std::fprintf(stderr, "%s: %s\n", flags.program().c_str(),
                 std::string(log.status().message()).c_str());
    return 2;
  }
  sluice::base::WarnIgnoredFlags(flags, "kube-proxy", {});  // klog's unsupported flags
  sluice::app::ReportNotApplied(opts.kube_proxy);
  if (!opts.kube_proxy.write_config_to.empty()) {
    absl::Status st =
        sluice::app::WriteKubeProxyConfiguration(opts, opts.kube_proxy.write_config_to);
    if (!st.ok()) {
      LOG(ERROR) << st;
      return 1;
    }
    LOG(INFO) << "wrote the configuration to " << opts.kube_proxy.write_config_to;
    return 0;
  }
  if (absl::Status st = sluice::app::ApplyOomScoreAdj(opts.kube_proxy.oom_score_adj); !st.ok()) {
    // As kube-proxy: not fatal (lowering it needs CAP_SYS_RESOURCE); loud only when asked for.
    if (flags.IsSet("oom-score-adj")) {
      LOG(WARNING) << "--oom-score-adj: " << st;
    } else {
      VLOG(1) << "default --oom-score-adj: " << st;
    }
  }
  if (opts.cleanup) {
    if (absl::Status st = sluice::app::Agent::Cleanup(opts); !st.ok()) {
      LOG(ERROR) << "cleanup: " << st;
      return 1;
    }
    return 0;
  }
  if (opts.kube_proxy.init_only) {
    if (absl::Status st = sluice::app::Agent::InitOnly(opts); !st.ok()) {
      LOG(ERROR) << "--init-only: " << st;
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
