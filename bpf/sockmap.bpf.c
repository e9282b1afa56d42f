// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Sockmap fast path: bytes a proxied socket receives leave through its paired socket without
 * reaching userspace. The agent still accepts, dials and balances; see
 * agent/dataplane/fastpath/sockmap_fast_path.h for the insertion order and the flow-control contract. */
#include <linux/bpf.h>
#include <linux/errno.h>
#include <bpf/bpf_helpers.h>

#include "sluice/bpf_abi.h"

/* max_entries of the socket maps and the ring array are set by the agent before load. */

/* source cookie -> its peer socket; carries no program, so a peer never runs the verdict
 * before the agent attaches it. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, __u64);
} sluice_peer SEC(".maps");

/* own cookie -> own socket; the verdict program is attached to this map. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, __u64);
} sluice_attach SEC(".maps");

/* source cookie -> bytes redirected and passed (written only here, created by the agent). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, struct sluice_count);
} sluice_count SEC(".maps");

/* source cookie -> pass or redirect, when to notify whom (written only by the agent). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, struct sluice_limit);
} sluice_limit SEC(".maps");

/* worker index -> that worker's ring of flow-control events. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(
	    values, struct {
		    __uint(type, BPF_MAP_TYPE_RINGBUF);
		    __uint(max_entries, SLUICE_RING_BYTES);
	    });
} sluice_rings SEC(".maps");

/* After a redirect of `len` bytes: once the redirected count reaches the armed mark, disarms it
 * and signals the owning worker. The agent re-arms only in reaction to a signal, so disarming
 * first means its new mark is never overwritten; a full ring leaves the mark armed and the next
 * skb retries. Returns 0 or -errno. */
static __always_inline int signal_mark(struct sluice_limit *limit, __u64 cookie, __u64 redirected)
{
	struct sluice_event ev;
	__u64 mark = limit->notify_at;
	void *ring;
	long err;

	if (mark == 0 || redirected < mark)
		return 0;
	ring = bpf_map_lookup_elem(&sluice_rings, &limit->ring);
	if (!ring)
		return -ENOENT;
	limit->notify_at = 0;
	ev.cookie = cookie;
	ev.bytes = redirected;
	err = bpf_ringbuf_output(ring, &ev, sizeof(ev), BPF_RB_FORCE_WAKEUP);
	if (err)
		limit->notify_at = mark;
	return err;
}

/* CO-RE views of the kernel's skb and TCP control block; only the sequence number is read. */
struct sk_buff {
	char cb[48];
} __attribute__((preserve_access_index));
struct tcp_skb_cb {
	__u32 seq;
} __attribute__((preserve_access_index));
extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

/* bpf_skb_adjust_room cuts at most 4095 bytes from an sk_skb per call. */
#define SLUICE_CUT_STEP 4095
#define SLUICE_CUT_STEPS 64

/* Cuts off the head of `skb` that this socket's verdict already had. The kernel's verdict path
 * (tcp_read_skb, 6.x) hands over queued skbs whole, and TCP queues a retransmitted segment whole
 * when only its tail is new, so without this the peer, or the agent's recv(), gets those bytes
 * twice (seen as a repeated 64 KiB on loopback, about one run in fifteen of 192 MiB passed).
 * Returns 0, or -1 when the repeat could not be cut (then the connection must end). */
static __always_inline int cut_repeat(struct __sk_buff *skb, struct sluice_count *count)
{
	struct sk_buff *kskb = bpf_cast_to_kern_ctx(skb);
	struct tcp_skb_cb *cb = (struct tcp_skb_cb *)kskb->cb;
	__u32 seq = cb->seq, end = seq + skb->len, repeat;
	int i;

	if (!(count->flags & SLUICE_SEQ_KNOWN)) {
		count->flags |= SLUICE_SEQ_KNOWN;
		count->next_seq = end;
		return 0;
	}
	repeat = count->next_seq - seq;
	if ((__s32)repeat <= 0) { /* in order (a gap cannot happen: TCP queues in order) */
		count->next_seq = end;
		return 0;
	}
	if ((__s32)(end - count->next_seq) > 0)
		count->next_seq = end;
	if (repeat > skb->len)
		repeat = skb->len;
	for (i = 0; i < SLUICE_CUT_STEPS && repeat > 0; i++) {
		__u32 step = repeat < SLUICE_CUT_STEP ? repeat : SLUICE_CUT_STEP;

		if (bpf_skb_adjust_room(skb, -(__s32)step, 0, 0))
			break;
		repeat -= step;
		__sync_fetch_and_add(&count->repeated, step);
	}
	if (repeat > 0) {
		count->flags |= SLUICE_SEQ_BROKEN;
		return -1;
	}
	return 0;
}

SEC("sk_skb/stream_verdict")
int sluice_verdict(struct __sk_buff *skb)
{
	struct sluice_limit *limit;
	struct sluice_count *count;
	__u64 cookie;
	long verdict;

	/* A lone FIN arrives as an empty skb; redirected, it would put EPIPE on the peer and stop
	 * its transmit side. The agent forwards the FIN itself with shutdown(). */
	if (skb->len == 0)
		return SK_DROP;
	cookie = bpf_get_socket_cookie(skb);
	count = bpf_map_lookup_elem(&sluice_count, &cookie);
	limit = bpf_map_lookup_elem(&sluice_limit, &cookie);
	if (!count || !limit)
		return SK_PASS; /* untracked: the agent reads it (it never attaches one) */
	if (cut_repeat(skb, count) || skb->len == 0)
		return SK_DROP; /* a whole repeat, or a broken stream the agent will reset */
	/* The socket's receive path is serialised by its lock; the atomics are for the agent's
	 * concurrent reads. */
	if (limit->pass || count->passed != limit->resume_at) {
		__sync_fetch_and_add(&count->passed, skb->len);
		return SK_PASS;
	}
	verdict = bpf_sk_redirect_hash(skb, &sluice_peer, &cookie, 0 /* peer's egress */);
	if (verdict == SK_PASS)
		signal_mark(limit, cookie, __sync_add_and_fetch(&count->redirected, skb->len));
	return verdict;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
