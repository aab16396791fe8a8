// CUDA kernels of the K-ary sum tree: one thread per target (find) or per update entry. Scalar
// arguments only (each block derives the tree's layout from capacity and K: BlockLayout), so
// that the same kernels run inside XLA (sum_tree.cu, the FFI handlers) and through CuPy
// (drlhet/backends/cuda_cupy.py loads the fatbin CMake builds from this file). The per-element
// logic is drlhet/sum_tree.h's, tested on the CPU (kernels/cpu/header_probe.cc).
//
// V trees of the same layout lie one after the other in `nodes` (leading dimensions from vmap);
// `batch` entries per tree, `n = V * batch` in all; entry i belongs to tree i / batch.
// Zhang, Meng, Prasanna, IEEE TPDS 2023, Sec. 4 (K-ary sum tree) and Sec. 5.2 (the GPU kernel).
#pragma once

#include "drlhet/prioritized.h"
#include "drlhet/sum_tree.h"
#include "block_layout.cuh"
#include "cluster.cuh"
#include "wide_loads.cuh"

namespace drlhet_cuda {

template <int KStatic>
__device__ inline void Find(const float* nodes, int64_t capacity, int32_t k, const float* targets,
                            int64_t batch, int64_t n, int32_t* indices, float* values,
                            float* totals) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const drlhet::TreeLayout& lay = BlockLayout(capacity, k);
  if (i >= n) return;
  const Slot s = SlotOf(i, batch);
  float value = 0.0f, total = 0.0f;
  indices[i] = DescendOneWide<KStatic>(nodes + s.tree * lay.size, nullptr, 0, lay, targets[i],
                                       &value, &total);
  values[i] = value;
  if (s.pos == 0) totals[s.tree] = total;
}

// One update batch over V trees, as every update kernel reads it. A *plain* update (raw ==
// nullptr; TreeOps.write) checks its kept entries only, against the capacity, and marks a refused
// tree's bad word 1. A *checked* update (the buffer's, drlhet/replay/buffer_ops.py's update)
// checks every entry against the buffer's size and limits (UpdateEntryErrors), puts the error
// bits in bad, keeps the largest kept raw priority in max_bits, and at the end writes the
// buffer's running maximum and error word (Finish).
struct UpdateArgs {
  float* nodes;             // [V, T], updated in place
  int64_t capacity;         // C leaves per tree
  int32_t k;                // K
  const int32_t* indices;   // [n], n = V * batch
  const float* values;      // [n] leaf values
  const bool* keep;         // [n]
  int64_t batch;
  int64_t n;
  int32_t* winner;          // [V, C] each leaf's winning entry (only the batch's slots are read)
  int32_t* bad;             // [V] refusal (plain: 1; checked: error bits); 0 before the claim
  // checked updates only
  int32_t* max_bits;        // [V] OrderedBits of the largest kept raw priority; 0 before
  const float* raw;         // [n] raw priorities, or nullptr for a plain update
  const int32_t* size;      // [V] filled slots
  float priority_max;       // largest accepted leaf value
  int32_t err_index;
  int32_t err_priority;
  const float* max_in;      // [V] running maximum before
  const int32_t* err_in;    // [V] error word before
  float* max_out;           // [V]
  int32_t* err_out;         // [V]
  // the cluster path's kernels that first try the sorted runs (sorted_runs.cuh: SORTED_RUNS),
  // 0 or 1: read by LaunchUpdate on the host
  int32_t sorted_runs = 0;
};

// The error bits of an entry (its index, leaf value, raw priority and keep flag; `size`, its
// tree's filled slots): checked, UpdateEntryErrors; plain, 1 for a kept entry with an invalid
// index or value (ValidEntry, its sign from its bits: SignBitClear).
__device__ inline int32_t ErrorsOf(const UpdateArgs& a, int32_t index, float value, float raw,
                                   bool keep, int32_t size) {
  if (a.raw != nullptr) {
    return drlhet::UpdateEntryErrors(index, size, raw, value, a.priority_max, a.err_index,
                                     a.err_priority);
  }
  const bool valid = drlhet::ValidEntry(index, value, a.capacity) && drlhet::SignBitClear(value);
  return keep && !valid ? 1 : 0;
}

// The error bits entry i (of tree v) sets (ErrorsOf).
__device__ inline int32_t EntryErrors(const UpdateArgs& a, int64_t i, int64_t v) {
  if (a.raw != nullptr) return ErrorsOf(a, a.indices[i], a.values[i], a.raw[i], true, a.size[v]);
  return ErrorsOf(a, a.indices[i], a.values[i], 0.0f, a.keep[i], 0);
}

// Whether entry i wins its leaf in a batch that was not refused (its tree: v).
__device__ inline bool Wins(const UpdateArgs& a, int64_t i, int64_t* v) {
  const Slot s = SlotOf(i, a.batch);
  *v = s.tree;
  if (!a.keep[i] || a.bad[*v]) return false;
  return drlhet::IsWinner(a.winner[*v * a.capacity + a.indices[i]], static_cast<int32_t>(s.pos),
                          a.keep[i]);
}

