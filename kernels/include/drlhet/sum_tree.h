// Per-element logic of the K-ary sum tree, shared by the C++ (OpenMP), CUDA and HLS kernels.
//
// The operations and their order are exactly those of the pure-JAX reference
// (drlhet/replay/sum_tree.py: _seq_sum, and level_step in descend), so that every backend returns
// bit-identical results:
//   * an inner node is the sequential float sum of its K children, ((c0 + c1) + c2) + ...;
//   * the descent takes, at each level, the child k with prefix[k-1] <= u < prefix[k] and
//     subtracts prefix[k-1]; if rounding pushes u past every non-zero child it takes the last
//     non-zero child, so a zero priority is never found.
// Each rule is written here once, as a scalar function of one element (one child of one node, for
// one target). A kernel calls it per element, per SIMD lane (the CPU kernel, on a block of
// samples in child-major order: inlined, its loops vectorise as before), per GPU thread or per
// HLS loop iteration. ChooseChild and SeqSum are the same rules over one whole node.
// No dependency beyond <cstdint>, no exceptions, dynamic memory or library calls (HLS C simulation
// compiles it with g++); the functions are __host__ __device__ under nvcc.
// Reference: Zhang, Meng, Prasanna, IEEE TPDS 2023, Sec. 4 (K-ary sum tree).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DRLHET_HD __host__ __device__
#else
#define DRLHET_HD
#endif

