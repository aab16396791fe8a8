// The synthesized learner module: learner_top keeps the parameter memories, the target
// networks and Adam's moments on chip (static: they persist between commands) and runs one
// learner step per kStep command on a batch the host writes to DDR (docs/design.md section 3,
// "The FPGA learner module"). The step is dqn.h's DqnStep or ddpg.h's DdpgStep, the same code
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

constexpr int kWidths[kMaxHidden] = {LEARNER_H0, LEARNER_H1, LEARNER_H2};
constexpr int kHidden = (LEARNER_H0 > 0) + (LEARNER_H1 > 0) + (LEARNER_H2 > 0);
constexpr int kObs = LEARNER_OBS, kActions = LEARNER_ACTIONS;

// MakeNet would refuse the network at run time, unchecked: refuse it when the top is built.
constexpr bool Fits(int w, bool absent_ok) {
  return (absent_ok && w == 0) || (w >= 1 && w <= kMaxWidth);
}
static_assert((LEARNER_H1 == 0 || LEARNER_H0 > 0) && (LEARNER_H2 == 0 || LEARNER_H1 > 0),
              "LEARNER_H0..H2: the hidden widths first, the absent ones (0) last");
static_assert(Fits(kObs, false) && Fits(kActions, false) && Fits(LEARNER_H0, true) &&
                  Fits(LEARNER_H1, true) && Fits(LEARNER_H2, true) &&
                  (LEARNER_ALGO == 0 || Fits(kObs + kActions, false)),
              "a layer outside the module's widths (1..kMaxWidth, hls/learner/mlp.h)");
static_assert(LEARNER_ALGO == 0 || LEARNER_CRITICS == 1 || LEARNER_CRITICS == 2,
              "LEARNER_CRITICS must be 1 or 2");

// Floats in the parameter memory of a network of `in` inputs and heads `h0` (and `h1`).
constexpr int64_t NetSize(int in, int h0, int h1) {
  int64_t size = 0;
  int prev = in;
  for (int l = 0; l < kHidden; ++l) {
    size += int64_t(prev) * kWidths[l] + kWidths[l];
    prev = kWidths[l];
  }
  return size + int64_t(prev) * h0 + h0 + (h1 ? int64_t(prev) * h1 + h1 : 0);
}

#if LEARNER_ALGO == 1
constexpr int64_t kActor = NetSize(kObs, kActions, 0);
constexpr int64_t kCritic = LEARNER_CRITICS * NetSize(kObs + kActions, 1, 0);
constexpr int64_t kMemory = 4 * (kActor + kCritic);
#else
constexpr int64_t kParams =
    LEARNER_DUELING ? NetSize(kObs, 1, kActions) : NetSize(kObs, kActions, 0);
constexpr int64_t kMemory = 4 * kParams;
#endif

float memory[kMemory];  // on chip (URAM): the layout kLoad takes
int32_t counts[2];      // Adam's counts (DQN: counts[0])
int32_t steps;          // the learner's step count
double hp[kHyper];
float batch_in[kMaxBatch * (2 * kMaxWidth + 2 * kMaxWidth + 4)];

// Loads the batch of B rows (DQN: `action` one float per row; DDPG: M).
int64_t BatchWords(int b) {
  const int a = LEARNER_ALGO == 1 ? kActions : 1;
  return int64_t(b) * (2 * kObs + a + 3 + (LEARNER_ALGO == 1 ? kActions : 0));
}

