// CUDA kernels of the prioritized buffer's sample after its targets: the descent of each target,
// its probability and its importance-sampling weight, in two launches (the weights are
// normalised by the batch's largest, known only once every target has descended), or in one
// block per tree for a batch no larger than a block. The buffer's
// reference is drlhet/replay/buffer_ops.py's weigh; the per-element logic is
// drlhet/prioritized.h's and drlhet/sum_tree.h's, run serially on the CPU by
// kernels/cpu/header_probe.cc. V trees, `batch` targets each, n = V * batch; a launch of
// whole warps (blockDim a multiple of 32), every thread reaching the warp reductions.
// Zhang, Meng, Prasanna, IEEE TPDS 2023, Sec. 5.2 (the GPU's sampling).
#pragma once

#include "drlhet/jax_random.h"
#include "drlhet/prioritized.h"
#include "drlhet/sum_tree.h"
#include "block_layout.cuh"
#include "cluster.cuh"
#include "wide_loads.cuh"

namespace drlhet_cuda {

struct SampleArgs {
  const float* nodes;     // [V, T]
  int64_t capacity;       // C
  int32_t k;              // K
  const float* targets;   // [n]
  int64_t batch;
  int64_t n;
  const int32_t* size;    // [V] transitions stored
  const float* beta;      // [V]
  int32_t* indices;       // [n]
  float* probs;           // [n]
  float* weights;         // [n]: the raw weights after the descent, normalised in place after
  int32_t* error;         // [V]
  int32_t* scratch;       // [V, 2]: OrderedBits of the largest raw weight, any probability > 0;
                          // 0 before the descent (the per-launch path's; the block and cluster
                          // paths merge in shared memory)
  int32_t err_empty;
  int32_t err_beta;
  // targets drawn here from each tree's key instead (drlhet/jax_random.h), or nullptr: targets
  const uint32_t* key;    // [V, 2] threefry2x32 key words
  int32_t stratified;     // 1: stratified targets (batch a power of two), 0: i.i.d.
  // the descent's top levels from shared memory (SetTopCopy), or 0 levels: all from `nodes`
  int32_t top_levels;     // children at levels 1 .. top_levels read from the block's copy
  int64_t top_slots;      // the copy: each tree's first top_slots slots (SetTopCopy)
  int64_t tree_size;      // slots per tree (the layout's size), so that the copy starts before
                          // the block has built its layout
};

// The largest copy of a tree's top levels a block keeps in shared memory (24 KB): at 2^20
// leaves, levels 0..3 for K 16 (4384 slots), 0..2 for K 32 or 64, 0..11 for K 2.
constexpr int64_t kTopFloats = 6144;

// The deepest level L <= depth whose levels 0..L (their slots, padding included) fit
// kTopFloats, or 0 (the root alone is no saving) when not even level 1 does or `enabled` is 0.
inline int32_t TopLevelsFor(const drlhet::TreeLayout& lay, bool enabled) {
  int32_t levels = 0;
  if (!enabled) return 0;
  for (int level = 1; level <= lay.depth; ++level) {
    const int64_t slots = level < lay.depth ? lay.offsets[level + 1] : lay.size;
    if (slots > kTopFloats) break;
    levels = level;
  }
  return levels;
}

// Sets a's top copy for trees of layout `lay`: its levels (TopLevelsFor), its slots (those of
// levels 0..top_levels, padding included) and the trees' size.
inline void SetTopCopy(SampleArgs* a, const drlhet::TreeLayout& lay, bool enabled) {
  a->top_levels = TopLevelsFor(lay, enabled);
  const int levels = a->top_levels;
  a->top_slots = levels == 0 ? 0 : levels < lay.depth ? lay.offsets[levels + 1] : lay.size;
  a->tree_size = lay.size;
}

// The first `slots` slots of `tree` into `top` by the block's threads, four at a time where
// both are 16-byte aligned (`top` is) and `slots` a multiple of 4. Before a barrier of the block.
__device__ inline void CopyTop(const float* tree, int64_t slots, float* top) {
  if ((reinterpret_cast<uintptr_t>(tree) & 15u) == 0 && (slots & 3) == 0) {
    for (int64_t q = threadIdx.x; q < slots / 4; q += blockDim.x) {
#if defined(__CUDA_ARCH__)
      reinterpret_cast<float4*>(top)[q] = reinterpret_cast<const float4*>(tree)[q];
#else
      std::memcpy(top + 4 * q, tree + 4 * q, 4 * sizeof(float));
#endif
    }
    return;
  }
  for (int64_t j = threadIdx.x; j < slots; j += blockDim.x) top[j] = tree[j];
}

// What a thread reads of its tree v besides the nodes: the key words (when the targets are
// drawn here), the size and beta. Loaded at the kernel's start, before the block's first
// barrier and used only after it, so that these round trips to memory overlap the top copy's
// instead of adding two of their own to the chain (the key before the descent; size and beta
// after it). The size stays an integer until used: converting it would wait for the load.
struct TreeWords {
  uint32_t key0, key1;
  int32_t size;
  float beta;
};

__device__ inline TreeWords LoadTreeWords(const SampleArgs& a, int64_t v) {
  TreeWords w{};
  if (a.key != nullptr) {
    w.key0 = a.key[2 * v];
    w.key1 = a.key[2 * v + 1];
  }
  w.size = a.size[v];
  w.beta = a.beta[v];
  return w;
}

// Target i (of tree v, whose nodes are `tree`): given, or drawn from the tree's key (`w`) as
// the buffer draws it (the root is the total).
__device__ inline float TargetOf(const SampleArgs& a, const TreeWords& w, int64_t v, int64_t i,
                                 const float* tree) {
  if (a.key == nullptr) return a.targets[i];
  return drlhet::TargetFromKey(w.key0, w.key1, i - v * a.batch, a.batch, tree[0],
                               a.stratified != 0);
}

// A target descended: its leaf, probability and raw weight.
struct Drawn {
  int32_t index;
  float prob, raw;
};

// Target i (of tree v, whose words are `w`) descended, nothing written. Levels 0 .. top_levels
// from `top`, the block's copy of the tree's top (top_levels 0: none).
template <int KStatic>
__device__ inline Drawn Draw(const SampleArgs& a, const drlhet::TreeLayout& lay,
                             const TreeWords& w, int64_t v, int64_t i, const float* top,
                             int top_levels) {
  float value = 0.0f, total = 0.0f;
  const float* tree = a.nodes + v * lay.size;
  const float target = TargetOf(a, w, v, i, top_levels > 0 ? top : tree);
  Drawn d{};
  d.index = DescendOneWide<KStatic>(tree, top, top_levels, lay, target, &value, &total);
  d.prob = drlhet::Probability(value, total);
  d.raw = drlhet::RawWeight(d.prob, static_cast<float>(w.size), w.beta);
  return d;
}

// Draw, its index and probability written; returns its raw weight, and whether its
// probability is > 0 in *positive.
template <int KStatic>
__device__ inline float DescendAndWeigh(const SampleArgs& a, const drlhet::TreeLayout& lay,
                                       const TreeWords& w, int64_t v, int64_t i,
                                       const float* top, int top_levels, bool* positive) {
  const Drawn d = Draw<KStatic>(a, lay, w, v, i, top, top_levels);
  a.indices[i] = d.index;
  a.probs[i] = d.prob;
  *positive = d.prob > 0.0f;
  return d.raw;
}

// The descent of target i, its probability and raw weight; the tree's largest raw weight and
// whether a probability is > 0 merged per warp, then atomically.
// A block whose threads are all one tree's first copies the tree's top levels.
template <int KStatic>
__device__ inline void SampleDescend(const SampleArgs& a) {
  __shared__ __align__(16) float copy[kTopFloats];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x;
  const int64_t i = first + threadIdx.x;
  const bool live = i < a.n;
  const int64_t last = first + blockDim.x - 1 < a.n ? first + blockDim.x - 1 : a.n - 1;
  const int64_t v_first = SlotOf(first, a.batch).tree;  // first < n: Blocks(n) blocks
  const int top_levels = v_first == SlotOf(last, a.batch).tree ? a.top_levels : 0;
  const int64_t v = live ? SlotOf(i, a.batch).tree : 0;
  const TreeWords words = LoadTreeWords(a, v);
  if (top_levels > 0) CopyTop(a.nodes + v_first * a.tree_size, a.top_slots, copy);
  const drlhet::TreeLayout& lay = BlockLayout(a.capacity, a.k);  // a barrier: the copy is in
  int32_t top = 0;
  bool positive = false;
  if (live) {
    const float w = DescendAndWeigh<KStatic>(a, lay, words, v, i, copy, top_levels, &positive);
    a.weights[i] = w;
    top = drlhet::OrderedBits(w);
  }
  const int64_t v0 = __shfl_sync(0xffffffffu, v, 0);
  if (__all_sync(0xffffffffu, !live || v == v0)) {  // the warp's targets are one tree's
    const int32_t most = __reduce_max_sync(0xffffffffu, top);
    const bool any = __any_sync(0xffffffffu, positive);
    if ((threadIdx.x & 31) == 0 && live) {
      if (most > 0) atomicMax(a.scratch + 2 * v0, most);
      if (any) atomicOr(a.scratch + 2 * v0 + 1, 1);
    }
    return;
  }
  if (top > 0) atomicMax(a.scratch + 2 * v, top);
  if (positive) atomicOr(a.scratch + 2 * v + 1, 1);
}

// Each raw weight over its tree's largest; the tree's error bits (entry 0 of each tree).
__device__ inline void SampleNormalise(const SampleArgs& a) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.n) return;
  const Slot s = SlotOf(i, a.batch);
  const int64_t v = s.tree;
  const float beta = a.beta[v];
  a.weights[i] = drlhet::Weight(a.weights[i], drlhet::FromOrderedBits(a.scratch[2 * v]), beta);
  if (s.pos == 0) {
    a.error[v] = drlhet::SampleErrors(a.scratch[2 * v + 1] != 0, beta, a.err_empty, a.err_beta);
  }
}

