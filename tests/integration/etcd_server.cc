// SPDX-License-Identifier: Apache-2.0
#include "tests/integration/etcd_server.h"

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sluice::testing {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<EtcdServer>> EtcdServer::Start(Options options) {
  auto server = std::unique_ptr<EtcdServer>(new EtcdServer());
  server->options_ = options;
  char tmpl[] = "/tmp/sluice-etcd-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    return absl::InternalError("mkdtemp failed");
  }
  server->dir_ = tmpl;
  server->client_port_ = testutil::FreePort();
  server->peer_port_ = testutil::FreePort();
  server->url_ =
      absl::StrCat(options.tls ? "https" : "http", "://127.0.0.1:", server->client_port_);
  if (options.tls) {
    if (absl::Status st = server->MakeCertificates(); !st.ok()) {
      return st;
    }
  }
  if (absl::Status st = server->Launch(); !st.ok()) {
    return st;
  }
  return server;
}

EtcdServer::~EtcdServer() {
  process_.reset();  // SIGKILL by PID, reaped
  if (!dir_.empty()) {
    fs::remove_all(dir_);
  }
}

absl::Status EtcdServer::MakeCertificates() {
  // A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA.
  const std::string script = absl::StrCat(
      "set -e; cd ", dir_, "\n",
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=sluice-test-ca "
      "-keyout ca-key.pem -out ca.pem 2>/dev/null\n",
      "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > ext\n",
      "for n in server client; do\n",
      "  openssl req -newkey rsa:2048 -nodes -subj /CN=$n -keyout $n-key.pem -out $n.csr "
      "2>/dev/null\n",
      "  openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 "
      "-extfile ext -out $n.pem 2>/dev/null\n",
      "done\n");
  std::string out;
  if (testutil::RunCommand({"sh", "-c", script}, &out) != 0) {
    return absl::InternalError("openssl: " + out);
  }
  return absl::OkStatus();
}

absl::Status EtcdServer::Launch() {
  const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port_);
  std::vector<std::string> argv = {"etcd",
                                   "--name=test",
                                   "--data-dir=" + dir_ + "/data",
                                   "--listen-client-urls=" + url_,
                                   "--advertise-client-urls=" + url_,
                                   "--listen-peer-urls=" + peer,
                                   "--initial-advertise-peer-urls=" + peer,
                                   "--initial-cluster=test=" + peer,
                                   "--logger=zap",
                                   "--log-level=warn"};
  if (options_.tls) {
    argv.insert(argv.end(),
                {"--cert-file=" + dir_ + "/server.pem", "--key-file=" + dir_ + "/server-key.pem",
                 "--trusted-ca-file=" + dir_ + "/ca.pem", "--client-cert-auth"});
  }
  process_ = std::make_unique<testutil::Subprocess>(argv);
  const bool up =
      testutil::WaitFor([&] { return !process_->running() || Revision().ok(); }, absl::Seconds(20));
  if (!up || !process_->running()) {
    return absl::UnavailableError("etcd did not start: " + process_->Output());
  }
  return absl::OkStatus();
}

absl::Status EtcdServer::Stop() {
  if (!process_ || !process_->running()) {
    return absl::OkStatus();
  }
  process_->Signal(SIGTERM);
  if (process_->Wait(absl::Seconds(20)) < 0) {
    return absl::DeadlineExceededError("etcd did not stop");
  }
  return absl::OkStatus();
}

absl::Status EtcdServer::Kill() {
  if (process_ && process_->running()) {
    process_->Signal(SIGKILL);
    if (process_->Wait(absl::Seconds(20)) < 0) {
      return absl::DeadlineExceededError("etcd did not die");
    }
  }
  return absl::OkStatus();
}

absl::Status EtcdServer::Restart() {
  if (absl::Status st = Stop(); !st.ok()) {
    return st;
  }
  return Launch();
}

absl::StatusOr<std::string> EtcdServer::Ctl(std::vector<std::string> args) {
  std::vector<std::string> argv = {"etcdctl", "--endpoints=" + url_, "--command-timeout=5s"};
  if (options_.tls) {
    argv.push_back("--cacert=" + ca_file());
    argv.push_back("--cert=" + client_cert());
    argv.push_back("--key=" + client_key());
  }
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  if (int code = testutil::RunCommand(argv, &out, absl::Seconds(20)); code != 0) {
    return absl::UnavailableError(absl::StrCat("etcdctl ", args[0], " exited ", code, ": ", out));
  }
  return out;
}

absl::Status EtcdServer::Put(const std::string& key, const std::string& value) {
  // "--" so that a value starting with '-' is not read as a flag.
  return Ctl({"put", "--", key, value}).status();
}

absl::Status EtcdServer::Delete(const std::string& key) { return Ctl({"del", key}).status(); }

absl::StatusOr<int64_t> EtcdServer::Revision() {
  absl::StatusOr<std::string> out = Ctl({"get", "--write-out=json", "/"});
  if (!out.ok()) {
    return out.status();
  }
  // {"header":{...,"revision":12,...}}; no std::regex: GCC 12 under ASan warns inside it.
  constexpr std::string_view kField = "\"revision\":";
  const size_t at = out->find(kField);
  const size_t end =
      at == std::string::npos ? at : out->find_first_not_of("0123456789", at + kField.size());
  int64_t revision = 0;
  if (at == std::string::npos ||
      !absl::SimpleAtoi(out->substr(at + kField.size(), end - at - kField.size()), &revision)) {
    return absl::InternalError("no revision in: " + *out);
  }
  return revision;
}

absl::StatusOr<int64_t> EtcdServer::CompactAll() {
  absl::StatusOr<int64_t> revision = Revision();
  if (!revision.ok()) {
    return revision;
  }
  if (absl::StatusOr<std::string> out = Ctl({"compact", absl::StrCat(*revision)}); !out.ok()) {
    return out.status();
  }
  return revision;
}

}  // namespace sluice::testing
