// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Socket-level balancing: a local client's connect() or sendmsg() to a service address is
 * rewritten to a backend before the socket leaves the process, so no proxy, NAT or conntrack
 * entry sits in its path. recvmsg() and getpeername() report the service address back. The
 * agent programs the maps from the same service table as the proxy; see
 * agent/dataplane/socklb/socket_lb.h. Anything not found here is left alone and reaches the proxy.
 */
#include <linux/bpf.h>
#include <linux/errno.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "sluice/bpf_abi.h"
#include "sluice/counter.h"
#include "sluice/lb_select.h"

/* max_entries are set by the agent before load (socket storage has none). Hash maps are not
 * preallocated: an update then links a new element and frees the old one after an RCU grace
 * period, so a program that looked up the old value keeps reading it whole (a preallocated
 * element is recycled at once). */

/* frontend -> service (backend set, count, affinity). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct sluice_lb_key);
	__type(value, struct sluice_lb_svc);
} sluice_lb_svc SEC(".maps");

/* (set, index) -> backend. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct sluice_lb_slot);
	__type(value, struct sluice_lb_addr);
} sluice_lb_slot SEC(".maps");

/* (service id, backend) present while the backend serves that service (affinity checks). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct sluice_lb_member);
	__type(value, __u8);
} sluice_lb_member SEC(".maps");

/* (client netns, service id) -> backend it is stuck to. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct sluice_lb_client);
	__type(value, struct sluice_lb_sticky);
} sluice_lb_stick SEC(".maps");

/* The reverse translation, kept in each translated socket: freed with it, and no socket's pairs
 * can push out another's (a node-wide LRU keyed by cookie was filled with dead entries by a
 * socket(); sendto(); close() loop, evicting other sockets' pending replies). Two maps, so that
 * a connected socket, the common case, carries one pair and not eight. */

/* Connected socket -> (backend, service address). */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sluice_lb_pair);
} sluice_lb_conn SEC(".maps");

/* Unconnected UDP socket -> its last SLUICE_LB_PAIRS (backend, service address) pairs. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sluice_lb_peers);
} sluice_lb_dgram SEC(".maps");

/* The previous version's (socket cookie, backend) -> service address LRU, when an upgraded
 * agent finds it pinned (otherwise a 1-entry stand-in): read only, by sluice_*_adopt. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct sluice_lb_rev);
	__type(value, struct sluice_lb_addr);
} sluice_lb_rev SEC(".maps");

/* service id -> per-CPU counters (created at first use: sluice/counter.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_lb_stats);
} sluice_lb_stats SEC(".maps");

/* (frontend, backend) pairs just removed from UDP services: the iterator closes connected
 * sockets translated to them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct sluice_lb_gone);
	__type(value, __u8);
} sluice_lb_gone SEC(".maps");

#define SLUICE_AF_INET 2
#define SLUICE_AF_INET6 10

/* Non-zero: translate only sockets of this network namespace (--socket-lb-host-netns-only). */
const volatile __u64 host_netns = 0;

/* Connected UDP sockets sluice_udp_reap closed, and connected sockets whose pair sluice_*_adopt
 * copied (read by the agent). */
__u64 reaped = 0;
__u64 adopted = 0;

static __always_inline int addr_eq(const struct sluice_lb_addr *a, const struct sluice_lb_addr *b)
{
	__u64 a0, a1, b0, b1;

	__builtin_memcpy(&a0, a->addr, 8);
	__builtin_memcpy(&a1, a->addr + 8, 8);
	__builtin_memcpy(&b0, b->addr, 8);
	__builtin_memcpy(&b1, b->addr + 8, 8);
	return a0 == b0 && a1 == b1 && a->port == b->port;
}

