// A transaction-level simulation of rmm_top's dataflow region, stepped clock by clock: the
// testbench's cycle count of one command, against which the closed-form cycle model
// (drlhet/dse/devices/rmm_cycles.py) is checked (tests/hls/test_rmm_testbench.py).
//
// Each stage (front, one per level, back) is a loop pipelined at an initiation interval `ii`
// with `depth` cycles from an iteration's start to its FIFO write. A stage starts an iteration
// at a cycle when its II allows and its input FIFO has an item that arrived before this cycle
// (the front reads its AXI burst instead). An item that is done enters the output FIFO; when
// the FIFO is full the stage's whole pipeline freezes for the cycle (a blocking write). The
// front's iterations emit an item or not (a write skipped for an index past the capacity);
// its last iteration is the end item. The command's cycles run from the kernel's start to the
// response of the back's last output write.
#ifndef DRLHET_RMM_CYCLES_H_
#define DRLHET_RMM_CYCLES_H_

#include <cstdint>
#include <deque>
#include <vector>

namespace drlhet {
namespace rmm {

struct StageTiming {
  int ii;
  int depth;
};

struct StageState {
  int64_t next_start = 0;        // the first cycle its II allows the next iteration
  int64_t done = 0;              // iterations started
  std::deque<int64_t> flight;    // cycles at which its started items are done
  std::deque<int64_t> fifo;      // its output FIFO: the cycle each item entered it
};

// Cycles of one command through `stages` (front first, back last); `emits[i]`: front
// iteration i passes an item on (the end item, which always does, follows them).
inline int64_t SteppedCycles(const std::vector<StageTiming>& stages,
                             const std::vector<bool>& emits, int fifo_depth, int axi_read,
                             int axi_write) {
  const size_t n = stages.size();
  std::vector<StageState> st(n);
  const int64_t front_iterations = int64_t(emits.size()) + 1;
  int64_t back_iterations = 1;  // the end item
  for (bool e : emits) back_iterations += e ? 1 : 0;
  int64_t last_end = 0;
  for (int64_t c = axi_read;; ++c) {
    for (size_t s = n; s-- > 0;) {  // back first: a FIFO read frees room this cycle
      StageState& me = st[s];
      bool stalled = false;  // an item is done but its FIFO is full: the pipeline freezes
      while (!me.flight.empty() && me.flight.front() <= c) {
        if (int64_t(me.fifo.size()) >= fifo_depth) {
          stalled = true;
          break;
        }
        me.fifo.push_back(c);
        me.flight.pop_front();
      }
      if (stalled) {
        for (int64_t& t : me.flight) ++t;
        if (me.next_start > c) ++me.next_start;
        continue;
      }
      if (c < me.next_start) continue;
      if (s == 0 && me.done == front_iterations) continue;
      if (s > 0 && (st[s - 1].fifo.empty() || st[s - 1].fifo.front() >= c)) continue;
      const bool emit = s + 1 < n && (s > 0 || me.done + 1 == front_iterations ||
                                      emits[size_t(me.done)]);
      if (s > 0) st[s - 1].fifo.pop_front();
      me.next_start = c + stages[s].ii;
      ++me.done;
      if (emit) me.flight.push_back(c + stages[s].depth);
      if (s + 1 == n) last_end = c + stages[s].depth;
    }
    if (st[n - 1].done == back_iterations) return last_end + axi_write;
  }
}

}  // namespace rmm
}  // namespace drlhet

#endif  // DRLHET_RMM_CYCLES_H_
