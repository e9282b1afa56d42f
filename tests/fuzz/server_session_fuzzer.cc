// SPDX-License-Identifier: Apache-2.0
// Trust boundary: the tunnel agent's packet handling (agent::ServerSession) driven by a hostile
// proxy server: dials with reused randoms, DATA and CLOSE_REQ for connectIDs never given out,
// DIAL_CLS racing the connect, the stream failing mid-write. Packets are posted as
// ServerStream::OnReadDone does; replies are captured through the Outbox's writer and checked
// against the protocol as they are written (see Checker). The session's EventLoop is turned on this
// thread until idle, so each input is deterministic.
// Dials never leave the machine: names resolve through a FakeResolver ("backend" is 127.0.0.1,
// "remote" 192.0.2.1, anything else is unknown), and the allow list admits only this process's
// loopback backends. A DIAL_REQ for port 1-4 is sent to backend 1-4: 1 echoes, 2 accepts and
// closes, 3 accepts and never reads, 4 refuses (a bound socket that does not listen).
// Input: records of [op][length][length bytes of a serialized Packet]; op % 4 picks:
//   0 the server sends the packet, then the loop runs until idle; 1 the same without turning
//   the loop (gRPC reads run ahead of it); 2 backend (length % 3 + 1) closes its connections;
//   3 the stream breaks (the write in flight fails), which ends the input.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "google/protobuf/stubs/logging.h"
#include "lib/base/metrics.h"
#include "lib/base/unique_fd.h"

#include "tests/fuzz/packet_records.h"
#include "tunnel/agent/fake_resolver.h"
#include "tunnel/agent/server_session.h"

namespace {

using sluice::base::UniqueFd;
using sluice::tunnel::wire::Packet;

// An input that keeps the loop busy this many turns is a livelock, not a slow input.
constexpr int kMaxBusyTurns = 2000;
// Bounds the work of one input (each dial is a real loopback connection).
constexpr int kMaxPackets = 64;

enum Kind { kEcho = 0, kCloser = 1, kSink = 2, kRefused = 3, kKinds = 4 };

[[noreturn]] void Violation(const char* what) {
  fprintf(stderr, "server_session_fuzzer: protocol violation: %s\n", what);
  __builtin_trap();
}

// The loopback sockets dials may reach, shared by all inputs.
struct Backends {
  std::array<UniqueFd, kKinds> sockets;
  std::array<uint16_t, kKinds> ports{};
  sluice::tunnel::agent::AllowList allow;
  sluice::tunnel::agent::FakeResolver resolver;
};

Backends& Shared() {
  static Backends* b = [] {
    auto* b = new Backends;
    std::vector<std::string> allowed;
    for (int k = 0; k < kKinds; ++k) {
      UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof(a);
      if (!fd || bind(fd.get(), reinterpret_cast<sockaddr*>(&a), len) != 0 ||
          getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
          (k != kRefused && listen(fd.get(), 1024) != 0)) {
        perror("server_session_fuzzer: backend socket");
        abort();
      }
      b->ports[k] = ntohs(a.sin_port);
      b->sockets[k] = std::move(fd);
      allowed.push_back("127.0.0.1/32:" + std::to_string(b->ports[k]));
    }
    b->allow = sluice::tunnel::agent::AllowList::Parse(allowed).value();
    b->resolver.Add("backend", *sluice::net::IpAddress::Parse("127.0.0.1"));
    b->resolver.Add("remote", *sluice::net::IpAddress::Parse("192.0.2.1"));
    return b;
  }();
  return *b;
}

// What the session may send, given what the server sent (docs/konnectivity-wire.md):
// at most one DIAL_RSP per DIAL_REQ, and no success for a dial the server cancelled (a failure
// may have been sent before the cancel arrived); connectIDs are fresh; DATA and a clean
// CLOSE_RSP only for a connection given out and not yet closed; every dial that is not
// cancelled is answered once the loop is idle (every backend answers at once).
class Checker {
 public:
  void FromServer(const Packet& p) {
    if (p.type() == DIAL_REQ) {
      ++unanswered_[p.dialrequest().random()];
    } else if (p.type() == DIAL_CLS) {
      if (int& n = unanswered_[p.closedial().random()]; n > 0) {
        --n;
        ++cancelled_[p.closedial().random()];
      }
    }
  }

