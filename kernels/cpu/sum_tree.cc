// XLA FFI handlers for the K-ary sum tree on the CPU: C++17 + OpenMP over the batch.
//
//   drlhet_find   (nodes f32[V, T], targets f32[V, B]) -> (indices s32[V, B], values f32[V, B],
//                                                          totals f32[V])
//   drlhet_update (nodes f32[V, T], indices s32[V, B], values f32[V, B], keep pred[V, B])
//                 -> nodes f32[V, T]   (aliased to the input: the tree is updated in place)
//
// Attributes: branching (K) and capacity, both int64. V is any number of independent trees
// (leading dimensions, from vmap). Semantics are the reference's (drlhet/replay/sum_tree.py);
// the per-element logic is in drlhet/sum_tree.h. Inputs are validated before anything is
// written: a bad index or priority returns an FFI error and the tree is unchanged.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "drlhet/prioritized.h"
#include "drlhet/sum_tree.h"
#include "xla/ffi/api/ffi.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace ffi = xla::ffi;

namespace {

std::atomic<int> g_num_threads{0};  // 0: all available cores

int NumThreads() {
  const int n = g_num_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_num_procs();
}

// Samples descended together, level by level: their cache misses overlap (prefetched a block
// ahead) and the K-step prefix-sum chains of kBlock samples run interleaved, so the core is not
// stalled on one chain of dependent adds.
constexpr int kGroup = 256;
constexpr int kBlock = 16;

// t[j][lane0 + s] = rows[s][j] for s < 8 and j < 16: the transposition of 8 rows of K = 16 into
// child-major order. With AVX2 it is two 8x8 in-register transposes (16 loads, 48 shuffles)
// instead of 128 scalar loads and stores. Pure data movement: results are bit-identical.
template <int kLanes>
inline void Transpose16x8(const float* const* rows, float (*t)[kLanes], int lane0) {
#if defined(__AVX2__)
  for (int half = 0; half < 2; ++half) {
    __m256 r[8];
    for (int s = 0; s < 8; ++s) r[s] = _mm256_loadu_ps(rows[s] + 8 * half);
    const __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 a2 = _mm256_unpacklo_ps(r[2], r[3]), a3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 a4 = _mm256_unpacklo_ps(r[4], r[5]), a5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 a6 = _mm256_unpacklo_ps(r[6], r[7]), a7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
    const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
    const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
    const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
    float* base = &t[8 * half][lane0];
    _mm256_storeu_ps(base + 0 * kLanes, _mm256_permute2f128_ps(b0, b4, 0x20));
    _mm256_storeu_ps(base + 1 * kLanes, _mm256_permute2f128_ps(b1, b5, 0x20));
    _mm256_storeu_ps(base + 2 * kLanes, _mm256_permute2f128_ps(b2, b6, 0x20));
    _mm256_storeu_ps(base + 3 * kLanes, _mm256_permute2f128_ps(b3, b7, 0x20));
    _mm256_storeu_ps(base + 4 * kLanes, _mm256_permute2f128_ps(b0, b4, 0x31));
    _mm256_storeu_ps(base + 5 * kLanes, _mm256_permute2f128_ps(b1, b5, 0x31));
    _mm256_storeu_ps(base + 6 * kLanes, _mm256_permute2f128_ps(b2, b6, 0x31));
    _mm256_storeu_ps(base + 7 * kLanes, _mm256_permute2f128_ps(b3, b7, 0x31));
  }
#else
  for (int s = 0; s < 8; ++s) {
    for (int j = 0; j < 16; ++j) t[j][lane0 + s] = rows[s][j];
  }
#endif
}

// t[j][s] = rows[s][j] for s < kBlock, j < k.
template <int KStatic>
inline void TransposeBlock(const float* const* rows, int k, float (*t)[kBlock]) {
  if constexpr (KStatic == 16 && kBlock % 8 == 0) {
    for (int s0 = 0; s0 < kBlock; s0 += 8) Transpose16x8<kBlock>(rows + s0, t, s0);
  } else {
    for (int s = 0; s < kBlock; ++s) {
      for (int j = 0; j < k; ++j) t[j][s] = rows[s][j];
    }
  }
}

// One level of the descent for kBlock samples: drlhet::ChooseChild's steps (ScanBegin,
// ScanChild, ResolveChild, ChosenValue, NextTarget), called per lane. The block's K-child rows
// are first transposed into child-major order, so that each step's loop over the kBlock samples
// is contiguous and compiles to SIMD (one lane per sample, the sequential order of the adds
// within each lane unchanged).
template <int KStatic>
inline void ChooseBlock(const float* const* rows, int k_dynamic, float* u, int64_t* node,
                        float* value, float* total) {
  const int k = KStatic > 0 ? KStatic : k_dynamic;
  constexpr int kMax = KStatic > 0 ? KStatic : drlhet::kMaxBranching;
  alignas(64) float t[kMax][kBlock];
  TransposeBlock<KStatic>(rows, k, t);
  alignas(64) float acc[kBlock], left[kBlock], left_nz[kBlock], uu[kBlock];
  alignas(64) int32_t count[kBlock], last_nz[kBlock];
  for (int s = 0; s < kBlock; ++s) {
    drlhet::ScanBegin(acc[s], left[s], left_nz[s], count[s], last_nz[s]);
    uu[s] = u[s];
  }
  for (int j = 0; j < k; ++j) {
#pragma GCC ivdep
    for (int s = 0; s < kBlock; ++s) {
      drlhet::ScanChild(t[j][s], j, uu[s], acc[s], left[s], left_nz[s], count[s], last_nz[s]);
    }
  }
  for (int s = 0; s < kBlock; ++s) {
    int32_t child;
    float l;
    drlhet::ResolveChild(count[s], last_nz[s], left[s], left_nz[s], child, l);
    value[s] = drlhet::ChosenValue(t[child][s]);
    total[s] = acc[s];
    u[s] = drlhet::NextTarget(uu[s], l);
    node[s] = node[s] * k + child;
  }
}

template <int KStatic>
void FindTree(const float* nodes, const drlhet::TreeLayout& lay, const float* targets,
              int64_t batch, int32_t* indices, float* values, float* total, int threads) {
  const int k = KStatic > 0 ? KStatic : lay.k;
  const int64_t groups = (batch + kGroup - 1) / kGroup;
  float root_total = 0.0f;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && groups > 1)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * kGroup;
    const int n = static_cast<int>(std::min<int64_t>(kGroup, batch - begin));
    const int padded = (n + kBlock - 1) / kBlock * kBlock;  // pad lanes descend target 0
    alignas(64) int64_t node[kGroup];
    alignas(64) float u[kGroup];
    alignas(64) float value[kGroup];
    alignas(64) float level_total[kGroup];
    const float* rows[kGroup];
    for (int i = 0; i < padded; ++i) {
      node[i] = 0;
      const float t = i < n ? targets[begin + i] : 0.0f;
      u[i] = t > 0.0f ? t : 0.0f;
    }
    float level1_total = 0.0f;
    for (int level = 1; level <= lay.depth; ++level) {
      const float* base = nodes + lay.offsets[level];
      for (int i = 0; i < padded; ++i) rows[i] = base + node[i] * k;
      constexpr int kAhead = 2 * kBlock;
      for (int i = 0; i < std::min(kAhead, padded); ++i) __builtin_prefetch(rows[i]);
      for (int b = 0; b < padded; b += kBlock) {
        for (int i = b + kAhead; i < std::min(b + kAhead + kBlock, padded); ++i) {
          __builtin_prefetch(rows[i]);
        }
        ChooseBlock<KStatic>(rows + b, k, u + b, node + b, value + b, level_total + b);
      }
      if (level == 1) level1_total = level_total[0];
    }
    for (int i = 0; i < n; ++i) {
      indices[begin + i] = static_cast<int32_t>(node[i]);
      values[begin + i] = value[i];
    }
    if (g == 0) root_total = level1_total;
  }
  *total = root_total;
}

