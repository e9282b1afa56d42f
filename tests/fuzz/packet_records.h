// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "tunnel/wire/packet.h"

namespace sluice::fuzz {

// The packet fuzzers' input: records of [op][length][`length` bytes of a serialized Packet].
// Reads the next record, advancing data/size; false once fewer than two bytes are left.
// `parsed` says whether the bytes were a Packet (ops that take no packet ignore them).
struct PacketRecord {
  uint8_t op = 0;
  size_t length = 0;
  bool parsed = false;
  tunnel::wire::Packet packet;
};

inline bool NextPacketRecord(const uint8_t*& data, size_t& size, PacketRecord& record) {
  if (size < 2) {
    return false;
  }
  record.op = data[0];
  record.length = std::min<size_t>(data[1], size - 2);
  record.packet.Clear();
  record.parsed = record.packet.ParseFromArray(data + 2, static_cast<int>(record.length));
  data += 2 + record.length;
  size -= 2 + record.length;
  return true;
}

}  // namespace sluice::fuzz
