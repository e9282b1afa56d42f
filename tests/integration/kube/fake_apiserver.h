// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/testutil/process.h"

namespace sluice::testing {

// One API request the test API server answered, from its log.
struct ApiRequest {
  double time = 0;  // unix seconds
  int status = 0;   // 0: connection reset by an injected fault
  std::string path;
  std::map<std::string, std::string> query;  // decoded
  std::string authorization;                 // the header, "-" when absent
  bool watch() const { return query.contains("watch"); }
};

// How WriteKubeconfig authenticates the client and verifies the server.
struct KubeconfigSpec {
  std::string token;
  std::string token_file;
  bool client_cert = false;  // the test CA's client certificate (files)
  std::string ca = "data";   // "data" (base64 inline), "file", "other" (a wrong CA), ""
  bool insecure = false;     // insecure-skip-tls-verify
};

// Runs tests/integration/kube/fake_apiserver.py (a test API server that follows the
// documented list/watch protocol) on 127.0.0.1 ports of the calling thread's network
// namespace, and drives it through its control port. The process dies with the object.
// Thread: the test's.
class FakeApiServer final {
 public:
  struct Options {
    bool tls = false;
    bool require_client_cert = false;
  };
  // Returns nullptr (after ADD_FAILURE) when the server does not come up.
  static std::unique_ptr<FakeApiServer> Start(Options options);
  ~FakeApiServer();

  std::string url() const;
  const std::string& dir() const { return dir_; }
  std::string WriteKubeconfig(const KubeconfigSpec& spec) const;

  // POSTs a control operation (a JSON object, see fake_apiserver.py); returns the reply.
  std::string Control(const std::string& json);
  // Creates or updates an object (JSON); returns its new resourceVersion.
  std::string Put(const std::string& resource, const std::string& object);
  void Delete(const std::string& resource, const std::string& ns, const std::string& name);
  std::vector<ApiRequest> Requests(const std::string& path = "");
  std::string Output() const { return process_ ? process_->Output() : ""; }

 private:
  FakeApiServer() = default;
  std::string dir_;
  bool tls_ = false;
  int api_port_ = 0;
  int control_port_ = 0;
  std::unique_ptr<testutil::Subprocess> process_;
};

// A Service in `ns` with one TCP port named "http"; labels and extra spec fields are JSON
// members without braces ("\"a\":\"b\"").
std::string ServiceJson(const std::string& ns, const std::string& name, const std::string& ip,
                        int port, const std::string& labels = "",
                        const std::string& extra_spec = "");
// An EndpointSlice of `service` with ready endpoints on `ips` and port "http" -> `port`;
// `endpoint_extra` is added to every endpoint (e.g. hints), `labels` to the service-name label.
std::string SliceJson(const std::string& ns, const std::string& service, const std::string& name,
                      const std::vector<std::string>& ips, int port, const std::string& labels = "",
                      const std::vector<std::string>& endpoint_extra = {});

}  // namespace sluice::testing
