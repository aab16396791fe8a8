// The learner module's schedule, stepped iteration by iteration: the testbench's cycle count of
// one DQN step (hls/learner/dqn.h) or DDPG / TD3 step (ddpg.h), against which the closed-form
// cycle model (drlhet/dse/devices/learner_cycles.py) is checked (tests/hls/test_learner_testbench.py).
// The loops are those the step ran: each pipelined loop of mlp.h, net.h, dqn.h and ddpg.h states
// its trip count, accumulators and body (DRLHET_LOOP) as it starts, and the testbench, built with
// DRLHET_LEARNER_TRACE, records them (LoopRecord) while it runs one step.
//
// The step is a sequence of pipelined loops (II 1) run one after another.
// An iteration issues at the cycle after the previous one, unless the accumulator it adds into
// was updated by an iteration that has not finished its add (`add` cycles later): then it waits
// (a loop-carried dependence). A loop takes (its last issue + 1) + its pipeline depth + the
// loop's entry cycles. kPOut neurons and kPBatch samples are one iteration's lanes (memory.h).
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

// One pipelined loop as the step announced it (mlp.h's DRLHET_LOOP).
struct LoopRecord {
  int64_t trips;
  int64_t accumulators;
  LoopDepth depth;
};

// A loop body's pipeline depth from its dependent operations' latencies.
inline int Depth(const LoopDepth& d, const Timing& t) {
  return d.mem * t.mem + d.mul * t.mul + d.add * t.add + d.plain + d.update * t.update;
}

// Cycles of the loops in `loops`, run one after another.
inline int64_t SteppedCycles(const std::vector<LoopRecord>& loops, const Timing& t) {
  int64_t c = 0;
  for (const LoopRecord& l : loops) {
    const int64_t n = l.accumulators;
    c += SteppedLoop(l.trips, n, [n](int64_t k) { return k % n; }, Depth(l.depth, t), t);
  }
  return c;
}

}  // namespace learner
}  // namespace drlhet

#endif  // DRLHET_LEARNER_CYCLES_H_
