// The cluster update's claims in the cluster's distributed shared memory instead of the
// workspace's winner slots in global memory (ClusterUpdate, sum_tree_kernels.cuh). One hash
// table of 1 << bits slots (at least twice the batch) is spread over the cluster's blocks, an
// equal part in each block's shared memory: slot s in the block of rank s >> (bits - 3). Each
// block clears its own part; after the cluster's barrier each taken entry claims its leaf's slot
// (open addressing, linear probing on from a multiplicative hash, across the parts) with one
// atomicCAS over the GPC's network, then atomicMax when the slot holds its leaf already
// (leaf << 32 | position: the largest position wins, drlhet::WinnerMerge); after the next
// barrier each entry reads its leaf's slot back and wins where its position is there.
//
// What it removes from the workspace path: the reset of each entry's winner slot (a scattered
// store to a C-sized table) and the barrier's release that waits for those stores to reach the
// GPU's memory, the claims' atomics in L2, and the winner's read from L2 (each a round trip to
// memory on the update's critical path; under ncu's source-level sampling on an H100 the reset
// with its release and the entries' reads held a quarter of the cluster update's samples). The
// table has twice as many slots as the batch has entries, so a free slot or the leaf's is always
// found, whatever the leaves (all in one block's part included: the probe goes on into the
// next part). The same winners, so the same bits as every path. A batch of at most one entry
// per thread of the cluster (kClusterBlocks * kClusterMaxThreads), as drlhet_cuda_update_cluster
// takes it on the one-entry path; plain or checked.
// Compiled by nvcc (sm_90 and up, as ClusterUpdate: launch.cuh asks ClusterFits first) and by
// the host compiler for the emulation (emu/cuda_emu.h), where the blocks of a cluster share one
// copy of __shared__ (RankSlot) and fibers of a cluster never run at once between barriers.
// Zhang, Meng, Prasanna, IEEE TPDS 2023, Sec. 5.2 (the GPU's priority update).
#pragma once

#include <cstdint>

#include "cluster.cuh"
#include "region_update.cuh"
#include "sum_tree_kernels.cuh"

namespace drlhet_cuda {

constexpr int kClusterBits = 3;  // log2(kClusterBlocks)
static_assert(kClusterBlocks == 1 << kClusterBits, "the table's parts: one per block");
constexpr int kClaimSlots = 2048;  // slots of the table in each block: 2 * 8192 / 8
constexpr int64_t kClaimMaxBatch = static_cast<int64_t>(kClusterBlocks) * kClusterMaxThreads;

// Bits of the cluster's table for `batch` entries: at least twice as many slots as entries and
// 32 slots a block.
inline int ClaimBits(int64_t batch) {
  int bits = kClusterBits + 5;
  while ((int64_t{1} << bits) < 2 * batch) ++bits;
  return bits;
}

// Slot s of the cluster's table (`table`: this block's copy of the kernel's __shared__ array),
// in the shared memory of the block that holds it.
__device__ inline unsigned long long* SlotInCluster(uint64_t* table, int bits, uint32_t s) {
  const unsigned rank = s >> (bits - kClusterBits);
  const uint32_t local = s & ((1u << (bits - kClusterBits)) - 1u);
  return reinterpret_cast<unsigned long long*>(
      ClusterPeer(RankSlot(table, rank, kClaimSlots) + local, rank));
}

// Entry `pos` claims leaf `leaf` (ClaimInTable's merge, over the cluster's table).
__device__ inline void ClaimInCluster(uint64_t* table, int bits, int32_t leaf, int32_t pos) {
  const uint64_t mine = static_cast<uint64_t>(static_cast<uint32_t>(leaf)) << 32 |
                        static_cast<uint32_t>(pos);
  const uint32_t mask = (1u << bits) - 1u;
  for (uint32_t s = LeafSlot(leaf, bits);; s = (s + 1u) & mask) {
    unsigned long long* slot = SlotInCluster(table, bits, s);
    const uint64_t held = atomicCAS(slot, kEmptySlot, mine);  // no load first: one round trip
    if (held == kEmptySlot) return;  // the leaf's slot, new
    if (held >> 32 == static_cast<uint32_t>(leaf)) {
      atomicMax(slot, mine);
      return;
    }
  }
}

// The largest position that claimed `leaf` (claimed: its slot is found).
__device__ inline uint32_t WinnerInCluster(uint64_t* table, int bits, int32_t leaf) {
  const uint32_t mask = (1u << bits) - 1u;
  for (uint32_t s = LeafSlot(leaf, bits);; s = (s + 1u) & mask) {
    const uint64_t held = *SlotInCluster(table, bits, s);
    if (held >> 32 == static_cast<uint32_t>(leaf)) return static_cast<uint32_t>(held);
  }
}

// ClusterUpdate's claims in the cluster's table (`table`, this block's copy; `bits`:
// ClaimBits(batch)); a batch of at most one entry per thread of the cluster.
struct SharedClaims {
  static constexpr bool kAnyBatch = false;
  uint64_t* table;
  int bits;

  // The block's part cleared, a cluster barrier (its release waits for shared stores only),
  // the thread's entry read meanwhile, then claimed; the tree's words merged into the block's
  // (`bad`, `most`). Every thread of the cluster calls it. Returns the entry's claim.
  __device__ EntryClaim Claim(const UpdateArgs& a, const ClusterPlace& c, unsigned rank,
                              int32_t* bad, int32_t* most) const {
    uint64_t* own = RankSlot(table, rank, kClaimSlots);
    for (int s = threadIdx.x; s < 1 << (bits - kClusterBits); s += blockDim.x) {
      own[s] = kEmptySlot;
    }
    ClusterArrive();  // the parts cleared before any claim; meanwhile the entry is read
    const EntryClaim first = ReadClaim(a, c.base + c.t, c.t < a.batch);
    ClusterWait();
    if (first.take) ClaimInCluster(table, bits, first.leaf, static_cast<int32_t>(c.t));
    MergeWordsInBlock(first, bad, most);  // every thread of the warp
    return first;
  }

  // Whether the thread's entry `e` won its leaf, after the claims' barrier (ClusterUpdate).
  __device__ bool Won(const UpdateArgs&, const ClusterPlace& c, const EntryClaim& e,
                      bool refused) const {
    if (!e.take || refused) return false;
    return WinnerInCluster(table, bits, e.leaf) == static_cast<uint32_t>(c.t);
  }
};

}  // namespace drlhet_cuda

extern "C" {

// grid = V trees * cs blocks, in clusters of cs = kClusterBlocks (ClusterUpdate with
// SharedClaims); at most kClaimMaxBatch entries per tree, `bits` = ClaimBits(batch); sm_90 and
// up.
__global__ void __launch_bounds__(1024)
    drlhet_cuda_update_cluster_shared(drlhet_cuda::UpdateArgs a, int32_t cs, int32_t bits) {
  __shared__ uint64_t table[drlhet_cuda::kRankSlots * drlhet_cuda::kClaimSlots];
  drlhet_cuda::ClusterUpdate(a, cs, drlhet_cuda::SharedClaims{table, bits});
}

}  // extern "C"
