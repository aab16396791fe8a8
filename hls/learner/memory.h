// The learner module's memories as the hardware banks them (docs/design.md section 3, "The FPGA
// learner module"), and the network layout that addresses them.
//
// Sizes: the module is built for at most kMaxHidden hidden layers of at most kMaxWidth neurons
// and kMaxBatch samples (compile-time bounds: they size the on-chip arrays); a network's own
// sizes are set when its `Net` is made and may be anything within them. One loop iteration
// computes kPOut neurons x kPBatch samples (Zhang, Meng, Prasanna, TPDS 2023, Sec. 5: model
// parallelism across a layer's neurons, data parallelism across a batch's samples).
//
// Parameter memories (the parameters, the target network, Adam's moments, the gradients): rows
// of kPOut floats (`Row`), each row one word of kPOut banks (partitioned completely along the
// row), so that an iteration reads a block of kPOut weights of one input in one cycle. Each
// layer (the hidden layers, then the heads) is its kernel, `in` x `blocks` rows (input i's
// outputs [kPOut j, kPOut (j + 1)) in row w + i blocks + j), then its bias, `blocks` rows;
// the outputs past `out` in a layer's last block are padding, kept at +0 (PackParams writes
// it, the weight gradient writes it, and the optimizer maps +0 to +0 while Adam's eps > 0; no
// step reads a parameter's padding, the global norm reads the gradient's).
// The flat layout (flax's: each layer its kernel [in][out] row-major, then its bias [out]) is
// what the host and the FFI boundary hold: PackParams / UnpackParams convert at the top's load
// and store, and around each C-simulated step (host.h), never inside a step.
//
// Activations, gradients and a batch's inputs: `Tile`s [kMaxBatch][kMaxWidth], partitioned
// cyclically by kPBatch along the rows and kPOut along the columns, so that kPBatch rows x kPOut
// columns at any row and column offset, or kPBatch rows of one column, fall in distinct banks.
#ifndef DRLHET_LEARNER_MEMORY_H_
#define DRLHET_LEARNER_MEMORY_H_

#include <cstdint>

