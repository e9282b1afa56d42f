/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The one definition of what the BPF programs and the agent share. C++ checks the sizes. */
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
	__u64 repeated;	  /* handed to the verdict a second time and cut off (see sockmap.bpf.c) */
	__u32 next_seq;	  /* TCP sequence number just past the last byte the verdict had */
	__u32 flags;	  /* SLUICE_SEQ_* */
};

#define SLUICE_SEQ_KNOWN 1  /* next_seq is set */
#define SLUICE_SEQ_BROKEN 2 /* a repeat could not be cut off: the stream is no longer whole */

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

/* ---- Socket-level balancing (bpf/sock_lb.bpf.c) ----
 * Addresses are 16 bytes with IPv4 as ::ffff:a.b.c.d, so a dual-stack IPv6 socket connecting to
 * a mapped IPv4 service address finds the same entry. Ports are in network byte order. */

/* sluice_lb_svc key: a frontend, the address a local client connects or sends to. */
struct sluice_lb_key {
	__u8 addr[16];
	__u16 port;
	__u8 proto; /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;
};

/* A backend (the value of sluice_lb_slot), or a service address. */
struct sluice_lb_addr {
	__u8 addr[16];
	__u16 port;
	__u16 pad;
};

#define SLUICE_LB_RANDOM 1 /* sluice_lb_svc.flags: pick at random, not round-robin */

/* sluice_lb_svc value (written only by the agent, as a whole: a new value replaces the old
 * element, so a connect() sees either the old backend set or the new one, never a mix). */
struct sluice_lb_svc {
	__u32 id;	/* the service port: counters, affinity, membership */
	__u32 set;	/* its backends are slots (set, 0..count-1) */
	__u32 count;	/* 0: refuse the connect / datagram */
	__u32 affinity; /* ClientIP affinity timeout in seconds; 0: none */
	__u32 flags;
	__u32 next; /* round-robin position, advanced by the program */
};

/* sluice_lb_slot key. */
struct sluice_lb_slot {
	__u32 set;
	__u32 index;
};

/* sluice_lb_member key: backend is in service id (kept for services with affinity only). */
struct sluice_lb_member {
	__u32 id;
	struct sluice_lb_addr backend;
};

/* sluice_lb_sticky key and value: ClientIP affinity. A local client has no source address at
 * connect() time, so its identity is its network namespace (a pod, or the host). */
struct sluice_lb_client {
	__u64 netns;
	__u32 id;
	__u32 pad;
};
struct sluice_lb_sticky {
	struct sluice_lb_addr backend;
	__u32 pad;
	__u64 last_ns; /* bpf_ktime_get_ns() of the last connect that used it */
};

/* One reverse translation: a reply from backend is reported as coming from front. The value of
 * sluice_lb_conn, socket-local storage (BPF_MAP_TYPE_SK_STORAGE) of a connected socket (TCP, or
 * UDP after connect()), read by getpeername(), recvmsg() and the UDP reaper; a re-connect
 * replaces it. */
struct sluice_lb_pair {
	struct sluice_lb_addr backend;
	struct sluice_lb_addr front;
};

/* Pairs an unconnected UDP socket remembers: one per backend it has datagrams out to
 * (round-robin sends successive datagrams for one service to different backends). 8 keep the
 * value at 328 bytes (a 512-byte kernel allocation with the storage header) and cover a
 * resolver's parallel A/AAAA queries to a few nameservers. */
#define SLUICE_LB_PAIRS 8

/* sluice_lb_dgram value: socket-local storage of an unconnected UDP socket, read by recvmsg().
 * A backend already listed keeps its slot (its front is rewritten); a new one takes slot
 * next % SLUICE_LB_PAIRS, so past 8 backends the one written longest ago is forgotten and its
 * replies show the backend. */
struct sluice_lb_peers {
	struct sluice_lb_pair pair[SLUICE_LB_PAIRS];
	__u32 next; /* how many new backends were written (the next slot, modulo) */
	__u32 pad;
};

/* sluice_lb_rev key, of the version before socket storage: its node-wide LRU (value: the
 * service address) is read once by an upgraded agent, which copies connected sockets' entries
 * into sluice_lb_conn and then unpins it. */
struct sluice_lb_rev {
	__u64 cookie;
	struct sluice_lb_addr backend;
	__u32 pad;
};

/* sluice_lb_gone key: a backend that left the service reached at front (connected UDP sockets
 * translated there are closed). */
