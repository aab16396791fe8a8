// A whole network's forward and backward passes over a mini-batch, built from mlp.h's layer
// loops: shared by the DQN step (dqn.h) and the DDPG/TD3 steps (ddpg.h). docs/design.md
// section 3, "The FPGA learner module".
#ifndef DRLHET_LEARNER_NET_H_
#define DRLHET_LEARNER_NET_H_

#include <cstdint>

#include "mlp.h"

namespace drlhet {
namespace learner {

// Activations of one forward pass: each hidden layer's output, then each head's.
struct Activations {
  Tile hidden[kMaxHidden];
  Tile head[2];
};

// Forward pass of `net` with parameters `p` on x [batch][net.layer[0].in]; `act` receives every
// layer's output.
inline void Forward(const Net& net, const Row* p, const Tile& x, int batch, Activations* act) {
  const Tile* in = &x;
  for (int l = 0; l < net.hidden; ++l) {
    DenseForward(net.layer[l], p, *in, batch, true, act->hidden[l]);
    in = &act->hidden[l];
  }
  for (int h = 0; h < net.heads; ++h) {
    DenseForward(net.layer[net.hidden + h], p, *in, batch, false, act->head[h]);
  }
}

// Buffers of one backward pass: the gradient at each head's output (in), and two ping-pong
// buffers for the gradient at a hidden layer's output.
struct BackwardBuffers {
  Tile dq[2];
  Tile dh[2];
};

// Where a backward pass writes: the weight gradients (a parameter memory; null: none, as when
// only the input's gradient is wanted), and the gradient at the network's input columns
// [dx_from, in) (null: none) into dx's columns [0, in - dx_from).
struct BackwardOut {
  Row* grads = nullptr;
  Tile* dx = nullptr;
  int dx_from = 0;
};

// The heads' input gradients, summed where two heads meet at the last hidden layer (or the
// network's input when it has no hidden layer): returns the buffer holding the sum.
inline Tile* HeadsBackward(const Net& net, const Row* p, const Tile& top, int batch,
                           BackwardBuffers* b, const BackwardOut& out) {
  const bool to_input = net.hidden == 0;
  const int from = to_input ? out.dx_from : 0;
  for (int h = 0; h < net.heads; ++h) {
    const Dense& d = net.layer[net.hidden + h];
    if (out.grads != nullptr) DenseWeightGrad(d, top, b->dq[h], batch, out.grads);
    if (to_input && out.dx == nullptr) continue;
    DenseInputGrad(d, p, b->dq[h], batch, b->dh[h], from);
  }
  if (to_input && out.dx == nullptr) return nullptr;
  if (net.heads == 1 && !to_input) return &b->dh[0];
  Lanes(batch, net.layer[net.hidden].in - from, [&](int64_t row, int64_t k) {
    float& v = b->dh[0][row][k];
    if (net.heads == 2) v += b->dh[1][row][k];
    if (to_input) (*out.dx)[row][k] = v;
  });
  return &b->dh[0];
}

// Backward pass of `net` (parameters `p`) from the heads' output gradients b->dq, through the
// activations `act` of its forward pass on x: each layer's weight gradient (into out.grads),
// ReLU's gradient, the input gradient of every hidden layer but the first, and the first
// layer's for columns [out.dx_from, in) when out.dx is set.
inline void Backward(const Net& net, const Row* p, const Tile& x, const Activations& act,
                     int batch, BackwardBuffers* b, const BackwardOut& out) {
  const Tile& top = net.hidden ? act.hidden[net.hidden - 1] : x;
  Tile* dh = HeadsBackward(net, p, top, batch, b, out);
  if (net.hidden == 0) return;
  for (int l = net.hidden - 1; l >= 0; --l) {
    const Dense& d = net.layer[l];
    ReluGrad(act.hidden[l], batch, d.out, *dh);
    const Tile& below = l ? act.hidden[l - 1] : x;
    if (out.grads != nullptr) DenseWeightGrad(d, below, *dh, batch, out.grads);
    if (l == 0) {
      if (out.dx != nullptr) DenseInputGrad(d, p, *dh, batch, *out.dx, out.dx_from);
      break;
    }
    Tile* next = dh == &b->dh[0] ? &b->dh[1] : &b->dh[0];
    DenseInputGrad(d, p, *dh, batch, *next);
    dh = next;
  }
}

}  // namespace learner
}  // namespace drlhet

#endif  // DRLHET_LEARNER_NET_H_
