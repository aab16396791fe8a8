// The update of one tree by one cluster of blocks, each block owning a region of the tree: the
// nodes of a contiguous range of one level (the region level R, the shallowest with at least as
// many nodes as the cluster has blocks) and everything below them. Every block reads the whole
// batch (every entry's errors decide whether the batch is refused, so every block finds the
// same answer without asking the others), keeps the entries whose leaves it owns, resolves
// their duplicates in a hash table in its shared memory (the last kept entry of a leaf wins:
// the largest position, as drlhet::WinnerMerge), writes the winners' leaves and recomputes its
// region's levels up to R, separated by barriers of the block only: no block reads a node
// another block writes. The blocks then hand their level-R nodes to the first block's shared
// memory (distributed shared memory) and meet at the one cluster barrier of the update, after
// which the first block sums levels R - 1 .. 0 from there.
//
// The path this replaces (ClusterUpdate, sum_tree_kernels.cuh) separates its phases (the
// workspace's reset, the claims, the leaves, each level) by cluster barriers, five or six at
// 2^20 leaves, K 16, B 4096; each one's release waits for the thread's stores to reach the
// GPU's memory (MEMBAR.ALL.GPU on an H100) and then for the cluster's slowest warp. Here the
// phases are barriers of a block (on one SM) and the claims are shared-memory atomics, not
// global ones on a 4 MB workspace; in exchange each block reads the whole batch (4 words an
// entry, 64 KB at B 4096, from L2), not an eighth of it.
//
// The same writes of the same values as the other paths (each recomputed node the sequential
// sum of its K children, drlhet::SeqSum through SumChildrenWide; a node recomputed whole or as
// a winner's ancestor gives the same bits, NarrowTop's argument), so bit-identical trees.
// Plain or checked (UpdateArgs.raw), as every update path. The workspace's winner slots are not
// used; the tree's words (bad, max_bits) are written for the checked update's Finish.
// Compiled by nvcc (sm_90 and up, as ClusterUpdate: launch.cuh asks ClusterFits first) and by
// the host compiler for the emulation (emu/cuda_emu.h), where the blocks of a cluster share one
// copy of __shared__ (RankSlot).
// Zhang, Meng, Prasanna, IEEE TPDS 2023, Sec. 5.2 (the GPU's priority update).
#pragma once

#include <cstdint>

#include "drlhet/sum_tree.h"
#include "block_layout.cuh"
#include "cluster.cuh"
#include "sum_tree_kernels.cuh"
#include "wide_loads.cuh"

