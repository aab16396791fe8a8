// A whole network's forward and backward passes over a mini-batch, built from mlp.h's layer
// loops: shared by the DQN step (dqn.h) and the DDPG/TD3 steps (ddpg.h). docs/design.md
// section 3, "The FPGA learner module".
#ifndef DRLHET_LEARNER_NET_H_
#define DRLHET_LEARNER_NET_H_

#include <cstdint>

#include "mlp.h"

namespace drlhet {
namespace learner {

// Activations of one forward pass: each hidden layer's output, then each head's (row stride
// kMaxWidth).
struct Activations {
  float hidden[kMaxHidden][kMaxBatch * kMaxWidth];
  float head[2][kMaxBatch * kMaxWidth];
};

// Forward pass of `net` with parameters `p` on x [batch][ldx] (its first layer.in columns);
// `act` receives every layer's output.
inline void Forward(const Net& net, const float* p, const float* x, int ldx, int batch,
                    Activations* act) {
  const float* in = x;
  int ld = ldx;
  for (int l = 0; l < net.hidden; ++l) {
    DenseForward(net.layer[l], p, in, ld, batch, true, act->hidden[l], kMaxWidth);
    in = act->hidden[l];
    ld = kMaxWidth;
  }
  for (int h = 0; h < net.heads; ++h) {
    DenseForward(net.layer[net.hidden + h], p, in, ld, batch, false, act->head[h], kMaxWidth);
  }
}

// Buffers of one backward pass: the gradient at each head's output (in), and two ping-pong
// buffers for the gradient at a hidden layer's output (rows of stride kMaxWidth).
struct BackwardBuffers {
  float dq[2][kMaxBatch * kMaxWidth];
  float dh[2][kMaxBatch * kMaxWidth];
};

// Where a backward pass writes: the weight gradients (the parameter memory's layout; null:
// none, as when only the input's gradient is wanted), and the gradient at the network's input
// columns [dx_from, in) (null: none) into dx [batch][ld_dx].
struct BackwardOut {
  float* grads = nullptr;
  float* dx = nullptr;
  int dx_from = 0;
  int ld_dx = 0;
};

// The heads' input gradients, summed where two heads meet at the last hidden layer (or the
// network's input when it has no hidden layer): returns the buffer holding the sum.
inline float* HeadsBackward(const Net& net, const float* p, const float* top, int ld_top,
                            int batch, BackwardBuffers* b, const BackwardOut& out) {
  const bool to_input = net.hidden == 0;
  const int from = to_input ? out.dx_from : 0;
  float* into[2] = {b->dh[0], b->dh[1]};
  for (int h = 0; h < net.heads; ++h) {
    const Dense& d = net.layer[net.hidden + h];
    if (out.grads != nullptr) {
      DenseWeightGrad(d, top, ld_top, b->dq[h], kMaxWidth, batch, out.grads);
    }
    if (to_input && out.dx == nullptr) continue;
    DenseInputGrad(d, p, b->dq[h], kMaxWidth, batch, into[h], kMaxWidth, from);
  }
  if (to_input && out.dx == nullptr) return nullptr;
  if (net.heads == 1 && !to_input) return b->dh[0];
  Lanes(batch, net.layer[net.hidden].in - from, [&](int64_t row, int64_t k) {
    float& v = b->dh[0][row * kMaxWidth + k];
    if (net.heads == 2) v += b->dh[1][row * kMaxWidth + k];
    if (to_input) out.dx[row * out.ld_dx + k] = v;
  });
  return b->dh[0];
}

// Backward pass of `net` (parameters `p`) from the heads' output gradients b->dq, through the
// activations `act` of its forward pass on x [batch][ldx]: each layer's weight gradient (into
// out.grads), ReLU's gradient, the input gradient of every hidden layer but the first, and the
// first layer's for columns [out.dx_from, in) when out.dx is set.
inline void Backward(const Net& net, const float* p, const float* x, int ldx,
                     const Activations& act, int batch, BackwardBuffers* b,
                     const BackwardOut& out) {
  const float* top = net.hidden ? act.hidden[net.hidden - 1] : x;
  float* dh = HeadsBackward(net, p, top, net.hidden ? kMaxWidth : ldx, batch, b, out);
  if (net.hidden == 0) return;
  for (int l = net.hidden - 1; l >= 0; --l) {
    const Dense& d = net.layer[l];
    ReluGrad(act.hidden[l], kMaxWidth, batch, d.out, dh, kMaxWidth);
    const float* below = l ? act.hidden[l - 1] : x;
    const int ld_below = l ? kMaxWidth : ldx;
    if (out.grads != nullptr) DenseWeightGrad(d, below, ld_below, dh, kMaxWidth, batch, out.grads);
    if (l == 0) {
      if (out.dx != nullptr) {
        DenseInputGrad(d, p, dh, kMaxWidth, batch, out.dx, out.ld_dx, out.dx_from);
      }
      break;
    }
    float* next = dh == b->dh[0] ? b->dh[1] : b->dh[0];
    DenseInputGrad(d, p, dh, kMaxWidth, batch, next, kMaxWidth);
    dh = next;
  }
}

}  // namespace learner
}  // namespace drlhet

#endif  // DRLHET_LEARNER_NET_H_
