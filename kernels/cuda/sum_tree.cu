// XLA FFI handlers (platform "CUDA") for the K-ary sum tree's CUDA kernels
// (sum_tree_kernels.cuh, sample_kernels.cuh), launched on XLA's stream; nothing waits on the host.
//
//   drlhet_cuda_find   (nodes f32[V, T], targets f32[V, B]) -> (indices s32[V, B],
//                                                               values f32[V, B], totals f32[V])
//   drlhet_cuda_update (nodes f32[V, T], indices s32[V, B], values f32[V, B], keep pred[V, B])
//                      -> (nodes f32[V, T] aliased to the input, workspace s32[V, C + 1])
//   drlhet_cuda_weigh  (nodes f32[V, T], targets f32[V, B], size s32[V], beta f32[V])
//                      -> (indices s32[V, B], probabilities f32[V, B], weights f32[V, B],
//                          error s32[V], workspace s32[V, 2])
//   drlhet_cuda_update_checked (nodes f32[V, T], indices s32[V, B], raw f32[V, B],
//                      values f32[V, B], keep pred[V, B], size s32[V], max_priority f32[V],
//                      error s32[V]) -> (nodes aliased, max_priority f32[V], error s32[V],
//                      workspace s32[V, C + 2])
//
// The last two are the prioritized buffer's whole sample after its targets and whole priority
// update after its leaf values (drlhet/replay/buffer_ops.py), in one call each.
// Attributes: branching (K) and capacity (C), int64; the updates also block_max_batch: a batch
// of at most that many entries per tree is written by one block per tree in one launch
// (drlhet_cuda_update_block), a larger one by launches over the whole batch: reset, claim,
// leaves, one per wide level, and one for the narrow levels at the top (drlhet_cuda_update_top);
// the checked update also priority_max (f32), err_index and err_priority, the sample err_empty
// and err_beta (int64). Every handler is command-buffer compatible (XLA records it into the
// step's CUDA graph).
// Semantics are the reference's (drlhet/replay/sum_tree.py), bit for bit. Bad values cannot be
// reported without waiting for the device: a batch with a kept index outside [0, C) or a negative / non-finite priority is
// refused whole on the device (its tree unchanged), as the reference refuses it inside jit; a
// target that is not > 0 descends as 0. Shapes and attributes are checked on the host.
#include <cuda_runtime.h>

#include <string>

#include "sample_kernels.cuh"
#include "sum_tree_kernels.cuh"
// after the kernels it launches
#include "launch.cuh"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

