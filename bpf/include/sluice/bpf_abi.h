/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The one definition of what the sockmap program and the agent share. C++ checks the sizes. */
#ifndef SLUICE_BPF_ABI_H
#define SLUICE_BPF_ABI_H

#include <linux/bpf.h>
#include <linux/types.h>

/* Socket cookies (SO_COOKIE, bpf_get_socket_cookie) key every map: they are family independent
 * and never reused while the kernel runs. */

/* Size of each worker's ring (a power of two of pages). An event takes 24 bytes with its header,
 * so one ring holds about 10k signals the worker has not read yet. */
#define SLUICE_RING_BYTES (256 * 1024)

/* sluice_count value: what the program did with a source socket's bytes (written only by it). */
struct sluice_count {
	__u64 redirected; /* sent out of the peer socket */
	__u64 passed;	  /* left to the agent: queued on the socket itself, read with recv() */
};

/* sluice_limit value: the agent's instructions for a source socket (written only by it).
 * Bytes are redirected while pass == 0 and passed == resume_at; otherwise passed. So the agent
 * pauses a direction with pass = 1 (no socket leaves the maps: removing one while its receive
 * path runs drops an skb) and resumes it, once it has forwarded every passed byte itself, with
 * pass = 0 and resume_at = the passed count it saw; a byte passed after that keeps it paused. */
struct sluice_limit {
	__u64 notify_at; /* signal once redirected reaches this, then 0 */
	__u64 resume_at;
	__u32 ring; /* index into sluice_rings: the owning worker */
	__u32 pass;
	/* Only there so the agent can update the value in place (BPF_F_LOCK): a plain update of a
	 * preallocated hash element swaps in a spare and recycles the old one for the next update
	 * on that CPU, possibly another socket's, while a verdict may still be reading it. The
	 * program reads the fields without it: each is naturally aligned, and a mix of old and new
	 * fields at worst passes bytes (the conservative choice; see Pass in sockmap_link.h). */
	struct bpf_spin_lock lock;
};

/* sluice_rings record: the source socket whose redirected bytes reached notify_at. */
struct sluice_event {
	__u64 cookie;
	__u64 bytes; /* redirected, right after the crossing */
};

#endif /* SLUICE_BPF_ABI_H */
