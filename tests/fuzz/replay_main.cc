// SPDX-License-Identifier: Apache-2.0
// Stands in for libFuzzer's main outside SLUICE_FUZZ builds: runs every file under the given
// directories through LLVMFuzzerTestOneInput once, so corpus and crash inputs are regression
// tests in every build. A sanitizer report or crash fails the run; the last "replay" line on
// stderr names the input.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(argv[i], ec)) {
      if (entry.is_regular_file()) {
        inputs.push_back(entry.path());
      }
    }
    if (ec) {
      std::fprintf(stderr, "replay: reading %s: %s\n", argv[i], ec.message().c_str());
      return 1;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs under the given directories\n");
    return 1;
  }
  for (const fs::path& path : inputs) {
    std::fprintf(stderr, "replay %s\n", path.c_str());
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "replay: cannot open %s\n", path.c_str());
      return 1;
    }
    const std::string data{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  }
  std::fprintf(stderr, "replay: %zu inputs passed\n", inputs.size());
  return 0;
}
