// The cluster update of a batch whose indices come sorted (drlhet.backends.cuda.SORTED_RUNS): a
// stratified sample's targets increase with their position and the descent keeps their order,
// so the indices a step samples, and writes back, are non-decreasing. Then the entries under
// one node of level R (the level below the cluster's first block's narrow levels) are one
// contiguous run of the batch, duplicates are neighbours, and the last thread of a run (its
// leader) can write the whole run's subtree alone: each leaf's last kept entry (scanning the
// run backwards, the first kept entry met), then the run's ancestors level by level up to
// level R, each the SeqSum of its children as every path sums it. No claims, no winner slots,
// no barrier between the leaves and the levels: a cheap barrier (ClusterSyncShared) for the
// cluster's vote on the batch's words and order, and one full barrier before the first block
// sums levels R - 1 .. 0 from the tree (BlockTopLevels). The same bits as the claims' paths.
// A batch out of order, with an index outside [0, C) (kept or not), or with a run longer than
// kSortedMaxRun entries takes the claims' path, every thread together, after the vote: nothing
// is written before it. Include after sum_tree_kernels.cuh's ClusterPlace and BlockTopLevels.
// Zhang, Meng, Prasanna, IEEE TPDS 2023, Sec. 5.2 (the GPU's priority update).
#pragma once

#include <cstdint>

namespace drlhet_cuda {

// The longest run (entries under one node of level R) a leader writes alone: its loops are
// this long at most, and the entries' written flags fit one 64-bit word.
constexpr int64_t kSortedMaxRun = 64;

// The leaves under one node of `level`: K^(depth - level), at most the capacity's padding.
__device__ inline uint32_t LeavesUnder(const drlhet::TreeLayout& lay, int level) {
  uint64_t span = 1;
  for (int l = lay.depth; l > level; --l) span *= static_cast<uint64_t>(lay.k);
  return span > 0xffffffffull ? 0xffffffffu : static_cast<uint32_t>(span);
}

// The run of entries `first` .. `last` of the tree's batch (its indices, keep flags and leaf
// values from `base`), all under one node of level `level_r`, written by its leader alone:
// each leaf's last kept entry, then every ancestor of a written leaf from the leaves' parents
// up to level_r (its entries' ancestors are adjacent: each recomputed once).
template <int KStatic>
__device__ inline void LeadRun(const UpdateArgs& a, const drlhet::TreeLayout& lay, int64_t base,
                               int64_t first, int64_t last, int level_r, float* tree) {
  const int32_t* idx = a.indices + base;
  const bool* keep = a.keep + base;
  const float* values = a.values + base;
  uint64_t written = 0;  // bit j - first: entry j's leaf written (its winner)
  int32_t taken = -1;    // the leaf last written, scanning backwards
  for (int64_t j = last; j >= first; --j) {
    if (keep[j] && idx[j] != taken) {
      tree[lay.offsets[lay.depth] + idx[j]] = values[j];
      taken = idx[j];
      written |= uint64_t{1} << (j - first);
    }
  }
  for (int level = lay.depth - 1; level >= level_r; --level) {
    int64_t done = -1;
    for (int64_t j = first; j <= last; ++j) {
      if (!((written >> (j - first)) & 1u)) continue;
      const int64_t node = drlhet::AncestorAt(idx[j], lay, level);
      if (node == done) continue;
      RecomputeNodeWide<KStatic>(tree, lay, level, node);
      done = node;
    }
  }
}

// The cluster's OR of one word a block (`words`, a slot per block rank), as ClusterWords reads
// them: lane r reads rank r's, the warp merges. Every lane of a whole warp calls it.
__device__ inline bool ClusterAny(int32_t* words, int32_t cs) {
  const int r = static_cast<int>(threadIdx.x & 31);
  const int32_t w = r < cs ? *ClusterPeer(words + r, static_cast<unsigned>(r)) : 0;
  return __any_sync(0xffffffffu, w != 0);
}

// ClusterUpdate's sorted path (above), after its layout and place: the whole update done
// (true), or nothing written and every thread of the cluster told to take the claims' path
// (false). `bad`, `most`, `slow`: the block's words (a slot per rank, 0 before), which the
// claims' path merges into again (the same entries: the same words). One entry a thread (the
// batch at most the cluster's threads) and R = c.top + 1, else false at once.
template <int KStatic>
__device__ inline bool SortedRuns(const UpdateArgs& a, const drlhet::TreeLayout& lay,
                                  const ClusterPlace& c, unsigned rank, int32_t cs, int32_t* bad,
                                  int32_t* most, int32_t* slow) {
  if (a.batch > c.all || c.top < 0) return false;  // the same in every thread of the cluster
  const int level_r = c.top + 1;
  const uint32_t span = LeavesUnder(lay, level_r);
  const bool live = c.t < a.batch;
  const int64_t i = c.base + c.t;
  const EntryClaim e = ReadClaim(a, i, live);
  bool leader = false, out_of_order = false;
  if (live) {
    const int32_t leaf = a.indices[i];
    const bool last = c.t + 1 == a.batch;
    const int32_t next = last ? leaf : a.indices[i + 1];
    out_of_order = leaf < 0 || leaf >= a.capacity || next < leaf || next >= a.capacity;
    // sorted and in range: the run is longer than kSortedMaxRun if the entry that far back
    // is under the same node of level R (that entry's own thread checks its range)
    if (c.t >= kSortedMaxRun && !out_of_order) {
      const int32_t back = a.indices[i - kSortedMaxRun];
      out_of_order = back >= 0 && static_cast<uint32_t>(back) / span ==
                                      static_cast<uint32_t>(leaf) / span;
    }
    leader = last || static_cast<uint32_t>(next) / span != static_cast<uint32_t>(leaf) / span;
  }
  MergeWordsInBlock(e, bad + rank, most + rank);
  if (__any_sync(0xffffffffu, out_of_order) && (threadIdx.x & 31) == 0) atomicOr(slow + rank, 1);
  ClusterSyncShared();  // the blocks' words are in; nothing written to global memory yet
  int32_t bad_all = 0, most_all = 0;
  ClusterWords(bad, most, cs, &bad_all, &most_all);
  if (ClusterAny(slow, cs)) return false;  // the same in every thread of the cluster
  float* tree = a.nodes + c.v * lay.size;
  const bool refused = bad_all != 0;
  if (!refused && leader) {
    int64_t first = c.t;  // the run's first entry: at most kSortedMaxRun back (the vote)
    while (first > 0 &&
           static_cast<uint32_t>(a.indices[c.base + first - 1]) / span ==
               static_cast<uint32_t>(a.indices[i]) / span) {
      --first;
    }
    LeadRun<KStatic>(a, lay, c.base, first, c.t, level_r, tree);
  }
  if (c.t == c.all - blockDim.x) {  // the tree's words and Finish, by the last block
    a.bad[c.v] = bad_all;
    if (a.max_bits != nullptr) a.max_bits[c.v] = most_all;
    Finish(a, c.v);
  }
  ClusterSync();  // level R is in the tree; every block is done with the others' words
  if (!refused && c.t < blockDim.x) BlockTopLevels<KStatic>(tree, lay, c.top);
#if !defined(__CUDACC__)
  if (c.t == 0) ++emu::sorted_updates;  // the emulation's count, for its tests
#endif
  return true;
}

}  // namespace drlhet_cuda
