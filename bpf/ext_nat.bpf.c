// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* External NAT: tc programs on the node's external devices. A remote client's TCP or UDP packet
 * to a frontend (NodePort on a node address, external IP, LoadBalancer IP) has its destination
 * rewritten to a backend on ingress and is forwarded by a FIB lookup and a redirect, the
 * client's address intact; a local pod's replies come through the stack and have their source
 * rewritten back to the frontend on egress. A flow to a backend on another node is also SNATed
 * to the node (its replies arrive on ingress and go back by the FIB). Conntrack lives in
 * sluice_nat_ct. Anything not translated is passed to
 * the stack, where the proxy listens on the same addresses. The agent programs the maps; see
 * agent/dataplane/extnat/ext_nat.h and the layouts in bpf_abi.h. Ethernet devices only (the IP
 * header is taken to start ETH_HLEN bytes in). */
#include <linux/bpf.h>
#include <linux/errno.h>
#include <linux/icmpv6.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/stddef.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "sluice/bpf_abi.h"
#include "sluice/counter.h"
#include "sluice/lb_select.h"

/* An ICMP "fragmentation needed" / ICMPv6 "packet too big" frame (see too_big). The quote is
 * the offending packet's IP header and the first PMTU_QUOTE_L4 bytes of its TCP or UDP header
 * (ports, sequence number and room for options): what a receiver needs to find the socket
 * (tcp_v4_err, udp_err), and every packet over an MTU is longer (IPv4's least MTU is 68 = 20 +
 * 48, IPv6's 1280). The IPv6 frame is the larger; an IPv4 one uses its start. */
#define PMTU_QUOTE_L4 48
#define PMTU_V4_QUOTE (20 + PMTU_QUOTE_L4)
#define PMTU_V6_QUOTE (40 + PMTU_QUOTE_L4)
#define PMTU_V4_MSG (8 + PMTU_V4_QUOTE) /* ICMP header and quote */
#define PMTU_V6_MSG (8 + PMTU_V6_QUOTE)
#define PMTU_V4_ICMP (ETH_HLEN + 20) /* where the ICMP header starts */
#define PMTU_V6_ICMP (ETH_HLEN + 40)
#define PMTU_TRAILER 2 /* after the IP packet: see pmtu_trailer */

struct pmtu_frame {
	__u8 b[PMTU_V6_ICMP + PMTU_V6_MSG + PMTU_TRAILER];
};

/* max_entries are set by the agent before load. Service maps are not preallocated, as in
 * sock_lb.bpf.c: a replaced value stays whole for a program still reading it. */

/* frontend -> service (backend set, count, affinity). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct sluice_lb_key);
	__type(value, struct sluice_lb_svc);
} sluice_nat_svc SEC(".maps");

/* (set, index) -> backend. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct sluice_lb_slot);
	__type(value, struct sluice_lb_addr);
} sluice_nat_slot SEC(".maps");

/* (service id, backend) present while the backend serves that service (affinity checks). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct sluice_lb_member);
	__type(value, __u8);
} sluice_nat_member SEC(".maps");

/* service id -> per-CPU flows created and packets refused by source ranges (created at first
 * use: sluice/counter.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_lb_stats);
} sluice_nat_stats SEC(".maps");

/* (frontend, source prefix) -> whether that source may reach the frontend (longest match). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct sluice_nat_range);
	__type(value, __u8);
} sluice_nat_range SEC(".maps");

/* (client address, service id) -> backend it is stuck to (ClientIP affinity). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct sluice_nat_client);
	__type(value, struct sluice_lb_sticky);
} sluice_nat_sticky SEC(".maps");

/* Conntrack, two entries per flow. Preallocated and not an LRU: a full table must never evict a
 * live flow (its next packet would go to another backend); see bpf_abi.h. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct sluice_nat_tuple);
	__type(value, struct sluice_nat_ct);
} sluice_nat_ct SEC(".maps");

/* service id -> per-CPU packets and bytes translated (created here on first use). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_nat_traffic);
} sluice_nat_traffic SEC(".maps");

/* Backends on other nodes (address, as sluice_lb_addr.addr) -> 1: their flows are SNATed. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct sluice_nat_host);
	__type(value, __u8);
} sluice_nat_rmt SEC(".maps");

/* ifindex of a device the programs are attached to -> its SNAT addresses. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sluice_nat_ifaddr);
} sluice_nat_snat SEC(".maps");

/* enum sluice_nat_reason -> per-CPU packets not translated for that reason. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SLUICE_NAT_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} sluice_nat_drops SEC(".maps");

/* Per-CPU scratch where an ICMP "packet too big" is built (too large for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pmtu_frame);
} sluice_nat_pmtu SEC(".maps");

/* Conntrack ages in ns (LoadOptions), set before load. */
const volatile __u64 tcp_established_ns = 86400ULL * 1000000000ULL;
const volatile __u64 tcp_close_wait_ns = 3600ULL * 1000000000ULL;
const volatile __u64 tcp_closed_ns = 10ULL * 1000000000ULL;
const volatile __u64 udp_ns = 30ULL * 1000000000ULL;
/* SNAT ports (host order), LoadOptions. */
const volatile __u32 snat_port_min = 61000;
const volatile __u32 snat_port_max = 65535;
/* 1: DNATed packets to a local backend also leave by FIB lookup and redirect (skipping the
 * stack's forwarding and netfilter); 0: they are handed to the stack. */
const volatile __u32 fib_forward = 1;
/* BPF_F_IPV6 where the kernel knows it (6.16+), else 0: bpf_l4_csum_replace then also keeps a
 * CHECKSUM_COMPLETE skb->csum right when an IPv6 address changes; older kernels reject it. */
const volatile __u64 csum_v6_flag = 0;

/* Last-packet times are written at most this often per entry: a write per packet would bounce
 * the entry's cache line between CPUs for nothing (ages are minutes, not milliseconds). */
#define SLUICE_NAT_TOUCH_NS (100ULL * 1000000ULL)

#define SLUICE_ICMP_DEST_UNREACH 3 /* linux/icmp.h pulls in libc's sys/socket.h */
#define SLUICE_ICMP_FRAG_NEEDED 4
#define SLUICE_IP_DF 0x4000
#define SLUICE_AF_INET 2
#define SLUICE_AF_INET6 10
#define SLUICE_IP_MF 0x2000
#define SLUICE_IP_OFFSET 0x1fff
#define SLUICE_IP6_OFFSET 0xfff8
#define SLUICE_TCP_FIN 0x01
#define SLUICE_TCP_SYN 0x02
#define SLUICE_TCP_RST 0x04
#define SLUICE_TCP_ACK 0x10

/* One parsed packet: the tuple as it travels, where its L4 header starts. */
struct pkt {
	struct sluice_nat_tuple t;
	__u32 l4;
	__u8 v6;
	__u8 tcp_flags;
	__u8 pad[2];
};

enum parsed {
	P_OTHER,     /* not IP TCP/UDP/ICMP: pass untouched */
	P_OK,	     /* TCP or UDP with ports */
	P_FRAGMENT,  /* an IP fragment; ports are set for a first fragment only */
	P_MALFORMED, /* TCP or UDP whose ports cannot be read */
	P_ICMP,	     /* ICMP or ICMPv6 (unfragmented) */
};

struct frag_hdr6 {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;
	__be32 id;
};

static __always_inline void drop_count(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&sluice_nat_drops, &reason);

	if (n)
		(*n)++;
}

