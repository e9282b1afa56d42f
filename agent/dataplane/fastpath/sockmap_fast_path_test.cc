// SPDX-License-Identifier: Apache-2.0
// Unprivileged: the skeleton opens and describes the object without loading it. Loading and
// the kernel behaviour are tested in tests/bpf/ (they need CAP_BPF and CAP_NET_ADMIN).
#include "agent/dataplane/fastpath/sockmap_fast_path.h"

#include "gtest/gtest.h"
#include <bpf/libbpf.h>

#include "agent/dataplane/fastpath/skeleton.h"
#include "bpf/sockmap.skel.h"

namespace sluice::fastpath {
namespace {

TEST(SockmapSkeleton, DescribesTheVerdictProgramAndItsMaps) {
  sockmap_bpf* skel = sockmap_bpf::open();
  ASSERT_NE(skel, nullptr);
  EXPECT_EQ(bpf_program__type(skel->progs.sluice_verdict), BPF_PROG_TYPE_SK_SKB);
  EXPECT_EQ(bpf_program__expected_attach_type(skel->progs.sluice_verdict),
            BPF_SK_SKB_STREAM_VERDICT);
  EXPECT_EQ(bpf_map__type(skel->maps.sluice_peer), BPF_MAP_TYPE_SOCKHASH);
  EXPECT_EQ(bpf_map__type(skel->maps.sluice_attach), BPF_MAP_TYPE_SOCKHASH);
  EXPECT_EQ(bpf_map__key_size(skel->maps.sluice_peer), sizeof(uint64_t));
  EXPECT_EQ(bpf_map__type(skel->maps.sluice_rings), BPF_MAP_TYPE_ARRAY_OF_MAPS);
  // Names fit the kernel's 15-character object names.
  for (bpf_map* m = bpf_object__next_map(skel->obj, nullptr); m != nullptr;
       m = bpf_object__next_map(skel->obj, m)) {
    EXPECT_LE(strlen(bpf_map__name(m)), 15u) << bpf_map__name(m);
  }
  sockmap_bpf::destroy(skel);
}

}  // namespace
}  // namespace sluice::fastpath
