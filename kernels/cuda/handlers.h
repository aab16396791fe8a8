// The CUDA backend's XLA FFI handler bodies and bindings, shared by the GPU's handlers
// (sum_tree.cu, nvcc, platform "CUDA", on XLA's stream) and the host emulation's (emu/emu_ffi.cc,
// g++, platform "cpu", the same kernels as fibers: emu/cuda_emu.h). What each takes and returns
// is in sum_tree.cu's header. Include after the kernels, launch.cuh and the CUDA runtime (or
// cuda_emu.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace drlhet_cuda {

namespace ffi = xla::ffi;


inline ffi::Error LastError(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

// A call's cluster_blocks attribute: 1 to kClusterMaxBlocks (more than 8 where the GPU allows a
// non-portable cluster size; else the launches take 8: ClusterBlocksFor).
inline ffi::Error CheckClusterBlocks(int64_t blocks, const std::string& what) {
  if (blocks >= 1 && blocks <= kClusterMaxBlocks) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(what + ": cluster_blocks must be 1 to " +
                                     std::to_string(kClusterMaxBlocks) + ", got " +
                                     std::to_string(blocks));
}

inline ffi::Error Trees(int64_t branching, int64_t capacity, int64_t elems, drlhet::TreeLayout* lay,
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

inline ffi::Error FindImpl(cudaStream_t stream, ffi::Buffer<ffi::F32> nodes,
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
  DRLHET_LAUNCH(kernel, Blocks(n), kThreads, stream, nodes.typed_data(), capacity, k,
                targets.typed_data(), n / trees, n, indices->typed_data(), values->typed_data(),
                totals->typed_data());
  return LastError("drlhet_cuda_find");
}

// Starts the update on a copy of the nodes when XLA did not alias them (no donation).
inline void StartFrom(cudaStream_t stream, ffi::Buffer<ffi::F32> nodes, float* dst) {
  if (dst != nodes.typed_data()) {
    cudaMemcpyAsync(dst, nodes.typed_data(), nodes.size_bytes(), cudaMemcpyDeviceToDevice,
                    stream);
  }
}

// A plain update's arguments; the workspace holds winner [V, C], then bad [V] (then, for a
// checked update, max_bits [V]).
inline UpdateArgs PlainArgs(float* nodes, int64_t capacity, int64_t branching,
                                  ffi::Buffer<ffi::S32> indices, ffi::Buffer<ffi::F32> values,
                                  ffi::Buffer<ffi::PRED> keep, int64_t trees,
                                  ffi::ResultBuffer<ffi::S32> work) {
  UpdateArgs a{};
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

// The claims table kept by one custom call of the tagged update handlers (tag_table.cuh): made
// empty when XLA makes the executable (the handlers' instantiate stage, TagTableInstantiate), its
// memory at the call's first update, freed with the executable. Each library's type is
// registered under its own name (drlhet/backends/cuda_ffi.py).
struct TagTableState : TagTableMemory {
  inline static ffi::TypeId id = {};
};
inline const ffi::TypeInfo kTagTableInfo = ffi::MakeTypeInfo<TagTableState>();

inline ffi::ErrorOr<std::unique_ptr<TagTableState>> TagTableInstantiate() {
  return std::make_unique<TagTableState>();
}

// An update handler's body (UpdateImpl, UpdateCheckedImpl) without a claims table: the
// untagged handlers', whose bindings have no state.
template <auto& Impl>
constexpr auto WithoutTags = [](cudaStream_t stream, auto&&... args) {
  return Impl(stream, nullptr, std::forward<decltype(args)>(args)...);
};

// `tags`: the call's claims table (the tagged handlers), or nullptr (the workspace's claims).
inline ffi::Error UpdateImpl(cudaStream_t stream, TagTableMemory* tags,
                             ffi::Buffer<ffi::F32> nodes, ffi::Buffer<ffi::S32> indices,
                             ffi::Buffer<ffi::F32> values, ffi::Buffer<ffi::PRED> keep,
                             ffi::ResultBuffer<ffi::F32> out, ffi::ResultBuffer<ffi::S32> work,
                             int64_t branching, int64_t capacity, int64_t block_max_batch,
                             int64_t narrow_max_nodes, int64_t cluster_max_batch,
                             int64_t tagged_siblings, int64_t cluster_blocks,
                             int64_t sorted_runs) {
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
  if (auto err = CheckClusterBlocks(cluster_blocks, "drlhet_cuda_update"); err.failure()) {
    return err;
  }
  StartFrom(stream, nodes, out->typed_data());
  if (n == 0) return LastError("drlhet_cuda_update");
  UpdateArgs a =
      PlainArgs(out->typed_data(), capacity, branching, indices, values, keep, trees, work);
  a.sorted_runs = sorted_runs != 0 ? 1 : 0;
  LaunchUpdate(stream, a, lay, trees, block_max_batch, narrow_max_nodes, cluster_max_batch,
               tags, tagged_siblings != 0, cluster_blocks);
  return LastError("drlhet_cuda_update");
}

inline ffi::Error UpdateCheckedImpl(cudaStream_t stream, TagTableMemory* tags,
                             ffi::Buffer<ffi::F32> nodes, ffi::Buffer<ffi::S32> indices,
                             ffi::Buffer<ffi::F32> raw,
                             ffi::Buffer<ffi::F32> values, ffi::Buffer<ffi::PRED> keep,
                             ffi::Buffer<ffi::S32> size, ffi::Buffer<ffi::F32> max_in,
                             ffi::Buffer<ffi::S32> err_in, ffi::ResultBuffer<ffi::F32> out,
                             ffi::ResultBuffer<ffi::F32> max_out,
                             ffi::ResultBuffer<ffi::S32> err_out,
                             ffi::ResultBuffer<ffi::S32> work, int64_t branching,
                             int64_t capacity, int64_t block_max_batch,
                             int64_t narrow_max_nodes, int64_t cluster_max_batch,
                             int64_t tagged_siblings, int64_t cluster_blocks,
                             int64_t sorted_runs, float priority_max,
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
  if (auto err = CheckClusterBlocks(cluster_blocks, "drlhet_cuda_update_checked");
      err.failure()) {
    return err;
  }
  StartFrom(stream, nodes, out->typed_data());
  UpdateArgs a =
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
  a.sorted_runs = sorted_runs != 0 ? 1 : 0;
  LaunchUpdate(stream, a, lay, trees, block_max_batch, narrow_max_nodes, cluster_max_batch,
               tags, tagged_siblings != 0, cluster_blocks);
  return LastError("drlhet_cuda_update_checked");
}

// The sample's shape checks and launches, its targets given (`targets`, [n]) or drawn from
// each tree's key (`key`, [V, 2]); `name` for the errors.
inline ffi::Error Weigh(cudaStream_t stream, ffi::Buffer<ffi::F32> nodes, const float* targets,
                        const uint32_t* key, int64_t stratified, int64_t n, bool inputs_match,
                        ffi::Buffer<ffi::S32> size, ffi::Buffer<ffi::F32> beta,
                        ffi::ResultBuffer<ffi::S32> indices, ffi::ResultBuffer<ffi::F32> probs,
                        ffi::ResultBuffer<ffi::F32> weights, ffi::ResultBuffer<ffi::S32> error,
                        ffi::ResultBuffer<ffi::S32> work, int64_t branching, int64_t capacity,
                        int64_t err_empty, int64_t err_beta, int64_t cluster_max_batch,
                        int64_t shared_top, const Spread& spread, int64_t cluster_blocks,
                        const char* name) {
  drlhet::TreeLayout lay;
  int64_t trees = 0;
  if (auto err = Trees(branching, capacity, nodes.element_count(), &lay, &trees); err.failure()) {
    return err;
  }
  if (spread.threads < 32 || spread.threads > kBlockThreads || spread.threads % 32 != 0) {
    return ffi::Error::InvalidArgument(std::string(name) +
                                       ": spread_threads must be whole warps, 32 to 1024");
  }
  if (auto err = CheckClusterBlocks(cluster_blocks, name); err.failure()) return err;
  const int64_t batch = trees > 0 && n % trees == 0 ? n / trees : 0;
  if (!inputs_match || n == 0 || batch == 0 || indices->element_count() != n ||
      probs->element_count() != n || weights->element_count() != n ||
      size.element_count() != trees || beta.element_count() != trees ||
      error->element_count() != trees ||
      work->element_count() != trees * SampleWorkWords(batch, spread.min_batch)) {
    return ffi::Error::InvalidArgument(std::string(name) + ": operand shapes do not match");
  }
  SampleArgs a{};
  a.nodes = nodes.typed_data();
  a.capacity = capacity;
  a.k = static_cast<int32_t>(branching);
  a.targets = targets;
  a.batch = n / trees;
  a.n = n;
  a.size = size.typed_data();
  a.beta = beta.typed_data();
  a.indices = indices->typed_data();
  a.probs = probs->typed_data();
  a.weights = weights->typed_data();
  a.error = error->typed_data();
  a.scratch = work->typed_data();
  a.err_empty = static_cast<int32_t>(err_empty);
  a.err_beta = static_cast<int32_t>(err_beta);
  a.key = key;
  a.stratified = static_cast<int32_t>(stratified);
  LaunchWeigh(stream, a, lay, trees, cluster_max_batch, shared_top != 0, spread, cluster_blocks);
  return LastError(name);
}

inline ffi::Error WeighImpl(cudaStream_t stream, ffi::Buffer<ffi::F32> nodes,
                            ffi::Buffer<ffi::F32> targets, ffi::Buffer<ffi::S32> size,
                            ffi::Buffer<ffi::F32> beta, ffi::ResultBuffer<ffi::S32> indices,
                            ffi::ResultBuffer<ffi::F32> probs, ffi::ResultBuffer<ffi::F32> weights,
                            ffi::ResultBuffer<ffi::S32> error, ffi::ResultBuffer<ffi::S32> work,
                            int64_t branching, int64_t capacity, int64_t err_empty,
                            int64_t err_beta, int64_t cluster_max_batch, int64_t shared_top,
                            int64_t spread_min_batch, int64_t spread_threads,
                            int64_t cluster_blocks) {
  return Weigh(stream, nodes, targets.typed_data(), nullptr, 0, targets.element_count(), true,
               size, beta, indices, probs, weights, error, work, branching, capacity, err_empty,
               err_beta, cluster_max_batch, shared_top,
               Spread{spread_min_batch, spread_threads}, cluster_blocks, "drlhet_cuda_weigh");
}

// The sample with its targets drawn in the kernel from each tree's threefry2x32 key (key
// u32[V, 2]); `stratified` 1 needs a batch that is a power of two (drlhet/jax_random.h).
inline ffi::Error WeighKeyImpl(cudaStream_t stream, ffi::Buffer<ffi::F32> nodes,
                               ffi::Buffer<ffi::U32> key, ffi::Buffer<ffi::S32> size,
                               ffi::Buffer<ffi::F32> beta, ffi::ResultBuffer<ffi::S32> indices,
                               ffi::ResultBuffer<ffi::F32> probs,
                               ffi::ResultBuffer<ffi::F32> weights,
                               ffi::ResultBuffer<ffi::S32> error,
                               ffi::ResultBuffer<ffi::S32> work, int64_t branching,
                               int64_t capacity, int64_t err_empty, int64_t err_beta,
                               int64_t cluster_max_batch, int64_t shared_top,
                               int64_t spread_min_batch, int64_t spread_threads,
                               int64_t cluster_blocks, int64_t stratified) {
  const int64_t n = indices->element_count();
  const int64_t trees = size.element_count();
  const int64_t batch = trees > 0 ? n / trees : 0;
  const bool power_of_two = batch > 0 && (batch & (batch - 1)) == 0;
  const bool ok = key.element_count() == 2 * trees && (stratified == 0 || power_of_two);
  return Weigh(stream, nodes, nullptr, key.typed_data(), stratified, n, ok, size, beta, indices,
               probs, weights, error, work, branching, capacity, err_empty, err_beta,
               cluster_max_batch, shared_top,
               Spread{spread_min_batch, spread_threads}, cluster_blocks,
               "drlhet_cuda_weigh_key");
}

// Each handler's operands, results and attributes after its context (`bind`: the stream on a
// GPU, nothing on the host; for a tagged update, then its TagTableState), in the order of its
// Impl's parameters.
template <typename B>
auto FindBinding(B bind) {
  return std::move(bind).template Arg<ffi::Buffer<ffi::F32>>()  // nodes
      .template Arg<ffi::Buffer<ffi::F32>>()         // targets
      .template Ret<ffi::Buffer<ffi::S32>>()         // indices
      .template Ret<ffi::Buffer<ffi::F32>>()         // values
      .template Ret<ffi::Buffer<ffi::F32>>()         // totals
      .template Attr<int64_t>("branching")
      .template Attr<int64_t>("capacity");
}

template <typename B>
auto UpdateBinding(B bind) {
  return std::move(bind).template Arg<ffi::Buffer<ffi::F32>>()  // nodes
      .template Arg<ffi::Buffer<ffi::S32>>()         // indices
      .template Arg<ffi::Buffer<ffi::F32>>()         // values
      .template Arg<ffi::Buffer<ffi::PRED>>()        // keep
      .template Ret<ffi::Buffer<ffi::F32>>()         // nodes (aliased)
      .template Ret<ffi::Buffer<ffi::S32>>()         // workspace
      .template Attr<int64_t>("branching")
      .template Attr<int64_t>("capacity")
      .template Attr<int64_t>("block_max_batch")
      .template Attr<int64_t>("narrow_max_nodes")
      .template Attr<int64_t>("cluster_max_batch")
      .template Attr<int64_t>("tagged_siblings")
      .template Attr<int64_t>("cluster_blocks")
      .template Attr<int64_t>("sorted_runs");
}

template <typename B>
auto UpdateCheckedBinding(B bind) {
  return std::move(bind).template Arg<ffi::Buffer<ffi::F32>>()  // nodes
      .template Arg<ffi::Buffer<ffi::S32>>()         // indices
      .template Arg<ffi::Buffer<ffi::F32>>()         // raw priorities
      .template Arg<ffi::Buffer<ffi::F32>>()         // leaf values
      .template Arg<ffi::Buffer<ffi::PRED>>()        // keep
      .template Arg<ffi::Buffer<ffi::S32>>()         // size
      .template Arg<ffi::Buffer<ffi::F32>>()         // max_priority
      .template Arg<ffi::Buffer<ffi::S32>>()         // error
      .template Ret<ffi::Buffer<ffi::F32>>()         // nodes (aliased)
      .template Ret<ffi::Buffer<ffi::F32>>()         // max_priority
      .template Ret<ffi::Buffer<ffi::S32>>()         // error
      .template Ret<ffi::Buffer<ffi::S32>>()         // workspace
      .template Attr<int64_t>("branching")
      .template Attr<int64_t>("capacity")
      .template Attr<int64_t>("block_max_batch")
      .template Attr<int64_t>("narrow_max_nodes")
      .template Attr<int64_t>("cluster_max_batch")
      .template Attr<int64_t>("tagged_siblings")
      .template Attr<int64_t>("cluster_blocks")
      .template Attr<int64_t>("sorted_runs")
      .template Attr<float>("priority_max")
      .template Attr<int64_t>("err_index")
      .template Attr<int64_t>("err_priority");
}

// The sample's operands, results and attributes; its second operand a `Second`: the targets
// (f32) or each tree's key words (u32).
template <typename Second, typename B>
auto SampleBinding(B&& bind) {  // a reference: a Binding cannot be moved into a parameter
  return std::move(bind).template Arg<ffi::Buffer<ffi::F32>>()  // nodes
      .template Arg<Second>()                        // targets, or key words
      .template Arg<ffi::Buffer<ffi::S32>>()         // size
      .template Arg<ffi::Buffer<ffi::F32>>()         // beta
      .template Ret<ffi::Buffer<ffi::S32>>()         // indices
      .template Ret<ffi::Buffer<ffi::F32>>()         // probabilities
      .template Ret<ffi::Buffer<ffi::F32>>()         // weights
      .template Ret<ffi::Buffer<ffi::S32>>()         // error
      .template Ret<ffi::Buffer<ffi::S32>>()         // workspace
      .template Attr<int64_t>("branching")
      .template Attr<int64_t>("capacity")
      .template Attr<int64_t>("err_empty")
      .template Attr<int64_t>("err_beta")
      .template Attr<int64_t>("cluster_max_batch")
      .template Attr<int64_t>("shared_top")
      .template Attr<int64_t>("spread_min_batch")
      .template Attr<int64_t>("spread_threads")
      .template Attr<int64_t>("cluster_blocks");
}

template <typename B>
auto WeighBinding(B bind) {
  return SampleBinding<ffi::Buffer<ffi::F32>>(std::move(bind));
}

template <typename B>
auto WeighKeyBinding(B bind) {
  return SampleBinding<ffi::Buffer<ffi::U32>>(std::move(bind))
      .template Attr<int64_t>("stratified");
}

}  // namespace drlhet_cuda
