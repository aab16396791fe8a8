// XLA FFI handlers (platform "CUDA") for the K-ary sum tree's CUDA kernels
// (sum_tree_kernels.cuh), launched on XLA's stream; nothing waits on the host.
//
//   drlhet_cuda_find   (nodes f32[V, T], targets f32[V, B]) -> (indices s32[V, B],
//                                                               values f32[V, B], totals f32[V])
//   drlhet_cuda_update (nodes f32[V, T], indices s32[V, B], values f32[V, B], keep pred[V, B])
//                      -> (nodes f32[V, T] aliased to the input, workspace s32[V * (C + 1)])
//
// Attributes: branching (K) and capacity (C), int64; the update also block_max_batch: a batch of
// at most that many entries per tree is written by one block per tree in one launch
// (drlhet_cuda_update_block), a larger one by launches over the whole batch: claim, leaves,
// one per wide level, and one for the narrow levels at the top (drlhet_cuda_update_top). Both
// handlers are command-buffer compatible (XLA records them into the step's CUDA graph).
// Semantics are the reference's (drlhet/replay/sum_tree.py), bit for bit. Bad values cannot be
// reported without waiting for the device: a batch with a kept index outside [0, C) or a negative / non-finite priority is
// refused whole on the device (its tree unchanged), as the reference refuses it inside jit; a
// target that is not > 0 descends as 0. Shapes and attributes are checked on the host.
#include <cuda_runtime.h>

#include <string>

#include "sum_tree_kernels.cuh"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kThreads = 256;
constexpr int kBlockThreads = 1024;  // drlhet_cuda_update_block / _top: one block per tree
// The per-level path recomputes levels of at most this many nodes (and no more than the batch)
// whole, in one launch (drlhet_cuda_update_top): 4 nodes per thread of its block at most.
constexpr int64_t kNarrowMaxNodes = 4 * kBlockThreads;

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

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
  kernel<<<Blocks(n), kThreads, 0, stream>>>(nodes.typed_data(), capacity, k,
                                             targets.typed_data(), n / trees, n,
                                             indices->typed_data(), values->typed_data(),
                                             totals->typed_data());
  return LastError("drlhet_cuda_find");
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
  float* dst = out->typed_data();
  if (dst != nodes.typed_data()) {  // not aliased (no donation): start from a copy
    cudaMemcpyAsync(dst, nodes.typed_data(), nodes.size_bytes(), cudaMemcpyDeviceToDevice,
                    stream);
  }
  if (n == 0) return LastError("drlhet_cuda_update");
  int32_t* winner = work->typed_data();  // [V, C], then bad [V]
  const int64_t batch = n / trees;
  const int32_t k = static_cast<int32_t>(branching);
  const int32_t* idx = indices.typed_data();
  const bool* kp = keep.typed_data();
  if (batch <= block_max_batch) {  // one block per tree, one launch
    drlhet_cuda_update_block<<<static_cast<unsigned>(trees), kBlockThreads, 0, stream>>>(
        dst, capacity, k, idx, values.typed_data(), kp, batch, winner);
    return LastError("drlhet_cuda_update");
  }
  int32_t* bad = winner + trees * capacity;
  cudaMemsetAsync(winner, 0xFF, trees * capacity * sizeof(int32_t), stream);  // all -1
  cudaMemsetAsync(bad, 0, trees * sizeof(int32_t), stream);
  drlhet_cuda_update_claim<<<Blocks(n), kThreads, 0, stream>>>(idx, values.typed_data(), kp,
                                                                batch, n, capacity, winner, bad);
  drlhet_cuda_update_leaves<<<Blocks(n), kThreads, 0, stream>>>(
      dst, capacity, k, idx, values.typed_data(), kp, batch, n, winner, bad);
  const int top = drlhet::NarrowTop(lay, batch, kNarrowMaxNodes);
  for (int level = lay.depth - 1; level > top; --level) {
    drlhet_cuda_update_level<<<Blocks(n), kThreads, 0, stream>>>(dst, capacity, k, idx, kp,
                                                                 batch, n, winner, bad, level);
  }
  if (top >= 0) {  // the narrow levels: every node once, one block per tree, one launch
    drlhet_cuda_update_top<<<static_cast<unsigned>(trees), kBlockThreads, 0, stream>>>(
        dst, capacity, k, bad, top);
  }
  return LastError("drlhet_cuda_update");
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