namespace drlhet {
namespace learner {

constexpr int kPOut = 64;                   // neurons computed in parallel (model parallelism)
constexpr int kPBatch = 16;                 // samples computed in parallel (data parallelism)
constexpr int kModuleWidth = 256;           // the widest layer the module is written for
constexpr int kMaxHidden = 3;
constexpr int kMaxBatch = 256;
constexpr int kMaxLayers = kMaxHidden + 2;  // the hidden layers, then one or two heads

// The widest layer this build holds, the Tiles' columns: the module's 256, or, for a
// synthesized top sized to its own network, its widest layer rounded up to kPOut
// (LEARNER_TILE_WIDTH, set by learner_top.h unless LEARNER_SIZED_TILES is 0).
#ifdef LEARNER_TILE_WIDTH
constexpr int kMaxWidth = LEARNER_TILE_WIDTH;
#else
constexpr int kMaxWidth = kModuleWidth;
#endif
static_assert(kMaxWidth >= kPOut && kMaxWidth <= kModuleWidth && kMaxWidth % kPOut == 0,
              "LEARNER_TILE_WIDTH: a multiple of 64 from 64 to 256");

// Blocks of kPOut columns that hold `n` columns.
constexpr int Blocks(int n) { return (n + kPOut - 1) / kPOut; }

// Rows of the largest parameter memory the build holds: every layer kMaxWidth by kMaxWidth, or
// a sized top's own network's (LEARNER_MAX_ROWS, learner_top.h).
#ifdef LEARNER_MAX_ROWS
constexpr int64_t kMaxRows = LEARNER_MAX_ROWS;
#else
constexpr int64_t kMaxRows = int64_t(kMaxLayers) * (kMaxWidth + 1) * Blocks(kMaxWidth);
#endif

using Row = float[kPOut];                    // one word of a parameter memory
using Tile = float[kMaxBatch][kMaxWidth];    // an activation, a gradient, a batch's input

// A lanes loop's bound: the constant lane count for synthesis (the loop unrolls, and its guards
// idle the lanes past `live`), the live lanes alone in the C-simulation and the testbench (the
// same arithmetic without the idle iterations). Vitis HLS defines __SYNTHESIS__.
#ifdef __SYNTHESIS__
#define DRLHET_LANES(lanes, live) (lanes)
#else
#define DRLHET_LANES(lanes, live) ((live) < (lanes) ? (live) : (lanes))
#endif

// The banks of a Tile, of an array of Tiles (its tiles one after another in each bank) and of a
// parameter memory, for synthesis (where the array is declared).
#define DRLHET_PRAGMA(x) _Pragma(#x)
#define DRLHET_TILE_BANKS(v)                                                        \
  DRLHET_PRAGMA(HLS ARRAY_PARTITION variable = v type = cyclic factor = 16 dim = 1) \
  DRLHET_PRAGMA(HLS ARRAY_PARTITION variable = v type = cyclic factor = 64 dim = 2)
#define DRLHET_TILES_BANKS(v)                                                       \
  DRLHET_PRAGMA(HLS ARRAY_PARTITION variable = v type = cyclic factor = 16 dim = 2) \
  DRLHET_PRAGMA(HLS ARRAY_PARTITION variable = v type = cyclic factor = 64 dim = 3)
#define DRLHET_ROW_BANKS(v) DRLHET_PRAGMA(HLS ARRAY_PARTITION variable = v type = complete dim = 2)
// A per-row vector read kPBatch rows an iteration (a Lanes pass over one column): dimension `d`.
#define DRLHET_VECTOR_BANKS(v, d) \
  DRLHET_PRAGMA(HLS ARRAY_PARTITION variable = v type = cyclic factor = 16 dim = d)

struct Dense {
  int in = 0;
  int out = 0;
  int blocks = 0;     // Blocks(out): rows per input of the kernel, rows of the bias
  int64_t w = 0;      // row of the kernel's first row in the parameter memory
  int64_t b = 0;      // row of the bias
  int64_t flat = 0;   // offset of the kernel [in][out] in the flat layout (the bias follows)
};

// A network: `hidden` ReLU layers, then the heads (`heads` dense layers reading the last hidden
// layer: one for a Q-network or a critic, two for a dueling Q-network's value and advantages).
struct Net {
  int hidden = 0;
  int heads = 0;
  Dense layer[kMaxLayers];
  int64_t rows = 0;  // rows in the parameter memory
  int64_t size = 0;  // floats in the flat layout
};

// Makes `net` for an input of `in` features, `hidden` widths `widths[0..hidden)` and `heads`
// output widths `outs[0..heads)`; false (net untouched) when a size is outside the module's.
// constexpr: a synthesized top makes its network when it is compiled (every bound a constant).
constexpr bool MakeNet(int in, const int* widths, int hidden, const int* outs, int heads,
                       Net* net) {
  if (hidden < 0 || hidden > kMaxHidden || heads < 1 || heads > 2) return false;
  Net n;
  n.hidden = hidden;
  n.heads = heads;
  int prev = in;
  for (int l = 0; l < hidden + heads; ++l) {
    const int out = l < hidden ? widths[l] : outs[l - hidden];
    const int from = l < hidden ? prev : (hidden ? widths[hidden - 1] : in);
    if (from < 1 || from > kMaxWidth || out < 1 || out > kMaxWidth) return false;
    Dense& d = n.layer[l];
    d.in = from, d.out = out, d.blocks = Blocks(out);
    d.w = n.rows, d.b = n.rows + int64_t(from) * d.blocks;
    d.flat = n.size;
    n.rows = d.b + d.blocks;
    n.size += int64_t(from) * out + out;
    if (l < hidden) prev = out;
  }
  *net = n;
  return true;
}

// Calls f(row, base, width) for every row of `net`'s parameter memory, a layer's rows in order
// (input i's block j is row d.w + i blocks + j, the bias input i == in): the row's live lanes
// are the `width` floats of the flat layout from `base` (input i's outputs, then the bias's,
// follow one another there too). Each layer one pipelined loop, a row an iteration: on the
// board the load's and the store's, a row's kPOut floats over AXI in 4 beats
// (learner_cycles.memory_load_cycles counts them).
template <typename F>
inline void ForEachRow(const Net& net, F f) {
  for (int l = 0; l < net.hidden + net.heads; ++l) {
    const Dense& d = net.layer[l];
    for (int64_t k = 0, i = 0, j = 0; k < int64_t(d.in + 1) * d.blocks; ++k) {
#pragma HLS PIPELINE II = 4
      const int64_t base = d.flat + i * d.out + j * kPOut;
      f(d.w + k, base, d.out - j * kPOut < kPOut ? int(d.out - j * kPOut) : kPOut);
      if (++j == d.blocks) j = 0, ++i;
    }
  }
}

// flat [net.size] (flax's layout) -> rows [net.rows][kPOut], the padding +0 (the load).
inline void PackParams(const Net& net, const float* flat, Row* rows) {
  ForEachRow(net, [&](int64_t r, int64_t base, int width) {
    for (int q = 0; q < kPOut; ++q) rows[r][q] = q < width ? flat[base + q] : 0.0f;
  });
}

// rows [net.rows][kPOut] -> flat [net.size] (the store).
inline void UnpackParams(const Net& net, const Row* rows, float* flat) {
  ForEachRow(net, [&](int64_t r, int64_t base, int width) {
    for (int q = 0; q < DRLHET_LANES(kPOut, width); ++q) {
      if (q < width) flat[base + q] = rows[r][q];
    }
  });
}

// Calls f(flat offset, row, lane) for every parameter of `net`, in the flat layout's order
// (the layout stated once more, element by element: the tests check the loops above by it).
template <typename F>
inline void ForEachParam(const Net& net, F f) {
  for (int l = 0; l < net.hidden + net.heads; ++l) {
    const Dense& d = net.layer[l];
    for (int i = 0; i <= d.in; ++i) {  // i == in: the bias
      const int64_t row = i < d.in ? d.w + int64_t(i) * d.blocks : d.b;
      const int64_t flat = d.flat + int64_t(i) * d.out;
      for (int o = 0; o < d.out; ++o) f(flat + o, row + o / kPOut, o % kPOut);
    }
  }
}

// x [batch][cols] (row-major) -> the Tile's rows [0, batch), columns [0, cols).
inline void PackTile(const float* x, int batch, int cols, Tile& t) {
  for (int row = 0; row < batch; ++row) {
    for (int k = 0; k < cols; ++k) t[row][k] = x[int64_t(row) * cols + k];
  }
}

}  // namespace learner
}  // namespace drlhet

#endif  // DRLHET_LEARNER_MEMORY_H_
