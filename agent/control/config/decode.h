// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "agent/control/config/model.h"

namespace simdjson::dom {
class element;
}

// Decodes Kubernetes manifests (JSON or YAML) into the object model with kept libraries:
// simdjson for JSON, yaml-cpp for YAML (converted node by node to the same decoder).
// Thread-safe (no shared state).

namespace sluice::config {

// One rejected object. `kind` and `id` are filled as far as they could be read, so a caller can
// keep the last good version of that object.
struct DecodeError {
  std::string kind;                  // "Service", "EndpointSlice", or "" if unknown
  std::optional<NamespacedName> id;  // set when metadata.name could be read
  std::string location;              // "document 2", "items[3]", "[1]" within the manifest
  std::string path;                  // field path, e.g. "spec.ports[0].port"
  std::string message;               // e.g. "must be between 1 and 65535, got 70000"
  // "Service default/web (document 2): spec.ports[0].port: must be between 1 and 65535, got 70000"
  // Parts that are unknown are left out; an unknown kind reads "object":
  // "object ([3]): kind: required", "EndpointSlice: metadata.name: required".
  std::string ToString() const;
};

struct Manifest {
  std::vector<ServicePtr> services;
  std::vector<EndpointSlicePtr> endpoint_slices;
  std::vector<DecodeError> errors;  // bad objects; the good ones above still apply
  int ignored = 0;                  // objects of other kinds (ConfigMap, Deployment, ...)
};

enum class Format { kAuto, kJson, kYaml };

// Which special addresses (unspecified, loopback, link-local, multicast) a source may hand the
// proxy; each would become a local address and a listener, or a backend, on the node. Every
// source gets the API server's own rule (ValidateNonSpecialIP in k8s.io/kubernetes
// pkg/apis/core/validation, applied to externalIPs and EndpointSlice addresses).
struct AddressPolicy {
  // The kube source: the API server has validated the object, so nothing it accepts may be
  // refused here; clusterIPs (allocated from the service CIDR) and LB ingress IPs (checked for
  // syntax only, by ValidateLoadBalancerStatus) are left alone. False for the file and etcd
  // sources, which no API server guards: there all four address fields refuse every special
  // range, and all of multicast (224.0.0.0/4, ff00::/8), not only link-local multicast.
  bool api_validated = false;
  // Endpoint addresses and cluster IPs on loopback (127.0.0.0/8, ::1) accepted:
  // --allow-loopback, for local demos, tests and benchmarks whose backends (or services) live
  // on 127.0.0.x. The API server refuses loopback endpoints.
  bool allow_loopback = false;
};

// Decodes a manifest holding one object, a `kind: List` (or any `*List`) with `items`, a JSON
// array of objects, or a multi-document YAML stream. kAuto picks JSON when the first non-space
// byte is '{' or '[', else YAML; text picked as JSON that is not valid JSON is tried as YAML
// (flow style: `{kind: Service, ...}`) before its JSON error is reported. A syntax error in the
// text fails the whole call (InvalidArgument naming the line/position); a semantically bad
// object only adds a DecodeError, whose location counts YAML documents from 1, empty ones
// included, when the stream has more than one. An object without metadata.namespace is placed
// in "default".
absl::StatusOr<Manifest> DecodeManifest(std::string_view text, Format format = Format::kAuto,
                                        const AddressPolicy& policy = {});

// Decode one already-parsed object (used by the kube and etcd sources, which parse JSON
// themselves). The element must be a JSON object of the named kind; kind and apiVersion may be
// absent (items of an API list response carry neither) but must match when present. The error
// message is DecodeError::ToString() without a location. The element's document must outlive
// the call only: the result owns its data. simdjson.h must be compiled with the definitions that
// PkgConfig::SIMDJSON exports (SIMDJSON_THREADS_ENABLED changes dom::parser's layout), which
// linking sluice_config provides.
absl::StatusOr<ServicePtr> DecodeService(const simdjson::dom::element& object,
                                         const AddressPolicy& policy = {});
absl::StatusOr<EndpointSlicePtr> DecodeEndpointSlice(const simdjson::dom::element& object,
                                                     const AddressPolicy& policy = {});

// metadata.namespace/name read leniently (namespace defaulted as the decoders do), for naming an
// object the decoder refused; nullopt when not readable.
std::optional<NamespacedName> ReadObjectId(const simdjson::dom::element& object);

}  // namespace sluice::config