static __always_inline void stats_count(__u32 id, int refused)
{
	struct sluice_lb_stats *st = sluice_counter(&sluice_nat_stats, &id, struct sluice_lb_stats);

	if (!st)
		return; /* full */
	if (refused)
		st->refused++;
	else
		st->translated++;
}

static __always_inline void traffic_count(__u32 id, __u32 len)
{
	struct sluice_nat_traffic *t = sluice_counter(&sluice_nat_traffic, &id, struct sluice_nat_traffic);

	if (!t)
		return; /* full: the agent removes counters of removed services */
	t->packets++;
	t->bytes += len;
}

/* The IP header of `skb` (after Ethernet) into `p`, up to the L4 protocol. Returns the L4
 * protocol, or -1 when it is not IP, or a non-first fragment (then P_FRAGMENT in *frag). */
static __always_inline int parse_ip(struct __sk_buff *skb, struct pkt *p, int *frag)
{
	__u32 off = ETH_HLEN;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;

		if (bpf_skb_load_bytes(skb, off, &ip, sizeof(ip)) || ip.version != 4 || ip.ihl < 5)
			return -1;
		sluice_set_v4(p->t.saddr, ip.saddr);
		sluice_set_v4(p->t.daddr, ip.daddr);
		p->l4 = off + ip.ihl * 4;
		if (ip.frag_off & bpf_htons(SLUICE_IP_MF | SLUICE_IP_OFFSET)) {
			*frag = ip.frag_off & bpf_htons(SLUICE_IP_OFFSET) ? 2 : 1;
		}
		return ip.protocol;
	}
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		struct frag_hdr6 fh;

		if (bpf_skb_load_bytes(skb, off, &ip6, sizeof(ip6)) || ip6.version != 6)
			return -1;
		p->v6 = 1;
		__builtin_memcpy(p->t.saddr, &ip6.saddr, 16);
		__builtin_memcpy(p->t.daddr, &ip6.daddr, 16);
		p->l4 = off + sizeof(ip6);
		if (ip6.nexthdr != IPPROTO_FRAGMENT)
			return ip6.nexthdr; /* other extension headers: not ours to parse */
		if (bpf_skb_load_bytes(skb, p->l4, &fh, sizeof(fh)))
			return -1;
		p->l4 += sizeof(fh);
		*frag = fh.frag_off & bpf_htons(SLUICE_IP6_OFFSET) ? 2 : 1;
		return fh.nexthdr;
	}
	return -1;
}

static __always_inline enum parsed parse(struct __sk_buff *skb, struct pkt *p)
{
	int frag = 0;
	int proto;

	__builtin_memset(p, 0, sizeof(*p));
	proto = parse_ip(skb, p, &frag);
	if (proto < 0)
		return P_OTHER;
	p->t.proto = proto;
	if (frag == 2)
		return proto == IPPROTO_TCP || proto == IPPROTO_UDP ? P_FRAGMENT : P_OTHER;
	if (proto == IPPROTO_TCP) {
		__u8 h[14]; /* ports ... the flags byte */

		if (bpf_skb_load_bytes(skb, p->l4, h, sizeof(h)))
			return frag ? P_FRAGMENT : P_MALFORMED;
		__builtin_memcpy(&p->t.sport, h, 4);
		p->tcp_flags = h[13];
	} else if (proto == IPPROTO_UDP) {
		if (bpf_skb_load_bytes(skb, p->l4, &p->t.sport, 4))
			return frag ? P_FRAGMENT : P_MALFORMED;
	} else if ((proto == IPPROTO_ICMP && !p->v6) || (proto == IPPROTO_ICMPV6 && p->v6)) {
		return frag ? P_OTHER : P_ICMP;
	} else {
		return P_OTHER;
	}
	return frag ? P_FRAGMENT : P_OK;
}

static __always_inline __u64 age_of(__u8 proto, const struct sluice_nat_ct *ct)
{
	switch (sluice_nat_age_of(proto, ct->flags)) {
	case SLUICE_NAT_AGE_UDP:
		return udp_ns;
	case SLUICE_NAT_AGE_TCP_CLOSED:
		return tcp_closed_ns;
	case SLUICE_NAT_AGE_TCP_CLOSE_WAIT:
		return tcp_close_wait_ns;
	default:
		return tcp_established_ns;
	}
}

static __always_inline int fresh(__u8 proto, const struct sluice_nat_ct *ct, __u64 now)
{
	/* Signed: another CPU may have stamped the entry a moment after our `now`. */
	return (__s64)(now - ct->last_ns) <= (__s64)age_of(proto, ct);
}

/* The key of the other entry of the flow `ct` (found at `k`) belongs to. */
static __always_inline void other_key(const struct sluice_nat_tuple *k,
				      const struct sluice_nat_ct *ct, struct sluice_nat_tuple *o)
{
	__builtin_memset(o, 0, sizeof(*o));
	o->proto = k->proto;
	if (ct->flags & SLUICE_NAT_CT_REPLY) {
		/* (backend, client or SNAT address) -> forward (client, frontend) */
		if (ct->flags & SLUICE_NAT_CT_SNAT) {
			__builtin_memcpy(o->saddr, ct->nat.addr, 16);
			o->sport = ct->nat.port;
		} else {
			__builtin_memcpy(o->saddr, k->daddr, 16);
			o->sport = k->dport;
		}
		__builtin_memcpy(o->daddr, ct->to.addr, 16);
		o->dport = ct->to.port;
	} else {
		/* (client, frontend) -> reply (backend, client or SNAT address) */
		__builtin_memcpy(o->saddr, ct->to.addr, 16);
		o->sport = ct->to.port;
		if (ct->flags & SLUICE_NAT_CT_SNAT) {
			__builtin_memcpy(o->daddr, ct->nat.addr, 16);
			o->dport = ct->nat.port;
		} else {
			__builtin_memcpy(o->daddr, k->saddr, 16);
			o->dport = k->sport;
		}
	}
}

/* Whether the flow of `ct` (at `k`) is live: either direction used within its age, so a
 * one-way stream (UDP from the backend) keeps its flow. */
static __always_inline int flow_live(const struct sluice_nat_tuple *k,
				     const struct sluice_nat_ct *ct, __u64 now)
{
	struct sluice_nat_tuple o;
	struct sluice_nat_ct *other;

	if (fresh(k->proto, ct, now))
		return 1;
	other_key(k, ct, &o);
	other = bpf_map_lookup_elem(&sluice_nat_ct, &o);
	return other && fresh(k->proto, other, now);
}

/* A packet of the flow passed: stamps its entry; a FIN or RST marks both entries (the bits
 * sluice_nat_age_of reads), stamped so that the flow's new age counts from now. */
static __always_inline void touch(const struct pkt *p, struct sluice_nat_ct *ct, __u64 now)
{
	__u32 bits = 0;

	if (now - ct->last_ns > SLUICE_NAT_TOUCH_NS)
		ct->last_ns = now;
	if (p->tcp_flags & SLUICE_TCP_RST)
		bits = SLUICE_NAT_CT_RST;
	else if (p->tcp_flags & SLUICE_TCP_FIN)
		bits = ct->flags & SLUICE_NAT_CT_REPLY ? SLUICE_NAT_CT_FIN_REPLY
						       : SLUICE_NAT_CT_FIN_FWD;
	if (bits && (ct->flags & bits) != bits) {
		struct sluice_nat_tuple o;
		struct sluice_nat_ct *other;

		ct->last_ns = now;
		__sync_fetch_and_or(&ct->flags, bits);
		other_key(&p->t, ct, &o);
		other = bpf_map_lookup_elem(&sluice_nat_ct, &o);
		if (other) {
			other->last_ns = now;
			__sync_fetch_and_or(&other->flags, bits);
		}
	}
}