namespace drlhet {

constexpr int kMaxLevels = 64;
constexpr int kMaxBranching = 256;  // largest K the kernels accept

// Level geometry of a tree over `capacity` leaves: level 0 is the root (padded to K slots);
// every level's width is a multiple of K so a node's children are K contiguous slots. A plain
// aggregate (no member initializers), so that a GPU block can hold one in shared memory
// (kernels/cuda/block_layout.cuh); MakeLayout sets every member.
struct TreeLayout {
  int depth;                   // levels below the root
  int64_t offsets[kMaxLevels]; // start slot of each level, root level first
  int64_t counts[kMaxLevels];  // nodes in use at each level, root level first (NodesAt)
  int64_t size;                // total slots
  int64_t capacity;
  int k;
};

// ceil(a / k) for a >= 0, k >= 1; in 32 bits where a fits, as a GPU divides 32-bit integers in a
// few instructions and 64-bit ones in a long subroutine (the same quotient either way).
DRLHET_HD inline int64_t DivCeil(int64_t a, int64_t k) {
  if (a <= 0x7fffffff && k <= 0x7fffffff) {
    const uint32_t a32 = static_cast<uint32_t>(a), k32 = static_cast<uint32_t>(k);
    return static_cast<int64_t>(a32 / k32 + (a32 % k32 != 0 ? 1u : 0u));
  }
  return (a + k - 1) / k;
}

// Same algorithm as drlhet.replay.sum_tree.layout; returns false for bad arguments (every
// member 0 then).
DRLHET_HD inline bool MakeLayout(int64_t capacity, int64_t k, TreeLayout* out) {
  out->depth = 0;
  out->size = out->capacity = 0;
  out->k = 0;
  for (int level = 0; level < kMaxLevels; ++level) out->offsets[level] = out->counts[level] = 0;
  if (capacity < 1 || k < 2 || k > kMaxBranching) return false;
  int64_t* counts = out->counts;  // leaves first while counting, reversed below
  int n = 0;
  counts[n++] = capacity;
  while (counts[n - 1] > 1 || n == 1) {
    if (n >= kMaxLevels) {
      for (int level = 0; level < kMaxLevels; ++level) counts[level] = 0;
      return false;
    }
    counts[n] = DivCeil(counts[n - 1], k);
    ++n;
  }
  for (int lo = 0, hi = n - 1; lo < hi; ++lo, --hi) {  // root first
    const int64_t c = counts[lo];
    counts[lo] = counts[hi];
    counts[hi] = c;
  }
  int64_t offset = 0;  // widths top-down
  for (int level = 0; level < n; ++level) {
    out->offsets[level] = offset;
    offset += DivCeil(counts[level], k) * k;
  }
  out->depth = n - 1;
  out->size = offset;
  out->capacity = capacity;
  out->k = static_cast<int>(k);
  return true;
}

// ---- The sequential sum ----------------------------------------------------------------------
// acc = c0, then acc = SumChild(acc, cj) for j = 1 .. K-1 in order. The first child is taken as
// it is (or added to -0.0f, as the descent's scan does: the same bits), never added to 0.0f:
// 0.0f + -0.0f is +0.0f, so a node of -0.0f children would not sum to the reference's -0.0f.
// A kernel summing many nodes at once calls SumChild per lane.
template <typename T>
DRLHET_HD inline T SumChild(T acc, T c) {
  return acc + c;
}

// The sequential sum of K >= 1 children: a node's value, as an update recomputes it.
template <typename T>
DRLHET_HD inline T SeqSum(const T* c, int k) {
  T acc = c[0];
  for (int j = 1; j < k; ++j) acc = SumChild(acc, c[j]);
  return acc;
}

// ---- One level of the descent ----------------------------------------------------------------
// One pass over a node's K children for target u >= 0, with running prefix sums
// prefix[j] = ((c0 + c1) + ...) + cj (the sequential sum, so the tree's own rounding). The state
// of the pass, one scalar each (arrays of them in a kernel that runs many targets at once):
//   acc      the sum of the children scanned so far: prefix[j] after child j. It starts at -0.0f,
//            the identity of float addition (-0.0f + c == c for every c, where 0.0f + -0.0f would
//            be +0.0f), so that prefix[0] == c0 and every prefix is the reference's bit for bit.
//   count    #{j : prefix[j] <= u}, the child taken unless rounding overflows (prefixes are
//            non-decreasing, so these are a prefix of 0 .. K-1)
//   left     the largest prefix <= u, i.e. prefix[count - 1] (0 if none)
//   last_nz  the last child with cj > 0 (0 if none)
//   left_nz  the prefix before it, prefix[last_nz - 1] (unused for last_nz == 0: nothing is
//            before child 0, and left_nz may hold acc's start, -0.0f)
// Branch-free: selects only, so that it compiles to SIMD blends and predicated GPU code.

// The state before child 0.
DRLHET_HD inline void ScanBegin(float& acc, float& left, float& left_nz, int32_t& count,
                                int32_t& last_nz) {
  acc = -0.0f;
  left = left_nz = 0.0f;
  count = last_nz = 0;
}

// Child j, value c, in order after children 0 .. j-1.
DRLHET_HD inline void ScanChild(float c, int32_t j, float u, float& acc, float& left,
                                float& left_nz, int32_t& count, int32_t& last_nz) {
  const bool nz = c > 0.0f;
  left_nz = nz ? acc : left_nz;  // acc is still the prefix before child j
  last_nz = nz ? j : last_nz;
  acc = SumChild(acc, c);
  const bool below = acc <= u;
  count += below ? 1 : 0;
  left = below ? acc : left;
}

// After the pass: the child taken and the prefix before it. That is child `count`, unless
// rounding pushed u past every non-zero child (count > last_nz, which includes count == K): then
// the last non-zero child, so that a zero priority is never found. The child's value is then
// ChosenValue(children[child]).
DRLHET_HD inline void ResolveChild(int32_t count, int32_t last_nz, float left, float left_nz,
                                   int32_t& child, float& child_left) {
  const bool overflow = count > last_nz;
  child = overflow ? last_nz : count;
  const float l = overflow ? left_nz : left;
  // Nothing is before child 0: +0.0f, as in the reference. (A select on last_nz: the same one on
  // child compiles to a branch in the CPU kernel's per-lane loop, and find was ~18% slower.)
  child_left = overflow && last_nz == 0 ? 0.0f : l;
}

// The chosen child's value, c = children[child], as the reference returns it. The chosen child is
// non-zero whenever the node has a non-zero child (child `count` has prefix[count] > u >=
// prefix[count - 1], so c > 0; the fallback is non-zero by definition). A node without one falls
// back to child 0, and the reference then returns its fallback value +0.0f even if c is -0.0f
// (or, under flush-to-zero as XLA's CPU runtime runs, a denormal).
DRLHET_HD inline float ChosenValue(float c) { return c > 0.0f ? c : 0.0f; }

// u for the next level: max(u - left, 0), as the reference computes it.
DRLHET_HD inline float NextTarget(float u, float left) {
  const float r = u - left;
  return r > 0.0f ? r : 0.0f;
}

struct Choice {
  int32_t child;
  float left;   // prefix sum before the chosen child
  float value;  // the chosen child's value
  float total;  // sum of all K children (SeqSum)
};

// Chooses the child of one node (K >= 1 children) for target u >= 0: the steps above, in order.
// The next level's target is NextTarget(u, choice.left). KStatic > 0 fixes K at compile time
// (k_dynamic is then ignored) so that the loop can be unrolled.
template <int KStatic>
DRLHET_HD inline Choice ChooseChild(const float* children, int k_dynamic, float u) {
  const int k = KStatic > 0 ? KStatic : k_dynamic;
  float acc, left, left_nz;
  int32_t count, last_nz;
  ScanBegin(acc, left, left_nz, count, last_nz);
  for (int j = 0; j < k; ++j) ScanChild(children[j], j, u, acc, left, left_nz, count, last_nz);
  Choice out;
  ResolveChild(count, last_nz, left, left_nz, out.child, out.left);
  out.value = ChosenValue(children[out.child]);
  out.total = acc;
  return out;
}

// ---- One sample, one whole descent -----------------------------------------------------------
// What one GPU thread does for one target (the CPU kernel runs the same steps in blocks of
// lanes): ChooseChild level by level from the root's K children down to a leaf. A target that
// is not > 0 (0, negative, NaN) descends as 0. Returns the leaf index; `value` is the leaf's
// value, `level1_total` the sum of the root's K children (the tree's total).
template <int KStatic>
DRLHET_HD inline int32_t DescendOne(const float* tree, const TreeLayout& lay, float target,
                                    float* value, float* level1_total) {
  const int k = KStatic > 0 ? KStatic : lay.k;
  float u = target > 0.0f ? target : 0.0f;
  int64_t node = 0;
  for (int level = 1; level <= lay.depth; ++level) {
    const Choice c = ChooseChild<KStatic>(tree + lay.offsets[level] + node * k, k, u);
    if (level == 1) *level1_total = c.total;
    *value = c.value;
    u = NextTarget(u, c.left);
    node = node * k + c.child;
  }
  return static_cast<int32_t>(node);
}

// ---- One update batch, entry by entry ---------------------------------------------------------
// Duplicates: the last kept entry of an index wins. Phase 1 merges each kept entry's position b
// into its leaf's `winner` slot (all slots start at -1) with WinnerMerge, in any order (a GPU
// uses atomicMax, a serial loop a plain max: the same result); phase 2 writes the leaves of the
// entries IsWinner says won; phase 3, level by level from the leaves' parents up, recomputes each
// ancestor of a winning leaf from its K children (RecomputeNode: the sequential sum, as the
// reference recomputes it; two entries sharing an ancestor recompute the same bits). An entry
// whose index or priority is invalid (ValidEntry) makes the whole batch refused, tree unchanged.
DRLHET_HD inline int32_t WinnerMerge(int32_t winner, int32_t b) { return b > winner ? b : winner; }

DRLHET_HD inline bool IsWinner(int32_t winner, int32_t b, bool keep) {
  return keep && winner == b;
}

DRLHET_HD inline bool ValidEntry(int32_t index, float value, int64_t capacity) {
  // !(value >= 0) is true for NaN; value - value != 0 for +inf (inf - inf is NaN)
  return index >= 0 && index < capacity && value >= 0.0f && value - value == 0.0f;
}

// The index, at `level` (0 = root level), of the ancestor of leaf `leaf`.
DRLHET_HD inline int64_t AncestorAt(int64_t leaf, const TreeLayout& lay, int level) {
  if (leaf >= 0 && leaf <= 0x7fffffff) {  // 32-bit divisions (DivCeil), the same quotients
    uint32_t node = static_cast<uint32_t>(leaf);
    for (int l = lay.depth; l > level; --l) node /= static_cast<uint32_t>(lay.k);
    return node;
  }
  for (int l = lay.depth; l > level; --l) leaf /= lay.k;
  return leaf;
}

// parents[node] = SeqSum of its K children, node at `level` (< depth).
DRLHET_HD inline void RecomputeNode(float* tree, const TreeLayout& lay, int level, int64_t node) {
  tree[lay.offsets[level] + node] = SeqSum(tree + lay.offsets[level + 1] + node * lay.k, lay.k);
}

// Nodes in use at `level`: ceil(capacity / K^(depth - level)); the level's other slots are
// padding (always 0).
DRLHET_HD inline int64_t NodesAt(const TreeLayout& lay, int level) { return lay.counts[level]; }

// The deepest level L < depth whose levels 0..L each have at most min(batch, max_nodes) nodes,
// or -1. An update of `batch` entries recomputes every node of those narrow levels once
// instead of one ancestor per winning entry (up to `batch` recomputations of the same few
// nodes, all writing one address). That gives the same bits: every parent already holds the
// SeqSum of its children (the tree's invariant), so recomputing a clean one rewrites its value.
DRLHET_HD inline int NarrowTop(const TreeLayout& lay, int64_t batch, int64_t max_nodes) {
  int top = -1;
  for (int level = 0; level < lay.depth; ++level) {
    const int64_t n = NodesAt(lay, level);
    if (n > batch || n > max_nodes) break;
    top = level;
  }
  return top;
}

}  // namespace drlhet
