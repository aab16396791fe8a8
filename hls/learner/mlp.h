// The learner module's MLP: forward, backward and optimizer steps of dense ReLU layers over a
// mini-batch, float32, with the loop structure the hardware runs (docs/design.md section 3,
// "The FPGA learner"; Zhang, Meng, Prasanna, TPDS 2023, Sec. 5: model parallelism across the
// neurons of a layer, data parallelism across the samples of the batch).
//
// Sizes: the module is built for at most kMaxHidden hidden layers of at most kMaxWidth neurons
// and kMaxBatch samples (template-free compile-time bounds: they size the on-chip arrays); a
// network's own sizes are set when its `Net` is made and may be anything within them.
//
// Parameter memory (what the module keeps on chip, and what crosses the XLA FFI boundary in
// the C-simulation): one flat float32 array, layer after layer (the hidden layers, then the
// heads), each layer its kernel [in][out] row-major (flax's layout) then its bias [out]. The
// target network, Adam's first and second moments use the same layout.
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
//             products x[row][i] dy[row][o]).
// The memories here are flat arrays at runtime offsets: not yet banked for synthesis
// (docs/design.md, "What the FPGA code does not yet express").
// The sums are those of the hardware (the order above), so the C-simulation matches flax's
// step to float32 rounding (about 1e-6 relative), not bit for bit.
#ifndef DRLHET_LEARNER_MLP_H_
#define DRLHET_LEARNER_MLP_H_

#include <cmath>
#include <cstdint>

