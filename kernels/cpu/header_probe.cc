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
//   drlhet_layout        MakeLayout's depth, size, offsets and node counts per level
//   drlhet_ancestor_at   AncestorAt of one leaf (32-bit arithmetic below 2^31, 64-bit above)
//   drlhet_weigh_phases  the GPU sample's two kernels (descent, probability and raw weight;
//                        weights over their maximum, error bits), serially
//   drlhet_update_checked_phases  the GPU's checked update (reset, claim with the buffer's
//                        checks and maximum, leaves, levels, finish), serially
//   drlhet_key_targets   the sample targets a kernel draws from the sample's key
//                        (drlhet/jax_random.h): jax.random's bits and uniforms, and the targets
#include <cstdint>
#include <vector>

#include "drlhet/jax_random.h"
#include "drlhet/prioritized.h"
#include "drlhet/sum_tree.h"

namespace {

// The write phases for the entries marked in `take`: winners (any merge order gives the same),
// their leaves, then each level from the leaves' parents up, levels 0..top every node.
void WritePhases(float* tree, const drlhet::TreeLayout& lay, const int32_t* indices,
                 const float* values, const uint8_t* take, int32_t n, int32_t* winner, int top) {
  for (int32_t b = 0; b < n; ++b) {
    if (take[b]) winner[indices[b]] = -1;  // reset: only the batch's slots
  }
  for (int32_t b = n - 1; b >= 0; --b) {
    if (take[b]) winner[indices[b]] = drlhet::WinnerMerge(winner[indices[b]], b);
  }
  const int64_t leaf0 = lay.offsets[lay.depth];
  for (int32_t b = 0; b < n; ++b) {
    if (drlhet::IsWinner(take[b] ? winner[indices[b]] : -1, b, take[b])) {
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
      if (drlhet::IsWinner(take[b] ? winner[indices[b]] : -1, b, take[b])) {
        drlhet::RecomputeNode(tree, lay, level, drlhet::AncestorAt(indices[b], lay, level));
      }
    }
  }
}

}  // namespace

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
  const std::vector<uint8_t> take(keep, keep + n);
  WritePhases(tree, lay, indices, values, take.data(), n, winner, top);
  return 0;
}

// Returns NarrowTop, or -2 for a bad (capacity, k).
int drlhet_narrow_top(int64_t capacity, int k, int64_t batch, int64_t max_nodes) {
  drlhet::TreeLayout lay;
  if (!drlhet::MakeLayout(capacity, k, &lay)) return -2;
  return drlhet::NarrowTop(lay, batch, max_nodes);
}

// Returns the depth, or -1 for a bad (capacity, k). Outputs: size; offsets, counts [kMaxLevels]
// (levels past the depth: 0).
int drlhet_layout(int64_t capacity, int k, int64_t* size, int64_t* offsets, int64_t* counts) {
  drlhet::TreeLayout lay;
  const bool ok = drlhet::MakeLayout(capacity, k, &lay);
  *size = lay.size;
  for (int level = 0; level < drlhet::kMaxLevels; ++level) {
    offsets[level] = lay.offsets[level];
    counts[level] = lay.counts[level];
  }
  return ok ? lay.depth : -1;
}

// AncestorAt(leaf, level) in a tree over `capacity` leaves; -2 for a bad (capacity, k).
int64_t drlhet_ancestor_at(int64_t capacity, int k, int64_t leaf, int level) {
  drlhet::TreeLayout lay;
  if (!drlhet::MakeLayout(capacity, k, &lay)) return -2;
  return drlhet::AncestorAt(leaf, lay, level);
}

// Returns 0, or -1 for a bad (capacity, k). Outputs: indices, probs, weights [n]; error.
int drlhet_weigh_phases(const float* tree, int64_t capacity, int k, const float* targets,
                        int64_t n, int32_t size, float beta, int32_t err_empty, int32_t err_beta,
                        int32_t* indices, float* probs, float* weights, int32_t* error) {
  drlhet::TreeLayout lay;
  if (!drlhet::MakeLayout(capacity, k, &lay)) return -1;
  int32_t most = 0;
  bool any = false;
  for (int64_t i = 0; i < n; ++i) {  // kernel 1, one thread each
    float value = 0.0f, total = 0.0f;
    indices[i] = k == 16 ? drlhet::DescendOne<16>(tree, lay, targets[i], &value, &total)
                         : drlhet::DescendOne<0>(tree, lay, targets[i], &value, &total);
    probs[i] = drlhet::Probability(value, total);
    weights[i] = drlhet::RawWeight(probs[i], static_cast<float>(size), beta);
    const int32_t bits = drlhet::OrderedBits(weights[i]);
    most = bits > most ? bits : most;  // atomicMax
    any = any || probs[i] > 0.0f;
  }
  for (int64_t i = 0; i < n; ++i) {  // kernel 2
    weights[i] = drlhet::Weight(weights[i], drlhet::FromOrderedBits(most), beta);
  }
  *error = drlhet::SampleErrors(any, beta, err_empty, err_beta);
  return 0;
}

// Returns 0, or -1 for a bad (capacity, k). `winner` is scratch of `capacity` slots; levels
// 0..top (-1: none) have every node recomputed. Outputs: the tree in place, max_out, err_out.
int drlhet_update_checked_phases(float* tree, int64_t capacity, int k, const int32_t* indices,
                                 const float* raw, const float* values, const bool* keep,
                                 int32_t n, int32_t size, float priority_max, int32_t err_index,
                                 int32_t err_priority, float max_in, int32_t err_in,
                                 int32_t* winner, int top, float* max_out, int32_t* err_out) {
  drlhet::TreeLayout lay;
  if (!drlhet::MakeLayout(capacity, k, &lay)) return -1;
  int32_t bad = 0, most = 0;
  std::vector<uint8_t> take(n);
  for (int32_t b = 0; b < n; ++b) {  // the claim: errors, kept entries, the largest kept
    const int32_t err = drlhet::UpdateEntryErrors(indices[b], size, raw[b], values[b],
                                                  priority_max, err_index, err_priority);
    bad |= err;
    take[b] = err == 0 && keep[b];
    const int32_t bits = take[b] ? drlhet::OrderedBits(raw[b]) : 0;
    most = bits > most ? bits : most;
  }
  if (bad == 0) WritePhases(tree, lay, indices, values, take.data(), n, winner, top);
  *max_out = drlhet::NewMaximum(max_in, bad ? 0.0f : drlhet::FromOrderedBits(most));
  *err_out = err_in | bad;
  return 0;
}

// For positions 0..n-1 of a batch of n drawn with the threefry2x32 key (k0, k1) from a tree
// whose root is `total`: bits[i] (jax.random.bits), uniform[i] (jax.random.uniform) and
// targets[i] (TargetFromKey, stratified or not).
void drlhet_key_targets(uint32_t k0, uint32_t k1, int64_t n, float total, int stratified,
                        uint32_t* bits, float* uniform, float* targets) {
  for (int64_t i = 0; i < n; ++i) {
    bits[i] = drlhet::RandomBits32(k0, k1, static_cast<uint64_t>(i));
    uniform[i] = drlhet::UniformFromBits(bits[i]);
    targets[i] = drlhet::TargetFromKey(k0, k1, i, n, total, stratified != 0);
  }
}

}  // extern "C"