// Recomputes parents[p] = drlhet::SeqSum(children of p) for a sorted list of parents, kBlock at
// a time with independent add chains (SeqSum's steps per lane: child 0, then SumChild).
template <int KStatic>
inline void RecomputeParents(float* parents, const float* children, const int64_t* list,
                             int64_t n, int k_dynamic, int threads) {
  const int k = KStatic > 0 ? KStatic : k_dynamic;
  const int64_t blocks = n / kBlock;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && n >= 1024)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t* p = list + b * kBlock;
    constexpr int kMax = KStatic > 0 ? KStatic : drlhet::kMaxBranching;
    alignas(64) float t[kMax][kBlock];  // child-major, as in ChooseBlock
    const float* rows[kBlock];
    for (int s = 0; s < kBlock; ++s) rows[s] = children + p[s] * k;
    TransposeBlock<KStatic>(rows, k, t);
    alignas(64) float acc[kBlock];
    for (int s = 0; s < kBlock; ++s) acc[s] = t[0][s];
    for (int j = 1; j < k; ++j) {
      for (int s = 0; s < kBlock; ++s) acc[s] = drlhet::SumChild(acc[s], t[j][s]);
    }
    for (int s = 0; s < kBlock; ++s) parents[p[s]] = acc[s];
  }
  for (int64_t i = blocks * kBlock; i < n; ++i) {
    parents[list[i]] = drlhet::SeqSum(children + list[i] * k, k);
  }
}

