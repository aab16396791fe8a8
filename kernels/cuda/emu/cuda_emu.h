// A functional emulation of the CUDA execution model on the host, for the CUDA backend's kernels
// (kernels/cuda/*.cuh) and its XLA FFI handlers (kernels/cuda/handlers.h) on a machine without a
// GPU. The blocks of a launch run one after the other (a launch in clusters: one cluster of
// blocks after the other; in the grid's order, reversed or shuffled by the schedule; a
// cooperative launch: all its blocks together), launches in order (one stream); the threads of
// a block (of a cluster, of a cooperative launch) run as fibers (ucontext) on the calling
// thread, each until it waits at a barrier or returns. __syncthreads is a barrier of the block,
// ClusterSync one of the cluster (of the block in a plain launch), GridSync one of a
// cooperative launch; the warp collectives the kernels use (__shfl_sync, __all_sync,
// __any_sync, __reduce_or_sync, __reduce_max_sync, __reduce_add_sync) are barriers of 32 over
// per-lane slots; a
// thread that returns leaves its barriers, as an exited GPU thread stops counting (a warp
// collective after a lane of its warp returned fails the launch: its full mask names that lane).
// ClusterArrive and ClusterWait are its two halves (a thread goes on after arriving; a wait without
// an arrive, two arrives, or an exit between them fails the launch, where a GPU's behaviour is
// undefined).
// `emu::SetSchedule` picks the order the threads start in (forward, reverse or a seeded shuffle,
// the blocks of a cluster interleaved; reversed, the threads a barrier releases run before
// those not yet started; a shuffle resumes a random ready thread at each switch, so that one
// thread may lag far behind the others), so that a read of another thread's write that a barrier
// does not order is seen in some schedule. A barrier that can never complete (threads of a
// block waiting at different barriers) fails the launch (`cudaGetLastError`), where a GPU would
// hang.
// It proves the kernels' logic, their barriers and their launch sequences (what a GPU computes),
// not their speed; masks other than the full warp, blocks that are not whole warps and the GPU's
// weaker memory ordering are not modelled. Calls are serialised (`emu::Lock`).
// Include this before the kernels; it defines the CUDA keywords and runtime calls they use.
#pragma once

#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)  // `make sanitize`: AddressSanitizer follows the fibers
#include <sanitizer/common_interface_defs.h>
#define DRLHET_FIBER_SWITCH(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define DRLHET_FIBER_SWITCHED(save, bottom, size) \
  __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define DRLHET_FIBER_SWITCH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define DRLHET_FIBER_SWITCHED(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

// What the library exports (it is built with hidden visibility, so that the kernels' names and
// the shared header's functions never bind to another library's).
#define DRLHET_EMU_EXPORT __attribute__((visibility("default")))

#define __global__ inline  // the kernels are defined in every translation unit that launches them
#define __device__
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// the running thread's (set on every switch), and the launch's
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

// The runtime calls the launch sequences and the FFI handlers make.
using cudaStream_t = void*;
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorLaunchFailure = 719,
};
enum cudaMemcpyKind { cudaMemcpyDeviceToDevice = 3 };

