// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Spreads new TCP connections over the agent's workers in turn. Each worker listens on its own
 * SO_REUSEPORT socket; with this program attached to the group (SO_ATTACH_REUSEPORT_EBPF), the
 * kernel runs it for every SYN and queues the connection on the socket at the returned index
 * (the order the sockets joined the group: worker order). The kernel's default, a hash of the
 * 4-tuple, can put a few long-lived connections all on one worker while the others idle.
 * An index past the group's size makes the kernel fall back to that hash. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Set by the agent before load. */
const volatile __u32 workers = 1;

/* One turn counter for every group: the workers share the load of all services together. */
__u64 turn = 0;

SEC("socket")
int sluice_pick_worker(struct __sk_buff *skb)
{
	__u64 n = __sync_fetch_and_add(&turn, 1);

	return workers > 1 ? (int)(n % workers) : 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