// Writes the kept leaves in batch order (so the last kept duplicate wins), then recomputes their
// ancestors level by level. A level with no more nodes than the batch is recomputed whole (a
// contiguous, vectorised pass); on larger levels only the touched parents are. Recomputing a
// node from its children is idempotent, so duplicates are harmless when one thread does them; the
// parallel path deduplicates first so that no two threads write the same node.
void UpdateTree(float* nodes, const drlhet::TreeLayout& lay, const int32_t* indices,
                const float* values, const bool* keep, int64_t batch, int threads,
                std::vector<int64_t>& scratch, std::vector<int64_t>& iota) {
  const int k = lay.k;
  const int64_t leaf0 = lay.offsets[lay.depth];
  scratch.clear();
  for (int64_t b = 0; b < batch; ++b) {
    if (!keep[b]) continue;
    nodes[leaf0 + indices[b]] = values[b];
    scratch.push_back(indices[b]);
  }
  if (scratch.empty()) return;
  const bool parallel = threads > 1 && static_cast<int64_t>(scratch.size()) >= 1024;
  if (parallel) std::sort(scratch.begin(), scratch.end());
  for (int level = lay.depth - 1; level >= 0; --level) {
    float* parents = nodes + lay.offsets[level];
    const float* children = nodes + lay.offsets[level + 1];
    const int64_t child_end = level + 1 == lay.depth ? lay.size : lay.offsets[level + 2];
    const int64_t n_all = (child_end - lay.offsets[level + 1]) / k;  // parents with children
    for (auto& x : scratch) x /= k;  // sorted stays sorted
    const int64_t* list;
    int64_t n;
    if (n_all <= static_cast<int64_t>(scratch.size())) {
      if (static_cast<int64_t>(iota.size()) < n_all) {
        iota.resize(n_all);
        for (int64_t i = 0; i < n_all; ++i) iota[i] = i;
      }
      list = iota.data();
      n = n_all;
    } else {
      if (parallel) scratch.erase(std::unique(scratch.begin(), scratch.end()), scratch.end());
      list = scratch.data();
      n = static_cast<int64_t>(scratch.size());
    }
    const int t = parallel ? threads : 1;
    if (k == 16) {
      RecomputeParents<16>(parents, children, list, n, k, t);
    } else {
      RecomputeParents<0>(parents, children, list, n, k, t);
    }
  }
}

