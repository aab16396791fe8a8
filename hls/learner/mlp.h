// The learner module's MLP: forward, backward and optimizer steps of dense ReLU layers over a
// mini-batch, float32, with the loop structure the hardware runs (docs/design.md section 3,
// "The FPGA learner"; Zhang, Meng, Prasanna, TPDS 2023, Sec. 5: model parallelism across the
// neurons of a layer, data parallelism across the samples of the batch).
//
// Memories: memory.h (parameter memories as rows of kPOut banks, activations as Tiles
// partitioned by kPBatch rows and kPOut columns; the flat layout only at the load and store).
//
// Loops (each nest one pipelined loop at II 1, flattened by hand, its kPOut x kPBatch lanes
// loops of constant trip count with guards; the cycle model is drlhet/dse/devices/
// learner_cycles.py, checked against these loops as they run by cycles.h and learner_tb):
//   forward   for each block of kPOut outputs, one loop over (input i, group of kPBatch rows):
//             acc[row][o] += x[row][i] * W[i][o]; then y = acc + bias (flax's order: the dot
//             product summed over i in order, then the bias), ReLU on hidden layers;
//   input grad for each block of outputs, one loop over (input, group of rows):
//             dx[row][i] += (adder tree over the block's kPOut products dy[row][o] W[i][o]);
//   weight grad for each group of rows, one loop over (input i, and the bias as input `in`,
//             x = 1; block of outputs): dW[i][o] += (adder tree over the group's kPBatch
//             products x[row][i] dy[row][o]);
//   optimizer one loop over the parameter memory's rows, kPOut lanes an iteration.
// Each iteration reads one row of a parameter memory (its kPOut banks) and kPBatch x kPOut
// elements of a Tile at one row group and one column block (distinct banks).
// The sums are those of the hardware (the order above), so the C-simulation matches flax's
// step to float32 rounding (about 1e-6 relative), not bit for bit.
#ifndef DRLHET_LEARNER_MLP_H_
#define DRLHET_LEARNER_MLP_H_

#include <cmath>
#include <cstdint>

#include "memory.h"

