// The learner module's DQN step on one mini-batch (docs/design.md section 3, "The FPGA
// learner"), as drlhet.agents.dqn computes it with flax and optax: online and target
// Q-networks (optionally dueling: value + advantages - mean advantage), double-Q targets
// r + discount * Q_target(s', argmax_a Q_online(s', a)) (or max_a Q_target), the
// importance-weighted Huber loss mean(w * huber(td)), its gradient through the online network,
// the optimizer step (mlp.h), the target update (Polyak every step, or a copy every `period`
// steps) and the new priorities |td| + eps.
//
// Stages in order (each one loop nest of mlp.h, or one pipelined pass over the batch):
// forward online(s), forward target(s'), forward online(s') when double; TD, loss and dQ;
// backward through the heads and the hidden layers (weight gradients of every layer, input
// gradients of all but the first); the optimizer step over the parameter memory.
#ifndef DRLHET_LEARNER_DQN_H_
#define DRLHET_LEARNER_DQN_H_

#include <cmath>
#include <cstdint>

#include "mlp.h"
#include "net.h"

namespace drlhet {
namespace learner {

struct DqnConfig {
  bool dueling = true;
  bool double_q = true;
  double huber_delta = 1.0;
  double priority_eps = 1e-6;
  double tau = 0.01;   // Polyak step of the target network (period 0)
  int32_t period = 0;  // > 0: the target is a copy of the online network every `period` steps
  Adam opt;
};

// The learner state's parameter memories (memory.h), [net.rows][kPOut] each.
struct DqnMemory {
  Row* params;
  Row* target;
  Row* mu;
  Row* nu;
};

// One mini-batch on chip: obs and next_obs [B][D] in Tiles, action, reward, discount and the
// importance weights [B].
struct DqnBatch {
  const Tile* obs;
  const int32_t* action;
  const float* reward;
  const float* discount;
  const Tile* next_obs;
  const float* weights;
  int batch;
};

// On-chip scratch of one step (the C-simulation allocates it once per thread).
struct DqnScratch {
  Activations online;       // online(s), kept for the backward pass
  Activations target_next;  // target(s')
  Activations online_next;  // online(s') (double Q)
  float td[kMaxBatch];
  BackwardBuffers back;     // dQ at the heads (back.dq), the hidden layers' gradients
  Row grads[kMaxRows];      // the gradient, a parameter memory
};

// The mean advantage of `row` (a dueling network's; 0 with one head): the advantages summed in
// order, over a constant count of lanes (the tiles' columns) with the actions past the last
// skipped, then divided by their count. Once a row, not once an action.
inline float MeanAdvantage(const Net& net, const Activations& act, int row) {
  if (net.heads == 1) return 0.0f;
  const float* adv = act.head[1][row];
  const int actions = net.layer[net.hidden + 1].out;
  float sum = 0.0f;
  for (int k = 0; k < DRLHET_LANES(kMaxWidth, actions); ++k) {
    if (k < actions) sum += adv[k];
  }
  return sum / float(actions);
}

// Q(row, a) from the heads: the single head, or value + advantage - mean (MeanAdvantage's).
inline float QValue(const Net& net, const Activations& act, int row, int a, float mean) {
  const float* h0 = act.head[0][row];
  if (net.heads == 1) return h0[a];
  return (h0[0] + act.head[1][row][a]) - mean;
}

// TD errors (s->td), the loss (returned) and its gradient at the heads' outputs (s->back.dq),
// from s->online, s->target_next and (double Q) s->online_next. The loops over the actions
// inside the row loop run a constant count of lanes (the tiles' columns) with guards.
inline float TdAndLoss(const Net& net, const DqnConfig& cfg, const DqnBatch& b, DqnScratch* s) {
  const int actions = net.layer[net.hidden + net.heads - 1].out;
  const float delta = float(cfg.huber_delta), inv_b = float(1.0 / b.batch);
  const Activations& pick = cfg.double_q ? s->online_next : s->target_next;
  float loss = 0.0f;
  // the argmax's compares, and a dueling head's in-order sum of the advantages, `actions` deep
  DRLHET_LOOP(1, 1, 2, 4 + (net.heads == 2 ? actions : 0), actions);
  for (int row = 0; row < b.batch; ++row) {
#pragma HLS PIPELINE II = 1
    DRLHET_ITER();
    const float m_pick = MeanAdvantage(net, pick, row);
    int best = 0;  // argmax, the first on ties (jnp.argmax)
    float best_q = QValue(net, pick, row, 0, m_pick);
    for (int a = 1; a < DRLHET_LANES(kMaxWidth, actions); ++a) {
      if (a >= actions) continue;
      const float q = QValue(net, pick, row, a, m_pick);
      if (q > best_q) best_q = q, best = a;
    }
    const float m_next = MeanAdvantage(net, s->target_next, row);
    const float target =
        b.reward[row] + b.discount[row] * QValue(net, s->target_next, row, best, m_next);
    const int action = b.action[row];
    const float m_now = MeanAdvantage(net, s->online, row);
    const float t = target - QValue(net, s->online, row, action, m_now);
    s->td[row] = t;
    const float ax = std::fabs(t), w = b.weights[row];
    loss += w * (ax <= delta ? 0.5f * (t * t) : delta * (ax - 0.5f * delta));
    // d loss / d td = w / B * huber'(td); dQ(s, a) = -that.
    const float dh = w * inv_b;
    const float dtd = ax <= delta ? dh * t : dh * (t > 0.0f ? delta : (t < 0.0f ? -delta : 0.0f));
    float* d0 = s->back.dq[0][row];
    float* d1 = s->back.dq[1][row];
    for (int k = 0; k < DRLHET_LANES(kMaxWidth, actions); ++k) {
      if (k >= actions) continue;
      if (net.heads == 1) {
        d0[k] = k == action ? -dtd : 0.0f;
      } else {  // the value gets dQ; each advantage its own dQ minus the mean's dQ / A
        d1[k] = dtd / float(actions);
        if (k == action) d1[k] += -dtd;
      }
    }
    if (net.heads == 2) d0[0] = -dtd;
  }
  return loss / float(b.batch);
}

struct DqnStepOut {
  float loss;
  float abs_td;  // mean |td|
  int32_t count;
};

// One DQN learner step, in place on the memories `m`. `steps` is the learner's step count
// after this step (the periodic target update's clock); `priorities` [B] receives |td| + eps.
inline DqnStepOut DqnStep(const Net& net, const DqnConfig& cfg, const DqnMemory& m,
                          int32_t count, int32_t steps, const DqnBatch& b, float* priorities,
                          DqnScratch* s) {
  Forward(net, m.params, *b.obs, b.batch, &s->online);
  Forward(net, m.target, *b.next_obs, b.batch, &s->target_next);
  if (cfg.double_q) Forward(net, m.params, *b.next_obs, b.batch, &s->online_next);
  DqnStepOut out;
  out.loss = TdAndLoss(net, cfg, b, s);
  BackwardOut grads;
  grads.grads = s->grads;
  Backward(net, m.params, *b.obs, s->online, b.batch, &s->back, grads);
  const bool copy = cfg.period > 0 && steps % cfg.period == 0;  // else Polyak, or no update
  const double tau = cfg.tau;  // a Python float's rounding
  out.count = OptimizerStep(cfg.opt, float(tau), float(1.0 - tau), net.rows, s->grads, m.params,
                            m.mu, m.nu, cfg.period > 0 && !copy ? nullptr : m.target, count,
                            copy);
  float sum = 0.0f;
  DRLHET_LOOP(1, 1, 0, 1, 1);
  for (int row = 0; row < b.batch; ++row) {
#pragma HLS PIPELINE II = 1
    DRLHET_ITER();
    const float a = std::fabs(s->td[row]);
    priorities[row] = a + float(cfg.priority_eps);
    sum += a;
  }
  out.abs_td = sum / float(b.batch);
  return out;
}

}  // namespace learner
}  // namespace drlhet

#endif  // DRLHET_LEARNER_DQN_H_
