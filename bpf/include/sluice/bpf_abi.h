/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The one definition of what the sockmap program and the agent share. C++ checks the sizes. */
#ifndef SLUICE_BPF_ABI_H
#define SLUICE_BPF_ABI_H

#include <linux/types.h>

/* Socket cookies (SO_COOKIE, bpf_get_socket_cookie) key every map: they are family independent
 * and never reused while the kernel runs. */

/* Size of each worker's ring (a power of two of pages). An event takes 24 bytes with its header,
 * so one ring holds about 10k signals the worker has not read yet. */
#define SLUICE_RING_BYTES (256 * 1024)

/* sluice_limit value: when to tell the agent about a direction, and through which ring. */
struct sluice_limit {
	__u64 notify_at; /* signal once the source's redirected bytes reach this, then 0 */
	__u32 ring;	 /* index into sluice_rings: the owning worker */
	__u32 pad;
};

/* sluice_rings record: the source socket whose redirected bytes reached notify_at. */
struct sluice_event {
	__u64 cookie;
	__u64 bytes; /* the counter right after the crossing */
};

#endif /* SLUICE_BPF_ABI_H */
