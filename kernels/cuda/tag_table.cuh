// The cluster update's claims in a table that outlives the call (TaggedClaims): one 64-bit slot
// per leaf, `tag << kTagPosBits | position`, where `tag` counts the updates of the table's tree
// (from 1; its last in `last`, 0 at first). An entry claims its leaf with one 64-bit atomicMax:
// the current tag beats every slot an earlier update left (older tags are smaller), and within
// the tag the largest kept position wins (drlhet::WinnerMerge, as every path). After the claims'
// barrier an entry won where its leaf's slot holds its own `tag << kTagPosBits | position`.
// What it removes from the workspace's claims (WorkspaceClaims, sum_tree_kernels.cuh): the reset
// of each entry's winner slot to -1 and the cluster barrier whose release waits for those
// scattered stores, because a slot of an older update can never equal a current claim (a
// workspace that XLA hands out anew at each call could hold anything). When a tree's tags
// would pass kTagMax (after 2^44 updates) its cluster clears the tree's slots once and starts
// again from 1. The same winners, so the same bits as every path.
// Where the table lives: with one custom call of XLA (an FFI handler's state, made when the
// executable is: handlers.h's TagTableState), 8 bytes a leaf a tree, allocated and cleared at
// its first update (TagTableMemory); the buffer's state, checkpoints and the other backends do
// not change. A batch of at most one entry per thread of the cluster (kClaimMaxBatch).
// Include after sum_tree_kernels.cuh and cluster_claims.cuh.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <mutex>
#if defined(__CUDACC__)
#include <vector>
#endif

namespace drlhet_cuda {

constexpr int kTagPosBits = 20;  // a position in the tree's batch: at most kClaimMaxBatch
constexpr unsigned long long kTagMax = (1ull << (64 - kTagPosBits)) - 1;
static_assert(kClaimMaxBatch <= (int64_t{1} << kTagPosBits), "a position must fit its bits");

// A table's memory as the kernel reads it.
struct TagTable {
  unsigned long long* slots;  // [V, C] tag << kTagPosBits | position of each leaf's last claim
  unsigned long long* last;   // [V] each tree's last tag (0: none yet)
};

__device__ inline unsigned long long TagSlot(unsigned long long tag, int64_t pos) {
  return tag << kTagPosBits | static_cast<unsigned long long>(pos);
}

// ClusterUpdate's claims in a TagTable (above). Held by value in each thread: `tag` is the
// update's, read from the table when the thread claims.
struct TaggedClaims {
  static constexpr bool kAnyBatch = false;
  TagTable table;
  unsigned long long tag = 0;

  // The thread's entry read and claimed; no reset, no barrier before the claim (after kTagMax
  // updates: the tree's slots cleared and a barrier, once). The tree's words merged into the
  // block's (`bad`, `most`). Every thread of the cluster calls it. Returns the entry's claim.
  __device__ EntryClaim Claim(const UpdateArgs& a, const ClusterPlace& c, unsigned rank,
                              int32_t* bad, int32_t* most) {
    (void)rank;
    unsigned long long* slots = table.slots + c.v * a.capacity;
    tag = table.last[c.v] + 1;  // the same in every thread of the cluster
    const EntryClaim first = ReadClaim(a, c.base + c.t, c.t < a.batch);
    if (tag > kTagMax) {
      for (int64_t s = c.t; s < a.capacity; s += c.all) slots[s] = 0;
      ClusterSync();  // every slot cleared before any claim
      tag = 1;
    }
    if (first.take) atomicMax(slots + first.leaf, TagSlot(tag, c.t));
    MergeWordsInBlock(first, bad, most);  // every thread of the warp
    return first;
  }

  // After the claims' barrier, which every thread passed after it read the last tag: the
  // update's tag becomes the tree's last (by one thread).
  __device__ void Settle(const UpdateArgs&, const ClusterPlace& c) const {
    if (c.t == 0) table.last[c.v] = tag;
  }