/* Removes both entries of a dead flow (found at `k`) so its tuple can start a new one. */
static __always_inline void forget(const struct sluice_nat_tuple *k, const struct sluice_nat_ct *ct)
{
	struct sluice_nat_tuple o;

	other_key(k, ct, &o);
	bpf_map_delete_elem(&sluice_nat_ct, &o);
	bpf_map_delete_elem(&sluice_nat_ct, k);
}

/* A TCP SYN not for a frontend opens a connection the stack routes, such as a client reaching
 * a backend directly. A NAT flow over the same client port to that backend (through a
 * frontend, a moment ago) holds this connection's reply tuple: once that flow is closed or dead
 * its entries go, or egress would rewrite this connection's replies to come from the frontend.
 * A live flow keeps them: the tuples clash, as with one client port through two frontends. */
static __always_inline void release_reply_tuple(const struct pkt *p, __u64 now)
{
	struct sluice_nat_tuple r = {.proto = p->t.proto, .sport = p->t.dport, .dport = p->t.sport};
	struct sluice_nat_ct *ct;

	__builtin_memcpy(r.saddr, p->t.daddr, 16);
	__builtin_memcpy(r.daddr, p->t.saddr, 16);
	ct = bpf_map_lookup_elem(&sluice_nat_ct, &r);
	if (ct && (ct->flags & SLUICE_NAT_CT_REPLY) && !(ct->flags & SLUICE_NAT_CT_SNAT) &&
	    (sluice_nat_age_of(r.proto, ct->flags) == SLUICE_NAT_AGE_TCP_CLOSED ||
	     !flow_live(&r, ct, now)))
		forget(&r, ct);
}

/* Whether loadBalancerSourceRanges let `saddr` reach `front`: the longest match of (frontend,
 * source) says; a frontend without ranges matches nothing. */
static __always_inline int source_allowed(const struct sluice_lb_key *front, const __u8 *saddr)
{
	struct sluice_nat_range k = {.prefixlen = 8 * sizeof(k.front) + 8 * sizeof(k.addr)};
	__u8 *allow;

	k.front = *front;
	__builtin_memcpy(k.addr, saddr, 16);
	allow = bpf_map_lookup_elem(&sluice_nat_range, &k);
	return !allow || *allow;
}

/* The backend for a new flow of `client` to `key`, with affinity; 0 when there is none. */
static __always_inline int choose(const struct sluice_lb_key *key, const __u8 *client_addr,
				  __u64 now, struct sluice_lb_addr *out, __u32 *id)
{
	struct sluice_lb_svc *svc = bpf_map_lookup_elem(&sluice_nat_svc, key);
	struct sluice_nat_client client = {};
	struct sluice_lb_addr *be = 0;

	if (!svc || svc->count == 0)
		return -ENOENT;
	if (!source_allowed(key, client_addr)) {
		stats_count(svc->id, 1);
		drop_count(SLUICE_NAT_SOURCE_RANGE);
		return -EPERM;
	}
	if (svc->affinity) {
		__builtin_memcpy(client.addr, client_addr, 16);
		client.id = svc->id;
	}
	be = sluice_lb_choose(&sluice_nat_svc, &sluice_nat_slot, &sluice_nat_member,
			      &sluice_nat_sticky, key, &svc, &client, now);
	if (!be)
		return -ENOENT;
	*out = *be;
	*id = svc->id;
	return 0;
}

/* Creates both conntrack entries of a new flow `p` to backend `be`. Returns 0, -EEXIST when
 * another CPU created the flow meanwhile, -EBUSY when a live flow holds the reply tuple (the
 * same client port reaching one backend through two frontends), or -E2BIG (no room). */
static __always_inline int ct_create(const struct pkt *p, const struct sluice_lb_addr *be, __u32 id,
				     __u64 now)
{
	struct sluice_nat_ct fwd = {.to = *be, .id = id, .last_ns = now};
	struct sluice_nat_ct rep = {.id = id, .flags = SLUICE_NAT_CT_REPLY, .last_ns = now};
	struct sluice_nat_tuple rk;
	struct sluice_nat_ct *old;
	int err;

	err = bpf_map_update_elem(&sluice_nat_ct, &p->t, &fwd, BPF_NOEXIST);
	if (err)
		return err == -EEXIST ? -EEXIST : -E2BIG;
	__builtin_memcpy(rep.to.addr, p->t.daddr, 16);
	rep.to.port = p->t.dport;
	other_key(&p->t, &fwd, &rk);
	err = bpf_map_update_elem(&sluice_nat_ct, &rk, &rep, BPF_NOEXIST);
	if (err == -EEXIST) {
		/* A dead flow's leftover (its forward entry was reused): take it over. */
		old = bpf_map_lookup_elem(&sluice_nat_ct, &rk);
		err = old && fresh(p->t.proto, old, now)
			  ? -EBUSY
			  : bpf_map_update_elem(&sluice_nat_ct, &rk, &rep, BPF_ANY);
	}
	if (err) {
		bpf_map_delete_elem(&sluice_nat_ct, &p->t);
		return err == -EBUSY ? -EBUSY : -E2BIG;
	}
	return 0;
}

/* Rewrites the destination (`src` 0) or source (`src` 1) address and port of `p` to `to`,
 * checksums included (the helpers also handle CHECKSUM_PARTIAL skbs, whose L4 field holds only
 * the pseudo-header sum). Returns 0 or -EFAULT. */
static __always_inline int rewrite(struct __sk_buff *skb, const struct pkt *p,
				   const struct sluice_lb_addr *to, int src)
{
	__u32 csum = p->l4 + (p->t.proto == IPPROTO_TCP ? 16 : 6);
	__u64 mangled = p->t.proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__be16 port = src ? p->t.sport : p->t.dport;
	__u32 port_off = p->l4 + (src ? 0 : 2);

	if (!p->v6) {
		__be32 from = sluice_get_v4(src ? p->t.saddr : p->t.daddr);
		__be32 a = sluice_get_v4(to->addr);
		__u32 at = ETH_HLEN +
			   (src ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr));

		if (bpf_l4_csum_replace(skb, csum, from, a, BPF_F_PSEUDO_HDR | mangled | 4) ||
		    bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check), from, a,
					4) ||
		    bpf_skb_store_bytes(skb, at, &a, 4, 0))
			return -EFAULT;
	} else {
		__u32 at = ETH_HLEN + (src ? offsetof(struct ipv6hdr, saddr)
					   : offsetof(struct ipv6hdr, daddr));
		__s64 diff = bpf_csum_diff((__be32 *)(src ? p->t.saddr : p->t.daddr), 16,
					   (__be32 *)to->addr, 16, 0);

		if (bpf_l4_csum_replace(skb, csum, 0, diff,
					BPF_F_PSEUDO_HDR | mangled | csum_v6_flag) ||
		    bpf_skb_store_bytes(skb, at, to->addr, 16, 0))
			return -EFAULT;
	}
	if (port != to->port && (bpf_l4_csum_replace(skb, csum, port, to->port, mangled | 2) ||
				 bpf_skb_store_bytes(skb, port_off, &to->port, 2, 0)))
		return -EFAULT;
	return 0;
}

