// The cluster update's claims in a table that outlives the call (TaggedClaims): one 64-bit slot
// per leaf, `(tag << kTagPosBits | position) << 32 | value`, where `tag` counts the updates of the
// table's tree (from 1; its last in `last`, 0 at first) and `value` is the claiming entry's leaf
// value (its float's bits). An entry claims its leaf with one 64-bit atomicMax: the current tag
// beats every slot an earlier update left (older tags are smaller), and within the tag the
// largest kept position wins (drlhet::WinnerMerge, as every path; the positions differ, so the
// value never decides). After the claims' barrier an entry won where its leaf's slot holds its
// own tag and position.
// What it removes from the workspace's claims (WorkspaceClaims, sum_tree_kernels.cuh): the reset
// of each entry's winner slot to -1 and the cluster barrier whose release waits for those
// scattered stores, because a slot of an older update can never equal a current claim (a
// workspace that XLA hands out anew at each call could hold anything). With `siblings`
// (TagTable, LeafAndParent) also the barrier after the leaves: a slot of the current tag says
// that this update writes the leaf and with which value, so each winner sums its leaf's parent
// from the K children's slots and the tree's old leaves, without waiting for the other
// winners' leaves. When a tree's tags would pass kTagMax (after 2^19 - 1 updates) its cluster
// clears the tree's slots once and starts again from 1. The same winners and sums, so the same
// bits as every path.
// Where the table lives: with one custom call of XLA (an FFI handler's state, made when the
// executable is: handlers.h's TagTableState), 8 bytes a leaf a tree, allocated and cleared at
// its first update (TagTableMemory); the buffer's state, checkpoints and the other backends do
// not change. A batch of at most one entry per thread of the cluster (kTaggedMaxBatch).
// Include after sum_tree_kernels.cuh.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace drlhet_cuda {

// Threads a block of the tagged kernel at most: its launch bounds, so that LeafAndParent's
// slots and leaves in flight at once (48 registers) fit without spilling (at 1024 threads a
// block, 64 registers a thread: spills). A batch past the cluster's blocks times this claims in
// the workspace (InTaggedClaims).
constexpr int kTaggedMaxThreads = kClusterMaxThreads < 512 ? kClusterMaxThreads : 512;
constexpr int64_t kTaggedMaxBatch = int64_t{kClusterMaxBlocks} * kTaggedMaxThreads;  // per tree
constexpr int kTagPosBits = 13;  // a position in the tree's batch: below kTaggedMaxBatch
constexpr unsigned long long kTagMax = (1ull << (32 - kTagPosBits)) - 1;
static_assert(kTaggedMaxBatch <= (int64_t{1} << kTagPosBits), "a position must fit its bits");

// A table's memory as the kernel reads it, and whether the leaves' parents are summed from it.
struct TagTable {
  unsigned long long* slots;  // [V, C] each leaf's last claim: TagSlot
  unsigned long long* last;   // [V] each tree's last tag (0: none yet)
  bool siblings = false;      // TaggedClaims::LeafAndParent
};

// A claim's slot's high word: the tag, then the position.
__device__ inline uint32_t TagHigh(unsigned long long tag, int64_t pos) {
  return static_cast<uint32_t>(tag << kTagPosBits | static_cast<unsigned long long>(pos));
}

// The slot of the claim of position `pos` of update `tag` writing `value`.
__device__ inline unsigned long long TagSlot(unsigned long long tag, int64_t pos, float value) {
  uint32_t bits = 0;
  memcpy(&bits, &value, sizeof(bits));
  return static_cast<unsigned long long>(TagHigh(tag, pos)) << 32 | bits;
}