namespace emu {

inline cudaError_t last_error = cudaSuccess;
inline unsigned last_cluster = 0;  // the blocks a cluster of the last launch (1: not in clusters)
inline int64_t sorted_updates = 0;  // clusters that took the sorted runs (sorted_runs.cuh)
inline int64_t schedule = 0;  // 0: threads start in order, 1: in reverse, else a seeded shuffle

// Emulated calls share the state above: one at a time.
inline std::mutex& Lock() {
  static std::mutex m;
  return m;
}

inline void SetSchedule(int64_t s) { schedule = s; }

struct Barrier {
  unsigned expected = 0, arrived = 0;
  std::vector<unsigned> waiting;
};

// The cluster's barrier, in two halves as on a GPU (barrier.cluster.arrive, .wait): a thread
// that arrives goes on; its wait returns once every thread of the cluster that has not
// exited has arrived. `pending` holds, per fiber, 1 + the phase it arrived at (0: none).
struct SplitBarrier {
  unsigned expected = 0, arrived = 0;
  uint64_t phase = 0;
  std::vector<unsigned> waiting;
  std::vector<uint64_t> pending;
};

constexpr size_t kStack = 64 * 1024;

struct Block {  // the threads, barriers and warp slots of one block, or of one cluster's blocks
  ucontext_t main;
  std::vector<ucontext_t> ctx;  // by fiber: block of the group * threads + thread
  std::vector<bool> done;
  std::deque<unsigned> ready;
  unsigned current = 0;  // the running fiber
  unsigned threads = 0;  // per block
  std::vector<Barrier> syncs;  // one per block
  SplitBarrier cluster;        // every thread of the group
  bool misused = false;        // a wait without an arrive, an arrive twice, an exit between
                               // the halves; a warp collective after a lane's exit
  std::vector<Barrier> warps;
  std::vector<uint64_t> slots;  // one per fiber, for the warp collectives
  void (*body)(void*) = nullptr;
  void* args = nullptr;
  const void* main_bottom = nullptr;  // the calling thread's stack (for the sanitizer)
  size_t main_size = 0;
};

inline Block* block = nullptr;

// Fiber stacks, kept from launch to launch.
inline char* Stack(unsigned t) {
  static std::vector<std::unique_ptr<char[]>> stacks;
  while (stacks.size() <= t) stacks.emplace_back(new char[kStack]);
  return stacks[t].get();
}

// Fibers that a barrier releases resume after the fibers already ready, or, in the reversed
// schedule, before them (the threads that started first run ahead of those not yet started).
inline void Resume(std::vector<unsigned>& waiting) {
  if (schedule == 1) {
    block->ready.insert(block->ready.begin(), waiting.begin(), waiting.end());
  } else {
    block->ready.insert(block->ready.end(), waiting.begin(), waiting.end());
  }
  waiting.clear();
}

inline void Release(Barrier& b) {
  b.arrived = 0;
  Resume(b.waiting);
}

// From the running fiber back to the block's scheduler, until the fiber is resumed.
inline void Yield() {
  void* fake_stack = nullptr;
  DRLHET_FIBER_SWITCH(&fake_stack, block->main_bottom, block->main_size);
  swapcontext(&block->ctx[block->current], &block->main);
  DRLHET_FIBER_SWITCHED(fake_stack, nullptr, nullptr);
}

inline void Wait(Barrier& b) {
  if (++b.arrived == b.expected) {
    Release(b);  // the last to arrive goes on
    return;
  }
  b.waiting.push_back(block->current);
  Yield();
}

inline void Drop(Barrier& b) {
  --b.expected;
  if (b.arrived > 0 && b.arrived == b.expected) Release(b);
}

inline void Complete(SplitBarrier& b) {  // every thread has arrived: the waits return
  b.arrived = 0;
  ++b.phase;
  Resume(b.waiting);
}

inline void Arrive(SplitBarrier& b) {
  const unsigned t = block->current;
  if (b.pending[t] != 0) block->misused = true;  // arrived twice without a wait
  b.pending[t] = b.phase + 1;
  if (++b.arrived == b.expected) Complete(b);
}

inline void WaitArrived(SplitBarrier& b) {
  const unsigned t = block->current;
  if (b.pending[t] == 0) {
    block->misused = true;  // a wait without an arrive
    return;
  }
  if (b.phase < b.pending[t]) {  // the phase it arrived at is not complete
    b.waiting.push_back(t);
    Yield();
  }
  b.pending[t] = 0;
}

inline void Drop(SplitBarrier& b) {
  if (b.pending[block->current] != 0) block->misused = true;  // exited between the halves
  --b.expected;
  if (b.arrived > 0 && b.arrived == b.expected) Complete(b);
}

inline void FiberMain() {
  DRLHET_FIBER_SWITCHED(nullptr, &block->main_bottom, &block->main_size);
  block->body(block->args);
  const unsigned t = block->current;
  Drop(block->warps[t / 32]);
  Drop(block->syncs[t / block->threads]);
  Drop(block->cluster);
  block->done[t] = true;
  DRLHET_FIBER_SWITCH(nullptr, block->main_bottom, block->main_size);  // this fiber ends
}  // on to block->main (uc_link)

inline std::vector<unsigned> StartOrder(unsigned threads, unsigned b) {
  std::vector<unsigned> order(threads);
  std::iota(order.begin(), order.end(), 0u);
  if (schedule == 1) std::reverse(order.begin(), order.end());
  if (schedule > 1) std::shuffle(order.begin(), order.end(), std::mt19937_64(schedule + b));
  return order;
}

// The first block of each cluster of a launch (of each block, in clusters of one), in the order
// they run: the grid's order, reversed in the reversed schedule, shuffled in a shuffled one. A
// GPU runs a launch's blocks in any order and at once, so a block that reads what another block
// of the same launch writes, unordered, sees it in some schedule and not in another.
inline std::vector<unsigned> GroupOrder(unsigned grid, unsigned cluster) {
  std::vector<unsigned> firsts;
  for (unsigned b = 0; b < grid; b += cluster) firsts.push_back(b);
  if (schedule == 1) std::reverse(firsts.begin(), firsts.end());
  if (schedule > 1) std::shuffle(firsts.begin(), firsts.end(), std::mt19937_64(~schedule));
  return firsts;
}

// Runs `blocks` blocks of `threads` threads from block `first` on, together (one cluster), to
// the end; false if some barrier never completed.
inline bool RunGroup(Block& blk, unsigned first, unsigned blocks, unsigned threads) {
  const unsigned fibers = blocks * threads;
  blk.ctx.assign(fibers, ucontext_t{});
  blk.done.assign(fibers, false);
  blk.threads = threads;
  blk.syncs.assign(blocks, Barrier{threads, 0, {}});
  blk.cluster = SplitBarrier{fibers, 0, 0, {}, std::vector<uint64_t>(fibers, 0)};
  blk.misused = false;
  blk.warps.assign(fibers / 32, Barrier{32, 0, {}});
  blk.slots.assign(fibers, 0);
  for (unsigned t : StartOrder(fibers, first)) {
    getcontext(&blk.ctx[t]);
    blk.ctx[t].uc_stack.ss_sp = Stack(t);
    blk.ctx[t].uc_stack.ss_size = kStack;
    blk.ctx[t].uc_link = &blk.main;
    makecontext(&blk.ctx[t], FiberMain, 0);
    blk.ready.push_back(t);
  }
  std::mt19937_64 pick(static_cast<uint64_t>(schedule) * 7919u + first);
  while (!blk.ready.empty()) {
    if (schedule > 1) {  // a shuffled schedule also resumes a random ready fiber each time
      std::swap(blk.ready.front(), blk.ready[pick() % blk.ready.size()]);
    }
    blk.current = blk.ready.front();
    blk.ready.pop_front();
    threadIdx = dim3(blk.current % threads);
    blockIdx = dim3(first + blk.current / threads);
    void* fake_stack = nullptr;
    DRLHET_FIBER_SWITCH(&fake_stack, Stack(blk.current), kStack);
    swapcontext(&blk.main, &blk.ctx[blk.current]);
    DRLHET_FIBER_SWITCHED(fake_stack, nullptr, nullptr);
  }
  return !blk.misused &&
         std::all_of(blk.done.begin(), blk.done.end(), [](bool d) { return d; });
}

template <typename Kernel, typename Args>
void Invoke(void* p) {
  auto* job = static_cast<std::pair<Kernel, Args>*>(p);
  std::apply(job->first, job->second);
}

// kernel<<<grid, threads>>>(args...) in clusters of `cluster` blocks: every cluster, one after
// the other, its blocks' threads together. A bad configuration (a GPU's limits: whole warps
// here, at most 1024 threads, at most 16 blocks a cluster: the non-portable limit that the H100
// and H200 allow, 8 being the portable one; a grid of whole clusters) or a
// barrier that never completes sets the error `cudaGetLastError` returns. __shared__ is one
// static copy here, shared by the blocks of a cluster while they run together: a kernel launched
// in clusters keeps in shared memory only what every block writes alike (BlockLayout), or one
// slot per block rank of an array that it reads across the cluster (ClusterPeer).
template <typename Kernel, typename... A>
void RunGroups(Kernel kernel, unsigned grid, unsigned threads, unsigned group, A... args);

template <typename Kernel, typename... A>
void LaunchCluster(Kernel kernel, unsigned grid, unsigned threads, unsigned cluster, A... args) {
  if (grid == 0 || threads == 0 || threads % 32 != 0 || threads > 1024 || cluster == 0 ||
      cluster > 16 || grid % cluster != 0) {
    last_error = cudaErrorInvalidConfiguration;
    return;
  }
  last_cluster = cluster;
  RunGroups(kernel, grid, threads, cluster, args...);
}

// The most blocks, and threads in all, of an emulated cooperative launch (its blocks run together
// as one group of fibers, 64 KB of stack each): a GPU's limit is the blocks it holds at once.
constexpr unsigned kCooperativeBlocks = 16;
constexpr unsigned kCooperativeThreads = 1024;

// A cooperative launch of kernel<<<grid, threads>>>(args...): every block together, so that
// GridSync is a barrier of the whole grid. More than kCooperativeBlocks blocks or
// kCooperativeThreads threads fails, as a GPU refuses a grid it cannot hold at once.
template <typename Kernel, typename... A>
void LaunchCooperative(Kernel kernel, unsigned grid, unsigned threads, A... args) {
  if (grid == 0 || grid > kCooperativeBlocks || threads == 0 || threads % 32 != 0 ||
      grid * threads > kCooperativeThreads) {
    last_error = cudaErrorInvalidConfiguration;
    return;
  }
  RunGroups(kernel, grid, threads, grid, args...);
}

// The grid of a checked launch in groups of `group` blocks (a cluster; a cooperative launch's
// whole grid), one group after the other, each group's threads together; a barrier that never
// completes sets cudaErrorLaunchFailure (a GPU would hang) and ends the launch.
template <typename Kernel, typename... A>
void RunGroups(Kernel kernel, unsigned grid, unsigned threads, unsigned group, A... args) {
  std::pair<Kernel, std::tuple<A...>> job(kernel, std::tuple<A...>(args...));
  Block blk;
  blk.body = Invoke<Kernel, std::tuple<A...>>;
  blk.args = &job;
  block = &blk;
  blockDim = dim3(threads);
  gridDim = dim3(grid);
  for (unsigned b : GroupOrder(grid, group)) {
    if (!RunGroup(blk, b, group, threads)) {
      last_error = cudaErrorLaunchFailure;
      break;
    }
  }
  block = nullptr;
}

// kernel<<<grid, threads>>>(args...): every block, one after the other (clusters of one).
template <typename Kernel, typename... A>
void Launch(Kernel kernel, unsigned grid, unsigned threads, A... args) {
  LaunchCluster(kernel, grid, threads, 1u, args...);
}

// A warp collective: every lane puts `v` in its slot and the warp waits (Publish); each lane
// reads the slots it needs (Slot); the warp waits again so that the slots are free for the next
// collective (Done).
// A lane that has returned cannot take part: a full-mask collective after an exit fails the
// launch (on a GPU its result is undefined, and it may hang).
template <typename T>
void Publish(T v) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  if (block->warps[block->current / 32].expected != 32) block->misused = true;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  block->slots[block->current] = bits;
  Wait(block->warps[block->current / 32]);
}

