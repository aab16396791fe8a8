// The synthesized learner module: learner_top keeps the parameter memories, the target
// networks and Adam's moments on chip (static: they persist between commands), as rows of
// kPOut banks (memory.h: packed from the host's flat layout on load, unpacked on store), and
// runs one learner step per kStep command on a batch the host writes to DDR, read into Tiles
// (docs/design.md section 3, "The FPGA learner module"). The step is dqn.h's DqnStep or ddpg.h's DdpgStep, the same code
// the C-simulation (kernels/fpga_sim) runs inside jit; the loops and pragmas are mlp.h's.
//
// Hyper-parameters (kLoad's `hyper`, doubles, so each float32 constant rounds as JAX rounds a
// Python float):
//   DQN   lr, b1, b2, eps, max_norm, huber_delta, priority_eps, tau, period, double_q, sgd
//   DDPG  actor_lr, critic_lr, b1, b2, eps, tau, priority_eps, low, high, td3, policy_delay
// Configuration and protocol: learner_top.h. Vitis HLS: run_hls.tcl; v++: u250.cfg. The g++
// testbench (learner_tb.cpp --top) runs this file as it is against the C-simulation's path.
#include "learner_top.h"

#include <cmath>
#include <initializer_list>

#include "ddpg.h"
#include "dqn.h"

