// Thread block clusters (compute capability 9.0: Hopper and later) for the CUDA backend's
// one-launch update and sample of a mid-sized batch: the blocks of a cluster run at the same
// time on one GPC and meet at a hardware barrier, so that phases that need every entry of the
// batch done (the claims before the leaves, each level before its parents) follow one another
// inside one kernel, spread over up to 8 SMs, instead of in one launch each. A launch is a graph
// node of its own inside XLA's command buffer, about as costly as a phase of a mid-sized batch.
// Compiled by nvcc (sm_90 and up; an sm_80 build traps, and the host never launches it there:
// ClusterFits) and by the host compiler for the emulation (emu/cuda_emu.h), whose
// ClusterArrive and ClusterWait are the two halves of a barrier of the cluster's fibers. The
// halves let a thread start work that needs nobody else's writes (a descent, the loads of its
// entry) while the cluster's other threads arrive.
#pragma once

#if defined(__CUDACC__)
#include <cooperative_groups.h>
#endif

namespace drlhet_cuda {

constexpr int kClusterBlocks = 8;  // blocks per cluster by default: the largest portable cluster
// The most blocks a cluster may have: 16 where the GPU allows a non-portable cluster size (the
// H100 and H200 do; launch.cuh's ClusterFits asks), so that a tree's batch is spread over 16 SMs'
// load units instead of 8. Arrays of one slot per block rank are this long.
constexpr int kClusterMaxBlocks = 16;
#if defined(__CUDACC__)
constexpr int kClusterMaxThreads = 1024;
constexpr int kRankSlots = 1;  // each block has its own copy of the kernel's shared memory
#else
constexpr int kClusterMaxThreads = 128;  // the emulation: a fiber per thread, 64 KB each
constexpr int kRankSlots = kClusterMaxBlocks;  // one copy for the cluster's blocks (ClusterPeer)
#endif

#if defined(__CUDACC__)
// The first half of the cluster's barrier: this thread has arrived, and its memory writes
// before it (tree nodes, winners, the tree's words, in global memory) are seen by every thread
// of the cluster after its ClusterWait. The thread goes on with work that needs nobody else's
// writes; it must ClusterWait before it arrives again or exits. Not the `.aligned` forms: those
// require the warp to be converged at the barrier, which inline assembly after a divergent
// branch (a winner's write) does not guarantee.
// No __threadfence before it. By the PTX memory consistency model the arrive's .release and the
// wait's .acquire, both at cluster scope, order every earlier memory operation of the arriving
// thread, global memory included, before every later one of a waiting thread of the cluster;
// scope names the threads that synchronize, not a memory space. Every thread that reads what
// another wrote in these kernels is in the writer's cluster: a tree's nodes, its winner slots
// and its scratch words are touched by its own cluster only, and launches are ordered by the
// stream. A fence at GPU scope would wait for each thread's writes to reach every SM, about a
// round trip to memory per barrier, and an update has a barrier per phase and per level (five
// at 2^20 leaves, K 16, B 4096).
__device__ inline void ClusterArrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  __trap();  // no clusters before sm_90: never launched there
#endif
}

// The first half without the release: orders none of the thread's memory operations, so it
// waits for none of them (a bare instruction, where the release is a fence at GPU scope). For a
// barrier that only says every block of the cluster has started, before a block writes
// another's shared memory (distributed shared memory needs its block to be running).
__device__ inline void ClusterArriveRelaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// The second half: returns once every thread of every block of the cluster has arrived.
__device__ inline void ClusterWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// A whole barrier for a hand-off through the writers' own shared memory only: every thread's
// earlier operations on its own block's shared memory (and only those) are seen by every
// thread of the cluster after it, which reads them over distributed shared memory. The release
// is a fence restricted to the block's shared memory (MEMBAR.ALL.CTA, not the .GPU membar of
// ClusterArrive, which waits for the thread's stores to global memory to reach every SM), then
// a relaxed arrive; the wait, then the matching restricted acquire. Measured on an H100
// (experiments/gpu_floor.cu, 2026-11-27): 0.18 us a barrier against 0.73 us with ClusterArrive.
// Only where no thread reads after it what another wrote to global memory since the last full
// barrier.
__device__ inline void ClusterSyncShared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.release.sync_restrict::shared::cta.cluster;\n" ::: "memory");
  asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
  asm volatile("fence.acquire.sync_restrict::shared::cluster.cluster;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}
#else
inline void ClusterArrive() { emu::ClusterArrive(); }
inline void ClusterArriveRelaxed() { emu::ClusterArrive(); }
inline void ClusterWait() { emu::ClusterWait(); }
inline void ClusterSyncShared() {
  emu::ClusterArrive();
  emu::ClusterWait();
}
#endif

// Every thread of every block of the cluster arrives before any goes on (both halves).
__device__ inline void ClusterSync() {
  ClusterArrive();
  ClusterWait();
}

// The slot of the block of rank `rank` in a shared array of kRankSlots slots of `stride`
// elements: on a GPU the array itself (every block has its own), on the emulation the rank's
// part of the one copy. A block writes `RankSlot(base, own rank)`; another reads it as
// `ClusterPeer(RankSlot(base, rank) + offset, rank)`.
template <typename T>
__device__ inline T* RankSlot(T* base, unsigned rank, int64_t stride) {
  return kRankSlots == 1 ? base : base + static_cast<int64_t>(rank) * stride;
}

// `p` (an address in this block's shared memory) as the same variable in the shared memory of
// the block of rank `rank` in the cluster (distributed shared memory: a load from it is a
// round trip over the GPC's network, not to L2). The kernels use it on arrays of one slot per
// block, each block writing only its own rank's slot: on the emulation, whose blocks of a
// cluster share one copy of the kernel's shared memory, that slot is the same variable, so the
// same pointer is returned. After a cluster barrier that follows the writes; a block whose
// slot others read must not exit before they are done (a barrier half before it exits).
template <typename T>
__device__ inline T* ClusterPeer(T* p, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().map_shared_rank(p, rank);
#elif defined(__CUDA_ARCH__)
  (void)rank;
  __trap();  // no clusters before sm_90: never launched there
  return p;
#else
  (void)rank;
  return p;
#endif
}

// The cluster's merged words (ClusterPeer): the OR of the blocks' `bad` and the largest of
// their `most` (each >= 0), each array one slot per block rank, cs <= kClusterMaxBlocks (the
// update's error bits and largest raw priority; the sample's any-positive flag and largest
// weight). Called by every lane of a whole warp: lane r reads rank r's two words (one round trip
// over the cluster's network, two loads a lane where every lane reading every rank's words took
// 2 * cs), then the warp merges them (a maximum and an OR: any order, the same words). After a
// cluster barrier that follows the merges; before the next one, which no block passes before
// every thread has read them.
__device__ inline void ClusterWords(int32_t* bad, int32_t* most, int32_t cs, int32_t* bad_out,
                                    int32_t* most_out) {
  static_assert(kClusterMaxBlocks <= 32, "a lane a rank");
  const int r = static_cast<int>(threadIdx.x & 31);
  const unsigned rank = static_cast<unsigned>(r);
  const int32_t b = r < cs ? *ClusterPeer(bad + r, rank) : 0;
  const int32_t m = r < cs ? *ClusterPeer(most + r, rank) : 0;
  *bad_out = static_cast<int32_t>(__reduce_or_sync(0xffffffffu, static_cast<unsigned>(b)));
  *most_out = __reduce_max_sync(0xffffffffu, m);
}

}  // namespace drlhet_cuda
