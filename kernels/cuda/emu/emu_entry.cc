// The CUDA backend's update and sample calls run by the host emulation of the CUDA execution
// model (cuda_emu.h): the same kernels (../sum_tree_kernels.cuh, ../sample_kernels.cuh) through
// the same launch sequences (../launch.cuh) as the XLA FFI handlers, exported for ctypes
// (tests/backends/test_cuda_emu*.py). Built on every machine, with or without a CUDA toolkit.
// The workspace starts as garbage, as XLA leaves it: the launches must not read what they did
// not write.
#include <cstdint>
#include <mutex>
#include <vector>

#include "cuda_emu.h"
// the kernels, then their launches
#include "../sample_kernels.cuh"
#include "../sample_spread.cuh"
#include "../sum_tree_kernels.cuh"
#include "../tag_table.cuh"
#include "../launch.cuh"

namespace {

constexpr int32_t kGarbage = 0x5A5A5A5A;

// Lane 0 of each warp waits at a warp collective, the other lanes at __syncthreads: neither
// barrier can complete (a GPU hangs).
__global__ void DivergentBarriers() {
  if (threadIdx.x % 32 == 0) {
    (void)__shfl_sync(0xffffffffu, 1, 0);
  } else {
    __syncthreads();
  }
}

// Each thread appends its index to `order` as it starts (the fibers of a block never run at
// once, so the append needs no atomics).
__global__ void RecordStart(int32_t* order, int32_t* count) { order[(*count)++] = threadIdx.x; }

// Thread x of block b writes b into its slot, the cluster meets (ClusterSync), then reads the
// slot of thread x of the next block of its cluster (cyclically): b + 1, or the cluster's first.
// Every thread's BlockLayout (WarpLayout, by the first warp) into out[threadIdx.x].
__global__ void LayoutOfEachThread(int64_t capacity, int32_t k, drlhet::TreeLayout* out) {
  out[threadIdx.x] = drlhet_cuda::BlockLayout(capacity, k);
}

__global__ void ClusterRing(int32_t* slots, int32_t* seen, unsigned cluster) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  slots[i] = static_cast<int32_t>(blockIdx.x);
  drlhet_cuda::ClusterSync();
  const unsigned first = blockIdx.x / cluster * cluster;
  const unsigned next = first + (blockIdx.x - first + 1) % cluster;
  seen[i] = slots[next * blockDim.x + threadIdx.x];
}

// 0, or -2 when a launch failed (a bad configuration, or a barrier that never completed).
int Status() { return cudaGetLastError() == cudaSuccess ? 0 : -2; }

}  // namespace

