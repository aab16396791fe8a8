// The launch sequences of the CUDA backend's update and sample calls, shared by the XLA FFI
// handlers (sum_tree.cu, on XLA's stream) and the host emulation of the CUDA execution model
// (emu/cuda_emu.h, which defines DRLHET_LAUNCH and the runtime calls before including this), so
// that the emulation runs the same launches in the same order as a GPU.
// Include after sample_kernels.cuh and sum_tree_kernels.cuh.
#pragma once

#include <cstdint>

#include "drlhet/sum_tree.h"

#if defined(__CUDACC__)
#define DRLHET_LAUNCH(kernel, grid, threads, stream, ...) \
  kernel<<<static_cast<unsigned>(grid), threads, 0, stream>>>(__VA_ARGS__)
#endif

namespace drlhet_cuda {

constexpr int kThreads = 256;
constexpr int kBlockThreads = 1024;  // drlhet_cuda_update_block / _top: one block per tree

inline unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// The update's launches: one block per tree up to block_max_batch entries per tree, else
// reset, claim, leaves, then one launch per level from the leaves' parents up: a thread per
// entry (its ancestor) at the levels wider than the batch, a thread per node at the levels no
// wider than the batch but wider than narrow_max_nodes, and one block per tree for the rest
// (the narrow levels, whole, and Finish).
inline void LaunchUpdate(cudaStream_t stream, const UpdateArgs& a, const drlhet::TreeLayout& lay,
                         int64_t trees, int64_t block_max_batch, int64_t narrow_max_nodes) {
  if (a.batch <= block_max_batch) {
    DRLHET_LAUNCH(drlhet_cuda_update_block, trees, kBlockThreads, stream, a);
    return;
  }
  DRLHET_LAUNCH(drlhet_cuda_update_reset_args, Blocks(a.n), kThreads, stream, a);
  DRLHET_LAUNCH(drlhet_cuda_update_claim_args, Blocks(a.n), kThreads, stream, a);
  DRLHET_LAUNCH(drlhet_cuda_update_leaves_args, Blocks(a.n), kThreads, stream, a);
  const int whole = drlhet::NarrowTop(lay, a.batch, a.batch);  // levels 0..whole: <= batch
  const int top = drlhet::NarrowTop(lay, a.batch, narrow_max_nodes);
  for (int level = lay.depth - 1; level > whole; --level) {
    DRLHET_LAUNCH(drlhet_cuda_update_level_args, Blocks(a.n), kThreads, stream, a, level);
  }
  for (int level = whole; level > top; --level) {
    const int64_t nodes = trees * drlhet::NodesAt(lay, level);
    DRLHET_LAUNCH(drlhet_cuda_update_whole_level_args, Blocks(nodes), kThreads, stream, a, level,
                  nodes);
  }
  // always launched: it also writes a checked update's outputs (top -1: no level recomputed)
  DRLHET_LAUNCH(drlhet_cuda_update_top_args, trees, kBlockThreads, stream, a, top);
}

// The sample's launches after its targets: one block per tree up to kBlockThreads targets per
// tree, else its scratch cleared, the descent, the weights.
inline void LaunchWeigh(cudaStream_t stream, const SampleArgs& a, int64_t trees) {
  if (a.batch <= kBlockThreads) {
    const int threads = static_cast<int>((a.batch + 31) / 32 * 32);  // whole warps
    if (a.k == 16) {
      DRLHET_LAUNCH(drlhet_cuda_sample_block_k16, trees, threads, stream, a);
    } else {
      DRLHET_LAUNCH(drlhet_cuda_sample_block, trees, threads, stream, a);
    }
    return;
  }
  cudaMemsetAsync(a.scratch, 0, 2 * trees * sizeof(int32_t), stream);
  if (a.k == 16) {
    DRLHET_LAUNCH(drlhet_cuda_sample_descend_k16, Blocks(a.n), kThreads, stream, a);
  } else {
    DRLHET_LAUNCH(drlhet_cuda_sample_descend, Blocks(a.n), kThreads, stream, a);
  }
  DRLHET_LAUNCH(drlhet_cuda_sample_normalise, Blocks(a.n), kThreads, stream, a);
}

}  // namespace drlhet_cuda