/* The FIB's way for a packet of `p`'s family from `saddr` to `daddr`, as if it arrived on the
 * skb's device. Returns bpf_fib_lookup's result; tot_len 0 makes it check the skb against the
 * egress device's MTU, GSO packets by their segments. */
static __always_inline int fib(struct __sk_buff *skb, const struct pkt *p, const __u8 *saddr,
			       const __u8 *daddr, struct bpf_fib_lookup *f)
{
	__builtin_memset(f, 0, sizeof(*f));
	f->l4_protocol = p->t.proto;
	f->ifindex = skb->ifindex;
	if (!p->v6) {
		__u8 tos = 0;

		bpf_skb_load_bytes(skb, ETH_HLEN + offsetof(struct iphdr, tos), &tos, 1);
		f->family = SLUICE_AF_INET;
		f->tos = tos;
		f->ipv4_src = sluice_get_v4(saddr);
		f->ipv4_dst = sluice_get_v4(daddr);
	} else {
		__be32 flow = 0;

		bpf_skb_load_bytes(skb, ETH_HLEN, &flow, 4);
		f->family = SLUICE_AF_INET6;
		f->flowinfo = flow & bpf_htonl(0x0fffffff);
		__builtin_memcpy(f->ipv6_src, saddr, 16);
		__builtin_memcpy(f->ipv6_dst, daddr, 16);
	}
	return bpf_fib_lookup(skb, f, sizeof(*f), 0);
}

/* A router's TTL (hop limit) decrement. Returns 0, -ETIMEDOUT when it ran out, or -EFAULT. */
static __always_inline int ttl_dec(struct __sk_buff *skb, int v6)
{
	__u32 at =
	    ETH_HLEN + (v6 ? offsetof(struct ipv6hdr, hop_limit) : offsetof(struct iphdr, ttl));
	__u8 ttl;

	if (bpf_skb_load_bytes(skb, at, &ttl, 1))
		return -EFAULT;
	if (ttl <= 1)
		return -ETIMEDOUT;
	/* The TTL is the high byte of the 16-bit word it shares with the protocol. */
	if (!v6 && bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check),
				       bpf_htons(ttl << 8), bpf_htons((ttl - 1) << 8), 2))
		return -EFAULT;
	ttl--;
	return bpf_skb_store_bytes(skb, at, &ttl, 1, 0) ? -EFAULT : 0;
}

/* ---- Path MTU discovery for the packets forward() sends itself ----
 * A packet it cannot send for its size is answered as a router answers (RFC 1191, RFC 4443):
 * the skb itself becomes an ICMP "fragmentation needed" (IPv4 with DF) or ICMPv6 "packet too
 * big" to its sender, quoting the packet as it arrived (a client's, to the frontend: its socket
 * matches), from the address it was sent to, out of the device it came in by. One answer per
 * offending packet, each smaller than that packet, so no rate limit: the kernel exempts these
 * from its own ICMP limits too (icmpv4_mask_allow, icmpv6_mask_allow). */

static __always_inline __u16 csum_fold(__u64 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~s;
}

/* bpf_fib_lookup passes a GSO skb whatever its segments' size (is_skb_forwardable) and checks
 * no MTU when it finds no neighbour: those are checked here, a GSO skb by its segments. Returns
 * `rc`, or BPF_FIB_LKUP_RET_FRAG_NEEDED with f->mtu_result set. */
