// Per-launch index arithmetic of the CUDA kernels, kept off each thread's critical path.
//
// A GPU thread that builds its own drlhet::TreeLayout holds about 1 KB of arrays indexed by a
// runtime level: they live in local memory (ptxas: a 1056-byte stack frame in every kernel), so
// every thread writes and reads that much, and a 64-bit integer division (MakeLayout,
// AncestorAt, NodesAt, i / batch) is a subroutine of dozens of instructions. A block of 1024
// threads doing both loads its single SM with work that is not the tree's: the one-block update
// of B 256 at 2^20 leaves took about 30 us on an H100 (ncu, 2026-11-26), for a dozen round trips
// to memory of real work. Here the block's first thread builds the layout once, in shared
// memory, and entries find their tree with 32-bit arithmetic where the numbers fit: the same
// integers, so the same results.
// Compiled by nvcc for the GPU and by the host compiler for the emulation (emu/cuda_emu.h).
#pragma once

#include <cstdint>

#include "drlhet/sum_tree.h"

namespace drlhet_cuda {

// The layout of (capacity, K), built by thread 0 of the block into shared memory. A barrier of
// the block: every thread calls it, before any thread returns.
__device__ inline const drlhet::TreeLayout& BlockLayout(int64_t capacity, int32_t k) {
  __shared__ drlhet::TreeLayout lay;
  if (threadIdx.x == 0) drlhet::MakeLayout(capacity, k, &lay);
  __syncthreads();
  return lay;
}

// Entry i >= 0 of a launch of `batch` entries per tree: its tree (i / batch) and its position
// in that tree's batch (i % batch).
struct Slot {
  int64_t tree;
  int64_t pos;
};

__device__ inline Slot SlotOf(int64_t i, int64_t batch) {
  if (i <= 0x7fffffff && batch <= 0x7fffffff) {
    const uint32_t i32 = static_cast<uint32_t>(i), b32 = static_cast<uint32_t>(batch);
    const uint32_t tree = i32 / b32;
    return {static_cast<int64_t>(tree), static_cast<int64_t>(i32 - tree * b32)};
  }
  return {i / batch, i % batch};
}

}  // namespace drlhet_cuda
