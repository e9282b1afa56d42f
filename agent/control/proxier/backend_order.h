// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/hash/hash.h"
#include "lib/net/address.h"

namespace sluice::proxier {

// SplitMix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators", 2014): a
// seeded shuffle per service port needs a few numbers, and std::mt19937_64 fills 312 words of
// state before the first one (17 ms of a cold start's 10,000 services, per kernel path).
class SplitMix64 {
 public:
  using result_type = uint64_t;
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// Puts the backends of the kernel paths' service `name` in the order round-robin starts from
// on `node`: a different backend on each node, but the same order from one sync to the next,
// so an unchanged service is not rewritten.
inline void NodeOrder(const std::string& name, const std::string& node,
                      std::vector<net::SocketAddress>& backends) {
  SplitMix64 rng(absl::HashOf(name, node));
  std::shuffle(backends.begin(), backends.end(), rng);
}

}  // namespace sluice::proxier