// Before the claim: -1 in the winner slot of each entry's leaf, 0 in its tree's bad and max
// words (entry 0 of each tree). Only these slots are read later, so the rest of the workspace
// is never cleared.
__device__ inline void Reset(const UpdateArgs& a, int64_t i) {
  const Slot s = SlotOf(i, a.batch);
  const int64_t v = s.tree;
  const int32_t idx = a.indices[i];
  if (idx >= 0 && idx < a.capacity) a.winner[v * a.capacity + idx] = -1;
  if (s.pos == 0) {
    a.bad[v] = 0;
    if (a.max_bits != nullptr) a.max_bits[v] = 0;
  }
}

// An update entry as its claim reads it (the inputs only, no workspace): its tree and
// position, its error bits, whether it is taken (kept, no error), its leaf and leaf value, and
// its raw priority's OrderedBits when taken by a checked update (else 0).
struct EntryClaim {
  Slot s;
  int32_t err, leaf, top;
  float value;
  bool live, take;
};

__device__ inline EntryClaim ReadClaim(const UpdateArgs& a, int64_t i, bool live) {
  EntryClaim e{};
  e.live = live;
  if (!live) return e;
  e.s = SlotOf(i, a.batch);
  e.err = EntryErrors(a, i, e.s.tree);
  e.take = e.err == 0 && a.keep[i];
  e.leaf = a.indices[i];
  e.value = a.values[i];
  e.top = e.take && a.raw != nullptr ? drlhet::OrderedBits(a.raw[i]) : 0;
  return e;
}

// Phase 1: an entry's errors into its tree's bad word, or its position into its leaf's winner
// (atomicMax is WinnerMerge done atomically: the largest kept position wins) and its raw
// priority into the tree's maximum. Every thread of the warp calls it (with a claim that is not
// live where it has no entry), so that the warp's entries of one tree are merged before the
// atomics on the tree's words.
__device__ inline void CommitClaim(const UpdateArgs& a, const EntryClaim& e) {
  const int64_t v = e.s.tree;
  if (e.take) atomicMax(a.winner + v * a.capacity + e.leaf, static_cast<int32_t>(e.s.pos));
  const int32_t err = e.err, top = e.top;
  const bool live = e.live;
  // a warp's entries belong to one tree unless the batch is not a multiple of 32
  const int64_t v0 = __shfl_sync(0xffffffffu, v, 0);
  const bool one_tree = __all_sync(0xffffffffu, !live || v == v0);
  if (one_tree) {
    const int32_t errs = __reduce_or_sync(0xffffffffu, static_cast<uint32_t>(err));
    const int32_t most = __reduce_max_sync(0xffffffffu, top);
    if ((threadIdx.x & 31) == 0) {
      if (errs) atomicOr(a.bad + v0, errs);
      if (most > 0) atomicMax(a.max_bits + v0, most);
    }
    return;
  }
  if (err) atomicOr(a.bad + v, err);
  if (top > 0) atomicMax(a.max_bits + v, top);
}

__device__ inline void ClaimEntry(const UpdateArgs& a, int64_t i, bool live) {
  CommitClaim(a, ReadClaim(a, i, live));
}

// In a cluster that updates one tree: the warp's error bits and largest kept raw priority
// merged into its block's words in shared memory (`bad`, `most`), which the cluster reads
// across its blocks after its barrier (ClusterWords), instead of atomics on one global word
// from every warp of the cluster. Every thread of the warp calls it.
__device__ inline void MergeWordsInBlock(const EntryClaim& e, int32_t* bad, int32_t* most) {
  const int32_t errs = __reduce_or_sync(0xffffffffu, static_cast<uint32_t>(e.err));
  const int32_t top = __reduce_max_sync(0xffffffffu, e.top);
  if ((threadIdx.x & 31) == 0) {
    if (errs) atomicOr(bad, errs);
    if (top > 0) atomicMax(most, top);
  }
}

// CommitClaim in a cluster that updates one tree: the winner slot in the workspace, the tree's
// words in the block's (MergeWordsInBlock). Every thread of the warp calls it.
__device__ inline void CommitClaimInBlock(const UpdateArgs& a, const EntryClaim& e, int32_t* bad,
                                          int32_t* most) {
  if (e.take) atomicMax(a.winner + e.s.tree * a.capacity + e.leaf, static_cast<int32_t>(e.s.pos));
  MergeWordsInBlock(e, bad, most);
}

// Phase 1 over the whole batch of every tree: thread i, entry i if there is one.
__device__ inline void Claim(const UpdateArgs& a, int64_t i) { ClaimEntry(a, i, i < a.n); }

// Phase 2: the winners' leaves.
__device__ inline void Leaf(const UpdateArgs& a, int64_t i, const drlhet::TreeLayout& lay) {
  int64_t v = 0;
  if (!Wins(a, i, &v)) return;
  a.nodes[v * lay.size + lay.offsets[lay.depth] + a.indices[i]] = a.values[i];
}

// Phase 3 at one level: the winner's ancestor, recomputed from its children.
template <int KStatic = 0>
__device__ inline void Ancestor(const UpdateArgs& a, int64_t i, const drlhet::TreeLayout& lay,
                                int level) {
  int64_t v = 0;
  if (!Wins(a, i, &v)) return;
  RecomputeNodeWide<KStatic>(a.nodes + v * lay.size, lay, level,
                             drlhet::AncestorAt(a.indices[i], lay, level));
}

