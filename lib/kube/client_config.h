// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

#include "absl/status/statusor.h"

// Where the API server is and how to authenticate to it: from a kubeconfig file, from the pod's
// service account (in-cluster), or from --master. Thread-safe (no shared state).

namespace sluice::kube {

inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

struct ClientConfig {
  std::string server;  // scheme://host[:port], no trailing slash
  // TLS. PEM data wins over the file of the same item (kubeconfig's *-data fields).
  std::string ca_file;
  std::string ca_data;
  std::string client_cert_file;
  std::string client_cert_data;
  std::string client_key_file;
  std::string client_key_data;
  bool insecure_skip_tls_verify = false;  // only when the kubeconfig says so
  // Credentials. A token file wins over a fixed token and is re-read (projected tokens rotate).
  std::string token;
  std::string token_file;
  std::string username;  // basic auth, for old kubeconfigs
  std::string password;
  std::string origin;  // "kubeconfig PATH (context C)", "in-cluster", for logs; never a secret
};

// Reads a kubeconfig: its current-context (or `context` when given), that context's cluster and
// user. Relative file paths in it are relative to the kubeconfig's directory, as kubectl does.
// exec and auth-provider plugins are not supported (an error names them).
absl::StatusOr<ClientConfig> LoadKubeconfig(const std::string& path,
                                            const std::string& context = "");

// The pod's service account: KUBERNETES_SERVICE_HOST/PORT, `dir`/token and `dir`/ca.crt.
absl::StatusOr<ClientConfig> InClusterConfig(const std::string& dir = kServiceAccountDir);

// kube-proxy's rules for --kubeconfig and --master: a kubeconfig, with --master overriding its
// server; --master alone uses the service account's token and CA when the pod has them (the
// apiserver's Service VIP is what this agent is about to program, so a DaemonSet names the
// apiserver directly); neither means in-cluster. A --master without a scheme is https.
absl::StatusOr<ClientConfig> ResolveClientConfig(const std::string& kubeconfig,
                                                 const std::string& master,
                                                 const std::string& sa_dir = kServiceAccountDir);

}  // namespace sluice::kube
