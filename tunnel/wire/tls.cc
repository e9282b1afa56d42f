// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/tls.h"

#include <arpa/inet.h>

#include "absl/strings/str_cat.h"
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace sluice::tunnel::wire {
namespace {

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  if (e == 0) {
    return "unknown error";
  }
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsContext>> TlsContext::CreateServer(
    const std::string& cert, const std::string& key, const std::string& client_ca,
    const std::string& cipher_list) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) {
    return absl::InternalError("SSL_CTX_new: " + OpenSslError());
  }
  auto owned = std::unique_ptr<TlsContext>(new TlsContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (!cipher_list.empty() && SSL_CTX_set_cipher_list(ctx, cipher_list.c_str()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cipher list ", cipher_list, ": ", OpenSslError()));
  }
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("load certificate ", cert, ": ", OpenSslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("load key ", key, ": ", OpenSslError()));
  }
  if (!client_ca.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, client_ca.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("load CA ", client_ca, ": ", OpenSslError()));
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return owned;
}

absl::StatusOr<std::unique_ptr<TlsContext>> TlsContext::CreateClient(
    const std::string& ca, const std::string& cert, const std::string& key,
    const std::vector<std::string>& alpn) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) {
    return absl::InternalError("SSL_CTX_new: " + OpenSslError());
  }
  auto owned = std::unique_ptr<TlsContext>(new TlsContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (ca.empty() ? SSL_CTX_set_default_verify_paths(ctx) != 1
                 : SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("load CA ", ca, ": ", OpenSslError()));
  }
  if (!cert.empty() && !key.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("load certificate ", cert, ": ", OpenSslError()));
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("load key ", key, ": ", OpenSslError()));
    }
  }
  std::string wire;  // RFC 7301: each protocol name prefixed by its length
  for (const std::string& proto : alpn) {
    if (proto.empty() || proto.size() > 255) {
      return absl::InvalidArgumentError(
          absl::StrCat("ALPN protocol \"", proto, "\": must be 1 to 255 bytes"));
    }
    wire.push_back(static_cast<char>(proto.size()));
    wire += proto;
  }
  if (!wire.empty() &&
      SSL_CTX_set_alpn_protos(ctx, reinterpret_cast<const unsigned char*>(wire.data()),
                              static_cast<unsigned int>(wire.size())) != 0) {
    return absl::InternalError("SSL_CTX_set_alpn_protos: " + OpenSslError());
  }
  return owned;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

absl::StatusOr<std::unique_ptr<TlsConn>> TlsConn::Connect(const TlsContext& ctx, int fd,
                                                          const std::string& server_name) {
  SSL* ssl = SSL_new(ctx.get());
  if (ssl == nullptr) {
    return absl::InternalError("SSL_new: " + OpenSslError());
  }
  auto conn = std::unique_ptr<TlsConn>(new TlsConn(ssl));
  if (SSL_set_fd(ssl, fd) != 1) {
    return absl::InternalError("SSL_set_fd: " + OpenSslError());
  }
  in6_addr ip;
  const bool is_ip = inet_pton(AF_INET, server_name.c_str(), &ip) == 1 ||
                     inet_pton(AF_INET6, server_name.c_str(), &ip) == 1;
  const bool named =
      is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), server_name.c_str()) == 1
            : SSL_set_tlsext_host_name(ssl, server_name.c_str()) == 1 &&
                  SSL_set1_host(ssl, server_name.c_str()) == 1;
  if (!named) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS server name ", server_name, ": ", OpenSslError()));
  }
  SSL_set_connect_state(ssl);
  return conn;
}

std::string TlsConn::AlpnSelected() const {
  const unsigned char* data = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl_, &data, &len);
  return data == nullptr ? "" : std::string(reinterpret_cast<const char*>(data), len);
}

absl::StatusOr<std::unique_ptr<TlsConn>> TlsConn::Accept(const TlsContext& ctx, int fd) {
  SSL* ssl = SSL_new(ctx.get());
  if (ssl == nullptr) {
    return absl::InternalError("SSL_new: " + OpenSslError());
  }
  auto conn = std::unique_ptr<TlsConn>(new TlsConn(ssl));
  if (SSL_set_fd(ssl, fd) != 1) {
    return absl::InternalError("SSL_set_fd: " + OpenSslError());
  }
  SSL_set_accept_state(ssl);
  return conn;
}

TlsConn::~TlsConn() { SSL_free(ssl_); }

TlsConn::Io TlsConn::Classify(int ret) {
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
      return Io::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return Io::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return Io::kEof;
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error() == 0) {
        // OpenSSL 3 reports an EOF without close_notify this way; treat it as EOF.
        return Io::kEof;
      }
      [[fallthrough]];
    default:
      last_error_ = OpenSslError();
      return Io::kError;
  }
}

TlsConn::Io TlsConn::Read(char* buf, size_t len, size_t* n) {
  const int ret = SSL_read_ex(ssl_, buf, len, n);
  return ret == 1 ? Io::kProgress : Classify(ret);
}

TlsConn::Io TlsConn::Write(const char* buf, size_t len, size_t* n) {
  const int ret = SSL_write_ex(ssl_, buf, len, n);
  return ret == 1 ? Io::kProgress : Classify(ret);
}

bool TlsConn::HasPending() const { return SSL_pending(ssl_) > 0; }

void TlsConn::Shutdown() {
  if (SSL_is_init_finished(ssl_)) {
    (void)SSL_shutdown(ssl_);
  }
  ERR_clear_error();
}

}  // namespace sluice::tunnel::wire