// Phase 3 at a level no wider than the batch, but wider than the narrow levels' one block
// takes: node j of the launch (tree j / count, node j % count of that tree's `count` nodes)
// recomputed from its children, whether an entry's ancestor or not (the same bits: NarrowTop).
// A warp reads the 32 K contiguous children of 32 neighbouring nodes, where one thread per entry
// would read the scattered ancestors of the batch, several times over. A refused tree is skipped.
template <int KStatic = 0>
__device__ inline void WholeLevelNode(const UpdateArgs& a, const drlhet::TreeLayout& lay,
                                      int level, int64_t j) {
  const Slot s = SlotOf(j, drlhet::NodesAt(lay, level));
  if (a.bad[s.tree]) return;
  RecomputeNodeWide<KStatic>(a.nodes + s.tree * lay.size, lay, level, s.pos);
}

// A checked update's outputs for tree v, once its claims are all in: the running maximum
// (unchanged when refused) and the error word.
__device__ inline void Finish(const UpdateArgs& a, int64_t v) {
  if (a.raw == nullptr) return;
  const float largest = a.bad[v] ? 0.0f : drlhet::FromOrderedBits(a.max_bits[v]);
  a.max_out[v] = drlhet::NewMaximum(a.max_in[v], largest);
  a.err_out[v] = a.err_in[v] | a.bad[v];
}

// The widest level (padding included) BlockTopLevels keeps in shared memory.
constexpr int64_t kRowFloats = 2048;

// Level top + 1 of a cluster's tree as its blocks hold it in shared memory (HandLevel): node
// j in the row of the block of rank j / threads, at j % threads (`base`: the rows, RankSlot).
struct HandRows {
  float* base;
  int64_t threads;
};

// The K children of node j of level top, in the rows of `hand` (a block's threads a multiple
// of K: one block holds them all), over distributed shared memory.
__device__ inline const float* HandChildren(const HandRows& hand, int64_t j, int k) {
  const int64_t first = j * k;
  const unsigned rank = static_cast<unsigned>(first / hand.threads);
  return ClusterPeer(RankSlot(hand.base, rank, hand.threads) + first % hand.threads, rank);
}

// Levels top .. 0 of `tree`, every node, by the block's threads, once level top + 1 is written
// and seen by the block. Level top is summed from its children in the tree, or, with `hand`,
// in the cluster's blocks' shared memory where `hand` has rows (the block then arrives at the
// cluster's barrier, done with them); each level above, from the level below as the block just wrote it, kept in shared
// memory (padding as +0, as in the tree) where its padded width fits kRowFloats: the same
// values in the same order, so the same bits, without a round trip to memory per level. Every
// node is written to the tree. A barrier of the block between levels (every thread of the
// block calls it), none after level 0. KStatic > 0: K fixed at compile time (KOf).
template <int KStatic = 0>
__device__ inline void BlockTopLevels(float* tree, const drlhet::TreeLayout& lay, int top,
                                      HandRows hand = HandRows{nullptr, 0}) {
  __shared__ __align__(16) float rows[2][kRowFloats];
  const int k = KOf<KStatic>(lay);
  const float* below = nullptr;  // level + 1 in shared memory, or nullptr: read the tree
  for (int level = top; level >= 0; --level) {
    const int64_t count = drlhet::NodesAt(lay, level);
    const int64_t width = lay.offsets[level + 1] - lay.offsets[level];
    float* row = width <= kRowFloats ? rows[level & 1] : nullptr;
    const float* children = below != nullptr ? below : tree + lay.offsets[level + 1];
    const bool handed = level == top && hand.base != nullptr;
    for (int64_t j = threadIdx.x; j < (row != nullptr ? width : count); j += blockDim.x) {
      float sum = 0.0f;  // a padding slot
      if (j < count) {
        sum = SumChildrenWide<KStatic>(handed ? HandChildren(hand, j, k) : children + j * k, k);
        tree[lay.offsets[level] + j] = sum;
      }
      if (row != nullptr) row[j] = sum;
    }
    if (handed) ClusterArrive();  // done with the other blocks' shared memory
    if (level > 0) __syncthreads();  // the level is written before its parents read it
    below = row;
  }
}

// Levels top .. 0 of tree blockIdx.x, every node, by one block (after every level below is
// written); also the tree's Finish. A refused tree writes no node.
template <int KStatic = 0>
__device__ inline void TopLevels(const UpdateArgs& a, int top) {
  const int64_t v = blockIdx.x;
  const drlhet::TreeLayout& lay = BlockLayout(a.capacity, a.k);
  if (threadIdx.x == 0) Finish(a, v);
  if (a.bad[v]) return;  // the same in every thread of the block
  BlockTopLevels<KStatic>(a.nodes + v * lay.size, lay, top);
}

