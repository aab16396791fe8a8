// The launch sequences of the CUDA backend's update and sample calls, shared by the XLA FFI
// handlers (sum_tree.cu, on XLA's stream) and the host emulation of the CUDA execution model
// (emu/cuda_emu.h, which defines DRLHET_LAUNCH and the runtime calls before including this), so
// that the emulation runs the same launches in the same order as a GPU.
// Include after sample_kernels.cuh, sample_spread.cuh, sum_tree_kernels.cuh and tag_table.cuh.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "drlhet/sum_tree.h"

#if defined(__CUDACC__)
#define DRLHET_LAUNCH(kernel, grid, threads, stream, ...) \
  kernel<<<static_cast<unsigned>(grid), threads, 0, stream>>>(__VA_ARGS__)
#define DRLHET_LAUNCH_CLUSTER(kernel, grid, threads, cluster, stream, ...) \
  drlhet_cuda::LaunchInClusters(kernel, grid, threads, cluster, stream, __VA_ARGS__)
#define DRLHET_LAUNCH_COOPERATIVE(kernel, grid, threads, stream, ...) \
  drlhet_cuda::LaunchCooperative(kernel, grid, threads, stream, __VA_ARGS__)
#endif

namespace drlhet_cuda {

constexpr int kThreads = 256;
constexpr int kBlockThreads = 1024;  // drlhet_cuda_update_block / _top: one block per tree
#if defined(__CUDACC__)
// A launch of `grid` blocks of `threads` in clusters of `cluster` (a launch attribute, so that
// the cluster's size is chosen per call); `attribute` must outlive the config.
inline cudaLaunchConfig_t ClusterConfig(unsigned grid, int threads, unsigned cluster,
                                        cudaStream_t stream, cudaLaunchAttribute* attribute) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.stream = stream;
  attribute->id = cudaLaunchAttributeClusterDimension;
  attribute->val.clusterDim.x = cluster;
  attribute->val.clusterDim.y = 1;
  attribute->val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return config;
}

// kernel<<<grid, threads, 0, stream>>>(args...) in clusters of `cluster` blocks. Errors:
// cudaGetLastError.
template <typename... Params, typename... Args>
inline void LaunchInClusters(void (*kernel)(Params...), unsigned grid, int threads,
                             unsigned cluster, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config = ClusterConfig(grid, threads, cluster, stream, &attribute);
  cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

// kernel<<<grid, threads, 0, stream>>>(args...) as a cooperative launch: every block resident
// at once, so that the kernel may wait at a barrier of the whole grid (GridSync). The caller
// asks CooperativeBlocks first. Errors: cudaGetLastError.
template <typename... Params, typename... Args>
inline void LaunchCooperative(void (*kernel)(Params...), int64_t grid, int threads,
                              cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.stream = stream;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

// `ask(device)` (a query of the device: no stream work, its answer a count, 0 where it refused),
// asked once per (device, kernel, shape: the launch's threads, or threads and cluster blocks in
// one number), then remembered: without XLA's command buffers a
// handler runs on the host at every call, and a query is host work of its own. The handler may
// run while XLA records its command buffer by capturing this thread's stream, and a capture can
// count a call it does not know as unsafe and invalidate itself: the query runs in the relaxed
// capture mode, which CUDA provides for a library's calls during a capture, and the thread's
// mode is restored after it. A refused query is an answer (take another path), not the call's
// error: `ask` clears the error of a call that failed, as the handler reads cudaGetLastError
// after its launches.
template <typename Kernel, typename Ask>
inline int64_t Remembered(Kernel kernel, int shape, Ask ask) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int>, int64_t> known;
  const auto key = std::make_tuple(device, reinterpret_cast<const void*>(kernel), shape);
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  const bool relaxed = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  if (!relaxed) (void)cudaGetLastError();
  const int64_t answer = ask(device);
  if (relaxed) (void)cudaThreadExchangeStreamCaptureMode(&mode);
  known.emplace(key, answer);
  return answer;
}

// Whether the current device can run a cluster of `blocks` blocks of `threads` threads of
// `kernel` (compute capability 9.0 and up, and the blocks' registers fit the GPC's SMs at once;
// past 8 blocks, the kernel allowed a non-portable cluster size, which the H100 and H200 take
// up to 16): a query, never a failed launch, which would invalidate the stream capture XLA
// records its command buffers with.
template <typename Kernel>
inline bool ClusterFits(Kernel kernel, int threads, int blocks = kClusterBlocks) {
  if (blocks < 1 || blocks > kClusterMaxBlocks) return false;
  return Remembered(kernel, threads * (kClusterMaxBlocks + 1) + blocks, [&](int device) -> int64_t {
           int launch = 0, clusters = 0;
           cudaError_t e = cudaDeviceGetAttribute(&launch, cudaDevAttrClusterLaunch, device);
           if (e == cudaSuccess && launch != 0 && blocks > kClusterBlocks) {
             e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
           }
           if (e == cudaSuccess && launch != 0) {
             cudaLaunchAttribute attribute;
             const cudaLaunchConfig_t config = ClusterConfig(
                 static_cast<unsigned>(blocks), threads, static_cast<unsigned>(blocks), nullptr,
                 &attribute);
             e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
           }
           if (e != cudaSuccess) (void)cudaGetLastError();
           return e == cudaSuccess ? clusters : 0;
         }) > 0;
}

// Whether the current device holds `grid` blocks of `threads` threads of `kernel` at once in a
// cooperative launch (LaunchCooperative): a query, never a failed launch.
template <typename Kernel>
inline bool CooperativeFits(Kernel kernel, int64_t grid, int threads) {
  return grid <= Remembered(kernel, threads, [&](int device) -> int64_t {
           int cooperative = 0, sms = 0, per_sm = 0;
           cudaError_t e =
               cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device);
           if (e == cudaSuccess && cooperative != 0) {
             e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
           }
           if (e == cudaSuccess && cooperative != 0) {
             e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
           }
           if (e != cudaSuccess) (void)cudaGetLastError();
           return e == cudaSuccess ? static_cast<int64_t>(sms) * per_sm : 0;
         });
}
#else
template <typename Kernel>
inline bool ClusterFits(Kernel, int, int blocks = kClusterBlocks) {
  return emu::ClustersSupported() && blocks >= 1 && blocks <= kClusterMaxBlocks;
}

