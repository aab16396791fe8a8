// The synthesized replay-management module: rmm_top, one dataflow region of
//   Front -> Level<0> -> ... -> Level<depth - 1> -> Back
// joined by FIFOs. Each process owns its memory (on-chip, static: it persists between
// commands): Front the root and the leaf table, Level<L> the nodes of level L + 1 as
// ap_uint of that level's width (level_bits), in K banks so that the K children of a node are
// read in one cycle (the leaves two a word, in K / 2 banks: LevelMem). Every process's loop is pipelined (the pragmas ask
// for II = 1; the read-modify-writes of the memories and the 32-bit AXI ports hold it at 3 and 2:
// drlhet/dse/devices/rmm_cycles.py); the levels handle writes and samples in one stream of
// items, so a level's memory has one owner, and Front and Back run one loop per op (each its
// own access pattern of its AXI buffer). Front alone reads `cmd`: it hands the op and B to Back
// on a FIFO of their own. A command ends with an end item that carries the root and the
// clamped count to Back. The info op (rmm.h's kInfo) sends the end item alone, carrying the
// host's nonce; Back answers it after its loop, from the macros below, so the loops' II is not
// touched (the cycle model's steady state is that of write, sample and read only).
//
// Configuration (compile time): RMM_K in {4, 8, 16, 32, 64}, RMM_CAPACITY leaves (default 2^22,
// whose memories fit an Alveo U250's 1,280 URAM blocks as bound here, two leaves a 72-bit row:
// 1,152 blocks at K 16; drlhet.backends.rmm_spec.uram_blocks counts them), RMM_FRAC_BITS;
// the info op reports all three (the host refuses a bitstream built for other values).
// Host protocol: rmm.h (the same words the C-simulation serves). Vitis HLS: run_hls.tcl; v++:
// u250.cfg. The g++ testbench (rmm_tb.cpp) runs this file as it is.
#include "rmm_top.h"

