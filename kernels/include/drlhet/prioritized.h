// Per-entry logic of the prioritized buffer around the sum tree: the sampling probabilities and
// importance-sampling weights of a drawn batch, and the checks of a priority update. These are
// drlhet/replay/buffer_ops.py's steps (the buffer's reference), one element at a time, for a
// kernel that does a whole sample or a whole checked update in one call (kernels/cuda) and for
// the CPU probe that runs the same steps serially (kernels/cpu/header_probe.cc).
//
// Bit-exactness: each function performs the reference's float operations in its order, with no
// contraction (nvcc --fmad=false); a division by a batch-wide scalar is a product with its
// reciprocal, as the reference writes it, and the reciprocal is XLA's where the code runs
// (`Reciprocal`: IEEE on a CPU, rcp.approx.f32 on a GPU). The weights call powf: on a GPU nvcc
// and XLA both take it from libdevice (__nv_powf); a host compiler's powf may differ from XLA's CPU
// pow in the last place, so the CPU probe's weights are compared to a tolerance and the GPU
// kernels' bit for bit. Error bits and the leaf-value limit are arguments: the Python side owns
// their values (drlhet/replay/checks.py).
// Reference: Zhang, Meng, Prasanna, IEEE TPDS 2023, Sec. 2.2 (PER) and Sec. 5.2 (GPU replay).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "drlhet/sum_tree.h"

namespace drlhet {

// 1 / x as XLA computes it on the device that runs the code. XLA's GPU backend compiles an f32
// division to div.full (it sets LLVM's -nvptx-prec-divf32=1), and LLVM selects rcp.approx.f32
// for 1 / x at that level, which gives div.full's result: within 2 ulp of IEEE, not IEEE (a
// lent H100 measured the IEEE reciprocal 1 ulp off XLA's in most weights). On a CPU, XLA
// divides as IEEE does.
DRLHET_HD inline float Reciprocal(float x) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return 1.0f / x;
#endif
}

// ---- A drawn batch --------------------------------------------------------------------------
// P(i) = v_i * (1 / total) of a drawn leaf; 0 when the total is not > 0. A product with the
// reciprocal, as the reference writes it (XLA turns its division by a broadcast scalar into
// this product, so the reference spells it out).
DRLHET_HD inline float Probability(float value, float total) {
  return total > 0.0f ? value * Reciprocal(total) : 0.0f;
}

// beta in [0, 1] (false for NaN): otherwise the sample is refused.
DRLHET_HD inline bool BetaOk(float beta) { return beta >= 0.0f && beta <= 1.0f; }

// The weight before normalisation, (size * P(i)) ** -b with b = beta (0 when refused); 0 for a
// probability that is not > 0. Never negative, NaN or infinite for P(i) >= 2^-123 and
// size >= 1 (drlhet/replay/checks.py), so its bits order as int32 (OrderedBits).
DRLHET_HD inline float RawWeight(float probability, float size, float beta) {
  const float b = BetaOk(beta) ? beta : 0.0f;
  return probability > 0.0f ? powf(size * probability, -b) : 0.0f;
}

// The normalised weight: raw * (1 / max(max_raw, FLT_MIN)), or 0 when beta is refused.
DRLHET_HD inline float Weight(float raw, float max_raw, float beta) {
  const float tiny = 1.17549435e-38f;  // the smallest normal float32, jnp.finfo.tiny
  const float m = max_raw > tiny ? max_raw : tiny;
  return BetaOk(beta) ? raw * Reciprocal(m) : 0.0f;
}

// The sample's error bits: empty (no drawn probability > 0), beta outside [0, 1].
DRLHET_HD inline int32_t SampleErrors(bool any_positive, float beta, int32_t err_empty,
                                      int32_t err_beta) {
  return (any_positive ? 0 : err_empty) | (BetaOk(beta) ? 0 : err_beta);
}

// The int32 bits of a float >= +0.0 (or -0.0, as 0): their integer order is the float order,
// so an atomicMax on them is a max of the floats. Inverse: FromOrderedBits.
DRLHET_HD inline int32_t OrderedBits(float x) {
  int32_t bits;
  memcpy(&bits, &x, sizeof(bits));
  return bits > 0 ? bits : 0;
}

DRLHET_HD inline float FromOrderedBits(int32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof(x));
  return x;
}

// x >= 0 (-0 included; NaN by its sign bit) as a test of its bits: a thread that takes subnormal
// inputs for zero (denormals-are-zero, as XLA's CPU threads run, where the CUDA emulation's
// kernels run) would compare -1e-45 as -0 and keep it, where the reference and a GPU refuse it.
DRLHET_HD inline bool SignBitClear(float x) {
  int32_t bits;
  memcpy(&bits, &x, sizeof(bits));
  return bits >= 0 || bits == INT32_MIN;
}

// ---- A checked priority update --------------------------------------------------------------
// The error bits of one entry, kept or not: an index outside [0, size); a raw priority that is
// negative, NaN or infinite, or whose leaf value exceeds priority_max. Any bit refuses the batch.
DRLHET_HD inline int32_t UpdateEntryErrors(int32_t index, int32_t size, float raw, float value,
                                           float priority_max, int32_t err_index,
                                           int32_t err_priority) {
  const bool in_range = index >= 0 && index < size;
  const bool finite = raw - raw == 0.0f;  // NaN for NaN and +-inf
  const bool ok = finite && SignBitClear(raw) && !(value > priority_max);
  return (in_range ? 0 : err_index) | (ok ? 0 : err_priority);
}

// The running maximum after a batch: max(old, the largest kept raw priority, or 0 when none
// was kept or the batch was refused), as jnp.maximum.
DRLHET_HD inline float NewMaximum(float old, float largest_kept) {
  return largest_kept > old ? largest_kept : old;
}

}  // namespace drlhet