static __always_inline int mtu_check(struct __sk_buff *skb, struct bpf_fib_lookup *f, int rc)
{
	__u32 mtu = 0;

	if (!(rc == BPF_FIB_LKUP_RET_SUCCESS && skb->gso_size) && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return rc;
	if (bpf_check_mtu(skb, f->ifindex, &mtu, 0, BPF_MTU_CHK_SEGS) == BPF_MTU_CHK_RET_SUCCESS)
		return rc;
	f->mtu_result = mtu;
	return BPF_FIB_LKUP_RET_FRAG_NEEDED;
}

/* An skb that arrived CHECKSUM_PARTIAL (from a veth or virtio peer) stays so: no helper clears
 * it. Whoever completes it (the device, or skb_checksum_help) sums from csum_start, where the
 * original L4 header began and the frame's ICMP message begins, to the end, and stores the
 * folded complement csum_offset bytes in: inside the message (`at`: where the TCP or UDP
 * checksum was). The trailer after the IP packet (IP trims it by its length; other skbs ignore
 * it) makes that result the value already there, so the message reads the same whether its
 * checksum is completed or trusted. `len` is the message's length from `icmp`. */
static __always_inline void pmtu_trailer(__u8 *b, const struct pkt *p, __u32 icmp, __u32 len)
{
	__u32 at = icmp + (p->t.proto == IPPROTO_TCP ? 16 : 6);
	__u16 v, t;
	__u64 sum;

	__builtin_memcpy(&v, b + at, 2);
	sum = (__u32)bpf_csum_diff(0, 0, (__be32 *)(b + icmp), len, 0);
	t = csum_fold(sum + v);
	__builtin_memcpy(b + icmp + len, &t, 2);
}

/* The quote at `q` (`hlen` bytes of IP header) gets the addresses and ports `p` arrived with:
 * forward() runs after rewrite(). The quoted L4 checksum stays as rewritten: receivers match an
 * error by addresses and ports and do not check it (see parse_quoted). */
static __always_inline void pmtu_unrewrite(__u8 *q, const struct pkt *p, __u32 hlen)
{
	if (!p->v6) {
		__be32 s = sluice_get_v4(p->t.saddr), d = sluice_get_v4(p->t.daddr);

		__builtin_memcpy(q + offsetof(struct iphdr, saddr), &s, 4);
		__builtin_memcpy(q + offsetof(struct iphdr, daddr), &d, 4);
	} else {
		__builtin_memcpy(q + offsetof(struct ipv6hdr, saddr), p->t.saddr, 16);
		__builtin_memcpy(q + offsetof(struct ipv6hdr, daddr), p->t.daddr, 16);
	}
	__builtin_memcpy(q + hlen, &p->t.sport, 4); /* sport, dport */
}

/* Builds the IPv4 frame's IP header, ICMP message and trailer in `b`. Returns 0, -EMSGSIZE (no
 * DF: the sender did not ask; IP options: the L4 header would not start where the ICMP header
 * does, see pmtu_trailer) or -EFAULT. */
static __always_inline int pmtu_v4(struct __sk_buff *skb, const struct pkt *p, __u8 *b, __u32 mtu)
{
	struct iphdr ip = {.version = 4,
			   .ihl = 5,
			   .tos = 0xc0, /* IPTOS_PREC_INTERNETCONTROL, as the kernel's errors */
			   .tot_len = bpf_htons(sizeof(ip) + PMTU_V4_MSG),
			   .frag_off = bpf_htons(SLUICE_IP_DF),
			   .ttl = 64,
			   .protocol = IPPROTO_ICMP};
	__u8 *icmp = b + PMTU_V4_ICMP, *q = icmp + 8;
	__be16 next_mtu = bpf_htons(mtu), sum;

	if (bpf_skb_load_bytes(skb, ETH_HLEN, q, PMTU_V4_QUOTE))
		return -EFAULT;
	if (q[0] != 0x45 || !(q[offsetof(struct iphdr, frag_off)] & (SLUICE_IP_DF >> 8)))
		return -EMSGSIZE;
	pmtu_unrewrite(q, p, sizeof(ip));
	__builtin_memset(q + offsetof(struct iphdr, check), 0, 2);
	sum = csum_fold((__u32)bpf_csum_diff(0, 0, (__be32 *)q, sizeof(ip), 0));
	__builtin_memcpy(q + offsetof(struct iphdr, check), &sum, 2);
	ip.saddr = sluice_get_v4(p->t.daddr);
	ip.daddr = sluice_get_v4(p->t.saddr);
	ip.check = csum_fold((__u32)bpf_csum_diff(0, 0, (__be32 *)&ip, sizeof(ip), 0));
	__builtin_memcpy(b + ETH_HLEN, &ip, sizeof(ip));
	/* type, code, checksum, unused, next-hop MTU (RFC 1191) */
	__builtin_memset(icmp, 0, 8);
	icmp[0] = SLUICE_ICMP_DEST_UNREACH;
	icmp[1] = SLUICE_ICMP_FRAG_NEEDED;
	__builtin_memcpy(icmp + 6, &next_mtu, 2);
	sum = csum_fold((__u32)bpf_csum_diff(0, 0, (__be32 *)icmp, PMTU_V4_MSG, 0));
	__builtin_memcpy(icmp + 2, &sum, 2);
	pmtu_trailer(b, p, PMTU_V4_ICMP, PMTU_V4_MSG);
	return 0;
}

/* Builds the IPv6 frame's IP header, ICMPv6 message and trailer in `b`. Returns 0 or -EFAULT. */
static __always_inline int pmtu_v6(struct __sk_buff *skb, const struct pkt *p, __u8 *b, __u32 mtu)
{
	struct ipv6hdr ip6 = {.version = 6,
			      .payload_len = bpf_htons(PMTU_V6_MSG),
			      .nexthdr = IPPROTO_ICMPV6,
			      .hop_limit = 64};
	__be32 pseudo[2] = {bpf_htonl(PMTU_V6_MSG), bpf_htonl(IPPROTO_ICMPV6)};
	__u8 *icmp = b + PMTU_V6_ICMP, *q = icmp + 8;
	__be32 next_mtu = bpf_htonl(mtu);
	__be16 csum;
	__u64 sum;

	if (bpf_skb_load_bytes(skb, ETH_HLEN, q, PMTU_V6_QUOTE))
		return -EFAULT;
	pmtu_unrewrite(q, p, sizeof(ip6));
	__builtin_memcpy(&ip6.saddr, p->t.daddr, 16);
	__builtin_memcpy(&ip6.daddr, p->t.saddr, 16);
	__builtin_memcpy(b + ETH_HLEN, &ip6, sizeof(ip6));
	/* type, code, checksum, MTU (RFC 4443 3.2); the checksum covers the pseudo-header */
	__builtin_memset(icmp, 0, 4);
	icmp[0] = ICMPV6_PKT_TOOBIG;
	__builtin_memcpy(icmp + 4, &next_mtu, 4);
	sum = (__u32)bpf_csum_diff(0, 0, (__be32 *)(b + ETH_HLEN + offsetof(struct ipv6hdr, saddr)),
				   32, 0);
	sum = (__u32)bpf_csum_diff(0, 0, pseudo, sizeof(pseudo), sum);
	sum = (__u32)bpf_csum_diff(0, 0, (__be32 *)icmp, PMTU_V6_MSG, sum);
	csum = csum_fold(sum);
	__builtin_memcpy(icmp + 2, &csum, 2);
	pmtu_trailer(b, p, PMTU_V6_ICMP, PMTU_V6_MSG);
	return 0;
}

/* Answers `p`, which forward() cannot send for the egress MTU `mtu`; the packet is dropped
 * either way, counted SLUICE_NAT_MTU_ICMP when answered, SLUICE_NAT_MTU when not (IPv4 without
 * DF or with options). Returns the tc verdict. */
static __always_inline int too_big(struct __sk_buff *skb, const struct pkt *p, __u32 mtu)
{
	__u32 zero = 0, len = p->v6 ? PMTU_V6_ICMP + PMTU_V6_MSG + PMTU_TRAILER
				    : PMTU_V4_ICMP + PMTU_V4_MSG + PMTU_TRAILER;
	struct pmtu_frame *f = bpf_map_lookup_elem(&sluice_nat_pmtu, &zero);
	int err;

	if (!f) {
		drop_count(SLUICE_NAT_MTU);
		return TC_ACT_SHOT;
	}
	/* Back where it came from: the MACs swapped. */
	err = bpf_skb_load_bytes(skb, 0, f->b + ETH_ALEN, ETH_ALEN) ||
	      bpf_skb_load_bytes(skb, ETH_ALEN, f->b, ETH_ALEN) ||
	      bpf_skb_load_bytes(skb, 2 * ETH_ALEN, f->b + 2 * ETH_ALEN, 2);
	if (!err)
		err = p->v6 ? pmtu_v6(skb, p, f->b, mtu) : pmtu_v4(skb, p, f->b, mtu);
	/* change_tail linearizes, trims (CHECKSUM_COMPLETE kept right) and ends GSO. */
	if (err || bpf_skb_change_tail(skb, len, 0) ||
	    bpf_skb_store_bytes(skb, 0, f->b, len, BPF_F_RECOMPUTE_CSUM)) {
		drop_count(SLUICE_NAT_MTU);
		return TC_ACT_SHOT;
	}
	/* CHECKSUM_UNNECESSARY vouched for the TCP or UDP checksum, which is gone. */
	bpf_csum_level(skb, BPF_CSUM_LEVEL_RESET);
	drop_count(SLUICE_NAT_MTU_ICMP);
	return bpf_redirect(skb->ifindex, 0);
}

/* Sends a translated packet (now `saddr` -> `daddr`) on by the FIB, skipping the stack's
 * forwarding and netfilter. An SNATed packet (`snat`) must not reach the stack: with a node
 * address as its source (or, a reply, as its destination's answer from the frontend) it is a
 * martian there (fib_validate_source), so one that cannot go is dropped and counted, one over
 * the egress MTU answered as a router would (too_big). Any other is handed to the stack when the
 * FIB does not give a device or the packet does not fit: it forwards it as before, sending Time
 * Exceeded or Fragmentation Needed (translated by egress), fragments it, or delivers it
 * locally. Returns the tc verdict. */
static __always_inline int forward(struct __sk_buff *skb, const struct pkt *p, const __u8 *saddr,
				   const __u8 *daddr, int snat)
{
	struct bpf_fib_lookup f;
	int rc, err;

	if (!snat && !fib_forward)
		return TC_ACT_OK;
	rc = mtu_check(skb, &f, fib(skb, p, saddr, daddr, &f));
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) {
		if (!snat)
			return TC_ACT_OK;
		if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
			return too_big(skb, p, f.mtu_result);
		drop_count(SLUICE_NAT_NO_ROUTE);
		return TC_ACT_SHOT;
	}
	err = ttl_dec(skb, p->v6);
	if (err == -ETIMEDOUT && !snat)
		return TC_ACT_OK;
	if (err) {
		drop_count(SLUICE_NAT_NO_ROUTE);
		return TC_ACT_SHOT;
	}
	/* No neighbour entry yet: the kernel resolves it (and queues the packet meanwhile). */
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return bpf_redirect_neigh(f.ifindex, 0, 0, 0);
	if (bpf_skb_store_bytes(skb, 0, f.dmac, ETH_ALEN, 0) ||
	    bpf_skb_store_bytes(skb, ETH_ALEN, f.smac, ETH_ALEN, 0))
		return TC_ACT_SHOT;
	return bpf_redirect(f.ifindex, 0);
}