template <typename T>
T Slot(unsigned lane) {
  T x;
  std::memcpy(&x, &block->slots[(block->current & ~31u) + lane], sizeof(T));
  return x;
}

inline void Done() { Wait(block->warps[block->current / 32]); }

template <typename T, typename Reduce>
T WarpAll(T v, Reduce reduce) {
  Publish(v);
  T out = Slot<T>(0);
  for (unsigned lane = 1; lane < 32; ++lane) out = reduce(out, Slot<T>(lane));
  Done();
  return out;
}

template <typename T>
T WarpRead(T v, unsigned src) {
  Publish(v);
  const T out = Slot<T>(src);
  Done();
  return out;
}

}  // namespace emu

inline void __syncthreads() {
  emu::Wait(emu::block->syncs[emu::block->current / emu::block->threads]);
}

template <typename T>
T __shfl_sync(unsigned, T v, int src) {
  return emu::WarpRead(v, static_cast<unsigned>(src));
}
inline bool __all_sync(unsigned, bool p) {
  return emu::WarpAll<int>(p ? 1 : 0, [](int a, int b) { return a & b; }) != 0;
}
inline bool __any_sync(unsigned, bool p) {
  return emu::WarpAll<int>(p ? 1 : 0, [](int a, int b) { return a | b; }) != 0;
}
inline unsigned __reduce_or_sync(unsigned, unsigned v) {
  return emu::WarpAll<unsigned>(v, [](unsigned a, unsigned b) { return a | b; });
}
inline int __reduce_max_sync(unsigned, int v) {
  return emu::WarpAll<int>(v, [](int a, int b) { return a > b ? a : b; });
}
inline unsigned __reduce_add_sync(unsigned, unsigned v) {
  return emu::WarpAll<unsigned>(v, [](unsigned a, unsigned b) { return a + b; });
}

