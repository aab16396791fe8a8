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

// drlhet::MakeLayout's members, every one, computed by the 32 lanes of a warp at once (all of
// them call it): lane j counts the nodes of the level j above the leaves, ceil(C / K^j) (K^j by
// products, then one division: the same integer as MakeLayout's j repeated ceilings), the
// levels' widths are summed by a suffix scan over the lanes, and each lane writes its slots of
// the root-first arrays (zero past the root). MakeLayout itself, by one thread, is a chain of
// two dozen dependent divisions and 128 stores before any thread of the block can start, at
// the head of every kernel; here the chain is a few products, two divisions and five shuffles.
// Capacities of 2^31 and more (never a tree's: leaf indices are int32) and bad arguments take
// MakeLayout itself, on lane 0.
__device__ inline void WarpLayout(int64_t capacity, int32_t k, drlhet::TreeLayout* lay) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  if (capacity < 1 || capacity > 0x7fffffff || k < 2 || k > drlhet::kMaxBranching) {
    if (lane == 0) drlhet::MakeLayout(capacity, k, lay);  // the same branch on every lane
    return;
  }
  int64_t power = 1;  // K^lane, or the first power >= C (then the count is 1)
  for (int j = 0; j < lane && power < capacity; ++j) power *= k;
  const int64_t count = drlhet::DivCeil(capacity, power);
  // K^31 >= 2^31 > C: lane 31 counts 1, so the root is some lane's level
  const int depth = 1 + __reduce_add_sync(0xffffffffu, lane >= 1 && count > 1 ? 1u : 0u);
  const int64_t width = lane <= depth ? drlhet::DivCeil(count, k) * k : 0;
  int64_t above = width;  // the widths of this lane's level and every level above it
  for (int d = 1; d < 32; d *= 2) {
    const int64_t other = __shfl_sync(0xffffffffu, above, lane + d < 32 ? lane + d : 31);
    if (lane + d < 32) above += other;
  }
  const int64_t size = __shfl_sync(0xffffffffu, above, 0);
  // level `lane` (root first) is lane depth - lane's level above the leaves
  const int from = lane <= depth ? depth - lane : 0;
  const int64_t level_count = __shfl_sync(0xffffffffu, count, from);
  const int64_t level_offset = __shfl_sync(0xffffffffu, above - width, from);
  lay->counts[lane] = lane <= depth ? level_count : 0;
  lay->offsets[lane] = lane <= depth ? level_offset : 0;
  for (int level = lane + 32; level < drlhet::kMaxLevels; level += 32) {
    lay->counts[level] = lay->offsets[level] = 0;
  }
  if (lane == 0) {
    lay->depth = depth;
    lay->size = size;
    lay->capacity = capacity;
    lay->k = k;
  }
}

// The layout of (capacity, K), built by the block's first warp into shared memory
// (WarpLayout). A barrier of the block: every thread calls it, before any thread returns.
__device__ inline const drlhet::TreeLayout& BlockLayout(int64_t capacity, int32_t k) {
  __shared__ drlhet::TreeLayout lay;
  if (threadIdx.x < 32) WarpLayout(capacity, k, &lay);
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