// The one-block update's leaves and levels of tree blockIdx.x, once its claims are in (win:
// the tree's winner slots, base: its first entry); levels 0..top have every node recomputed.
// A dropped entry's index is never read: a plain update may drop one outside [0, C).
template <int KStatic = 0>
__device__ inline void BlockLevels(const UpdateArgs& a, const drlhet::TreeLayout& lay, float* tree,
                                   const int32_t* win, int64_t base, int top) {
  const int32_t* idx = a.indices + base;
  const bool* kp = a.keep + base;
  for (int64_t b = threadIdx.x; b < a.batch; b += blockDim.x) {
    if (kp[b] && drlhet::IsWinner(win[idx[b]], static_cast<int32_t>(b), true)) {
      tree[lay.offsets[lay.depth] + idx[b]] = a.values[base + b];
    }
  }
  for (int level = lay.depth - 1; level >= 0; --level) {
    __syncthreads();  // the level below is written
    if (level <= top) {  // level == top: the narrow levels, whole
      BlockTopLevels<KStatic>(tree, lay, level);
      return;
    }
    for (int64_t b = threadIdx.x; b < a.batch; b += blockDim.x) {
      if (kp[b] && drlhet::IsWinner(win[idx[b]], static_cast<int32_t>(b), true)) {
        RecomputeNodeWide<KStatic>(tree, lay, level, drlhet::AncestorAt(idx[b], lay, level));
      }
    }
  }
}

// BlockLevels for a batch of at most blockDim entries (the default threshold): each thread's
// one entry (its index, value and whether it won) is read once, not again at every level.
template <int KStatic = 0>
__device__ inline void BlockLevelsOneEach(const UpdateArgs& a, const drlhet::TreeLayout& lay,
                                          float* tree, const int32_t* win, int64_t base,
                                          int top) {
  const int64_t b = threadIdx.x;
  const bool kept = b < a.batch && a.keep[base + b];
  const int32_t leaf = kept ? a.indices[base + b] : 0;
  const float value = kept ? a.values[base + b] : 0.0f;
  const bool won = kept && drlhet::IsWinner(win[leaf], static_cast<int32_t>(b), true);
  if (won) tree[lay.offsets[lay.depth] + leaf] = value;
  uint32_t node = static_cast<uint32_t>(leaf);  // a won leaf is in [0, C), C < 2^31
  for (int level = lay.depth - 1; level >= 0; --level) {
    __syncthreads();  // the level below is written
    if (level <= top) {  // level == top: the narrow levels, whole
      BlockTopLevels<KStatic>(tree, lay, level);
      return;
    }
    if (won) {
      node /= static_cast<uint32_t>(KOf<KStatic>(lay));  // AncestorAt, a level at a time
      RecomputeNodeWide<KStatic>(tree, lay, level, node);
    }
  }
}

// Thread t of the `all` threads of the cluster that updates tree v (entries base ..
// base + batch - 1), and the update's levels: 0..whole no wider than the batch, 0..top no wider
// than a block too (the cluster's first block's alone).
struct ClusterPlace {
  int64_t v, base, t, all;
  int whole, top;
};

// Whether `claims` sum the leaves' parents themselves (Claims::kSiblings, switched on in its
// table) where the cluster takes the leaves' parents one entry at a time (a level wider than
// the batch).
template <typename Claims>
__device__ inline bool ParentsFromClaims(const Claims& claims, const drlhet::TreeLayout& lay,
                                         const ClusterPlace& c) {
  if constexpr (Claims::kSiblings) {
    return claims.table.siblings && lay.depth - 1 > c.whole;
  } else {
    return false;
  }
}

// claims.LeafAndParent where the claims have it (ParentsFromClaims said so), else false.
template <int KStatic, typename Claims>
__device__ inline bool LeafAndParentOf(const Claims& claims, const UpdateArgs& a,
                                       const ClusterPlace& c, const drlhet::TreeLayout& lay,
                                       const EntryClaim& e, bool refused, float* tree) {
  if constexpr (Claims::kSiblings) {
    return claims.template LeafAndParent<KStatic>(a, c, lay, e, refused, tree);
  } else {
    return false;
  }
}

// Levels whole + 1 .. depth - 1 of the cluster's tree: a cluster barrier, then each winner's
// ancestor at the level.
template <int KStatic>
__device__ inline void ClusterEntryLevels(const UpdateArgs& a, const drlhet::TreeLayout& lay,
                                          const ClusterPlace& c) {
  for (int level = lay.depth - 1; level > c.whole; --level) {
    ClusterSync();  // the level below is written (the leaves, at the first level)
    for (int64_t b = c.t; b < a.batch; b += c.all) Ancestor<KStatic>(a, c.base + b, lay, level);
  }
}

