// The replay-management module (RMM): a fixed-point K-ary sum tree as a chain of dataflow
// stages, one per tree level. Kernel logic only: no Vitis header (ap_uint comes from the open
// ap_types headers, the FIFOs from stream.h), so the same source is synthesized by Vitis HLS
// (rmm_top.cpp), run by the g++ testbench (rmm_tb.cpp) and served inside XLA programs as the
// C-simulation (kernels/fpga_sim/rmm_ffi.cc).
//
// Numbers and batch semantics are those of drlhet/replay/fixed_point.py, bit for bit:
//   * leaves: uint32 q = round_half_even(v * 2^F) of a float32 v = p^alpha; a positive normal v
//     below half a step -> 1, v >= 2^(32-F) -> 2^32 - 1 (both counted as clamped);
//   * inner nodes: exact integer sums (ap_uint<64> here; the synthesized design declares the
//     narrower widths of level_bits() per level);
//   * targets: integers from the root T and 64 random bits r_j per draw, stratified
//     t_j = floor((j T + floor(T r_j / 2^64)) / B), i.i.d. t_j = floor(T r_j / 2^64);
//   * a descent step takes the child c with prefix(c) <= t < prefix(c + 1), t -= prefix(c);
//     a target at or past the node's sum (an empty tree) takes the last non-zero child, else 0.
//
// Dataflow (docs/design.md section 3, "The FPGA replay module"): everything flows from the root
// to the leaves, so each level's memory belongs to one stage.
//   front  : holds the root and the leaf table. A write reads the old leaf, stores the new one,
//            adds the exact difference (mod 2^64) to the root and sends (index, difference, q)
//            down. A sample turns the random words into targets and sends (node 0, t) down.
//   level l: holds the nodes of level l + 1 (the children of level l). A write adds the
//            difference to the ancestor of the leaf on level l + 1 (the last stage stores q).
//            A sample reads the K children of its node in one cycle (the array is partitioned
//            by K), picks one, and sends (child, t - prefix) down.
// Writes are applied one after the other in batch order, so among duplicates the last write
// wins, and the tree is the exact sum of its leaves after every write (no truncated
// differences, no drift). Improvements over the authors' design (Zhang et al., TPDS 2023,
// Sec. 4): exact integer differences, any K in {4..64}, random words from the caller (no LFSR
// whose successive draws are correlated), writes to any leaf (not only the last sampled batch).
#ifndef DRLHET_RMM_H_
#define DRLHET_RMM_H_

#include <ap_int.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "stream.h"

