// The learner module's g++ testbench: the stepped cycle count (cycles.h) of the loops one DQN step
// or one DDPG / TD3 step of a network given on the command line runs (it runs the step, its
// loops recording themselves), the count the closed-form cycle model
// (drlhet/dse/devices/learner_cycles.py) is checked against (tests/hls/test_learner_testbench.py):
//   g++ -std=c++17 -O2 -DLEARNER_SIZED_TILES=0 -I hls/learner hls/learner/learner_tb.cpp -o learner_tb
//   ./learner_tb --cycles OBS_DIM ACTIONS DUELING DOUBLE BATCH [HIDDEN ...]
//   ./learner_tb --cycles-ddpg OBS_DIM ACTIONS CRITICS ACTOR BATCH [HIDDEN ...]
// print "CYCLES <n> PARAMS <floats in the parameter memory (DDPG: actor + one critic)> LOOPS <n>".
// The synthesized top (learner_top.cpp, configured by its LEARNER_* macros; Vitis compiles it
// apart, LEARNER_TB_INCLUDES_TOP 0, its sizes then from learner_top.h) against the
// C-simulation's path (DqnStep / DdpgStep on the host's memories) over STEPS random batches,
// bit for bit:
//   ./learner_tb --top STEPS SEED      prints "TOP OK <memory floats>" or "FAIL <what>".
#define DRLHET_LEARNER_TRACE 1  // the loops' records (mlp.h's DRLHET_LOOP), for --cycles

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "learner_top.h"  // first: it sizes the tiles (LEARNER_SIZED_TILES)
#include "cycles.h"
#include "host.h"
#ifndef LEARNER_TB_INCLUDES_TOP
#define LEARNER_TB_INCLUDES_TOP 1  // g++ alone: the design in this translation unit
#endif
#if LEARNER_TB_INCLUDES_TOP
#include "learner_top.cpp"
#endif

namespace ln = drlhet::learner;
namespace top = drlhet::learner::top;

namespace {
std::vector<ln::LoopRecord>* g_loops = nullptr;  // where the loops are recorded (null: nowhere)
}  // namespace

void drlhet::learner::TraceLoop(int64_t accumulators, const LoopDepth& depth) {
  if (g_loops != nullptr) g_loops->push_back({0, accumulators, depth});
}

void drlhet::learner::TraceIteration() {
  if (g_loops != nullptr) ++g_loops->back().trips;
}

