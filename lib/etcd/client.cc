// SPDX-License-Identifier: Apache-2.0
#include "lib/etcd/client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "lib/base/file.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace sluice::etcd {

namespace {

constexpr size_t kMaxPemBytes = 1 << 20;

// A dead peer (a powered-off node, a dropped NAT entry) sends no FIN; a ping every 30 s finds it
// within 40 s. etcd's --grpc-keepalive-min-time defaults to 5 s, so the server accepts this rate.
constexpr int kKeepaliveTimeMs = 30'000;
constexpr int kKeepaliveTimeoutMs = 10'000;
// gRPC takes this as the minimum connect timeout too (default 20 s): an unreachable member
// fails in 5 s and we move on to the next one.
constexpr int kConnectTimeoutMs = 5'000;

// etcd's "require leader" metadata (clientv3.WithRequireLeader): the server ends the watch
// with "no leader" when its member loses the quorum, instead of going quiet.
constexpr char kRequireLeaderKey[] = "hasleader";

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("etcd client: no endpoints");
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "etcd client: a client certificate needs its key and a key its certificate");
  }
  std::shared_ptr<grpc::ChannelCredentials> tls;
  if (std::any_of(options.endpoints.begin(), options.endpoints.end(),
                  [](const Endpoint& ep) { return ep.tls; })) {
    grpc::SslCredentialsOptions ssl;
    if (!options.ca_file.empty()) {
      ASSIGN_OR_RETURN(ssl.pem_root_certs, base::ReadFile(options.ca_file, kMaxPemBytes));
    }
    if (!options.cert_file.empty()) {
      ASSIGN_OR_RETURN(ssl.pem_cert_chain, base::ReadFile(options.cert_file, kMaxPemBytes));
      ASSIGN_OR_RETURN(ssl.pem_private_key, base::ReadFile(options.key_file, kMaxPemBytes));
    }
    tls = grpc::SslCredentials(ssl);
  }
  return std::unique_ptr<Client>(new Client(std::move(options), std::move(tls)));
}

void Client::NextEndpoint() {
  current_ = (current_ + 1) % options_.endpoints.size();
  kv_.reset();
  watch_.reset();
  channel_.reset();
}

std::shared_ptr<grpc::Channel> Client::Channel() {
  if (!channel_) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(options_.max_message_bytes);
    // Without a channel-local pool, a new channel would reuse the failed channel's subchannel
    // and its reconnect backoff (up to 120 s).
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMs);
    const Endpoint& ep = endpoint();
    channel_ = grpc::CreateCustomChannel(ep.Target(),
                                         ep.tls ? tls_ : grpc::InsecureChannelCredentials(), args);
    kv_ = etcdserverpb::KV::NewStub(channel_);
    watch_ = etcdserverpb::Watch::NewStub(channel_);
  }
  return channel_;
}

bool Client::Begin(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) {
    return false;
  }
  active_ = context;
  return true;
}

void Client::End(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (active_ == context) {
    active_ = nullptr;
  }
}

void Client::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (active_ != nullptr) {
    active_->TryCancel();  // never blocks
  }
}

bool Client::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool Client::Sleep(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&cancelled_), d);
  return !cancelled_;
}

absl::Status FromGrpc(const grpc::Status& status, const std::string& op, const std::string& url) {
  // gRPC and absl share the canonical code numbering.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(op, " ", url, ": ", status.error_message()));
}

// One Range call on the callback API, so the caller can decode the previous page meanwhile. The
// completion runs on a gRPC thread and only records the status.
struct Client::PendingRange {
  etcdserverpb::RangeRequest request;
  etcdserverpb::RangeResponse response;
  grpc::ClientContext context;
  grpc::Status status;
  absl::Notification done;
};

std::unique_ptr<Client::PendingRange> Client::StartRange(const std::string& from,
                                                         const std::string& range_end,
                                                         int64_t limit, int64_t revision) {
  auto call = std::make_unique<PendingRange>();
  call->request.set_key(from);
  call->request.set_range_end(range_end);
  call->request.set_limit(limit);
  call->request.set_revision(revision);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + options_.request_timeout));
  Channel();
  if (!Begin(&call->context)) {
    call->status = grpc::Status(grpc::StatusCode::CANCELLED, "etcd client cancelled");
    call->done.Notify();
    return call;
  }
  PendingRange* raw = call.get();
  kv_->async()->Range(&raw->context, &raw->request, &raw->response, [raw](grpc::Status status) {
    raw->status = std::move(status);
    raw->done.Notify();
  });
  return call;
}

