// SPDX-License-Identifier: Apache-2.0
// The client's paged Range against an in-process KV server on loopback (the real etcd is in
// tests/integration/etcd_source_integration_test.cc).
#include "lib/etcd/client.h"

#include <atomic>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace sluice::etcd {
namespace {

// Serves Range over a map, like etcd: [key, range_end), `limit`, `more`, and a fixed header
// revision. Records every request. Thread-safe (gRPC calls it from its threads).
class FakeKv final : public etcdserverpb::KV::Service {
 public:
  grpc::Status Range(grpc::ServerContext* context, const etcdserverpb::RangeRequest* request,
                     etcdserverpb::RangeResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      requests_.push_back(*request);
      if (!fail_.ok()) {
        return fail_;
      }
    }
    if (block_.load()) {
      while (!context->IsCancelled()) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    response->mutable_header()->set_revision(revision_);
    for (auto it = data_.lower_bound(request->key());
         it != data_.end() && it->first < request->range_end(); ++it) {
      if (request->limit() > 0 && response->kvs_size() == request->limit()) {
        response->set_more(true);
        break;
      }
      mvccpb::KeyValue* kv = response->add_kvs();
      kv->set_key(it->first);
      kv->set_value(it->second);
    }
    return grpc::Status::OK;
  }

  std::map<std::string, std::string> data_;
  int64_t revision_ = 42;
  std::atomic<bool> block_{false};
  absl::Mutex mu_;
  std::vector<etcdserverpb::RangeRequest> requests_ ABSL_GUARDED_BY(mu_);
  grpc::Status fail_ ABSL_GUARDED_BY(mu_);
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&kv_);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_);
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<Client> NewClient(ClientOptions options = {},
                                    std::vector<std::string> urls = {}) {
    if (urls.empty()) {
      urls.push_back(absl::StrCat("http://127.0.0.1:", port_));
    }
    for (const auto& url : urls) {
      options.endpoints.push_back(*ParseEndpoint(url));
    }
    return *Client::Create(std::move(options));
  }
  void Fill(int n, size_t value_size) {
    for (int i = 0; i < n; ++i) {
      kv_.data_[absl::StrFormat("/p/%05d", i)] = std::string(value_size, 'v');
    }
    kv_.data_["/q/outside"] = "x";
  }

  FakeKv kv_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(ClientTest, PagesThroughEveryKeyAtTheFirstPagesRevision) {
  Fill(1234, 10);
  ClientOptions options;
  options.page_size = 100;
  options.max_page_size = 100;  // fixed pages
  auto client = NewClient(options);
  std::vector<std::string> keys;
  auto revision =
      client->RangeAll("/p/", "/p0", [&](const mvccpb::KeyValue& kv) { keys.push_back(kv.key()); });
  ASSERT_TRUE(revision.ok()) << revision.status();
  EXPECT_EQ(*revision, 42);
  ASSERT_EQ(keys.size(), 1234u);
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  EXPECT_EQ(keys.front(), "/p/00000");
  EXPECT_EQ(keys.back(), "/p/01233");
  absl::MutexLock lock(&kv_.mu_);
  ASSERT_EQ(kv_.requests_.size(), 13u);
  EXPECT_EQ(kv_.requests_[0].revision(), 0);
  for (size_t i = 1; i < kv_.requests_.size(); ++i) {
    EXPECT_EQ(kv_.requests_[i].revision(), 42);  // one snapshot
    EXPECT_EQ(kv_.requests_[i].key(), absl::StrFormat("/p/%05d", 100 * i - 1) + '\0');
  }
}

TEST_F(ClientTest, LaterPagesHoldWhatFitsInThePageBytes) {
  Fill(3000, 992);  // 1,000 bytes per key and value
  ClientOptions options;
  options.page_size = 100;
  options.page_bytes = 250'000;
  int count = 0;
  auto revision =
      NewClient(options)->RangeAll("/p/", "/p0", [&](const mvccpb::KeyValue&) { ++count; });
  ASSERT_TRUE(revision.ok()) << revision.status();
  EXPECT_EQ(count, 3000);
  absl::MutexLock lock(&kv_.mu_);
  ASSERT_EQ(kv_.requests_.size(), 13u);  // 100, then 250 a page
  EXPECT_EQ(kv_.requests_[0].limit(), 100);
  for (size_t i = 1; i < kv_.requests_.size(); ++i) {
    EXPECT_EQ(kv_.requests_[i].limit(), 250);
    EXPECT_EQ(kv_.requests_[i].key(), absl::StrFormat("/p/%05d", 100 + 250 * (i - 1) - 1) + '\0');
  }
}

TEST_F(ClientTest, PagesGrowToMaxPageSizeAndNeverBelowPageSize) {
  Fill(2000, 10);
  ClientOptions options;
  options.page_size = 100;
  options.max_page_size = 700;  // 4 MiB would fit every key
  {
    auto client = NewClient(options);
    ASSERT_TRUE(client->RangeAll("/p/", "/p0", [](const mvccpb::KeyValue&) {}).ok());
    absl::MutexLock lock(&kv_.mu_);
    ASSERT_EQ(kv_.requests_.size(), 4u);  // 100, 700, 700, 700
    EXPECT_EQ(kv_.requests_[1].limit(), 700);
    kv_.requests_.clear();
  }
  options.page_bytes = 1;  // less than one key: the first page's size stays
  ASSERT_TRUE(NewClient(options)->RangeAll("/p/", "/p0", [](const mvccpb::KeyValue&) {}).ok());
  absl::MutexLock lock(&kv_.mu_);
  ASSERT_EQ(kv_.requests_.size(), 20u);
  EXPECT_EQ(kv_.requests_.back().limit(), 100);
}