  // Whether the thread's entry `e` won its leaf, after the claims' barrier (ClusterUpdate).
  __device__ bool Won(const UpdateArgs& a, const ClusterPlace& c, const EntryClaim& e,
                      bool refused) const {
    if (!e.take || refused) return false;
    return table.slots[c.v * a.capacity + e.leaf] == TagSlot(tag, c.t);
  }
};

// A table's memory on the host's side, for `trees` trees of `capacity` leaves, made at its
// first use (For) and kept until this object goes: on a GPU allocated with cudaMalloc and
// cleared, on the emulation with calloc; or borrowed (Borrow: the caller's, which it keeps).
class TagTableMemory {
 public:
  TagTableMemory() = default;
  TagTableMemory(const TagTableMemory&) = delete;
  TagTableMemory& operator=(const TagTableMemory&) = delete;
  ~TagTableMemory() {
    if (owned_) Free(base_);
  }

  // `base` ([trees * (capacity + 1)] words: the slots, then each tree's last tag) as the table.
  void Borrow(unsigned long long* base, int64_t trees, int64_t capacity) {
    base_ = base;
    trees_ = trees;
    capacity_ = capacity;
  }

  // The table of `trees` trees of `capacity` leaves (made at the first call), or nullptr where
  // it could not be allocated or is another shape's (the caller then claims in its workspace).
  const TagTable* For(int64_t trees, int64_t capacity) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (base_ == nullptr && !failed_) {
      base_ = Allocate(static_cast<size_t>(trees) * (capacity + 1));
      failed_ = base_ == nullptr;
      owned_ = !failed_;
      trees_ = trees;
      capacity_ = capacity;
    }
    if (base_ == nullptr || trees != trees_ || capacity != capacity_) return nullptr;
    table_ = TagTable{base_, base_ + trees * capacity};
    return &table_;
  }

 private:
#if defined(__CUDACC__)
  // `words` zeros in the current device's memory, or nullptr (any error cleared). Called while
  // XLA may be recording a command buffer from this thread's stream: in CUDA's relaxed capture
  // mode, on a stream of its own (never the one captured), waited for before it returns.
  static unsigned long long* Allocate(size_t words) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    const bool relaxed = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
    void* p = nullptr;
    cudaStream_t own = nullptr;
    bool ok = cudaMalloc(&p, words * sizeof(unsigned long long)) == cudaSuccess &&
              cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) == cudaSuccess &&
              cudaMemsetAsync(p, 0, words * sizeof(unsigned long long), own) == cudaSuccess &&
              cudaStreamSynchronize(own) == cudaSuccess;
    if (own != nullptr) cudaStreamDestroy(own);
    if (!ok && p != nullptr) cudaFree(p);
    (void)cudaGetLastError();  // a refused allocation is an answer: the workspace's claims
    if (relaxed) (void)cudaThreadExchangeStreamCaptureMode(&mode);
    return ok ? static_cast<unsigned long long*>(p) : nullptr;
  }
  static void Free(unsigned long long* p) {
    cudaFree(p);
    (void)cudaGetLastError();
  }
#else
  static unsigned long long* Allocate(size_t words) {
    return static_cast<unsigned long long*>(std::calloc(words, sizeof(unsigned long long)));
  }
  static void Free(unsigned long long* p) { std::free(p); }
#endif

  std::mutex mutex_;
  unsigned long long* base_ = nullptr;
  int64_t trees_ = 0, capacity_ = 0;
  bool owned_ = false, failed_ = false;
  TagTable table_{};
};

}  // namespace drlhet_cuda

extern "C" {

// grid = V trees * cs blocks, in clusters of cs = kClusterBlocks (ClusterUpdate with
// TaggedClaims); at most kClaimMaxBatch entries per tree; sm_90 and up.
__global__ void __launch_bounds__(1024)
    drlhet_cuda_update_cluster_tagged(drlhet_cuda::UpdateArgs a, int32_t cs,
                                      drlhet_cuda::TagTable table) {
  drlhet_cuda::ClusterUpdate(a, cs, drlhet_cuda::TaggedClaims{table});
}

}  // extern "C"