/* The address the caller passed, as a 16-byte address. user_ip6 allows 4-byte loads only. */
static __always_inline void read_user(struct bpf_sock_addr *ctx, int v6, struct sluice_lb_addr *a)
{
	if (v6) {
		__u32 w[4] = {ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2],
			      ctx->user_ip6[3]};

		__builtin_memcpy(a->addr, w, 16);
	} else {
		sluice_set_v4(a->addr, ctx->user_ip4);
	}
	a->port = (__u16)ctx->user_port;
	a->pad = 0;
}

static __always_inline void write_user(struct bpf_sock_addr *ctx, int v6,
				       const struct sluice_lb_addr *a)
{
	if (v6) {
		__u32 w[4];

		__builtin_memcpy(w, a->addr, 16);
		ctx->user_ip6[0] = w[0];
		ctx->user_ip6[1] = w[1];
		ctx->user_ip6[2] = w[2];
		ctx->user_ip6[3] = w[3];
	} else {
		ctx->user_ip4 = sluice_get_v4(a->addr);
	}
	ctx->user_port = a->port;
}

static __always_inline void count(__u32 id, int refused)
{
	struct sluice_lb_stats *st = sluice_counter(&sluice_lb_stats, &id, struct sluice_lb_stats);

	if (!st)
		return; /* full */
	if (refused)
		st->refused++;
	else
		st->translated++;
}

_Static_assert((SLUICE_LB_PAIRS & (SLUICE_LB_PAIRS - 1)) == 0, "a power of two: slots are masked");

/* The slot of `be` among the socket's pairs, or -1. */
static __always_inline int find_pair(const struct sluice_lb_peers *p,
				     const struct sluice_lb_addr *be)
{
	if (!be->port)
		return -1; /* no backend has port 0: it would match an empty slot */
	for (int i = 0; i < SLUICE_LB_PAIRS; i++) {
		if (addr_eq(&p->pair[i].backend, be))
			return i;
	}
	return -1;
}

/* Records in the socket that replies from `be` are to look like they come from `front`. Returns
 * 0, or -ENOMEM when the socket has no storage (the kernel refused the allocation, or the
 * socket's option memory, net.core.optmem_max, is used up). Threads sending on one socket at
 * once may race on a slot: a wrong pair then misleads only that socket. */
static __always_inline int remember(struct bpf_sock_addr *ctx, const struct sluice_lb_addr *be,
				    const struct sluice_lb_addr *front, int connecting)
{
	struct sluice_lb_pair *c;
	struct sluice_lb_peers *p;
	int at;

	if (connecting) {
		c = bpf_sk_storage_get(&sluice_lb_conn, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!c)
			return -ENOMEM;
		c->front = *front;
		c->backend = *be;
		return 0;
	}
	p = bpf_sk_storage_get(&sluice_lb_dgram, ctx->sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!p)
		return -ENOMEM;
	at = find_pair(p, be);
	if (at < 0) {
		at = __sync_fetch_and_add(&p->next, 1);
		at &= SLUICE_LB_PAIRS - 1;
		p->pair[at].front = *front;
		p->pair[at].backend = *be;
		return 0;
	}
	at &= SLUICE_LB_PAIRS - 1;
	/* An unconnected UDP socket sends many datagrams: write only what changed. */
	if (!addr_eq(&p->pair[at].front, front))
		p->pair[at].front = *front;
	return 0;
}

/* Rewrites the destination of a connect() or sendmsg() to a backend of the service it names.
 * Returns 0 (translated or not ours) or -ECONNREFUSED (the service has no backend). */
