// The learner module's DDPG / TD3 step on one mini-batch (docs/design.md section 3, "The FPGA
// learner module"), as drlhet.agents.ddpg computes it with flax and optax:
//   critic step  a' = actor_target(s') (TD3: clip(a' + noise, low, high), the noise drawn by
//                JAX and passed in), q' = min over the target critics of critic_target(s', a'),
//                td_i = (r + discount q') - critic_i(s, a) for each critic i (one, or TD3's
//                two), loss = mean over i and the batch of w td_i^2, its gradient through each
//                critic, Adam (no clip) on each critic with one shared count;
//   actor step   a = actor(s), actor loss = -mean critic_0'(s, a) with the critic just
//                updated; its gradient through critic_0' into a (the critic's input gradient,
//                action columns only), through the actor's tanh scaling and the actor, Adam;
//   targets      Polyak, target = tau p + (1 - tau) target, for the actor and every critic.
// TD3 runs the actor step and the targets' update every `policy_delay` steps only (otherwise
// the actor, its Adam state and the targets are left as they are, as drlhet.agents.ddpg's
// jnp.where does); the actor loss is computed every step, as a metric.
//
// Parameter memories (memory.h's rows): the actor's (one head of `actions` outputs) and each
// critic's (input obs_dim + actions: the observation's columns, then the action's; one head of
// 1 output); the critics one after another.
#ifndef DRLHET_LEARNER_DDPG_H_
#define DRLHET_LEARNER_DDPG_H_

#include <cmath>
#include <cstdint>

#include "mlp.h"
#include "net.h"

namespace drlhet {
namespace learner {

struct DdpgConfig {
  int critics = 1;           // 2: TD3's twin critics
  bool td3 = false;          // target smoothing (noise input), twin min, delayed actor
  int32_t policy_delay = 2;  // TD3: the actor and targets step when steps % delay == 0
  double tau = 0.005;
  double priority_eps = 1e-6;
  double low = -1.0, high = 1.0;  // the action's bounds (Python floats: their range rounds once)
  Adam actor_opt, critic_opt;     // clip = false: optax.adam alone
};

// The actor and critic networks of one agent.
struct DdpgNets {
  Net actor;   // obs_dim -> hidden -> actions
  Net critic;  // obs_dim + actions -> hidden -> 1
};

// The learner state's parameter memories (memory.h; `critic*`: the critics one after another,
// critics x critic.rows rows).
struct DdpgMemory {
  Row* actor;
  Row* critic;
  Row* target_actor;
  Row* target_critic;
  Row* actor_mu;
  Row* actor_nu;
  Row* critic_mu;
  Row* critic_nu;
};

// One mini-batch on chip: obs, next_obs [B][D], action, noise [B][M] (TD3's clipped target
// noise; unused otherwise) in Tiles; reward, discount, weights [B].
struct DdpgBatch {
  const Tile* obs;
  const Tile* action;
  const float* reward;
  const float* discount;
  const Tile* next_obs;
  const float* weights;
  const Tile* noise;
  int batch;
};

// On-chip scratch of one step (the C-simulation allocates it once per thread).
struct DdpgScratch {
  Tile x;                          // a critic's input [B][D + M]
  Activations actor;               // actor_target(s'), then actor(s)
  Activations critic0, critic1;    // each critic on (s, a), kept for its backward pass
  Activations probe;               // a target critic on (s', a'); critic_0' on (s, actor(s))
  float q_next[kMaxBatch];
  float td[2][kMaxBatch];
  BackwardBuffers back;
  Tile act;              // actor(s) [B][M]
  Tile da;               // the actor loss's gradient at the action [B][M]
  Row grads[kMaxRows];   // the gradient, a parameter memory

