// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

#include "absl/status/status.h"
#include "lib/net/address.h"

// Just enough rtnetlink for the self-test to build its scratch namespaces without the `ip`
// binary (the agent's image need not have it). Each call opens a NETLINK_ROUTE socket, so it
// acts on the calling thread's network namespace. Thread-safe.
namespace sluice::extnat::scratch {

// A veth pair: `name` here, `peer` in the namespace of `peer_netns_fd`.
absl::Status AddVeth(const std::string& name, const std::string& peer, int peer_netns_fd);
absl::Status AddAddress(const std::string& device, const net::Cidr& address);
absl::Status SetUp(const std::string& device);

}  // namespace sluice::extnat::scratch
