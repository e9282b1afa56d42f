// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "etcd/rpc.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "lib/etcd/endpoint.h"

namespace sluice::etcd {

struct ClientOptions {
  std::vector<Endpoint> endpoints;  // tried in order, round robin
  // PEM files for https endpoints: the CA to trust (empty: the system roots), and a client
  // certificate and key (both or neither).
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  // Deadline of one Range page. Watches have none; keepalive pings find a dead peer instead.
  absl::Duration request_timeout = absl::Seconds(30);
  // Bounds what one response can make us allocate. Range pages shrink to fit under it.
  int max_message_bytes = 32 << 20;
  // Keys of the first Range page, and the fewest of any later one: 500 values of a few KiB each
  // stay far below max_message_bytes.
  int64_t page_size = 500;
  // Later pages hold as many keys as the last page's average size fits in page_bytes (at most
  // max_page_size): etcd spends CPU per page, so 100,000 endpoints read in 6 pages instead of
  // 40 cost etcd a third less CPU (docs/performance.md). Two pages are in memory at once (one
  // decoded while the next arrives).
  int64_t page_bytes = 4 << 20;
  int64_t max_page_size = 10'000;
};

// A failed gRPC call as a Status naming the operation and the endpoint ("range URL: ...").
absl::Status FromGrpc(const grpc::Status& status, const std::string& op, const std::string& url);

class Client;

// One Watch stream. Owned by the caller; destroying it cancels the call.
// Thread: the thread that opened it.
class WatchStream final {
 public:
  ~WatchStream();
  // Blocks for the next response; false when the stream has ended (then call Finish).
  bool Read(etcdserverpb::WatchResponse* response);
  // The call's final status, annotated with the endpoint. Call once, after Read returned false.
  absl::Status Finish();

 private:
  friend class Client;
  explicit WatchStream(Client& client) : client_(client) {}

  Client& client_;
  std::string url_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest, etcdserverpb::WatchResponse>>
      stream_;
  bool finished_ = false;
};

// A client for the two etcd v3 calls the etcd source needs, KV.Range and Watch, over one gRPC
// channel to the current endpoint. On a failure the caller moves to the next endpoint with
// NextEndpoint(), which drops the channel: a fresh channel (with its own subchannels) dials at
// once instead of waiting out gRPC's reconnect backoff from the failed one.
// Thread: one caller thread; Cancel() is thread-safe.
class Client final {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClientOptions options);
  ~Client() = default;

  const Endpoint& endpoint() const { return options_.endpoints[current_]; }
  size_t endpoints() const { return options_.endpoints.size(); }
  void NextEndpoint();

  // Reads every key in [key, range_end) at one revision, page by page, calling `fn` for each
  // in key order (the next page is fetched while `fn` runs over one). Returns that revision. A
  // page too big for max_message_bytes is retried with fewer keys. OutOfRange means the
  // revision was compacted between pages.
  absl::StatusOr<int64_t> RangeAll(const std::string& key, const std::string& range_end,
                                   absl::FunctionRef<void(const mvccpb::KeyValue&)> fn);

  // One cheap linearizable read (at most one key, no value) of `key` with a `timeout`: OK
  // when the current endpoint answered with a quorum behind it, the call's status otherwise.
  absl::Status Probe(const std::string& key, absl::Duration timeout);

  // Opens a Watch stream and sends `create`. etcd is asked to end the stream when its member
  // has no leader, so a partitioned member does not leave us watching a stale view.
  absl::StatusOr<std::unique_ptr<WatchStream>> Watch(
      const etcdserverpb::WatchCreateRequest& create);

  // Thread-safe. Fails the call in progress and every later one (Cancelled), and wakes Sleep.
  void Cancel();
  bool cancelled() const;
  // Waits for `d`, or less if cancelled; returns !cancelled().
  bool Sleep(absl::Duration d);

 private:
  friend class WatchStream;
  struct PendingRange;
  explicit Client(ClientOptions options, std::shared_ptr<grpc::ChannelCredentials> tls)
      : options_(std::move(options)), tls_(std::move(tls)) {}
  std::shared_ptr<grpc::Channel> Channel();
  // Starts one Range page; FinishRange waits for it (always called, also on errors).
  std::unique_ptr<PendingRange> StartRange(const std::string& from, const std::string& range_end,
                                           int64_t limit, int64_t revision);
  grpc::Status FinishRange(PendingRange& call);
  // Keys of the page after `page`: what fits in page_bytes at its average key and value size.
  int64_t NextPageSize(const etcdserverpb::RangeResponse& page) const;
  // Registers the context of the call about to start, so Cancel() can reach it. False if
  // already cancelled.
  bool Begin(grpc::ClientContext* context);
  void End(grpc::ClientContext* context);

  const ClientOptions options_;
  const std::shared_ptr<grpc::ChannelCredentials> tls_;  // null without https endpoints
  size_t current_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_;
  std::unique_ptr<etcdserverpb::Watch::Stub> watch_;

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace sluice::etcd
