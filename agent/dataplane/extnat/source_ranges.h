// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lib/net/address.h"

#include "agent/dataplane/fastpath/bpf_map.h"
#include "agent/dataplane/socklb/service_maps.h"

namespace sluice::extnat {

// A service port's guarded frontends and the sources that may reach each one.
using Guards = std::map<socklb::Frontend, std::vector<net::Cidr>>;

// The entries of the source-range trie (sluice_nat_range, bpf/include/sluice/bpf_abi.h) per
// service port: a guarded frontend has {160, front} -> 0 and {160 + the range's length, front,
// range} -> 1 per range. ExtNat calls Add before ServiceMaps serves a frontend and Trim after,
// so a frontend is never served without its guard; while a guard changes, the old and new
// ranges are both allowed for that moment. An entry two service ports share (a frontend moving
// between them in one sync) stays while either has it. Thread: control plane.
class SourceRanges final {
 public:
  // The trie must outlive this.
  explicit SourceRanges(fastpath::BpfMap& trie);

  // Writes the entries `guards` needs that `name` does not have yet. On failure what was
  // written stays recorded (Trim removes it).
  absl::Status Add(const std::string& name, const Guards& guards);
  // Removes the entries of `name` that `guards` lacks (best effort: logs).
  void Trim(const std::string& name, const Guards& guards);
  // Removes every entry no service port has: an earlier agent's.
  void Sweep();

  // Service ports with entries.
  std::vector<std::string> Names() const;

 private:
  using Key = std::string;  // the bytes of a sluice_nat_range
  using Entries = std::map<Key, uint8_t>;
  static Entries EntriesOf(const Guards& guards);

  fastpath::BpfMap& trie_;
  std::map<std::string, Entries> programmed_;
  std::map<Key, uint32_t> refs_;  // how many service ports have each entry
};

}  // namespace sluice::extnat
