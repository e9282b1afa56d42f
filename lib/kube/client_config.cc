// SPDX-License-Identifier: Apache-2.0
#include "lib/kube/client_config.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/file.h"
#include "lib/base/status.h"
#include "yaml-cpp/yaml.h"

namespace sluice::kube {

namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxKubeconfigBytes = 4 << 20;

// The entry `name` of a kubeconfig list (clusters, contexts, users): its `field` mapping.
absl::StatusOr<YAML::Node> Named(const YAML::Node& root, const char* list, const std::string& name,
                                 const char* field) {
  const YAML::Node entries = root[list];
  if (entries && entries.IsSequence()) {
    for (const auto& entry : entries) {
      if (entry["name"] && entry["name"].as<std::string>("") == name) {
        YAML::Node value = entry[field];
        if (!value || !value.IsMap()) {
          return absl::InvalidArgumentError(
              absl::StrCat(list, " entry \"", name, "\": no ", field, " mapping"));
        }
        return value;
      }
    }
  }
  return absl::NotFoundError(absl::StrCat("no ", list, " entry named \"", name, "\""));
}

std::string Scalar(const YAML::Node& map, const char* key) {
  const YAML::Node v = map[key];
  return v && v.IsScalar() ? v.as<std::string>("") : "";
}

// A path from the kubeconfig, relative to its directory.
std::string Resolve(const fs::path& base, const std::string& path) {
  if (path.empty() || fs::path(path).is_absolute()) {
    return path;
  }
  return (base / path).string();
}

absl::StatusOr<std::string> Base64Field(const YAML::Node& map, const char* key) {
  const std::string text = Scalar(map, key);
  std::string out;
  if (!text.empty() && !absl::Base64Unescape(text, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": not valid base64"));
  }
  return out;
}

absl::Status ReadCluster(const YAML::Node& cluster, const fs::path& base, ClientConfig& out) {
  out.server = Scalar(cluster, "server");
  if (out.server.empty()) {
    return absl::InvalidArgumentError("cluster.server: required");
  }
  if (!Scalar(cluster, "tls-server-name").empty() || !Scalar(cluster, "proxy-url").empty()) {
    return absl::UnimplementedError(
        "cluster.tls-server-name and cluster.proxy-url are not supported");
  }
  out.ca_file = Resolve(base, Scalar(cluster, "certificate-authority"));
  ASSIGN_OR_RETURN(out.ca_data, Base64Field(cluster, "certificate-authority-data"));
  out.insecure_skip_tls_verify = Scalar(cluster, "insecure-skip-tls-verify") == "true";
  return absl::OkStatus();
}

absl::Status ReadUser(const YAML::Node& user, const fs::path& base, ClientConfig& out) {
  if (user["exec"] || user["auth-provider"]) {
    return absl::UnimplementedError(
        "user.exec and user.auth-provider plugins are not supported; use a token, token file or "
        "client certificate");
  }
  out.client_cert_file = Resolve(base, Scalar(user, "client-certificate"));
  ASSIGN_OR_RETURN(out.client_cert_data, Base64Field(user, "client-certificate-data"));
  out.client_key_file = Resolve(base, Scalar(user, "client-key"));
  ASSIGN_OR_RETURN(out.client_key_data, Base64Field(user, "client-key-data"));
  out.token = Scalar(user, "token");
  out.token_file = Resolve(base, Scalar(user, "tokenFile"));
  out.username = Scalar(user, "username");
  out.password = Scalar(user, "password");
  return absl::OkStatus();
}

absl::StatusOr<ClientConfig> ParseKubeconfig(const YAML::Node& root, const fs::path& base,
                                             const std::string& want_context) {
  if (!root.IsMap()) {
    return absl::InvalidArgumentError("want a mapping (kind: Config)");
  }
  const std::string context_name =
      want_context.empty() ? Scalar(root, "current-context") : want_context;
  if (context_name.empty()) {
    return absl::InvalidArgumentError("current-context: required");
  }
  ASSIGN_OR_RETURN(YAML::Node context, Named(root, "contexts", context_name, "context"));
  ClientConfig out;
  ASSIGN_OR_RETURN(YAML::Node cluster,
                   Named(root, "clusters", Scalar(context, "cluster"), "cluster"));
  RETURN_IF_ERROR(ReadCluster(cluster, base, out));
  if (const std::string user_name = Scalar(context, "user"); !user_name.empty()) {
    ASSIGN_OR_RETURN(YAML::Node user, Named(root, "users", user_name, "user"));
    RETURN_IF_ERROR(ReadUser(user, base, out));
  }
  out.origin = absl::StrCat("context ", context_name);
  return out;
}

std::string WithScheme(const std::string& server) {
  std::string out = absl::StrContains(server, "://") ? server : "https://" + server;
  while (absl::EndsWith(out, "/")) {
    out.pop_back();
  }
  return out;
}

}  // namespace

absl::StatusOr<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  ASSIGN_OR_RETURN(std::string text, base::ReadFile(path, kMaxKubeconfigBytes));
  absl::StatusOr<ClientConfig> config;
  // yaml-cpp throws on syntax errors and on failed conversions.
  try {
    config = ParseKubeconfig(YAML::Load(text), fs::path(path).parent_path(), context);
  } catch (const YAML::Exception& e) {
    config = absl::InvalidArgumentError(e.what());
  }
  if (!config.ok()) {
    return base::Annotate(config.status(), absl::StrCat("kubeconfig ", path));
  }
  config->server = WithScheme(config->server);
  config->origin = absl::StrCat("kubeconfig ", path, " (", config->origin, ")");
  return config;
}

absl::StatusOr<ClientConfig> InClusterConfig(const std::string& dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return absl::FailedPreconditionError(
        "no --kubeconfig or --master given and not in a cluster (KUBERNETES_SERVICE_HOST and "
        "KUBERNETES_SERVICE_PORT unset)");
  }
  const std::string h = host;
  ClientConfig out;
  out.server = absl::StrCat("https://", absl::StrContains(h, ":") ? "[" + h + "]" : h, ":", port);
  out.token_file = dir + "/token";
  out.ca_file = dir + "/ca.crt";
  std::error_code ec;
  if (!fs::exists(out.token_file, ec)) {
    return absl::NotFoundError(absl::StrCat("in-cluster config: ", out.token_file,
                                            " does not exist (no service account token mounted)"));
  }
  out.origin = "in-cluster service account";
  return out;
}

absl::StatusOr<ClientConfig> ResolveClientConfig(const std::string& kubeconfig,
                                                 const std::string& master,
                                                 const std::string& sa_dir) {
  if (!kubeconfig.empty()) {
    ASSIGN_OR_RETURN(ClientConfig config, LoadKubeconfig(kubeconfig));
    if (!master.empty()) {
      config.server = WithScheme(master);
      absl::StrAppend(&config.origin, ", server from --master");
    }
    return config;
  }
  if (master.empty()) {
    return InClusterConfig(sa_dir);
  }
  ClientConfig config;
  std::error_code ec;
  if (fs::exists(sa_dir + "/token", ec)) {
    config.token_file = sa_dir + "/token";
    if (fs::exists(sa_dir + "/ca.crt", ec)) {
      config.ca_file = sa_dir + "/ca.crt";
    }
    config.origin = "--master with the service account's credentials";
  } else {
    config.origin = "--master without credentials";
  }
  config.server = WithScheme(master);
  return config;
}

}  // namespace sluice::kube
