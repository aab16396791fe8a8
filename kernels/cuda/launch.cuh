// The launch sequences of the CUDA backend's update and sample calls, shared by the XLA FFI
// handlers (sum_tree.cu, on XLA's stream) and the host emulation of the CUDA execution model
// (emu/cuda_emu.h, which defines DRLHET_LAUNCH and the runtime calls before including this), so
// that the emulation runs the same launches in the same order as a GPU.
// Include after sample_kernels.cuh, sum_tree_kernels.cuh, region_update.cuh and
// cluster_claims.cuh.
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

// Whether the current device can run a cluster of kClusterBlocks blocks of `threads` threads of
// `kernel` (compute capability 9.0 and up, and the blocks' registers fit the GPC's SMs at once):
// a query, never a failed launch, which would invalidate the stream capture XLA records its
// command buffers with. Asked once per (device, kernel, threads), then remembered: without
// XLA's command buffers a handler runs on the host at every call, and the occupancy query is
// host work of its own.
template <typename Kernel>
inline bool ClusterFits(Kernel kernel, int threads) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int>, bool> known;
  const auto key = std::make_tuple(device, reinterpret_cast<const void*>(kernel), threads);
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  // The queries are no stream work, but the handler may run while XLA records its command
  // buffer by capturing this thread's stream, and a capture can count a call it does not know
  // as unsafe and invalidate itself: they run in the relaxed capture mode, which CUDA provides
  // for a library's calls during a capture, and the thread's mode is restored after them.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  const bool relaxed = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  if (!relaxed) (void)cudaGetLastError();
  int launch = 0, clusters = 0;
  cudaError_t e = cudaDeviceGetAttribute(&launch, cudaDevAttrClusterLaunch, device);
  if (e == cudaSuccess && launch != 0) {
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config = ClusterConfig(kClusterBlocks, threads, kClusterBlocks,
                                                    nullptr, &attribute);
    e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
  }
  if (relaxed) (void)cudaThreadExchangeStreamCaptureMode(&mode);
  // a refused query is an answer (take another path), not the call's error: the handler reads
  // cudaGetLastError after its launches
  if (e != cudaSuccess) (void)cudaGetLastError();
  const bool fits = e == cudaSuccess && clusters > 0;
  known.emplace(key, fits);
  return fits;
}
#else
template <typename Kernel>
inline bool ClusterFits(Kernel, int) {
  return emu::ClustersSupported();
}
#endif

// Threads per block of a cluster launch over `batch` entries per tree: the batch spread over
// kClusterBlocks blocks, in whole warps, at most kClusterMaxThreads.
inline int ClusterThreads(int64_t batch) {
  const int64_t per = (batch + kClusterBlocks - 1) / kClusterBlocks;
  const int64_t warps = (per + 31) / 32;
  return static_cast<int>(warps * 32 < kClusterMaxThreads ? warps * 32 : kClusterMaxThreads);
}

// Whether a batch of `batch` entries per tree takes the one-cluster-per-tree path of `kernel`.
template <typename Kernel>
inline bool InClusters(Kernel kernel, int64_t batch, int64_t cluster_max_batch) {
  return batch <= cluster_max_batch && ClusterFits(kernel, ClusterThreads(batch));
}

inline unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// Whether a batch of `batch` entries per tree takes the region path (region_update.cuh): at
// most region_max_batch and kRegionSlots entries, a tree with a level of kClusterBlocks nodes
// above the leaves, and a GPU with clusters that fit its blocks.
inline bool InRegions(const drlhet::TreeLayout& lay, int64_t batch, int64_t region_max_batch) {
  return batch <= region_max_batch && batch <= kRegionSlots &&
         RegionLevel(lay, kClusterBlocks) >= 0 &&
         ClusterFits(drlhet_cuda_update_region, RegionThreads(batch));
}

// Whether a batch of `batch` entries per tree that takes the cluster path takes its variant with
// the claims in the cluster's shared memory (cluster_claims.cuh): asked for (shared_claims), at
// most one entry per thread of the cluster, and clusters of that kernel fit the GPU.
inline bool InSharedClaims(int64_t batch, bool shared_claims) {
  return shared_claims && batch <= kClaimMaxBatch &&
         ClusterFits(drlhet_cuda_update_cluster_shared, ClusterThreads(batch));
}

