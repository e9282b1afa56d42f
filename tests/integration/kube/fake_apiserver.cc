// SPDX-License-Identifier: Apache-2.0
#include "tests/integration/kube/fake_apiserver.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace sluice::testing {

namespace {

namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The port numbers from {"api": N, "control": M}.
int PortOf(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\": ");
  int port = 0;
  if (at == std::string::npos ||
      !absl::SimpleAtoi(
          json.substr(at + key.size() + 4, json.find_first_of(",}", at) - (at + key.size() + 4)),
          &port)) {
    return 0;
  }
  return port;
}

std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i] == '+' ? ' ' : s[i]);
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<FakeApiServer> FakeApiServer::Start(Options options) {
  auto server = std::unique_ptr<FakeApiServer>(new FakeApiServer());
  char tmpl[] = "/tmp/sluice-apiserver-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    ADD_FAILURE() << "mkdtemp";
    return nullptr;
  }
  server->dir_ = tmpl;
  server->tls_ = options.tls;
  std::vector<std::string> argv = {"/usr/bin/python3", SLUICE_FAKE_APISERVER, "--ports-file",
                                   server->dir_ + "/ports"};
  if (options.tls) {
    argv.insert(argv.end(), {"--tls-dir", server->dir_});
  }
  if (options.require_client_cert) {
    argv.push_back("--client-ca");
  }
  server->process_ = std::make_unique<testutil::Subprocess>(argv);
  const std::string ports_file = server->dir_ + "/ports";
  if (!testutil::WaitFor([&] { return fs::exists(ports_file) || !server->process_->running(); },
                         absl::Seconds(20)) ||
      !fs::exists(ports_file)) {
    ADD_FAILURE() << "the test API server did not start: " << server->process_->Output();
    return nullptr;
  }
  const std::string ports = Slurp(ports_file);
  server->api_port_ = PortOf(ports, "api");
  server->control_port_ = PortOf(ports, "control");
  if (server->api_port_ == 0 || server->control_port_ == 0) {
    ADD_FAILURE() << "bad ports file: " << ports;
    return nullptr;
  }
  return server;
}

FakeApiServer::~FakeApiServer() {
  process_.reset();  // SIGKILL and reap
  if (!dir_.empty()) {
    fs::remove_all(dir_);
  }
}

std::string FakeApiServer::url() const {
  return absl::StrCat(tls_ ? "https" : "http", "://127.0.0.1:", api_port_);
}

std::string FakeApiServer::WriteKubeconfig(const KubeconfigSpec& spec) const {
  std::string cluster = absl::StrCat("    server: ", url(), "\n");
  if (spec.ca == "data") {
    absl::StrAppend(&cluster,
                    "    certificate-authority-data: ", absl::Base64Escape(Slurp(dir_ + "/ca.crt")),
                    "\n");
  } else if (spec.ca == "file") {
    absl::StrAppend(&cluster, "    certificate-authority: ca.crt\n");  // relative to the file
  } else if (spec.ca == "other") {
    absl::StrAppend(&cluster, "    certificate-authority: ", dir_, "/other-ca.crt\n");
  }
  if (spec.insecure) {
    absl::StrAppend(&cluster, "    insecure-skip-tls-verify: true\n");
  }
  std::string user = "    {}\n";
  if (!spec.token.empty() || !spec.token_file.empty() || spec.client_cert) {
    user.clear();
    if (!spec.token.empty()) {
      absl::StrAppend(&user, "    token: ", spec.token, "\n");
    }
    if (!spec.token_file.empty()) {
      absl::StrAppend(&user, "    tokenFile: ", spec.token_file, "\n");
    }
    if (spec.client_cert) {
      absl::StrAppend(&user, "    client-certificate: client.crt\n    client-key: ", dir_,
                      "/client.key\n");
    }
  }
  static int serial = 0;
  std::string path = absl::StrCat(dir_, "/kubeconfig-", ++serial);
  std::ofstream(path) << "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
                      << "clusters:\n- name: fake\n  cluster:\n"
                      << cluster << "users:\n- name: u\n  user:\n"
                      << user << "contexts:\n- name: test\n  context:\n    cluster: fake\n"
                      << "    user: u\n";
  return path;
}