#if LEARNER_ALGO == 1
void Step(int b, float* out) {
  static DdpgScratch scratch;
  DdpgNets nets;
  const int widths[kMaxHidden] = {LEARNER_H0, LEARNER_H1, LEARNER_H2};
  const int a_out[1] = {kActions}, c_out[1] = {1};
  MakeNet(kObs, widths, kHidden, a_out, 1, &nets.actor);
  MakeNet(kObs + kActions, widths, kHidden, c_out, 1, &nets.critic);
  DdpgConfig cfg;
  cfg.actor_opt.lr = hp[0], cfg.critic_opt.lr = hp[1];
  for (Adam* opt : {&cfg.actor_opt, &cfg.critic_opt}) {
    opt->b1 = hp[2], opt->b2 = hp[3], opt->eps = hp[4], opt->clip = false;
  }
  cfg.tau = hp[5], cfg.priority_eps = hp[6], cfg.low = hp[7], cfg.high = hp[8];
  cfg.td3 = hp[9] != 0.0, cfg.policy_delay = int32_t(hp[10]), cfg.critics = LEARNER_CRITICS;
  float* m = memory;
  const DdpgMemory mem{m,          m + kActor,          m + kActor + kCritic,
                       m + 2 * kActor + kCritic, m + 2 * (kActor + kCritic),
                       m + 3 * kActor + 2 * kCritic, m + 4 * kActor + 2 * kCritic,
                       m + 4 * kActor + 3 * kCritic};
  const float* x = batch_in;
  const DdpgBatch batch{x, x + b * kObs, x + b * (kObs + kActions), x + b * (kObs + kActions + 1),
                        x + b * (kObs + kActions + 2), x + b * (2 * kObs + kActions + 2),
                        x + b * (2 * kObs + kActions + 3), b};
  steps = int32_t(uint32_t(steps) + 1u);  // wraps past 2^31 - 1 as JAX's int32 does
  const DdpgStepOut o = DdpgStep(nets, cfg, mem, counts[0], counts[1], steps, batch, out, &scratch);
  counts[0] = o.actor_count, counts[1] = o.critic_count;
  out[b] = o.loss, out[b + 1] = o.actor_loss, out[b + 2] = o.abs_td;
}
#else
void Step(int b, float* out) {
  static DqnScratch scratch;
  static int32_t action[kMaxBatch];
  Net net;
  const int widths[kMaxHidden] = {LEARNER_H0, LEARNER_H1, LEARNER_H2};
  const int outs[2] = {LEARNER_DUELING ? 1 : kActions, kActions};
  MakeNet(kObs, widths, kHidden, outs, LEARNER_DUELING ? 2 : 1, &net);
  DqnConfig cfg;
  cfg.opt.lr = hp[0], cfg.opt.b1 = hp[1], cfg.opt.b2 = hp[2], cfg.opt.eps = hp[3];
  cfg.opt.max_norm = hp[4], cfg.huber_delta = hp[5], cfg.priority_eps = hp[6], cfg.tau = hp[7];
  cfg.period = int32_t(hp[8]), cfg.double_q = hp[9] != 0.0, cfg.opt.sgd = hp[10] != 0.0;
  cfg.dueling = LEARNER_DUELING != 0;
  const float* x = batch_in;
  bool ok = true;  // every action an integer in [0, actions): else the step does nothing
  for (int row = 0; row < b; ++row) {
    const float a = x[b * kObs + row];
    ok = ok && a >= 0.0f && a < float(kActions) && a == std::floor(a);  // NaN: false
    action[row] = ok ? int32_t(a) : 0;
  }
  if (!ok) return;  // an action past the Q-values would index past the step's arrays
  float* m = memory;
  steps = int32_t(uint32_t(steps) + 1u);  // wraps past 2^31 - 1 as JAX's int32 does
  const DqnStepOut o = DqnStep(net, cfg, m, m + kParams, m + 2 * kParams, m + 3 * kParams,
                               counts[0], steps, x, action, x + b * (kObs + 1),
                               x + b * (kObs + 2), x + b * (kObs + 3), x + b * (2 * kObs + 3), b,
                               out, &scratch);
  counts[0] = o.count;
  out[b] = o.loss, out[b + 1] = o.abs_td;
}
#endif

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
  if (cmd[0] == t::kLoad) {
    for (int k = 0; k < t::kHyper; ++k) t::hp[k] = hyper[k];
    for (int64_t k = 0; k < t::kMemory; ++k) t::memory[k] = in[k];
    t::counts[0] = int32_t(cmd[1]), t::counts[1] = int32_t(cmd[2]), t::steps = int32_t(cmd[3]);
  } else if (cmd[0] == t::kStep && cmd[1] >= 1 &&
             cmd[1] <= uint32_t(drlhet::learner::kMaxBatch)) {
    // a batch past the module's buffers does nothing, as an unknown command (the host never
    // sends one: drlhet.backends.learner_spec refuses it before the run)
    const int b = int(cmd[1]);
    for (int64_t k = 0; k < t::BatchWords(b); ++k) t::batch_in[k] = in[k];
    t::Step(b, out);
  } else if (cmd[0] == t::kStore) {
    for (int64_t k = 0; k < t::kMemory; ++k) out[k] = t::memory[k];
    cmd[1] = uint32_t(t::counts[0]), cmd[2] = uint32_t(t::counts[1]), cmd[3] = uint32_t(t::steps);
  } else if (cmd[0] == t::kInfo) {
    const uint32_t info[t::kInfoWords] = {
        t::kInfoMagic,   cmd[1] & 0xFFFFFFu, t::kProtocolVersion, LEARNER_ALGO,
        LEARNER_OBS,     LEARNER_ACTIONS,    LEARNER_H0,          LEARNER_H1,
        LEARNER_H2,      LEARNER_DUELING,    LEARNER_CRITICS,     uint32_t(drlhet::learner::kMaxBatch)};
    for (int k = 0; k < t::kInfoWords; ++k) out[k] = float(info[k]);
  }
}