static __always_inline int is_zero(const __u8 *a)
{
	__u64 a0, a1;

	__builtin_memcpy(&a0, a, 8);
	__builtin_memcpy(&a1, a + 8, 8);
	return !(a0 | a1);
}

/* The node's address `p` to backend `be` leaves from: the SNAT address of its family on the
 * device the FIB picks. Returns 0, or -ENOENT (no route; the device has no programs or no
 * address of the family; the first packet is over its MTU). */
static __always_inline int snat_source(struct __sk_buff *skb, const struct pkt *p,
				       const struct sluice_lb_addr *be, __u8 *addr)
{
	struct sluice_nat_ifaddr *a;
	struct bpf_fib_lookup f;
	__u32 ifindex;
	int rc;

	rc = fib(skb, p, p->t.saddr, be->addr, &f);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return -ENOENT;
	ifindex = f.ifindex;
	a = bpf_map_lookup_elem(&sluice_nat_snat, &ifindex);
	if (!a)
		return -ENOENT;
	__builtin_memcpy(addr, p->v6 ? a->v6 : a->v4, 16);
	if (p->v6 ? is_zero(addr) : !sluice_is_v4_mapped(addr))
		return -ENOENT;
	return 0;
}

/* Creates both conntrack entries of a new SNATed flow `p` to backend `be`, leaving from `nat`
 * (the SNAT address; its port is set here). The reply entry (backend, SNAT address and port) is
 * reserved first, with BPF_NOEXIST, from a random port on: a live flow's port is skipped, a dead
 * one's taken over. Returns 0, -EADDRINUSE (no free port within SLUICE_NAT_SNAT_TRIES), -EEXIST
 * (another CPU created the flow meanwhile) or -E2BIG (no room). */
static __always_inline int snat_create(const struct pkt *p, const struct sluice_lb_addr *be,
				       __u32 id, __u64 now, struct sluice_lb_addr *nat)
{
	struct sluice_nat_ct fwd = {
	    .to = *be, .id = id, .flags = SLUICE_NAT_CT_SNAT, .last_ns = now};
	struct sluice_nat_ct rep = {
	    .id = id, .flags = SLUICE_NAT_CT_REPLY | SLUICE_NAT_CT_SNAT, .last_ns = now};
	__u32 n = snat_port_max - snat_port_min + 1;
	__u32 start = bpf_get_prandom_u32();
	struct sluice_nat_tuple rk = {}, ok;
	struct sluice_nat_ct *old;
	int i, err;

	if (snat_port_max < snat_port_min)
		return -EADDRINUSE;
	__builtin_memcpy(rep.to.addr, p->t.daddr, 16);
	rep.to.port = p->t.dport;
	__builtin_memcpy(rep.nat.addr, p->t.saddr, 16);
	rep.nat.port = p->t.sport;
	__builtin_memcpy(rk.saddr, be->addr, 16);
	rk.sport = be->port;
	__builtin_memcpy(rk.daddr, nat->addr, 16);
	rk.proto = p->t.proto;
	for (i = 0; i < SLUICE_NAT_SNAT_TRIES; i++) {
		if (i >= n)
			return -EADDRINUSE;
		rk.dport = bpf_htons(snat_port_min + (start + i) % n);
		err = bpf_map_update_elem(&sluice_nat_ct, &rk, &rep, BPF_NOEXIST);
		if (!err)
			break;
		if (err != -EEXIST)
			return -E2BIG;
		old = bpf_map_lookup_elem(&sluice_nat_ct, &rk);
		if (!old || flow_live(&rk, old, now))
			continue;
		/* A dead flow's port: its forward entry goes first, so that its client's next
		 * packet cannot end (forget) the flow that now holds the port. */
		other_key(&rk, old, &ok);
		bpf_map_delete_elem(&sluice_nat_ct, &ok);
		if (!bpf_map_update_elem(&sluice_nat_ct, &rk, &rep, BPF_ANY))
			break;
	}
	if (i == SLUICE_NAT_SNAT_TRIES)
		return -EADDRINUSE;
	nat->port = rk.dport;
	fwd.nat = *nat;
	err = bpf_map_update_elem(&sluice_nat_ct, &p->t, &fwd, BPF_NOEXIST);
	if (err) {
		bpf_map_delete_elem(&sluice_nat_ct, &rk);
		return err == -EEXIST ? -EEXIST : -E2BIG;
	}
	return 0;
}

/* Ingress: a remote backend's reply to an SNATed flow goes back to the client, from the
 * frontend. Returns the tc verdict. */
static __always_inline int snat_reply(struct __sk_buff *skb, const struct pkt *p,
				      struct sluice_nat_ct *ct)
{
	__u64 now = bpf_ktime_get_ns();
	struct sluice_lb_addr front, client;
	__u32 id;

	if (!flow_live(&p->t, ct, now))
		return TC_ACT_OK;
	front = ct->to;
	client = ct->nat;
	id = ct->id;
	touch(p, ct, now);
	if (rewrite(skb, p, &front, 1) || rewrite(skb, p, &client, 0))
		return TC_ACT_SHOT;
	traffic_count(id, skb->len);
	return forward(skb, p, front.addr, client.addr, 1);
}

/* A first fragment to a frontend is counted; fragments are passed to the stack, which
 * reassembles them for the proxy listening on the frontend (only a first fragment has ports;
 * translating the others would need a map keyed by IP ID, as Cilium has). */
static __always_inline void fragment(const struct pkt *p)
{
	struct sluice_lb_key key = {};

	if (!p->t.dport)
		return;
	__builtin_memcpy(key.addr, p->t.daddr, 16);
	key.port = p->t.dport;
	key.proto = p->t.proto;
	if (bpf_map_lookup_elem(&sluice_nat_svc, &key))
		drop_count(SLUICE_NAT_FRAGMENT);
}

/* Ingress: a packet of a known flow goes to its backend, whatever the service maps say now; a
 * new flow to a frontend gets a backend and its two entries, SNATed when the backend is on
 * another node. A remote backend's reply goes back to its client. Returns the tc verdict. */
