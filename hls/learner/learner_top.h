// The learner module's compile-time configuration and its top function (learner_top.cpp).
//
// One bitstream trains one network shape: LEARNER_ALGO (0: DQN, 1: DDPG / TD3), LEARNER_OBS
// (the observation's features), LEARNER_ACTIONS (DQN: discrete actions; DDPG: the action's
// dimension), LEARNER_H0..H2 (hidden widths, 0: absent), LEARNER_DUELING (DQN),
// LEARNER_CRITICS (DDPG: 2 for TD3), LEARNER_SIZED_TILES (1: the on-chip tiles as wide as the
// network's widest layer, rounded up to 64; 0: the module's 256). Defaults: drlhet's CartPole
// DQN, 4-64-64-2 dueling, sized tiles. Include this header before the module's others (it
// includes memory.h with the tiles sized).
#ifndef DRLHET_LEARNER_TOP_H_
#define DRLHET_LEARNER_TOP_H_

#include <cstdint>

#ifndef LEARNER_ALGO
#define LEARNER_ALGO 0
#endif
#ifndef LEARNER_OBS
#define LEARNER_OBS 4
#endif
#ifndef LEARNER_ACTIONS
#define LEARNER_ACTIONS 2
#endif
#ifndef LEARNER_H0
#define LEARNER_H0 64
#endif
#ifndef LEARNER_H1
#define LEARNER_H1 64
#endif
#ifndef LEARNER_H2
#define LEARNER_H2 0
#endif
#ifndef LEARNER_DUELING
#define LEARNER_DUELING 1
#endif
#ifndef LEARNER_CRITICS
#define LEARNER_CRITICS 1
#endif

#ifndef LEARNER_SIZED_TILES
#define LEARNER_SIZED_TILES 1
#endif

namespace drlhet {
namespace learner {
namespace top {

// The widest layer of the network the top trains (a critic's input counts as a layer), rounded
// up to a block of 64 columns, at most the module's 256: the width of its Tiles when
// LEARNER_SIZED_TILES is 1 (memory.h). 64 for the default 4-64-64-2: each tile a quarter of the
// module's 256 x 256, in banks of 16 words (the testbench's --cycles, which runs any network,
// builds with LEARNER_SIZED_TILES=0).
constexpr int Max(int a, int b) { return a > b ? a : b; }
constexpr int TileWidth() {
  const int widest = Max(Max(LEARNER_OBS + (LEARNER_ALGO == 1 ? LEARNER_ACTIONS : 0),
                             LEARNER_ACTIONS),
                         Max(LEARNER_H0, Max(LEARNER_H1, LEARNER_H2)));
  const int blocks = (widest + 63) / 64 * 64;
  return blocks < 64 ? 64 : (blocks > 256 ? 256 : blocks);
}

// The network of the build and the sizes of its memories: in the flat layout (what kLoad
// takes and kStore gives: kMemory floats) and on chip (rows, memory.h). Here rather than in
// learner_top.cpp so that a testbench compiled apart from the top (Vitis' C-simulation,
// LEARNER_TB_INCLUDES_TOP 0) knows them too.
constexpr int kWidths[3] = {LEARNER_H0, LEARNER_H1, LEARNER_H2};
constexpr int kHidden = (LEARNER_H0 > 0) + (LEARNER_H1 > 0) + (LEARNER_H2 > 0);
constexpr int kObs = LEARNER_OBS, kActions = LEARNER_ACTIONS;

// Floats in the flat layout of a network of `in` inputs and heads `h0` (and `h1`).
constexpr int64_t NetSize(int in, int h0, int h1) {
  int64_t size = 0;
  int prev = in;
  for (int l = 0; l < kHidden; ++l) {
    size += int64_t(prev) * kWidths[l] + kWidths[l];
    prev = kWidths[l];
  }
  return size + int64_t(prev) * h0 + h0 + (h1 ? int64_t(prev) * h1 + h1 : 0);
}

// Rows of its parameter memory (memory.h: each layer (in + 1) x Blocks(out) rows, a block 64
// outputs).
constexpr int64_t NetRows(int in, int h0, int h1) {
  int64_t rows = 0;
  int prev = in;
  for (int l = 0; l < kHidden; ++l) {
    rows += int64_t(prev + 1) * ((kWidths[l] + 63) / 64);
    prev = kWidths[l];
  }
  rows += int64_t(prev + 1) * ((h0 + 63) / 64);
  return rows + (h1 ? int64_t(prev + 1) * ((h1 + 63) / 64) : 0);
}

// The most rows one network's memory of the top has (DDPG: the actor's or one critic's): the
// gradient memory's rows when LEARNER_SIZED_TILES is 1 (memory.h's kMaxRows; the module's
// bound is 5,140).
constexpr int64_t MaxRows() {
  const int64_t actor = NetRows(kObs, kActions, 0), critic = NetRows(kObs + kActions, 1, 0);
  const int64_t dqn = LEARNER_DUELING ? NetRows(kObs, 1, kActions) : NetRows(kObs, kActions, 0);
  return LEARNER_ALGO == 1 ? (actor > critic ? actor : critic) : dqn;
}

// Host protocol: cmd[0] is the command.
//   kLoad   hyper = the hyper-parameters (kHyper doubles: learner_top.cpp); in = the memories
//           back to back (DQN: params, target, mu, nu; DDPG: actor, critics, target actor,
//           target critics, the actor's mu, nu, the critics' mu, nu); cmd[1], cmd[2] the Adam
//           counts (DQN: one), cmd[3] the learner's step count.
//   kStep   cmd[1] = B; in = the batch (obs [B][D], action [B] (DQN, as floats) or [B][M],
//           reward, discount [B], next_obs [B][D], weights [B], DDPG: noise [B][M]);
//           out = priorities [B], then the metrics (loss, mean |td|; DDPG: loss, actor loss,
//           mean |td|). A DQN step with an action that is not an integer in [0, actions) does
//           nothing (as a batch past kMaxBatch): out, the memories and the counts untouched.
//   kStore  out = the memories as kLoad takes them; cmd[1..3] written back with the counts.
//   kInfo   cmd[1] = a nonce; out = kInfoWords floats: kInfoMagic, the nonce's low 24 bits,
//           kProtocolVersion, LEARNER_ALGO, LEARNER_OBS, LEARNER_ACTIONS, LEARNER_H0..H2,
//           LEARNER_DUELING, LEARNER_CRITICS, kMaxBatch (the host checks the bitstream's
//           build against the network it trains: drlhet/backends/fpga_learner_board.py).
// Every value is an integer below 2^24, exact in float32.
enum Command : uint32_t { kLoad = 0, kStep = 1, kStore = 2, kInfo = 3 };
constexpr int kHyper = 16;
constexpr int kInfoWords = 12;
constexpr uint32_t kInfoMagic = 0x4C524E;  // "LRN"
constexpr uint32_t kProtocolVersion = 1;

}  // namespace top
}  // namespace learner
}  // namespace drlhet