static __always_inline int translate(struct bpf_sock_addr *ctx, int v6, int connecting)
{
	struct sluice_lb_key key = {};
	struct sluice_lb_addr front;
	struct sluice_lb_addr *be = 0;
	struct sluice_lb_svc *svc;
	struct sluice_lb_client client = {};
	__u64 now = 0;

	if (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP)
		return 0;
	if (host_netns && bpf_get_netns_cookie(ctx) != host_netns)
		return 0;
	read_user(ctx, v6, &front);
	__builtin_memcpy(key.addr, front.addr, 16);
	key.port = front.port;
	key.proto = ctx->protocol;
	svc = bpf_map_lookup_elem(&sluice_lb_svc, &key);
	if (!svc)
		return 0;
	if (svc->count == 0) {
		/* A connected UDP socket is left to the proxy, which refuses it too (ICMP port
		 * unreachable: ECONNREFUSED on its next call) but serves the same socket once an
		 * endpoint is ready; a refused connect() would leave the client unconnected. */
		if (connecting && ctx->protocol == IPPROTO_UDP)
			return 0;
		count(svc->id, 1);
		return -ECONNREFUSED;
	}
	if (svc->affinity) {
		now = bpf_ktime_get_ns();
		client.netns = bpf_get_netns_cookie(ctx);
		client.id = svc->id;
	}
	be = sluice_lb_choose(&sluice_lb_svc, &sluice_lb_slot, &sluice_lb_member, &sluice_lb_stick,
			      &key, &svc, &client, now);
	if (!be)
		return 0; /* untranslated: the proxy serves it */
	/* A v4 backend cannot be reached from a v6-only socket, nor a v6 one from an IPv4
	 * socket; the agent gives each frontend backends of its own family only. */
	if (!v6 && !sluice_is_v4_mapped(be->addr))
		return 0;
	/* Without a reverse entry the client would see replies from the backend: leave the socket
	 * untranslated, the proxy serves it. */
	if (remember(ctx, be, &front, connecting))
		return 0;
	write_user(ctx, v6, be);
	count(svc->id, 0);
	return 0;
}

/* recvmsg() and getpeername(): a translated socket sees the service address as its peer. Only
 * recvmsg() (`datagram`) looks at an unconnected socket's pairs. */
static __always_inline void reverse(struct bpf_sock_addr *ctx, int v6, int datagram)
{
	struct sluice_lb_addr be;
	struct sluice_lb_pair *c;
	struct sluice_lb_peers *p;
	int at;

	read_user(ctx, v6, &be);
	c = bpf_sk_storage_get(&sluice_lb_conn, ctx->sk, 0, 0);
	if (c && addr_eq(&c->backend, &be)) {
		write_user(ctx, v6, &c->front);
		return;
	}
	if (!datagram)
		return;
	p = bpf_sk_storage_get(&sluice_lb_dgram, ctx->sk, 0, 0);
	if (!p)
		return; /* never translated by sendmsg() */
	at = find_pair(p, &be);
	if (at >= 0)
		write_user(ctx, v6, &p->pair[at & (SLUICE_LB_PAIRS - 1)].front);
}

/* Hook verdicts: 1 lets the call go on; 0 fails it with the errno set here (EPERM without). */
static __always_inline int verdict(int err)
{
	if (!err)
		return 1;
	bpf_set_retval(err);
	return 0;
}

SEC("cgroup/connect4")
int sluice_connect4(struct bpf_sock_addr *ctx)
{
	return verdict(translate(ctx, 0, 1));
}

SEC("cgroup/connect6")
int sluice_connect6(struct bpf_sock_addr *ctx)
{
	return verdict(translate(ctx, 1, 1));
}

SEC("cgroup/sendmsg4")
int sluice_sendmsg4(struct bpf_sock_addr *ctx)
{
	return verdict(translate(ctx, 0, 0));
}

SEC("cgroup/sendmsg6")
int sluice_sendmsg6(struct bpf_sock_addr *ctx)
{
	return verdict(translate(ctx, 1, 0));
}

SEC("cgroup/recvmsg4")
int sluice_recvmsg4(struct bpf_sock_addr *ctx)
{
	reverse(ctx, 0, 1);
	return 1;
}

SEC("cgroup/recvmsg6")
int sluice_recvmsg6(struct bpf_sock_addr *ctx)
{
	reverse(ctx, 1, 1);
	return 1;
}

SEC("cgroup/getpeername4")
int sluice_peer4(struct bpf_sock_addr *ctx)
{
	reverse(ctx, 0, 0);
	return 1;
}