template <typename Kernel>
inline bool CooperativeFits(Kernel, int64_t grid, int threads) {
  return emu::CooperativeFits(grid, threads);
}
#endif

// Threads per block of a cluster launch of `blocks` blocks over `batch` entries per tree: the
// batch spread over the blocks, in whole warps, at most kClusterMaxThreads.
inline int ClusterThreads(int64_t batch, int blocks = kClusterBlocks) {
  const int64_t per = (batch + blocks - 1) / blocks;
  const int64_t warps = (per + 31) / 32;
  return static_cast<int>(warps * 32 < kClusterMaxThreads ? warps * 32 : kClusterMaxThreads);
}

// Whether a batch of `batch` entries per tree takes the one-cluster-per-tree path of `kernel`,
// in clusters of `blocks` blocks.
template <typename Kernel>
inline bool InClusters(Kernel kernel, int64_t batch, int64_t cluster_max_batch,
                       int blocks = kClusterBlocks) {
  return batch <= cluster_max_batch && ClusterFits(kernel, ClusterThreads(batch, blocks), blocks);
}

// The blocks of each tree's cluster: `asked` (the handlers' cluster_blocks) where a cluster of
// that many blocks of `kernel` fits the GPU for a batch of `batch` entries per tree, else the
// portable kClusterBlocks (which InClusters then asks about).
template <typename Kernel>
inline int ClusterBlocksFor(Kernel kernel, int64_t batch, int64_t asked) {
  if (asked == kClusterBlocks || asked < 1 || asked > kClusterMaxBlocks) return kClusterBlocks;
  const int blocks = static_cast<int>(asked);
  return ClusterFits(kernel, ClusterThreads(batch, blocks), blocks) ? blocks : kClusterBlocks;
}

inline unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// The table of `tags` (nullptr: none) on the device of `nodes` where a batch of `batch` entries
// per tree that takes the cluster path (clusters of `blocks`) takes its variant with the claims
// in a table kept between calls (tag_table.cuh): at most one entry per thread of the cluster,
// blocks of at most kTaggedMaxThreads, clusters of that kernel fit the GPU, and the table is
// there for these trees (made at its first use); else nullptr. `kernel`: the tagged kernel for
// the trees' K.
template <typename Kernel>
inline const TagTable* InTaggedClaims(Kernel kernel, TagTableMemory* tags, const float* nodes,
                                      int64_t trees, int64_t capacity, int64_t batch,
                                      int blocks = kClusterBlocks) {
  if (tags == nullptr || batch > int64_t{blocks} * kTaggedMaxThreads ||
      !ClusterFits(kernel, ClusterThreads(batch, blocks), blocks)) {
    return nullptr;
  }
  return tags->For(trees, capacity, nodes);
}