namespace drlhet_cuda {

constexpr int kRegionSlots = 4096;  // hash slots per block: also the path's largest batch
constexpr int64_t kRegionRow = 512;  // the widest level of a region held in shared memory
// The widest level R: level R - 1 has fewer nodes than the cluster has blocks, so level R has
// at most (kClusterBlocks - 1) * K nodes, padding included.
constexpr int64_t kRegionHand = (kClusterBlocks - 1) * drlhet::kMaxBranching;
constexpr uint64_t kEmptySlot = ~0ull;  // no entry: above every (leaf << 32 | position)

// The region level of a tree for a cluster of `blocks` blocks: the shallowest level with at
// least `blocks` nodes, or -1 when only the leaves have (then the path does not apply). Never
// 0 for blocks >= 2 (the root level has one node).
DRLHET_HD inline int RegionLevel(const drlhet::TreeLayout& lay, int blocks) {
  for (int level = 0; level < lay.depth; ++level) {
    if (drlhet::NodesAt(lay, level) >= blocks) return level;
  }
  return -1;
}

// Bits of the hash table for `batch` entries: at least twice as many slots as entries (a
// block owning the whole batch still probes short runs), at most kRegionSlots, at least 32.
inline int RegionHashBits(int64_t batch) {
  int bits = 5;
  while ((int64_t{1} << bits) < 2 * batch && (1 << bits) < kRegionSlots) ++bits;
  return bits;
}

// Threads per block of the region path: the batch in whole warps, at most kClusterMaxThreads
// (every block reads the whole batch, so more threads each read fewer entries).
inline int RegionThreads(int64_t batch) {
  const int64_t threads = (batch + 31) / 32 * 32;
  return static_cast<int>(threads < kClusterMaxThreads ? threads : kClusterMaxThreads);
}

// Where block `rank` of a cluster of `blocks` sits in tree `lay`: its nodes [lo, hi) of level
// `level` (R) and its leaves [first, end) (end may pass the capacity).
struct Region {
  int level;
  int64_t lo, hi, first, end;
};

__device__ inline Region RegionOf(const drlhet::TreeLayout& lay, int level, unsigned rank,
                                  int blocks) {
  Region r{};
  r.level = level;
  const int64_t nodes = drlhet::NodesAt(lay, level);
  r.lo = rank * nodes / blocks;
  r.hi = (rank + 1) * nodes / blocks;
  int64_t span = 1;  // leaves under one node of level R
  for (int l = level; l < lay.depth; ++l) span *= lay.k;
  r.first = r.lo * span;
  r.end = r.hi * span;
  return r;
}

// The first slot a leaf probes in a table of 1 << bits slots (a multiplicative hash).
DRLHET_HD inline uint32_t LeafSlot(int32_t leaf, int bits) {
  return (static_cast<uint32_t>(leaf) * 0x9E3779B1u) >> (32 - bits);
}

// Entry `pos` wins leaf `leaf` unless a later one takes it: the table's slot of the leaf (open
// addressing, linear probing from a multiplicative hash) holds leaf << 32 | the largest
// position, merged by atomicMax (the leaf in the high word, so the maximum is WinnerMerge's).
// The table has more slots than the batch has entries: a free slot or the leaf's is found.
__device__ inline void ClaimInTable(uint64_t* table, int bits, int32_t leaf, int32_t pos) {
  const uint64_t mine = static_cast<uint64_t>(static_cast<uint32_t>(leaf)) << 32 |
                        static_cast<uint32_t>(pos);
  const uint32_t mask = (1u << bits) - 1u;
  uint32_t s = LeafSlot(leaf, bits);
  for (;;) {
    uint64_t held = table[s];
    if (held == kEmptySlot) {
      held = atomicCAS(reinterpret_cast<unsigned long long*>(table + s), kEmptySlot, mine);
      if (held == kEmptySlot) return;  // the leaf's slot, new
    }
    if (held >> 32 == static_cast<uint32_t>(leaf)) {
      atomicMax(reinterpret_cast<unsigned long long*>(table + s), mine);
      return;
    }
    s = (s + 1u) & mask;
  }
}

// Entries a thread reads before it claims any: their loads issued back to back, unconditional
// (no branch on a loaded value between them), one round trip to memory for all of them. At
// B 4096 and 1024 threads a block, every entry in one round.
constexpr int kRegionStage = 4;

// What an entry's claim reads of it (ErrorsOf's arguments).
struct EntryWords {
  int32_t index;
  float value, raw;
  bool keep;
};

// Entry i's words, or zeros (not kept) past the batch (`live` false).
__device__ inline EntryWords LoadEntry(const UpdateArgs& a, int64_t i, bool live) {
  EntryWords w{0, 0.0f, 0.0f, false};
  if (!live) return w;
  w.index = a.indices[i];
  w.value = a.values[i];
  w.keep = a.keep[i];
  if (a.raw != nullptr) w.raw = a.raw[i];
  return w;
}

// A thread's round of kRegionStage entries, b0 + j * blockDim, loaded (zeros past the batch).
__device__ inline void LoadStage(const UpdateArgs& a, int64_t base, int64_t b0,
                                 EntryWords (&w)[kRegionStage]) {
#pragma unroll
  for (int j = 0; j < kRegionStage; ++j) {
    const int64_t b = b0 + j * static_cast<int64_t>(blockDim.x);
    w[j] = LoadEntry(a, base + b, b < a.batch);
  }
}

// A loaded round's errors and largest kept raw priority into *errs and *top, and its taken
// entries whose leaves lie in the region claimed in the table.
__device__ inline void ClaimStage(const UpdateArgs& a, const Region& r, int32_t size, int64_t b0,
                                  const EntryWords (&w)[kRegionStage], uint64_t* table, int bits,
                                  uint32_t* errs, int32_t* top) {
#pragma unroll
  for (int j = 0; j < kRegionStage; ++j) {
    const int32_t err = ErrorsOf(a, w[j].index, w[j].value, w[j].raw, w[j].keep, size);
    const bool take = err == 0 && w[j].keep;
    *errs |= static_cast<uint32_t>(err);
    const int32_t bits_j = take && a.raw != nullptr ? drlhet::OrderedBits(w[j].raw) : 0;
    *top = bits_j > *top ? bits_j : *top;
    if (take && w[j].index >= r.first && w[j].index < r.end) {
      const int64_t b = b0 + j * static_cast<int64_t>(blockDim.x);
      ClaimInTable(table, bits, w[j].index, static_cast<int32_t>(b));
    }
  }
}

// The batch read by one block: each entry's errors and largest kept raw priority merged into
// the block's words (`words[0]` error bits, `words[1]` OrderedBits, both 0 before), and the
// taken entries whose leaves lie in the region claimed in the table; the thread's first round
// (`first`) loaded already. Every thread calls it. The same errors, taken entries and maximum
// as ReadClaim's (ErrorsOf).
__device__ inline void RegionClaims(const UpdateArgs& a, const Region& r, int64_t base,
                                    int32_t size, const EntryWords (&first)[kRegionStage],
                                    uint64_t* table, int bits, int32_t* words) {
  uint32_t errs = 0;
  int32_t top = 0;
  const int64_t round = kRegionStage * static_cast<int64_t>(blockDim.x);
  ClaimStage(a, r, size, threadIdx.x, first, table, bits, &errs, &top);
  for (int64_t b0 = threadIdx.x + round; b0 < a.batch; b0 += round) {
    EntryWords w[kRegionStage];
    LoadStage(a, base, b0, w);
    ClaimStage(a, r, size, b0, w, table, bits, &errs, &top);
  }
  errs = __reduce_or_sync(0xffffffffu, errs);  // every lane of the warp is here
  top = __reduce_max_sync(0xffffffffu, top);
  if ((threadIdx.x & 31) == 0) {
    if (errs != 0) atomicOr(words, static_cast<int32_t>(errs));
    if (top > 0) atomicMax(words + 1, top);
  }
}

// Where leaf `leaf` was claimed in the table: its slot's word (ClaimInTable put it there).
__device__ inline uint64_t ClaimOf(const uint64_t* table, int bits, int32_t leaf) {
  const uint32_t mask = (1u << bits) - 1u;
  uint32_t s = LeafSlot(leaf, bits);
  while (table[s] >> 32 != static_cast<uint32_t>(leaf)) s = (s + 1u) & mask;
  return table[s];
}

// A loaded round's winners (of a batch that was not refused: every kept entry was taken)
// written to their leaves in `tree`, each by the thread that loaded it, from its registers.
__device__ inline void LeafStage(const UpdateArgs& a, const Region& r, int64_t b0,
                                 const EntryWords (&w)[kRegionStage], const uint64_t* table,
                                 int bits, float* leaves) {
#pragma unroll
  for (int j = 0; j < kRegionStage; ++j) {
    if (!w[j].keep || w[j].index < r.first || w[j].index >= r.end) continue;
    const int64_t b = b0 + j * static_cast<int64_t>(blockDim.x);
    if ((ClaimOf(table, bits, w[j].index) & 0xffffffffu) == static_cast<uint64_t>(b)) {
      leaves[w[j].index] = w[j].value;
    }
  }
}

// The winners' leaves of the region, once the claims are in: the thread's first round from
// its registers (at B <= 4096 on a GPU, the whole batch: no load waits between the claims and
// the leaves), any later round loaded again. Every thread calls it.
__device__ inline void RegionLeaves(const UpdateArgs& a, const Region& r, int64_t base,
                                    const EntryWords (&first)[kRegionStage],
                                    const uint64_t* table, int bits, float* leaves) {
  const int64_t round = kRegionStage * static_cast<int64_t>(blockDim.x);
  LeafStage(a, r, threadIdx.x, first, table, bits, leaves);
  for (int64_t b0 = threadIdx.x + round; b0 < a.batch; b0 += round) {
    EntryWords w[kRegionStage];
    LoadStage(a, base, b0, w);
    LeafStage(a, r, b0, w, table, bits, leaves);
  }
}

// The region's levels depth - 1 .. R after its leaves: a level of at most kRegionRow nodes in
// the region whole, its nodes also kept in `rows` (two rows of kRegionRow, alternating) for the
// level above; a wider one as each winner's ancestor (the table's leaves). Level R is left in
// its row, not written to the tree (the caller does, after the cluster's barrier). A barrier
// of the block before each level.
__device__ inline void RegionLevels(float* tree, const drlhet::TreeLayout& lay, const Region& r,
                                    const uint64_t* table, int bits, float* rows) {
  const float* below = nullptr;  // level + 1 of the region in shared memory, or read the tree
  int64_t width = r.hi - r.lo;   // the region's nodes at `level`, padding included
  for (int l = r.level; l < lay.depth - 1; ++l) width *= lay.k;
  for (int level = lay.depth - 1; level >= r.level; --level, width /= lay.k) {
    __syncthreads();  // the level below is written
    const int64_t count = drlhet::NodesAt(lay, level);
    if (width > kRegionRow) {  // never level R: at most kRegionHand / 2 nodes a block
      for (int s = threadIdx.x; s < (1 << bits); s += blockDim.x) {
        const uint64_t held = table[s];
        if (held == kEmptySlot) continue;
        RecomputeNodeWide(tree, lay, level,
                          drlhet::AncestorAt(static_cast<int64_t>(held >> 32), lay, level));
      }
      below = nullptr;
      continue;
    }
    float* row = rows + (level & 1) * kRegionRow;
    const int64_t lo = r.lo * (width / (r.hi - r.lo));  // the region's first node here
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      const int64_t node = lo + j;
      float sum = 0.0f;  // a padding slot
      if (node < count) {
        sum = SumChildrenWide(below != nullptr ? below + j * lay.k
                                               : tree + lay.offsets[level + 1] + node * lay.k,
                              lay.k);
        if (level > r.level) tree[lay.offsets[level] + node] = sum;
      }
      row[j] = sum;
    }
    below = row;
  }
}

