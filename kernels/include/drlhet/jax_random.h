// The prioritized buffer's sample targets drawn inside a kernel from the sample's key, bit for
// bit as drlhet/replay/prioritized.py's `_targets` draws them with jax.random, so that a GPU
// sample needs no XLA kernel before its descent (on an H100, by our reading of ncu's kernel
// list of 2026-11-26, about 3 us of a step of a few tens of microseconds at B 4096).
//
// What is reproduced, and where it holds (the caller checks it at trace time,
// drlhet/backends/cuda.py): jax's default threefry2x32 generator with its partitionable layout
// (`jax_threefry_partitionable`, the default): element i of `jax.random.bits(key, (B,), uint32)`
// is y0 ^ y1 for (y0, y1) = Threefry2x32(key, (hi32(i), lo32(i))), the Random123 hash of
// Salmon et al. (SC 2011) with jax's 20 rounds and key schedule; `jax.random.uniform` keeps the
// top 23 bits as the mantissa of a float in [1, 2) and subtracts 1 (exact). The target is then
// `(i + u) * (total / B)` (stratified) or `u * total`: additions and products are IEEE in both
// XLA and a kernel without contraction (nvcc --fmad=false), and `total / B` is exact for a batch
// B that is a power of two, however XLA divides; for other batches the caller keeps XLA's
// targets. Integer steps only otherwise, so the same bits on any device.
#pragma once

#include <cstdint>
#include <cstring>

#include "drlhet/sum_tree.h"

namespace drlhet {

DRLHET_HD inline uint32_t RotateLeft(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

// Four rounds of Threefry2x32 with the rotations r0..r3, then the key injection (a, b + s).
DRLHET_HD inline void ThreefryRounds(uint32_t& x0, uint32_t& x1, int r0, int r1, int r2, int r3) {
  const int rot[4] = {r0, r1, r2, r3};
  for (int j = 0; j < 4; ++j) {
    x0 += x1;
    x1 = RotateLeft(x1, rot[j]);
    x1 ^= x0;
  }
}

// jax's threefry2x32 hash of the counter (x0, x1) under the key (k0, k1), in place.
DRLHET_HD inline void Threefry2x32(uint32_t k0, uint32_t k1, uint32_t& x0, uint32_t& x1) {
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  x0 += ks[0];
  x1 += ks[1];
  for (uint32_t s = 1; s <= 5; ++s) {  // five groups of four rounds, a key injection after each
    if (s % 2 == 1) {
      ThreefryRounds(x0, x1, 13, 15, 26, 6);
    } else {
      ThreefryRounds(x0, x1, 17, 29, 16, 24);
    }
    x0 += ks[s % 3];
    x1 += ks[(s + 1) % 3] + s;
  }
}

// Element i of jax.random.bits(key, (n,), uint32) for a threefry2x32 key (k0, k1), with the
// partitionable layout: the counter is i's high and low 32-bit words.
DRLHET_HD inline uint32_t RandomBits32(uint32_t k0, uint32_t k1, uint64_t i) {
  uint32_t x0 = static_cast<uint32_t>(i >> 32), x1 = static_cast<uint32_t>(i);
  Threefry2x32(k0, k1, x0, x1);
  return x0 ^ x1;
}

// jax.random.uniform's float32 in [0, 1) from 32 random bits.
DRLHET_HD inline float UniformFromBits(uint32_t bits) {
  const uint32_t mantissa = (bits >> 9) | 0x3F800000u;  // a float in [1, 2)
  float x;
  memcpy(&x, &mantissa, sizeof(x));
  return x - 1.0f;
}

// Target `pos` of a batch of `batch` drawn with the key (k0, k1) from a tree whose root is
// `total`: stratified (`(pos + u) * (total / batch)`, batch a power of two) or not (`u * total`).
DRLHET_HD inline float TargetFromKey(uint32_t k0, uint32_t k1, int64_t pos, int64_t batch,
                                     float total, bool stratified) {
  const float u = UniformFromBits(RandomBits32(k0, k1, static_cast<uint64_t>(pos)));
  if (!stratified) return u * total;
  const float scale = total / static_cast<float>(batch);  // exact: batch is a power of two
  return (static_cast<float>(pos) + u) * scale;
}

}  // namespace drlhet
