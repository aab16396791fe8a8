// The replay module's g++ testbench: runs the synthesized top (rmm_top.cpp, as Vitis HLS
// C-simulation would) and the C-simulation's path (rmm::Serve on a WordTree, what the XLA FFI
// handlers run) on the same random commands, and requires the same words out of both, the
// exact sums in every node, and the leaves' quantization; also the stepped cycle count
// (cycles.h); and the info op's answer: the build's macros, from both. Built and run by
// tests/hls/test_rmm_testbench.py for several RMM_K and RMM_CAPACITY (and
// tests/hls/test_rmm_info.py for other RMM_FRAC_BITS); usable alone:
//   g++ -std=c++17 -O2 -I hls/rmm -isystem $AP_TYPES -DRMM_K=16 -DRMM_CAPACITY=100003
//     hls/rmm/rmm_tb.cpp -o rmm_tb && ./rmm_tb [commands] [seed]
// The cycle count of one command (cycles.h), its stages' "ii depth" pairs on stdin (front, one
// per level, back: what drlhet/dse/devices/rmm_cycles.py derives from the design), which of
// Front's iterations pass an item on as the command recorded them (rmm_top.h's
// TraceFrontItem):
//   ./rmm_tb --cycles write|sample|read B skipped_percent seed axi_read axi_write < stages
// prints "CYCLES <n> ITEMS <items through the levels>".
#define DRLHET_RMM_TRACE 1  // Front's record of its iterations (rmm_top.cpp), for --cycles
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cycles.h"
#include "rmm.h"
#include "rmm_top.h"
#include "word_tree.h"
#ifndef RMM_TB_INCLUDES_TOP
#define RMM_TB_INCLUDES_TOP 1  // g++ alone: the design in this translation unit (Vitis links it)
#endif
#if RMM_TB_INCLUDES_TOP
#include "rmm_top.cpp"
#endif

namespace rmm = drlhet::rmm;

