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
// Loops (each innermost loop pipelined at II 1; kPOut neurons x kPBatch samples multiply-add
// per cycle; the cycle model is hls/learner/cycles.h and drlhet/dse/devices/learner_cycles.py):
//   forward   for each block of kPOut outputs, for each input i, for each group of kPBatch
//             rows: acc[row][o] += x[row][i] * W[i][o]; then y = acc + bias (flax's order:
//             the dot product summed over i in order, then the bias), ReLU on hidden layers;
//   input grad for each block of outputs, for each input, for each group of rows:
//             dx[row][i] += (adder tree over the block's kPOut products dy[row][o] W[i][o]);
//   weight grad for each group of rows, for each input i (and the bias as input `in`, x = 1),
//             for each block of outputs: dW[i][o] += (adder tree over the group's kPBatch
//             products x[row][i] dy[row][o]).
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

// The sum of `n` values as the hardware's balanced adder tree adds them (pairs of halves).
inline float TreeSum(const float* v, int n) {
  if (n == 1) return v[0];
  const int half = n / 2;
  return TreeSum(v, half) + TreeSum(v + half, n - half);
}

// y[row][o] = relu?(sum_i x[row][i] W[i][o] + bias[o]) for rows [0, batch); row strides ldx, ldy.
inline void DenseForward(const Dense& d, const float* p, const float* x, int ldx, int batch,
                         bool relu, float* y, int ldy) {
  const float* w = p + d.w;
  for (int ob = 0; ob < d.out; ob += kPOut) {
    const int width = d.out - ob < kPOut ? d.out - ob : kPOut;
    for (int row = 0; row < batch; ++row) {
      for (int q = 0; q < width; ++q) y[int64_t(row) * ldy + ob + q] = 0.0f;
    }
    for (int i = 0; i < d.in; ++i) {
      for (int r0 = 0; r0 < batch; r0 += kPBatch) {  // pipelined: a row group per iteration
#pragma HLS PIPELINE II = 1
        const int rows = batch - r0 < kPBatch ? batch - r0 : kPBatch;
        for (int r = 0; r < rows; ++r) {  // unrolled with q: kPBatch x kPOut MACs
          const int64_t row = r0 + r;
          for (int q = 0; q < width; ++q) {
            y[row * ldy + ob + q] += x[row * ldx + i] * w[int64_t(i) * d.out + ob + q];
          }
        }
      }
    }
    for (int r0 = 0; r0 < batch; r0 += kPBatch) {  // bias + ReLU, a row group per iteration
      const int rows = batch - r0 < kPBatch ? batch - r0 : kPBatch;
      for (int r = 0; r < rows; ++r) {
        for (int q = 0; q < width; ++q) {
          float& v = y[int64_t(r0 + r) * ldy + ob + q];
          v = v + p[d.b + ob + q];
          if (relu && !(v > 0.0f)) v = 0.0f;
        }
      }
    }
  }
}

// dx[row][i - from] = sum_o dy[row][o] W[i][o] for inputs i in [from, in) (blocks of kPOut
// outputs in order, a tree in a block).
inline void DenseInputGrad(const Dense& d, const float* p, const float* dy, int ldy, int batch,
                           float* dx, int ldx, int from = 0) {
  const float* w = p + d.w;
  float prod[kPBatch][kPOut];
  for (int row = 0; row < batch; ++row) {
    for (int i = from; i < d.in; ++i) dx[int64_t(row) * ldx + i - from] = 0.0f;
  }
  for (int ob = 0; ob < d.out; ob += kPOut) {
    const int width = d.out - ob < kPOut ? d.out - ob : kPOut;
    for (int i = from; i < d.in; ++i) {
      for (int r0 = 0; r0 < batch; r0 += kPBatch) {  // pipelined: a row group per iteration
#pragma HLS PIPELINE II = 1
        const int rows = batch - r0 < kPBatch ? batch - r0 : kPBatch;
        for (int r = 0; r < rows; ++r) {  // unrolled: kPBatch trees of kPOut products
          const int64_t row = r0 + r;
          for (int q = 0; q < width; ++q) {
            prod[r][q] = dy[row * ldy + ob + q] * w[int64_t(i) * d.out + ob + q];
          }
          dx[row * ldx + i - from] += TreeSum(prod[r], width);
        }
      }
    }
  }
}

// g[W[i][o]] = sum_row x[row][i] dy[row][o], g[bias[o]] = sum_row dy[row][o] (groups of kPBatch
// rows in order, a tree in a group). `g` has the parameter memory's layout.
inline void DenseWeightGrad(const Dense& d, const float* x, int ldx, const float* dy, int ldy,
                            int batch, float* g) {
  float prod[kPOut][kPBatch];
  for (int64_t k = 0; k < int64_t(d.in + 1) * d.out; ++k) g[d.w + k] = 0.0f;  // kernel, bias
  for (int r0 = 0; r0 < batch; r0 += kPBatch) {
    const int rows = batch - r0 < kPBatch ? batch - r0 : kPBatch;
    for (int i = 0; i <= d.in; ++i) {  // i == in: the bias (x = 1)
      for (int ob = 0; ob < d.out; ob += kPOut) {  // pipelined: a block of outputs per iteration
#pragma HLS PIPELINE II = 1
        const int width = d.out - ob < kPOut ? d.out - ob : kPOut;
        for (int q = 0; q < width; ++q) {  // unrolled: kPOut trees of kPBatch products
          const int o = ob + q;
          for (int r = 0; r < rows; ++r) {
            const float xi = i < d.in ? x[int64_t(r0 + r) * ldx + i] : 1.0f;
            prod[q][r] = xi * dy[int64_t(r0 + r) * ldy + o];
          }
          float& acc = i < d.in ? g[d.w + int64_t(i) * d.out + o] : g[d.b + o];
          acc += TreeSum(prod[q], rows);
        }
      }
    }
  }
}

// dy[row][:] *= relu'(a[row][:]) for a post-ReLU activation a (its gradient is 0 where a == 0).
inline void ReluGrad(const float* a, int lda, int batch, int width, float* dy, int ldy) {
  for (int row = 0; row < batch; ++row) {
    for (int o = 0; o < width; ++o) {
      if (!(a[int64_t(row) * lda + o] > 0.0f)) dy[int64_t(row) * ldy + o] = 0.0f;
    }
  }
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

// The global L2 norm of `g[0..n)`: kPOut squares per iteration summed by a tree, into eight
// interleaved partial sums (the adder's latency), then a tree.
inline float GlobalNorm(const float* g, int64_t n) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float sq[kPOut];
  for (int64_t k0 = 0, it = 0; k0 < n; k0 += kPOut, ++it) {
#pragma HLS PIPELINE II = 1
    const int w = n - k0 < kPOut ? int(n - k0) : kPOut;
    for (int q = 0; q < w; ++q) sq[q] = g[k0 + q] * g[k0 + q];
    part[it % 8] += TreeSum(sq, w);
  }
  return std::sqrt(TreeSum(part, 8));
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
  for (int64_t k0 = 0; k0 < n; k0 += kPOut) {  // kPOut parameters an iteration: the lanes
#pragma HLS PIPELINE II = 1
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