extern "C" {

// The order the threads of each block start in: 0 in order, 1 in reverse, else a shuffle seeded
// by `schedule` (cuda_emu.h). For every later call.
DRLHET_EMU_EXPORT void drlhet_emu_schedule(int64_t schedule) {
  const std::lock_guard<std::mutex> lock(emu::Lock());
  emu::SetSchedule(schedule);
}

// Launches DivergentBarriers (2 blocks of 64 threads): the emulation's check that a launch
// whose barriers never complete fails (-2) instead of hanging.
DRLHET_EMU_EXPORT int drlhet_emu_divergent_barriers() {
  const std::lock_guard<std::mutex> lock(emu::Lock());
  emu::Launch(DivergentBarriers, 2, 64);
  return Status();
}

// The order the threads of one block of `threads` start in under the current schedule.
DRLHET_EMU_EXPORT int drlhet_emu_start_order(int threads, int32_t* order) {
  const std::lock_guard<std::mutex> lock(emu::Lock());
  int32_t count = 0;
  emu::Launch(RecordStart, 1, static_cast<unsigned>(threads), order, &count);
  return Status();
}

// Launches ClusterRing over `grid` blocks of `threads` threads in clusters of `cluster`; seen
// [grid * threads]. Returns 0, or -2 for a failed launch (e.g. a cluster of more than 8 blocks).
DRLHET_EMU_EXPORT int drlhet_emu_cluster_ring(unsigned grid, unsigned threads, unsigned cluster,
                                              int32_t* seen) {
  const std::lock_guard<std::mutex> lock(emu::Lock());
  std::vector<int32_t> slots(static_cast<size_t>(grid) * threads, kGarbage);
  emu::LaunchCluster(ClusterRing, grid, threads, cluster, slots.data(), seen, cluster);
  return Status();
}

// Whether the layout every thread of a block of `threads` reads from BlockLayout (built by its
// first warp, WarpLayout) is MakeLayout's, every member of it: 1 yes, 0 no, -2 a failed launch.
DRLHET_EMU_EXPORT int drlhet_emu_block_layout_matches(int64_t capacity, int k, unsigned threads) {
  drlhet::TreeLayout want;
  drlhet::MakeLayout(capacity, k, &want);
  std::vector<drlhet::TreeLayout> got(threads);
  {
    const std::lock_guard<std::mutex> lock(emu::Lock());
    emu::Launch(LayoutOfEachThread, 1, threads, capacity, static_cast<int32_t>(k), got.data());
    if (Status() != 0) return -2;
  }
  for (const auto& lay : got) {
    bool same = lay.depth == want.depth && lay.size == want.size &&
                lay.capacity == want.capacity && lay.k == want.k;
    for (int level = 0; level < drlhet::kMaxLevels; ++level) {
      same = same && lay.offsets[level] == want.offsets[level] &&
             lay.counts[level] == want.counts[level];
    }
    if (!same) return 0;
  }
  return 1;
}

// The blocks a cluster of the last emulated launch had (1: a launch not in clusters; 0: none
// yet), so that a test of a cluster width can tell that the launch took it.
DRLHET_EMU_EXPORT int drlhet_emu_last_cluster() {
  const std::lock_guard<std::mutex> lock(emu::Lock());
  return static_cast<int>(emu::last_cluster);
}

// How many clusters have written their tree by the sorted runs (sorted_runs.cuh) since the
// library was loaded, so that a test can tell which path an update took.
DRLHET_EMU_EXPORT int64_t drlhet_emu_sorted_updates() {
  const std::lock_guard<std::mutex> lock(emu::Lock());
  return emu::sorted_updates;
}

// The levels of a tree of (capacity, k) the sample's descents read from a block's copy in
// shared memory (drlhet_cuda::TopLevelsFor, on), or -1 for a bad (capacity, k).
DRLHET_EMU_EXPORT int drlhet_emu_top_levels(int64_t capacity, int k) {
  drlhet::TreeLayout lay;
  if (!drlhet::MakeLayout(capacity, k, &lay)) return -1;
  return drlhet_cuda::TopLevelsFor(lay, true);
}

// Whether drlhet_emu_weigh of `trees` trees of `batch` targets (K `k`) takes the spread path
// (drlhet_cuda::InSpread: batch >= spread_min_batch and the emulation's cooperative launch
// holds trees * ceil(batch / spread_threads) blocks of spread_threads): 1 or 0.
DRLHET_EMU_EXPORT int drlhet_emu_in_spread(int64_t trees, int64_t batch, int k,
                                           int64_t spread_min_batch, int32_t spread_threads) {
  drlhet_cuda::SampleArgs a{};
  a.batch = batch;
  a.k = k;
  return drlhet_cuda::InSpread(a, trees, drlhet_cuda::Spread{spread_min_batch, spread_threads})
             ? 1
             : 0;
}

// drlhet_cuda_weigh on `trees` trees of `batch` targets each (spread over blocks of
// spread_threads when batch >= spread_min_batch and the launch fits the emulation's
// cooperative limits, else one cluster of cluster_blocks blocks per tree when 1024 < batch <=
// cluster_max_batch), or
// drlhet_cuda_weigh_key where `key` ([trees, 2]
// threefry2x32 words; targets unused) is given; with shared_top, the descents read the trees'
// top levels from a copy in shared memory (SetTopCopy). Returns 0, or -1 for a bad (capacity, k), -2
// for a failed launch.
DRLHET_EMU_EXPORT int drlhet_emu_weigh(const float* nodes, int64_t capacity, int k,
                                       const float* targets, int64_t trees, int64_t batch,
                                       const int32_t* size, const float* beta, int32_t err_empty,
                                       int32_t err_beta, int64_t cluster_max_batch,
                                       int32_t* indices, float* probs, float* weights,
                                       int32_t* error, const uint32_t* key, int32_t stratified,
                                       int32_t shared_top, int64_t spread_min_batch,
                                       int32_t spread_threads, int32_t cluster_blocks) {
  drlhet::TreeLayout lay;
  if (!drlhet::MakeLayout(capacity, k, &lay) || trees < 1 || batch < 1) return -1;
  const std::lock_guard<std::mutex> lock(emu::Lock());
  std::vector<int32_t> scratch(trees * drlhet_cuda::SampleWorkWords(batch, spread_min_batch),
                               kGarbage);
  const drlhet_cuda::SampleArgs a{nodes,   capacity, k,       targets, batch,
                                  trees * batch, size,  beta,    indices, probs,
                                  weights, error,    scratch.data(), err_empty, err_beta,
                                  key,     stratified};
  drlhet_cuda::LaunchWeigh(nullptr, a, lay, trees, cluster_max_batch, shared_top != 0,
                           drlhet_cuda::Spread{spread_min_batch, spread_threads},
                           cluster_blocks);
  return Status();
}

// drlhet_cuda_update (raw == nullptr) or drlhet_cuda_update_checked on `trees` trees of `batch`
// entries each, the nodes in place; one block per tree when batch <= block_max_batch, else one
// cluster of cluster_blocks blocks per tree when batch <= cluster_max_batch, else the per-level
// launches with levels of at most narrow_max_nodes nodes in one block per tree. With `tags`
// ([trees * (capacity + 1)] words, the caller's, kept between calls: a claims table's slots,
// then each tree's last tag; tag_table.cuh), the cluster path's batches of at most one entry
// per thread claim in it (and with tagged_siblings sum their leaves' parents from it); with
// sorted_runs, the cluster path first tries the sorted runs (sorted_runs.cuh). The
// checked update's outputs are max_out and err_out; bad_out [trees] is each tree's refusal word.
// Returns 0, or -1 for a bad (capacity, k), -2 for a failed launch.
DRLHET_EMU_EXPORT int drlhet_emu_update(float* nodes, int64_t capacity, int k,
                                        const int32_t* indices, const float* values,
                                        const bool* keep, int64_t trees, int64_t batch,
                                        int64_t block_max_batch, int64_t narrow_max_nodes,
                                        int64_t cluster_max_batch, const float* raw,
                                        const int32_t* size, float priority_max,
                                        int32_t err_index, int32_t err_priority,
                                        const float* max_in, const int32_t* err_in,
                                        float* max_out, int32_t* err_out, int32_t* bad_out,
                                        unsigned long long* tags, int64_t tagged_siblings,
                                        int32_t cluster_blocks, int32_t sorted_runs) {
  drlhet::TreeLayout lay;
  if (!drlhet::MakeLayout(capacity, k, &lay) || trees < 1 || batch < 1) return -1;
  const std::lock_guard<std::mutex> lock(emu::Lock());
  std::vector<int32_t> work(trees * (capacity + 2), kGarbage);
  drlhet_cuda::UpdateArgs a{};
  a.nodes = nodes;
  a.capacity = capacity;
  a.k = k;
  a.indices = indices;
  a.values = values;
  a.keep = keep;
  a.batch = batch;
  a.n = trees * batch;
  a.winner = work.data();
  a.bad = a.winner + trees * capacity;
  a.sorted_runs = sorted_runs;
  if (raw != nullptr) {
    a.max_bits = a.bad + trees;
    a.raw = raw;
    a.size = size;
    a.priority_max = priority_max;
    a.err_index = err_index;
    a.err_priority = err_priority;
    a.max_in = max_in;
    a.err_in = err_in;
    a.max_out = max_out;
    a.err_out = err_out;
  }
  drlhet_cuda::TagTableMemory table;
  if (tags != nullptr) table.Borrow(tags, trees, capacity);
  drlhet_cuda::LaunchUpdate(nullptr, a, lay, trees, block_max_batch, narrow_max_nodes,
                            cluster_max_batch, tags != nullptr ? &table : nullptr,
                            tagged_siblings != 0, cluster_blocks);
  for (int64_t v = 0; v < trees; ++v) bad_out[v] = a.bad[v];
  return Status();
}

}  // extern "C"
