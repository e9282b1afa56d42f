// SPDX-License-Identifier: Apache-2.0
// Trust boundary: sluice-agent's --config file, a flat sluice file or a KubeProxyConfiguration
// (often a ConfigMap). Input: the file's bytes, served from a memfd so that ParseAgentOptions
// reads them through --config as it reads any file.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lib/base/unique_fd.h"

#include "agent/app/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const sluice::base::UniqueFd file(memfd_create("config", MFD_CLOEXEC));
  if (!file.valid() || ftruncate(file.get(), 0) != 0 ||
      pwrite(file.get(), data, size, 0) != static_cast<ssize_t>(size)) {
    std::perror("config_file_fuzzer: memfd");
    std::abort();
  }
  std::string program = "sluice-agent";
  std::string config = "--config=/proc/self/fd/" + std::to_string(file.get());
  char* argv[] = {program.data(), config.data(), nullptr};
  sluice::app::AgentOptions opts;
  sluice::base::FlagSet flags(program);
  sluice::app::RegisterFlags(flags, opts);
  (void)sluice::app::ParseAgentOptions(2, argv, flags, opts);
  return 0;
}
