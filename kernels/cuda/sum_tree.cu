// XLA FFI handlers (platform "CUDA") for the K-ary sum tree's CUDA kernels
// (sum_tree_kernels.cuh, sample_kernels.cuh), launched on XLA's stream; nothing waits on the host.
// Their bodies and bindings are handlers.h's, which the host emulation's handlers (platform
// "cpu", emu/emu_ffi.cc) share under the same custom-call targets.
//
//   drlhet_cuda_find   (nodes f32[V, T], targets f32[V, B]) -> (indices s32[V, B],
//                                                               values f32[V, B], totals f32[V])
//   drlhet_cuda_update (nodes f32[V, T], indices s32[V, B], values f32[V, B], keep pred[V, B])
//                      -> (nodes f32[V, T] aliased to the input, workspace s32[V, C + 1])
//   drlhet_cuda_weigh  (nodes f32[V, T], targets f32[V, B], size s32[V], beta f32[V])
//                      -> (indices s32[V, B], probabilities f32[V, B], weights f32[V, B],
//                          error s32[V], workspace s32[V, W]: W = 2, or 2 a warp of the
//                          batch where the spread path may take it (launch.cuh)
//   drlhet_cuda_weigh_key (nodes f32[V, T], key u32[V, 2], size s32[V], beta f32[V]) -> the
//                      same, the targets drawn in the kernel from each tree's threefry2x32 key
//                      as the buffer draws them (drlhet/jax_random.h; attribute stratified)
//   drlhet_cuda_update_checked (nodes f32[V, T], indices s32[V, B], raw f32[V, B],
//                      values f32[V, B], keep pred[V, B], size s32[V], max_priority f32[V],
//                      error s32[V]) -> (nodes aliased, max_priority f32[V], error s32[V],
//                      workspace s32[V, C + 2])
//   drlhet_cuda_update_tagged, drlhet_cuda_update_checked_tagged: the two updates, each call
//                      with a claims table of its own (u64[V, C + 1], its state: made when XLA
//                      makes the executable, allocated at its first update) that the cluster
//                      path's batches claim in instead of the workspace (tag_table.cuh)
//
// The last three are the prioritized buffer's whole sample (after its targets, or from its key)
// and whole priority update after its leaf values (drlhet/replay/buffer_ops.py), in one call each.
// Attributes: branching (K) and capacity (C), int64; the updates also block_max_batch: a batch
// of at most that many entries per tree is written by one block per tree in one launch
// (drlhet_cuda_update_block), a larger one by launches over the whole batch: reset, claim,
// leaves, one per level above them (a thread per entry where the level is wider than the batch,
// a thread per node where not), and one for the narrow levels at the top, those of at most
// narrow_max_nodes nodes (drlhet_cuda_update_top); the updates and the sample also
// cluster_max_batch: a batch too large for one block but of at most that many entries per tree
// runs in one launch of one cluster of blocks per tree where the GPU has clusters (sm_90 and
// up: drlhet_cuda_update_cluster, drlhet_cuda_sample_cluster), else as above, the cluster of
// cluster_blocks blocks (1 to 16; past 8 where the GPU allows a non-portable cluster size, else
// 8); the updates also sorted_runs (0 or 1): the cluster path writes a batch of sorted indices
// run by run, without claims (sorted_runs.cuh), where it is one; also tagged_siblings (0 or 1): the tagged handlers' cluster path sums the leaves' parents from
// its claims table, without a barrier after the leaves (the untagged handlers ignore it); the
// samples also spread_min_batch and spread_threads: a batch of at least that many targets per
// tree runs as one cooperative launch over the GPU, blocks of spread_threads
// (drlhet_cuda_sample_spread, sample_spread.cuh), where the GPU holds its blocks at once;
// the checked update also priority_max (f32), err_index and err_priority, the sample err_empty
// and err_beta (int64). Every handler is command-buffer compatible (XLA records it into the
// step's CUDA graph).
// Semantics are the reference's (drlhet/replay/sum_tree.py), bit for bit. Bad values cannot be
// reported without waiting for the device: a batch with a kept index outside [0, C) or a
// negative / non-finite priority is refused whole on the device (its tree unchanged), as the
// reference refuses it inside jit; a target that is not > 0 descends as 0. Shapes and
// attributes are checked on the host.
#include <cuda_runtime.h>

#include "sample_kernels.cuh"
#include "sample_spread.cuh"
#include "sum_tree_kernels.cuh"
#include "tag_table.cuh"
// after the kernels they launch
#include "launch.cuh"
#include "handlers.h"

namespace ffi = xla::ffi;

#define DRLHET_GPU_BIND ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetCudaFind, drlhet_cuda::FindImpl,
                              drlhet_cuda::FindBinding(DRLHET_GPU_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetCudaUpdate, drlhet_cuda::WithoutTags<drlhet_cuda::UpdateImpl>,
                              drlhet_cuda::UpdateBinding(DRLHET_GPU_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetCudaUpdateChecked,
                              drlhet_cuda::WithoutTags<drlhet_cuda::UpdateCheckedImpl>,
                              drlhet_cuda::UpdateCheckedBinding(DRLHET_GPU_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
// The tagged updates (tag_table.cuh): each custom call keeps a claims table (its state, made by
// DrlhetCudaTagTableInstantiate; the type's id and info for jax.ffi.register_ffi_type).
#define DRLHET_GPU_TAGGED DRLHET_GPU_BIND.Ctx<ffi::State<drlhet_cuda::TagTableState>>()
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetCudaUpdateTagged, drlhet_cuda::UpdateImpl,
                              drlhet_cuda::UpdateBinding(DRLHET_GPU_TAGGED),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetCudaUpdateCheckedTagged, drlhet_cuda::UpdateCheckedImpl,
                              drlhet_cuda::UpdateCheckedBinding(DRLHET_GPU_TAGGED),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetCudaTagTableInstantiate, drlhet_cuda::TagTableInstantiate,
                              ffi::Ffi::BindInstantiate());
extern "C" void* DrlhetCudaTagTableTypeId() { return &drlhet_cuda::TagTableState::id; }
extern "C" const void* DrlhetCudaTagTableTypeInfo() { return &drlhet_cuda::kTagTableInfo; }
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetCudaWeigh, drlhet_cuda::WeighImpl,
                              drlhet_cuda::WeighBinding(DRLHET_GPU_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetCudaWeighKey, drlhet_cuda::WeighKeyImpl,
                              drlhet_cuda::WeighKeyBinding(DRLHET_GPU_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