// chunk[j] = s[j] for j < count (count <= kLoadChunk), else 0: two at a time where s is
// 16-byte aligned and count even, else one at a time (LoadChunk's reasoning, for slots).
__device__ inline void LoadSlots(const unsigned long long* s, int count,
                                 unsigned long long (&chunk)[kLoadChunk]) {
  if ((reinterpret_cast<uintptr_t>(s) & 15u) == 0 && (count & 1) == 0) {
#pragma unroll
    for (int q = 0; q < kLoadChunk / 2; ++q) {
      unsigned long long v[2] = {0, 0};
      if (2 * q < count) {
#if defined(__CUDA_ARCH__)
        const ulonglong2 w = reinterpret_cast<const ulonglong2*>(s)[q];
        v[0] = w.x;
        v[1] = w.y;
#else
        std::memcpy(v, s + 2 * q, sizeof(v));
#endif
      }
      chunk[2 * q] = v[0];
      chunk[2 * q + 1] = v[1];
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < kLoadChunk; ++j) chunk[j] = j < count ? s[j] : 0ull;
}

// ClusterUpdate's claims in a TagTable (above). Held by value in each thread: `tag` is the
// update's, read from the table when the thread claims.
struct TaggedClaims {
  static constexpr bool kAnyBatch = false;
  static constexpr bool kSiblings = true;  // LeafAndParent, where table.siblings
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
    if (first.take) atomicMax(slots + first.leaf, TagSlot(tag, c.t, first.value));
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
    return table.slots[c.v * a.capacity + e.leaf] >> 32 == TagHigh(tag, c.t);
  }

  // With table.siblings, after the claims' barrier, instead of Won and the leaves' barrier:
  // whether the thread's entry `e` won its leaf (false when not taken or `refused`); where it
  // did, its leaf written to `tree`, and by the winner of the parent's first child that this
  // update writes (one thread a parent), the leaf's parent, summed from its K children in
  // drlhet::SeqSum's order (SumChildrenWide's), each child this update writes taken from its
  // slot (the winner's value) and the others from the tree. The same values in the same order
  // as RecomputeNodeWide after the leaves' barrier, so the same bits. A sibling leaf that
  // another winner writes meanwhile is read from its slot, never from the tree; leaves past the
  // capacity are the tree's padding (+0), never claimed.
  // KStatic > 0: K fixed at compile time (KOf).
  template <int KStatic>
  __device__ bool LeafAndParent(const UpdateArgs& a, const ClusterPlace& c,
                                const drlhet::TreeLayout& lay, const EntryClaim& e, bool refused,
                                float* tree) const {
    if (!e.take) return false;  // `refused` only before the writes: its words' reads from
                                // the cluster's blocks then overlap the loads below
    const int k = KOf<KStatic>(lay);
    const int64_t parent = e.leaf / k, first = parent * k;
    const unsigned long long* slots = table.slots + c.v * a.capacity + first;
    const float* leaves = tree + lay.offsets[lay.depth] + first;
    const int64_t claimable = a.capacity - first;  // children with a slot
    const uint32_t mine = TagHigh(tag, c.t);
    bool won = false, after = false;  // after: a child before the leaf is written too
    float acc = 0.0f;
    for (int base = 0; base < k; base += kLoadChunk) {
      const int count = k - base < kLoadChunk ? k - base : kLoadChunk;
      const int64_t with_slot = claimable - base < count ? claimable - base : count;
      float chunk[kLoadChunk];
      unsigned long long slot[kLoadChunk];
      LoadChunk(leaves + base, count, chunk);
      LoadSlots(slots + base, with_slot > 0 ? static_cast<int>(with_slot) : 0, slot);
#pragma unroll
      for (int j = 0; j < kLoadChunk; ++j) {
        if (j >= count) continue;
        const uint32_t high = static_cast<uint32_t>(slot[j] >> 32);
        float child = chunk[j];
        if (high >> kTagPosBits == tag) {  // this update writes the leaf: its winner's value
          const uint32_t bits = static_cast<uint32_t>(slot[j]);
          memcpy(&child, &bits, sizeof(child));
          after = after || first + base + j < e.leaf;
        }
        if (first + base + j == e.leaf) won = high == mine;
        acc = base + j == 0 ? child : drlhet::SumChild(acc, child);
      }
    }
    won = won && !refused;
    if (won) tree[lay.offsets[lay.depth] + e.leaf] = e.value;
    if (won && !after) tree[lay.offsets[lay.depth - 1] + parent] = acc;
    return won;
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

// grid = V trees * cs blocks, in clusters of cs <= kClusterMaxBlocks (ClusterUpdate with
// TaggedClaims), of at most kTaggedMaxThreads threads; at most one entry a thread; sm_90 and up.
__global__ void __launch_bounds__(drlhet_cuda::kTaggedMaxThreads)
    drlhet_cuda_update_cluster_tagged(drlhet_cuda::UpdateArgs a, int32_t cs,
                                      drlhet_cuda::TagTable table) {
  drlhet_cuda::ClusterUpdate<0>(a, cs, drlhet_cuda::TaggedClaims{table});
}
// The same for K 16 only.
__global__ void __launch_bounds__(drlhet_cuda::kTaggedMaxThreads)
    drlhet_cuda_update_cluster_tagged_k16(drlhet_cuda::UpdateArgs a, int32_t cs,
                                          drlhet_cuda::TagTable table) {
  drlhet_cuda::ClusterUpdate<16>(a, cs, drlhet_cuda::TaggedClaims{table});
}

}  // extern "C"