// Levels R - 1 .. 0 of the tree by the first block, whole, from level R in `hand` (padding as
// 0) and then from `rows` (alternating), after the cluster's barrier.
__device__ inline void RegionTop(float* tree, const drlhet::TreeLayout& lay, int level_r,
                                 const float* hand, float* rows) {
  const float* below = hand;
  for (int level = level_r - 1; level >= 0; --level) {
    const int64_t count = drlhet::NodesAt(lay, level);
    const int64_t width = lay.offsets[level + 1] - lay.offsets[level];
    float* row = rows + (level & 1) * kRegionRow;
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      float sum = 0.0f;
      if (j < count) {
        sum = SumChildrenWide(below + j * lay.k, lay.k);
        tree[lay.offsets[level] + j] = sum;
      }
      row[j] = sum;
    }
    if (level > 0) __syncthreads();  // the level is written before its parents read it
    below = row;
  }
}

// The whole update of tree blockIdx.x / cs by one cluster of cs blocks, each block its region
// (Region, level `level_r` = RegionLevel), the table `bits` wide (RegionHashBits). The cluster's
// barrier in its relaxed first half at the start (every block of the cluster has started before
// any writes another's shared memory), its wait before the hand-off, then once whole. A refused
// batch writes no node (every block finds it refused alike and returns after the first wait).
__device__ inline void RegionUpdate(const UpdateArgs& a, int32_t cs, int32_t level_r,
                                    int32_t bits) {
  __shared__ uint64_t table_all[kRankSlots * kRegionSlots];
  __shared__ __align__(16) float rows_all[kRankSlots * 2 * kRegionRow];
  __shared__ __align__(16) float hands[kRankSlots * kRegionHand];  // the first block's is read
  __shared__ int32_t words_all[kRankSlots * 2];
  ClusterArriveRelaxed();
  const unsigned rank = blockIdx.x % cs;
  const int64_t v = blockIdx.x / cs, base = v * a.batch;
  uint64_t* table = RankSlot(table_all, rank, kRegionSlots);
  float* rows = RankSlot(rows_all, rank, 2 * kRegionRow);
  int32_t* words = RankSlot(words_all, rank, 2);
  float* hand = RankSlot(hands, rank, kRegionHand);  // this block's; the first block's is read
  // the thread's first round of entries, in flight while the table is cleared and the layout
  // built (their round trip to memory overlaps the layout's chain)
  EntryWords first[kRegionStage];
  LoadStage(a, base, threadIdx.x, first);
  const int32_t size = a.raw != nullptr ? a.size[v] : 0;
  for (int s = threadIdx.x; s < (1 << bits); s += blockDim.x) table[s] = kEmptySlot;
  if (threadIdx.x == 0) words[0] = words[1] = 0;
  const drlhet::TreeLayout& lay = BlockLayout(a.capacity, a.k);  // a barrier: table, words
  const Region r = RegionOf(lay, level_r, rank, cs);
  RegionClaims(a, r, base, size, first, table, bits, words);
  __syncthreads();  // the claims are in
  const int32_t refused = words[0];
  if (rank == 0 && threadIdx.x == 0) {  // the batch's words and Finish, off the levels' path
    a.bad[v] = refused;
    if (a.max_bits != nullptr) a.max_bits[v] = words[1];
    Finish(a, v);
  }
  if (refused != 0) {  // the same in every thread of the cluster
    ClusterWait();
    return;
  }
  float* tree = a.nodes + v * lay.size;
  RegionLeaves(a, r, base, first, table, bits, tree + lay.offsets[lay.depth]);
  RegionLevels(tree, lay, r, table, bits, rows);
  const float* row_r = rows + (level_r & 1) * kRegionRow;
  __syncthreads();  // level R is in its row
  ClusterWait();  // every block of the cluster has started: its shared memory is there
  for (int64_t j = threadIdx.x; j < r.hi - r.lo; j += blockDim.x) {
    *ClusterPeer(RankSlot(hands, 0, kRegionHand) + r.lo + j, 0) = row_r[j];
  }
  const int64_t count_r = drlhet::NodesAt(lay, level_r);
  if (rank == 0) {  // level R's padding
    const int64_t width_r = lay.offsets[level_r + 1] - lay.offsets[level_r];
    for (int64_t j = count_r + threadIdx.x; j < width_r; j += blockDim.x) hand[j] = 0.0f;
  }
  ClusterSync();  // level R is in the first block's shared memory, and seen there
  for (int64_t j = threadIdx.x; j < r.hi - r.lo; j += blockDim.x) {
    tree[lay.offsets[level_r] + r.lo + j] = row_r[j];
  }
  if (rank == 0) RegionTop(tree, lay, level_r, hand, rows);
}

}  // namespace drlhet_cuda

extern "C" {

// grid = V trees * cs blocks, in clusters of cs (RegionUpdate); sm_90 and up.
__global__ void __launch_bounds__(1024)
    drlhet_cuda_update_region(drlhet_cuda::UpdateArgs a, int32_t cs, int32_t level_r,
                              int32_t bits) {
  drlhet_cuda::RegionUpdate(a, cs, level_r, bits);
}

}  // extern "C"