namespace drlhet {
namespace learner {
namespace top {

double hp[kHyper];
int32_t counts[2];  // Adam's counts (DQN: counts[0])
int32_t steps;      // the learner's step count

#if LEARNER_ALGO == 1

// The module's state on chip (learner_top declares it, with its banks).
struct State {
  DdpgMemory mem;
  DdpgScratch* scratch;
  Tile* obs;
  Tile* action;
  Tile* next_obs;
  Tile* noise;
  float* rows;  // reward, discount, weights [kMaxBatch] each
};

constexpr DdpgNets MakeNets() {
  DdpgNets nets;
  const int a_out[1] = {kActions}, c_out[1] = {1};
  MakeNet(kObs, kWidths, kHidden, a_out, 1, &nets.actor);
  MakeNet(kObs + kActions, kWidths, kHidden, c_out, 1, &nets.critic);
  return nets;
}
constexpr DdpgNets kNets = MakeNets();  // made when the top is compiled
static_assert(kNets.actor.rows == kActorRows && kNets.critic.rows * LEARNER_CRITICS == kCriticRows,
              "the top's row counts are its networks'");

// kLoad (from `load`) or kStore (to `store`, when `load` is null): the memories between the
// flat layout and the state.
void Memories(const State& st, const float* load, float* store) {
  const DdpgNets& n = kNets;
  const int64_t pc = kCritic / LEARNER_CRITICS, rc = kCriticRows / LEARNER_CRITICS;
  const DdpgMemory& m = st.mem;
  Row* const actors[4] = {m.actor, m.target_actor, m.actor_mu, m.actor_nu};
  Row* const critics[4] = {m.critic, m.target_critic, m.critic_mu, m.critic_nu};
  // the flat order: actor, critics, target actor, target critics, the actor's mu, nu, the
  // critics' mu, nu
  const int64_t at[4] = {0, kActor + kCritic, 2 * (kActor + kCritic), 3 * kActor + 2 * kCritic};
  const int64_t ct[4] = {kActor, 2 * kActor + kCritic, 4 * kActor + 2 * kCritic,
                         4 * kActor + 3 * kCritic};
  for (int k = 0; k < 4; ++k) {
    if (load != nullptr) {
      PackParams(n.actor, load + at[k], actors[k]);
    } else {
      UnpackParams(n.actor, actors[k], store + at[k]);
    }
    for (int c = 0; c < LEARNER_CRITICS; ++c) {
      if (load != nullptr) {
        PackParams(n.critic, load + ct[k] + c * pc, critics[k] + c * rc);
      } else {
        UnpackParams(n.critic, critics[k] + c * rc, store + ct[k] + c * pc);
      }
    }
  }
}

// One step on the batch of B rows at `x` (kStep's layout, learner_top.h).
void Step(const State& st, const float* x, int b, float* out) {
  const DdpgNets& nets = kNets;
  DdpgConfig cfg;
  cfg.actor_opt.lr = hp[0], cfg.critic_opt.lr = hp[1];
  for (Adam* opt : {&cfg.actor_opt, &cfg.critic_opt}) {
    opt->b1 = hp[2], opt->b2 = hp[3], opt->eps = hp[4], opt->clip = false;
  }
  cfg.tau = hp[5], cfg.priority_eps = hp[6], cfg.low = hp[7], cfg.high = hp[8];
  cfg.td3 = hp[9] != 0.0, cfg.policy_delay = int32_t(hp[10]), cfg.critics = LEARNER_CRITICS;
  const int d = kObs, a = kActions;
  PackTile(x, b, d, *st.obs);
  PackTile(x + b * d, b, a, *st.action);
  for (int k = 0; k < 2 * b; ++k) st.rows[k] = x[b * (d + a) + k];  // reward, discount
  PackTile(x + b * (d + a + 2), b, d, *st.next_obs);
  for (int k = 0; k < b; ++k) st.rows[2 * kMaxBatch + k] = x[b * (2 * d + a + 2) + k];
  PackTile(x + b * (2 * d + a + 3), b, a, *st.noise);
  const DdpgBatch batch{st.obs,      st.action, st.rows,  st.rows + b, st.next_obs,
                        st.rows + 2 * kMaxBatch, st.noise, b};
  steps = int32_t(uint32_t(steps) + 1u);  // wraps past 2^31 - 1 as JAX's int32 does
  const DdpgStepOut o =
      DdpgStep(nets, cfg, st.mem, counts[0], counts[1], steps, batch, out, st.scratch);
  counts[0] = o.actor_count, counts[1] = o.critic_count;
  out[b] = o.loss, out[b + 1] = o.actor_loss, out[b + 2] = o.abs_td;
}
#else

// The module's state on chip (learner_top declares it, with its banks).
struct State {
  DqnMemory mem;
  DqnScratch* scratch;
  Tile* obs;
  Tile* next_obs;
  int32_t* action;
  float* rows;  // reward, discount, weights [kMaxBatch] each
};

constexpr Net MakeDqnNet() {
  Net net;
  const int outs[2] = {LEARNER_DUELING ? 1 : kActions, kActions};
  MakeNet(kObs, kWidths, kHidden, outs, LEARNER_DUELING ? 2 : 1, &net);
  return net;
}
constexpr Net kNet = MakeDqnNet();  // made when the top is compiled
static_assert(kNet.rows == kRows && kNet.size == kParams, "the top's sizes are its network's");

// kLoad (from `load`) or kStore (to `store`, when `load` is null): the memories (params,
// target, mu, nu) between the flat layout and the state.
void Memories(const State& st, const float* load, float* store) {
  const Net& net = kNet;
  Row* const rows[4] = {st.mem.params, st.mem.target, st.mem.mu, st.mem.nu};
  for (int k = 0; k < 4; ++k) {
    if (load != nullptr) {
      PackParams(net, load + k * kParams, rows[k]);
    } else {
      UnpackParams(net, rows[k], store + k * kParams);
    }
  }
}

// One step on the batch of B rows at `x` (kStep's layout, learner_top.h).
void Step(const State& st, const float* x, int b, float* out) {
  const Net& net = kNet;
  DqnConfig cfg;
  cfg.opt.lr = hp[0], cfg.opt.b1 = hp[1], cfg.opt.b2 = hp[2], cfg.opt.eps = hp[3];
  cfg.opt.max_norm = hp[4], cfg.huber_delta = hp[5], cfg.priority_eps = hp[6], cfg.tau = hp[7];
  cfg.period = int32_t(hp[8]), cfg.double_q = hp[9] != 0.0, cfg.opt.sgd = hp[10] != 0.0;
  cfg.dueling = LEARNER_DUELING != 0;
  bool ok = true;  // every action an integer in [0, actions): else the step does nothing
  for (int row = 0; row < b; ++row) {
    const float a = x[b * kObs + row];
    ok = ok && a >= 0.0f && a < float(kActions) && a == std::floor(a);  // NaN: false
    st.action[row] = ok ? int32_t(a) : 0;
  }
  if (!ok) return;  // an action past the Q-values would index past the step's arrays
  PackTile(x, b, kObs, *st.obs);
  for (int k = 0; k < 2 * b; ++k) st.rows[k] = x[b * (kObs + 1) + k];  // reward, discount
  PackTile(x + b * (kObs + 3), b, kObs, *st.next_obs);
  for (int k = 0; k < b; ++k) st.rows[2 * kMaxBatch + k] = x[b * (2 * kObs + 3) + k];
  const DqnBatch batch{st.obs,      st.action, st.rows, st.rows + b, st.next_obs,
                       st.rows + 2 * kMaxBatch, b};
  steps = int32_t(uint32_t(steps) + 1u);  // wraps past 2^31 - 1 as JAX's int32 does
  const DqnStepOut o = DqnStep(net, cfg, st.mem, counts[0], steps, batch, out, st.scratch);
  counts[0] = o.count;
  out[b] = o.loss, out[b + 1] = o.abs_td;
}
#endif

// The on-chip state, declared with its banks (memory.h): each parameter memory kPOut banks
// along its rows, each Tile kPBatch x kPOut banks, the scratch's Tiles alike.
State OnChip() {
#if LEARNER_ALGO == 1
  static Row actor[kActorRows], target_actor[kActorRows], actor_mu[kActorRows],
      actor_nu[kActorRows];
  static Row critic[kCriticRows], target_critic[kCriticRows], critic_mu[kCriticRows],
      critic_nu[kCriticRows];
  static DdpgScratch scratch;
  static Tile obs, action, next_obs, noise;
  static float rows[3 * kMaxBatch];
  DRLHET_ROW_BANKS(actor)
  DRLHET_ROW_BANKS(target_actor)
  DRLHET_ROW_BANKS(actor_mu)
  DRLHET_ROW_BANKS(actor_nu)
  DRLHET_ROW_BANKS(critic)
  DRLHET_ROW_BANKS(target_critic)
  DRLHET_ROW_BANKS(critic_mu)
  DRLHET_ROW_BANKS(critic_nu)
  DRLHET_ROW_BANKS(scratch.grads)
  DRLHET_TILE_BANKS(obs)
  DRLHET_TILE_BANKS(action)
  DRLHET_TILE_BANKS(next_obs)
  DRLHET_TILE_BANKS(noise)
  DRLHET_TILE_BANKS(scratch.x)
  DRLHET_TILE_BANKS(scratch.act)
  DRLHET_TILE_BANKS(scratch.da)
  DRLHET_TILES_BANKS(scratch.actor.hidden)
  DRLHET_TILES_BANKS(scratch.actor.head)
  DRLHET_TILES_BANKS(scratch.critic0.hidden)
  DRLHET_TILES_BANKS(scratch.critic0.head)
  DRLHET_TILES_BANKS(scratch.critic1.hidden)
  DRLHET_TILES_BANKS(scratch.critic1.head)
  DRLHET_TILES_BANKS(scratch.probe.hidden)
  DRLHET_TILES_BANKS(scratch.probe.head)
  DRLHET_TILES_BANKS(scratch.back.dq)
  DRLHET_TILES_BANKS(scratch.back.dh)
  DRLHET_VECTOR_BANKS(rows, 1)  // the weights: 16 rows an iteration in the TD seed's pass
  DRLHET_VECTOR_BANKS(scratch.q_next, 1)
  DRLHET_VECTOR_BANKS(scratch.td, 2)
  const DdpgMemory mem{actor,    critic,   target_actor, target_critic,
                       actor_mu, actor_nu, critic_mu,    critic_nu};
  return State{mem, &scratch, &obs, &action, &next_obs, &noise, rows};
#else
  static Row params[kRows], target[kRows], mu[kRows], nu[kRows];
  static DqnScratch scratch;
  static Tile obs, next_obs;
  static int32_t action[kMaxBatch];
  static float rows[3 * kMaxBatch];
  DRLHET_ROW_BANKS(params)
  DRLHET_ROW_BANKS(target)
  DRLHET_ROW_BANKS(mu)
  DRLHET_ROW_BANKS(nu)
  DRLHET_ROW_BANKS(scratch.grads)
  DRLHET_TILE_BANKS(obs)
  DRLHET_TILE_BANKS(next_obs)
  DRLHET_TILES_BANKS(scratch.online.hidden)
  DRLHET_TILES_BANKS(scratch.online.head)
  DRLHET_TILES_BANKS(scratch.target_next.hidden)
  DRLHET_TILES_BANKS(scratch.target_next.head)
  DRLHET_TILES_BANKS(scratch.online_next.hidden)
  DRLHET_TILES_BANKS(scratch.online_next.head)
  DRLHET_TILES_BANKS(scratch.back.dq)
  DRLHET_TILES_BANKS(scratch.back.dh)
  return State{DqnMemory{params, target, mu, nu}, &scratch, &obs, &next_obs, action, rows};
#endif
}

}  // namespace top
}  // namespace learner
}  // namespace drlhet