// The whole sample of tree blockIdx.x by one block of whole warps, batch <= blockDim: each
// thread descends its own target, the tree's largest raw weight and whether a probability is > 0
// are merged in shared memory, then each thread normalises its own weight. One launch instead
// of a memset and two launches (the same results: the same maximum, the same Weight).
template <int KStatic>
__device__ inline void SampleBlock(const SampleArgs& a) {
  __shared__ int32_t most, any;
  __shared__ __align__(16) float copy[kTopFloats];
  const int64_t v = blockIdx.x, b = threadIdx.x, i = v * a.batch + b;
  const bool live = b < a.batch;
  if (threadIdx.x == 0) most = any = 0;
  const TreeWords words = LoadTreeWords(a, v);
  CopyTop(a.nodes + v * a.tree_size, a.top_slots, copy);
  // a barrier: most, any are 0, the copy is in
  const drlhet::TreeLayout& lay = BlockLayout(a.capacity, a.k);
  float w = 0.0f;
  bool positive = false;
  if (live) w = DescendAndWeigh<KStatic>(a, lay, words, v, i, copy, a.top_levels, &positive);
  const int32_t warp_most = __reduce_max_sync(0xffffffffu, drlhet::OrderedBits(w));
  const bool warp_any = __any_sync(0xffffffffu, positive);
  if ((threadIdx.x & 31) == 0) {
    if (warp_most > 0) atomicMax(&most, warp_most);
    if (warp_any) atomicOr(&any, 1);
  }
  __syncthreads();
  const float beta = words.beta;
  if (live) a.weights[i] = drlhet::Weight(w, drlhet::FromOrderedBits(most), beta);
  if (threadIdx.x == 0) a.error[v] = drlhet::SampleErrors(any != 0, beta, a.err_empty, a.err_beta);
}

