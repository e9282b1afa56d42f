// SPDX-License-Identifier: Apache-2.0
#include "lib/kube/http_client.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"
#include <curl/curl.h>

namespace sluice::kube {

namespace {

static_assert(CURL_ERROR_SIZE == 256);

constexpr size_t kMaxErrorBody = 64 << 10;
// Dead peers (a node partitioned from the API server) are noticed by TCP keepalive probes
// after ~30 s idle + 3 probes, well before the watch's own deadline.
constexpr long kKeepIdleSeconds = 30;
constexpr long kKeepIntervalSeconds = 10;
constexpr long kConnectTimeoutMs = 10'000;

template <typename T>
absl::Status SetOpt(CURL* easy, CURLoption option, T value, const char* name) {
  if (CURLcode rc = curl_easy_setopt(easy, option, value); rc != CURLE_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("libcurl option ", name, ": ", curl_easy_strerror(rc)));
  }
  return absl::OkStatus();
}
#define SLUICE_SETOPT(easy, option, value) SetOpt(easy, option, value, #option)

absl::Status SetBlob(CURL* easy, CURLoption option, const std::string& pem, const char* name) {
  curl_blob blob{const_cast<char*>(pem.data()), pem.size(), CURL_BLOB_COPY};
  return SetOpt(easy, option, &blob, name);
}

struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

}  // namespace

void HttpClient::EasyDeleter::operator()(CURL* easy) const { curl_easy_cleanup(easy); }
void HttpClient::MultiDeleter::operator()(CURLM* multi) const { curl_multi_cleanup(multi); }

HttpClient::HttpClient(std::string server, BearerToken& token)
    : server_(std::move(server)), token_(token) {}

HttpClient::~HttpClient() {
  if (easy_ && multi_) {
    curl_multi_remove_handle(multi_.get(), easy_.get());
  }
}

absl::StatusOr<std::unique_ptr<HttpClient>> HttpClient::Create(const ClientConfig& config,
                                                               BearerToken& token) {
  // curl_global_init is not thread-safe before 7.84; every client goes through here first.
  static std::once_flag once;
  static CURLcode init = CURLE_OK;
  std::call_once(once, [] { init = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (init != CURLE_OK) {
    return absl::InternalError(absl::StrCat("curl_global_init: ", curl_easy_strerror(init)));
  }
  if (!absl::StartsWith(config.server, "https://") && !absl::StartsWith(config.server, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("API server \"", config.server, "\": want an http:// or https:// URL"));
  }
  auto client = std::unique_ptr<HttpClient>(new HttpClient(config.server, token));
  client->easy_.reset(curl_easy_init());
  client->multi_.reset(curl_multi_init());
  if (!client->easy_ || !client->multi_) {
    return absl::ResourceExhaustedError("curl_easy_init/curl_multi_init failed");
  }
  RETURN_IF_ERROR(client->Configure(config));
  return client;
}

absl::Status HttpClient::Configure(const ClientConfig& c) {
  // libcurl would only say "error setting certificate file" at the first request.
  for (const std::string* file : {&c.ca_file, &c.client_cert_file, &c.client_key_file}) {
    if (!file->empty() && ::access(file->c_str(), R_OK) != 0) {
      return base::ErrnoStatus(errno, absl::StrCat("read ", *file));
    }
  }
  CURL* e = easy_.get();
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_NOSIGNAL, 1L));  // threads: no SIGALRM for DNS
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_PROTOCOLS_STR, "http,https"));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_HTTP_VERSION, long{CURL_HTTP_VERSION_1_1}));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_CONNECTTIMEOUT_MS, kConnectTimeoutMs));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_TCP_KEEPALIVE, 1L));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_TCP_KEEPIDLE, kKeepIdleSeconds));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_TCP_KEEPINTVL, kKeepIntervalSeconds));
  // The API server gzips large list responses for clients that accept it.
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_ACCEPT_ENCODING, ""));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_USERAGENT, "sluice-agent/" SLUICE_KUBE_VERSION));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_ERRORBUFFER, error_buffer_));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_WRITEFUNCTION, &HttpClient::OnWrite));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_WRITEDATA, static_cast<void*>(this)));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_HEADERFUNCTION, &HttpClient::OnHeader));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_HEADERDATA, static_cast<void*>(this)));

  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_SSL_VERIFYPEER, c.insecure_skip_tls_verify ? 0L : 1L));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_SSL_VERIFYHOST, c.insecure_skip_tls_verify ? 0L : 2L));
  if (!c.ca_data.empty()) {
    RETURN_IF_ERROR(SetBlob(e, CURLOPT_CAINFO_BLOB, c.ca_data, "certificate-authority-data"));
  } else if (!c.ca_file.empty()) {
    RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_CAINFO, c.ca_file.c_str()));
  }
  if (!c.client_cert_data.empty()) {
    RETURN_IF_ERROR(
        SetBlob(e, CURLOPT_SSLCERT_BLOB, c.client_cert_data, "client-certificate-data"));
  } else if (!c.client_cert_file.empty()) {
    RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_SSLCERT, c.client_cert_file.c_str()));
  }
  if (!c.client_key_data.empty()) {
    RETURN_IF_ERROR(SetBlob(e, CURLOPT_SSLKEY_BLOB, c.client_key_data, "client-key-data"));
  } else if (!c.client_key_file.empty()) {
    RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_SSLKEY, c.client_key_file.c_str()));
  }
  if (!c.username.empty()) {
    RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_HTTPAUTH, long{CURLAUTH_BASIC}));
    RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_USERNAME, c.username.c_str()));
    RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_PASSWORD, c.password.c_str()));
  }
  return absl::OkStatus();
}