// The update's launches: one block per tree up to block_max_batch entries per tree; else one
// cluster per tree, each block a region of the tree, up to region_max_batch where the GPU has
// clusters; else one cluster per tree up to cluster_max_batch (its claims in the cluster's
// shared memory with shared_claims, where the batch allows); else reset, claim,
// leaves, then one launch per level from the leaves' parents up: a thread per entry (its
// ancestor) at the levels wider than the batch, a thread per node at the levels no wider than
// the batch but wider than narrow_max_nodes, and one block per tree for the rest (the narrow
// levels, whole, and Finish).
inline void LaunchUpdate(cudaStream_t stream, const UpdateArgs& a, const drlhet::TreeLayout& lay,
                         int64_t trees, int64_t block_max_batch, int64_t narrow_max_nodes,
                         int64_t cluster_max_batch, int64_t region_max_batch,
                         bool shared_claims) {
  if (a.batch <= block_max_batch) {
    DRLHET_LAUNCH(drlhet_cuda_update_block, trees, kBlockThreads, stream, a);
    return;
  }
  if (InRegions(lay, a.batch, region_max_batch)) {
    DRLHET_LAUNCH_CLUSTER(drlhet_cuda_update_region, trees * kClusterBlocks,
                          RegionThreads(a.batch), kClusterBlocks, stream, a, kClusterBlocks,
                          RegionLevel(lay, kClusterBlocks), RegionHashBits(a.batch));
    return;
  }
  if (InClusters(drlhet_cuda_update_cluster, a.batch, cluster_max_batch)) {
    if (InSharedClaims(a.batch, shared_claims)) {
      DRLHET_LAUNCH_CLUSTER(drlhet_cuda_update_cluster_shared, trees * kClusterBlocks,
                            ClusterThreads(a.batch), kClusterBlocks, stream, a, kClusterBlocks,
                            ClaimBits(a.batch));
      return;
    }
    DRLHET_LAUNCH_CLUSTER(drlhet_cuda_update_cluster, trees * kClusterBlocks,
                          ClusterThreads(a.batch), kClusterBlocks, stream, a, kClusterBlocks);
    return;
  }
  DRLHET_LAUNCH(drlhet_cuda_update_reset_args, Blocks(a.n), kThreads, stream, a);
  DRLHET_LAUNCH(drlhet_cuda_update_claim_args, Blocks(a.n), kThreads, stream, a);
  DRLHET_LAUNCH(drlhet_cuda_update_leaves_args, Blocks(a.n), kThreads, stream, a);
  const int whole = drlhet::NarrowTop(lay, a.batch, a.batch);  // levels 0..whole: <= batch
  const int top = drlhet::NarrowTop(lay, a.batch, narrow_max_nodes);
  for (int level = lay.depth - 1; level > whole; --level) {
    DRLHET_LAUNCH(drlhet_cuda_update_level_args, Blocks(a.n), kThreads, stream, a, level);
  }
  for (int level = whole; level > top; --level) {
    const int64_t nodes = trees * drlhet::NodesAt(lay, level);
    DRLHET_LAUNCH(drlhet_cuda_update_whole_level_args, Blocks(nodes), kThreads, stream, a, level,
                  nodes);
  }
  // always launched: it also writes a checked update's outputs (top -1: no level recomputed)
  DRLHET_LAUNCH(drlhet_cuda_update_top_args, trees, kBlockThreads, stream, a, top);
}

// The sample's launches after its targets: one block per tree up to kBlockThreads targets per
// tree; else one cluster per tree up to cluster_max_batch where the GPU has clusters; else its
// scratch cleared, the descent, the weights. With shared_top, each block descends the top
// levels of its tree from a copy in shared memory (SetTopCopy; the same bits).
inline void LaunchWeigh(cudaStream_t stream, SampleArgs a, const drlhet::TreeLayout& lay,
                        int64_t trees, int64_t cluster_max_batch, bool shared_top) {
  SetTopCopy(&a, lay, shared_top);
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
  if (InClusters(in_cluster, a.batch, cluster_max_batch)) {
    DRLHET_LAUNCH_CLUSTER(in_cluster, trees * kClusterBlocks, ClusterThreads(a.batch),
                          kClusterBlocks, stream, a, kClusterBlocks);
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