// The whole sample of tree blockIdx.x / cs by one cluster of cs blocks (cluster.cuh, cs at most
// kClusterMaxBlocks): each thread descends every (cs * blockDim)-th target and keeps the largest
// raw weight and whether a probability is > 0 of its targets; its warp merges them, then its
// block in a word of its own shared memory (the block's slot of `block_most`, `block_any`);
// after a cluster barrier every thread reads the cluster's cs words over distributed shared
// memory (ClusterPeer) and normalises the weights it drew (its first in a register, any others
// through `weights`). One launch, one barrier between the descent and the scaling, and no
// global scratch: the same results as SampleDescend's atomics (a maximum and an OR, in any
// order). A thread's first target is kept in registers and written after the barrier, so that
// the barrier's release has no stores to global memory to wait for (only the block's words in
// shared memory). No block exits before every thread has read the others' words (the
// barrier's second half at the end).
template <int KStatic>
__device__ inline void SampleCluster(const SampleArgs& a, int32_t cs) {
  __shared__ __align__(16) float copy[kTopFloats];  // each block's own (the emulation: one,
                                                    // which every block fills alike)
  __shared__ int32_t block_most[kClusterMaxBlocks], block_any[kClusterMaxBlocks];  // by rank
  const int64_t v = blockIdx.x / cs, base = v * a.batch;
  const unsigned rank = blockIdx.x % cs;
  const int64_t t = rank * blockDim.x + threadIdx.x, all = cs * blockDim.x;
  if (threadIdx.x == 0) block_most[rank] = block_any[rank] = 0;
  const TreeWords words = LoadTreeWords(a, v);
  CopyTop(a.nodes + v * a.tree_size, a.top_slots, copy);
  // a barrier of the block: the copy is in, the block's words are 0
  const drlhet::TreeLayout& lay = BlockLayout(a.capacity, a.k);
  Drawn first{};  // the thread's first target, kept in registers until after the barrier
  int32_t top = 0;
  bool positive = false;
  for (int64_t b = t; b < a.batch; b += all) {
    bool p = false;
    float w = 0.0f;
    if (b == t) {
      first = Draw<KStatic>(a, lay, words, v, base + b, copy, a.top_levels);
      w = first.raw;
      p = first.prob > 0.0f;
    } else {
      w = DescendAndWeigh<KStatic>(a, lay, words, v, base + b, copy, a.top_levels, &p);
      a.weights[base + b] = w;
    }
    const int32_t bits = drlhet::OrderedBits(w);
    top = bits > top ? bits : top;
    positive = positive || p;
  }
  const int32_t most = __reduce_max_sync(0xffffffffu, top);  // every lane of the warp is here
  const bool any = __any_sync(0xffffffffu, positive);
  if ((threadIdx.x & 31) == 0) {
    if (most > 0) atomicMax(block_most + rank, most);
    if (any) atomicOr(block_any + rank, 1);
  }
  // every block's words are final, and seen by the cluster; a hand-off in shared memory only
  // (each thread reads after it only the weights it wrote itself)
  ClusterSyncShared();
  int32_t largest_bits = 0, any_words = 0;
  ClusterWords(block_any, block_most, cs, &any_words, &largest_bits);  // OR, and the largest
  const bool any_positive = any_words != 0;
  ClusterArrive();  // done with the other blocks' shared memory
  const float beta = words.beta;
  const float largest = drlhet::FromOrderedBits(largest_bits);
  if (t < a.batch) {
    a.indices[base + t] = first.index;
    a.probs[base + t] = first.prob;
  }
  for (int64_t b = t; b < a.batch; b += all) {
    const float w = b == t ? first.raw : a.weights[base + b];
    a.weights[base + b] = drlhet::Weight(w, largest, beta);
  }
  if (t == 0) a.error[v] = drlhet::SampleErrors(any_positive, beta, a.err_empty, a.err_beta);
  ClusterWait();  // no block exits while another may still read its words
}

}  // namespace drlhet_cuda

