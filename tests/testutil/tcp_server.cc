// SPDX-License-Identifier: Apache-2.0
#include "tests/testutil/tcp_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>

#include "absl/time/clock.h"

namespace sluice::testutil {

void FillStream(uint64_t seed, uint64_t offset, char* buf, size_t n) {
  // splitmix64 of (seed, 8-byte block index): position-addressable, fast enough for GiBs.
  for (size_t i = 0; i < n; ++i) {
    const uint64_t pos = offset + i;
    uint64_t z = seed * 0x9e3779b97f4a7c15ULL + (pos >> 3) + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    buf[i] = static_cast<char>(z >> (8 * (pos & 7)));
  }
}

uint64_t Fnv64(uint64_t hash, const char* data, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    hash = (hash ^ static_cast<unsigned char>(data[i])) * 1099511628211ULL;
  }
  return hash;
}

namespace {

struct Conn {
  uint64_t hash = kFnvBasis;
  std::string pending;  // bytes still to write
  uint64_t sent = 0;    // kSpeakFirst progress
  bool read_eof = false;
  bool shut_wr = false;
};

}  // namespace

std::unique_ptr<TcpServer> TcpServer::Start(const net::SocketAddress& bind, Mode mode, uint64_t arg,
                                            std::string name) {
  auto s = std::unique_ptr<TcpServer>(new TcpServer());
  s->mode_ = mode;
  s->arg_ = arg;
  s->name_ = std::move(name);
  s->listen_.Reset(socket(bind.ip().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  int one = 1;
  setsockopt(s->listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage ss;
  socklen_t len = bind.ToSockaddr(&ss);
  if (::bind(s->listen_.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      listen(s->listen_.get(), 8192) != 0 ||
      getsockname(s->listen_.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return nullptr;
  }
  s->address_ = *net::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
  s->epoll_.Reset(epoll_create1(EPOLL_CLOEXEC));
  s->stop_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  epoll_event ev{EPOLLIN, {.fd = s->listen_.get()}};
  epoll_ctl(s->epoll_.get(), EPOLL_CTL_ADD, s->listen_.get(), &ev);
  ev.data.fd = s->stop_.get();
  epoll_ctl(s->epoll_.get(), EPOLL_CTL_ADD, s->stop_.get(), &ev);
  s->thread_ = std::thread([raw = s.get()] { raw->Run(); });
  return s;
}

TcpServer::~TcpServer() {
  uint64_t one = 1;
  (void)!write(stop_.get(), &one, sizeof(one));
  if (thread_.joinable()) {
    thread_.join();
  }
}

void TcpServer::Run() {
  std::map<int, Conn> conns;
  std::string buf(256 * 1024, '\0');
  auto close_conn = [&](int fd) {
    conns.erase(fd);
    close(fd);
  };
  // Writes pending (or generated) bytes; returns false when the connection is finished.
  auto flush = [&](int fd, Conn& c) {
    while (true) {
      if (c.pending.empty() && mode_ == Mode::kSpeakFirst && c.sent < arg_) {
        size_t n = std::min<uint64_t>(buf.size(), arg_ - c.sent);
        c.pending.resize(n);
        FillStream(7, c.sent, c.pending.data(), n);
        c.sent += n;
      }
      if (c.pending.empty()) {
        break;
      }
      ssize_t n = send(fd, c.pending.data(), c.pending.size(), MSG_NOSIGNAL);
      if (n < 0) {
        return errno == EAGAIN;
      }
      c.pending.erase(0, static_cast<size_t>(n));
    }
    const bool done_writing = mode_ != Mode::kSpeakFirst || c.sent >= arg_;
    if (done_writing && !c.shut_wr && (c.read_eof || mode_ == Mode::kSpeakFirst)) {
      shutdown(fd, SHUT_WR);
      c.shut_wr = true;
    }
    return !(c.shut_wr && c.read_eof);
  };
  epoll_event events[128];
  while (true) {
    int n = epoll_wait(epoll_.get(), events, 128, -1);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_.get()) {
        for (auto& [cfd, c] : conns) {
          close(cfd);
        }
        return;
      }
      if (fd == listen_.get()) {
        int c;
        while ((c = accept4(fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
          ++accepted_;
          if (mode_ == Mode::kHello) {
            (void)!send(c, name_.data(), name_.size(), MSG_NOSIGNAL);
            close(c);
            continue;
          }
          epoll_event cev{EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP, {.fd = c}};
          epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c, &cev);
          conns[c];
        }
        continue;
      }
      auto it = conns.find(fd);
      if (it == conns.end()) {
        continue;
      }
      Conn& c = it->second;
      bool alive = true;
      bool more = true;  // edge-triggered: keep going until the socket said EAGAIN
      while (alive && more) {
        more = false;
        while (!c.read_eof && c.pending.size() < buf.size()) {
          ssize_t r = recv(fd, buf.data(), buf.size(), 0);
          if (r > 0) {
            if (mode_ == Mode::kEcho) {
              c.pending.append(buf.data(), static_cast<size_t>(r));
            } else {
              c.hash = Fnv64(c.hash, buf.data(), static_cast<size_t>(r));
            }
          } else if (r == 0) {
            c.read_eof = true;
            if (mode_ == Mode::kChecksum) {
              c.pending.assign(reinterpret_cast<const char*>(&c.hash), sizeof(c.hash));
            }
          } else {
            alive = errno == EAGAIN;
            break;
          }
        }
        const bool was_full = c.pending.size() >= buf.size();
        alive = alive && flush(fd, c);
        more = was_full && c.pending.empty();  // reading stopped for room, not for EAGAIN
      }
      if (!alive) {
        close_conn(fd);
      }
    }
  }
}

ScriptedBackend::ScriptedBackend(const net::SocketAddress& at, std::function<void(int fd)> script) {
  listener_.Reset(socket(at.ip().family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  // accept(2) honours SO_RCVTIMEO: if the agent never dials, the test fails instead of hanging.
  const timeval accept_timeout{.tv_sec = 30, .tv_usec = 0};
  setsockopt(listener_.get(), SOL_SOCKET, SO_RCVTIMEO, &accept_timeout, sizeof(accept_timeout));
  int one = 1;
  setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage ss;
  socklen_t len = at.ToSockaddr(&ss);
  if (bind(listener_.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      listen(listener_.get(), 16) != 0) {
    listener_.Reset();
    return;
  }
  thread_ = std::thread([this, script = std::move(script)] {
    base::UniqueFd fd(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (fd) {
      timeval tv{.tv_sec = 30, .tv_usec = 0};
      setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      script(fd.get());
    }
  });
}

void ScriptedBackend::Join() {
  if (thread_.joinable()) {
    thread_.join();
  }
}

ssize_t Recv(int fd, void* buf, size_t len, int flags) {
  ssize_t n;
  do {
    n = recv(fd, buf, len, flags);
  } while (n < 0 && errno == EINTR);
  return n;
}

uint64_t ReadAllHashed(int fd, uint64_t* hash, int* err) {
  std::string buf(1 << 20, '\0');
  uint64_t total = 0;
  *hash = kFnvBasis;
  ssize_t n;
  while ((n = Recv(fd, buf.data(), buf.size())) > 0) {
    *hash = Fnv64(*hash, buf.data(), static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  if (err != nullptr) {
    *err = n < 0 ? errno : 0;
  }
  return total;
}

uint64_t SendStream(int fd, uint64_t seed, uint64_t bytes) {
  std::string buf(1 << 20, '\0');
  uint64_t hash = kFnvBasis;
  for (uint64_t off = 0; off < bytes;) {
    const size_t n = std::min<uint64_t>(buf.size(), bytes - off);
    FillStream(seed, off, buf.data(), n);
    hash = Fnv64(hash, buf.data(), n);
    for (size_t done = 0; done < n;) {
      ssize_t w = send(fd, buf.data() + done, n - done, MSG_NOSIGNAL);
      if (w <= 0) {
        return 0;
      }
      done += static_cast<size_t>(w);
    }
    off += n;
  }
  return hash;
}

base::UniqueFd ConnectTcp(const net::SocketAddress& to, int* err, int timeout_ms) {
  base::UniqueFd fd(socket(to.ip().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_storage ss;
  socklen_t len = to.ToSockaddr(&ss);
  *err = 0;
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno != EINPROGRESS) {
    *err = errno;
    return {};
  }
  pollfd p{fd.get(), POLLOUT, 0};
  if (poll(&p, 1, timeout_ms) != 1) {
    *err = ETIMEDOUT;
    return {};
  }
  socklen_t elen = sizeof(*err);
  getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, err, &elen);
  if (*err != 0) {
    return {};
  }
  fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  return fd;
}

base::UniqueFd ListenTcp(const net::SocketAddress& at) {
  base::UniqueFd fd(socket(at.ip().family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage ss;
  socklen_t len = at.ToSockaddr(&ss);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd.get(), 16) != 0) {
    fd.Reset();
  }
  return fd;
}

HelloLoad::HelloLoad(const std::string& to)
    : thread_([this, to] {
        while (!stop_) {
          if (Hello(to).empty()) {
            ++failed;
            absl::SleepFor(absl::Milliseconds(10));
          } else {
            ++ok;
          }
        }
      }) {}

HelloLoad::~HelloLoad() {
  stop_ = true;
  thread_.join();
}

std::string Hello(const std::string& to, int* err) {
  int e = 0;
  auto fd = ConnectTcp(*net::SocketAddress::Parse(to), &e);
  if (err != nullptr) {
    *err = e;
  }
  if (!fd) {
    return "";
  }
  const timeval tv{.tv_sec = 5, .tv_usec = 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = Recv(fd.get(), buf, sizeof(buf))) > 0) {
    out.append(buf, static_cast<size_t>(n));
  }
  return n == 0 ? out : "";
}

}  // namespace sluice::testutil
