// The replay module's tree memory as plain 32-bit word arrays, the layout of a FixedTreeState
// (drlhet/replay/fixed_point.py): leaves u32[widths[depth]], inner nodes as u32 word pairs
// hi/lo [offsets[depth]] in level order. The C-simulation serves commands on it (views of
// XLA buffers), and so does the testbench's model of the module. The front's leaf table and
// the last stage's leaves are one array here (two on the chip, always equal: writing q twice
// is idempotent).
#ifndef DRLHET_RMM_WORD_TREE_H_
#define DRLHET_RMM_WORD_TREE_H_

#include <cstdint>

#include "rmm.h"

namespace drlhet {
namespace rmm {

class WordTree {
 public:
  WordTree(const Layout& lay, uint32_t* leaves, uint32_t* hi, uint32_t* lo)
      : lay_(lay), leaves_(leaves), hi_(hi), lo_(lo) {}

  node_t root() const { return Word(0); }
  void set_root(node_t v) { SetWord(0, v); }
  leaf_t table(uint32_t i) const { return leaves_[i]; }
  void set_table(uint32_t i, leaf_t q) { leaves_[i] = uint32_t(q); }
  void set_leaf(uint32_t i, leaf_t q) { leaves_[i] = uint32_t(q); }
  node_t node(int level, int64_t slot) const {
    return level == lay_.depth ? node_t(leaves_[slot]) : Word(lay_.offsets[level] + slot);
  }
  void add(int level, int64_t slot, node_t d) {
    const int64_t at = lay_.offsets[level] + slot;
    SetWord(at, Word(at) + d);
  }
  void children(int level, int64_t node, node_t* out) const {
    const int k = lay_.branching;
    const int64_t first = node * k;
    if (level + 1 == lay_.depth) {
      for (int j = 0; j < k; ++j) out[j] = leaves_[first + j];
    } else {
      const int64_t at = lay_.offsets[level + 1] + first;
      for (int j = 0; j < k; ++j) out[j] = Word(at + j);
    }
  }

 private:
  node_t Word(int64_t at) const { return (node_t(hi_[at]) << 32) | node_t(lo_[at]); }
  void SetWord(int64_t at, node_t v) {
    hi_[at] = uint32_t(v >> 32);
    lo_[at] = uint32_t(v & 0xFFFFFFFFu);
  }

  Layout lay_;
  uint32_t* leaves_;
  uint32_t* hi_;
  uint32_t* lo_;
};

}  // namespace rmm
}  // namespace drlhet

#endif  // DRLHET_RMM_WORD_TREE_H_
