// The sum tree's per-node rules (drlhet/sum_tree.h) with a node's loads issued before its
// arithmetic, for GPU threads. A GPU thread stalls at an instruction until the load it needs
// returns and issues in order, so a loop over a runtime K that loads a child and then uses it
// waits for a round trip to memory per child (or per few, as nvcc unrolls it by 4). Here the
// children are read kLoadChunk at a time into registers (unrolled, predicated loads), then used
// in the rule's order: the same float operations in the same order, so the same bits, for one
// round trip per kLoadChunk children. Compiled by nvcc for the GPU and by the host compiler for
// the emulation (emu/cuda_emu.h), which runs them against the reference.
// Zhang, Meng, Prasanna, IEEE TPDS 2023, Sec. 4 (K-ary sum tree) and Sec. 5.2 (the GPU kernel).
#pragma once

#include <cstdint>

#include "drlhet/sum_tree.h"

namespace drlhet_cuda {

constexpr int kLoadChunk = 16;

// drlhet::ChooseChild for a runtime K: the children scanned in order (ScanChild), read a chunk
// at a time. K fixed at compile time (ChooseChild<16>) already unrolls its loads.
__device__ inline drlhet::Choice ChooseChildWide(const float* children, int k, float u) {
  float acc, left, left_nz;
  int32_t count, last_nz;
  drlhet::ScanBegin(acc, left, left_nz, count, last_nz);
  for (int base = 0; base < k; base += kLoadChunk) {
    float chunk[kLoadChunk];
#pragma unroll
    for (int j = 0; j < kLoadChunk; ++j) chunk[j] = base + j < k ? children[base + j] : 0.0f;
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

// drlhet::DescendOne with ChooseChildWide where K is a runtime value.
template <int KStatic>
__device__ inline int32_t DescendOneWide(const float* tree, const drlhet::TreeLayout& lay,
                                         float target, float* value, float* level1_total) {
  if (KStatic > 0) return drlhet::DescendOne<KStatic>(tree, lay, target, value, level1_total);
  float u = target > 0.0f ? target : 0.0f;
  int64_t node = 0;
  for (int level = 1; level <= lay.depth; ++level) {
    const drlhet::Choice c = ChooseChildWide(tree + lay.offsets[level] + node * lay.k, lay.k, u);
    if (level == 1) *level1_total = c.total;
    *value = c.value;
    u = drlhet::NextTarget(u, c.left);
    node = node * lay.k + c.child;
  }
  return static_cast<int32_t>(node);
}

// drlhet::RecomputeNode: parents[node] = SeqSum of its K children (child 0 as it is, then
// SumChild in order), the children read a chunk at a time.
__device__ inline void RecomputeNodeWide(float* tree, const drlhet::TreeLayout& lay, int level,
                                         int64_t node) {
  const float* c = tree + lay.offsets[level + 1] + node * lay.k;
  float acc = 0.0f;
  for (int base = 0; base < lay.k; base += kLoadChunk) {
    float chunk[kLoadChunk];
#pragma unroll
    for (int j = 0; j < kLoadChunk; ++j) chunk[j] = base + j < lay.k ? c[base + j] : 0.0f;
#pragma unroll
    for (int j = 0; j < kLoadChunk; ++j) {
      if (base + j == 0) {
        acc = chunk[j];  // SeqSum takes child 0 as it is
      } else if (base + j < lay.k) {
        acc = drlhet::SumChild(acc, chunk[j]);
      }
    }
  }
  tree[lay.offsets[level] + node] = acc;
}

}  // namespace drlhet_cuda
