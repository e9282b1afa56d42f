// SPDX-License-Identifier: Apache-2.0
#include "lib/cli/program.h"

#include "lib/base/log.h"
#include "lib/cli/shutdown.h"

namespace sluice::cli {

int Main(int argc, char** argv, const Program& p) {
  BlockShutdownSignals();
  const absl::Status parsed = p.flags.Parse(argc, argv);
  if (auto done = Finish(AfterParse(p.upstream, p.flags, p.standard, parsed, p.version))) {
    return *done;
  }
  if (absl::Status st = p.configure(); !st.ok()) {
    return Finish(Rejected(p.upstream, p.flags, st)).value_or(kExitFailure);
  }
  auto log = base::LogOutput::Start(p.klog, p.flags.program());  // lives until run returns
  if (!log.ok()) {
    return Finish(Rejected(p.upstream, p.flags, log.status())).value_or(kExitFailure);
  }
  return p.run();
}

}  // namespace sluice::cli