extern "C" {

__global__ void drlhet_cuda_sample_descend(drlhet_cuda::SampleArgs a) {
  drlhet_cuda::SampleDescend<0>(a);
}

__global__ void drlhet_cuda_sample_descend_k16(drlhet_cuda::SampleArgs a) {
  drlhet_cuda::SampleDescend<16>(a);
}

__global__ void drlhet_cuda_sample_normalise(drlhet_cuda::SampleArgs a) {
  drlhet_cuda::SampleNormalise(a);
}

// grid = V trees, one block of whole warps each, at least `batch` threads. The second bound
// asks ptxas for one resident block per SM, no more: without it ptxas held the K 16 kernel to
// 32 registers and spilled to local memory once the top copy came in (44 registers, no spill).
__global__ void __launch_bounds__(1024, 1) drlhet_cuda_sample_block(drlhet_cuda::SampleArgs a) {
  drlhet_cuda::SampleBlock<0>(a);
}

__global__ void __launch_bounds__(1024, 1)
    drlhet_cuda_sample_block_k16(drlhet_cuda::SampleArgs a) {
  drlhet_cuda::SampleBlock<16>(a);
}

// grid = V trees * cs blocks, in clusters of cs (SampleCluster); sm_90 and up.
__global__ void __launch_bounds__(1024)
    drlhet_cuda_sample_cluster(drlhet_cuda::SampleArgs a, int32_t cs) {
  drlhet_cuda::SampleCluster<0>(a, cs);
}

__global__ void __launch_bounds__(1024)
    drlhet_cuda_sample_cluster_k16(drlhet_cuda::SampleArgs a, int32_t cs) {
  drlhet_cuda::SampleCluster<16>(a, cs);
}

}  // extern "C"