TEST_F(ClientTest, ShrinksPagesThatExceedTheMessageLimit) {
  Fill(300, 1024);
  ClientOptions options;
  options.page_size = 500;
  options.max_message_bytes = 48 << 10;  // fits 47 of these values
  auto client = NewClient(options);
  int count = 0;
  auto revision = client->RangeAll("/p/", "/p0", [&](const mvccpb::KeyValue&) { ++count; });
  ASSERT_TRUE(revision.ok()) << revision.status();
  EXPECT_EQ(count, 300);
  absl::MutexLock lock(&kv_.mu_);
  EXPECT_EQ(kv_.requests_.back().limit(), 31);  // 500 halved four times, and no growing back
  EXPECT_EQ(kv_.requests_.size(), 4u + 10u);    // four refused, then 300 keys 31 a page
}

TEST_F(ClientTest, ErrorsKeepTheirCodeAndNameTheEndpoint) {
  {
    absl::MutexLock lock(&kv_.mu_);
    kv_.fail_ = grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                             "etcdserver: mvcc: required revision has been compacted");
  }
  auto client = NewClient();
  auto revision = client->RangeAll("/p/", "/p0", [](const mvccpb::KeyValue&) {});
  ASSERT_FALSE(revision.ok());
  EXPECT_EQ(revision.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(revision.status().message(),
            absl::StrCat("range http://127.0.0.1:", port_,
                         ": etcdserver: mvcc: required revision has been compacted"));
}

TEST_F(ClientTest, MovesToTheNextEndpoint) {
  Fill(3, 1);
  // A port nobody listens on (the fake's port plus one is not guaranteed free; port 1 is).
  auto client = NewClient({}, {"http://127.0.0.1:1", absl::StrCat("http://127.0.0.1:", port_)});
  auto first = client->RangeAll("/p/", "/p0", [](const mvccpb::KeyValue&) {});
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable) << first.status();
  client->NextEndpoint();
  EXPECT_EQ(client->endpoint().port, port_);
  EXPECT_TRUE(client->RangeAll("/p/", "/p0", [](const mvccpb::KeyValue&) {}).ok());
  client->NextEndpoint();
  EXPECT_EQ(client->endpoint().port, 1);  // round robin
}

TEST_F(ClientTest, ProbeReadsOneKeyWithoutItsValue) {
  Fill(3, 1000);
  auto client = NewClient({}, {"http://127.0.0.1:1", absl::StrCat("http://127.0.0.1:", port_)});
  const absl::Status down = client->Probe("/p/", absl::Seconds(5));
  EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable) << down;
  EXPECT_NE(down.message().find("http://127.0.0.1:1"), absl::string_view::npos) << down;
  client->NextEndpoint();
  EXPECT_TRUE(client->Probe("/p/", absl::Seconds(5)).ok());
  absl::MutexLock lock(&kv_.mu_);
  ASSERT_EQ(kv_.requests_.size(), 1u);
  EXPECT_EQ(kv_.requests_[0].key(), "/p/");
  EXPECT_EQ(kv_.requests_[0].limit(), 1);
  EXPECT_TRUE(kv_.requests_[0].keys_only());
  EXPECT_FALSE(kv_.requests_[0].serializable());  // a member without a leader must not answer
}

TEST_F(ClientTest, CancelEndsTheCallInProgressAndEveryLaterOne) {
  kv_.block_ = true;
  auto client = NewClient();
  absl::Notification done;
  absl::Status status;
  std::thread caller([&] {
    status = client->RangeAll("/p/", "/p0", [](const mvccpb::KeyValue&) {}).status();
    done.Notify();
  });
  {  // the Range has reached the fake, which holds it until cancelled
    absl::MutexLock lock(&kv_.mu_);
    auto arrived = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(kv_.mu_) { return !kv_.requests_.empty(); };
    EXPECT_TRUE(kv_.mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::Seconds(10)));
  }
  EXPECT_FALSE(done.HasBeenNotified());
  client->Cancel();
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  caller.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_TRUE(client->cancelled());
  EXPECT_FALSE(client->Sleep(absl::Seconds(10)));  // returns at once
  kv_.block_ = false;
  EXPECT_EQ(client->RangeAll("/p/", "/p0", [](const mvccpb::KeyValue&) {}).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(ClientCreateTest, RejectsHalfAClientCertificateAndMissingFiles) {
  ClientOptions options;
  options.endpoints.push_back(*ParseEndpoint("https://127.0.0.1:2379"));
  options.cert_file = "/tmp/cert.pem";
  auto client = Client::Create(options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);

  options.cert_file.clear();
  options.ca_file = "/nonexistent/ca.pem";
  client = Client::Create(options);
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("/nonexistent/ca.pem"), absl::string_view::npos)
      << client.status();
}

}  // namespace
}  // namespace sluice::etcd