namespace drlhet {
namespace rmm {

typedef ap_uint<32> leaf_t;
typedef ap_uint<64> node_t;
typedef ap_uint<128> wide_t;

const int kMaxDepth = 16;                // levels below the root (K = 4, 2^30 leaves: 15)
const int64_t kMaxCapacity = 1LL << 30;  // drlhet/backends/rmm_spec.py's MAX_CAPACITY
const uint32_t kDropped = 0xFFFFFFFFu;  // an index the module skips (>= every capacity)
const int kMaxStratifiedBatch = 1 << 16;

// Host protocol (the same words for the C-simulation, pynq and pyxrt):
//   cmd[0] op, cmd[1] batch B, cmd[2] flags (bit 0: stratified targets)
//   kWrite : in  = indices u32[B] (kDropped: skipped), then float32 bits of v u32[B]
//            out = [clamped writes in this batch]
//   kSample: in  = random words u32[2B] (draw j: in[2j] high, in[2j + 1] low)
//            out = indices u32[B], values u32[B], root high, root low
//   kRead  : cmd[2] = a level (0: the root's, depth: the leaves), in = B slots of that level
//            out = their values u32[2B] (slot j: out[2j] high, out[2j + 1] low): a host reads
//            the tree back (checkpoints, tests); the leaves alone determine every sum
//   kInfo  : B = 1, in = [a nonce]; out = [kInfoMagic, the nonce, kProtocolVersion, K,
//            capacity, frac_bits]: the build (compile-time constants of a bitstream), which a
//            host checks once before its first command. No item flows through the levels. A
//            build older than the op (version 0) leaves out untouched: the nonce tells a stale
//            buffer from an answer.
enum Op { kWrite = 1, kSample = 2, kRead = 3, kInfo = 4 };
const int kCmdWords = 3;
const uint32_t kStratified = 1u;
const uint32_t kProtocolVersion = 1;      // bumped when any op's words change
const uint32_t kInfoMagic = 0x524D4D49u;  // "RMMI"
const int kInfoWords = 6;

constexpr bool SupportedBranching(int k) { return k == 4 || k == 8 || k == 16 || k == 32 || k == 64; }

constexpr int Log2(int k) {
  int s = 0;
  while ((1 << s) < k) ++s;
  return s;
}

// The level layout of drlhet/replay/sum_tree.py::layout: level 0 is the root's level (K slots,
// the root in slot 0), level `depth` the leaves; each level's width is its node count rounded
// up to a multiple of K; offsets index the level-order array of the inner levels.
struct Layout {
  int branching;
  int depth;
  int64_t capacity;
  int64_t offsets[kMaxDepth + 1];
  int64_t widths[kMaxDepth + 1];
};

// The layout of `capacity` leaves (a constant expression: the synthesized design's sizes);
// depth -1 when K is not supported or the capacity is outside [1, kMaxCapacity].
constexpr Layout LayoutOf(int64_t capacity, int branching) {
  Layout lay{branching, -1, capacity, {}, {}};
  if (!SupportedBranching(branching) || capacity < 1 || capacity > kMaxCapacity) return lay;
  int64_t counts[kMaxDepth + 2] = {};
  int n = 0;
  counts[n++] = capacity;
  while (counts[n - 1] > 1 || n == 1) {
    if (n > kMaxDepth) return lay;
    counts[n] = (counts[n - 1] + branching - 1) / branching;
    ++n;
  }
  lay.depth = n - 1;
  int64_t offset = 0;
  for (int level = 0; level <= lay.depth; ++level) {
    const int64_t c = counts[lay.depth - level];
    lay.widths[level] = (c + branching - 1) / branching * branching;
    lay.offsets[level] = offset;
    offset += lay.widths[level];
  }
  return lay;
}

// Fills `lay`; false when K is not supported or the capacity is outside [1, kMaxCapacity].
inline bool MakeLayout(int64_t capacity, int branching, Layout* lay) {
  *lay = LayoutOf(capacity, branching);
  return lay->depth >= 0;
}

// Bits a node of `level` needs: 32 + (depth - level) * log2 K, at most 64.
inline int LevelBits(const Layout& lay, int level) {
  const int bits = 32 + (lay.depth - level) * Log2(lay.branching);
  return bits < 64 ? bits : 64;
}

struct Quantized {
  leaf_t q;
  bool clamped;
};

// v (float32) -> the leaf word; a negative, NaN or infinite v gives 0 (the host refuses them).
inline Quantized Quantize(float v, int frac_bits) {
#pragma HLS INLINE
  const float scaled = std::nearbyint(v * std::ldexp(1.0f, frac_bits));  // exact scaling
  const bool ok = std::isfinite(v) && v >= 0.0f;
  const bool high = scaled >= 4294967296.0f;
  const bool low = v >= 1.17549435e-38f && scaled == 0.0f;  // a positive normal v: never 0
  Quantized out;
  if (!ok) {
    out.q = 0;
  } else if (high) {
    out.q = 0xFFFFFFFFu;
  } else if (low) {
    out.q = 1;
  } else {
    out.q = static_cast<uint32_t>(scaled);
  }
  out.clamped = ok && (high || low);
  return out;
}

inline float BitsToFloat(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// The item a write sends down the levels.
struct Delta {
  uint32_t index;
  node_t delta;  // q - old leaf, mod 2^64
  leaf_t q;
};

// The item a sample sends down the levels.
struct Probe {
  uint32_t node;  // node of the stage's level
  node_t t;       // target within that node
  leaf_t value;   // the leaf's word, after the last stage
};

// One descent step over the K children of a node (read together: a partitioned array).
// Written as the serial prefix sum for clarity; the synthesized stage computes the same
// prefix sums as a log2(K)-deep adder tree (sums are exact integers: any order is equal).
template <int K>
inline void DescendStep(const node_t children[K], node_t* t, int* child, leaf_t* value) {
#pragma HLS INLINE
  node_t acc = 0, left = 0, left_nz = 0;
  int count = 0, last_nz = 0;
  for (int j = 0; j < K; ++j) {
#pragma HLS UNROLL
    const node_t c = children[j];
    if (c != 0) {
      left_nz = acc;
      last_nz = j;
    }
    acc += c;
    if (acc <= *t) {
      ++count;
      left = acc;
    }
  }
  const bool past = count >= K;
  *child = past ? last_nz : count;
  *t -= past ? left_nz : left;
  *value = children[*child].range(31, 0);
}

// The target of draw j of B from the root and its random words (r = hi * 2^32 + lo).
inline node_t Target(node_t root, uint32_t hi, uint32_t lo, uint32_t j, uint32_t b,
                     bool stratified) {
#pragma HLS INLINE
  const node_t r = (node_t(hi) << 32) | node_t(lo);
  const node_t u = (wide_t(root) * wide_t(r)) >> 64;  // floor(T r / 2^64) in [0, T)
  if (!stratified) return u;
  return (wide_t(j) * wide_t(root) + wide_t(u)) / wide_t(b);  // in stratum j
}

// --- The stages, over a tree memory `Tree` (the synthesized design's on-chip arrays, or the
// C-simulation's view of XLA buffers). Tree provides:
//   node_t root(); void set_root(node_t);
//   leaf_t table(uint32_t i); void set_table(uint32_t i, leaf_t q);      (the front's copy)
//   void add(int level, int64_t slot, node_t d);    (1 <= level < depth)
//   void set_leaf(uint32_t i, leaf_t q);            (the last stage's copy)
//   void children(int level, int64_t node, node_t out[K]);  (children on level + 1)
//   node_t node(int level, int64_t slot);           (a read-back; 1 <= level <= depth)

// Front of a write, one entry: false when it is skipped (kDropped or out of range), else the
// leaf table holds q, the root its new sum, and `d` goes down the levels.
template <class Tree>
bool WriteFrontItem(Tree& tree, const Layout& lay, int frac_bits, uint32_t i, uint32_t vbits,
                    node_t* root, Delta* d, bool* clamped) {
#pragma HLS INLINE
  if (int64_t(i) >= lay.capacity) return false;
  const Quantized z = Quantize(BitsToFloat(vbits), frac_bits);
  const leaf_t old = tree.table(i);
  tree.set_table(i, z.q);
  d->index = i;
  d->delta = node_t(z.q) - node_t(old);
  d->q = z.q;
  *root += d->delta;
  *clamped = z.clamped;
  return true;
}

// Level `level` of a write, one entry: the leaf's ancestor on level + 1 gets the difference
// (the last level stores q).
template <int K, class Tree>
void WriteLevelItem(Tree& tree, const Layout& lay, int level, const Delta& d) {
#pragma HLS INLINE
  if (level + 1 == lay.depth) {
    tree.set_leaf(d.index, d.q);
  } else {
    tree.add(level + 1, int64_t(d.index >> (Log2(K) * (lay.depth - level - 1))), d.delta);
  }
}

// Level `level` of a sample, one probe: the K children of its node, one descent step.
template <int K, class Tree>
void SampleLevelItem(Tree& tree, int level, Probe* p) {
#pragma HLS INLINE
  node_t ch[K];
#pragma HLS ARRAY_PARTITION variable = ch complete
  tree.children(level, int64_t(p->node), ch);
  int child = 0;
  DescendStep<K>(ch, &p->t, &child, &p->value);
  p->node = p->node * K + uint32_t(child);
}

// Front of a write: n entries in batch order; returns the number of clamped writes.
template <class Tree>
int WriteFront(Tree& tree, const Layout& lay, int frac_bits, const uint32_t* indices,
               const uint32_t* vbits, int n, Stream<Delta>& out) {
  int clamped = 0;
  node_t root = tree.root();
write_front:
  for (int j = 0; j < n; ++j) {
#pragma HLS PIPELINE II = 1
    Delta d;
    bool c = false;
    if (WriteFrontItem(tree, lay, frac_bits, indices[j], vbits[j], &root, &d, &c)) {
      clamped += c ? 1 : 0;
      out.write(d);
    }
  }
  tree.set_root(root);
  return clamped;
}

// Level `level` of a write over n entries.
template <int K, class Tree>
void WriteLevel(Tree& tree, const Layout& lay, int level, int n, Stream<Delta>& in,
                Stream<Delta>& out, bool last) {
write_level:
  for (int j = 0; j < n; ++j) {
#pragma HLS PIPELINE II = 1
    const Delta d = in.read();
    WriteLevelItem<K>(tree, lay, level, d);
    if (!last) out.write(d);
  }
}

// Front of a sample: B targets from the root.
template <class Tree>
node_t SampleFront(Tree& tree, const uint32_t* words, int b, bool stratified,
                   Stream<Probe>& out) {
  const node_t root = tree.root();
sample_front:
  for (int j = 0; j < b; ++j) {
#pragma HLS PIPELINE II = 1
    Probe p;
    p.node = 0;
    p.t = Target(root, words[2 * j], words[2 * j + 1], uint32_t(j), uint32_t(b), stratified);
    p.value = 0;
    out.write(p);
  }
  return root;
}

// Level `level` of a sample over b probes.
template <int K, class Tree>
void SampleLevel(Tree& tree, int level, int b, Stream<Probe>& in, Stream<Probe>& out) {
sample_level:
  for (int j = 0; j < b; ++j) {
#pragma HLS PIPELINE II = 1
    Probe p = in.read();
    SampleLevelItem<K>(tree, level, &p);
    out.write(p);
  }
}

// The value of slot `i` of `level` (0 past the level's width).
template <class Tree>
node_t ReadNode(Tree& tree, const Layout& lay, int level, uint32_t i) {
  if (int64_t(i) >= lay.widths[level]) return 0;
  return level == 0 ? (i == 0 ? tree.root() : node_t(0)) : tree.node(level, int64_t(i));
}

// The info op's answer (kInfo) for a build of K `branching`, `capacity` leaves and `frac_bits`.
inline void InfoWords(int branching, int64_t capacity, int frac_bits, uint32_t nonce,
                      uint32_t* out) {
  out[0] = kInfoMagic;
  out[1] = nonce;
  out[2] = kProtocolVersion;
  out[3] = uint32_t(branching);
  out[4] = uint32_t(capacity);  // <= kMaxCapacity
  out[5] = uint32_t(frac_bits);
}

// Serves one command with the levels run one after the other (the C-simulation's order:
// Vitis runs a dataflow region's stages so too). Returns 0, or -1 for a bad command.
template <int K, class Tree>
int Serve(Tree& tree, const Layout& lay, int frac_bits, const uint32_t* cmd, const uint32_t* in,
          uint32_t* out) {
  const int b = int(cmd[1]);
  if (b < 0) return -1;
  if (cmd[0] == kInfo) {
    if (b != 1) return -1;
    InfoWords(K, lay.capacity, frac_bits, in[0], out);
    return 0;
  }
  if (cmd[0] == kWrite) {
    Stream<Delta> s[2];
    const int clamped = WriteFront(tree, lay, frac_bits, in, in + b, b, s[0]);
    const int n = int(s[0].size());
    for (int level = 0; level < lay.depth; ++level)
      WriteLevel<K>(tree, lay, level, n, s[level % 2], s[(level + 1) % 2],
                    level + 1 == lay.depth);
    out[0] = uint32_t(clamped);
    return 0;
  }
  if (cmd[0] == kSample) {
    const bool stratified = (cmd[2] & kStratified) != 0;
    if (stratified && b > kMaxStratifiedBatch) return -1;
    Stream<Probe> s[2];
    const node_t root = SampleFront(tree, in, b, stratified, s[0]);
    for (int level = 0; level < lay.depth; ++level)
      SampleLevel<K>(tree, level, b, s[level % 2], s[(level + 1) % 2]);
    Stream<Probe>& done = s[lay.depth % 2];
    for (int j = 0; j < b; ++j) {
      const Probe p = done.read();
      out[j] = p.node;
      out[b + j] = uint32_t(p.value);
    }
    out[2 * b] = uint32_t(root >> 32);
    out[2 * b + 1] = uint32_t(root & 0xFFFFFFFFu);
    return 0;
  }
  if (cmd[0] == kRead) {
    const int level = int(cmd[2]);
    if (level < 0 || level > lay.depth) return -1;
    for (int j = 0; j < b; ++j) {
      const node_t v = ReadNode(tree, lay, level, in[j]);
      out[2 * j] = uint32_t(v >> 32);
      out[2 * j + 1] = uint32_t(v & 0xFFFFFFFFu);
    }
    return 0;
  }
  return -1;
}

}  // namespace rmm
}  // namespace drlhet

#endif  // DRLHET_RMM_H_
