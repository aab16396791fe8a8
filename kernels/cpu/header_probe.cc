// The shared header's per-element logic (drlhet/sum_tree.h), exported one node at a time so that
// tests can check it against a NumPy statement of the reference with ctypes
// (tests/backends/test_kernel_header.py). Not used by the kernels themselves.
//   drlhet_choose_child  ChooseChild on one node of k children, and NextTarget after it
//   drlhet_seq_sum       SeqSum of k >= 1 children
//   drlhet_descend_one   DescendOne for each of n targets, one after the other (what each GPU
//                        thread of kernels/cuda does for its target)
//   drlhet_update_phases the GPU update's three phases (WinnerMerge, IsWinner, RecomputeNode),
//                        run serially on the host; levels 0..top recomputed whole, as the
//                        per-level path does for its narrow levels (NarrowTop)
//   drlhet_narrow_top    NarrowTop for (capacity, k, batch, max_nodes)
#include <cstdint>

#include "drlhet/sum_tree.h"

extern "C" {

// Returns 0, or -1 (writing nothing) when k is outside [2, kMaxBranching]. K = 16 runs the
// compile-time-K instantiation the kernels use for it, any other K the run-time one.
int drlhet_choose_child(const float* children, int k, float u, int32_t* child, float* left,
                        float* value, float* total, float* next_u) {
  if (k < 2 || k > drlhet::kMaxBranching) return -1;
  const drlhet::Choice c = k == 16 ? drlhet::ChooseChild<16>(children, k, u)
                                   : drlhet::ChooseChild<0>(children, k, u);
  *child = c.child;
  *left = c.left;
  *value = c.value;
  *total = c.total;
  *next_u = drlhet::NextTarget(u, c.left);
  return 0;
}

float drlhet_seq_sum(const float* c, int k) { return drlhet::SeqSum(c, k); }

// Returns 0, or -1 for a bad (capacity, k).
int drlhet_descend_one(const float* tree, int64_t capacity, int k, const float* targets, int64_t n,
                       int32_t* indices, float* values, float* total) {
  drlhet::TreeLayout lay;
  if (!drlhet::MakeLayout(capacity, k, &lay)) return -1;
  for (int64_t i = 0; i < n; ++i) {
    indices[i] = k == 16 ? drlhet::DescendOne<16>(tree, lay, targets[i], values + i, total)
                         : drlhet::DescendOne<0>(tree, lay, targets[i], values + i, total);
  }
  return 0;
}

// Returns 0 (tree updated), 1 (an invalid entry: batch refused, tree unchanged) or -1 (bad
// layout). `winner` is scratch of `capacity` slots. Levels 0..top (-1: none) have every node
// recomputed, the others each winner's ancestor.
int drlhet_update_phases(float* tree, int64_t capacity, int k, const int32_t* indices,
                         const float* values, const bool* keep, int32_t n, int32_t* winner,
                         int top) {
  drlhet::TreeLayout lay;
  if (!drlhet::MakeLayout(capacity, k, &lay)) return -1;
  for (int32_t b = 0; b < n; ++b) {
    if (keep[b] && !drlhet::ValidEntry(indices[b], values[b], capacity)) return 1;
  }
  for (int64_t i = 0; i < capacity; ++i) winner[i] = -1;
  for (int32_t b = n - 1; b >= 0; --b) {  // any order gives the same winners
    if (keep[b]) winner[indices[b]] = drlhet::WinnerMerge(winner[indices[b]], b);
  }
  const int64_t leaf0 = lay.offsets[lay.depth];
  for (int32_t b = 0; b < n; ++b) {
    if (keep[b] && drlhet::IsWinner(winner[indices[b]], b, keep[b])) {
      tree[leaf0 + indices[b]] = values[b];
    }
  }
  for (int level = lay.depth - 1; level >= 0; --level) {
    if (level <= top) {
      for (int64_t node = 0; node < drlhet::NodesAt(lay, level); ++node) {
        drlhet::RecomputeNode(tree, lay, level, node);
      }
      continue;
    }
    for (int32_t b = 0; b < n; ++b) {
      if (keep[b] && drlhet::IsWinner(winner[indices[b]], b, keep[b])) {
        drlhet::RecomputeNode(tree, lay, level, drlhet::AncestorAt(indices[b], lay, level));
      }
    }
  }
  return 0;
}

// Returns NarrowTop, or -2 for a bad (capacity, k).
int drlhet_narrow_top(int64_t capacity, int k, int64_t batch, int64_t max_nodes) {
  drlhet::TreeLayout lay;
  if (!drlhet::MakeLayout(capacity, k, &lay)) return -2;
  return drlhet::NarrowTop(lay, batch, max_nodes);
}

}  // extern "C"