// The same for a batch of at most `all` entries: each thread's one entry (its claim, read
// before the claims: its index, value and whether it was taken) is kept in registers, not read
// again at every level (BlockLevelsOneEach's reasoning). After the claims' barrier: whether the
// entry won its leaf in a batch that was not `refused` (the claims' Won), its leaf written; then
// a barrier before each level. Where the claims sum the leaves' parents themselves
// (ParentsFromClaims: TaggedClaims::LeafAndParent) the winners write their leaves and parents
// at once and the barrier after the leaves goes.
template <int KStatic, typename Claims>
__device__ inline void ClusterEntryLevelsOneEach(const UpdateArgs& a,
                                                 const drlhet::TreeLayout& lay,
                                                 const ClusterPlace& c, const EntryClaim& e,
                                                 const Claims& claims, bool refused) {
  const int32_t leaf = e.take ? e.leaf : 0;  // a taken entry's leaf is in [0, C) (no error)
  float* tree = a.nodes + c.v * lay.size;
  uint32_t node = static_cast<uint32_t>(leaf);  // a won leaf is in [0, C), C < 2^31
  int level = lay.depth - 1;
  bool won = false;
  if (ParentsFromClaims(claims, lay, c)) {  // the same in every thread of the cluster
    won = LeafAndParentOf<KStatic>(claims, a, c, lay, e, refused, tree);
    node /= static_cast<uint32_t>(KOf<KStatic>(lay));
    --level;
  } else {
    won = claims.Won(a, c, e, refused);
    if (won) tree[lay.offsets[lay.depth] + leaf] = e.value;
  }
  for (; level > c.whole; --level) {
    ClusterSync();  // the level below is written (the leaves, at the first level)
    node /= static_cast<uint32_t>(KOf<KStatic>(lay));  // AncestorAt, a level at a time
    if (won) RecomputeNodeWide<KStatic>(tree, lay, level, node);
  }
}

// Node c.t of level top + 1 of the cluster's tree (the batch no larger than the cluster's
// threads, so the level's nodes neither: one a thread), summed from the tree into a register and
// into the thread's slot of its block's row in shared memory (`own`; a padding slot 0), once the
// level below is written: the first block reads the rows for level top over distributed shared
// memory (BlockTopLevels), and each thread writes its node to the tree after the barrier, so
// that the barrier's release waits for no store to global memory. Returns the node (0 when
// refused or past the level).
template <int KStatic>
__device__ inline float HandLevel(const float* tree, const drlhet::TreeLayout& lay,
                                  const ClusterPlace& c, bool refused, float* own) {
  const int level = c.top + 1;
  const int k = KOf<KStatic>(lay);
  float sum = 0.0f;
  if (refused) return sum;
  if (c.t < drlhet::NodesAt(lay, level)) {
    sum = SumChildrenWide<KStatic>(tree + lay.offsets[level + 1] + c.t * k, k);
  }
  if (c.t < lay.offsets[level + 1] - lay.offsets[level]) own[threadIdx.x] = sum;
  return sum;
}

// ClusterUpdate after the leaves and the levels wider than the batch: the levels of at most
// `batch` nodes, then those of at most blockDim by the first block; the tree's words and
// Finish by the last block. `bad`, `most`: the cluster's merged words.
template <int KStatic>
__device__ inline void ClusterLevels(const UpdateArgs& a, const drlhet::TreeLayout& lay,
                                     const ClusterPlace& c, bool refused, int32_t bad,
                                     int32_t most, unsigned rank) {
  __shared__ __align__(16) float hand_rows[kRankSlots * kClusterMaxThreads];  // HandLevel
  float* tree = a.nodes + c.v * lay.size;
  // level top + 1 handed to the first block in shared memory (HandLevel), where one block
  // holds every node's children: the same in every thread of the cluster
  const bool hand = a.batch <= c.all && c.whole > c.top && c.top >= 0 &&
                    blockDim.x % static_cast<unsigned>(KOf<KStatic>(lay)) == 0;
  for (int level = c.whole; level > c.top + (hand ? 1 : 0); --level) {  // whole < depth
    ClusterSync();  // the level below is written
    if (refused) continue;
    for (int64_t j = c.t; j < drlhet::NodesAt(lay, level); j += c.all) {
      RecomputeNodeWide<KStatic>(tree, lay, level, j);
    }
  }
  float handed = 0.0f;
  if (hand) {
    ClusterSync();  // the level below is written
    handed = HandLevel<KStatic>(tree, lay, c, refused, RankSlot(hand_rows, rank, blockDim.x));
    ClusterSyncShared();  // the rows are written: since the last barrier only they were
  } else {
    ClusterSync();  // level top + 1 is in the tree, which the first block reads
  }
  const int level = c.top + 1;
  if (hand && !refused && c.t < drlhet::NodesAt(lay, level)) {
    tree[lay.offsets[level] + c.t] = handed;
  }
  // the claims are long in: the tree's words and Finish by the last block's first thread, off
  // the levels' path
  if (c.t == c.all - blockDim.x) {
    a.bad[c.v] = bad;
    if (a.max_bits != nullptr) a.max_bits[c.v] = most;
    Finish(a, c.v);
  }
  if (refused) return;  // the same in every thread of the cluster
  if (c.t >= blockDim.x) {
    if (hand) ClusterSync();  // the first block reads this block's row: not before it is done
    return;
  }
  // with hand: the first block arrives at the cluster's barrier after level top
  BlockTopLevels<KStatic>(tree, lay, c.top,
                          HandRows{hand ? hand_rows : nullptr, static_cast<int64_t>(blockDim.x)});
  if (hand) ClusterWait();
}

// ClusterUpdate's claims in the workspace's winner slots (global memory, one per leaf): -1 in
// the slot of each entry's leaf, a cluster barrier whose release waits for those stores, then
// each taken entry's position by atomicMax (the largest wins: WinnerMerge); any batch.
struct WorkspaceClaims {
  static constexpr bool kAnyBatch = true;  // also more entries than the cluster has threads
  static constexpr bool kSiblings = false;  // no LeafAndParent