grpc::Status Client::FinishRange(PendingRange& call) {
  call.done.WaitForNotification();
  End(&call.context);
  return call.status;
}

int64_t Client::NextPageSize(const etcdserverpb::RangeResponse& page) const {
  int64_t bytes = 0;
  for (const mvccpb::KeyValue& kv : page.kvs()) {
    bytes += static_cast<int64_t>(kv.key().size() + kv.value().size());
  }
  const int64_t fit = options_.page_bytes * page.kvs_size() / std::max<int64_t>(1, bytes);
  return std::clamp(fit, options_.page_size, std::max(options_.page_size, options_.max_page_size));
}

absl::StatusOr<int64_t> Client::RangeAll(const std::string& key, const std::string& range_end,
                                         absl::FunctionRef<void(const mvccpb::KeyValue&)> fn) {
  int64_t revision = 0;  // pinned by the first page, so the pages form one snapshot
  int64_t limit = options_.page_size;
  bool shrunk = false;  // a page exceeded max_message_bytes: pages never grow again
  std::string from = key;
  std::unique_ptr<PendingRange> page = StartRange(from, range_end, limit, revision);
  while (true) {
    const grpc::Status status = FinishRange(*page);
    if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED && limit > 1) {
      limit = std::max<int64_t>(1, limit / 2);
      shrunk = true;
      VLOG(1) << "range " << endpoint().url << ": " << status.error_message() << "; retrying with "
              << limit << " keys per page";
      page = StartRange(from, range_end, limit, revision);
      continue;
    }
    if (!status.ok()) {
      return FromGrpc(status, "range", endpoint().url);
    }
    const etcdserverpb::RangeResponse& response = page->response;
    if (revision == 0) {
      revision = response.header().revision();
    }
    // Ask for the next page before decoding this one: etcd serves it meanwhile. The next call
    // is always waited for at the top of the loop, so it never outlives this function.
    std::unique_ptr<PendingRange> next;
    if (response.more() && !response.kvs().empty()) {
      if (!shrunk) {
        limit = NextPageSize(response);
      }
      from = response.kvs().rbegin()->key();
      from.push_back('\0');  // the next key after the last one read
      next = StartRange(from, range_end, limit, revision);
    }
    for (const mvccpb::KeyValue& kv : response.kvs()) {
      fn(kv);
    }
    if (!next) {
      return revision;
    }
    page = std::move(next);
  }
}

absl::Status Client::Probe(const std::string& key, absl::Duration timeout) {
  etcdserverpb::RangeRequest request;
  request.set_key(key);
  request.set_limit(1);
  request.set_keys_only(true);
  etcdserverpb::RangeResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  Channel();
  if (!Begin(&context)) {
    return absl::CancelledError("etcd client cancelled");
  }
  const grpc::Status status = kv_->Range(&context, request, &response);
  End(&context);
  return status.ok() ? absl::OkStatus() : FromGrpc(status, "range", endpoint().url);
}

absl::StatusOr<std::unique_ptr<WatchStream>> Client::Watch(
    const etcdserverpb::WatchCreateRequest& create) {
  Channel();
  auto stream = std::unique_ptr<WatchStream>(new WatchStream(*this));
  stream->url_ = endpoint().url;
  stream->context_.AddMetadata(kRequireLeaderKey, "true");
  if (!Begin(&stream->context_)) {
    stream->finished_ = true;
    return absl::CancelledError("etcd client cancelled");
  }
  stream->stream_ = watch_->Watch(&stream->context_);
  etcdserverpb::WatchRequest request;
  *request.mutable_create_request() = create;
  if (!stream->stream_->Write(request)) {
    etcdserverpb::WatchResponse discard;
    while (stream->Read(&discard)) {
    }
    return stream->Finish();
  }
  return stream;
}

WatchStream::~WatchStream() {
  if (!finished_) {
    context_.TryCancel();
    etcdserverpb::WatchResponse discard;
    while (stream_->Read(&discard)) {
    }
    (void)Finish();  // cancelled by us: nothing to report
  }
  client_.End(&context_);
}

bool WatchStream::Read(etcdserverpb::WatchResponse* response) { return stream_->Read(response); }

absl::Status WatchStream::Finish() {
  finished_ = true;
  const grpc::Status status = stream_->Finish();
  if (status.ok()) {
    // etcd never ends a watch stream on its own with OK; treat it as a lost connection.
    return absl::UnavailableError(absl::StrCat("watch ", url_, ": stream ended"));
  }
  return FromGrpc(status, "watch", url_);
}

}  // namespace sluice::etcd