#if LEARNER_SIZED_TILES && !defined(LEARNER_TILE_WIDTH)
#define LEARNER_TILE_WIDTH (::drlhet::learner::top::TileWidth())
#define LEARNER_MAX_ROWS (::drlhet::learner::top::MaxRows())
#endif

#include "memory.h"

namespace drlhet {
namespace learner {
namespace top {

// MakeNet would refuse the network at run time, unchecked: refuse it when the top is built.
constexpr bool Fits(int w, bool absent_ok) {
  return (absent_ok && w == 0) || (w >= 1 && w <= kMaxWidth);
}
static_assert((LEARNER_H1 == 0 || LEARNER_H0 > 0) && (LEARNER_H2 == 0 || LEARNER_H1 > 0),
              "LEARNER_H0..H2: the hidden widths first, the absent ones (0) last");
static_assert(Fits(kObs, false) && Fits(kActions, false) && Fits(LEARNER_H0, true) &&
                  Fits(LEARNER_H1, true) && Fits(LEARNER_H2, true) &&
                  (LEARNER_ALGO == 0 || Fits(kObs + kActions, false)),
              "a layer outside the module's widths (1..kMaxWidth, hls/learner/memory.h)");
static_assert(LEARNER_ALGO == 0 || LEARNER_CRITICS == 1 || LEARNER_CRITICS == 2,
              "LEARNER_CRITICS must be 1 or 2");

#if LEARNER_ALGO == 1
constexpr int64_t kActor = NetSize(kObs, kActions, 0);
constexpr int64_t kCritic = LEARNER_CRITICS * NetSize(kObs + kActions, 1, 0);
constexpr int64_t kMemory = 4 * (kActor + kCritic);
constexpr int64_t kActorRows = NetRows(kObs, kActions, 0);
constexpr int64_t kCriticRows = LEARNER_CRITICS * NetRows(kObs + kActions, 1, 0);
#else
constexpr int64_t kParams =
    LEARNER_DUELING ? NetSize(kObs, 1, kActions) : NetSize(kObs, kActions, 0);
constexpr int64_t kMemory = 4 * kParams;
constexpr int64_t kRows =
    LEARNER_DUELING ? NetRows(kObs, 1, kActions) : NetRows(kObs, kActions, 0);
#endif

}  // namespace top
}  // namespace learner
}  // namespace drlhet

extern "C" void learner_top(uint32_t* cmd, const double* hyper, const float* in, float* out);

#endif  // DRLHET_LEARNER_TOP_H_
