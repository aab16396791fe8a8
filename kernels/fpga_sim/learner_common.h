// What the learner module's FFI handlers share (learner_ffi.cc: DQN, learner_ddpg_ffi.cc:
// DDPG/TD3): the in-place copy of an aliased memory and the size checks of a network.
#ifndef DRLHET_FPGA_SIM_LEARNER_COMMON_H_
#define DRLHET_FPGA_SIM_LEARNER_COMMON_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "memory.h"
#include "xla/ffi/api/ffi.h"

namespace drlhet {
namespace learner {

// Copies an input into its output buffer when XLA did not alias the two.
template <typename T>
void CopyIfMoved(const T* from, T* to, int64_t n) {
  if (from != to) std::memcpy(to, from, sizeof(T) * size_t(n));
}

// Makes a network of `in` inputs, `hidden` widths (w[0..hidden)) and heads `outs[0..heads)`,
// whose parameter memory must hold `params` floats, trained on batches of `batch`.
inline xla::ffi::Error MakeCheckedNet(int64_t in, const int64_t* w, int64_t hidden,
                                      const int* outs, int heads, int64_t params, int64_t batch,
                                      Net* net) {
  const int widths[kMaxHidden] = {int(w[0]), int(w[1]), int(w[2])};
  if (!MakeNet(int(in), widths, int(hidden), outs, heads, net)) {
    return xla::ffi::Error::InvalidArgument(
        "learner: a network outside the module's sizes (at most " + std::to_string(kMaxHidden) +
        " hidden layers of " + std::to_string(kMaxWidth) + " neurons)");
  }
  if (net->size != params) {
    return xla::ffi::Error::InvalidArgument("learner: parameter memory of " +
                                            std::to_string(params) + " floats, the network has " +
                                            std::to_string(net->size));
  }
  if (batch < 1 || batch > kMaxBatch) {
    return xla::ffi::Error::InvalidArgument("learner: batch " + std::to_string(batch) +
                                            " outside 1.." + std::to_string(kMaxBatch));
  }
  return xla::ffi::Error::Success();
}

}  // namespace learner
}  // namespace drlhet

#endif  // DRLHET_FPGA_SIM_LEARNER_COMMON_H_
