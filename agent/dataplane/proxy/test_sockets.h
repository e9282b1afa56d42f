// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cstdint>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "lib/base/unique_fd.h"
#include "lib/net/socket.h"

// Loopback TCP connections for proxy unit tests. Thread: the test's.
namespace sluice::proxy::testing {

// `near` is the proxy's non-blocking end; `far` is the blocking peer a test thread drives.
struct TcpPair {
  base::UniqueFd near;
  base::UniqueFd far;
};

// The peer dials and the proxy accepts, as on the client side (dialed = false); or the proxy
// dials with DialTcp and the peer accepts, as on the backend side (dialed = true).
inline TcpPair MakeTcpPair(bool dialed) {
  TcpPair pair;
  auto listener = net::ListenTcp(*net::SocketAddress::Parse("127.0.0.1:0"), false, 4);
  EXPECT_TRUE(listener.ok()) << listener.status();
  net::SocketAddress addr = *net::LocalAddress(listener->get());
  if (dialed) {
    pair.near = *net::DialTcp(addr);
    pair.far = base::UniqueFd(accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC));
    pollfd p{.fd = pair.near.get(), .events = POLLOUT};
    EXPECT_EQ(poll(&p, 1, 5000), 1);  // "already connected", as the session requires
  } else {
    pair.far = base::UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_storage ss;
    socklen_t len = addr.ToSockaddr(&ss);
    EXPECT_EQ(connect(pair.far.get(), reinterpret_cast<sockaddr*>(&ss), len), 0);
    pair.near =
        base::UniqueFd(accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  }
  EXPECT_TRUE(pair.near.valid() && pair.far.valid());
  // A peer thread stuck on a broken proxy fails instead of hanging the suite.
  timeval tv{.tv_sec = 20, .tv_usec = 0};
  setsockopt(pair.far.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(pair.far.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return pair;
}

inline std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) {
    c = static_cast<char>(rng());
  }
  return s;
}

inline uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h = (h ^ c) * 1099511628211ull;
  }
  return h;
}

// Blocking helpers for peer threads. SendAll returns false on error.
inline bool SendAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

// Reads until EOF; returns what arrived. *err gets the errno of a failed read, else 0.
inline std::string RecvToEof(int fd, int* err = nullptr) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (err != nullptr) {
        *err = n < 0 ? errno : 0;
      }
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace sluice::proxy::testing
