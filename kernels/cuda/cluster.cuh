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

namespace drlhet_cuda {

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

// The second half: returns once every thread of every block of the cluster has arrived.
__device__ inline void ClusterWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}
#else
inline void ClusterArrive() { emu::ClusterArrive(); }
inline void ClusterWait() { emu::ClusterWait(); }
#endif

// Every thread of every block of the cluster arrives before any goes on (both halves).
__device__ inline void ClusterSync() {
  ClusterArrive();
  ClusterWait();
}

}  // namespace drlhet_cuda