extern "C" void learner_top(uint32_t* cmd, const double* hyper, const float* in, float* out) {
#pragma HLS INTERFACE m_axi port = cmd offset = slave bundle = gmem0 depth = 4
#pragma HLS INTERFACE m_axi port = hyper offset = slave bundle = gmem0 depth = 16
#pragma HLS INTERFACE m_axi port = in offset = slave bundle = gmem0
#pragma HLS INTERFACE m_axi port = out offset = slave bundle = gmem1
#pragma HLS INTERFACE s_axilite port = return
  namespace t = drlhet::learner::top;
  const t::State st = t::OnChip();
  if (cmd[0] == t::kLoad) {
    for (int k = 0; k < t::kHyper; ++k) t::hp[k] = hyper[k];
    t::Memories(st, in, nullptr);
    t::counts[0] = int32_t(cmd[1]), t::counts[1] = int32_t(cmd[2]), t::steps = int32_t(cmd[3]);
  } else if (cmd[0] == t::kStep && cmd[1] >= 1 &&
             cmd[1] <= uint32_t(drlhet::learner::kMaxBatch)) {
    // a batch past the module's buffers does nothing, as an unknown command (the host never
    // sends one: drlhet.backends.learner_spec refuses it before the run)
    t::Step(st, in, int(cmd[1]), out);
  } else if (cmd[0] == t::kStore) {
    t::Memories(st, nullptr, out);
    cmd[1] = uint32_t(t::counts[0]), cmd[2] = uint32_t(t::counts[1]), cmd[3] = uint32_t(t::steps);
  } else if (cmd[0] == t::kInfo) {
    const uint32_t info[t::kInfoWords] = {
        t::kInfoMagic,   cmd[1] & 0xFFFFFFu, t::kProtocolVersion, LEARNER_ALGO,
        LEARNER_OBS,     LEARNER_ACTIONS,    LEARNER_H0,          LEARNER_H1,
        LEARNER_H2,      LEARNER_DUELING,    LEARNER_CRITICS,     uint32_t(drlhet::learner::kMaxBatch)};
    for (int k = 0; k < t::kInfoWords; ++k) out[k] = float(info[k]);
  }
}
