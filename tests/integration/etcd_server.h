// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "tests/testutil/process.h"

namespace sluice::testing {

// A real single-member etcd (Debian's etcd-server) on 127.0.0.1 with free ports and a temporary
// data directory, driven with the real etcdctl. It runs in the creating thread's network
// namespace. The destructor kills it (by PID) and removes the directory. Thread: the test's.
class EtcdServer final {
 public:
  struct Options {
    // Serve https with client-certificate authentication; certificates are made with openssl
    // in the temporary directory: ca.pem, server.pem, client.pem, client-key.pem.
    bool tls = false;
  };
  static absl::StatusOr<std::unique_ptr<EtcdServer>> Start(Options options);
  static absl::StatusOr<std::unique_ptr<EtcdServer>> Start() { return Start(Options{}); }
  ~EtcdServer();
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  const std::string& url() const { return url_; }
  int client_port() const { return client_port_; }
  // PEM files when started with tls.
  std::string ca_file() const { return dir_ + "/ca.pem"; }
  std::string client_cert() const { return dir_ + "/client.pem"; }
  std::string client_key() const { return dir_ + "/client-key.pem"; }

  // SIGTERM and wait; Restart() starts it again on the same ports and data.
  absl::Status Stop();
  // SIGKILL (a crash: no goodbye to clients) and reap; Restart() brings it back.
  absl::Status Kill();
  absl::Status Restart();

  absl::Status Put(const std::string& key, const std::string& value);
  absl::Status Delete(const std::string& key);
  absl::StatusOr<int64_t> Revision();
  // Compacts history up to the current revision; returns it.
  absl::StatusOr<int64_t> CompactAll();
  std::string Log() const { return process_ ? process_->Output() : ""; }

 private:
  EtcdServer() = default;
  absl::Status Launch();
  absl::StatusOr<std::string> Ctl(std::vector<std::string> args);
  absl::Status MakeCertificates();

  Options options_;
  std::string dir_;
  std::string url_;
  int client_port_ = 0;
  int peer_port_ = 0;
  std::unique_ptr<testutil::Subprocess> process_;
};

}  // namespace sluice::testing
