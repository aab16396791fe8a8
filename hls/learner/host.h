// The learner steps on the host's memories: the flat (flax) layout of the parameters and the
// batch's row-major arrays, packed into the module's memories (memory.h) before the step and
// unpacked after it, as learner_top.cpp's load and store do on the board. What the
// C-simulation's FFI handlers (kernels/fpga_sim) and the testbench call; not synthesized.
#ifndef DRLHET_LEARNER_HOST_H_
#define DRLHET_LEARNER_HOST_H_

#include <cstdint>

#include "ddpg.h"
#include "dqn.h"

namespace drlhet {
namespace learner {

// The module's memories of one DQN learner, with its scratch (a few MB: allocate it once).
struct DqnHost {
  Row params[kMaxRows], target[kMaxRows], mu[kMaxRows], nu[kMaxRows];
  Tile obs, next_obs;
  DqnScratch scratch;
};

// DqnStep on flat memories params, target, mu, nu [net.size] (in place) and a batch of obs,
// next_obs [batch][D], action, reward, discount, weights [batch].
inline DqnStepOut DqnStepFlat(const Net& net, const DqnConfig& cfg, float* params, float* target,
                              float* mu, float* nu, int32_t count, int32_t steps,
                              const float* obs, const int32_t* action, const float* reward,
                              const float* discount, const float* next_obs, const float* weights,
                              int batch, float* priorities, DqnHost* h) {
  float* flat[4] = {params, target, mu, nu};
  Row* rows[4] = {h->params, h->target, h->mu, h->nu};
  for (int k = 0; k < 4; ++k) PackParams(net, flat[k], rows[k]);
  const int d = net.layer[0].in;
  PackTile(obs, batch, d, h->obs);
  PackTile(next_obs, batch, d, h->next_obs);
  const DqnMemory m{h->params, h->target, h->mu, h->nu};
  const DqnBatch b{&h->obs, action, reward, discount, &h->next_obs, weights, batch};
  const DqnStepOut out = DqnStep(net, cfg, m, count, steps, b, priorities, &h->scratch);
  for (int k = 0; k < 4; ++k) UnpackParams(net, rows[k], flat[k]);
  return out;
}

// The module's memories of one DDPG / TD3 learner (two critics' room), with its scratch.
struct DdpgHost {
  Row actor[kMaxRows], target_actor[kMaxRows], actor_mu[kMaxRows], actor_nu[kMaxRows];
  Row critic[2 * kMaxRows], target_critic[2 * kMaxRows], critic_mu[2 * kMaxRows],
      critic_nu[2 * kMaxRows];
  Tile obs, action, next_obs, noise;
  DdpgScratch scratch;
};

// The flat memories of DdpgStepFlat: the actor's [actor.size] and the critics' [critics x
// critic.size] (one after another), as DdpgMemory orders them.
struct DdpgFlat {
  float* actor;
  float* critic;
  float* target_actor;
  float* target_critic;
  float* actor_mu;
  float* actor_nu;
  float* critic_mu;
  float* critic_nu;
};

// The flat batch of DdpgStepFlat: obs, next_obs [batch][D], action, noise [batch][M], reward,
// discount, weights [batch].
struct DdpgFlatBatch {
  const float* obs;
  const float* action;
  const float* reward;
  const float* discount;
  const float* next_obs;
  const float* weights;
  const float* noise;
  int batch;
};

// Packs (`pack`) or unpacks the flat memories `f` to or from the module's memories of `h`.
inline void DdpgConvert(const DdpgNets& n, int critics, const DdpgFlat& f, DdpgHost* h, bool pack) {
  auto one = [&](const Net& net, float* flat, Row* rows) {
    if (pack) {
      PackParams(net, flat, rows);
    } else {
      UnpackParams(net, rows, flat);
    }
  };
  one(n.actor, f.actor, h->actor);
  one(n.actor, f.target_actor, h->target_actor);
  one(n.actor, f.actor_mu, h->actor_mu);
  one(n.actor, f.actor_nu, h->actor_nu);
  for (int c = 0; c < critics; ++c) {
    const int64_t fc = c * n.critic.size, rc = c * n.critic.rows;
    one(n.critic, f.critic + fc, h->critic + rc);
    one(n.critic, f.target_critic + fc, h->target_critic + rc);
    one(n.critic, f.critic_mu + fc, h->critic_mu + rc);
    one(n.critic, f.critic_nu + fc, h->critic_nu + rc);
  }
}

// DdpgStep on the flat memories `f` (in place) and the flat batch `fb`.
inline DdpgStepOut DdpgStepFlat(const DdpgNets& n, const DdpgConfig& cfg, const DdpgFlat& f,
                                int32_t actor_count, int32_t critic_count, int32_t steps,
                                const DdpgFlatBatch& fb, float* priorities, DdpgHost* h) {
  DdpgConvert(n, cfg.critics, f, h, true);
  const int d = n.actor.layer[0].in, acts = n.critic.layer[0].in - d;
  PackTile(fb.obs, fb.batch, d, h->obs);
  PackTile(fb.next_obs, fb.batch, d, h->next_obs);
  PackTile(fb.action, fb.batch, acts, h->action);
  PackTile(fb.noise, fb.batch, acts, h->noise);
  const DdpgMemory m{h->actor,    h->critic,    h->target_actor, h->target_critic,
                     h->actor_mu, h->actor_nu, h->critic_mu,    h->critic_nu};
  const DdpgBatch b{&h->obs,      &h->action, fb.reward, fb.discount, &h->next_obs,
                    fb.weights, &h->noise,  fb.batch};
  const DdpgStepOut out =
      DdpgStep(n, cfg, m, actor_count, critic_count, steps, b, priorities, &h->scratch);
  DdpgConvert(n, cfg.critics, f, h, false);
  return out;
}

}  // namespace learner
}  // namespace drlhet

#endif  // DRLHET_LEARNER_HOST_H_
