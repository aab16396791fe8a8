// CUDA kernels of the K-ary sum tree: one thread per target (find) or per update entry. Scalar
// arguments only (each thread derives the tree's layout from capacity and K with MakeLayout), so
// that the same kernels run inside XLA (sum_tree.cu, the FFI handlers) and through CuPy
// (drlhet/backends/cuda_cupy.py loads the fatbin CMake builds from this file). The per-element
// logic is drlhet/sum_tree.h's, tested on the CPU (kernels/cpu/header_probe.cc).
//
// V trees of the same layout lie one after the other in `nodes` (leading dimensions from vmap);
// `batch` entries per tree, `n = V * batch` in all; entry i belongs to tree i / batch.
// Zhang, Meng, Prasanna, IEEE TPDS 2023, Sec. 4 (K-ary sum tree) and Sec. 5.2 (the GPU kernel).
#pragma once

#include "drlhet/sum_tree.h"

namespace drlhet_cuda {

template <int KStatic>
__device__ inline void Find(const float* nodes, int64_t capacity, int32_t k, const float* targets,
                            int64_t batch, int64_t n, int32_t* indices, float* values,
                            float* totals) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  drlhet::TreeLayout lay;
  drlhet::MakeLayout(capacity, k, &lay);
  const int64_t v = i / batch;
  float value = 0.0f, total = 0.0f;
  indices[i] = drlhet::DescendOne<KStatic>(nodes + v * lay.size, lay, targets[i], &value, &total);
  values[i] = value;
  if (i % batch == 0) totals[v] = total;
}

// The entry's tree, and whether it is its leaf's winner in a batch that was not refused.
__device__ inline bool Wins(const int32_t* indices, const bool* keep, int64_t batch, int64_t i,
                            int64_t capacity, const int32_t* winner, const int32_t* bad,
                            int64_t* v) {
  *v = i / batch;
  if (!keep[i] || bad[*v]) return false;
  const int32_t b = static_cast<int32_t>(i % batch);
  return drlhet::IsWinner(winner[*v * capacity + indices[i]], b, keep[i]);
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

// Phase 1. winner [V, capacity] all -1 and bad [V] all 0 before: each kept entry merges its
// position into its leaf's winner, or marks its tree's batch bad (refused whole).
__global__ void drlhet_cuda_update_claim(const int32_t* indices, const float* values,
                                         const bool* keep, int64_t batch, int64_t n,
                                         int64_t capacity, int32_t* winner, int32_t* bad) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n || !keep[i]) return;
  const int64_t v = i / batch;
  if (!drlhet::ValidEntry(indices[i], values[i], capacity)) {
    atomicOr(bad + v, 1);
    return;
  }
  // atomicMax is WinnerMerge done atomically: the largest kept position wins
  atomicMax(winner + v * capacity + indices[i], static_cast<int32_t>(i % batch));
}

// Phase 2: the winners' leaves.
__global__ void drlhet_cuda_update_leaves(float* nodes, int64_t capacity, int32_t k,
                                          const int32_t* indices, const float* values,
                                          const bool* keep, int64_t batch, int64_t n,
                                          const int32_t* winner, const int32_t* bad) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t v = 0;
  if (i >= n || !drlhet_cuda::Wins(indices, keep, batch, i, capacity, winner, bad, &v)) return;
  drlhet::TreeLayout lay;
  drlhet::MakeLayout(capacity, k, &lay);
  nodes[v * lay.size + lay.offsets[lay.depth] + indices[i]] = values[i];
}

// Phase 3, one launch per level from depth - 1 up to 0: the winners' ancestors at `level`,
// each recomputed from its children (written by the previous launch).
__global__ void drlhet_cuda_update_level(float* nodes, int64_t capacity, int32_t k,
                                         const int32_t* indices, const bool* keep, int64_t batch,
                                         int64_t n, const int32_t* winner, const int32_t* bad,
                                         int32_t level) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t v = 0;
  if (i >= n || !drlhet_cuda::Wins(indices, keep, batch, i, capacity, winner, bad, &v)) return;
  drlhet::TreeLayout lay;
  drlhet::MakeLayout(capacity, k, &lay);
  drlhet::RecomputeNode(nodes + v * lay.size, lay, level,
                        drlhet::AncestorAt(indices[i], lay, level));
}