namespace drlhet {
namespace learner {

constexpr int kMaxWidth = 256;
constexpr int kMaxHidden = 3;
constexpr int kMaxBatch = 256;
constexpr int kMaxLayers = kMaxHidden + 2;  // the hidden layers, then one or two heads
constexpr int kPOut = 64;                   // neurons computed in parallel (model parallelism)
constexpr int kPBatch = 16;                 // samples computed in parallel (data parallelism)

struct Dense {
  int in = 0;
  int out = 0;
  int64_t w = 0;  // offset of the kernel [in][out] in the parameter memory
  int64_t b = 0;  // offset of the bias [out]
};

// A network: `hidden` ReLU layers, then the heads (`heads` dense layers reading the last hidden
// layer: one for a Q-network or a critic, two for a dueling Q-network's value and advantages).
struct Net {
  int hidden = 0;
  int heads = 0;
  Dense layer[kMaxLayers];
  int64_t size = 0;  // floats in the parameter memory
};

// Makes `net` for an input of `in` features, `hidden` widths `widths[0..hidden)` and `heads`
// output widths `outs[0..heads)`; false (net untouched) when a size is outside the module's.
inline bool MakeNet(int in, const int* widths, int hidden, const int* outs, int heads, Net* net) {
  if (hidden < 0 || hidden > kMaxHidden || heads < 1 || heads > 2) return false;
  Net n;
  n.hidden = hidden;
  n.heads = heads;
  int prev = in;
  for (int l = 0; l < hidden + heads; ++l) {
    const int out = l < hidden ? widths[l] : outs[l - hidden];
    const int from = l < hidden ? prev : (hidden ? widths[hidden - 1] : in);
    if (from < 1 || from > kMaxWidth || out < 1 || out > kMaxWidth) return false;
    n.layer[l].in = from;
    n.layer[l].out = out;
    n.layer[l].w = n.size;
    n.layer[l].b = n.size + int64_t(from) * out;
    n.size = n.layer[l].b + out;
    if (l < hidden) prev = out;
  }
  *net = n;
  return true;
}

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

// A lanes loop's bound: the constant lane count for synthesis (the loop unrolls, and its guards
// idle the lanes past `live`), the live lanes alone in the C-simulation and the testbench (the
// same arithmetic without the idle iterations). Vitis HLS defines __SYNTHESIS__.
#ifdef __SYNTHESIS__
#define DRLHET_LANES(lanes, live) (lanes)
#else
#define DRLHET_LANES(lanes, live) ((live) < (lanes) ? (live) : (lanes))
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

// y[row][o] = relu?(sum_i x[row][i] W[i][o] + bias[o]) for rows [0, batch); row strides ldx, ldy.
// Per block of kPOut outputs: one pipelined loop over (input, row group), flattened (the input
// advances every `groups` iterations), each iteration kPBatch x kPOut multiply-adds into the
// group's accumulators (the first input's start from 0); then the bias and ReLU over the groups.
inline void DenseForward(const Dense& d, const float* p, const float* x, int ldx, int batch,
                         bool relu, float* y, int ldy) {
  const float* w = p + d.w;
  const int groups = (batch + kPBatch - 1) / kPBatch;
  for (int ob = 0; ob < d.out; ob += kPOut) {
    const int width = d.out - ob < kPOut ? d.out - ob : kPOut;
    DRLHET_LOOP(groups, 1, 1, 1, 1);
    for (int64_t k = 0, i = 0, r0 = 0; k < int64_t(d.in) * groups; ++k) {
#pragma HLS PIPELINE II = 1
      DRLHET_ITER();
      const int rows = batch - r0 < kPBatch ? int(batch - r0) : kPBatch;
      for (int r = 0; r < DRLHET_LANES(kPBatch, rows); ++r) {  // with q: kPBatch x kPOut MACs
        for (int q = 0; q < DRLHET_LANES(kPOut, width); ++q) {
          if (r >= rows || q >= width) continue;
          float& acc = y[(r0 + r) * ldy + ob + q];
          acc = (i == 0 ? 0.0f : acc) + x[(r0 + r) * ldx + i] * w[i * d.out + ob + q];
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
          float& v = y[int64_t(r0 + r) * ldy + ob + q];
          v = v + p[d.b + ob + q];
          if (relu && !(v > 0.0f)) v = 0.0f;
        }
      }
    }
  }
}

// dx[row][i - from] = sum_o dy[row][o] W[i][o] for inputs i in [from, in): per block of kPOut
// outputs, one pipelined loop over (input, row group), flattened; each row's kPOut products
// summed by a tree (the block's padding +0) and added to dx (the first block's to 0).
inline void DenseInputGrad(const Dense& d, const float* p, const float* dy, int ldy, int batch,
                           float* dx, int ldx, int from = 0) {
  const float* w = p + d.w;
  const int groups = (batch + kPBatch - 1) / kPBatch;
  const int64_t trips = int64_t(d.in - from) * groups;
  float prod[kPBatch][kPOut];
#pragma HLS ARRAY_PARTITION variable = prod complete dim = 0
  for (int ob = 0; ob < d.out; ob += kPOut) {
    const int width = d.out - ob < kPOut ? d.out - ob : kPOut;
    DRLHET_LOOP(0, 1, 1, Log2Ceil(kPOut) + 1, 1);
    for (int64_t k = 0, i = from, r0 = 0; k < trips; ++k) {
#pragma HLS PIPELINE II = 1
      DRLHET_ITER();
      const int rows = batch - r0 < kPBatch ? int(batch - r0) : kPBatch;
      for (int r = 0; r < DRLHET_LANES(kPBatch, rows); ++r) {  // kPBatch trees of kPOut products
        const int64_t row = r0 + r;
        if (r >= rows) continue;
        for (int q = 0; q < DRLHET_LANES(kPOut, width); ++q) {
          if (q < width) prod[r][q] = dy[row * ldy + ob + q] * w[i * d.out + ob + q];
        }
        float& acc = dx[row * ldx + i - from];
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
// gradient (the first group's to 0). `g` has the parameter memory's layout.
inline void DenseWeightGrad(const Dense& d, const float* x, int ldx, const float* dy, int ldy,
                            int batch, float* g) {
  const int blocks = (d.out + kPOut - 1) / kPOut;
  const int64_t trips = int64_t(d.in + 1) * blocks;
  float prod[kPOut][kPBatch];
#pragma HLS ARRAY_PARTITION variable = prod complete dim = 0
  for (int r0 = 0; r0 < batch; r0 += kPBatch) {
    const int rows = batch - r0 < kPBatch ? batch - r0 : kPBatch;
    DRLHET_LOOP(0, 1, 1, Log2Ceil(kPBatch) + 1, 1);
    for (int64_t k = 0, i = 0, ob = 0; k < trips; ++k) {  // i == in: the bias (x = 1)
#pragma HLS PIPELINE II = 1
      DRLHET_ITER();
      const int width = d.out - ob < kPOut ? int(d.out - ob) : kPOut;
      for (int q = 0; q < DRLHET_LANES(kPOut, width); ++q) {  // kPOut trees of kPBatch products
        const int64_t o = ob + q;
        if (q >= width) continue;
        for (int r = 0; r < DRLHET_LANES(kPBatch, rows); ++r) {
          const int64_t row = r0 + r;
          if (r < rows) prod[q][r] = (i < d.in ? x[row * ldx + i] : 1.0f) * dy[row * ldy + o];
        }
        float& acc = i < d.in ? g[d.w + i * d.out + o] : g[d.b + o];
        acc = (r0 == 0 ? 0.0f : acc) + TreeSum<kPBatch>(prod[q], rows);
      }
      ob += kPOut;
      if (ob >= int64_t(blocks) * kPOut) ob = 0, ++i;
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
inline void ReluGrad(const float* a, int lda, int batch, int width, float* dy, int ldy) {
  Lanes(batch, width, [&](int64_t row, int64_t o) {
    if (!(a[row * lda + o] > 0.0f)) dy[row * ldy + o] = 0.0f;
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

// The global L2 norm of `g[0..n)`: kPOut squares per iteration summed by a tree (the last
// block's padding +0), into eight interleaved partial sums (the adder's latency), then a tree.
inline float GlobalNorm(const float* g, int64_t n) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float sq[kPOut];
#pragma HLS ARRAY_PARTITION variable = part complete
#pragma HLS ARRAY_PARTITION variable = sq complete
  DRLHET_LOOP(8, 1, 1, Log2Ceil(kPOut) + 1, 0);
  for (int64_t k0 = 0, it = 0; k0 < n; k0 += kPOut, ++it) {
#pragma HLS PIPELINE II = 1
    DRLHET_ITER();
    const int w = n - k0 < kPOut ? int(n - k0) : kPOut;
    for (int q = 0; q < DRLHET_LANES(kPOut, w); ++q) {
      if (q < w) sq[q] = g[k0 + q] * g[k0 + q];
    }
    part[it % 8] += TreeSum<kPOut>(sq, w);
  }
  return std::sqrt(TreeSum<8>(part));
}

// One optimizer step on `n` parameters, in place: the clip (optax.clip_by_global_norm: g when
// the norm is below max_norm, else g / norm * max_norm), then Adam as optax.scale_by_adam
// (bias-corrected moments, eps outside the root) times -lr, or SGD; then the target network's
// Polyak update target = t_new p + t_old target (optax.incremental_update with t_old = 1 - tau
// as the caller rounds it; none when `target` is null). `count` is Adam's step count before the
// step (int32, saturating at its maximum as optax's); returns it after.
inline int32_t OptimizerStep(const Adam& opt, float t_new, float t_old, int64_t n,
                             const float* grads, float* params, float* mu, float* nu,
                             float* target, int32_t count) {
  const float max_norm = float(opt.max_norm);
  const float norm = opt.clip ? GlobalNorm(grads, n) : 0.0f;
  const bool clip = opt.clip && !(norm < max_norm);
  const int32_t next = count == INT32_MAX ? count : count + 1;
  const float b1 = float(opt.b1), b2 = float(opt.b2), a1 = float(1.0 - opt.b1),
              a2 = float(1.0 - opt.b2), eps = float(opt.eps), neg_lr = float(-opt.lr);
  const float c1 = 1.0f - std::pow(b1, float(next));
  const float c2 = 1.0f - std::pow(b2, float(next));
  DRLHET_LOOP(0, 0, 0, 0, 0, 1);
  for (int64_t k0 = 0; k0 < n; k0 += kPOut) {  // kPOut parameters an iteration: the lanes
#pragma HLS PIPELINE II = 1
    DRLHET_ITER();
    for (int q = 0; q < kPOut; ++q) {  // a constant trip count: unrolled by the pipeline
      const int64_t k = k0 + q;
      if (k >= n) continue;
      const float g = clip ? (grads[k] / norm) * max_norm : grads[k];
      float step = g;
      if (!opt.sgd) {
        mu[k] = a1 * g + b1 * mu[k];
        nu[k] = a2 * (g * g) + b2 * nu[k];
        step = (mu[k] / c1) / (std::sqrt(nu[k] / c2) + eps);
      }
      params[k] = params[k] + neg_lr * step;
      if (target != nullptr) target[k] = t_new * params[k] + t_old * target[k];
    }
  }
  return opt.sgd ? count : next;
}

}  // namespace learner
}  // namespace drlhet

#endif  // DRLHET_LEARNER_MLP_H_
