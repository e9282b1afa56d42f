// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/kube/bearer_token.h"
#include "lib/kube/client_config.h"

typedef void CURL;
typedef void CURLM;

namespace sluice::kube {

struct HttpResponse {
  long status = 0;
  // Retry-After of a 429 or 503, zero when absent.
  absl::Duration retry_after = absl::ZeroDuration();
  // The start of a non-2xx body (a metav1.Status from the API server), at most 64 KiB.
  std::string error_body;
};

// Talks to one API server over libcurl, one request at a time, keeping the connection alive
// between requests. TLS verification is on unless the kubeconfig turns it off. A curl multi
// handle drives the transfer so that Stop() can interrupt a blocked request at once
// (curl_multi_wakeup) instead of at libcurl's next progress callback.
// Thread: one caller thread; Stop() is thread-safe.
class HttpClient final {
 public:
  // `token` must outlive the client.
  static absl::StatusOr<std::unique_ptr<HttpClient>> Create(const ClientConfig& config,
                                                            BearerToken& token);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  using BodySink = absl::FunctionRef<absl::Status(std::string_view bytes)>;

  // GET server + target ("/api/v1/services?..."). A 2xx body streams into `sink` as it arrives;
  // a non-OK status from the sink aborts the transfer and is returned. Any HTTP status is a
  // response. Errors: Unavailable (connect, connection lost), FailedPrecondition (TLS handshake
  // or verification), DeadlineExceeded (`timeout` passed), Cancelled (Stop()).
  absl::StatusOr<HttpResponse> Get(const std::string& target, absl::Duration timeout,
                                   BodySink sink) {
    return Request("GET", target, nullptr, timeout, sink);
  }
  // POSTs a JSON `body` (a create: TokenReview); otherwise as Get.
  absl::StatusOr<HttpResponse> Post(const std::string& target, const std::string& body,
                                    absl::Duration timeout, BodySink sink) {
    return Request("POST", target, &body, timeout, sink);
  }

  // PUTs a JSON `body` (an update: a Lease's renewal); otherwise as Get.
  absl::StatusOr<HttpResponse> Put(const std::string& target, const std::string& body,
                                   absl::Duration timeout, BodySink sink) {
    return Request("PUT", target, &body, timeout, sink);
  }
  // DELETEs with a JSON DeleteOptions `body` (preconditions); otherwise as Get.
  absl::StatusOr<HttpResponse> Delete(const std::string& target, const std::string& body,
                                      absl::Duration timeout, BodySink sink) {
    return Request("DELETE", target, &body, timeout, sink);
  }

  // Makes the running Get(), and every later one, return Cancelled. Thread-safe.
  void Stop();

  const std::string& server() const { return server_; }

 private:
  struct EasyDeleter {
    void operator()(CURL* easy) const;
  };
  struct MultiDeleter {
    void operator()(CURLM* multi) const;
  };
  HttpClient(std::string server, BearerToken& token);
  absl::Status Configure(const ClientConfig& config);
  absl::StatusOr<HttpResponse> Request(const char* method, const std::string& target,
                                       const std::string* body, absl::Duration timeout,
                                       BodySink sink);
  // Runs the transfer to completion; returns the CURLcode.
  int Perform();
  static size_t OnWrite(char* data, size_t size, size_t n, void* self);
  static size_t OnHeader(char* data, size_t size, size_t n, void* self);

  const std::string server_;
  BearerToken& token_;
  std::unique_ptr<CURL, EasyDeleter> easy_;
  std::unique_ptr<CURLM, MultiDeleter> multi_;
  std::atomic<bool> stopped_{false};
  char error_buffer_[256] = {};  // CURL_ERROR_SIZE

  // Per request.
  HttpResponse response_;
  const BodySink* sink_ = nullptr;
  absl::Status sink_status_;
};

}  // namespace sluice::kube