// Phase 3 for the narrow levels (drlhet::NarrowTop): grid = V trees, one block each, which
// recomputes every node of levels top .. 0, a level at a time, instead of one ancestor per
// winning entry. A refused tree is skipped.
__global__ void __launch_bounds__(1024)
    drlhet_cuda_update_top(float* nodes, int64_t capacity, int32_t k, const int32_t* bad,
                           int32_t top) {
  if (bad[blockIdx.x]) return;  // the same in every thread of the block
  drlhet::TreeLayout lay;
  drlhet::MakeLayout(capacity, k, &lay);
  float* tree = nodes + static_cast<int64_t>(blockIdx.x) * lay.size;
  for (int level = top; level >= 0; --level) {
    const int64_t count = drlhet::NodesAt(lay, level);
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      drlhet::RecomputeNode(tree, lay, level, j);
    }
    __syncthreads();  // the level is written before its parents read it
  }
}

// The whole update of one tree in one block (grid = V trees, one block each): the three phases
// above, separated by __syncthreads instead of launches, each thread taking every blockDim-th
// entry. For batches small enough that one block keeps up: one graph node instead of 3 + depth
// launches and a memset. The winner slots of the batch's leaves are set to -1 first (the
// workspace is not cleared: only those slots are read). Levels no wider than the batch have
// every node recomputed once (NarrowTop). A refused batch writes no node.
__global__ void __launch_bounds__(1024)
    drlhet_cuda_update_block(float* nodes, int64_t capacity, int32_t k, const int32_t* indices,
                             const float* values, const bool* keep, int64_t batch,
                             int32_t* winner) {
  __shared__ int refused;
  const int64_t v = blockIdx.x;
  drlhet::TreeLayout lay;
  drlhet::MakeLayout(capacity, k, &lay);
  float* tree = nodes + v * lay.size;
  int32_t* win = winner + v * capacity;
  const int32_t* idx = indices + v * batch;
  const float* val = values + v * batch;
  const bool* kp = keep + v * batch;
  if (threadIdx.x == 0) refused = 0;
  __syncthreads();
  for (int64_t b = threadIdx.x; b < batch; b += blockDim.x) {
    if (!kp[b]) continue;
    if (drlhet::ValidEntry(idx[b], val[b], capacity)) {
      win[idx[b]] = -1;
    } else {
      refused = 1;
    }
  }
  __syncthreads();
  if (refused) return;  // the same value in every thread after the barrier
  for (int64_t b = threadIdx.x; b < batch; b += blockDim.x) {
    if (kp[b]) atomicMax(win + idx[b], static_cast<int32_t>(b));
  }
  __syncthreads();
  for (int64_t b = threadIdx.x; b < batch; b += blockDim.x) {
    if (drlhet::IsWinner(win[idx[b]], static_cast<int32_t>(b), kp[b])) {
      tree[lay.offsets[lay.depth] + idx[b]] = val[b];
    }
  }
  const int top = drlhet::NarrowTop(lay, batch, batch);  // levels 0..top: every node once
  for (int level = lay.depth - 1; level >= 0; --level) {
    __syncthreads();  // the level below is written
    if (level <= top) {
      for (int64_t j = threadIdx.x; j < drlhet::NodesAt(lay, level); j += blockDim.x) {
        drlhet::RecomputeNode(tree, lay, level, j);
      }
      continue;
    }
    for (int64_t b = threadIdx.x; b < batch; b += blockDim.x) {
      if (drlhet::IsWinner(win[idx[b]], static_cast<int32_t>(b), kp[b])) {
        drlhet::RecomputeNode(tree, lay, level, drlhet::AncestorAt(idx[b], lay, level));
      }
    }
  }
}

}  // extern "C"