  void FromSession(const Packet& p) {
    switch (p.type()) {
      case DIAL_RSP:
        Answer(p.dialresponse());
        break;
      case DATA:
        if (!open_.contains(p.data().connectid())) {
          Violation("DATA for a connectID not open");
        }
        break;
      case CLOSE_RSP: {
        const auto& rsp = p.closeresponse();
        if (open_.erase(rsp.connectid()) == 0 && rsp.error().empty()) {
          Violation("clean CLOSE_RSP for a connectID not open");
        }
        break;
      }
      default:
        Violation("unexpected packet type from the agent");
    }
  }

  // The loop is idle: every dial was answered or cancelled.
  void Idle() const {
    for (const auto& [random, n] : unanswered_) {
      if (n > 0) {
        Violation("a DIAL_REQ left unanswered while the loop is idle");
      }
    }
  }

 private:
  void Answer(const DialResponse& rsp) {
    const bool ok = rsp.error().empty();
    if (int& n = unanswered_[rsp.random()]; n > 0) {
      --n;
    } else if (int& c = cancelled_[rsp.random()]; c > 0) {
      if (ok) {
        Violation("DIAL_RSP success for a dial the server cancelled");
      }
      --c;
    } else {
      Violation("DIAL_RSP for a random with no DIAL_REQ");
    }
    if (!ok) {
      if (rsp.connectid() != 0) {
        Violation("failed DIAL_RSP with a connectID");
      }
      return;
    }
    if (rsp.connectid() <= 0 || !given_.insert(rsp.connectid()).second) {
      Violation("DIAL_RSP success with a bad or reused connectID");
    }
    open_.insert(rsp.connectid());
  }

  std::map<int64_t, int> unanswered_;  // random -> DIAL_REQs neither answered nor cancelled
  std::map<int64_t, int> cancelled_;   // random -> DIAL_CLS that cancelled one of them
  std::set<int64_t> given_;
  std::set<int64_t> open_;
};

// The fuzzer's side of the loopback backends: accepts, echoes, closes.
class Peers {
 public:
  // One pass over the backends; true if anything happened.
  bool Serve(Backends& b) {
    bool progress = false;
    for (int k = 0; k < kRefused; ++k) {
      while (true) {
        UniqueFd fd(accept4(b.sockets[k].get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd) {
          break;
        }
        progress = true;
        if (k != kCloser) {
          peers_.push_back({k, std::move(fd)});
        }
      }
    }
    for (auto it = peers_.begin(); it != peers_.end();) {
      if (it->kind == kEcho) {
        char buf[16384];
        const ssize_t n = read(it->fd.get(), buf, sizeof(buf));
        if (n > 0) {
          progress = true;
          (void)!write(it->fd.get(), buf, n);  // a full socket drops the rest: fine here
        } else if (n == 0 || errno != EAGAIN) {
          progress = true;
          it = peers_.erase(it);
          continue;
        }
      }
      ++it;
    }
    return progress;
  }

  void Close(int kind) {
    std::erase_if(peers_, [kind](const Peer& p) { return p.kind == kind; });
  }

  // After teardown every connection the session made must be closed: nothing may be left
  // but unread bytes and then EOF (or a reset).
  void CheckAllClosed() {
    for (Peer& p : peers_) {
      char buf[65536];
      ssize_t n;
      while ((n = read(p.fd.get(), buf, sizeof(buf))) > 0) {
      }
      if (n < 0 && errno == EAGAIN) {
        Violation("a backend connection outlived the session");
      }
    }
    peers_.clear();
  }

 private:
  struct Peer {
    int kind;
    UniqueFd fd;
  };
  std::vector<Peer> peers_;
};

// The gRPC stream as the Outbox sees it: one write in flight, completed by Complete().
class FakeStream {
 public:
  explicit FakeStream(Checker& checker)
      : checker_(checker),
        outbox_(std::make_shared<sluice::tunnel::agent::StreamOutbox>(
            [this](const Packet* p) { in_flight_ = p; })) {}

