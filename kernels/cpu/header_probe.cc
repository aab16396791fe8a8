// The shared header's per-element logic (drlhet/sum_tree.h), exported one node at a time so that
// tests can check it against a NumPy statement of the reference with ctypes
// (tests/backends/test_kernel_header.py). Not used by the kernels themselves.
//   drlhet_choose_child  ChooseChild on one node of k children, and NextTarget after it
//   drlhet_seq_sum       SeqSum of k >= 1 children
#include <cstdint>

#include "drlhet/sum_tree.h"

extern "C" {

// Returns 0, or -1 (writing nothing) when k is outside [2, kMaxBranching]. K = 16 runs the
// compile-time-K instantiation the kernels use for it, any other K the run-time one.
int drlhet_choose_child(const float* children, int k, float u, int32_t* child, float* left,
                        float* value, float* total, float* next_u) {
  if (k < 2 || k > drlhet::kMaxBranching) return -1;
  const drlhet::Choice c = k == 16 ? drlhet::ChooseChild<16>(children, k, u)
                                   : drlhet::ChooseChild<0>(children, k, u);
  *child = c.child;
  *left = c.left;
  *value = c.value;
  *total = c.total;
  *next_u = drlhet::NextTarget(u, c.left);
  return 0;
}

float drlhet_seq_sum(const float* c, int k) { return drlhet::SeqSum(c, k); }

}  // extern "C"