// The update's launches: one block per tree up to block_max_batch entries per tree; else one
// cluster per tree up to cluster_max_batch where the GPU has clusters (of cluster_blocks blocks
// where they fit, else 8: ClusterBlocksFor; its claims in the table of `tags` where given and
// the batch allows, its leaves' parents summed from it with tagged_siblings; else in the
// workspace); else reset, claim, leaves, then one launch per level from the leaves' parents up:
// a thread per entry (its ancestor) at the levels wider than the batch, a thread per node at the
// levels no wider than the batch but wider than narrow_max_nodes, and one block per tree for the
// rest (the narrow levels, whole, and Finish). Each kernel here that sums nodes has a build for
// K 16 (the _k16 kernels) for K 16's trees.
inline void LaunchUpdate(cudaStream_t stream, const UpdateArgs& a, const drlhet::TreeLayout& lay,
                         int64_t trees, int64_t block_max_batch, int64_t narrow_max_nodes,
                         int64_t cluster_max_batch, TagTableMemory* tags, bool tagged_siblings,
                         int64_t cluster_blocks = kClusterBlocks) {
  const bool k16 = a.k == 16;
  if (a.batch <= block_max_batch) {
    if (k16) {
      DRLHET_LAUNCH(drlhet_cuda_update_block_k16, trees, kBlockThreads, stream, a);
    } else {
      DRLHET_LAUNCH(drlhet_cuda_update_block, trees, kBlockThreads, stream, a);
    }
    return;
  }
  // with the sorted runs (sorted_runs.cuh), where the handler asks: their kernels of their own,
  // a batch they decline claimed in the workspace (the tagged claims' kernel spilled with
  // them, 132 bytes a thread at sm_90: not built)
  const bool sorted = a.sorted_runs != 0;
  auto in_cluster = sorted ? (k16 ? drlhet_cuda_update_cluster_sorted_k16
                                  : drlhet_cuda_update_cluster_sorted)
                           : (k16 ? drlhet_cuda_update_cluster_k16 : drlhet_cuda_update_cluster);
  auto tagged = k16 ? drlhet_cuda_update_cluster_tagged_k16 : drlhet_cuda_update_cluster_tagged;
  const int cs = ClusterBlocksFor(in_cluster, a.batch, cluster_blocks);
  if (InClusters(in_cluster, a.batch, cluster_max_batch, cs)) {
    const int threads = ClusterThreads(a.batch, cs);
    const TagTable* table =
        sorted ? nullptr : InTaggedClaims(tagged, tags, a.nodes, trees, a.capacity, a.batch, cs);
    if (table != nullptr) {
      TagTable view = *table;
      view.siblings = tagged_siblings;
      DRLHET_LAUNCH_CLUSTER(tagged, trees * cs, threads, cs, stream, a, cs, view);
      return;
    }
    DRLHET_LAUNCH_CLUSTER(in_cluster, trees * cs, threads, cs, stream, a, cs);
    return;
  }
  DRLHET_LAUNCH(drlhet_cuda_update_reset_args, Blocks(a.n), kThreads, stream, a);
  DRLHET_LAUNCH(drlhet_cuda_update_claim_args, Blocks(a.n), kThreads, stream, a);
  DRLHET_LAUNCH(drlhet_cuda_update_leaves_args, Blocks(a.n), kThreads, stream, a);
  const int whole = drlhet::NarrowTop(lay, a.batch, a.batch);  // levels 0..whole: <= batch
  const int top = drlhet::NarrowTop(lay, a.batch, narrow_max_nodes);
  auto ancestors = k16 ? drlhet_cuda_update_level_args_k16 : drlhet_cuda_update_level_args;
  for (int level = lay.depth - 1; level > whole; --level) {
    DRLHET_LAUNCH(ancestors, Blocks(a.n), kThreads, stream, a, level);
  }
  auto whole_level =
      k16 ? drlhet_cuda_update_whole_level_args_k16 : drlhet_cuda_update_whole_level_args;
  for (int level = whole; level > top; --level) {
    const int64_t nodes = trees * drlhet::NodesAt(lay, level);
    DRLHET_LAUNCH(whole_level, Blocks(nodes), kThreads, stream, a, level, nodes);
  }
  // always launched: it also writes a checked update's outputs (top -1: no level recomputed)
  auto top_levels = k16 ? drlhet_cuda_update_top_args_k16 : drlhet_cuda_update_top_args;
  DRLHET_LAUNCH(top_levels, trees, kBlockThreads, stream, a, top);
}

