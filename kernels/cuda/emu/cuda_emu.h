// A functional emulation of the CUDA execution model on the host, for the CUDA backend's kernels
// (kernels/cuda/*.cuh) on a machine without a GPU. Each block runs as blockDim OS threads (the
// blocks of a launch one after the other, launches in order, as on one stream), with
// __syncthreads as a barrier of the block, the warp collectives the kernels use (__shfl_sync,
// __all_sync, __any_sync, __reduce_or_sync, __reduce_max_sync) as barriers of 32 threads, and
// the atomics as host atomics. A thread that returns leaves its barriers, as an exited GPU
// thread stops counting. It proves the kernels' logic and their launch sequences (what a GPU
// computes, races between the threads of a block included), not their speed; masks other than
// the full warp, and blocks that are not whole warps, are not modelled.
// Include this before the kernels; it defines the CUDA keywords they use.
#pragma once

#include <pthread.h>

#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <vector>

#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(n)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace emu {

using Barrier = std::barrier<>;

struct Block {  // what the threads of one block share
  explicit Block(unsigned threads) : sync(threads) {
    for (unsigned w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<Barrier>(32));
    slots.resize(threads);
  }
  Barrier sync;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<uint64_t> slots;  // one per thread, for the warp collectives
};

inline thread_local Block* block = nullptr;

}  // namespace emu

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

inline void __syncthreads() { emu::block->sync.arrive_and_wait(); }

namespace emu {

// A warp collective: every lane puts `v` in its slot and the warp waits (Publish); each lane
// reads the slots it needs (Slot); the warp waits again so that the slots are free for the next
// collective (Release).
template <typename T>
void Publish(T v) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  block->slots[threadIdx.x] = bits;
  block->warps[threadIdx.x / 32]->arrive_and_wait();
}

template <typename T>
T Slot(unsigned lane) {
  T x;
  std::memcpy(&x, &block->slots[(threadIdx.x & ~31u) + lane], sizeof(T));
  return x;
}

inline void Release() { block->warps[threadIdx.x / 32]->arrive_and_wait(); }

template <typename T, typename Reduce>
T WarpAll(T v, Reduce reduce) {
  Publish(v);
  T out = Slot<T>(0);
  for (unsigned lane = 1; lane < 32; ++lane) out = reduce(out, Slot<T>(lane));
  Release();
  return out;
}

template <typename T>
T WarpRead(T v, unsigned src) {
  Publish(v);
  const T out = Slot<T>(src);
  Release();
  return out;
}

}  // namespace emu

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

inline int atomicMax(int* p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_ACQ_REL,
                                                 __ATOMIC_RELAXED)) {
  }
  return old;
}
inline int atomicOr(int* p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_ACQ_REL); }

namespace emu {

template <typename Kernel, typename Args>
struct Job {
  Kernel kernel;
  Args* args;
  Block* block;
  dim3 thread, block_index;
};

template <typename Kernel, typename Args>
void* RunThread(void* p) {
  auto* job = static_cast<Job<Kernel, Args>*>(p);
  threadIdx = job->thread;
  blockIdx = job->block_index;
  block = job->block;
  std::apply(job->kernel, *job->args);
  // an exited thread no longer counts at its block's or its warp's barriers
  block->warps[threadIdx.x / 32]->arrive_and_drop();
  block->sync.arrive_and_drop();
  return nullptr;
}

// kernel<<<grid, threads>>>(args...): every block, one after the other, each as `threads` host
// threads (a multiple of 32) with small stacks.
template <typename Kernel, typename... A>
void Launch(Kernel kernel, unsigned grid, unsigned threads, A... args) {
  if (threads == 0 || threads % 32 != 0 || threads > 1024) {
    throw std::invalid_argument("emu::Launch: blockDim must be a multiple of 32, at most 1024");
  }
  std::tuple<A...> packed(args...);
  blockDim = dim3(threads);
  gridDim = dim3(grid);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  for (unsigned b = 0; b < grid; ++b) {
    Block shared(threads);
    std::vector<Job<Kernel, std::tuple<A...>>> jobs(threads);
    std::vector<pthread_t> ids(threads);
    for (unsigned t = 0; t < threads; ++t) {
      jobs[t] = {kernel, &packed, &shared, dim3(t), dim3(b)};
      if (pthread_create(&ids[t], &attr, RunThread<Kernel, std::tuple<A...>>, &jobs[t]) != 0) {
        std::fprintf(stderr, "emu::Launch: cannot start thread %u of a block\n", t);
        std::abort();  // the started threads would wait for it at their barriers forever
      }
    }
    for (pthread_t id : ids) pthread_join(id, nullptr);
  }
  pthread_attr_destroy(&attr);
}

}  // namespace emu

// What the launch sequences (kernels/cuda/launch.cuh) call.
using cudaStream_t = void*;
#define DRLHET_LAUNCH(kernel, grid, threads, stream, ...) \
  emu::Launch(kernel, static_cast<unsigned>(grid), static_cast<unsigned>(threads), __VA_ARGS__)
#define DRLHET_ZERO(ptr, bytes, stream) std::memset(ptr, 0, bytes)
