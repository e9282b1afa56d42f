// SPDX-License-Identifier: Apache-2.0
// Trust boundary: sluice-agent's (or, called as kube-proxy, kube-proxy's) command line, often
// templated from user values in manifests. Input: argv[0] and the arguments, separated by NUL
// bytes, as execve passes them; parsed and validated by ParseAgentOptions.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

#include "agent/app/options.h"

namespace {

// --config would read whatever file the fuzzer names (config_file_fuzzer covers that path).
// True for every spelling the flag parser maps to it: -config, --Config=x, --con_fig, ...
bool NamesConfigFile(const std::string& arg) {
  std::string name;
  for (char c : arg.substr(0, arg.find('='))) {
    if (c != '-' && c != '_') {
      name.push_back(absl::ascii_tolower(c));
    }
  }
  return name == "config";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = absl::StrSplit(
      absl::string_view(reinterpret_cast<const char*>(data), size), absl::ByChar('\0'));
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& arg : args) {
    if (NamesConfigFile(arg)) {
      return 0;
    }
    argv.push_back(arg.data());
  }
  argv.push_back(nullptr);
  sluice::app::AgentOptions opts;
  sluice::base::FlagSet flags(args[0]);
  sluice::app::RegisterFlags(flags, opts);
  (void)sluice::app::ParseAgentOptions(static_cast<int>(args.size()), argv.data(), flags, opts);
  return 0;
}
