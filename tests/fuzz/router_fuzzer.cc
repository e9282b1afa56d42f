// SPDX-License-Identifier: Apache-2.0
// Trust boundary: the tunnel server's packet-handling state machine (Router) driven by
// hostile peers: agents answer dials they were never asked for, reuse connectIDs, close other
// agents' connections; clients dial, send and close in any order. Packets go through
// wire::Validate, then Router::OnAgentPacket as AgentStream does, or the calls ProxyStream
// makes.
// Input: records of [op][length][length bytes of a serialized Packet]; op picks the peer:
//   0-1 agent 0/1 sends, 2-4 frontend 0/1/2 sends, 5 agent (length & 1) leaves or rejoins,
//   6 frontend (length % 3) goes away, 7 the server stops dialing.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "lib/base/metrics.h"

#include "tests/fuzz/packet_records.h"
#include "tunnel/server/router.h"

namespace {

using sluice::tunnel::server::AgentIdentifiers;
using sluice::tunnel::wire::Packet;

class FuzzAgent final : public sluice::tunnel::server::AgentLink {
 public:
  explicit FuzzAgent(std::string id) : id_(std::move(id)) {}
  bool SendToAgent(Packet packet, absl::AnyInvocable<void()> on_written) override {
    if (on_written) {
      on_written();
    }
    return true;
  }
  const std::string& agent_id() const override { return id_; }
  const AgentIdentifiers& identifiers() const override { return ids_; }
  const std::string& node() const override { return node_; }
  std::shared_ptr<sluice::tunnel::wire::ReadGate> gate() override { return nullptr; }

 private:
  std::string id_;
  AgentIdentifiers ids_;
  std::string node_;
};

class FuzzFrontend final : public sluice::tunnel::server::Frontend {
 public:
  // Refuses every fourth packet, so the overflow path runs too.
  bool Deliver(Packet packet,
               const std::shared_ptr<sluice::tunnel::wire::ReadGate>& gate) override {
    return ++delivered_ % 4 != 0;
  }
  void Abort(const std::string& why) override {}

 private:
  int delivered_ = 0;
};

// As ProxyStream::OnReadDone (HTTP CONNECT sessions make the same calls).
void FromFrontend(sluice::tunnel::server::Router& router, FuzzFrontend* frontend,
                  const std::string& client, Packet packet) {
  switch (packet.type()) {
    case DIAL_REQ:
      (void)router.Dial(frontend, packet, client);
      break;
    case CLOSE_REQ:
      (void)router.Close(frontend, packet.closerequest().connectid());
      break;
    case DIAL_CLS:
      router.CancelDial(frontend, packet.closedial().random());
      break;
    case DATA:
      (void)router.SendData(frontend, std::move(packet), nullptr);
      break;
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  [[maybe_unused]] static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  sluice::base::Registry registry;
  sluice::tunnel::server::ServerMetrics metrics(registry);
  // Small limits, so that refusals happen: agent b joins only once a leaves, frontends 0 and 1
  // share a client.
  sluice::tunnel::server::Router router(
      {sluice::tunnel::server::Strategy::kDefault}, metrics,
      sluice::tunnel::server::RouterLimits{.max_pending_dials_per_client = 1,
                                           .max_agent_streams = 1});
  std::array<FuzzAgent, 2> agents{FuzzAgent("a"), FuzzAgent("b")};
  std::array<bool, 2> joined{};
  std::array<FuzzFrontend, 3> frontends;
  const std::array<std::string, 3> clients{"10.0.0.1", "10.0.0.1", "10.0.0.2"};
  for (size_t i = 0; i < agents.size(); ++i) {
    joined[i] = router.AddAgent(&agents[i]).ok();
  }
  sluice::fuzz::PacketRecord record;
  while (sluice::fuzz::NextPacketRecord(data, size, record)) {
    const uint8_t op = record.op % 8;
    const size_t length = record.length;
    Packet& packet = record.packet;
    if (op == 5) {
      const size_t i = length & 1;
      if (joined[i]) {
        router.RemoveAgent(&agents[i]);
        joined[i] = false;
      } else {
        joined[i] = router.AddAgent(&agents[i]).ok();
      }
    } else if (op == 6) {
      router.RemoveFrontend(&frontends[length % 3]);
    } else if (op == 7) {
      router.StopDialing();
    } else if (record.parsed && sluice::tunnel::wire::Validate(packet).ok()) {
      if (op < 2) {
        if (joined[op]) {  // a stream that left (or was refused) sends nothing more
          (void)router.OnAgentPacket(&agents[op], std::move(packet));
        }
      } else {
        FromFrontend(router, &frontends[op - 2], clients[op - 2], std::move(packet));
      }
    }
  }
  // Frontends and agents outlive their Router registration, as the reactors do.
  for (FuzzFrontend& frontend : frontends) {
    router.RemoveFrontend(&frontend);
  }
  for (size_t i = 0; i < agents.size(); ++i) {
    if (joined[i]) {
      router.RemoveAgent(&agents[i]);
    }
  }
  if (router.Tunnels() != 0) {
    __builtin_trap();  // every tunnel belonged to a frontend that is gone
  }
  return 0;
}