namespace drlhet {
namespace rmm {
namespace top {

// Bits of a node of `level` (level_bits in drlhet/replay/fixed_point.py).
constexpr int LevelWidth(int level) {
  return 32 + (kDepth - level) * Log2(K) < 64 ? 32 + (kDepth - level) * Log2(K) : 64;
}

enum ItemOp { kItemWrite = 0, kItemSample = 1, kItemEnd = 2, kItemRead = 3 };

// What flows between the processes: a write (leaf index, difference, new leaf), a probe (node
// on the receiving level, target, the leaf's word at the end) or the end of a command (index:
// the clamped count, or the info op's nonce; x: the root).
struct Item {
  ap_uint<2> op;
  ap_uint<5> level;  // a read: the level of the slot in `index`
  uint32_t index;
  node_t x;
  leaf_t q;
};

// Two 32-bit leaves a 64-bit word (one URAM row: two leaves a 72-bit row, not one), leaf 2w in
// the low half of word w, leaf 2w + 1 in the high half.
typedef ap_uint<64> pair_t;
inline leaf_t HalfOf(const pair_t& w, uint32_t i) {
  return (i & 1) ? leaf_t(w.range(63, 32)) : leaf_t(w.range(31, 0));
}
inline void SetHalf(pair_t* w, uint32_t i, leaf_t q) {
  if (i & 1) {
    w->range(63, 32) = q;
  } else {
    w->range(31, 0) = q;
  }
}

// The front's memory: the root and its copy of the leaves, two a word.
struct FrontMem {
  node_t root_;
  pair_t table_[kLay.widths[kDepth] / 2];  // a level's width is a multiple of K, so even
  node_t root() const { return root_; }
  void set_root(node_t v) { root_ = v; }
  leaf_t table(uint32_t i) const { return HalfOf(table_[i >> 1], i); }
  void set_table(uint32_t i, leaf_t q) {  // read-modify-write of the pair (the write's II 3)
    pair_t w = table_[i >> 1];
    SetHalf(&w, i, q);
    table_[i >> 1] = w;
  }
};

// Level L's memory: the nodes of level L + 1 in K banks (node s in bank s % K, row s / K, so a
// node's K children are one row of every bank); the leaves, for the last level, two siblings a
// word in K / 2 banks (children j and j + 1 of a node share a word: again one row of each).
template <int L, bool kLeaves = (L + 1 == kDepth)>
struct LevelMem {
  static constexpr int kBanks = K;
  ap_uint<LevelWidth(L + 1)> mem[K][kLay.widths[L + 1] / K];
  void add(int, int64_t slot, node_t d) {  // exact mod 2^width
    mem[slot % K][slot / K] = mem[slot % K][slot / K] + d;
  }
  void set_leaf(uint32_t i, leaf_t q) { mem[i % K][i / K] = q; }  // (the leaves' level only)
  node_t node(int, int64_t slot) const { return mem[slot % K][slot / K]; }
  void children(int, int64_t node, node_t* out) const {
    for (int j = 0; j < K; ++j) {
#pragma HLS UNROLL
      out[j] = mem[j][node];
    }
  }
};
template <int L>
struct LevelMem<L, true> {
  static constexpr int kBanks = K / 2;
  pair_t mem[K / 2][kLay.widths[L + 1] / K];
  leaf_t leaf(int64_t i) const {
    const int64_t w = i >> 1;
    return HalfOf(mem[w % (K / 2)][w / (K / 2)], uint32_t(i));
  }
  void set_leaf(uint32_t i, leaf_t q) {  // read-modify-write of the pair
    const int64_t w = i >> 1;
    pair_t v = mem[w % (K / 2)][w / (K / 2)];
    SetHalf(&v, i, q);
    mem[w % (K / 2)][w / (K / 2)] = v;
  }
  void add(int, int64_t slot, node_t d) { set_leaf(uint32_t(slot), leaf(slot) + leaf_t(d)); }
  node_t node(int, int64_t slot) const { return leaf(slot); }
  void children(int, int64_t node, node_t* out) const {
    for (int j = 0; j < K; ++j) {
#pragma HLS UNROLL
      out[j] = HalfOf(mem[j / 2][node], uint32_t(j));
    }
  }
};

// What Front tells Back of the command, once, before its items (so that `cmd` has one reader in
// the dataflow region): the op and B (0 for a command that does nothing).
struct Header {
  uint32_t op;
  uint32_t b;
};

// The end of a command: the root and the clamped count (or the info op's nonce).
inline Item EndItem(uint32_t index, node_t root) {
  Item end;
  end.op = kItemEnd;
  end.level = 0;
  end.index = index;
  end.x = root;
  end.q = 0;
  return end;
}

// Front's record of its iterations for the testbench's stepped cycle count (rmm_top.h's
// TraceFrontItem): compiled in only with DRLHET_RMM_TRACE.
#ifdef DRLHET_RMM_TRACE
#define DRLHET_RMM_ITEM(emitted) TraceFrontItem(emitted)
#else
#define DRLHET_RMM_ITEM(emitted) ((void)0)
#endif

// A write's entries (in[j], in[b + j]): one loop, its II the leaf table's read-modify-write.
uint32_t FrontWrites(FrontMem& mem, const uint32_t* in, uint32_t b, node_t* root,
                     Stream<Item>& out) {
  uint32_t clamped = 0;
front_write:
  for (uint32_t j = 0; j < b; ++j) {
#pragma HLS PIPELINE II = 1
    Delta d;
    bool c = false;
    const bool kept = WriteFrontItem(mem, kLay, RMM_FRAC_BITS, in[j], in[b + j], root, &d, &c);
    DRLHET_RMM_ITEM(kept);
    if (!kept) continue;
    clamped += c ? 1 : 0;
    Item it;
    it.op = kItemWrite;
    it.level = 0;
    it.index = d.index;
    it.x = d.delta;
    it.q = d.q;
    out.write(it);
  }
  return clamped;
}

// A sample's uniform words (in[2j], in[2j + 1]) as targets under the root.
void FrontSamples(const uint32_t* in, uint32_t b, bool stratified, node_t root,
                  Stream<Item>& out) {
front_sample:
  for (uint32_t j = 0; j < b; ++j) {
#pragma HLS PIPELINE II = 1
    Item it;
    it.op = kItemSample;
    it.level = 0;
    it.index = 0;
    it.x = Target(root, in[2 * j], in[2 * j + 1], j, b, stratified);
    it.q = 0;
    DRLHET_RMM_ITEM(true);
    out.write(it);
  }
}

// A read's slots (in[j]) of `level`.
void FrontReads(const uint32_t* in, uint32_t b, uint32_t level, node_t root, Stream<Item>& out) {
front_read:
  for (uint32_t j = 0; j < b; ++j) {
#pragma HLS PIPELINE II = 1
    Item it;
    it.op = kItemRead;
    it.level = level;
    it.index = in[j];
    it.x = (level == 0 && in[j] == 0) ? root : node_t(0);
    it.q = 0;
    DRLHET_RMM_ITEM(true);
    out.write(it);
  }
}

// The command's only reader of `cmd`: its items, one loop per op (each with its own access
// pattern of `in`, so each can burst and keep its own II), then the end item; the op and B to
// Back on `header`.
void Front(const uint32_t* cmd, const uint32_t* in, Stream<Item>& out, Stream<Header>& header) {
  static FrontMem mem;
#pragma HLS BIND_STORAGE variable = mem.table_ type = ram_2p impl = uram
  const uint32_t op = cmd[0], level = cmd[2];
  // a read of a level past the leaves is a bad command, as in Serve (Item::level would wrap it)
  const bool known = op == kWrite || op == kSample || (op == kRead && level <= kDepth);
  const uint32_t b = known ? cmd[1] : 0;
  const bool stratified = (level & kStratified) != 0;
  Header h;
  h.op = op;
  h.b = op == kInfo ? cmd[1] : b;
  header.write(h);
  const uint32_t nonce = (op == kInfo && cmd[1] == 1) ? in[0] : 0u;  // once, outside a loop
  node_t root = mem.root();
  uint32_t clamped = 0;
  if (op == kWrite) {
    clamped = FrontWrites(mem, in, b, &root, out);
  } else if (op == kRead) {
    FrontReads(in, b, level, root, out);
  } else {
    FrontSamples(in, b, stratified, root, out);
  }
  mem.set_root(root);
  out.write(EndItem(op == kInfo ? nonce : clamped, root));
}

template <int L>
void Level(Stream<Item>& in, Stream<Item>& out) {
  static LevelMem<L> mem;
#pragma HLS ARRAY_PARTITION variable = mem.mem complete dim = 1
#pragma HLS BIND_STORAGE variable = mem.mem type = ram_2p impl = uram
level:
  for (;;) {
#pragma HLS PIPELINE II = 1
    Item it = in.read();
    if (it.op == kItemWrite) {
      Delta d;
      d.index = it.index;
      d.delta = it.x;
      d.q = it.q;
      WriteLevelItem<K>(mem, kLay, L, d);
    } else if (it.op == kItemSample) {
      Probe p;
      p.node = it.index;
      p.t = it.x;
      p.value = it.q;
      SampleLevelItem<K>(mem, L, &p);
      it.index = p.node;
      it.x = p.t;
      it.q = p.value;
    } else if (it.op == kItemRead && it.level == L + 1 && it.index < kLay.widths[L + 1]) {
      it.x = mem.node(L + 1, it.index);
    }
    out.write(it);
    if (it.op == kItemEnd) break;
  }
}

template <int L>
struct Levels {
  static void Run(Stream<Item>* s) {
#pragma HLS INLINE
    Level<L>(s[L], s[L + 1]);
    Levels<L + 1>::Run(s);
  }
};
template <>
struct Levels<kDepth> {
  static void Run(Stream<Item>*) {}
};

// A sample's drawn items: indices to out[j], leaf words to out[b + j]; returns the end item.
Item BackSamples(Stream<Item>& in, uint32_t b, uint32_t* out) {
  uint32_t j = 0;
back_sample:
  for (;;) {
#pragma HLS PIPELINE II = 1
    const Item it = in.read();
    if (it.op == kItemEnd) return it;
    out[j] = it.index;
    out[b + j] = uint32_t(it.q);
    ++j;
  }
}

// A read's nodes, two words each to out[2j], out[2j + 1]; returns the end item.
Item BackReads(Stream<Item>& in, uint32_t* out) {
  uint32_t j = 0;
back_read:
  for (;;) {
#pragma HLS PIPELINE II = 1
    const Item it = in.read();
    if (it.op == kItemEnd) return it;
    out[2 * j] = uint32_t(it.x >> 32);
    out[2 * j + 1] = uint32_t(it.x & 0xFFFFFFFFu);
    ++j;
  }
}

// A write's items (passed on by the levels, nothing to answer) up to its end item, returned.
Item BackDrain(Stream<Item>& in) {
back_drain:
  for (;;) {
#pragma HLS PIPELINE II = 1
    const Item it = in.read();
    if (it.op == kItemEnd) return it;
  }
}

// The command's answer, from Front's header and the items: one loop per op.
void Back(Stream<Header>& header, Stream<Item>& in, uint32_t* out) {
  const Header h = header.read();
  if (h.op == kSample) {
    const Item end = BackSamples(in, h.b, out);
    out[2 * h.b] = uint32_t(end.x >> 32);
    out[2 * h.b + 1] = uint32_t(end.x & 0xFFFFFFFFu);
  } else if (h.op == kRead) {
    BackReads(in, out);
  } else {
    const Item end = BackDrain(in);  // a write's, an info op's or an unknown op's end item
    if (h.op == kWrite) out[0] = end.index;
    // the info op's six words
    if (h.op == kInfo && h.b == 1) InfoWords(K, RMM_CAPACITY, RMM_FRAC_BITS, end.index, out);
  }
}

}  // namespace top
}  // namespace rmm
}  // namespace drlhet

// A command with an unknown op, a read of a level past the leaves or an info op of B != 1 does
// nothing (Serve answers -1); a stratified B > 65536 is refused by the host.
extern "C" void rmm_top(const uint32_t* cmd, const uint32_t* in, uint32_t* out) {
#pragma HLS INTERFACE m_axi port = cmd offset = slave bundle = gmem0 depth = 3
#pragma HLS INTERFACE m_axi port = in offset = slave bundle = gmem0 depth = 8192
#pragma HLS INTERFACE m_axi port = out offset = slave bundle = gmem1 depth = 8194
#pragma HLS INTERFACE s_axilite port = return
  using namespace drlhet::rmm;
#pragma HLS DATAFLOW
  Stream<top::Item> s[top::kDepth + 1];
  Stream<top::Header> header;  // Front to Back: the op and B, read from `cmd` by Front alone
#pragma HLS STREAM variable = s depth = RMM_FIFO_DEPTH
#pragma HLS STREAM variable = header depth = 2
  top::Front(cmd, in, s[0], header);
  top::Levels<0>::Run(s);
  top::Back(header, s[top::kDepth], out);
}
