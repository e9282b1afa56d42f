// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "absl/status/status.h"

struct bpf_link;

namespace sluice::socklb {

// Runs the socket iterator program attached as `link` (iter/tcp, iter/udp) to its end over
// the sockets of the calling thread's network namespace: the only ones an iterator sees.
absl::Status WalkSocketsHere(bpf_link* link);

// The same in this network namespace, then in every other one a process on the node is in
// (pods), each from a short-lived thread that enters it and is joined at once (setns needs
// CAP_SYS_ADMIN; a namespace that cannot be entered is reported, the others are walked).
absl::Status WalkSocketsEverywhere(bpf_link* link);

}  // namespace sluice::socklb