  // The reset and the claims; the thread's first entry's claim read meanwhile, returned. The
  // tree's words merged into the block's (`bad`, `most`). Every thread of the cluster calls it.
  __device__ EntryClaim Claim(const UpdateArgs& a, const ClusterPlace& c, unsigned rank,
                              int32_t* bad, int32_t* most) const {
    (void)rank;
    const int64_t lane = threadIdx.x & 31;
    for (int64_t b = c.t; b < a.batch; b += c.all) Reset(a, c.base + b);
    ClusterArrive();  // the resets before any claim; meanwhile the thread reads its first entry
    const EntryClaim first = ReadClaim(a, c.base + c.t, c.t < a.batch);
    ClusterWait();
    CommitClaimInBlock(a, first, bad, most);  // every thread of the warp (live false past it)
    for (int64_t b = c.t + c.all; b - lane < a.batch; b += c.all) {
      CommitClaimInBlock(a, ReadClaim(a, c.base + b, b < a.batch), bad, most);
    }
    return first;
  }

  __device__ void Settle(const UpdateArgs&, const ClusterPlace&) const {}  // nothing kept

  // Whether the thread's one entry `e` won its leaf, after the claims' barrier; false when the
  // tree's batch was `refused` (it has no winner) or the entry was not taken.
  __device__ bool Won(const UpdateArgs& a, const ClusterPlace& c, const EntryClaim& e,
                      bool refused) const {
    const int32_t leaf = e.take ? e.leaf : 0;  // a taken entry's leaf is in [0, C)
    const int32_t win = a.winner[c.v * a.capacity + leaf];
    return e.take && !refused && drlhet::IsWinner(win, static_cast<int32_t>(c.t), true);
  }
};

}  // namespace drlhet_cuda

#include "sorted_runs.cuh"  // ClusterUpdate's sorted path: after ClusterPlace and BlockTopLevels

namespace drlhet_cuda {

// The whole update of tree blockIdx.x / cs by one cluster of cs blocks (cluster.cuh): the
// per-level path's phases (claims, leaves, then the levels from the leaves' parents up) over
// the cluster's cs * blockDim threads, each taking every (cs * blockDim)-th entry or node,
// with a cluster barrier where the per-level path ends a launch; the levels of at most
// min(batch, blockDim) nodes by the cluster's first block alone, after the last cluster
// barrier, as drlhet_cuda_update_top does, and meanwhile Finish by the last block. No thread
// returns before that barrier. The duplicates are resolved by `claims` (WorkspaceClaims, or
// TaggedClaims in tag_table.cuh: a batch of at most one entry per thread; each thread's copy,
// Settle'd after the claims' barrier). The tree's
// error bits and largest kept raw priority are merged per block in shared memory and read
// across the cluster after the claims' barrier (ClusterWords), then written to the tree's
// words by the last block. The same writes as the per-level path, so the same bits; plain or
// checked (a.raw). With kSorted (kernels of their own, so that the others keep their registers:
// the tagged kernel spilled with it inlined), a batch of sorted indices is first written run by
// run (SortedRuns, sorted_runs.cuh), which declines any other before writing. KStatic > 0: K
// fixed at compile time (a.k must equal it; KOf).
template <int KStatic, typename Claims, bool kSorted = false>
__device__ inline void ClusterUpdate(const UpdateArgs& a, int32_t cs, Claims claims) {
  __shared__ int32_t block_bad[kClusterMaxBlocks], block_most[kClusterMaxBlocks];  // by rank
  __shared__ int32_t block_slow[kClusterMaxBlocks];  // SortedRuns' vote
  const unsigned rank = blockIdx.x % cs;
  if (threadIdx.x == 0) block_bad[rank] = block_most[rank] = block_slow[rank] = 0;
  const drlhet::TreeLayout& lay = BlockLayout(a.capacity, a.k);  // a barrier: the words are 0
  ClusterPlace c{};
  c.v = blockIdx.x / cs;
  c.base = c.v * a.batch;
  c.t = (blockIdx.x % cs) * blockDim.x + threadIdx.x;
  c.all = static_cast<int64_t>(cs) * blockDim.x;
  c.whole = drlhet::NarrowTop(lay, a.batch, a.batch);
  c.top = drlhet::NarrowTop(lay, a.batch, blockDim.x);
  if constexpr (kSorted) {
    if (SortedRuns<KStatic>(a, lay, c, rank, cs, block_bad, block_most, block_slow)) return;
  }
  const EntryClaim first = claims.Claim(a, c, rank, block_bad + rank, block_most + rank);
  ClusterSync();
  claims.Settle(a, c);
  // the claims are in: the tree's words from the blocks' shared memory, kept in registers
  int32_t bad = 0, most = 0;
  ClusterWords(block_bad, block_most, cs, &bad, &most);
  const bool refused = bad != 0;
  if (!Claims::kAnyBatch || a.batch <= c.all) {  // the same in every thread of the cluster
    ClusterEntryLevelsOneEach<KStatic>(a, lay, c, first, claims, refused);
  } else {  // Leaf and Ancestor read the tree's word in global memory: written, then a barrier
    if (c.t == 0) a.bad[c.v] = bad;
    ClusterSync();
    for (int64_t b = c.t; b < a.batch; b += c.all) Leaf(a, c.base + b, lay);
    ClusterEntryLevels<KStatic>(a, lay, c);
  }
  ClusterLevels<KStatic>(a, lay, c, refused, bad, most, rank);
}

// The whole update of one tree in one block (grid = V trees, one block each): the phases
// above, separated by __syncthreads instead of launches, each thread taking every blockDim-th
// entry. For batches small enough that one block keeps up: one graph node instead of 4 + depth
// launches. Levels no wider than the batch have every node recomputed once (NarrowTop). A
// refused batch writes no node. Plain or checked (a.raw), as the per-level path. KStatic > 0:
// K fixed at compile time (a.k must equal it; KOf).
template <int KStatic>
__device__ inline void UpdateBlock(const UpdateArgs& a) {
  __shared__ int32_t refused, most;
  const int64_t v = blockIdx.x, base = v * a.batch;
  const drlhet::TreeLayout& lay = BlockLayout(a.capacity, a.k);
  float* tree = a.nodes + v * lay.size;
  int32_t* win = a.winner + v * a.capacity;
  const int32_t* idx = a.indices + base;
  const bool* kp = a.keep + base;
  if (threadIdx.x == 0) refused = most = 0;
  __syncthreads();
  for (int64_t b = threadIdx.x; b < a.batch; b += blockDim.x) {
    const int32_t err = EntryErrors(a, base + b, v);
    if (err) {
      atomicOr(&refused, err);
    } else if (kp[b]) {
      win[idx[b]] = -1;
    }
  }
  __syncthreads();
  if (refused) {  // the same value in every thread after the barrier
    if (threadIdx.x == 0) {
      a.bad[v] = refused;
      Finish(a, v);
    }
    return;
  }
  for (int64_t b = threadIdx.x; b < a.batch; b += blockDim.x) {
    if (!kp[b]) continue;
    atomicMax(win + idx[b], static_cast<int32_t>(b));
    if (a.raw != nullptr) atomicMax(&most, drlhet::OrderedBits(a.raw[base + b]));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    a.bad[v] = 0;
    if (a.max_bits != nullptr) a.max_bits[v] = most;
    Finish(a, v);
  }
  const int top = drlhet::NarrowTop(lay, a.batch, a.batch);  // levels 0..top: every node once
  if (a.batch <= blockDim.x) {
    BlockLevelsOneEach<KStatic>(a, lay, tree, win, base, top);
  } else {
    BlockLevels<KStatic>(a, lay, tree, win, base, top);
  }
}

}  // namespace drlhet_cuda