ffi::Error LastError(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

ffi::Error Trees(int64_t branching, int64_t capacity, int64_t elems, drlhet::TreeLayout* lay,
                 int64_t* trees) {
  if (capacity > INT32_MAX || !drlhet::MakeLayout(capacity, branching, lay)) {
    return ffi::Error::InvalidArgument("drlhet_cuda: bad sum tree capacity " +
                                       std::to_string(capacity) + " or branching " +
                                       std::to_string(branching));
  }
  if (elems == 0 || elems % lay->size != 0) {
    return ffi::Error::InvalidArgument("drlhet_cuda: node array of " + std::to_string(elems) +
                                       " elements is not a whole number of trees of " +
                                       std::to_string(lay->size) + " slots");
  }
  *trees = elems / lay->size;
  return ffi::Error::Success();
}

ffi::Error FindImpl(cudaStream_t stream, ffi::Buffer<ffi::F32> nodes,
                    ffi::Buffer<ffi::F32> targets, ffi::ResultBuffer<ffi::S32> indices,
                    ffi::ResultBuffer<ffi::F32> values, ffi::ResultBuffer<ffi::F32> totals,
                    int64_t branching, int64_t capacity) {
  drlhet::TreeLayout lay;
  int64_t trees = 0;
  if (auto err = Trees(branching, capacity, nodes.element_count(), &lay, &trees); err.failure()) {
    return err;
  }
  const int64_t n = targets.element_count();
  if (n % trees != 0 || indices->element_count() != n || values->element_count() != n ||
      totals->element_count() != trees) {
    return ffi::Error::InvalidArgument("drlhet_cuda_find: targets/outputs do not match the trees");
  }
  if (n == 0) return ffi::Error::Success();
  const int32_t k = static_cast<int32_t>(branching);
  auto kernel = k == 16 ? drlhet_cuda_find_k16 : drlhet_cuda_find;
  kernel<<<drlhet_cuda::Blocks(n), drlhet_cuda::kThreads, 0, stream>>>(nodes.typed_data(), capacity, k,
                                             targets.typed_data(), n / trees, n,
                                             indices->typed_data(), values->typed_data(),
                                             totals->typed_data());
  return LastError("drlhet_cuda_find");
}

// Starts the update on a copy of the nodes when XLA did not alias them (no donation).
void StartFrom(cudaStream_t stream, ffi::Buffer<ffi::F32> nodes, float* dst) {
  if (dst != nodes.typed_data()) {
    cudaMemcpyAsync(dst, nodes.typed_data(), nodes.size_bytes(), cudaMemcpyDeviceToDevice,
                    stream);
  }
}

// A plain update's arguments; the workspace holds winner [V, C], then bad [V] (then, for a
// checked update, max_bits [V]).
drlhet_cuda::UpdateArgs PlainArgs(float* nodes, int64_t capacity, int64_t branching,
                                  ffi::Buffer<ffi::S32> indices, ffi::Buffer<ffi::F32> values,
                                  ffi::Buffer<ffi::PRED> keep, int64_t trees,
                                  ffi::ResultBuffer<ffi::S32> work) {
  drlhet_cuda::UpdateArgs a{};
  a.nodes = nodes;
  a.capacity = capacity;
  a.k = static_cast<int32_t>(branching);
  a.indices = indices.typed_data();
  a.values = values.typed_data();
  a.keep = keep.typed_data();
  a.n = indices.element_count();
  a.batch = a.n / trees;
  a.winner = work->typed_data();
  a.bad = a.winner + trees * capacity;
  return a;
}

ffi::Error UpdateImpl(cudaStream_t stream, ffi::Buffer<ffi::F32> nodes,
                      ffi::Buffer<ffi::S32> indices, ffi::Buffer<ffi::F32> values,
                      ffi::Buffer<ffi::PRED> keep, ffi::ResultBuffer<ffi::F32> out,
                      ffi::ResultBuffer<ffi::S32> work, int64_t branching, int64_t capacity,
                      int64_t block_max_batch) {
  drlhet::TreeLayout lay;
  int64_t trees = 0;
  if (auto err = Trees(branching, capacity, nodes.element_count(), &lay, &trees); err.failure()) {
    return err;
  }
  const int64_t n = indices.element_count();
  if (n % trees != 0 || values.element_count() != n || keep.element_count() != n ||
      out->element_count() != nodes.element_count() ||
      work->element_count() != trees * (capacity + 1)) {
    return ffi::Error::InvalidArgument("drlhet_cuda_update: operand shapes do not match");
  }
  StartFrom(stream, nodes, out->typed_data());
  if (n == 0) return LastError("drlhet_cuda_update");
  const drlhet_cuda::UpdateArgs a =
      PlainArgs(out->typed_data(), capacity, branching, indices, values, keep, trees, work);
  drlhet_cuda::LaunchUpdate(stream, a, lay, trees, block_max_batch);
  return LastError("drlhet_cuda_update");
}

ffi::Error UpdateCheckedImpl(cudaStream_t stream, ffi::Buffer<ffi::F32> nodes,
                             ffi::Buffer<ffi::S32> indices, ffi::Buffer<ffi::F32> raw,
                             ffi::Buffer<ffi::F32> values, ffi::Buffer<ffi::PRED> keep,
                             ffi::Buffer<ffi::S32> size, ffi::Buffer<ffi::F32> max_in,
                             ffi::Buffer<ffi::S32> err_in, ffi::ResultBuffer<ffi::F32> out,
                             ffi::ResultBuffer<ffi::F32> max_out,
                             ffi::ResultBuffer<ffi::S32> err_out,
                             ffi::ResultBuffer<ffi::S32> work, int64_t branching,
                             int64_t capacity, int64_t block_max_batch, float priority_max,
                             int64_t err_index, int64_t err_priority) {
  drlhet::TreeLayout lay;
  int64_t trees = 0;
  if (auto err = Trees(branching, capacity, nodes.element_count(), &lay, &trees); err.failure()) {
    return err;
  }
  const int64_t n = indices.element_count();
  const bool per_tree = size.element_count() == trees && max_in.element_count() == trees &&
                        err_in.element_count() == trees && max_out->element_count() == trees &&
                        err_out->element_count() == trees;
  if (n == 0 || n % trees != 0 || raw.element_count() != n || values.element_count() != n ||
      keep.element_count() != n || !per_tree ||
      out->element_count() != nodes.element_count() ||
      work->element_count() != trees * (capacity + 2)) {
    return ffi::Error::InvalidArgument("drlhet_cuda_update_checked: operand shapes do not match");
  }
  StartFrom(stream, nodes, out->typed_data());
  drlhet_cuda::UpdateArgs a =
      PlainArgs(out->typed_data(), capacity, branching, indices, values, keep, trees, work);
  a.max_bits = a.bad + trees;  // after bad [V] in the workspace
  a.raw = raw.typed_data();
  a.size = size.typed_data();
  a.priority_max = priority_max;
  a.err_index = static_cast<int32_t>(err_index);
  a.err_priority = static_cast<int32_t>(err_priority);
  a.max_in = max_in.typed_data();
  a.err_in = err_in.typed_data();
  a.max_out = max_out->typed_data();
  a.err_out = err_out->typed_data();
  drlhet_cuda::LaunchUpdate(stream, a, lay, trees, block_max_batch);
  return LastError("drlhet_cuda_update_checked");
}

ffi::Error WeighImpl(cudaStream_t stream, ffi::Buffer<ffi::F32> nodes,
                     ffi::Buffer<ffi::F32> targets, ffi::Buffer<ffi::S32> size,
                     ffi::Buffer<ffi::F32> beta, ffi::ResultBuffer<ffi::S32> indices,
                     ffi::ResultBuffer<ffi::F32> probs, ffi::ResultBuffer<ffi::F32> weights,
                     ffi::ResultBuffer<ffi::S32> error, ffi::ResultBuffer<ffi::S32> work,
                     int64_t branching, int64_t capacity, int64_t err_empty, int64_t err_beta) {
  drlhet::TreeLayout lay;
  int64_t trees = 0;
  if (auto err = Trees(branching, capacity, nodes.element_count(), &lay, &trees); err.failure()) {
    return err;
  }
  const int64_t n = targets.element_count();
  if (n == 0 || n % trees != 0 || indices->element_count() != n || probs->element_count() != n ||
      weights->element_count() != n || size.element_count() != trees ||
      beta.element_count() != trees || error->element_count() != trees ||
      work->element_count() != 2 * trees) {
    return ffi::Error::InvalidArgument("drlhet_cuda_weigh: operand shapes do not match");
  }
  drlhet_cuda::SampleArgs a{nodes.typed_data(),    capacity,
                            static_cast<int32_t>(branching), targets.typed_data(),
                            n / trees,             n,
                            size.typed_data(),     beta.typed_data(),
                            indices->typed_data(), probs->typed_data(),
                            weights->typed_data(), error->typed_data(),
                            work->typed_data(),    static_cast<int32_t>(err_empty),
                            static_cast<int32_t>(err_beta)};
  drlhet_cuda::LaunchWeigh(stream, a, trees);
  return LastError("drlhet_cuda_weigh");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetCudaFind, FindImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // nodes
                                  .Arg<ffi::Buffer<ffi::F32>>()  // targets
                                  .Ret<ffi::Buffer<ffi::S32>>()  // indices
                                  .Ret<ffi::Buffer<ffi::F32>>()  // values
                                  .Ret<ffi::Buffer<ffi::F32>>()  // totals
                                  .Attr<int64_t>("branching")
                                  .Attr<int64_t>("capacity"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetCudaUpdate, UpdateImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // nodes
                                  .Arg<ffi::Buffer<ffi::S32>>()   // indices
                                  .Arg<ffi::Buffer<ffi::F32>>()   // values
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // keep
                                  .Ret<ffi::Buffer<ffi::F32>>()   // nodes (aliased)
                                  .Ret<ffi::Buffer<ffi::S32>>()   // workspace
                                  .Attr<int64_t>("branching")
                                  .Attr<int64_t>("capacity")
                                  .Attr<int64_t>("block_max_batch"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetCudaUpdateChecked, UpdateCheckedImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // nodes
                                  .Arg<ffi::Buffer<ffi::S32>>()   // indices
                                  .Arg<ffi::Buffer<ffi::F32>>()   // raw priorities
                                  .Arg<ffi::Buffer<ffi::F32>>()   // leaf values
                                  .Arg<ffi::Buffer<ffi::PRED>>()  // keep
                                  .Arg<ffi::Buffer<ffi::S32>>()   // size
                                  .Arg<ffi::Buffer<ffi::F32>>()   // max_priority
                                  .Arg<ffi::Buffer<ffi::S32>>()   // error
                                  .Ret<ffi::Buffer<ffi::F32>>()   // nodes (aliased)
                                  .Ret<ffi::Buffer<ffi::F32>>()   // max_priority
                                  .Ret<ffi::Buffer<ffi::S32>>()   // error
                                  .Ret<ffi::Buffer<ffi::S32>>()   // workspace
                                  .Attr<int64_t>("branching")
                                  .Attr<int64_t>("capacity")
                                  .Attr<int64_t>("block_max_batch")
                                  .Attr<float>("priority_max")
                                  .Attr<int64_t>("err_index")
                                  .Attr<int64_t>("err_priority"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetCudaWeigh, WeighImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // nodes
                                  .Arg<ffi::Buffer<ffi::F32>>()  // targets
                                  .Arg<ffi::Buffer<ffi::S32>>()  // size
                                  .Arg<ffi::Buffer<ffi::F32>>()  // beta
                                  .Ret<ffi::Buffer<ffi::S32>>()  // indices
                                  .Ret<ffi::Buffer<ffi::F32>>()  // probabilities
                                  .Ret<ffi::Buffer<ffi::F32>>()  // weights
                                  .Ret<ffi::Buffer<ffi::S32>>()  // error
                                  .Ret<ffi::Buffer<ffi::S32>>()  // workspace
                                  .Attr<int64_t>("branching")
                                  .Attr<int64_t>("capacity")
                                  .Attr<int64_t>("err_empty")
                                  .Attr<int64_t>("err_beta"),
                              {ffi::Traits::kCmdBufferCompatible});
