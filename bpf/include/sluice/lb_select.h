/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Backend selection shared by the socket-LB (sock_lb.bpf.c) and external NAT (ext_nat.bpf.c)
 * programs, so that every kernel path balances with the same rules. BPF programs only: the maps
 * are passed in, each program has its own (layouts in bpf_abi.h). */
#ifndef SLUICE_LB_SELECT_H
#define SLUICE_LB_SELECT_H

#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "sluice/bpf_abi.h"

/* IPv4 addresses are kept as ::ffff:a.b.c.d. */
static __always_inline void sluice_set_v4(__u8 *addr, __be32 ip4)
{
	__builtin_memset(addr, 0, 10);
	addr[10] = 0xff;
	addr[11] = 0xff;
	__builtin_memcpy(addr + 12, &ip4, 4);
}

static __always_inline __be32 sluice_get_v4(const __u8 *addr)
{
	__be32 ip4;

	__builtin_memcpy(&ip4, addr + 12, 4);
	return ip4;
}

static __always_inline int sluice_is_v4_mapped(const __u8 *addr)
{
	__u64 lo;
	__u32 mid;

	__builtin_memcpy(&lo, addr, 8);
	__builtin_memcpy(&mid, addr + 8, 4);
	return lo == 0 && mid == bpf_htonl(0xffff);
}

/* The backend ClientIP affinity keeps for `client` (a key of `sticky`), if it is still live and
 * in the service (`members`). Refreshes the sliding timeout. */
static __always_inline struct sluice_lb_addr *sluice_lb_sticky(void *sticky, void *members,
							       const struct sluice_lb_svc *svc,
							       const void *client, __u64 now)
{
	struct sluice_lb_sticky *s = bpf_map_lookup_elem(sticky, client);
	struct sluice_lb_member m = {};

	if (!s || now - s->last_ns > (__u64)svc->affinity * 1000000000ULL)
		return 0;
	m.id = svc->id;
	m.backend = s->backend;
	if (!bpf_map_lookup_elem(members, &m))
		return 0; /* the backend left the service: pick again */
	s->last_ns = now;
	return &s->backend;
}

/* One backend of `svc` by its policy; NULL only while the agent swaps the set under us. */
static __always_inline struct sluice_lb_addr *sluice_lb_pick(void *slots, struct sluice_lb_svc *svc)
{
	struct sluice_lb_slot slot = {.set = svc->set};
	__u32 n;

	if (svc->flags & SLUICE_LB_RANDOM)
		n = bpf_get_prandom_u32();
	else
		n = __sync_fetch_and_add(&svc->next, 1);
	slot.index = n % svc->count;
	return bpf_map_lookup_elem(slots, &slot);
}

/* The backend for a new connection or flow to the service *svc (found at `key` in `svcs`, with
 * backends): the one affinity keeps for `client` (a key of `sticky` naming svc's id), else one
 * by the service's policy, then remembered for affinity. When the agent replaced the set between
 * the two lookups the service is read again (*svc then is the new value). NULL: no backend now
 * (the caller leaves the packet or socket untranslated). */
static __always_inline struct sluice_lb_addr *sluice_lb_choose(void *svcs, void *slots,
							       void *members, void *sticky,
							       const struct sluice_lb_key *key,
							       struct sluice_lb_svc **svc,
							       const void *client, __u64 now)
{
	struct sluice_lb_addr *be = 0;

	if ((*svc)->affinity)
		be = sluice_lb_sticky(sticky, members, *svc, client, now);
	if (be)
		return be;
	be = sluice_lb_pick(slots, *svc);
	if (!be) {
		*svc = bpf_map_lookup_elem(svcs, key);
		if (!*svc || (*svc)->count == 0)
			return 0;
		be = sluice_lb_pick(slots, *svc);
		if (!be)
			return 0;
	}
	if ((*svc)->affinity) {
		struct sluice_lb_sticky s = {.backend = *be, .last_ns = now};

		bpf_map_update_elem(sticky, client, &s, BPF_ANY);
	}
	return be;
}

#endif /* SLUICE_LB_SELECT_H */