extern "C" {

// indices/values [n], totals [V]: the descent of every target.
__global__ void drlhet_cuda_find(const float* nodes, int64_t capacity, int32_t k,
                                 const float* targets, int64_t batch, int64_t n, int32_t* indices,
                                 float* values, float* totals) {
  drlhet_cuda::Find<0>(nodes, capacity, k, targets, batch, n, indices, values, totals);
}

__global__ void drlhet_cuda_find_k16(const float* nodes, int64_t capacity, int32_t k,
                                     const float* targets, int64_t batch, int64_t n,
                                     int32_t* indices, float* values, float* totals) {
  drlhet_cuda::Find<16>(nodes, capacity, k, targets, batch, n, indices, values, totals);
}

// The plain update's arguments from the scalar ones the CuPy launches pass.
#define DRLHET_PLAIN_UPDATE(nodes, values)                                                  \
  drlhet_cuda::UpdateArgs a{nodes,   capacity, k,       indices, values,  keep,    batch, \
                            n,       winner,   bad,     nullptr, nullptr, nullptr, 0.0f,  \
                            0,       0,        nullptr, nullptr, nullptr, nullptr}

// Phase 1. winner [V, capacity] all -1 and bad [V] all 0 before: each kept entry merges its
// position into its leaf's winner, or marks its tree's batch bad (refused whole).
__global__ void drlhet_cuda_update_claim(const int32_t* indices, const float* values,
                                         const bool* keep, int64_t batch, int64_t n,
                                         int64_t capacity, int32_t* winner, int32_t* bad) {
  const int32_t k = 0;
  DRLHET_PLAIN_UPDATE(nullptr, values);
  drlhet_cuda::Claim(a, static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
}

// Phase 2: the winners' leaves.
__global__ void drlhet_cuda_update_leaves(float* nodes, int64_t capacity, int32_t k,
                                          const int32_t* indices, const float* values,
                                          const bool* keep, int64_t batch, int64_t n,
                                          int32_t* winner, int32_t* bad) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const drlhet::TreeLayout& lay = drlhet_cuda::BlockLayout(capacity, k);
  if (i >= n) return;
  DRLHET_PLAIN_UPDATE(nodes, values);
  drlhet_cuda::Leaf(a, i, lay);
}

// Phase 3, one launch per level from depth - 1 up to 0: the winners' ancestors at `level`,
// each recomputed from its children (written by the previous launch).
__global__ void drlhet_cuda_update_level(float* nodes, int64_t capacity, int32_t k,
                                         const int32_t* indices, const bool* keep, int64_t batch,
                                         int64_t n, int32_t* winner, int32_t* bad,
                                         int32_t level) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const drlhet::TreeLayout& lay = drlhet_cuda::BlockLayout(capacity, k);
  if (i >= n) return;
  DRLHET_PLAIN_UPDATE(nodes, nullptr);
  drlhet_cuda::Ancestor(a, i, lay, level);
}

