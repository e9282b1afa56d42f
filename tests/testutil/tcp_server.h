// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "lib/base/unique_fd.h"
#include "lib/net/address.h"

namespace sluice::testutil {

// The pseudo-random byte stream both ends of an integrity test generate: the same seed gives
// the same bytes, so nothing needs to be stored. Fnv64 hashes what was received.
void FillStream(uint64_t seed, uint64_t offset, char* buf, size_t n);
uint64_t Fnv64(uint64_t hash, const char* data, size_t n);
constexpr uint64_t kFnvBasis = 14695981039346656037ULL;

// A TCP backend on its own epoll thread (created in the calling thread's network namespace).
// Thread-safe to construct and destroy from the test thread.
class TcpServer final {
 public:
  enum class Mode {
    kEcho,        // writes back what it reads; forwards EOF
    kChecksum,    // reads to EOF, then answers the 8-byte Fnv64 of what it read, then closes
    kSpeakFirst,  // at accept writes `arg` bytes of FillStream(seed 7), shuts its write side,
                  // then reads and discards to EOF
    kHello,       // writes `name` and closes
  };
  static std::unique_ptr<TcpServer> Start(const net::SocketAddress& bind, Mode mode,
                                          uint64_t arg = 0, std::string name = "");
  ~TcpServer();
  const net::SocketAddress& address() const { return address_; }
  int accepted() const { return accepted_.load(); }

 private:
  TcpServer() = default;
  void Run();

  Mode mode_ = Mode::kEcho;
  uint64_t arg_ = 0;
  std::string name_;
  net::SocketAddress address_;
  base::UniqueFd listen_;
  base::UniqueFd epoll_;
  base::UniqueFd stop_;  // eventfd
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// A backend that accepts one connection and runs `script` on it (blocking, 30 s socket
// timeouts) in its own thread. Thread: the test's.
class ScriptedBackend final {
 public:
  ScriptedBackend(const net::SocketAddress& at, std::function<void(int fd)> script);
  ~ScriptedBackend() { Join(); }
  void Join();

 private:
  base::UniqueFd listener_;
  std::thread thread_;
};

// A bound, listening TCP socket (backlog 16) at `at`, or an invalid fd. Nobody accepts unless
// the caller does: the kernel completes handshakes into the queue, so a peer can connect and
// send until the buffers fill while no one reads.
base::UniqueFd ListenTcp(const net::SocketAddress& at);

// Hello() requests to `to` in a loop on its own thread until destroyed, counting answers and
// failures: load that notices when a service stops answering. A failure waits 10 ms, as a
// refusal comes back at once. Thread: the test's (the counters are thread-safe).
class HelloLoad final {
 public:
  explicit HelloLoad(const std::string& to);
  ~HelloLoad();
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// recv(2) that retries when a signal interrupts it (EINTR): a blocking test reader must not
// take an interruption for the end of the stream (seen under ASan).
ssize_t Recv(int fd, void* buf, size_t len, int flags = 0);

// Reads to EOF; returns the byte count and sets *hash to their Fnv64 (*err: errno or 0).
uint64_t ReadAllHashed(int fd, uint64_t* hash, int* err = nullptr);
// Sends `bytes` of FillStream(seed) on a blocking socket; returns their Fnv64 (0 on error).
uint64_t SendStream(int fd, uint64_t seed, uint64_t bytes);

// Connects with a deadline; returns the connected blocking socket, or an invalid fd with
// *err set (ECONNREFUSED, ETIMEDOUT, ...).
base::UniqueFd ConnectTcp(const net::SocketAddress& to, int* err, int timeout_ms = 3000);

// One request to a kHello backend at `to` ("10.96.0.10:80", through a service): its name, or
// "" on failure with *err set to the connect's errno. A reply that never ends (not a kHello
// backend) fails after 5 s instead of hanging.
std::string Hello(const std::string& to, int* err = nullptr);

}  // namespace sluice::testutil
