// The cluster update's claims in the cluster's distributed shared memory instead of the
// workspace's winner slots in global memory (ClusterUpdate, sum_tree_kernels.cuh). One hash
// table of 1 << bits slots (at least twice the batch) is spread over the cluster's blocks, an
// equal part in each block's shared memory: slot s in the block of rank s >> (bits - 3), a
// leaf word and a position word (ClaimTable). Each block clears its own part; after the
// cluster's barrier each taken entry takes a free slot for its leaf or finds its leaf's (open
// addressing, linear probing on from a multiplicative hash, across the parts) with one 32-bit
// atomicCAS over the GPC's network, then merges its position there by atomicMax (the largest
// wins, drlhet::WinnerMerge); after the next barrier each entry reads its leaf's position back
// and wins where its own is there.
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

constexpr uint32_t kEmptyKey = ~0u;  // a free slot: no leaf (a leaf is below 2^31)

// The cluster's table: in each block, kClaimSlots leaves (`keys`) and the largest position that
// claimed each (`wins`), both this block's copies of the kernel's __shared__ arrays. 32-bit
// words only: on sm_90, 64-bit atomics on shared memory are not done by the hardware through a
// generic (or shared::cluster) address; nvcc's fallback for them (SASS: an ATOM.E.*.64 whose
// predicate is false for shared memory, then LDS/ATOMS on the address's low word, or plain
// LD/ST) acts on the executing block's own shared memory or not atomically, so claims on
// another block's part were lost (measured on an H100, 2026-11-27: 15 of 26 GPU cases).
// 32-bit CAS and MAX compile to one ATOM each with no fallback.
struct ClaimTable {
  uint32_t* keys;
  int32_t* wins;
  int bits;  // ClaimBits(batch)

  // Slot s's leaf and position words, in the shared memory of the block that holds it (rank
  // s >> (bits - kClusterBits)).
  __device__ uint32_t* Key(uint32_t s) const { return Peer(keys, s); }
  __device__ int32_t* Win(uint32_t s) const { return Peer(wins, s); }

  template <typename T>
  __device__ T* Peer(T* base, uint32_t s) const {
    const unsigned rank = s >> (bits - kClusterBits);
    const uint32_t local = s & ((1u << (bits - kClusterBits)) - 1u);
    return ClusterPeer(RankSlot(base, rank, kClaimSlots) + local, rank);
  }

  // Entry `pos` claims leaf `leaf`: the first free slot on from the leaf's hash takes the leaf
  // (atomicCAS, no load first: one round trip), or the leaf's slot is found; then the
  // position merged by atomicMax (the largest wins: drlhet::WinnerMerge), posted, not awaited.
  __device__ void Claim(int32_t leaf, int32_t pos) const {
    const uint32_t mask = (1u << bits) - 1u;
    const auto key = static_cast<uint32_t>(leaf);
    for (uint32_t s = LeafSlot(leaf, bits);; s = (s + 1u) & mask) {
      const uint32_t held = atomicCAS(Key(s), kEmptyKey, key);
      if (held == kEmptyKey || held == key) {
        atomicMax(Win(s), pos);
        return;
      }
    }
  }

  // The largest position that claimed `leaf` (claimed: its slot is found).
  __device__ int32_t Winner(int32_t leaf) const {
    const uint32_t mask = (1u << bits) - 1u;
    for (uint32_t s = LeafSlot(leaf, bits);; s = (s + 1u) & mask) {
      if (*Key(s) == static_cast<uint32_t>(leaf)) return *Win(s);
    }
  }
};

// ClusterUpdate's claims in the cluster's table (ClaimTable); a batch of at most one entry per
// thread of the cluster.
struct SharedClaims {
  static constexpr bool kAnyBatch = false;
  static constexpr bool kSiblings = false;  // no LeafAndParent
  ClaimTable table;

  // The block's part cleared, a cluster barrier (its release waits for shared stores only),
  // the thread's entry read meanwhile, then claimed; the tree's words merged into the block's
  // (`bad`, `most`). Every thread of the cluster calls it. Returns the entry's claim.
  __device__ EntryClaim Claim(const UpdateArgs& a, const ClusterPlace& c, unsigned rank,
                              int32_t* bad, int32_t* most) const {
    uint32_t* keys = RankSlot(table.keys, rank, kClaimSlots);
    int32_t* wins = RankSlot(table.wins, rank, kClaimSlots);
    for (int s = threadIdx.x; s < 1 << (table.bits - kClusterBits); s += blockDim.x) {
      keys[s] = kEmptyKey;
      wins[s] = -1;
    }
    ClusterArrive();  // the parts cleared before any claim; meanwhile the entry is read
    const EntryClaim first = ReadClaim(a, c.base + c.t, c.t < a.batch);
    ClusterWait();
    if (first.take) table.Claim(first.leaf, static_cast<int32_t>(c.t));
    MergeWordsInBlock(first, bad, most);  // every thread of the warp
    return first;
  }

  __device__ void Settle(const UpdateArgs&, const ClusterPlace&) const {}  // nothing kept

  // Whether the thread's entry `e` won its leaf, after the claims' barrier (ClusterUpdate).
  __device__ bool Won(const UpdateArgs&, const ClusterPlace& c, const EntryClaim& e,
                      bool refused) const {
    if (!e.take || refused) return false;
    return table.Winner(e.leaf) == static_cast<int32_t>(c.t);
  }
};

}  // namespace drlhet_cuda

extern "C" {

// grid = V trees * cs blocks, in clusters of cs = kClusterBlocks (ClusterUpdate with
// SharedClaims); at most kClaimMaxBatch entries per tree, `bits` = ClaimBits(batch); sm_90 and
// up.
__global__ void __launch_bounds__(1024)
    drlhet_cuda_update_cluster_shared(drlhet_cuda::UpdateArgs a, int32_t cs, int32_t bits) {
  __shared__ uint32_t keys[drlhet_cuda::kRankSlots * drlhet_cuda::kClaimSlots];
  __shared__ int32_t wins[drlhet_cuda::kRankSlots * drlhet_cuda::kClaimSlots];
  drlhet_cuda::ClusterUpdate(a, cs, drlhet_cuda::SharedClaims{{keys, wins, bits}});
}

}  // extern "C"
