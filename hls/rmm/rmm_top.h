// The replay module's compile-time configuration and its top function (rmm_top.cpp).
#ifndef DRLHET_RMM_TOP_H_
#define DRLHET_RMM_TOP_H_

#include <cstdint>

#include "rmm.h"

#ifndef RMM_K
#define RMM_K 16
#endif
#ifndef RMM_CAPACITY
#define RMM_CAPACITY 4194304  // 2^22: fits a U250's URAM as laid out (rmm_top.cpp: 1,152 blocks)
#endif
#ifndef RMM_FIFO_DEPTH
#define RMM_FIFO_DEPTH 64  // the items each FIFO between two stages holds (rmm_top.cpp)
#endif
#ifndef RMM_FRAC_BITS
#define RMM_FRAC_BITS 20
#endif

namespace drlhet {
namespace rmm {
namespace top {

constexpr int K = RMM_K;
constexpr Layout kLay = LayoutOf(RMM_CAPACITY, K);
constexpr int kDepth = kLay.depth;
static_assert(kDepth > 0, "RMM_K must be in {4, 8, 16, 32, 64}, RMM_CAPACITY in [1, 2^30]");

// The testbench's record of each of Front's iterations (whether it passed an item on), for
// its stepped cycle count (rmm_tb --cycles): called only when rmm_top.cpp is compiled with
// DRLHET_RMM_TRACE; defined by rmm_tb.cpp.
void TraceFrontItem(bool emitted);

}  // namespace top
}  // namespace rmm
}  // namespace drlhet

extern "C" void rmm_top(const uint32_t* cmd, const uint32_t* in, uint32_t* out);

#endif  // DRLHET_RMM_TOP_H_