// Phase 3 for the narrow levels (drlhet::NarrowTop): grid = V trees, one block each, which
// recomputes every node of levels top .. 0, a level at a time, instead of one ancestor per
// winning entry. A refused tree is skipped.
__global__ void __launch_bounds__(1024)
    drlhet_cuda_update_top(float* nodes, int64_t capacity, int32_t k, int32_t* bad, int32_t top) {
  const int32_t* indices = nullptr;
  const bool* keep = nullptr;
  const int64_t batch = 1, n = 0;
  int32_t* winner = nullptr;
  DRLHET_PLAIN_UPDATE(nodes, nullptr);
  drlhet_cuda::TopLevels(a, top);
}

// The FFI handlers' kernels: the same phases on a whole UpdateArgs (plain or checked).
__global__ void drlhet_cuda_update_reset_args(drlhet_cuda::UpdateArgs a) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < a.n) drlhet_cuda::Reset(a, i);
}

__global__ void drlhet_cuda_update_claim_args(drlhet_cuda::UpdateArgs a) {
  drlhet_cuda::Claim(a, static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
}

__global__ void drlhet_cuda_update_leaves_args(drlhet_cuda::UpdateArgs a) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const drlhet::TreeLayout& lay = drlhet_cuda::BlockLayout(a.capacity, a.k);
  if (i < a.n) drlhet_cuda::Leaf(a, i, lay);
}

// The per-level path's level launches (LaunchUpdate), each with a _k16 kernel for K 16 only.
#define DRLHET_LEVEL_KERNELS(SUFFIX, K)                                                          \
  __global__ void drlhet_cuda_update_level_args##SUFFIX(drlhet_cuda::UpdateArgs a,              \
                                                        int32_t level) {                        \
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;             \
    const drlhet::TreeLayout& lay = drlhet_cuda::BlockLayout(a.capacity, a.k);                  \
    if (i < a.n) drlhet_cuda::Ancestor<K>(a, i, lay, level);                                    \
  }                                                                                             \
  /* grid: trees * NodesAt(level) threads in all (`nodes`), one node each */                    \
  __global__ void drlhet_cuda_update_whole_level_args##SUFFIX(drlhet_cuda::UpdateArgs a,        \
                                                              int32_t level, int64_t nodes) {   \
    const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;             \
    const drlhet::TreeLayout& lay = drlhet_cuda::BlockLayout(a.capacity, a.k);                  \
    if (j < nodes) drlhet_cuda::WholeLevelNode<K>(a, lay, level, j);                            \
  }                                                                                             \
  __global__ void __launch_bounds__(1024)                                                       \
      drlhet_cuda_update_top_args##SUFFIX(drlhet_cuda::UpdateArgs a, int32_t top) {             \
    drlhet_cuda::TopLevels<K>(a, top);                                                          \
  }
DRLHET_LEVEL_KERNELS(, 0)
DRLHET_LEVEL_KERNELS(_k16, 16)
#undef DRLHET_LEVEL_KERNELS

// grid = V trees, one block each (UpdateBlock); the _k16 kernel for K 16 only.
__global__ void __launch_bounds__(1024) drlhet_cuda_update_block(drlhet_cuda::UpdateArgs a) {
  drlhet_cuda::UpdateBlock<0>(a);
}
__global__ void __launch_bounds__(1024) drlhet_cuda_update_block_k16(drlhet_cuda::UpdateArgs a) {
  drlhet_cuda::UpdateBlock<16>(a);
}

// grid = V trees * cs blocks, in clusters of cs (ClusterUpdate); sm_90 and up. The _k16
// kernel for K 16 only.
__global__ void __launch_bounds__(1024)
    drlhet_cuda_update_cluster(drlhet_cuda::UpdateArgs a, int32_t cs) {
  drlhet_cuda::ClusterUpdate<0>(a, cs, drlhet_cuda::WorkspaceClaims{});
}
__global__ void __launch_bounds__(1024)
    drlhet_cuda_update_cluster_k16(drlhet_cuda::UpdateArgs a, int32_t cs) {
  drlhet_cuda::ClusterUpdate<16>(a, cs, drlhet_cuda::WorkspaceClaims{});
}
// The same, trying the sorted runs first (SORTED_RUNS).
__global__ void __launch_bounds__(1024)
    drlhet_cuda_update_cluster_sorted(drlhet_cuda::UpdateArgs a, int32_t cs) {
  drlhet_cuda::ClusterUpdate<0, drlhet_cuda::WorkspaceClaims, true>(a, cs, {});
}
__global__ void __launch_bounds__(1024)
    drlhet_cuda_update_cluster_sorted_k16(drlhet_cuda::UpdateArgs a, int32_t cs) {
  drlhet_cuda::ClusterUpdate<16, drlhet_cuda::WorkspaceClaims, true>(a, cs, {});
}

#undef DRLHET_PLAIN_UPDATE

}  // extern "C"