static __always_inline int ingress(struct __sk_buff *skb, struct pkt *p)
{
	struct sluice_nat_ct *ct = bpf_map_lookup_elem(&sluice_nat_ct, &p->t);
	__u64 now = bpf_ktime_get_ns();
	struct sluice_lb_addr to, nat = {};
	struct sluice_lb_key key = {};
	__u32 id, snat = 0;
	int err;

	if (ct && (ct->flags & SLUICE_NAT_CT_REPLY) && (ct->flags & SLUICE_NAT_CT_SNAT))
		return snat_reply(skb, p, ct);
	/* A SYN on a closing flow is a new connection reusing the port: balance it afresh. */
	if (ct && !(ct->flags & SLUICE_NAT_CT_REPLY) &&
	    !((ct->flags & SLUICE_NAT_CT_CLOSE_BITS) &&
	      (p->tcp_flags & (SLUICE_TCP_SYN | SLUICE_TCP_ACK)) == SLUICE_TCP_SYN) &&
	    flow_live(&p->t, ct, now)) {
		to = ct->to;
		nat = ct->nat;
		id = ct->id;
		snat = ct->flags & SLUICE_NAT_CT_SNAT;
		touch(p, ct, now);
	} else {
		if (ct && !(ct->flags & SLUICE_NAT_CT_REPLY))
			forget(&p->t, ct);
		/* Only a SYN starts a TCP flow: a connection the stack took (the table was full,
		 * the frontend had no backend yet) must stay with the proxy when room appears. */
		if (p->t.proto == IPPROTO_TCP &&
		    (p->tcp_flags & (SLUICE_TCP_SYN | SLUICE_TCP_ACK)) != SLUICE_TCP_SYN)
			return TC_ACT_OK;
		__builtin_memcpy(key.addr, p->t.daddr, 16);
		key.port = p->t.dport;
		key.proto = p->t.proto;
		err = choose(&key, p->t.saddr, now, &to, &id);
		if (err == -ENOENT && p->t.proto == IPPROTO_TCP)
			release_reply_tuple(p, now);
		if (err)
			return err == -EPERM ? TC_ACT_SHOT : TC_ACT_OK;
		/* The agent gives a frontend backends of its own family only. */
		if (p->v6 == sluice_is_v4_mapped(to.addr))
			return TC_ACT_OK;
		if (bpf_map_lookup_elem(&sluice_nat_rmt, to.addr)) {
			/* No way to SNAT: the stack (the proxy) serves the flow. */
			if (snat_source(skb, p, &to, nat.addr)) {
				drop_count(SLUICE_NAT_NO_ROUTE);
				return TC_ACT_OK;
			}
			snat = SLUICE_NAT_CT_SNAT;
			err = snat_create(p, &to, id, now, &nat);
		} else {
			err = ct_create(p, &to, id, now);
		}
		if (err == -EEXIST) {
			ct = bpf_map_lookup_elem(&sluice_nat_ct, &p->t);
			if (!ct)
				return TC_ACT_OK;
			to = ct->to;
			nat = ct->nat;
			id = ct->id;
			snat = ct->flags & SLUICE_NAT_CT_SNAT;
		} else if (err == -E2BIG) {
			drop_count(SLUICE_NAT_CT_FULL);
			return TC_ACT_OK;
		} else if (err == -EADDRINUSE) {
			drop_count(SLUICE_NAT_SNAT_PORTS);
			return TC_ACT_OK;
		} else if (err) {
			return TC_ACT_OK; /* -EBUSY: the stack (the proxy) serves it */
		} else {
			stats_count(id, 0);
		}
	}
	/* Half rewritten, its checksum no longer holds: dropped. */
	if (rewrite(skb, p, &to, 0) || (snat && rewrite(skb, p, &nat, 1)))
		return TC_ACT_SHOT;
	traffic_count(id, skb->len);
	return forward(skb, p, snat ? nat.addr : p->t.saddr, to.addr, snat);
}

/* Egress: a backend's reply leaves with the frontend as its source. */
static __always_inline int egress(struct __sk_buff *skb, struct pkt *p)
{
	struct sluice_nat_ct *ct = bpf_map_lookup_elem(&sluice_nat_ct, &p->t);
	struct sluice_lb_addr to;
	__u64 now;

	/* An SNATed flow's reply entry: its packets arrive at ingress, which translates them. */
	if (!ct || !(ct->flags & SLUICE_NAT_CT_REPLY) || (ct->flags & SLUICE_NAT_CT_SNAT))
		return TC_ACT_OK;
	now = bpf_ktime_get_ns();
	if (!flow_live(&p->t, ct, now))
		return TC_ACT_OK;
	to = ct->to;
	touch(p, ct, now);
	if (rewrite(skb, p, &to, 1))
		return TC_ACT_SHOT;
	traffic_count(ct->id, skb->len);
	return TC_ACT_OK;
}

/* ---- ICMP errors about a flow (path MTU discovery, port unreachable) ----
 * The quoted packet is rewritten as the receiver must see it. The quoted IPv4 header's checksum
 * is fixed with its address; that pair sums to the same in the ICMP checksum (a valid IP header
 * always sums to 0xffff), so only a quoted port and IPv6 addresses change the ICMP checksum. The
 * quoted L4 checksum is left as it was: the quote is usually truncated, and no receiver checks
 * it (Linux matches an error to its socket by addresses and ports only). */

/* A quoted packet: its tuple as it was sent and where its headers are. */
struct quoted {
	struct sluice_nat_tuple t;
	__u32 ip;
	__u32 l4;
};

/* Fills `q` from the ICMP error in `p` (v4 destination unreachable, incl. fragmentation needed;
 * v6 destination unreachable and packet too big) quoting TCP or UDP. Returns 0 or -EINVAL. */
static __always_inline int parse_quoted(struct __sk_buff *skb, const struct pkt *p,
					struct quoted *q)
{
	__u8 type;

	__builtin_memset(q, 0, sizeof(*q));
	if (bpf_skb_load_bytes(skb, p->l4, &type, 1))
		return -EINVAL;
	if (p->v6 ? type != ICMPV6_DEST_UNREACH && type != ICMPV6_PKT_TOOBIG
		  : type != SLUICE_ICMP_DEST_UNREACH)
		return -EINVAL;
	q->ip = p->l4 + 8;
	if (!p->v6) {
		struct iphdr ip;

		if (bpf_skb_load_bytes(skb, q->ip, &ip, sizeof(ip)) || ip.version != 4 ||
		    ip.ihl < 5 || (ip.frag_off & bpf_htons(SLUICE_IP_OFFSET)))
			return -EINVAL;
		sluice_set_v4(q->t.saddr, ip.saddr);
		sluice_set_v4(q->t.daddr, ip.daddr);
		q->t.proto = ip.protocol;
		q->l4 = q->ip + ip.ihl * 4;
	} else {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, q->ip, &ip6, sizeof(ip6)) || ip6.version != 6)
			return -EINVAL;
		__builtin_memcpy(q->t.saddr, &ip6.saddr, 16);
		__builtin_memcpy(q->t.daddr, &ip6.daddr, 16);
		q->t.proto = ip6.nexthdr;
		q->l4 = q->ip + sizeof(ip6);
	}
	if (q->t.proto != IPPROTO_TCP && q->t.proto != IPPROTO_UDP)
		return -EINVAL;
	return bpf_skb_load_bytes(skb, q->l4, &q->t.sport, 4) ? -EINVAL : 0;
}

/* The quoted packet's source (`src` 1) or destination address and port become `to`. */
static __always_inline int rewrite_quoted(struct __sk_buff *skb, const struct pkt *p,
					  const struct quoted *q, const struct sluice_lb_addr *to,
					  int src)
{
	__u32 icmp_csum = p->l4 + 2;
	__be16 port = src ? q->t.sport : q->t.dport;

	if (!p->v6) {
		__be32 from = sluice_get_v4(src ? q->t.saddr : q->t.daddr);
		__be32 a = sluice_get_v4(to->addr);
		__u32 at =
		    q->ip + (src ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr));

		if (bpf_l3_csum_replace(skb, q->ip + offsetof(struct iphdr, check), from, a, 4) ||
		    bpf_skb_store_bytes(skb, at, &a, 4, 0))
			return -EFAULT;
	} else {
		__u32 at = q->ip + (src ? offsetof(struct ipv6hdr, saddr)
					: offsetof(struct ipv6hdr, daddr));
		__s64 diff = bpf_csum_diff((__be32 *)(src ? q->t.saddr : q->t.daddr), 16,
					   (__be32 *)to->addr, 16, 0);

		if (bpf_l4_csum_replace(skb, icmp_csum, 0, diff, 0) ||
		    bpf_skb_store_bytes(skb, at, to->addr, 16, 0))
			return -EFAULT;
	}
	if (port != to->port && (bpf_l4_csum_replace(skb, icmp_csum, port, to->port, 2) ||
				 bpf_skb_store_bytes(skb, q->l4 + (src ? 0 : 2), &to->port, 2, 0)))
		return -EFAULT;
	return 0;
}

