// Per-element logic of the K-ary sum tree, shared by the C++ (OpenMP), CUDA and HLS kernels.
//
// The operations and their order are exactly those of the pure-JAX reference
// (drlhet/replay/sum_tree.py), so that every backend returns bit-identical results:
//   * an inner node is the sequential float sum of its K children, ((c0 + c1) + c2) + ...;
//   * the descent takes, at each level, the child k with prefix[k-1] <= u < prefix[k] and
//     subtracts prefix[k-1]; if rounding pushes u past every non-zero child it takes the last
//     non-zero child, so a zero priority is never found.
// No dependency beyond <cstdint>; functions are __host__ __device__ under nvcc.
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
// every level's width is a multiple of K so a node's children are K contiguous slots.
struct TreeLayout {
  int depth = 0;                    // levels below the root
  int64_t offsets[kMaxLevels] = {};  // start slot of each level, root level first
  int64_t size = 0;                  // total slots
  int64_t capacity = 0;
  int k = 0;
};

// Same algorithm as drlhet.replay.sum_tree.layout; returns false for bad arguments.
inline bool MakeLayout(int64_t capacity, int64_t k, TreeLayout* out) {
  if (capacity < 1 || k < 2 || k > kMaxBranching) return false;
  int64_t counts[kMaxLevels];
  int n = 0;
  counts[n++] = capacity;
  while (counts[n - 1] > 1 || n == 1) {
    if (n >= kMaxLevels) return false;
    counts[n] = (counts[n - 1] + k - 1) / k;
    ++n;
  }
  // counts[0] leaves ... counts[n-1] == 1 root; widths top-down.
  int64_t offset = 0;
  for (int level = 0; level < n; ++level) {
    const int64_t c = counts[n - 1 - level];
    out->offsets[level] = offset;
    offset += (c + k - 1) / k * k;
  }
  out->depth = n - 1;
  out->size = offset;
  out->capacity = capacity;
  out->k = static_cast<int>(k);
  return true;
}

// The sequential sum of K children.
template <typename T>
DRLHET_HD inline T SeqSum(const T* c, int k) {
  T acc = c[0];
  for (int j = 1; j < k; ++j) acc = acc + c[j];
  return acc;
}

struct Choice {
  int32_t child;
  float left;   // prefix sum before the chosen child
  float value;  // the chosen child's value
  float total;  // sum of all K children
};

// Chooses the child of one node for target u (u >= 0). Mirrors the reference's level step:
//   prefix[j] = ((c0 + c1) + ...) + cj        (sequential, the tree's own rounding)
//   count     = #{j : prefix[j] <= u}          (prefixes are non-decreasing: a prefix of 0..K-1)
//   last_nz   = the last j with cj > 0
//   child     = count, or last_nz when rounding pushed u past every non-zero child
//   left      = prefix[child - 1] (0 for child 0), value = c[child], total = prefix[K - 1]
// Branch-free apart from the loops, so the compiler can vectorise the compares.
template <int KStatic>
DRLHET_HD inline Choice ChooseChild(const float* children, int k_dynamic, float u) {
  constexpr int kBuf = KStatic > 0 ? KStatic : kMaxBranching;
  const int k = KStatic > 0 ? KStatic : k_dynamic;
  float prefix[kBuf];
  float acc = children[0];
  prefix[0] = acc;
  for (int j = 1; j < k; ++j) {
    acc = acc + children[j];
    prefix[j] = acc;
  }
  int32_t count = 0, last_nz = 0;
  for (int j = 0; j < k; ++j) {
    count += prefix[j] <= u ? 1 : 0;
    last_nz = children[j] > 0.0f ? j : last_nz;
  }
  Choice out;
  out.child = count > last_nz ? last_nz : count;
  out.left = out.child > 0 ? prefix[out.child - 1] : 0.0f;
  out.value = children[out.child];
  out.total = acc;
  return out;
}

// u for the next level: max(u - left, 0), as the reference computes it.
DRLHET_HD inline float NextTarget(float u, float left) {
  const float r = u - left;
  return r > 0.0f ? r : 0.0f;
}

}  // namespace drlhet