std::string FakeApiServer::Control(const std::string& json) {
  httplib::Client c("127.0.0.1", control_port_);
  c.set_connection_timeout(5, 0);
  auto res = c.Post("/control", json, "application/json");
  if (!res || res->status != 200) {
    ADD_FAILURE() << "control " << json.substr(0, 200) << ": "
                  << (res ? absl::StrCat(res->status, " ", res->body) : "no answer");
    return "";
  }
  return res->body;
}

std::string FakeApiServer::Put(const std::string& resource, const std::string& object) {
  const std::string reply =
      Control(absl::StrCat(R"({"op":"put","resource":")", resource, R"(","object":)", object, "}"));
  const size_t at = reply.find(": \"");
  return at == std::string::npos ? "" : reply.substr(at + 3, reply.find('"', at + 3) - at - 3);
}

void FakeApiServer::Delete(const std::string& resource, const std::string& ns,
                           const std::string& name) {
  Control(absl::StrCat(R"({"op":"delete","resource":")", resource, R"(","namespace":")", ns,
                       R"(","name":")", name, R"("})"));
}

std::vector<ApiRequest> FakeApiServer::Requests(const std::string& path) {
  httplib::Client c("127.0.0.1", control_port_);
  auto res = c.Get("/control/requests");
  std::vector<ApiRequest> out;
  if (!res) {
    ADD_FAILURE() << "no request log";
    return out;
  }
  for (absl::string_view line : absl::StrSplit(res->body, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits(' ', 4));
    if (f.size() < 5 || f[2] != "GET") {
      continue;  // TLS handshake failures
    }
    ApiRequest r;
    (void)absl::SimpleAtod(f[0], &r.time);
    (void)absl::SimpleAtoi(f[1], &r.status);
    std::vector<std::string> url = absl::StrSplit(f[3], absl::MaxSplits('?', 1));
    r.path = url[0];
    if (url.size() > 1) {
      for (absl::string_view kv : absl::StrSplit(url[1], '&', absl::SkipEmpty())) {
        std::vector<std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
        r.query[Unescape(p[0])] = p.size() > 1 ? Unescape(p[1]) : "";
      }
    }
    r.authorization = f[4];
    if (path.empty() || r.path == path) {
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::string ServiceJson(const std::string& ns, const std::string& name, const std::string& ip,
                        int port, const std::string& labels, const std::string& extra_spec) {
  return absl::StrCat(R"({"metadata":{"name":")", name, R"(","namespace":")", ns, R"(","labels":{)",
                      labels, R"(}},"spec":{"clusterIP":")", ip, R"(","clusterIPs":[")", ip,
                      R"("],"ports":[{"name":"http","port":)", port, R"(,"protocol":"TCP"}])",
                      extra_spec.empty() ? "" : ",", extra_spec, "}}");
}

std::string SliceJson(const std::string& ns, const std::string& service, const std::string& name,
                      const std::vector<std::string>& ips, int port, const std::string& labels,
                      const std::vector<std::string>& endpoint_extra) {
  std::vector<std::string> endpoints;
  for (size_t i = 0; i < ips.size(); ++i) {
    endpoints.push_back(absl::StrCat(
        R"({"addresses":[")", ips[i], R"("],"conditions":{"ready":true},"nodeName":"node1")",
        i < endpoint_extra.size() ? "," + endpoint_extra[i] : "", "}"));
  }
  return absl::StrCat(R"({"metadata":{"name":")", name, R"(","namespace":")", ns,
                      R"(","labels":{"kubernetes.io/service-name":")", service, "\"",
                      labels.empty() ? "" : ",", labels, R"(}},"addressType":"IPv4","endpoints":[)",
                      absl::StrJoin(endpoints, ","), R"(],"ports":[{"name":"http","port":)", port,
                      R"(,"protocol":"TCP"}]})");
}

}  // namespace sluice::testing
