// The FPGA replay module's C-simulation as XLA FFI handlers: the HLS sources (hls/rmm/rmm.h)
// compiled with g++, served through the module's own host protocol (command words and buffer
// layout, the same a board gets from pynq or pyxrt), so backend "fpga" runs inside jit on a CPU.
//
//   drlhet_rmm_write  (leaves u32[V, L], hi u32[V, I], lo u32[V, I], saturated s32[V],
//                      indices s32[V, B], values f32[V, B], keep pred[V, B])
//                     -> (leaves, hi, lo, saturated)      (all four aliased: written in place)
//   drlhet_rmm_sample (leaves u32[V, L], hi u32[V, I], lo u32[V, I], words u32[V, B, 2])
//                     -> (indices s32[V, B], values u32[V, B], root u32[V, 2])
//
// Attributes: capacity, branching, frac_bits (int64), stratified (int64, sample only). V is
// any number of independent trees (leading dimensions, from vmap). Entries with keep false
// are sent as rmm::kDropped: the module skips them. Values are not validated here: the host
// side (drlhet/backends/fpga.py) refuses bad batches before, as for every backend.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "rmm.h"
#include "word_tree.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
namespace rmm = drlhet::rmm;

namespace {

ffi::Error CheckLayout(int64_t capacity, int64_t branching, int64_t leaves, int64_t inner,
                       rmm::Layout* lay) {
  if (!rmm::MakeLayout(capacity, int(branching), lay)) {
    return ffi::Error::InvalidArgument("rmm: unsupported K " + std::to_string(branching) +
                                       " or capacity " + std::to_string(capacity));
  }
  if (leaves != lay->widths[lay->depth] || inner != lay->offsets[lay->depth]) {
    return ffi::Error::InvalidArgument("rmm: tree buffers do not match capacity " +
                                       std::to_string(capacity) + ", K " +
                                       std::to_string(branching));
  }
  return ffi::Error::Success();
}

int ServeAny(rmm::WordTree& tree, const rmm::Layout& lay, int frac_bits, const uint32_t* cmd,
             const uint32_t* in, uint32_t* out) {
  switch (lay.branching) {
    case 4: return rmm::Serve<4>(tree, lay, frac_bits, cmd, in, out);
    case 8: return rmm::Serve<8>(tree, lay, frac_bits, cmd, in, out);
    case 16: return rmm::Serve<16>(tree, lay, frac_bits, cmd, in, out);
    case 32: return rmm::Serve<32>(tree, lay, frac_bits, cmd, in, out);
    case 64: return rmm::Serve<64>(tree, lay, frac_bits, cmd, in, out);
    default: return -1;
  }
}

template <typename T>
void CopyIfMoved(const T* from, T* to, int64_t n) {
  if (from != to) std::memcpy(to, from, sizeof(T) * size_t(n));
}

ffi::Error WriteImpl(ffi::Buffer<ffi::U32> leaves, ffi::Buffer<ffi::U32> hi,
                     ffi::Buffer<ffi::U32> lo, ffi::Buffer<ffi::S32> saturated,
                     ffi::Buffer<ffi::S32> indices, ffi::Buffer<ffi::F32> values,
                     ffi::Buffer<ffi::PRED> keep, ffi::ResultBuffer<ffi::U32> leaves_out,
                     ffi::ResultBuffer<ffi::U32> hi_out, ffi::ResultBuffer<ffi::U32> lo_out,
                     ffi::ResultBuffer<ffi::S32> saturated_out, int64_t capacity,
                     int64_t branching, int64_t frac_bits) {
  const int64_t trees = saturated.element_count();
  if (trees < 1) return ffi::Error::Success();
  const int64_t n_leaves = leaves.element_count() / trees;
  const int64_t n_inner = hi.element_count() / trees;
  const int64_t b = indices.element_count() / trees;
  rmm::Layout lay;
  if (auto err = CheckLayout(capacity, branching, n_leaves, n_inner, &lay); err.failure()) {
    return err;
  }
  CopyIfMoved(leaves.typed_data(), leaves_out->typed_data(), leaves.element_count());
  CopyIfMoved(hi.typed_data(), hi_out->typed_data(), hi.element_count());
  CopyIfMoved(lo.typed_data(), lo_out->typed_data(), lo.element_count());
  CopyIfMoved(saturated.typed_data(), saturated_out->typed_data(), trees);
  std::vector<uint32_t> in(size_t(2 * b));
  for (int64_t v = 0; v < trees; ++v) {
    const int32_t* idx = indices.typed_data() + v * b;
    const bool* kept = keep.typed_data() + v * b;
    for (int64_t j = 0; j < b; ++j) in[j] = kept[j] ? uint32_t(idx[j]) : rmm::kDropped;
    std::memcpy(in.data() + b, values.typed_data() + v * b, sizeof(float) * size_t(b));
    const uint32_t cmd[rmm::kCmdWords] = {rmm::kWrite, uint32_t(b), 0};
    uint32_t out[1] = {0};
    rmm::WordTree tree(lay, leaves_out->typed_data() + v * n_leaves,
                          hi_out->typed_data() + v * n_inner, lo_out->typed_data() + v * n_inner);
    if (ServeAny(tree, lay, int(frac_bits), cmd, in.data(), out) != 0) {
      return ffi::Error::InvalidArgument("rmm: write command refused");
    }
    int32_t* count = saturated_out->typed_data() + v;  // wraps, as the reference's int32
    *count = int32_t(uint32_t(*count) + out[0]);
  }
  return ffi::Error::Success();
}

ffi::Error SampleImpl(ffi::Buffer<ffi::U32> leaves, ffi::Buffer<ffi::U32> hi,
                      ffi::Buffer<ffi::U32> lo, ffi::Buffer<ffi::U32> words,
                      ffi::ResultBuffer<ffi::S32> indices, ffi::ResultBuffer<ffi::U32> values,
                      ffi::ResultBuffer<ffi::U32> root, int64_t capacity, int64_t branching,
                      int64_t frac_bits, int64_t stratified) {
  const int64_t trees = root->element_count() / 2;
  if (trees < 1) return ffi::Error::Success();
  const int64_t n_leaves = leaves.element_count() / trees;
  const int64_t n_inner = hi.element_count() / trees;
  const int64_t b = indices->element_count() / trees;
  rmm::Layout lay;
  if (auto err = CheckLayout(capacity, branching, n_leaves, n_inner, &lay); err.failure()) {
    return err;
  }
  if (stratified && b > rmm::kMaxStratifiedBatch) {
    return ffi::Error::InvalidArgument("rmm: stratified sampling takes B <= 65536, got " +
                                       std::to_string(b));
  }
  std::vector<uint32_t> out(size_t(2 * b + 2));
  for (int64_t v = 0; v < trees; ++v) {
    // The module only reads the tree when it samples; the view needs writable pointers.
    rmm::WordTree tree(lay, const_cast<uint32_t*>(leaves.typed_data()) + v * n_leaves,
                          const_cast<uint32_t*>(hi.typed_data()) + v * n_inner,
                          const_cast<uint32_t*>(lo.typed_data()) + v * n_inner);
    const uint32_t cmd[rmm::kCmdWords] = {rmm::kSample, uint32_t(b),
                                          stratified ? rmm::kStratified : 0u};
    if (ServeAny(tree, lay, int(frac_bits), cmd, words.typed_data() + v * 2 * b, out.data()) !=
        0) {
      return ffi::Error::InvalidArgument("rmm: sample command refused");
    }
    std::memcpy(indices->typed_data() + v * b, out.data(), sizeof(uint32_t) * size_t(b));
    std::memcpy(values->typed_data() + v * b, out.data() + b, sizeof(uint32_t) * size_t(b));
    root->typed_data()[2 * v] = out[2 * b];
    root->typed_data()[2 * v + 1] = out[2 * b + 1];
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetRmmWrite, WriteImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::U32>>()   // leaves
                                  .Arg<ffi::Buffer<ffi::U32>>()   // hi
                                  .Arg<ffi::Buffer<ffi::U32>>()   // lo
                                  .Arg<ffi::Buffer<ffi::S32>>()   // saturated
                                  .Arg<ffi::Buffer<ffi::S32>>()   // indices
                                  .Arg<ffi::Buffer<ffi::F32>>()   // values
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // keep
                                  .Ret<ffi::Buffer<ffi::U32>>()   // leaves (aliased)
                                  .Ret<ffi::Buffer<ffi::U32>>()   // hi (aliased)
                                  .Ret<ffi::Buffer<ffi::U32>>()   // lo (aliased)
                                  .Ret<ffi::Buffer<ffi::S32>>()   // saturated (aliased)
                                  .Attr<int64_t>("capacity")
                                  .Attr<int64_t>("branching")
                                  .Attr<int64_t>("frac_bits"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetRmmSample, SampleImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::U32>>()  // leaves
                                  .Arg<ffi::Buffer<ffi::U32>>()  // hi
                                  .Arg<ffi::Buffer<ffi::U32>>()  // lo
                                  .Arg<ffi::Buffer<ffi::U32>>()  // words
                                  .Ret<ffi::Buffer<ffi::S32>>()  // indices
                                  .Ret<ffi::Buffer<ffi::U32>>()  // values
                                  .Ret<ffi::Buffer<ffi::U32>>()  // root (hi, lo)
                                  .Attr<int64_t>("capacity")
                                  .Attr<int64_t>("branching")
                                  .Attr<int64_t>("frac_bits")
                                  .Attr<int64_t>("stratified"));

extern "C" {
// The host protocol served on a tree held in plain arrays: what a board stand-in calls
// (drlhet/backends/fpga_board.py). Returns 0, -1 for a bad command, -2 for a bad layout.
int drlhet_rmm_serve(int64_t capacity, int64_t branching, int64_t frac_bits, uint32_t* leaves,
                     uint32_t* hi, uint32_t* lo, const uint32_t* cmd, const uint32_t* in,
                     uint32_t* out) {
  rmm::Layout lay;
  if (!rmm::MakeLayout(capacity, int(branching), &lay)) return -2;
  rmm::WordTree tree(lay, leaves, hi, lo);
  return ServeAny(tree, lay, int(frac_bits), cmd, in, out);
}
}