// Fibers of one block never run at once: a read-modify-write is atomic between barriers.
inline int atomicMax(int* p, int v) {
  const int old = *p;
  if (v > old) *p = v;
  return old;
}
inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
  const unsigned long long old = *p;
  if (v > old) *p = v;
  return old;
}
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long compare,
                                    unsigned long long v) {
  const unsigned long long old = *p;
  if (old == compare) *p = v;
  return old;
}
inline unsigned atomicCAS(unsigned* p, unsigned compare, unsigned v) {
  const unsigned old = *p;
  if (old == compare) *p = v;
  return old;
}
inline int atomicOr(int* p, int v) {
  const int old = *p;
  *p = old | v;
  return old;
}

inline cudaError_t cudaGetLastError() {
  const cudaError_t e = emu::last_error;
  emu::last_error = cudaSuccess;
  return e;
}
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    default: return "unspecified launch failure (a barrier never completed)";
  }
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                                   cudaStream_t) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) {
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

namespace emu {
// The barrier of every thread of the cluster, in its two halves (kernels/cuda/cluster.cuh's
// ClusterArrive, ClusterWait), and whole (ClusterSync).
inline void ClusterArrive() { Arrive(block->cluster); }
inline void ClusterWait() { WaitArrived(block->cluster); }
inline void ClusterSync() {
  Arrive(block->cluster);
  WaitArrived(block->cluster);
}
// The barrier of every thread of a cooperative launch (LaunchCooperative: one group).
inline void GridSync() { ClusterSync(); }
// Whether an emulated cooperative launch holds `grid` blocks of `threads` (LaunchCooperative).
inline bool CooperativeFits(int64_t grid, int threads) {
  return grid >= 1 && grid <= kCooperativeBlocks && threads >= 32 &&
         grid * threads <= kCooperativeThreads;
}
// Every emulated launch may be in clusters (a GPU: compute capability 9.0 and up, and room
// for the cluster's blocks: launch.cuh's ClusterFits).
inline bool ClustersSupported() { return true; }
}  // namespace emu

// What the launch sequences (kernels/cuda/launch.cuh) call.
#define DRLHET_LAUNCH(kernel, grid, threads, stream, ...) \
  emu::Launch(kernel, static_cast<unsigned>(grid), static_cast<unsigned>(threads), __VA_ARGS__)
#define DRLHET_LAUNCH_COOPERATIVE(kernel, grid, threads, stream, ...)                         \
  emu::LaunchCooperative(kernel, static_cast<unsigned>(grid), static_cast<unsigned>(threads), \
                         __VA_ARGS__)
#define DRLHET_LAUNCH_CLUSTER(kernel, grid, threads, cluster, stream, ...)                 \
  emu::LaunchCluster(kernel, static_cast<unsigned>(grid), static_cast<unsigned>(threads), \
                     static_cast<unsigned>(cluster), __VA_ARGS__)