struct sluice_lb_gone {
	struct sluice_lb_addr front;
	struct sluice_lb_addr backend;
};

/* sluice_lb_stats value (per CPU), by service id. */
struct sluice_lb_stats {
	__u64 translated; /* connects and datagrams sent to a backend */
	__u64 refused;	  /* no backend: ECONNREFUSED */
};

/* ---- External NAT (bpf/ext_nat.bpf.c): tc programs on the node's external devices ----
 * Remote clients' packets to a frontend (NodePort on a node address, external IP, LoadBalancer
 * IP) are translated to a backend on ingress and the replies back on egress. Frontends, backend
 * sets, membership and counters use the socket-LB layouts above in the program's own maps, so
 * socklb::ServiceMaps programs them: sluice_nat_svc (sluice_lb_key -> sluice_lb_svc),
 * sluice_nat_slot (sluice_lb_slot -> sluice_lb_addr), sluice_nat_member (sluice_lb_member -> u8),
 * sluice_nat_stats (per CPU, id -> sluice_lb_stats: translated = flows created, refused =
 * packets dropped by loadBalancerSourceRanges). A frontend without an entry, or with count 0,
 * is passed to the stack, where the proxy listens on the same address. */

/* sluice_nat_range key (LPM trie), value __u8 allow. A guarded frontend (a LoadBalancer IP with
 * loadBalancerSourceRanges) has one entry {prefixlen 160, front} -> 0 and one per range
 * {160 + the range's length (IPv4: 96 + it, as ::ffff:0:0/96), front, range} -> 1: the longest
 * match says whether a source may reach it; an unguarded frontend matches nothing. */
struct sluice_nat_range {
	__u32 prefixlen;
	struct sluice_lb_key front;
	__u8 addr[16];
};

/* sluice_nat_sticky key (LRU; value sluice_lb_sticky): ClientIP affinity of a remote client. */
struct sluice_nat_client {
	__u8 addr[16];
	__u32 id;
};

/* sluice_nat_ct key: one direction of a flow, as its packets carry it. A flow has two entries:
 * the forward one keyed (client, frontend) and the reply one keyed (backend, client), or, when
 * the flow is SNATed (SLUICE_NAT_CT_SNAT), (backend, node address and SNAT port). */
