// SPDX-License-Identifier: Apache-2.0
// sluice-agent: flags -> wiring, nothing else.
#include <sys/utsname.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/base/flags.h"
#include "lib/base/klog.h"
#include "lib/base/log.h"
#include "lib/cli/program.h"

#include "agent/app/agent.h"
#include "agent/app/options.h"

namespace {

// The kube-proxy release whose flags and KubeProxyConfiguration sluice takes as its own; the
// 1.26-1.33 fields it reads besides are listed in docs/configuration.md.
constexpr const char* kKubeProxyVersion = "v1.31.0";

// Go's GOARCH for this machine, as Kubernetes' version.Info names the platform.
std::string Platform() {
  utsname u{};
  uname(&u);
  const std::string machine = u.machine;
  const std::string arch = machine == "x86_64" ? "amd64" : machine == "aarch64" ? "arm64" : machine;
  return "linux/" + arch;
}

// kube-proxy's `--version` ("Kubernetes vX.Y.Z", which scripts cut at the second word) and
// `--version=raw` (Go's %#v of version.Info), with sluice's own version beside them.
std::string VersionText(const std::string& program, const std::string& how) {
  if (program != "kube-proxy") {
    return absl::StrCat("sluice-agent ", SLUICE_VERSION, " (kube-proxy ", kKubeProxyVersion, ")");
  }
  if (how == "raw") {
    return absl::StrCat(
        "version.Info{Major:\"1\", Minor:\"31\", GitVersion:\"", kKubeProxyVersion,
        "\", GitCommit:\"\", GitTreeState:\"\", BuildDate:\"1970-01-01T00:00:00Z\", "
        "GoVersion:\"\", Compiler:\"sluice ",
        SLUICE_VERSION, "\", Platform:\"", Platform(), "\"}");
  }
  return absl::StrCat("Kubernetes ", kKubeProxyVersion, " (sluice ", SLUICE_VERSION, ")");
}

// Everything after the command line: kube-proxy's one-shot modes, or the agent.
int Run(sluice::app::AgentOptions& opts, const sluice::base::FlagSet& flags) {
  sluice::base::WarnIgnoredFlags(flags, "kube-proxy", {});  // klog's unsupported flags
  sluice::app::ReportNotApplied(opts.kube_proxy);
  if (!opts.kube_proxy.write_config_to.empty()) {
    absl::Status st =
        sluice::app::WriteKubeProxyConfiguration(opts, opts.kube_proxy.write_config_to);
    if (!st.ok()) {
      LOG(ERROR) << st;
      return sluice::cli::kExitFailure;
    }
    LOG(INFO) << "wrote the configuration to " << opts.kube_proxy.write_config_to;
    return sluice::cli::kExitOk;
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
      return sluice::cli::kExitFailure;
    }
    return sluice::cli::kExitOk;
  }
  if (opts.kube_proxy.init_only) {
    if (absl::Status st = sluice::app::Agent::InitOnly(opts); !st.ok()) {
      LOG(ERROR) << "--init-only: " << st;
      return sluice::cli::kExitFailure;
    }
    return sluice::cli::kExitOk;
  }
  auto agent = sluice::app::Agent::Create(opts);
  if (!agent.ok()) {
    LOG(ERROR) << "start: " << agent.status();
    return sluice::cli::kExitFailure;
  }
  if (absl::Status st = (*agent)->Run(); !st.ok()) {
    LOG(ERROR) << st;
    return sluice::cli::kExitFailure;
  }
  return sluice::cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  // Installed as kube-proxy too (an existing kube-proxy DaemonSet runs it unchanged).
  const std::string name = std::filesystem::path(argv[0]).filename();
  sluice::app::AgentOptions opts;
  sluice::base::FlagSet flags(name == "kube-proxy" ? name : "sluice-agent");
  sluice::app::RegisterFlags(flags, opts);
  return sluice::cli::Main(
      argc, argv,
      {.upstream = sluice::cli::Upstream::kKubeProxy,
       .flags = flags,
       .standard = opts.standard,
       .version = [&](const std::string& how) { return VersionText(flags.program(), how); },
       .configure = [&] { return sluice::app::CompleteAgentOptions(argc, argv, flags, opts); },
       .klog = opts.klog,
       .run = [&] { return Run(opts, flags); }});
}