SEC("cgroup/getpeername6")
int sluice_peer6(struct bpf_sock_addr *ctx)
{
	reverse(ctx, 1, 0);
	return 1;
}

/* The kernel types the socket iterator needs, as CO-RE relocations against the running
 * kernel's BTF (no vmlinux.h: the build host's BTF is not the target's). */
struct sock_common {
	__be32 skc_daddr;
	__be16 skc_dport;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
} __attribute__((preserve_access_index));

struct bpf_iter_meta {
	void *seq;
} __attribute__((preserve_access_index));

struct udp_sock;
struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct udp_sock *udp_sk;
} __attribute__((preserve_access_index));

struct tcp_sock;
struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
} __attribute__((preserve_access_index));

extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

#define SLUICE_UDP_CONNECTED 1 /* TCP_ESTABLISHED: a connect()ed UDP socket */

/* The address `sk` is connected to, as a 16-byte address. Returns 0, or -ENOTCONN. */
static __always_inline int peer_of(struct sock_common *sk, struct sluice_lb_addr *out)
{
	if (sk->skc_family == SLUICE_AF_INET)
		sluice_set_v4(out->addr, sk->skc_daddr);
	else if (sk->skc_family == SLUICE_AF_INET6)
		__builtin_memcpy(out->addr, &sk->skc_v6_daddr, 16);
	else
		return -ENOTCONN;
	out->port = sk->skc_dport;
	return out->port ? 0 : -ENOTCONN;
}

/* Closes connected UDP sockets this program translated to a (frontend, backend) in sluice_lb_gone:
 * a DNS client connect()s once and would otherwise send to a removed backend forever. The
 * socket's next call fails (ECONNABORTED) and the client opens a new one. Kernel >= 6.5. */
SEC("iter/udp")
int sluice_udp_reap(struct bpf_iter__udp *ctx)
{
	struct sock_common *sk = (struct sock_common *)ctx->udp_sk;
	struct sluice_lb_gone gone = {};
	struct sluice_lb_pair *c;

	if (!sk || sk->skc_state != SLUICE_UDP_CONNECTED || peer_of(sk, &gone.backend))
		return 0;
	c = bpf_sk_storage_get(&sluice_lb_conn, ctx->udp_sk, 0, 0);
	if (!c || !addr_eq(&c->backend, &gone.backend))
		return 0; /* not one of ours: it connected to the backend's address itself */
	gone.front = c->front;
	if (bpf_map_lookup_elem(&sluice_lb_gone, &gone) && bpf_sock_destroy(sk) == 0)
		__sync_fetch_and_add(&reaped, 1);
	return 0;
}

/* Copies a connected socket's pair from the previous version's LRU into its storage, unless it
 * has one already (translated again since). `sk` is `skc` as a full socket. */
static __always_inline void adopt(struct sock_common *skc, void *sk)
{
	struct sluice_lb_rev rev = {};
	struct sluice_lb_addr *front;
	struct sluice_lb_pair *c;

	if (peer_of(skc, &rev.backend))
		return;
	rev.cookie = bpf_get_socket_cookie(skc);
	front = bpf_map_lookup_elem(&sluice_lb_rev, &rev);
	if (!front)
		return;
	c = bpf_sk_storage_get(&sluice_lb_conn, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!c || c->backend.port)
		return;
	c->front = *front;
	c->backend = rev.backend;
	__sync_fetch_and_add(&adopted, 1);
}

SEC("iter/tcp")
int sluice_tcp_adopt(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct tcp_sock *tp;

	if (!skc)
		return 0;
	tp = bpf_skc_to_tcp_sock(skc); /* NULL for request and time-wait sockets */
	if (tp)
		adopt(skc, tp);
	return 0;
}

SEC("iter/udp")
int sluice_udp_adopt(struct bpf_iter__udp *ctx)
{
	struct sock_common *sk = (struct sock_common *)ctx->udp_sk;

	if (sk && sk->skc_state == SLUICE_UDP_CONNECTED)
		adopt(sk, ctx->udp_sk);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