namespace {

// The loops of one DQN step of `net` on `batch` samples (zeros; the trip counts do not depend
// on the values), as the step runs them.
std::vector<ln::LoopRecord> DqnLoops(const ln::Net& net, bool double_q, int batch) {
  static ln::DqnHost s;
  ln::DqnConfig cfg;
  cfg.double_q = double_q;
  const size_t p = size_t(net.size), b = size_t(batch), d = size_t(net.layer[0].in);
  std::vector<float> mem(4 * p), obs(b * d), next(b * d), rows(3 * b), out(b);
  std::vector<int32_t> action(b, 0);
  std::vector<float> weights(b, 1.0f);
  std::vector<ln::LoopRecord> loops;
  g_loops = &loops;
  float* m = mem.data();
  ln::DqnStepFlat(net, cfg, m, m + p, m + 2 * p, m + 3 * p, 0, 1, obs.data(), action.data(),
                  rows.data(), rows.data() + b, next.data(), weights.data(), batch, out.data(),
                  &s);
  g_loops = nullptr;
  return loops;
}

// The loops of one DDPG / TD3 step (`critics` critics; `actor`: one that trains the actor).
std::vector<ln::LoopRecord> DdpgLoops(const ln::Net& actor_net, const ln::Net& critic,
                                      int critics, bool actor, int batch) {
  static ln::DdpgHost s;
  ln::DdpgConfig cfg;
  cfg.critics = critics, cfg.td3 = true, cfg.policy_delay = 2;  // steps 2: the actor's turn
  cfg.actor_opt.clip = cfg.critic_opt.clip = false;             // optax.adam alone, as DDPG's
  const ln::DdpgNets nets{actor_net, critic};
  const size_t pa = size_t(actor_net.size), pc = size_t(critics) * size_t(critic.size);
  const size_t b = size_t(batch), d = size_t(actor_net.layer[0].in);
  const size_t acts = size_t(critic.layer[0].in) - d;
  std::vector<float> mem(4 * (pa + pc)), obs(b * d), action(b * acts), rows(2 * b), out(b);
  std::vector<float> weights(b, 1.0f);
  float* m = mem.data();
  const ln::DdpgFlat dm{m, m + pa, m + pa + pc, m + 2 * pa + pc, m + 2 * (pa + pc),
                        m + 3 * pa + 2 * pc, m + 4 * pa + 2 * pc, m + 4 * pa + 3 * pc};
  const ln::DdpgFlatBatch in{obs.data(), action.data(), rows.data(), rows.data() + b,
                             obs.data(), weights.data(), action.data(), batch};
  std::vector<ln::LoopRecord> loops;
  g_loops = &loops;
  ln::DdpgStepFlat(nets, cfg, dm, 0, 0, actor ? 2 : 1, in, out.data(), &s);
  g_loops = nullptr;
  return loops;
}

// The C-simulation's path: one step on the host's copy of the memories. The layout (offsets,
// batch columns, hyper-parameters) is written here again on purpose, from learner_top.h's
// protocol, so that a mistake in the top's own offsets shows as a difference.
void ReferenceStep(const double* hp, std::vector<float>* mem, int32_t* counts, int32_t steps,
                   const float* x, int b, float* out) {
#if LEARNER_ALGO == 1
  static ln::DdpgHost s;
  ln::DdpgNets nets;
  const int a_out[1] = {top::kActions}, c_out[1] = {1};
  ln::MakeNet(top::kObs, top::kWidths, top::kHidden, a_out, 1, &nets.actor);
  ln::MakeNet(top::kObs + top::kActions, top::kWidths, top::kHidden, c_out, 1, &nets.critic);
  ln::DdpgConfig cfg;
  cfg.actor_opt.lr = hp[0], cfg.critic_opt.lr = hp[1];
  for (ln::Adam* opt : {&cfg.actor_opt, &cfg.critic_opt}) {
    opt->b1 = hp[2], opt->b2 = hp[3], opt->eps = hp[4], opt->clip = false;
  }
  cfg.tau = hp[5], cfg.priority_eps = hp[6], cfg.low = hp[7], cfg.high = hp[8];
  cfg.td3 = hp[9] != 0.0, cfg.policy_delay = int32_t(hp[10]), cfg.critics = LEARNER_CRITICS;
  const int64_t pa = top::kActor, pc = top::kCritic;
  float* m = mem->data();
  const ln::DdpgFlat dm{m, m + pa, m + pa + pc, m + 2 * pa + pc, m + 2 * (pa + pc),
                        m + 3 * pa + 2 * pc, m + 4 * pa + 2 * pc, m + 4 * pa + 3 * pc};
  const int d = top::kObs, a = top::kActions;
  const ln::DdpgFlatBatch batch{x, x + b * d, x + b * (d + a), x + b * (d + a + 1),
                            x + b * (d + a + 2), x + b * (2 * d + a + 2), x + b * (2 * d + a + 3),
                            b};
  const ln::DdpgStepOut o =
      ln::DdpgStepFlat(nets, cfg, dm, counts[0], counts[1], steps, batch, out, &s);
  counts[0] = o.actor_count, counts[1] = o.critic_count;
  out[b] = o.loss, out[b + 1] = o.actor_loss, out[b + 2] = o.abs_td;
#else
  static ln::DqnHost s;
  ln::Net net;
  const int outs[2] = {LEARNER_DUELING ? 1 : top::kActions, top::kActions};
  ln::MakeNet(top::kObs, top::kWidths, top::kHidden, outs, LEARNER_DUELING ? 2 : 1, &net);
  ln::DqnConfig cfg;
  cfg.opt.lr = hp[0], cfg.opt.b1 = hp[1], cfg.opt.b2 = hp[2], cfg.opt.eps = hp[3];
  cfg.opt.max_norm = hp[4], cfg.huber_delta = hp[5], cfg.priority_eps = hp[6], cfg.tau = hp[7];
  cfg.period = int32_t(hp[8]), cfg.double_q = hp[9] != 0.0, cfg.opt.sgd = hp[10] != 0.0;
  std::vector<int32_t> action(static_cast<size_t>(b), 0);
  const int d = top::kObs;
  for (int r = 0; r < b; ++r) action[size_t(r)] = int32_t(x[b * d + r]);
  const int64_t p = top::kParams;
  float* m = mem->data();
  const ln::DqnStepOut o =
      ln::DqnStepFlat(net, cfg, m, m + p, m + 2 * p, m + 3 * p, counts[0], steps, x,
                      action.data(), x + b * (d + 1), x + b * (d + 2), x + b * (d + 3),
                      x + b * (2 * d + 3), b, out, &s);
  counts[0] = o.count;
  out[b] = o.loss, out[b + 1] = o.abs_td;
#endif
}

// Random memories (moments >= 0 where Adam's second moment is) and batches; both paths.
int TopSelfTest(int n_steps, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const bool ddpg = LEARNER_ALGO == 1;
  // learner_top.cpp's order: DQN lr, b1, b2, eps, max_norm, huber_delta, priority_eps, tau,
  // period, double_q, sgd; DDPG actor_lr, critic_lr, b1, b2, eps, tau, priority_eps, low, high,
  // td3, policy_delay.
  const double dqn_hp[top::kHyper] = {1e-3, 0.9, 0.999, 1e-8, 10.0, 1.0, 1e-6, 0.01, 0, 1, 0};
  const double ddpg_hp[top::kHyper] = {1e-3, 1e-3, 0.9, 0.999, 1e-8, 0.005, 1e-6, -2, 2, 1, 2};
  const double* hp = ddpg ? ddpg_hp : dqn_hp;
  std::vector<float> mem(size_t(top::kMemory));
  for (size_t k = 0; k < mem.size(); ++k) {  // the second half: Adam's moments
    mem[k] = k >= mem.size() / 2 ? 1e-3f * unit(gen) : normal(gen);
  }
  int32_t counts[2] = {3, 3}, steps = 3;
  uint32_t cmd[4] = {top::kLoad, uint32_t(counts[0]), uint32_t(counts[1]), uint32_t(steps)};
  learner_top(cmd, hp, mem.data(), nullptr);
  const int b = 32;
  const int64_t words = int64_t(b) * (2 * top::kObs + 3 + (ddpg ? 2 * top::kActions : 1));
  std::vector<float> x(static_cast<size_t>(words)), got(size_t(b + 3)), want(size_t(b + 3));
  for (int step = 0; step < n_steps; ++step) {
    for (size_t k = 0; k < x.size(); ++k) x[k] = normal(gen);
    const int d = top::kObs;
    for (int r = 0; r < b; ++r) {
      if (!ddpg) x[size_t(b * d + r)] = float(gen() % top::kActions);  // the action
      x[size_t(b * (2 * d + (ddpg ? top::kActions : 1) + 2) + r)] = 0.5f + unit(gen);  // weight
    }
    cmd[0] = top::kStep, cmd[1] = uint32_t(b);
    learner_top(cmd, hp, x.data(), got.data());
    ReferenceStep(hp, &mem, counts, ++steps, x.data(), b, want.data());
    if (std::memcmp(got.data(), want.data(), sizeof(float) * got.size()) != 0) {
      std::printf("FAIL priorities or metrics differ at step %d\n", step);
      return 1;
    }
  }
  std::vector<float> stored(mem.size());
  cmd[0] = top::kStore;
  learner_top(cmd, hp, nullptr, stored.data());
  if (std::memcmp(stored.data(), mem.data(), sizeof(float) * mem.size()) != 0 ||
      int32_t(cmd[1]) != counts[0] || int32_t(cmd[3]) != steps) {
    std::printf("FAIL the stored memories or counts differ\n");
    return 1;
  }
  std::printf("TOP OK %lld\n", static_cast<long long>(mem.size()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--top") == 0) {
    return TopSelfTest(std::atoi(argv[2]), unsigned(std::atoi(argv[3])));
  }
  const bool dqn = argc > 1 && std::strcmp(argv[1], "--cycles") == 0;
  const bool ddpg = argc > 1 && std::strcmp(argv[1], "--cycles-ddpg") == 0;
  if (argc < 7 || !(dqn || ddpg)) {
    std::fprintf(stderr,
                 "usage: %s --cycles OBS_DIM ACTIONS DUELING DOUBLE BATCH [HIDDEN ...]\n"
                 "       %s --cycles-ddpg OBS_DIM ACTIONS CRITICS ACTOR BATCH [HIDDEN ...]\n",
                 argv[0], argv[0]);
    return 2;
  }
  const int obs_dim = std::atoi(argv[2]), actions = std::atoi(argv[3]);
  const int flag_a = std::atoi(argv[4]), flag_b = std::atoi(argv[5]);
  const int batch = std::atoi(argv[6]);
  int widths[ln::kMaxHidden] = {0, 0, 0};
  const int hidden = argc - 7;
  if (hidden > ln::kMaxHidden) {
    std::fprintf(stderr, "at most %d hidden layers\n", ln::kMaxHidden);
    return 2;
  }
  for (int l = 0; l < hidden; ++l) widths[l] = std::atoi(argv[7 + l]);
  ln::Net net, critic;
  bool ok = batch >= 1 && batch <= ln::kMaxBatch;
  if (dqn) {  // flag_a: dueling, flag_b: double Q
    const int outs[2] = {flag_a ? 1 : actions, actions};
    ok = ok && ln::MakeNet(obs_dim, widths, hidden, outs, flag_a ? 2 : 1, &net);
  } else {  // flag_a: critics, flag_b: a step that trains the actor
    const int a_out[1] = {actions}, c_out[1] = {1};
    ok = ok && flag_a >= 1 && flag_a <= 2 && ln::MakeNet(obs_dim, widths, hidden, a_out, 1, &net) &&
         ln::MakeNet(obs_dim + actions, widths, hidden, c_out, 1, &critic);
  }
  if (!ok) {
    std::fprintf(stderr, "a network or batch outside the module's sizes\n");
    return 2;
  }
  const std::vector<ln::LoopRecord> loops = dqn ? DqnLoops(net, flag_b != 0, batch)
                                                : DdpgLoops(net, critic, flag_a, flag_b != 0, batch);
  const long long cycles = ln::SteppedCycles(loops, ln::Timing());
  const long long params = net.size + (dqn ? 0 : critic.size);
  std::printf("CYCLES %lld PARAMS %lld LOOPS %zu\n", cycles, params, loops.size());
  return 0;
}
