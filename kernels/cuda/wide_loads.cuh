// The sum tree's per-node rules (drlhet/sum_tree.h) with a node's loads issued before its
// arithmetic, for GPU threads. A GPU thread stalls at an instruction until the load it needs
// returns and issues in order, so a loop over a runtime K that loads a child and then uses it
// waits for a round trip to memory per child (or per few, as nvcc unrolls it by 4). Here the
// children are read kLoadChunk at a time into registers (unrolled, predicated loads), then used
// in the rule's order: the same float operations in the same order, so the same bits, for one
// round trip per kLoadChunk children. Where K is a multiple of 4, four children come in each
// 128-bit load (LoadChunk): a warp's scalar loads of 32 nodes' children touch about 16 cache
// lines per instruction, one instruction per child. By our count of L1 wavefronts (an estimate,
// not a profile) that is most of the narrow levels' 23.9 us at B 4096 on an H100 (ncu,
// 2026-11-26); the vector loads are not yet measured there. Compiled by nvcc for the GPU and
// by the host compiler for the emulation (emu/cuda_emu.h), which runs them against the
// reference, the vector path's choices included (its load is a memcpy there).
// Zhang, Meng, Prasanna, IEEE TPDS 2023, Sec. 4 (K-ary sum tree) and Sec. 5.2 (the GPU kernel).
#pragma once

#include <cstdint>
#include <cstring>

#include "drlhet/sum_tree.h"

namespace drlhet_cuda {

constexpr int kLoadChunk = 16;

// A tree's K: KStatic where it is > 0 (a kernel compiled for that K: nvcc then unrolls the node
// sums and divides by a constant), else the layout's.
template <int KStatic>
__device__ inline int KOf(const drlhet::TreeLayout& lay) {
  return KStatic > 0 ? KStatic : lay.k;
}

// chunk[j] = c[j] for j < count (count <= kLoadChunk), else 0: four at a time where c is 16-byte
// aligned and count a multiple of 4, else one at a time. The same values either way.
__device__ inline void LoadChunk(const float* c, int count, float (&chunk)[kLoadChunk]) {
  if ((reinterpret_cast<uintptr_t>(c) & 15u) == 0 && (count & 3) == 0) {
#pragma unroll
    for (int q = 0; q < kLoadChunk / 4; ++q) {
      float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (4 * q < count) {
#if defined(__CUDA_ARCH__)
        const float4 w = reinterpret_cast<const float4*>(c)[q];
        v[0] = w.x;
        v[1] = w.y;
        v[2] = w.z;
        v[3] = w.w;
#else
        std::memcpy(v, c + 4 * q, sizeof(v));
#endif
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) chunk[4 * q + j] = v[j];
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < kLoadChunk; ++j) chunk[j] = j < count ? c[j] : 0.0f;
}

// drlhet::ChooseChild: the children scanned in order (ScanChild), read a chunk at a time
// (LoadChunk). KStatic > 0 fixes K at compile time (k_dynamic is then ignored).
template <int KStatic>
__device__ inline drlhet::Choice ChooseChildWide(const float* children, int k_dynamic, float u) {
  const int k = KStatic > 0 ? KStatic : k_dynamic;
  float acc, left, left_nz;
  int32_t count, last_nz;
  drlhet::ScanBegin(acc, left, left_nz, count, last_nz);
  for (int base = 0; base < k; base += kLoadChunk) {
    float chunk[kLoadChunk];
    LoadChunk(children + base, k - base < kLoadChunk ? k - base : kLoadChunk, chunk);
#pragma unroll
    for (int j = 0; j < kLoadChunk; ++j) {
      if (base + j < k) {
        drlhet::ScanChild(chunk[j], base + j, u, acc, left, left_nz, count, last_nz);
      }
    }
  }
  drlhet::Choice out;
  drlhet::ResolveChild(count, last_nz, left, left_nz, out.child, out.left);
  out.value = drlhet::ChosenValue(children[out.child]);
  out.total = acc;
  return out;
}

// drlhet::DescendOne with ChooseChildWide (the same steps, its loads a chunk at a time). The
// children at levels 1 .. top_levels are read from `top`, a copy of the tree's first slots (its
// levels 0 .. top_levels) in the block's shared memory, the others from `tree`: the
// same values, so the same bits, for a few cycles a level instead of a round trip to memory.
// top_levels 0: every level from `tree` (`top` unused).
template <int KStatic>
__device__ inline int32_t DescendOneWide(const float* tree, const float* top, int top_levels,
                                         const drlhet::TreeLayout& lay, float target,
                                         float* value, float* level1_total) {
  const int k = KStatic > 0 ? KStatic : lay.k;
  float u = target > 0.0f ? target : 0.0f;
  int64_t node = 0;
  for (int level = 1; level <= lay.depth; ++level) {
    const float* from = level <= top_levels ? top : tree;
    const drlhet::Choice c = ChooseChildWide<KStatic>(from + lay.offsets[level] + node * k, k, u);
    if (level == 1) *level1_total = c.total;
    *value = c.value;
    u = drlhet::NextTarget(u, c.left);
    node = node * k + c.child;
  }
  return static_cast<int32_t>(node);
}

// drlhet::SeqSum of the K children at c (child 0 as it is, then SumChild in order), read a
// chunk at a time. KStatic > 0 fixes K at compile time (k_dynamic is then ignored).
template <int KStatic = 0>
__device__ inline float SumChildrenWide(const float* c, int k_dynamic) {
  const int k = KStatic > 0 ? KStatic : k_dynamic;
  float acc = 0.0f;
  for (int base = 0; base < k; base += kLoadChunk) {
    float chunk[kLoadChunk];
    LoadChunk(c + base, k - base < kLoadChunk ? k - base : kLoadChunk, chunk);
#pragma unroll
    for (int j = 0; j < kLoadChunk; ++j) {
      if (base + j == 0) {
        acc = chunk[j];  // SeqSum takes child 0 as it is
      } else if (base + j < k) {
        acc = drlhet::SumChild(acc, chunk[j]);
      }
    }
  }
  return acc;
}

// drlhet::RecomputeNode: parents[node] = SeqSum of its K children (SumChildrenWide).
template <int KStatic = 0>
__device__ inline void RecomputeNodeWide(float* tree, const drlhet::TreeLayout& lay, int level,
                                         int64_t node) {
  const int k = KOf<KStatic>(lay);
  tree[lay.offsets[level] + node] =
      SumChildrenWide<KStatic>(tree + lay.offsets[level + 1] + node * k, k);
}

}  // namespace drlhet_cuda
