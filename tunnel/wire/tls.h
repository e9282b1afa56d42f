// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace sluice::tunnel::wire {

// Server-side TLS settings for the HTTP CONNECT frontend over TCP (gRPC listeners use gRPC's
// own TLS). A non-empty `client_ca` requires a client certificate signed by it (mTLS).
// Immutable after Create; thread-safe.
class TlsContext final {
 public:
  static absl::StatusOr<std::unique_ptr<TlsContext>> CreateServer(
      const std::string& cert, const std::string& key, const std::string& client_ca,
      const std::string& cipher_list = "");
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

 private:
  explicit TlsConn(SSL* ssl) : ssl_(ssl) {}
  Io Classify(int ret);
  SSL* ssl_;
  std::string last_error_;
};

}  // namespace sluice::tunnel::wire
