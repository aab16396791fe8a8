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
#include <map>
#include <mutex>

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

// A table's memory on the host's side, for `trees` trees of `capacity` leaves, one per device
// (XLA may run one executable, and so one handler's state, on several GPUs): made at its first
// use on that device (For) and kept until this object goes; on a GPU allocated with cudaMalloc
// and cleared, on the emulation with calloc (its one device: 0); or borrowed (Borrow: the
// caller's, which it keeps).
class TagTableMemory {
 public:
  TagTableMemory() = default;
  TagTableMemory(const TagTableMemory&) = delete;
  TagTableMemory& operator=(const TagTableMemory&) = delete;
  ~TagTableMemory() {
    for (auto& [device, t] : tables_) {
      if (t.owned) Free(device, t.base);
    }
  }

  // `base` ([trees * (capacity + 1)] words: the slots, then each tree's last tag) as the
  // emulation's table.
  void Borrow(unsigned long long* base, int64_t trees, int64_t capacity) {
    tables_[0] = Table{base, trees, capacity, false, {}};
  }

  // The table of `trees` trees of `capacity` leaves on the device that holds `near` (a device
  // pointer of the call: its tree), made at the first call there, or nullptr where it could not
  // be allocated or is another shape's (the caller then claims in its workspace).
  const TagTable* For(int64_t trees, int64_t capacity, const void* near) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const int device = DeviceOf(near);
    if (device < 0) return nullptr;
    auto [it, made] = tables_.try_emplace(device);
    Table& t = it->second;
    if (made) {
      t = Table{Allocate(device, static_cast<size_t>(trees) * (capacity + 1)), trees, capacity,
                true, {}};
      t.owned = t.base != nullptr;
    }
    if (t.base == nullptr || trees != t.trees || capacity != t.capacity) return nullptr;
    t.view = TagTable{t.base, t.base + trees * capacity};
    return &t.view;
  }

 private:
  struct Table {
    unsigned long long* base = nullptr;  // nullptr: its allocation failed (not tried again)
    int64_t trees = 0, capacity = 0;
    bool owned = false;
    TagTable view{};
  };

#if defined(__CUDACC__)
  // Runs `body` in CUDA's relaxed capture mode: XLA may be recording a command buffer from
  // this thread's stream, and these calls are not part of it.
  template <typename Body>
  static auto Relaxed(Body body) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    const bool relaxed = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
    auto result = body();
    (void)cudaGetLastError();  // a refused query or allocation is an answer, not the call's error
    if (relaxed) (void)cudaThreadExchangeStreamCaptureMode(&mode);
    return result;
  }

  // The device of the device pointer `p`, or -1.
  static int DeviceOf(const void* p) {
    return Relaxed([p] {
      cudaPointerAttributes attributes{};
      const bool ok = cudaPointerGetAttributes(&attributes, p) == cudaSuccess &&
                      attributes.type == cudaMemoryTypeDevice;
      return ok ? attributes.device : -1;
    });
  }

  // `words` zeros in `device`'s memory, or nullptr: allocated, then cleared on a stream of its
  // own (never the one XLA may be capturing) and waited for, the current device restored.
  static unsigned long long* Allocate(int device, size_t words) {
    return Relaxed([device, words]() -> unsigned long long* {
      int current = 0;
      if (cudaGetDevice(&current) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
        return nullptr;
      }
      void* p = nullptr;
      cudaStream_t own = nullptr;
      const size_t bytes = words * sizeof(unsigned long long);
      const bool ok = cudaMalloc(&p, bytes) == cudaSuccess &&
                      cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) == cudaSuccess &&
                      cudaMemsetAsync(p, 0, bytes, own) == cudaSuccess &&
                      cudaStreamSynchronize(own) == cudaSuccess;
      if (own != nullptr) cudaStreamDestroy(own);
      if (!ok && p != nullptr) cudaFree(p);
      cudaSetDevice(current);
      return ok ? static_cast<unsigned long long*>(p) : nullptr;
    });
  }

  static void Free(int device, unsigned long long* p) {
    int current = 0;
    if (cudaGetDevice(&current) == cudaSuccess && cudaSetDevice(device) == cudaSuccess) {
      cudaFree(p);
      cudaSetDevice(current);
    }
    (void)cudaGetLastError();
  }
#else
  static int DeviceOf(const void*) { return 0; }
  static unsigned long long* Allocate(int, size_t words) {
    return static_cast<unsigned long long*>(std::calloc(words, sizeof(unsigned long long)));
  }
  static void Free(int, unsigned long long* p) { std::free(p); }
#endif

  std::mutex mutex_;
  std::map<int, Table> tables_;  // by device (nodes stay put: the views' addresses too)
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