struct sluice_nat_tuple {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

#define SLUICE_NAT_CT_REPLY 1	   /* reply entry: `to` replaces the source, not the destination */
#define SLUICE_NAT_CT_RST 2	   /* TCP: an RST was seen (either direction) */
#define SLUICE_NAT_CT_SNAT 4	   /* the client's source became the node's (a remote backend) */
#define SLUICE_NAT_CT_FIN_FWD 8	   /* TCP: the client sent a FIN */
#define SLUICE_NAT_CT_FIN_REPLY 16 /* TCP: the backend sent a FIN */
#define SLUICE_NAT_CT_CLOSE_BITS                                                                   \
	(SLUICE_NAT_CT_RST | SLUICE_NAT_CT_FIN_FWD | SLUICE_NAT_CT_FIN_REPLY)

/* The age of a flow, the one rule the program and the agent's collector both apply to the
 * flags (both entries of a flow carry the same RST/FIN bits: the program sets them on both):
 *   UDP (any protocol but TCP)            -> udp
 *   TCP, RST, or a FIN from both sides    -> tcp_closed (short: the connection is over)
 *   TCP, a FIN from one side only         -> tcp_close_wait (half closed: it may still send)
 *   TCP, otherwise                        -> tcp_established
 * As the kernel's conntrack (CLOSE, TIME_WAIT) and Cilium (its TCP FIN timeout) do: ageing a
 * closed connection by the close-wait time held each entry an hour, so the table sustained only
 * max_flows / 2 / 3600 s new connections per second. Every age counts idle time. */
enum sluice_nat_age {
	SLUICE_NAT_AGE_UDP,
	SLUICE_NAT_AGE_TCP_ESTABLISHED,
	SLUICE_NAT_AGE_TCP_CLOSE_WAIT,
	SLUICE_NAT_AGE_TCP_CLOSED,
};

static inline enum sluice_nat_age sluice_nat_age_of(__u8 proto, __u32 flags)
{
	if (proto != 6 /* IPPROTO_TCP: linux/in.h and netinet/in.h clash in C++ */)
		return SLUICE_NAT_AGE_UDP;
	if ((flags & SLUICE_NAT_CT_RST) ||
	    (flags & (SLUICE_NAT_CT_FIN_FWD | SLUICE_NAT_CT_FIN_REPLY)) ==
		(SLUICE_NAT_CT_FIN_FWD | SLUICE_NAT_CT_FIN_REPLY))
		return SLUICE_NAT_AGE_TCP_CLOSED;
	if (flags & (SLUICE_NAT_CT_FIN_FWD | SLUICE_NAT_CT_FIN_REPLY))
		return SLUICE_NAT_AGE_TCP_CLOSE_WAIT;
	return SLUICE_NAT_AGE_TCP_ESTABLISHED;
}

/* sluice_nat_ct value: forward entry, `to` is the backend (the new destination); reply entry,
 * `to` is the frontend (the new source). With SLUICE_NAT_CT_SNAT `nat` is, in the forward entry,
 * the node address and port the packet leaves from (the new source), in the reply entry the
 * client (the new destination); without it `nat` is zero. A preallocated hash, not an LRU, so
 * that a full table never evicts a live flow: a new flow that finds no room is passed to the stack
 * (counted) and the agent removes expired entries. A flow is live while either of its entries was
 * used within its age (sluice_nat_age_of): the agent removes both once neither is. A new flow may
 * take over a dead flow's reply entry, so a reply entry whose `to` is not the forward key's
 * destination belongs to another flow and stays. Only a TCP SYN creates a flow. */
struct sluice_nat_ct {
	struct sluice_lb_addr to;
	struct sluice_lb_addr nat;
	__u32 id; /* the service port (counters) */
	__u32 flags;
	__u64 last_ns; /* bpf_ktime_get_ns() of the last packet in this direction */
};

/* ---- SNAT (eTP Cluster to a backend on another node), as kube-proxy's masquerade ----
 * A new flow to a backend listed in sluice_nat_rmt (key: its address, 16 bytes as above;
 * value __u8 1; the agent lists the external endpoints whose node is not this one) leaves with
 * the node's address on the device the FIB lookup picks (sluice_nat_snat: ifindex -> that
 * device's addresses, for the devices the programs are attached to: the reply comes back
 * there) and a port of [snat_port_min, snat_port_max] (load-time globals, see ext_nat.h), free
 * for (backend, node address): the reply entry is created with BPF_NOEXIST from a random
 * start, at most SLUICE_NAT_SNAT_TRIES ports, a dead flow's port taken over. SNATed packets,
 * both ways, leave by bpf_fib_lookup + bpf_redirect(_neigh): handed to the stack with a node
 * address as source they would be dropped as martians. A local backend keeps the client's
 * address. */
#define SLUICE_NAT_SNAT_TRIES 32

/* sluice_nat_rmt key: a backend's address. */
struct sluice_nat_host {
	__u8 addr[16];
};

/* sluice_nat_snat value: a device's SNAT addresses; all-zero: none of that family. */
struct sluice_nat_ifaddr {
	__u8 v4[16]; /* ::ffff:a.b.c.d */
	__u8 v6[16];
};

/* sluice_nat_traffic value (per CPU), by service id: packets translated, both directions. The
 * program creates an id's entry on its first packet; the agent removes removed services' ones. */
struct sluice_nat_traffic {
	__u64 packets;
	__u64 bytes;
};

/* sluice_nat_drops index (per CPU array of __u64): what the programs did not translate. */
enum sluice_nat_reason {
	SLUICE_NAT_SOURCE_RANGE, /* dropped: source outside the frontend's ranges */
	SLUICE_NAT_CT_FULL,	 /* passed to the stack: no room for a new flow */
	SLUICE_NAT_FRAGMENT,	 /* passed to the stack: an IP fragment of a frontend's traffic */
	SLUICE_NAT_MALFORMED,	 /* passed to the stack: headers the program cannot parse */
	SLUICE_NAT_SNAT_PORTS,	 /* passed to the stack: a new flow found no free SNAT port */
	SLUICE_NAT_NO_ROUTE,	 /* SNAT: no route, no SNAT address or TTL out (new flows passed,
				  * others dropped) */
	SLUICE_NAT_MTU,		 /* dropped: an SNATed packet over the egress device's MTU that
				  * cannot be answered (IPv4 without DF or with options) */
	SLUICE_NAT_MTU_ICMP,	 /* dropped: an SNATed packet over the egress device's MTU,
				  * answered with ICMP fragmentation needed / packet too big */
	SLUICE_NAT_REASONS,
};

#endif /* SLUICE_BPF_ABI_H */
