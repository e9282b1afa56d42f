/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* Per-CPU counters created by the programs at first use, not by the agent: a new entry of a
 * per-CPU hash without preallocation costs the kernel's per-CPU allocator ~25 us, so the agent
 * writing 10,000 services' counters took 235-520 ms of a cold start; a program pays it once,
 * at a service's first packet or connect. The agent deletes a removed service's entry; one a
 * program recreates in that moment (a service id is never reused) is removed by the sweep of
 * the next agent that adopts the maps. BPF programs only. */
#ifndef SLUICE_COUNTER_H
#define SLUICE_COUNTER_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* The counters of `key` (a pointer) in the per-CPU hash `map`, zeroed at first use; NULL when
 * the map is full. `type` is the value type. */
#define sluice_counter(map, key, type)                                                     \
	({                                                                                 \
		type *c_ = bpf_map_lookup_elem(map, key);                                  \
		if (!c_) {                                                                 \
			type zero_ = {};                                                   \
			bpf_map_update_elem(map, key, &zero_, BPF_NOEXIST);                \
			c_ = bpf_map_lookup_elem(map, key);                                \
		}                                                                          \
		c_;                                                                        \
	})

#endif /* SLUICE_COUNTER_H */