namespace {

int Fail(const char* what, int command, int at) {
  std::printf("FAIL %s (command %d, word %d)\n", what, command, at);
  return 1;
}

// Every inner node equals the sum of its K children (as exact 128-bit integers).
bool ExactSums(const rmm::Layout& lay, const std::vector<uint32_t>& leaves,
               const std::vector<uint32_t>& hi, const std::vector<uint32_t>& lo) {
  auto node = [&](int level, int64_t i) -> unsigned __int128 {
    if (level == lay.depth) return leaves[size_t(i)];
    const size_t at = size_t(lay.offsets[level] + i);
    return (static_cast<unsigned __int128>(hi[at]) << 32) | lo[at];
  };
  for (int level = 0; level < lay.depth; ++level) {
    for (int64_t i = 0; i < lay.widths[level]; ++i) {
      unsigned __int128 sum = 0;
      if (i * lay.branching < lay.widths[level + 1]) {
        for (int j = 0; j < lay.branching; ++j) sum += node(level + 1, i * lay.branching + j);
      }
      if (sum != node(level, i)) return false;
    }
  }
  return true;
}

uint32_t RandomValueBits(std::mt19937_64& rng) {
  static const float kSpecial[] = {0.0f, 1e-9f, 9.5367431640625e-7f, 4096.0f, 1e-40f, 1e30f};
  float v;
  if (rng() % 8 == 0) {
    v = kSpecial[rng() % 6];
  } else {
    v = float(std::pow(10.0, -6.0 + 9.0 * double(rng() % 1000000) / 1e6));
  }
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

// The info op: rmm_top answers the magic, the nonce, the protocol version and its macros, as
// Serve does for the same build; an info op of B != 1 is refused by Serve, ignored by rmm_top.
// `info` gets rmm_top's answer.
int CheckInfo(rmm::WordTree& model, const rmm::Layout& lay, uint32_t* info) {
  const uint32_t cmd[rmm::kCmdWords] = {rmm::kInfo, 1, 0}, nonce[1] = {0x9E3779B9u};
  const uint32_t build[rmm::kInfoWords] = {rmm::kInfoMagic, nonce[0], rmm::kProtocolVersion,
                                           RMM_K, RMM_CAPACITY, RMM_FRAC_BITS};
  uint32_t want[rmm::kInfoWords] = {}, got[rmm::kInfoWords] = {};
  if (rmm::Serve<RMM_K>(model, lay, RMM_FRAC_BITS, cmd, nonce, want) != 0) {
    return Fail("Serve refused the info op", 0, 0);
  }
  rmm_top(cmd, nonce, got);
  for (int w = 0; w < rmm::kInfoWords; ++w) {
    if (got[w] != build[w]) return Fail("rmm_top's info differs from its build", 0, w);
    if (want[w] != got[w]) return Fail("rmm_top's and Serve's info differ", 0, w);
    info[w] = got[w];
  }
  for (const uint32_t b : {0u, 2u}) {
    const uint32_t bad[rmm::kCmdWords] = {rmm::kInfo, b, 0};
    uint32_t untouched[rmm::kInfoWords];
    std::memset(untouched, 0xA5, sizeof untouched);
    if (rmm::Serve<RMM_K>(model, lay, RMM_FRAC_BITS, bad, nonce, untouched) != -1) {
      return Fail("Serve answered an info op of B != 1", 0, int(b));
    }
    rmm_top(bad, nonce, untouched);
    for (int w = 0; w < rmm::kInfoWords; ++w) {
      if (untouched[w] != 0xA5A5A5A5u) return Fail("rmm_top answered B != 1", 0, int(b));
    }
  }
  return 0;
}

}  // namespace

namespace {
std::vector<bool>* g_front = nullptr;  // where Front's iterations are recorded (null: nowhere)
}  // namespace

void drlhet::rmm::top::TraceFrontItem(bool emitted) {
  if (g_front != nullptr) g_front->push_back(emitted);
}

namespace {

// The stepped cycle count of one command on random inputs (a write skips ~skipped% of its
// entries: indices past the capacity, which the front iterates over and drops); which of
// Front's iterations passed an item on is what the command, run through the design, recorded.
int CycleMode(int argc, char** argv) {
  if (argc != 8) {
    std::printf("usage: rmm_tb --cycles write|sample|read B skipped%% seed axi_read axi_write\n");
    return 2;
  }
  const std::string op = argv[2];
  const uint32_t b = uint32_t(std::atoi(argv[3]));
  const int skipped = std::atoi(argv[4]);
  std::mt19937_64 rng(std::strtoull(argv[5], nullptr, 10));
  const rmm::Layout lay = rmm::top::kLay;
  std::vector<rmm::StageTiming> stages(size_t(lay.depth) + 2);
  for (auto& s : stages) {
    if (std::scanf("%d %d", &s.ii, &s.depth) != 2 || s.ii < 1 || s.depth < 0) {
      std::printf("FAIL want %d 'ii depth' pairs on stdin (front, levels, back)\n", lay.depth + 2);
      return 2;
    }
  }
  std::vector<uint32_t> in(2 * size_t(b)), out(2 * size_t(b) + 2);
  std::vector<bool> emits(b, true);
  uint32_t cmd[rmm::kCmdWords] = {rmm::kSample, b, 1};
  if (op == "write") {
    cmd[0] = rmm::kWrite;
    for (uint32_t j = 0; j < b; ++j) {
      const bool skip = int(rng() % 100) < skipped;
      in[j] = skip ? rmm::kDropped : uint32_t(rng() % uint64_t(lay.capacity));
      in[b + j] = RandomValueBits(rng);
    }
  } else if (op == "read") {
    cmd[0] = rmm::kRead;
    cmd[2] = uint32_t(lay.depth);
    for (uint32_t j = 0; j < b; ++j) in[j] = uint32_t(rng() % uint64_t(lay.widths[lay.depth]));
  } else {
    for (auto& w : in) w = uint32_t(rng());
  }
  emits.clear();
  g_front = &emits;
  rmm_top(cmd, in.data(), out.data());  // the command itself runs through the design
  g_front = nullptr;
  if (emits.size() != b) {
    std::printf("FAIL Front ran %zu iterations for B %u\n", emits.size(), b);
    return 1;
  }
  int64_t items = 0;
  for (bool e : emits) items += e ? 1 : 0;
  const int64_t n = rmm::SteppedCycles(stages, emits, RMM_FIFO_DEPTH, std::atoi(argv[6]),
                                       std::atoi(argv[7]));
  std::printf("CYCLES %lld ITEMS %lld\n", static_cast<long long>(n), static_cast<long long>(items));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--cycles") return CycleMode(argc, argv);
  const int commands = argc > 1 ? std::atoi(argv[1]) : 200;
  std::mt19937_64 rng(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1);
  const rmm::Layout lay = rmm::top::kLay;
  std::vector<uint32_t> leaves(size_t(lay.widths[lay.depth])), hi(size_t(lay.offsets[lay.depth])),
      lo(hi.size());
  rmm::WordTree model(lay, leaves.data(), hi.data(), lo.data());
  const int64_t pool = lay.capacity < 64 ? lay.capacity : 64;  // few indices: many duplicates
  std::vector<uint32_t> hot(static_cast<size_t>(pool));
  for (auto& i : hot) i = uint32_t(rng() % uint64_t(lay.capacity));
  for (int c = 0; c < commands; ++c) {
    const bool write = c < 2 || rng() % 2 == 0;
    const uint32_t b = 1 + uint32_t(rng() % 256);
    const uint32_t cmd[rmm::kCmdWords] = {write ? uint32_t(rmm::kWrite) : uint32_t(rmm::kSample),
                                          b, uint32_t(rng() % 2)};
    std::vector<uint32_t> in(2 * size_t(b));
    for (uint32_t j = 0; j < b; ++j) {
      if (write) {
        const uint64_t r = rng() % 16;
        in[j] = r == 0 ? rmm::kDropped : r == 1 ? uint32_t(rng()) : hot[size_t(rng() % hot.size())];
        in[b + j] = RandomValueBits(rng);
      } else {
        in[2 * j] = uint32_t(rng());
        in[2 * j + 1] = uint32_t(rng());
      }
    }
    std::vector<uint32_t> want(2 * size_t(b) + 2), got(2 * size_t(b) + 2);
    if (rmm::Serve<RMM_K>(model, lay, RMM_FRAC_BITS, cmd, in.data(), want.data()) != 0) {
      return Fail("Serve refused a valid command", c, 0);
    }
    rmm_top(cmd, in.data(), got.data());
    const size_t words = write ? 1 : 2 * size_t(b) + 2;
    for (size_t w = 0; w < words; ++w) {
      if (want[w] != got[w]) return Fail("rmm_top and Serve differ", c, int(w));
    }
    if (!write) {
      for (uint32_t j = 0; j < b && model.root() != 0; ++j) {
        if (leaves[got[j]] == 0 || got[b + j] != leaves[got[j]]) return Fail("drew a 0", c, j);
      }
    }
  }
  if (!ExactSums(lay, leaves, hi, lo)) return Fail("inexact sums", commands, 0);
  // every node of the synthesized design's memories equals the model's
  for (int level = 0; level <= lay.depth; ++level) {
    const uint32_t width = uint32_t(lay.widths[level]);
    std::vector<uint32_t> slots(width), want(2 * size_t(width)), got(2 * size_t(width));
    for (uint32_t i = 0; i < width; ++i) slots[i] = i;
    const uint32_t cmd[rmm::kCmdWords] = {rmm::kRead, width, uint32_t(level)};
    if (rmm::Serve<RMM_K>(model, lay, RMM_FRAC_BITS, cmd, slots.data(), want.data()) != 0) {
      return Fail("Serve refused a read", commands, level);
    }
    rmm_top(cmd, slots.data(), got.data());
    for (size_t w = 0; w < got.size(); ++w) {
      if (want[w] != got[w]) return Fail("a node of rmm_top differs", commands + level, int(w));
    }
  }
  // a read of a level past the leaves is refused by Serve and leaves rmm_top's out untouched
  for (const uint32_t level : {uint32_t(lay.depth + 1), 32u + 1u}) {
    const uint32_t cmd[rmm::kCmdWords] = {rmm::kRead, 1, level}, slot[1] = {0};
    std::vector<uint32_t> got(2, 0xA5A5A5A5u);
    if (rmm::Serve<RMM_K>(model, lay, RMM_FRAC_BITS, cmd, slot, got.data()) != -1) {
      return Fail("Serve read a level past the leaves", commands, int(level));
    }
    rmm_top(cmd, slot, got.data());
    if (got[0] != 0xA5A5A5A5u || got[1] != 0xA5A5A5A5u) {
      return Fail("rmm_top read a level past the leaves", commands, int(level));
    }
  }
  uint32_t info[rmm::kInfoWords];
  if (CheckInfo(model, lay, info) != 0) return 1;
  std::printf("PASS K=%d capacity=%lld depth=%d commands=%d info=%u,%u,%u,%u\n", RMM_K,
              static_cast<long long>(lay.capacity), lay.depth, commands, info[2], info[3],
              info[4], info[5]);
  return 0;
}