// A float as text, exactly enough to name it ("%.9g"); a subnormal is decoded from its bits, since
// XLA's CPU threads read subnormal inputs as zero (std::to_string(-1e-45f) gave "-0.000000").
std::string FloatText(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  double d = static_cast<double>(x);
  if ((bits & 0x7f800000u) == 0) {  // zero or subnormal: mantissa * 2^-149, a normal double
    d = std::ldexp(static_cast<double>(bits & 0x007fffffu), -149);
    if (bits >> 31) d = -d;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", d);
  return text;
}

ffi::Error CheckLayout(int64_t branching, int64_t capacity, int64_t tree_elems,
                       drlhet::TreeLayout* lay, int64_t* num_trees) {
  if (!drlhet::MakeLayout(capacity, branching, lay)) {
    return ffi::Error::InvalidArgument("drlhet: bad sum tree capacity " +
                                       std::to_string(capacity) + " or branching " +
                                       std::to_string(branching));
  }
  if (tree_elems % lay->size != 0 || tree_elems == 0) {
    return ffi::Error::InvalidArgument(
        "drlhet: node array of " + std::to_string(tree_elems) +
        " elements is not a whole number of trees of " + std::to_string(lay->size) + " slots");
  }
  *num_trees = tree_elems / lay->size;
  return ffi::Error::Success();
}

ffi::Error FindImpl(ffi::Buffer<ffi::F32> nodes, ffi::Buffer<ffi::F32> targets,
                    ffi::ResultBuffer<ffi::S32> indices, ffi::ResultBuffer<ffi::F32> values,
                    ffi::ResultBuffer<ffi::F32> totals, int64_t branching, int64_t capacity) {
  drlhet::TreeLayout lay;
  int64_t trees = 0;
  if (auto err = CheckLayout(branching, capacity, nodes.element_count(), &lay, &trees);
      err.failure()) {
    return err;
  }
  const int64_t total_targets = targets.element_count();
  if (total_targets % trees != 0 || indices->element_count() != total_targets ||
      values->element_count() != total_targets || totals->element_count() != trees) {
    return ffi::Error::InvalidArgument("drlhet_find: targets/outputs do not match the trees");
  }
  const int64_t batch = total_targets / trees;
  const float* t = targets.typed_data();
  for (int64_t i = 0; i < total_targets; ++i) {
    if (!std::isfinite(t[i])) {
      return ffi::Error::InvalidArgument("drlhet_find: target " + FloatText(t[i]) +
                                         " at position " + std::to_string(i) + " is not finite");
    }
  }
  if (batch == 0) {  // no descent reads the root: no total to give (the reference: B >= 1)
    return ffi::Error::InvalidArgument("drlhet_find: no targets (B >= 1)");
  }
  const int threads = NumThreads();
  for (int64_t v = 0; v < trees; ++v) {
    const float* tree = nodes.typed_data() + v * lay.size;
    int32_t* idx = indices->typed_data() + v * batch;
    float* val = values->typed_data() + v * batch;
    float* tot = totals->typed_data() + v;
    if (lay.k == 16) {
      FindTree<16>(tree, lay, t + v * batch, batch, idx, val, tot, threads);
    } else {
      FindTree<0>(tree, lay, t + v * batch, batch, idx, val, tot, threads);
    }
  }
  return ffi::Error::Success();
}

ffi::Error UpdateImpl(ffi::Buffer<ffi::F32> nodes, ffi::Buffer<ffi::S32> indices,
                      ffi::Buffer<ffi::F32> values, ffi::Buffer<ffi::PRED> keep,
                      ffi::ResultBuffer<ffi::F32> out, int64_t branching, int64_t capacity) {
  drlhet::TreeLayout lay;
  int64_t trees = 0;
  if (auto err = CheckLayout(branching, capacity, nodes.element_count(), &lay, &trees);
      err.failure()) {
    return err;
  }
  const int64_t n = indices.element_count();
  if (n % trees != 0 || values.element_count() != n || keep.element_count() != n ||
      out->element_count() != nodes.element_count()) {
    return ffi::Error::InvalidArgument("drlhet_update: indices/values/keep shapes differ");
  }
  const int32_t* idx = indices.typed_data();
  const float* val = values.typed_data();
  const bool* kp = keep.typed_data();
  for (int64_t i = 0; i < n; ++i) {  // validate everything before writing anything
    if (!kp[i]) continue;
    if (idx[i] < 0 || idx[i] >= capacity) {
      return ffi::Error::InvalidArgument("drlhet_update: index " + std::to_string(idx[i]) +
                                         " out of range [0, " + std::to_string(capacity) + ")");
    }
    // the sign from the bits (SignBitClear): XLA's CPU threads take subnormal inputs for zero,
    // so `val[i] < 0.0f` kept -1e-45, which the reference and the cuda backend refuse
    if (!std::isfinite(val[i]) || !drlhet::SignBitClear(val[i])) {
      return ffi::Error::InvalidArgument("drlhet_update: priority " + FloatText(val[i]) +
                                         " at position " + std::to_string(i) +
                                         " is not finite and >= 0");
    }
  }
  float* dst = out->typed_data();
  if (dst != nodes.typed_data()) {  // not aliased (no donation): start from a copy
    std::copy(nodes.typed_data(), nodes.typed_data() + nodes.element_count(), dst);
  }
  const int64_t batch = n / trees;
  const int threads = NumThreads();
  std::vector<int64_t> scratch, iota;
  scratch.reserve(batch);
  for (int64_t v = 0; v < trees; ++v) {
    UpdateTree(dst + v * lay.size, lay, idx + v * batch, val + v * batch, kp + v * batch, batch,
               threads, scratch, iota);
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetFind, FindImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // nodes
                                  .Arg<ffi::Buffer<ffi::F32>>()  // targets
                                  .Ret<ffi::Buffer<ffi::S32>>()  // indices
                                  .Ret<ffi::Buffer<ffi::F32>>()  // values
                                  .Ret<ffi::Buffer<ffi::F32>>()  // totals
                                  .Attr<int64_t>("branching")
                                  .Attr<int64_t>("capacity"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetUpdate, UpdateImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // nodes
                                  .Arg<ffi::Buffer<ffi::S32>>()   // indices
                                  .Arg<ffi::Buffer<ffi::F32>>()   // values
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // keep
                                  .Ret<ffi::Buffer<ffi::F32>>()   // nodes (aliased)
                                  .Attr<int64_t>("branching")
                                  .Attr<int64_t>("capacity"));

extern "C" {
// Threads used by the kernels; 0 restores the default (all available cores).
void drlhet_set_num_threads(int n) { g_num_threads.store(n < 0 ? 0 : n); }
int drlhet_get_num_threads() { return NumThreads(); }
}