  const std::shared_ptr<sluice::tunnel::agent::StreamOutbox>& Outbox() const { return outbox_; }

  // Completes the write in flight, if any; true if there was one.
  bool Complete(bool ok) {
    const Packet* p = std::exchange(in_flight_, nullptr);
    if (p == nullptr) {
      return false;
    }
    if (ok) {
      checker_.FromSession(*p);
    }
    (void)outbox_->OnWriteDone(ok);
    return true;
  }

 private:
  Checker& checker_;
  const Packet* in_flight_ = nullptr;
  std::shared_ptr<sluice::tunnel::agent::StreamOutbox> outbox_;
};

// Turns the loop, serves the backends and completes writes until nothing happens.
void RunUntilIdle(sluice::event::EventLoop& loop, Peers& peers, FakeStream& stream) {
  for (int turns = 0;; ++turns) {
    if (turns == kMaxBusyTurns) {
      Violation("the loop never went idle");
    }
    bool progress = loop.RunOnce(absl::ZeroDuration());
    progress |= peers.Serve(Shared());
    while (stream.Complete(true)) {
      progress = true;
    }
    if (!progress) {
      return;
    }
  }
}

// A DIAL_REQ for port 1-4 goes to that backend.
void Redirect(Packet& p) {
  std::string host;
  uint16_t port = 0;
  if (p.type() != DIAL_REQ ||
      !sluice::tunnel::agent::SplitHostPort(p.dialrequest().address(), &host, &port) || port < 1 ||
      port > kKinds) {
    return;
  }
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  p.mutable_dialrequest()->set_address(h + ":" + std::to_string(Shared().ports[port - 1]));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  [[maybe_unused]] static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  Backends& backends = Shared();
  sluice::base::Registry registry;
  sluice::tunnel::agent::AgentMetrics metrics(registry);
  sluice::tunnel::agent::DialPolicy policy;
  policy.allow = &backends.allow;
  policy.max_queued = 64 << 10;
  auto loop = sluice::event::EventLoop::Create().value();
  Checker checker;
  Peers peers;
  FakeStream stream(checker);
  bool reading = true;  // as ServerStream: a read is started unless the gate holds it
  auto gate = std::make_shared<sluice::tunnel::wire::ReadGate>([&reading] { reading = true; });
  auto session = std::make_shared<sluice::tunnel::agent::ServerSession>(
      *loop, backends.resolver, metrics, policy, stream.Outbox(), gate);

  int packets = 0;
  bool broken = false;
  sluice::fuzz::PacketRecord record;
  while (packets < kMaxPackets && !broken && sluice::fuzz::NextPacketRecord(data, size, record)) {
    const uint8_t op = record.op % 4;
    const size_t length = record.length;
    Packet& packet = record.packet;
    if (op == 2) {
      peers.Close(static_cast<int>(length % 3));
      RunUntilIdle(*loop, peers, stream);
    } else if (op == 3) {
      broken = true;
    } else if (record.parsed && reading) {
      ++packets;
      Redirect(packet);
      if (sluice::tunnel::wire::Validate(packet).ok()) {
        checker.FromServer(packet);
      }
      reading = false;
      session->Post(std::move(packet));
      gate->ReadNext();
      if (op == 0) {
        RunUntilIdle(*loop, peers, stream);
        checker.Idle();
      }
    }
  }
  if (!broken) {
    RunUntilIdle(*loop, peers, stream);
    checker.Idle();
  }
  // As ServerStream::OnDone: the stream is over, so the write in flight fails, then the
  // session is torn down on its loop.
  (void)stream.Complete(false);
  gate->Close();
  stream.Outbox()->Close();
  loop->Post([session] { session->Teardown(); });
  RunUntilIdle(*loop, peers, stream);
  peers.CheckAllClosed();
  if (session.use_count() != 1) {
    Violation("something still holds the session after teardown");
  }
  session.reset();
  loop.reset();
  return 0;
}
