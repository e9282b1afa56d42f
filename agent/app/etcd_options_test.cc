// SPDX-License-Identifier: Apache-2.0
// --source=etcd:... and the --etcd-* flags.
#include "gtest/gtest.h"

#include "agent/app/options.h"

namespace sluice::app {
namespace {

absl::Status Parse(std::vector<std::string> args, AgentOptions& opts) {
  base::FlagSet flags("sluice-agent");
  RegisterFlags(flags, opts);
  args.insert(args.begin(), "sluice-agent");
  std::vector<char*> argv;
  argv.reserve(args.size());
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  return ParseAgentOptions(static_cast<int>(argv.size()), argv.data(), flags, opts);
}

TEST(EtcdOptionsTest, ParsesUrlsAndDefaults) {
  AgentOptions opts;
  ASSERT_TRUE(
      Parse({"--source=etcd:http://127.0.0.1:2379,https://[fd00::1]:2379/", "--etcd-cafile=/ca"},
            opts)
          .ok());
  ASSERT_EQ(opts.source_specs.size(), 1u);
  const SourceSpec& spec = opts.source_specs[0];
  EXPECT_EQ(spec.kind, SourceSpec::Kind::kEtcd);
  EXPECT_EQ(spec.urls,
            (std::vector<std::string>{"http://127.0.0.1:2379", "https://[fd00::1]:2379/"}));
  EXPECT_EQ(spec.ToString(), "etcd:http://127.0.0.1:2379,https://[fd00::1]:2379/");
  EXPECT_EQ(opts.etcd_prefix, "/sluice/registry");
  EXPECT_EQ(opts.etcd_cafile, "/ca");
}

TEST(EtcdOptionsTest, BadUrlsNameTheFlagAndTheUrl) {
  for (const char* source : {"etcd:", "etcd:127.0.0.1:2379", "etcd:http://127.0.0.1:2379,",
                             "etcd:http://a:1,ftp://b:2", "etcd:http://127.0.0.1"}) {
    AgentOptions opts;
    absl::Status st = Parse({std::string("--source=") + source}, opts);
    ASSERT_FALSE(st.ok()) << source;
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(std::string("--source=") + source), absl::string_view::npos) << st;
    EXPECT_NE(st.message().find("want http://HOST:PORT or https://HOST:PORT"),
              absl::string_view::npos)
        << st;
  }
}

TEST(EtcdOptionsTest, TlsFlagsNeedHttpsAndComeInPairs) {
  AgentOptions opts;
  absl::Status st = Parse({"--source=etcd:http://127.0.0.1:2379", "--etcd-cafile=/ca"}, opts);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("need an https:// etcd source URL"), absl::string_view::npos) << st;

  AgentOptions opts2;
  st = Parse({"--source=etcd:https://127.0.0.1:2379", "--etcd-certfile=/c"}, opts2);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--etcd-certfile and --etcd-keyfile go together"),
            absl::string_view::npos)
      << st;

  AgentOptions opts3;
  EXPECT_TRUE(Parse({"--source=etcd:https://127.0.0.1:2379", "--etcd-certfile=/c",
                     "--etcd-keyfile=/k", "--etcd-prefix=/custom/"},
                    opts3)
                  .ok());
  EXPECT_EQ(opts3.etcd_prefix, "/custom/");
}

}  // namespace
}  // namespace sluice::app