  // Critic c's activations (two members, not an array of structs: each is banked on its own).
  Activations& Critic(int c) { return c == 0 ? critic0 : critic1; }
};

struct DdpgStepOut {
  float loss;        // the critics' loss
  float actor_loss;  // -mean critic_0'(s, actor(s))
  float abs_td;      // mean |td_0|
  int32_t actor_count;
  int32_t critic_count;
};

// The actor's output: low + ((tanh(z) + 1) 0.5) (high - low), as drlhet.agents.networks.Actor.
inline float ActorOut(const DdpgConfig& cfg, float z) {
  const float low = float(cfg.low), range = float(cfg.high - cfg.low);
  return low + ((std::tanh(z) + 1.0f) * 0.5f) * range;
}

// The critic's input rows [obs | action] into x.
inline void CriticInput(int d, int m, const Tile& obs, const Tile& act, int batch, Tile& x) {
  Lanes(batch, d + m, [&](int64_t row, int64_t k) {
    x[row][k] = k < d ? obs[row][k] : act[row][k - d];
  });
}

// q' = min over the target critics on (s', a'), a' from the target actor (+ TD3's noise).
inline void CriticTargets(const DdpgNets& n, const DdpgConfig& cfg, const DdpgMemory& m,
                          const DdpgBatch& b, DdpgScratch* s) {
  const int d = n.actor.layer[0].in, acts = n.critic.layer[0].in - d;
  Forward(n.actor, m.target_actor, *b.next_obs, b.batch, &s->actor);
  Tile& a_next = s->actor.head[0];  // becomes a' in place
  Lanes(b.batch, acts, [&](int64_t row, int64_t k) {
    float& a = a_next[row][k];
    a = ActorOut(cfg, a);
    if (!cfg.td3) return;
    a = a + (*b.noise)[row][k];
    a = std::fmin(std::fmax(a, float(cfg.low)), float(cfg.high));
  });
  CriticInput(d, acts, *b.next_obs, a_next, b.batch, s->x);
  for (int c = 0; c < cfg.critics; ++c) {
    Forward(n.critic, m.target_critic + c * n.critic.rows, s->x, b.batch, &s->probe);
    Lanes(b.batch, 1, [&](int64_t row, int64_t) {
      const float q = s->probe.head[0][row][0];
      s->q_next[row] = c == 0 ? q : std::fmin(s->q_next[row], q);
    });
  }
}

// The critics' step: forward on (s, a), TD errors, loss, backward, Adam (and, when `polyak`,
// the target critics' update). Returns the loss; the TD errors stay in s->td.
inline float CriticStep(const DdpgNets& n, const DdpgConfig& cfg, const DdpgMemory& m,
                        const DdpgBatch& b, bool polyak, int32_t* count, DdpgScratch* s) {
  const int d = n.actor.layer[0].in, acts = n.critic.layer[0].in - d;
  const int64_t pc = n.critic.rows;
  CriticInput(d, acts, *b.obs, *b.action, b.batch, s->x);
  for (int c = 0; c < cfg.critics; ++c) {
    Forward(n.critic, m.critic + c * pc, s->x, b.batch, &s->Critic(c));
  }
  const float inv = 1.0f / float(cfg.critics * b.batch);
  float loss = 0.0f;
  DRLHET_LOOP(1, 1, 2, 3, 0);
  for (int k = 0, c = 0, row = 0; k < cfg.critics * b.batch; ++k) {  // the critics' rows in turn
#pragma HLS PIPELINE II = 1
    DRLHET_ITER();
    const float y = b.reward[row] + b.discount[row] * s->q_next[row];
    const float t = y - s->Critic(c).head[0][row][0];
    s->td[c][row] = t;
    loss += b.weights[row] * (t * t);
    if (++row == b.batch) row = 0, ++c;
  }
  const float t_new = float(cfg.tau), t_old = 1.0f - t_new;  // tau as a float32 array
  int32_t next = *count;
  BackwardOut out;
  out.grads = s->grads;
  for (int c = 0; c < cfg.critics; ++c) {  // d loss / d q_c = -(w / (nB)) 2 td_c
    Lanes(b.batch, 1, [&](int64_t row, int64_t) {
      s->back.dq[0][row][0] = -((inv * b.weights[row]) * (2.0f * s->td[c][row]));
    });
    Backward(n.critic, m.critic + c * pc, s->x, s->Critic(c), b.batch, &s->back, out);
    next = OptimizerStep(cfg.critic_opt, t_new, t_old, pc, s->grads, m.critic + c * pc,
                         m.critic_mu + c * pc, m.critic_nu + c * pc,
                         polyak ? m.target_critic + c * pc : nullptr, *count);
  }
  *count = next;
  return loss * inv;
}

// The actor loss -mean critic_0(s, actor(s)) with the critic just updated; when `step`, its
// gradient and the actor's Adam step (and the target actor's update). Returns the loss.
inline float ActorStep(const DdpgNets& n, const DdpgConfig& cfg, const DdpgMemory& m,
                       const DdpgBatch& b, bool step, int32_t* count, DdpgScratch* s) {
  const int d = n.actor.layer[0].in, acts = n.critic.layer[0].in - d;
  Forward(n.actor, m.actor, *b.obs, b.batch, &s->actor);
  Lanes(b.batch, acts, [&](int64_t row, int64_t k) {
    s->act[row][k] = ActorOut(cfg, s->actor.head[0][row][k]);
  });
  CriticInput(d, acts, *b.obs, s->act, b.batch, s->x);
  Forward(n.critic, m.critic, s->x, b.batch, &s->probe);
  float sum = 0.0f;
  DRLHET_LOOP(1, 1, 0, 1, 1);
  for (int row = 0; row < b.batch; ++row) {
#pragma HLS PIPELINE II = 1
    DRLHET_ITER();
    sum += s->probe.head[0][row][0];
  }
  const float loss = -(sum / float(b.batch));
  if (!step) return loss;
  const float dq = -1.0f / float(b.batch);
  Lanes(b.batch, 1, [&](int64_t row, int64_t) { s->back.dq[0][row][0] = dq; });
  BackwardOut to_action;  // the critic's input gradient at the action's columns only
  to_action.dx = &s->da;
  to_action.dx_from = d;
  Backward(n.critic, m.critic, s->x, s->probe, b.batch, &s->back, to_action);
  const float range = float(cfg.high - cfg.low);
  Lanes(b.batch, acts, [&](int64_t row, int64_t k) {  // the scaling and tanh (JAX's tanh JVP)
    const float y = std::tanh(s->actor.head[0][row][k]);
    const float g = (s->da[row][k] * range) * 0.5f;
    s->back.dq[0][row][k] = (g + g * y) * (1.0f - y);
  });
  BackwardOut grads;
  grads.grads = s->grads;
  Backward(n.actor, m.actor, *b.obs, s->actor, b.batch, &s->back, grads);
  const float t_new = float(cfg.tau), t_old = 1.0f - t_new;
  *count = OptimizerStep(cfg.actor_opt, t_new, t_old, n.actor.rows, s->grads, m.actor,
                         m.actor_mu, m.actor_nu, m.target_actor, *count);
  return loss;
}

// One DDPG / TD3 learner step, in place on the memories. `steps` is the learner's step count
// after this step (TD3's delay clock); `priorities` [B] receives max_c |td_c| + eps.
inline DdpgStepOut DdpgStep(const DdpgNets& n, const DdpgConfig& cfg, const DdpgMemory& m,
                            int32_t actor_count, int32_t critic_count, int32_t steps,
                            const DdpgBatch& b, float* priorities, DdpgScratch* s) {
  const bool do_actor = !cfg.td3 || steps % cfg.policy_delay == 0;
  DdpgStepOut out;
  out.actor_count = actor_count;
  out.critic_count = critic_count;
  CriticTargets(n, cfg, m, b, s);
  out.loss = CriticStep(n, cfg, m, b, do_actor, &out.critic_count, s);
  out.actor_loss = ActorStep(n, cfg, m, b, do_actor, &out.actor_count, s);
  float sum = 0.0f;
  DRLHET_LOOP(1, 1, 0, 1, 1);
  for (int row = 0; row < b.batch; ++row) {
#pragma HLS PIPELINE II = 1
    DRLHET_ITER();
    float a = std::fabs(s->td[0][row]);  // the larger of the critics' |td| (TD3's twins)
    for (int c = 1; c < cfg.critics; ++c) a = std::fmax(a, std::fabs(s->td[c][row]));
    priorities[row] = a + float(cfg.priority_eps);
    sum += a;
  }
  out.abs_td = sum / float(b.batch);
  return out;
}

}  // namespace learner
}  // namespace drlhet

#endif  // DRLHET_LEARNER_DDPG_H_
