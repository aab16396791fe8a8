// The prioritized buffer's sample after its targets, spread over the whole GPU in one launch:
// one thread per target, in blocks of a few warps (`threads`, 128 by default), every block of
// every tree resident at once (a cooperative launch), so that a barrier of the grid can stand
// between the descents and the weights' scaling. Each warp writes its largest raw weight and
// whether one of its probabilities is > 0 into its own slot of the workspace; after the grid's
// barrier every warp reads its tree's slots and each thread scales the weight it holds in
// registers. SampleCluster runs a tree's batch on the 8 SMs of one cluster (512 targets an SM at
// B 4096); here the same batch takes 32 SMs at 128 threads (their load units, L1 and shared
// memory shared by 4x fewer descents). The same results as the other paths (a maximum and an OR,
// in any order). No clear of the workspace: every slot read is written first, in the same launch.
// Compiled by nvcc and by the host compiler for the emulation (emu/cuda_emu.h: the launch's blocks
// run together as one group of fibers, GridSync a barrier of all of them).
// Zhang, Meng, Prasanna, IEEE TPDS 2023, Sec. 5.2 (the GPU's sampling).
#pragma once

#if defined(__CUDACC__)
#include <cooperative_groups.h>
#endif

#include "sample_kernels.cuh"

namespace drlhet_cuda {

#if defined(__CUDACC__)
constexpr int kSpreadCopies = 1;  // each block has its own shared memory
#else
// the emulation: __shared__ is one static copy for the blocks that run together, so each
// block of a launch takes its own copy of the top levels (at most this many blocks a launch)
constexpr int kSpreadCopies = 16;
#endif

// The workspace's int32 words per tree of a spread sample of `batch` targets a tree: two per
// warp (its largest raw weight's OrderedBits, whether a probability is > 0).
DRLHET_HD inline int64_t SpreadWords(int64_t batch) { return 2 * ((batch + 31) / 32); }

// Blocks of `threads` that a tree's `batch` targets take.
DRLHET_HD inline int64_t SpreadBlocksPerTree(int64_t batch, int threads) {
  return (batch + threads - 1) / threads;
}

// Every thread of the launch (a cooperative one) waits here for every other; memory written
// before it by any thread is seen after it by all.
__device__ inline void GridSync() {
#if defined(__CUDA_ARCH__)
  cooperative_groups::this_grid().sync();
#elif !defined(__CUDACC__)
  emu::GridSync();
#endif
}

// The largest raw weight's bits (a floor of 0, as the other paths' merges) and whether any
// probability is > 0, over tree v's warps' slots in `slots` (SpreadWords(batch) words), merged
// by the calling warp (every lane calls it).
__device__ inline void MergeSpreadWords(const int32_t* slots, int64_t batch, int32_t* most,
                                        bool* any) {
  int32_t largest = 0;
  unsigned positive = 0;
  for (int64_t s = threadIdx.x & 31; 2 * s < SpreadWords(batch); s += 32) {
    const int32_t m = slots[2 * s];
    largest = m > largest ? m : largest;
    positive |= static_cast<unsigned>(slots[2 * s + 1]);
  }
  *most = __reduce_max_sync(0xffffffffu, largest);
  *any = __reduce_or_sync(0xffffffffu, positive) != 0;
}

// The whole sample of V trees, `blocks_per_tree` blocks of whole warps a tree (block
// blockIdx.x: tree blockIdx.x / blocks_per_tree), one target a thread; a cooperative launch.
// a.scratch: SpreadWords(batch) words a tree, not cleared.
template <int KStatic>
__device__ inline void SampleSpread(const SampleArgs& a, int32_t blocks_per_tree) {
  __shared__ __align__(16) float copies[kSpreadCopies * kTopFloats];
  float* copy = copies + (kSpreadCopies == 1 ? 0 : static_cast<int64_t>(blockIdx.x) * kTopFloats);
  const int64_t v = blockIdx.x / blocks_per_tree;
  const int64_t b = (blockIdx.x % blocks_per_tree) * static_cast<int64_t>(blockDim.x) +
                    threadIdx.x;  // the thread's target in its tree
  const int64_t i = v * a.batch + b;
  const bool live = b < a.batch;
  const TreeWords words = LoadTreeWords(a, v);
  CopyTop(a.nodes + v * a.tree_size, a.top_slots, copy);
  const drlhet::TreeLayout& lay = BlockLayout(a.capacity, a.k);  // a barrier: the copy is in
  Drawn d{};
  if (live) d = Draw<KStatic>(a, lay, words, v, i, copy, a.top_levels);
  const int32_t most = __reduce_max_sync(0xffffffffu, live ? drlhet::OrderedBits(d.raw) : 0);
  const bool any = __any_sync(0xffffffffu, live && d.prob > 0.0f);
  int32_t* slots = a.scratch + v * SpreadWords(a.batch);
  if ((threadIdx.x & 31) == 0 && live) {  // lane 0 of a warp with a target: the warp's slot
    slots[2 * (b / 32)] = most > 0 ? most : 0;
    slots[2 * (b / 32) + 1] = any ? 1 : 0;
  }
  GridSync();
  int32_t largest = 0;
  bool any_positive = false;
  MergeSpreadWords(slots, a.batch, &largest, &any_positive);
  if (live) {
    a.indices[i] = d.index;
    a.probs[i] = d.prob;
    a.weights[i] = drlhet::Weight(d.raw, drlhet::FromOrderedBits(largest), words.beta);
  }
  if (b == 0) {
    a.error[v] = drlhet::SampleErrors(any_positive, words.beta, a.err_empty, a.err_beta);
  }
}

}  // namespace drlhet_cuda

extern "C" {

// grid = V trees * blocks_per_tree blocks, launched cooperatively (SampleSpread).
__global__ void drlhet_cuda_sample_spread(drlhet_cuda::SampleArgs a, int32_t blocks_per_tree) {
  drlhet_cuda::SampleSpread<0>(a, blocks_per_tree);
}

__global__ void drlhet_cuda_sample_spread_k16(drlhet_cuda::SampleArgs a,
                                              int32_t blocks_per_tree) {
  drlhet_cuda::SampleSpread<16>(a, blocks_per_tree);
}

}  // extern "C"