size_t HttpClient::OnWrite(char* data, size_t size, size_t n, void* arg) {
  auto* self = static_cast<HttpClient*>(arg);
  const size_t bytes = size * n;
  if (self->response_.status == 0) {
    curl_easy_getinfo(self->easy_.get(), CURLINFO_RESPONSE_CODE, &self->response_.status);
  }
  const long status = self->response_.status;
  if (status < 200 || status > 299) {
    std::string& body = self->response_.error_body;
    body.append(data, std::min(bytes, kMaxErrorBody - std::min(kMaxErrorBody, body.size())));
    return bytes;
  }
  self->sink_status_ = (*self->sink_)(std::string_view(data, bytes));
  return self->sink_status_.ok() ? bytes : 0;  // 0 aborts with CURLE_WRITE_ERROR
}

size_t HttpClient::OnHeader(char* data, size_t size, size_t n, void* arg) {
  auto* self = static_cast<HttpClient*>(arg);
  const std::string_view line(data, size * n);
  if (absl::StartsWith(base::Absl(line), "HTTP/")) {
    self->response_.retry_after = absl::ZeroDuration();  // a new response (after 100 Continue)
  }
  constexpr std::string_view kRetryAfter = "retry-after:";
  if (line.size() > kRetryAfter.size() &&
      absl::EqualsIgnoreCase(base::Absl(line.substr(0, kRetryAfter.size())),
                             base::Absl(kRetryAfter))) {
    // Seconds; the HTTP-date form is not used by the API server and is ignored.
    int64_t seconds = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(base::Absl(line.substr(kRetryAfter.size()))),
                         &seconds) &&
        seconds >= 0) {
      self->response_.retry_after = absl::Seconds(std::min<int64_t>(seconds, 3600));
    }
  }
  return size * n;
}

int HttpClient::Perform() {
  CURLM* multi = multi_.get();
  curl_multi_add_handle(multi, easy_.get());
  CURLcode result = CURLE_OK;
  bool done = false;
  while (!done && !stopped_.load()) {
    int running = 0;
    if (CURLMcode mc = curl_multi_perform(multi, &running); mc != CURLM_OK) {
      result = CURLE_FAILED_INIT;
      break;
    }
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &queued)) {
      if (msg->msg == CURLMSG_DONE) {
        result = msg->data.result;
        done = true;
      }
    }
    if (!done && running > 0) {
      // Returns on socket activity, libcurl's next timeout or curl_multi_wakeup (Stop).
      curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
    }
  }
  curl_multi_remove_handle(multi, easy_.get());
  return done ? result : CURLE_ABORTED_BY_CALLBACK;
}

absl::StatusOr<HttpResponse> HttpClient::Request(const char* method, const std::string& target,
                                                 const std::string* body, absl::Duration timeout,
                                                 BodySink sink) {
  if (stopped_.load()) {
    return absl::CancelledError("stopped");
  }
  const std::string url = server_ + target;
  std::unique_ptr<curl_slist, SlistDeleter> headers(
      curl_slist_append(nullptr, "Accept: application/json"));
  // The header lives only for this request; libcurl never logs it (no CURLOPT_VERBOSE).
  if (std::string token = token_.Get(); !token.empty()) {
    curl_slist* more = curl_slist_append(headers.get(), ("Authorization: Bearer " + token).c_str());
    if (more == nullptr) {
      return absl::ResourceExhaustedError("curl_slist_append failed");
    }
  }
  CURL* e = easy_.get();
  if (body != nullptr) {
    if (curl_slist_append(headers.get(), "Content-Type: application/json") == nullptr) {
      return absl::ResourceExhaustedError("curl_slist_append failed");
    }
    RETURN_IF_ERROR(
        SLUICE_SETOPT(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size())));
    RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_COPYPOSTFIELDS, body->c_str()));
  } else {
    RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_HTTPGET, 1L));
  }
  // PUT and DELETE send their body as a POST would. GET and POST leave the option alone; the
  // handle is reused, so it is cleared after the request that set it.
  const bool custom = std::string_view(method) == "PUT" || std::string_view(method) == "DELETE";
  if (custom) {
    RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_CUSTOMREQUEST, method));
  }
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_URL, url.c_str()));
  RETURN_IF_ERROR(SLUICE_SETOPT(e, CURLOPT_HTTPHEADER, headers.get()));
  RETURN_IF_ERROR(
      SLUICE_SETOPT(e, CURLOPT_TIMEOUT_MS,
                    static_cast<long>(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)))));
  response_ = HttpResponse{};
  sink_ = &sink;
  sink_status_ = absl::OkStatus();
  error_buffer_[0] = '\0';
  const auto rc = static_cast<CURLcode>(Perform());
  sink_ = nullptr;
  if (custom) {
    (void)SLUICE_SETOPT(e, CURLOPT_CUSTOMREQUEST, static_cast<const char*>(nullptr));
  }
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &response_.status);
  if (stopped_.load()) {
    return absl::CancelledError("stopped");
  }
  if (rc == CURLE_OK) {
    return std::move(response_);
  }
  if (rc == CURLE_WRITE_ERROR && !sink_status_.ok()) {
    return sink_status_;
  }
  const std::string cause = error_buffer_[0] != '\0' ? error_buffer_ : curl_easy_strerror(rc);
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    return absl::DeadlineExceededError(absl::StrCat(method, " ", url, ": ", cause));
  }
  switch (rc) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CLIENTCERT:
      return absl::FailedPreconditionError(absl::StrCat(method, " ", url, ": TLS: ", cause));
    default:
      break;
  }
  return absl::UnavailableError(absl::StrCat(method, " ", url, ": ", cause));
}

void HttpClient::Stop() {
  stopped_.store(true);
  curl_multi_wakeup(multi_.get());
}

}  // namespace sluice::kube