namespace drlhet {
namespace learner {

// Loop accounting, for the testbench's cycle count (learner_tb --cycles, cycles.h): every
// pipelined loop of the module states, before it starts, how many accumulators its iterations
// add into in turn (iteration k into k % accumulators; 0: none, 1: one running sum) and its
// body's latency in the float cores' terms (DRLHET_LOOP), and counts each iteration it runs
// (DRLHET_ITER, first in its body). Both are compiled out unless DRLHET_LEARNER_TRACE is
// defined: the count is then of the iterations the step ran, not of a list written beside it.
struct LoopDepth {
  int mem = 0;     // dependent memory reads
  int mul = 0;     // dependent multiplies
  int add = 0;     // dependent adds
  int plain = 0;   // other cycles (compares, selects, the write)
  int update = 0;  // the optimizer's element pipelines
};
#ifdef DRLHET_LEARNER_TRACE
void TraceLoop(int64_t accumulators, const LoopDepth& depth);  // the testbench's
void TraceIteration();
#define DRLHET_LOOP(accumulators, ...) \
  ::drlhet::learner::TraceLoop(accumulators, ::drlhet::learner::LoopDepth{__VA_ARGS__})
#define DRLHET_ITER() ::drlhet::learner::TraceIteration()
#else
#define DRLHET_LOOP(accumulators, ...) ((void)0)
#define DRLHET_ITER() ((void)0)
#endif


constexpr int Log2Ceil(int n) { return n <= 1 ? 0 : 1 + Log2Ceil((n + 1) / 2); }

// The sum of N values as the hardware's balanced adder tree adds them (pairs of halves), N a
// constant: the recursion unfolds when the module is compiled. A partial block of n < N values
// is padded with +0 (a mux at each node: a subtree wholly past n adds +0, which is exactly what
// its padding sums to; the C-simulation then skips its adds).
template <int N>
struct Tree {
  static float Sum(const float* v, int n) {
    if (n <= 0) return 0.0f;
    return Tree<N / 2>::Sum(v, n) + Tree<N - N / 2>::Sum(v + N / 2, n - N / 2);
  }
};
template <>
struct Tree<1> {
  static float Sum(const float* v, int n) { return n > 0 ? v[0] : 0.0f; }
};
template <int N>
inline float TreeSum(const float* v, int n = N) {
  return Tree<N>::Sum(v, n);
}

// y[row][o] = relu?(sum_i x[row][i] W[i][o] + bias[o]) for rows [0, batch).
// Per block of kPOut outputs: one pipelined loop over (input, row group), flattened (the input
// advances every `groups` iterations), each iteration kPBatch x kPOut multiply-adds into the
// group's accumulators (the first input's start from 0); then the bias and ReLU over the groups.
inline void DenseForward(const Dense& d, const Row* p, const Tile& x, int batch, bool relu,
                         Tile& y) {
  const int groups = (batch + kPBatch - 1) / kPBatch;
  for (int ob = 0, j = 0; ob < d.out; ob += kPOut, ++j) {
    const int width = d.out - ob < kPOut ? d.out - ob : kPOut;
    DRLHET_LOOP(groups, 1, 1, 1, 1);
    for (int64_t k = 0, i = 0, r0 = 0; k < int64_t(d.in) * groups; ++k) {
#pragma HLS PIPELINE II = 1
      DRLHET_ITER();
      const int rows = batch - r0 < kPBatch ? int(batch - r0) : kPBatch;
      const Row& w = p[d.w + i * d.blocks + j];
      for (int r = 0; r < DRLHET_LANES(kPBatch, rows); ++r) {  // with q: kPBatch x kPOut MACs
        for (int q = 0; q < DRLHET_LANES(kPOut, width); ++q) {
          if (r >= rows || q >= width) continue;
          float& acc = y[r0 + r][ob + q];
          acc = (i == 0 ? 0.0f : acc) + x[r0 + r][i] * w[q];
        }
      }
      r0 += kPBatch;
      if (r0 >= int64_t(groups) * kPBatch) r0 = 0, ++i;
    }
    DRLHET_LOOP(0, 1, 0, 1, 2);
    for (int r0 = 0; r0 < batch; r0 += kPBatch) {  // bias + ReLU, a row group per iteration
#pragma HLS PIPELINE II = 1
      DRLHET_ITER();
      const int rows = batch - r0 < kPBatch ? batch - r0 : kPBatch;
      for (int r = 0; r < DRLHET_LANES(kPBatch, rows); ++r) {
        for (int q = 0; q < DRLHET_LANES(kPOut, width); ++q) {
          if (r >= rows || q >= width) continue;
          float& v = y[r0 + r][ob + q];
          v = v + p[d.b + j][q];
          if (relu && !(v > 0.0f)) v = 0.0f;
        }
      }
    }
  }
}

// dx[row][i - from] = sum_o dy[row][o] W[i][o] for inputs i in [from, in): per block of kPOut
// outputs, one pipelined loop over (input, row group), flattened; each row's kPOut products
// summed by a tree (the block's padding +0) and added to dx (the first block's to 0).
inline void DenseInputGrad(const Dense& d, const Row* p, const Tile& dy, int batch, Tile& dx,
                           int from = 0) {
  const int groups = (batch + kPBatch - 1) / kPBatch;
  const int64_t trips = int64_t(d.in - from) * groups;
  float prod[kPBatch][kPOut];
#pragma HLS ARRAY_PARTITION variable = prod complete dim = 0
  for (int ob = 0, j = 0; ob < d.out; ob += kPOut, ++j) {
    const int width = d.out - ob < kPOut ? d.out - ob : kPOut;
    DRLHET_LOOP(0, 1, 1, Log2Ceil(kPOut) + 1, 1);
    for (int64_t k = 0, i = from, r0 = 0; k < trips; ++k) {
#pragma HLS PIPELINE II = 1
      DRLHET_ITER();
      const int rows = batch - r0 < kPBatch ? int(batch - r0) : kPBatch;
      const Row& w = p[d.w + i * d.blocks + j];
      for (int r = 0; r < DRLHET_LANES(kPBatch, rows); ++r) {  // kPBatch trees of kPOut products
        const int64_t row = r0 + r;
        if (r >= rows) continue;
        for (int q = 0; q < DRLHET_LANES(kPOut, width); ++q) {
          if (q < width) prod[r][q] = dy[row][ob + q] * w[q];
        }
        float& acc = dx[row][i - from];
        acc = (ob == 0 ? 0.0f : acc) + TreeSum<kPOut>(prod[r], width);
      }
      r0 += kPBatch;
      if (r0 >= int64_t(groups) * kPBatch) r0 = 0, ++i;
    }
  }
}

// g[W[i][o]] = sum_row x[row][i] dy[row][o], g[bias[o]] = sum_row dy[row][o]: per group of
// kPBatch rows, one pipelined loop over (input or bias, block of outputs), flattened; each
// output's kPBatch products summed by a tree (the group's padding +0) and added to the
// gradient (the first group's to 0). `g` is a parameter memory (memory.h); its padding lanes
// are written +0.
inline void DenseWeightGrad(const Dense& d, const Tile& x, const Tile& dy, int batch, Row* g) {
  const int64_t trips = int64_t(d.in + 1) * d.blocks;
  float prod[kPOut][kPBatch];
#pragma HLS ARRAY_PARTITION variable = prod complete dim = 0
  for (int r0 = 0; r0 < batch; r0 += kPBatch) {
    const int rows = batch - r0 < kPBatch ? batch - r0 : kPBatch;
    DRLHET_LOOP(0, 1, 1, Log2Ceil(kPBatch) + 1, 1);
    for (int64_t k = 0, i = 0, j = 0; k < trips; ++k) {  // i == in: the bias (x = 1)
#pragma HLS PIPELINE II = 1
      DRLHET_ITER();
      const int64_t ob = j * kPOut;
      const int width = d.out - ob < kPOut ? int(d.out - ob) : kPOut;
      Row& acc = g[i < d.in ? d.w + i * d.blocks + j : d.b + j];
      for (int q = 0; q < kPOut; ++q) {  // kPOut trees of kPBatch products; padding +0
        if (q >= width) {
          acc[q] = 0.0f;
          continue;
        }
        for (int r = 0; r < DRLHET_LANES(kPBatch, rows); ++r) {
          const int64_t row = r0 + r;
          if (r < rows) prod[q][r] = (i < d.in ? x[row][i] : 1.0f) * dy[row][ob + q];
        }
        acc[q] = (r0 == 0 ? 0.0f : acc[q]) + TreeSum<kPBatch>(prod[q], rows);
      }
      if (++j == d.blocks) j = 0, ++i;
    }
  }
}

// One pipelined loop over (row group, block of kPOut columns) of a pass over [batch][width],
// kPBatch x kPOut lanes an iteration: f(row, col) for every row < batch and col < width.
template <typename F>
inline void Lanes(int batch, int width, F f) {
  const int groups = (batch + kPBatch - 1) / kPBatch, blocks = (width + kPOut - 1) / kPOut;
  DRLHET_LOOP(0, 1, 0, 1, 1);
  for (int k = 0, r0 = 0, c0 = 0; k < groups * blocks; ++k) {
#pragma HLS PIPELINE II = 1
    DRLHET_ITER();
    const int rows = batch - r0 < kPBatch ? batch - r0 : kPBatch;
    const int cols = width - c0 < kPOut ? width - c0 : kPOut;
    for (int r = 0; r < DRLHET_LANES(kPBatch, rows); ++r) {
      for (int q = 0; q < DRLHET_LANES(kPOut, cols); ++q) {
        if (r < rows && q < cols) f(r0 + r, c0 + q);
      }
    }
    c0 += kPOut;
    if (c0 >= blocks * kPOut) c0 = 0, r0 += kPBatch;
  }
}

// dy[row][:] *= relu'(a[row][:]) for a post-ReLU activation a (its gradient is 0 where a == 0).
inline void ReluGrad(const Tile& a, int batch, int width, Tile& dy) {
  Lanes(batch, width, [&](int64_t row, int64_t o) {
    if (!(a[row][o] > 0.0f)) dy[row][o] = 0.0f;
  });
}

// optax.adam's hyper-parameters and the gradient clip, as doubles: each float32 constant is
// rounded from them as JAX rounds a Python float (b1 and 1 - b1 each rounded once).
struct Adam {
  double lr = 1e-3;
  double b1 = 0.9;
  double b2 = 0.999;
  double eps = 1e-8;
  double max_norm = HUGE_VAL;  // optax.clip_by_global_norm before the optimizer (inf: none)
  bool clip = true;            // false: no clip stage at all (optax.adam alone, as DDPG's)
  bool sgd = false;            // plain SGD (optax.sgd: p - lr g) instead of Adam
};

// The global L2 norm of the gradient memory g [rows][kPOut] (its padding +0): a row's kPOut
// squares per iteration summed by a tree, into eight interleaved partial sums (the adder's
// latency), then a tree.
inline float GlobalNorm(const Row* g, int64_t rows) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float sq[kPOut];
#pragma HLS ARRAY_PARTITION variable = part complete
#pragma HLS ARRAY_PARTITION variable = sq complete
  DRLHET_LOOP(8, 1, 1, Log2Ceil(kPOut) + 1, 0);
  for (int64_t r = 0; r < rows; ++r) {
#pragma HLS PIPELINE II = 1
    DRLHET_ITER();
    for (int q = 0; q < kPOut; ++q) sq[q] = g[r][q] * g[r][q];
    part[r % 8] += TreeSum<kPOut>(sq);
  }
  return std::sqrt(TreeSum<8>(part));
}

// One optimizer step on the parameter memories of `rows` rows (memory.h; the padding stays +0),
// in place: the clip (optax.clip_by_global_norm: g when the norm is below max_norm, else
// g / norm * max_norm), then Adam as optax.scale_by_adam (bias-corrected moments, eps outside
// the root) times -lr, or SGD; then the target network's Polyak update target = t_new p +
// t_old target (optax.incremental_update with t_old = 1 - tau as the caller rounds it; none
// when `target` is null), or, when `copy`, target = params exactly (optax.periodic_update's
// select: 1 p + 0 target would turn an inf in the old target into NaN and -0 into +0).
// `count` is Adam's step count before the step (int32, saturating at its maximum as optax's);
// returns it after.
inline int32_t OptimizerStep(const Adam& opt, float t_new, float t_old, int64_t rows,
                             const Row* grads, Row* params, Row* mu, Row* nu, Row* target,
                             int32_t count, bool copy = false) {
  const float max_norm = float(opt.max_norm);
  const float norm = opt.clip ? GlobalNorm(grads, rows) : 0.0f;
  const bool clip = opt.clip && !(norm < max_norm);
  const int32_t next = count == INT32_MAX ? count : count + 1;
  const float b1 = float(opt.b1), b2 = float(opt.b2), a1 = float(1.0 - opt.b1),
              a2 = float(1.0 - opt.b2), eps = float(opt.eps), neg_lr = float(-opt.lr);
  const float c1 = 1.0f - std::pow(b1, float(next));
  const float c2 = 1.0f - std::pow(b2, float(next));
  DRLHET_LOOP(0, 0, 0, 0, 0, 1);
  for (int64_t r = 0; r < rows; ++r) {  // a row of kPOut parameters an iteration: the lanes
#pragma HLS PIPELINE II = 1
    DRLHET_ITER();
    for (int q = 0; q < kPOut; ++q) {  // a constant trip count: unrolled by the pipeline
      const float g = clip ? (grads[r][q] / norm) * max_norm : grads[r][q];
      float step = g;
      if (!opt.sgd) {
        mu[r][q] = a1 * g + b1 * mu[r][q];
        nu[r][q] = a2 * (g * g) + b2 * nu[r][q];
        step = (mu[r][q] / c1) / (std::sqrt(nu[r][q] / c2) + eps);
      }
      params[r][q] = params[r][q] + neg_lr * step;
      if (target == nullptr) continue;
      target[r][q] = copy ? params[r][q] : t_new * params[r][q] + t_old * target[r][q];
    }
  }
  return opt.sgd ? count : next;
}

}  // namespace learner
}  // namespace drlhet

#endif  // DRLHET_LEARNER_MLP_H_
