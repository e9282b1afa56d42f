// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace sluice::tunnel::wire {

// TLS settings where gRPC's own TLS does not serve: the HTTP CONNECT frontend over TCP, and the
// agent's connection to a server when it offers ALPN protocols (gRPC 1.51 offers only its own).
// Immutable after Create; thread-safe.
class TlsContext final {
 public:
  // A non-empty `client_ca` requires a client certificate signed by it (mTLS).
  static absl::StatusOr<std::unique_ptr<TlsContext>> CreateServer(
      const std::string& cert, const std::string& key, const std::string& client_ca,
      const std::string& cipher_list = "");
  // Verifies servers against `ca` (the system's roots when empty), presents `cert`/`key` when
  // both are set, and offers `alpn` in the handshake, in order.
  static absl::StatusOr<std::unique_ptr<TlsContext>> CreateClient(
      const std::string& ca, const std::string& cert, const std::string& key,
      const std::vector<std::string>& alpn);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  SSL_CTX* get() const { return ctx_; }

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
};

// One TLS session over a non-blocking socket (the fd stays owned by the caller). The handshake
// happens inside the first Read/Write. Thread: its owner's.
class TlsConn final {
 public:
  enum class Io { kProgress, kWantRead, kWantWrite, kEof, kError };

  static absl::StatusOr<std::unique_ptr<TlsConn>> Accept(const TlsContext& ctx, int fd);
  // The client side: sends `server_name` as SNI (a DNS name) and requires the server's
  // certificate to name it (a DNS name or an IP address), as Go's crypto/tls does.
  static absl::StatusOr<std::unique_ptr<TlsConn>> Connect(const TlsContext& ctx, int fd,
                                                          const std::string& server_name);
  ~TlsConn();
  TlsConn(const TlsConn&) = delete;
  TlsConn& operator=(const TlsConn&) = delete;

  // On kProgress `*n` bytes moved.
  Io Read(char* buf, size_t len, size_t* n);
  Io Write(const char* buf, size_t len, size_t* n);
  // Plaintext already decrypted and buffered (epoll will not report it).
  bool HasPending() const;
  // Best-effort close_notify.
  void Shutdown();
  // The last kError's reason.
  std::string LastError() const { return last_error_; }
  // The protocol ALPN agreed on; empty before the handshake or without one.
  std::string AlpnSelected() const;

 private:
  explicit TlsConn(SSL* ssl) : ssl_(ssl) {}
  Io Classify(int ret);
  SSL* ssl_;
  std::string last_error_;
};

}  // namespace sluice::tunnel::wire
