// SPDX-License-Identifier: Apache-2.0
#include "lib/kube/client_config.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace sluice::kube {
namespace {

class ClientConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-kubeconfig-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

constexpr char kTwoContexts[] = R"(apiVersion: v1
kind: Config
current-context: files
clusters:
- name: a
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority: pki/ca.crt
- name: b
  cluster:
    server: 10.0.0.2:6443
    certificate-authority-data: Q0EgUEVN
    insecure-skip-tls-verify: true
contexts:
- name: files
  context: {cluster: a, user: cert-files}
- name: data
  context: {cluster: b, user: token}
users:
- name: cert-files
  user:
    client-certificate: /abs/client.crt
    client-key: client.key
    tokenFile: tok
- name: token
  user:
    token: secret-token
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
)";

TEST_F(ClientConfigTest, CurrentContextWithFilesRelativeToTheKubeconfig) {
  auto c = LoadKubeconfig(Write("config", kTwoContexts));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->ca_file, dir_ + "/pki/ca.crt");
  EXPECT_EQ(c->client_cert_file, "/abs/client.crt");
  EXPECT_EQ(c->client_key_file, dir_ + "/client.key");
  EXPECT_EQ(c->token_file, dir_ + "/tok");
  EXPECT_FALSE(c->insecure_skip_tls_verify);
  EXPECT_NE(c->origin.find("context files"), std::string::npos);
}

TEST_F(ClientConfigTest, NamedContextWithInlineData) {
  auto c = LoadKubeconfig(Write("config", kTwoContexts), "data");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://10.0.0.2:6443");  // no scheme: https
  EXPECT_EQ(c->ca_data, "CA PEM");
  EXPECT_EQ(c->client_cert_data, "CERT");
  EXPECT_EQ(c->client_key_data, "KEY");
  EXPECT_EQ(c->token, "secret-token");
  EXPECT_TRUE(c->insecure_skip_tls_verify);
  EXPECT_EQ(c->origin.find("secret-token"), std::string::npos);
}

TEST_F(ClientConfigTest, ErrorsNameTheFileAndTheProblem) {
  auto missing = LoadKubeconfig(dir_ + "/nope");
  EXPECT_FALSE(missing.ok());
  auto bad_yaml = LoadKubeconfig(Write("bad", "clusters: [unclosed\n"));
  EXPECT_EQ(bad_yaml.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_yaml.status().message().find("kubeconfig " + dir_ + "/bad"), std::string::npos);
  auto no_context = LoadKubeconfig(Write("c1", kTwoContexts), "other");
  EXPECT_NE(no_context.status().message().find("no contexts entry named \"other\""),
            std::string::npos)
      << no_context.status();
  auto exec = LoadKubeconfig(Write("c2", R"(current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://a"}}]
users: [{name: u, user: {exec: {command: aws}}}]
)"));
  EXPECT_EQ(exec.status().code(), absl::StatusCode::kUnimplemented);
  auto bad_b64 = LoadKubeconfig(Write("c3", R"(current-context: x
contexts: [{name: x, context: {cluster: c}}]
clusters: [{name: c, cluster: {server: "https://a", certificate-authority-data: "!!"}}]
)"));
  EXPECT_NE(bad_b64.status().message().find("certificate-authority-data"), std::string::npos);
}

TEST_F(ClientConfigTest, MasterOverridesTheKubeconfigServer) {
  auto c = ResolveClientConfig(Write("config", kTwoContexts), "https://192.0.2.1:443", dir_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://192.0.2.1:443");
  EXPECT_EQ(c->client_cert_file, "/abs/client.crt");
}

TEST_F(ClientConfigTest, MasterAloneUsesTheServiceAccountWhenMounted) {
  auto bare = ResolveClientConfig("", "http://127.0.0.1:8080", dir_);
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->server, "http://127.0.0.1:8080");
  EXPECT_TRUE(bare->token_file.empty());
  Write("token", "t");
  Write("ca.crt", "ca");
  auto sa = ResolveClientConfig("", "192.0.2.1:6443", dir_);
  ASSERT_TRUE(sa.ok());
  EXPECT_EQ(sa->server, "https://192.0.2.1:6443");
  EXPECT_EQ(sa->token_file, dir_ + "/token");
  EXPECT_EQ(sa->ca_file, dir_ + "/ca.crt");
}

TEST_F(ClientConfigTest, InCluster) {
  EXPECT_EQ(ResolveClientConfig("", "", dir_).status().code(),
            absl::StatusCode::kFailedPrecondition);
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  EXPECT_EQ(InClusterConfig(dir_).status().code(), absl::StatusCode::kNotFound);
  Write("token", "t");
  auto c = InClusterConfig(dir_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://[fd00::1]:443");
  EXPECT_EQ(c->token_file, dir_ + "/token");
  EXPECT_EQ(c->ca_file, dir_ + "/ca.crt");
}

}  // namespace
}  // namespace sluice::kube