/* The error's own source (`src` 1) or destination address becomes `addr`; ICMPv6's checksum
 * covers it through the pseudo-header, ICMPv4's does not. */
static __always_inline int rewrite_outer(struct __sk_buff *skb, const struct pkt *p,
					 const __u8 *addr, int src)
{
	if (!p->v6) {
		__be32 from = sluice_get_v4(src ? p->t.saddr : p->t.daddr);
		__be32 a = sluice_get_v4(addr);
		__u32 at = ETH_HLEN +
			   (src ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr));

		if (bpf_l3_csum_replace(skb, ETH_HLEN + offsetof(struct iphdr, check), from, a,
					4) ||
		    bpf_skb_store_bytes(skb, at, &a, 4, 0))
			return -EFAULT;
	} else {
		__u32 at = ETH_HLEN + (src ? offsetof(struct ipv6hdr, saddr)
					   : offsetof(struct ipv6hdr, daddr));
		__s64 diff = bpf_csum_diff((__be32 *)(src ? p->t.saddr : p->t.daddr), 16,
					   (__be32 *)addr, 16, 0);

		if (bpf_l4_csum_replace(skb, p->l4 + 2, 0, diff, BPF_F_PSEUDO_HDR | csum_v6_flag) ||
		    bpf_skb_store_bytes(skb, at, addr, 16, 0))
			return -EFAULT;
	}
	return 0;
}

static __always_inline int same_addr(const __u8 *a, const __u8 *b)
{
	__u64 a0, a1, b0, b1;

	__builtin_memcpy(&a0, a, 8);
	__builtin_memcpy(&a1, a + 8, 8);
	__builtin_memcpy(&b0, b, 8);
	__builtin_memcpy(&b1, b + 8, 8);
	return a0 == b0 && a1 == b1;
}

/* Egress: an error about a client's packet to a backend (the node's fragmentation needed when
 * the backend's link has the smaller MTU, the backend's port unreachable) must quote the packet
 * the client sent, to the frontend, and come from the frontend if the backend sent it. */
static __always_inline int icmp_error_out(struct __sk_buff *skb, const struct pkt *p)
{
	struct sluice_nat_tuple rk = {};
	struct sluice_lb_addr front;
	struct sluice_nat_ct *ct;
	struct quoted q;

	if (parse_quoted(skb, p, &q))
		return TC_ACT_OK;
	/* The quote is (client, backend): the flow's reply entry is (backend, client). */
	__builtin_memcpy(rk.saddr, q.t.daddr, 16);
	__builtin_memcpy(rk.daddr, q.t.saddr, 16);
	rk.sport = q.t.dport;
	rk.dport = q.t.sport;
	rk.proto = q.t.proto;
	ct = bpf_map_lookup_elem(&sluice_nat_ct, &rk);
	if (!ct || !(ct->flags & SLUICE_NAT_CT_REPLY) || (ct->flags & SLUICE_NAT_CT_SNAT))
		return TC_ACT_OK;
	front = ct->to;
	if (same_addr(p->t.saddr, q.t.daddr) && rewrite_outer(skb, p, front.addr, 1))
		return TC_ACT_SHOT;
	if (rewrite_quoted(skb, p, &q, &front, 0))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

/* Ingress: an error from the backend's side about an SNATed packet (SNAT address -> backend)
 * goes to the client, quoting what the client sent, from the frontend if the backend sent it.
 * Leaves by the FIB, as the flow's replies do. */
static __always_inline int icmp_snat_in(struct __sk_buff *skb, const struct pkt *p,
					const struct quoted *q, const struct sluice_nat_ct *ct)
{
	struct sluice_lb_addr front = ct->to, client = ct->nat;
	const __u8 *saddr = p->t.saddr;

	if (same_addr(p->t.saddr, q->t.daddr)) {
		if (rewrite_outer(skb, p, front.addr, 1))
			return TC_ACT_SHOT;
		saddr = front.addr;
	}
	if (rewrite_outer(skb, p, client.addr, 0) || rewrite_quoted(skb, p, q, &client, 1) ||
	    rewrite_quoted(skb, p, q, &front, 0))
		return TC_ACT_SHOT;
	return forward(skb, p, saddr, client.addr, 1);
}

/* Ingress: an error from the client's side about a reply (frontend, client) goes to the backend
 * that sent it, quoting what the backend sent (to the SNAT address, for an SNATed flow). */
static __always_inline int icmp_error_in(struct __sk_buff *skb, const struct pkt *p)
{
	struct sluice_nat_tuple fk = {};
	struct sluice_lb_addr be, nat;
	struct sluice_nat_ct *ct;
	struct quoted q;

	if (parse_quoted(skb, p, &q))
		return TC_ACT_OK;
	/* The quote is (frontend, client): the flow's forward entry is (client, frontend); or it
	 * is (SNAT address, backend): the SNATed flow's reply entry is (backend, SNAT address). */
	__builtin_memcpy(fk.saddr, q.t.daddr, 16);
	__builtin_memcpy(fk.daddr, q.t.saddr, 16);
	fk.sport = q.t.dport;
	fk.dport = q.t.sport;
	fk.proto = q.t.proto;
	ct = bpf_map_lookup_elem(&sluice_nat_ct, &fk);
	if (!ct)
		return TC_ACT_OK;
	if ((ct->flags & SLUICE_NAT_CT_REPLY) && (ct->flags & SLUICE_NAT_CT_SNAT))
		return icmp_snat_in(skb, p, &q, ct);
	if (ct->flags & SLUICE_NAT_CT_REPLY)
		return TC_ACT_OK;
	be = ct->to;
	nat = ct->nat;
	if (same_addr(p->t.daddr, q.t.saddr) && rewrite_outer(skb, p, be.addr, 0))
		return TC_ACT_SHOT;
	if (rewrite_quoted(skb, p, &q, &be, 1))
		return TC_ACT_SHOT;
	if ((ct->flags & SLUICE_NAT_CT_SNAT) && rewrite_quoted(skb, p, &q, &nat, 0))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

SEC("tc")
int sluice_nat_in(struct __sk_buff *skb)
{
	struct pkt p;

	switch (parse(skb, &p)) {
	case P_OK:
		return ingress(skb, &p);
	case P_FRAGMENT:
		fragment(&p);
		return TC_ACT_OK;
	case P_MALFORMED:
		drop_count(SLUICE_NAT_MALFORMED);
		return TC_ACT_OK;
	case P_ICMP:
		return icmp_error_in(skb, &p);
	default:
		return TC_ACT_OK;
	}
}

SEC("tc")
int sluice_nat_out(struct __sk_buff *skb)
{
	struct pkt p;

	switch (parse(skb, &p)) {
	case P_OK:
		return egress(skb, &p);
	case P_ICMP:
		return icmp_error_out(skb, &p);
	default:
		return TC_ACT_OK;
	}
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
