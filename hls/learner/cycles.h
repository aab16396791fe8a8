// The learner module's schedule, stepped iteration by iteration: the testbench's cycle count of
// one DQN step (hls/learner/dqn.h) or DDPG / TD3 step (ddpg.h), against which the closed-form cycle model
// (drlhet/dse/devices/learner_cycles.py) is checked (tests/hls/test_learner_testbench.py).
//
// Each loop nest of mlp.h / dqn.h is a sequence of pipelined loops (II 1) run one after another.
// An iteration issues at the cycle after the previous one, unless the accumulator it adds into
// was updated by an iteration that has not finished its add (`add` cycles later): then it waits
// (a loop-carried dependence). A loop takes (its last issue + 1) + its pipeline depth + the
// loop's entry cycles. kPOut neurons and kPBatch samples are one iteration's lanes (mlp.h).
#ifndef DRLHET_LEARNER_CYCLES_H_
#define DRLHET_LEARNER_CYCLES_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "mlp.h"

namespace drlhet {
namespace learner {

// Latencies of the float32 cores and the memories at the module's clock (cycles).
struct Timing {
  int mem = 2;      // a BRAM read
  int mul = 4;      // fmul
  int add = 5;      // fadd (the loop-carried dependence of an accumulation)
  int entry = 2;    // entering and leaving a pipelined loop
  int update = 60;  // the optimizer's element pipeline (clip, moments, divide, square root)
};

inline int Log2Ceil(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Cycles of one pipelined loop of `trips` iterations; iteration k adds into accumulator
// `addr(k)` of `n_addr` (-1: none).
inline int64_t SteppedLoop(int64_t trips, int64_t n_addr, const std::function<int64_t(int64_t)>& addr,
                           int depth, const Timing& t) {
  if (trips <= 0) return 0;
  std::vector<int64_t> ready(size_t(n_addr > 0 ? n_addr : 1), 0);
  int64_t issue = -1;
  for (int64_t k = 0; k < trips; ++k) {
    const int64_t a = n_addr > 0 ? addr(k) : -1;
    int64_t c = issue + 1;
    if (a >= 0 && ready[size_t(a)] > c) c = ready[size_t(a)];
    issue = c;
    if (a >= 0) ready[size_t(a)] = c + t.add;
  }
  return issue + 1 + depth + t.entry;
}

inline int64_t NoAddr(int64_t) { return -1; }

// DenseForward: per block of outputs, the MAC loop over (input, row group) into the group's
// accumulators, then bias + ReLU over the row groups.
inline int64_t ForwardCycles(const Dense& d, int batch, const Timing& t) {
  const int64_t groups = CeilDiv(batch, kPBatch), blocks = CeilDiv(d.out, kPOut);
  const int64_t mac = SteppedLoop(int64_t(d.in) * groups, groups,
                                  [&](int64_t k) { return k % groups; },
                                  t.mem + t.mul + t.add + 1, t);
  const int64_t bias = SteppedLoop(groups, 0, NoAddr, t.mem + t.add + 2, t);
  return blocks * (mac + bias);
}

// DenseInputGrad over `cols` of the inputs: per block of outputs, the loop over (input, row
// group), an adder tree over the block's kPOut products into dx (each address once per block).
inline int64_t InputGradCycles(const Dense& d, int batch, const Timing& t, int cols = -1) {
  const int64_t groups = CeilDiv(batch, kPBatch), blocks = CeilDiv(d.out, kPOut);
  const int depth = t.mem + t.mul + (Log2Ceil(kPOut) + 1) * t.add + 1;
  return blocks * SteppedLoop(int64_t(cols < 0 ? d.in : cols) * groups, 0, NoAddr, depth, t);
}

// DenseWeightGrad: per row group, the loop over (input or bias, block of outputs), an adder
// tree over the group's kPBatch products into the gradient (each address once per group).
inline int64_t WeightGradCycles(const Dense& d, int batch, const Timing& t) {
  const int64_t groups = CeilDiv(batch, kPBatch), blocks = CeilDiv(d.out, kPOut);
  const int depth = t.mem + t.mul + (Log2Ceil(kPBatch) + 1) * t.add + 1;
  return groups * SteppedLoop(int64_t(d.in + 1) * blocks, 0, NoAddr, depth, t);
}

// An elementwise pass over [batch][width] (ReLU's gradient, the dueling heads' sum).
inline int64_t ElementwiseCycles(int width, int batch, const Timing& t) {
  return SteppedLoop(CeilDiv(batch, kPBatch) * CeilDiv(width, kPOut), 0, NoAddr, t.mem + t.add + 1, t);
}

// A pass over the batch's rows, each adding into one running sum (the loss, mean |td|).
inline int64_t RowSumCycles(int batch, int depth, const Timing& t) {
  return SteppedLoop(batch, 1, [](int64_t) { return 0; }, depth, t);
}

// Cycles of a forward pass of `net` on `batch` samples (net.h's Forward).
inline int64_t ForwardNetCycles(const Net& net, int batch, const Timing& t) {
  int64_t c = 0;
  for (int l = 0; l < net.hidden + net.heads; ++l) c += ForwardCycles(net.layer[l], batch, t);
  return c;
}

// Cycles of a backward pass (net.h's Backward): each layer's weight gradient when `weights`,
// the input gradient of every hidden layer but the first, the first layer's over `dx_cols`
// inputs (0: none), ReLU's gradient, and the sum where two heads meet.
inline int64_t BackwardNetCycles(const Net& net, int batch, bool weights, int dx_cols,
                                 const Timing& t) {
  int64_t c = 0;
  for (int h = 0; h < net.heads; ++h) {
    const Dense& d = net.layer[net.hidden + h];
    if (weights) c += WeightGradCycles(d, batch, t);
    if (net.hidden) c += InputGradCycles(d, batch, t);
    if (!net.hidden && dx_cols) c += InputGradCycles(d, batch, t, dx_cols);
  }
  if (net.heads == 2 && (net.hidden || dx_cols)) {
    c += ElementwiseCycles(net.layer[net.hidden].in, batch, t);
  }
  for (int l = net.hidden - 1; l >= 0; --l) {
    c += ElementwiseCycles(net.layer[l].out, batch, t);  // ReLU's gradient
    if (weights) c += WeightGradCycles(net.layer[l], batch, t);
    if (l) c += InputGradCycles(net.layer[l], batch, t);
    if (!l && dx_cols) c += InputGradCycles(net.layer[l], batch, t, dx_cols);
  }
  return c;
}

// Cycles of the optimizer over `n` parameters: the global norm's pass (when the step clips),
// then the element pipeline, kPOut lanes per iteration.
inline int64_t OptimizerCycles(int64_t n, bool clip, const Timing& t) {
  const int64_t lanes = CeilDiv(n, kPOut);
  int64_t c = SteppedLoop(lanes, 0, NoAddr, t.update, t);
  if (clip) {
    c += SteppedLoop(lanes, 8, [](int64_t k) { return k % 8; },
                     t.mem + t.mul + (Log2Ceil(kPOut) + 1) * t.add, t);
  }
  return c;
}

// Cycles of one DQN learner step (dqn.h's DqnStep) of `net` on `batch` samples.
inline int64_t DqnStepCycles(const Net& net, bool double_q, int batch, const Timing& t) {
  int64_t c = ForwardNetCycles(net, batch, t) * (double_q ? 3 : 2);
  const int actions = net.layer[net.hidden + net.heads - 1].out;
  c += RowSumCycles(batch, t.mem + 4 * t.add + 2 * t.mul + actions, t);  // TD, loss, dQ
  c += BackwardNetCycles(net, batch, true, 0, t);
  c += OptimizerCycles(net.size, true, t);
  c += RowSumCycles(batch, t.mem + t.add + 1, t);  // priorities, mean |td|
  return c;
}

// Cycles of one DDPG / TD3 learner step (ddpg.h's DdpgStep) with `critics` critics; `actor`:
// a step that trains the actor (every step for DDPG, one in policy_delay for TD3).
inline int64_t DdpgStepCycles(const Net& actor_net, const Net& critic, int critics, bool actor,
                              int batch, const Timing& t) {
  const int m = actor_net.layer[actor_net.hidden].out;
  int64_t c = ForwardNetCycles(actor_net, batch, t) + ElementwiseCycles(m, batch, t);  // a'
  c += 2 * critics * ForwardNetCycles(critic, batch, t);  // the targets on s', the critics on s
  c += RowSumCycles(critics * batch, t.mem + 3 * t.add + 2 * t.mul, t);  // TD, loss
  c += critics * (BackwardNetCycles(critic, batch, true, 0, t) +
                  OptimizerCycles(critic.size, false, t));
  c += ForwardNetCycles(actor_net, batch, t) + ElementwiseCycles(m, batch, t);  // actor(s)
  c += ForwardNetCycles(critic, batch, t) + RowSumCycles(batch, t.mem + t.add + 1, t);
  if (actor) {
    c += BackwardNetCycles(critic, batch, false, m, t) + ElementwiseCycles(m, batch, t);
    c += BackwardNetCycles(actor_net, batch, true, 0, t);
    c += OptimizerCycles(actor_net.size, false, t);
  }
  c += RowSumCycles(batch, t.mem + t.add + 1, t);  // priorities, mean |td|
  return c;
}

}  // namespace learner
}  // namespace drlhet

#endif  // DRLHET_LEARNER_CYCLES_H_
