// The learner module's g++ testbench: the stepped cycle count of one DQN step (cycles.h) of a
// network given on the command line, the count the closed-form cycle model
// (drlhet/dse/devices/learner_cycles.py) is checked against (tests/hls/test_learner_testbench.py):
//   g++ -std=c++17 -O2 -I hls/learner hls/learner/learner_tb.cpp -o learner_tb
//   ./learner_tb --cycles OBS_DIM ACTIONS DUELING DOUBLE BATCH [HIDDEN ...]
// prints "CYCLES <n> PARAMS <floats in the parameter memory>".
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cycles.h"
#include "mlp.h"

namespace ln = drlhet::learner;

int main(int argc, char** argv) {
  if (argc < 7 || std::strcmp(argv[1], "--cycles") != 0) {
    std::fprintf(stderr, "usage: %s --cycles OBS_DIM ACTIONS DUELING DOUBLE BATCH [HIDDEN ...]\n",
                 argv[0]);
    return 2;
  }
  const int obs_dim = std::atoi(argv[2]), actions = std::atoi(argv[3]);
  const bool dueling = std::atoi(argv[4]) != 0, double_q = std::atoi(argv[5]) != 0;
  const int batch = std::atoi(argv[6]);
  int widths[ln::kMaxHidden] = {0, 0, 0};
  const int hidden = argc - 7;
  if (hidden > ln::kMaxHidden) {
    std::fprintf(stderr, "at most %d hidden layers\n", ln::kMaxHidden);
    return 2;
  }
  for (int l = 0; l < hidden; ++l) widths[l] = std::atoi(argv[7 + l]);
  const int outs[2] = {dueling ? 1 : actions, actions};
  ln::Net net;
  if (batch < 1 || batch > ln::kMaxBatch ||
      !ln::MakeNet(obs_dim, widths, hidden, outs, dueling ? 2 : 1, &net)) {
    std::fprintf(stderr, "a network or batch outside the module's sizes\n");
    return 2;
  }
  const long long cycles = ln::DqnStepCycles(net, double_q, batch, ln::Timing());
  std::printf("CYCLES %lld PARAMS %lld\n", cycles, static_cast<long long>(net.size));
  return 0;
}