// How the sample's launches spread a batch over the GPU (sample_spread.cuh): batches of at least
// `min_batch` targets a tree, in blocks of `threads` (whole warps).
struct Spread {
  int64_t min_batch = int64_t{1} << 62;  // never
  int64_t threads = 128;  // checked by the handler: whole warps, at most kBlockThreads
};

// The sample's workspace, in int32 words a tree: SpreadWords where the batch may take the
// spread path (the other paths use the first two words of each tree's).
inline int64_t SampleWorkWords(int64_t batch, int64_t spread_min_batch) {
  return batch >= spread_min_batch ? SpreadWords(batch) : 2;
}

// Whether the sample's batch takes the spread path (SampleSpread): at least spread.min_batch
// targets a tree, blocks of whole warps, and the GPU holds the launch's blocks at once.
inline bool InSpread(const SampleArgs& a, int64_t trees, const Spread& spread) {
  if (a.batch < spread.min_batch || spread.threads < 32 || spread.threads > kBlockThreads ||
      spread.threads % 32 != 0) {
    return false;  // (the handlers refuse such threads before)
  }
  const int threads = static_cast<int>(spread.threads);
  const int64_t grid = trees * SpreadBlocksPerTree(a.batch, threads);
  return CooperativeFits(a.k == 16 ? drlhet_cuda_sample_spread_k16 : drlhet_cuda_sample_spread,
                         grid, threads);
}

// The sample's launches after its targets: spread over the GPU from spread.min_batch targets a
// tree where it holds the launch's blocks at once; else one block per tree up to kBlockThreads
// targets a tree; else one cluster per tree up to cluster_max_batch where the GPU has clusters
// (of cluster_blocks blocks where they fit, else 8: ClusterBlocksFor); else its scratch cleared,
// the descent, the weights. With shared_top, each block descends the top levels of its tree from
// a copy in shared memory (SetTopCopy; the same bits).
inline void LaunchWeigh(cudaStream_t stream, SampleArgs a, const drlhet::TreeLayout& lay,
                        int64_t trees, int64_t cluster_max_batch, bool shared_top,
                        const Spread& spread, int64_t cluster_blocks = kClusterBlocks) {
  SetTopCopy(&a, lay, shared_top);
  if (InSpread(a, trees, spread)) {
    const int threads = static_cast<int>(spread.threads);
    const int64_t per_tree = SpreadBlocksPerTree(a.batch, threads);
    auto spread_kernel = a.k == 16 ? drlhet_cuda_sample_spread_k16 : drlhet_cuda_sample_spread;
    DRLHET_LAUNCH_COOPERATIVE(spread_kernel, trees * per_tree, threads, stream, a,
                              static_cast<int32_t>(per_tree));
    return;
  }
  if (a.batch <= kBlockThreads) {
    const int threads = static_cast<int>((a.batch + 31) / 32 * 32);  // whole warps
    if (a.k == 16) {
      DRLHET_LAUNCH(drlhet_cuda_sample_block_k16, trees, threads, stream, a);
    } else {
      DRLHET_LAUNCH(drlhet_cuda_sample_block, trees, threads, stream, a);
    }
    return;
  }
  auto in_cluster = a.k == 16 ? drlhet_cuda_sample_cluster_k16 : drlhet_cuda_sample_cluster;
  const int cs = ClusterBlocksFor(in_cluster, a.batch, cluster_blocks);
  if (InClusters(in_cluster, a.batch, cluster_max_batch, cs)) {
    DRLHET_LAUNCH_CLUSTER(in_cluster, trees * cs, ClusterThreads(a.batch, cs), cs, stream, a,
                          cs);
    return;
  }
  cudaMemsetAsync(a.scratch, 0, 2 * trees * sizeof(int32_t), stream);
  if (a.k == 16) {
    DRLHET_LAUNCH(drlhet_cuda_sample_descend_k16, Blocks(a.n), kThreads, stream, a);
  } else {
    DRLHET_LAUNCH(drlhet_cuda_sample_descend, Blocks(a.n), kThreads, stream, a);
  }
  DRLHET_LAUNCH(drlhet_cuda_sample_normalise, Blocks(a.n), kThreads, stream, a);
}

}  // namespace drlhet_cuda
