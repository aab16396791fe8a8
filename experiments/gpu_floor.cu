// What the cuda backend's one-launch kernels cannot go below on this GPU: the cost of a kernel
// node in a CUDA graph (XLA records a scan's step as one), of a cluster barrier (its release
// with and without a store to global or shared memory before it), of a dependent load from L2,
// of a dependent atomicCAS on another block's shared memory (distributed shared memory, as the
// cluster update's claims in shared memory make), of one graph launched after another (a
// scan's step: XLA launches the step's graph once an iteration), and of the host's round trip
// per step of a while loop of unknown trip count (its condition read back, then the step's
// graph launched). Each case is a kernel of 8 blocks of 512 threads in one cluster (the
// cluster update's and sample's shape) doing n of the thing; its time per graph node at
// n = 0, 1, 2, 4 and 8 gives the launch (the intercept) and the thing (the slope).
//
// A CUDA program of its own, not part of the library: nvcc -O3 -std=c++17 -arch=sm_90
// -o gpu_floor experiments/gpu_floor.cu; ./gpu_floor OUT.json (experiments/gpu_checks.sh
// floor). Measured on the GPU it runs on (CUDA events around graph launches); nothing here is
// modeled. sm_90 and up (clusters).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#define CHECK(call)                                                                    \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "error: %s: %s\n", #call, cudaGetErrorString(e_));          \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

namespace {

constexpr int kBlocks = 8, kThreads = 512, kNodes = 256, kRepeats = 7;
constexpr unsigned kChain = 1u << 20;  // the chased array: 4 MB, in L2 after the first launch

enum Case {
  kEmpty, kRelaxed, kRelease, kStoreRelease, kSharedRelease, kSharedRestrict, kLoad, kPhase,
  kRemoteCas, kCases
};
const char* const kNames[kCases] = {
    "empty",           // nothing: the node's launch alone (n ignored)
    "relaxed",         // n cluster barriers, arrive.relaxed: no memory ordering
    "release",         // n cluster barriers, arrive.release: no store before it
    "store_release",   // a global store, then a release barrier, n times
    "shared_release",  // a shared-memory store, then a release barrier, n times
    "shared_restrict", // a shared-memory store, a release fence restricted to the block's
                       // shared memory (MEMBAR.ALL.CTA, not .GPU), a relaxed barrier, n times
    "load",            // n dependent loads from global memory (L2), no barrier
    "phase",           // a dependent load, a store, a release barrier, n times: a level
    "remote_cas",      // n dependent 32-bit atomicCAS on the next block's shared memory
};

__device__ __forceinline__ void ArriveRelaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
}
__device__ __forceinline__ void ArriveRelease() {
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
}
// Orders this thread's earlier writes to its own block's shared memory (only those) before a
// later relaxed arrive, for readers in the cluster that acquire with AcquireShared.
__device__ __forceinline__ void ReleaseShared() {
  asm volatile("fence.release.sync_restrict::shared::cta.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void AcquireShared() {
  asm volatile("fence.acquire.sync_restrict::shared::cluster.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void WaitAcquire() {
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}

// n dependent atomicCAS by each thread on its slot in the next block's shared memory (`cell`:
// this block's copy), between two cluster barriers: the first so that every block runs before
// another touches its shared memory, the last so that none exits while another still does.
// 32-bit, as the cluster update's claims in shared memory were (a path since removed): a 64-bit
// atomic on shared memory is not the hardware's (nvcc's fallback is neither remote nor atomic).
__device__ void RemoteCas(int n, unsigned t, unsigned* cell, unsigned* scratch) {
  cell[threadIdx.x] = 0;
  ArriveRelease();
  WaitAcquire();
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  unsigned* peer = cluster.map_shared_rank(cell, (cluster.block_rank() + 1) % kBlocks) + threadIdx.x;
  unsigned v = 0;
  for (int i = 0; i < n; ++i) v = atomicCAS(peer, v, v + 1);  // each waits for the one before
  ArriveRelease();
  WaitAcquire();
  if (v == ~0u) scratch[t] = 1;  // keeps the chain
}

__global__ void __cluster_dims__(kBlocks, 1, 1)
    Floor(int which, int n, const unsigned* next, unsigned* scratch) {
  __shared__ unsigned cell[kThreads];
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  if (which == kRemoteCas) {
    RemoteCas(n, t, cell, scratch);
    return;
  }
  unsigned p = (t * 2654435761u) & (kChain - 1);
  for (int i = 0; i < n && which != kEmpty; ++i) {
    if (which == kLoad || which == kPhase) p = next[p];
    if (which == kStoreRelease || which == kPhase) scratch[t] = p + i;
    if (which == kSharedRelease || which == kSharedRestrict) cell[threadIdx.x] = p + i;
    if (which == kSharedRestrict) {
      ReleaseShared();
      ArriveRelaxed();
    }
    if (which == kRelaxed) ArriveRelaxed();
    if (which == kRelease || which == kStoreRelease || which == kSharedRelease || which == kPhase) {
      ArriveRelease();
    }
    if (which != kLoad) WaitAcquire();
    if (which == kSharedRestrict) AcquireShared();
  }
  if (which == kLoad && p == 0xffffffffu) scratch[t] = p;  // keeps the chain's loads
  const bool shared = which == kSharedRelease || which == kSharedRestrict;
  if (shared && cell[(threadIdx.x + 1) % kThreads] == 0xffffffffu) scratch[t] = 1;
}

__global__ void Condition(int* flag) { *flag = 1; }

// A graph of `nodes` launches of Floor(which, n), instantiated (the graph itself destroyed).
[[maybe_unused]] cudaGraphExec_t Captured(cudaStream_t s, int nodes, int which, int n,
                                          const unsigned* next, unsigned* scratch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < nodes; ++i) Floor<<<kBlocks, kThreads, 0, s>>>(which, n, next, scratch);
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphDestroy(graph));
  return exec;
}

// Microseconds per `per` of what `work` enqueues on `s`, the median of kRepeats (CUDA events
// around it); `exec` launched once before, untimed (the chain in L2, the graph uploaded), and
// destroyed after.
[[maybe_unused]] double MedianUs(cudaStream_t s, cudaGraphExec_t exec, int per,
                                 const std::function<void()>& work) {
  CHECK(cudaGraphLaunch(exec, s));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms(kRepeats);
  for (float& m : ms) {
    CHECK(cudaEventRecord(a, s));
    work();
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaEventElapsedTime(&m, a, b));
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaGraphExecDestroy(exec));
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[kRepeats / 2] / per;
}

// Microseconds per node of a graph of kNodes launches of Floor(which, n).
[[maybe_unused]] double PerNode(cudaStream_t s, int which, int n, const unsigned* next,
                                unsigned* scratch) {
  cudaGraphExec_t exec = Captured(s, kNodes, which, n, next, scratch);
  return MedianUs(s, exec, kNodes, [&] { CHECK(cudaGraphLaunch(exec, s)); });
}

// Microseconds per launch of a graph of one empty node, kNodes launches back to back on the
// stream, no host wait between them: the step of a scan as XLA runs it (a known trip count, the
// step's command buffer launched once an iteration), less the step's own work.
[[maybe_unused]] double GraphStep(cudaStream_t s, const unsigned* next, unsigned* scratch) {
  cudaGraphExec_t exec = Captured(s, 1, kEmpty, 0, next, scratch);
  return MedianUs(s, exec, kNodes, [&] {
    for (int i = 0; i < kNodes; ++i) CHECK(cudaGraphLaunch(exec, s));
  });
}

// Microseconds per step of a host loop as XLA runs a while loop of unknown trip count on a GPU:
// a condition kernel, its flag copied to the host and waited for, then the step's graph (one
// empty node) launched.
[[maybe_unused]] double HostStep(cudaStream_t s, const unsigned* next, unsigned* scratch) {
  cudaGraphExec_t exec = Captured(s, 1, kEmpty, 0, next, scratch);
  int* flag;
  int* host;
  CHECK(cudaMalloc(&flag, sizeof(int)));
  CHECK(cudaMallocHost(&host, sizeof(int)));
  const double us = MedianUs(s, exec, kNodes, [&] {
    for (int i = 0; i < kNodes; ++i) {
      Condition<<<1, 1, 0, s>>>(flag);
      CHECK(cudaMemcpyAsync(host, flag, sizeof(int), cudaMemcpyDeviceToHost, s));
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaGraphLaunch(exec, s));
    }
  });
  CHECK(cudaFree(flag));
  CHECK(cudaFreeHost(host));
  return us;
}

// The device's name, and a function timing (case, n) per node (case -1: HostStep, -2:
// GraphStep); false when no GPU of sm_90 and up.
// Built with -DGPU_FLOOR_DRY (the tests, on machines without a GPU): no device is touched and
// the times are made up (1 + 0.5 n us a node; a host step 9 us, a graph step 4 us), so that
// the fits and the JSON can be checked.
bool Setup(std::string* name, std::function<double(int, int)>* node) {
#ifdef GPU_FLOOR_DRY
  *name = "dry run: no GPU, times made up";
  *node = [](int which, int n) { return which == -1 ? 9.0 : which == -2 ? 4.0 : 1.0 + 0.5 * n; };
  return true;
#else
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major < 9) {
    std::fprintf(stderr, "error: %s is sm_%d%d; the cases need clusters (sm_90 and up)\n",
                 prop.name, prop.major, prop.minor);
    return false;
  }
  *name = prop.name;
  std::vector<unsigned> chain(kChain);  // one cycle through every slot (Hull-Dobell)
  for (unsigned i = 0; i < kChain; ++i) chain[i] = (i * 40501u + 12345u) & (kChain - 1);
  unsigned *next, *scratch;
  CHECK(cudaMalloc(&next, kChain * sizeof(unsigned)));
  CHECK(cudaMalloc(&scratch, kBlocks * kThreads * sizeof(unsigned)));
  CHECK(cudaMemcpy(next, chain.data(), kChain * sizeof(unsigned), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  *node = [=](int which, int n) {
    if (which == -1) return HostStep(s, next, scratch);
    if (which == -2) return GraphStep(s, next, scratch);
    return PerNode(s, which, n, next, scratch);
  };
  return true;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.json\n", argv[0]);
    return 2;
  }
  std::string device;
  std::function<double(int, int)> node;
  if (!Setup(&device, &node)) return 1;
  std::string rows, fits;
  auto row = [&](const char* name, int n, double us) {
    std::printf("%-15s n=%d  %8.3f us\n", name, n, us);
    char line[160];
    std::snprintf(line, sizeof line, "%s  {\"case\": \"%s\", \"n\": %d, \"us\": %.4f}",
                  rows.empty() ? "" : ",\n", name, n, us);
    rows += line;
  };
  row("host_step", 0, node(-1, 0));
  row("graph_step", 0, node(-2, 0));
  for (int which = 0; which < kCases; ++which) {
    std::vector<double> xs, ys;
    for (int n : {0, 1, 2, 4, 8}) {
      if (which == kEmpty && n > 0) break;
      xs.push_back(n);
      ys.push_back(node(which, n));
      row(kNames[which], n, ys.back());
    }
    if (xs.size() < 2) continue;
    // least squares: us = intercept + per_n * n
    double mx = 0, my = 0, sxy = 0, sxx = 0;
    for (size_t i = 0; i < xs.size(); ++i) mx += xs[i] / xs.size(), my += ys[i] / xs.size();
    for (size_t i = 0; i < xs.size(); ++i) {
      sxy += (xs[i] - mx) * (ys[i] - my);
      sxx += (xs[i] - mx) * (xs[i] - mx);
    }
    const double per = sxy / sxx, at0 = my - per * mx;
    std::printf("%-15s: %.3f us a node + %.3f us each\n", kNames[which], at0, per);
    char line[160];
    std::snprintf(line, sizeof line, "%s  \"%s\": {\"intercept_us\": %.4f, \"per_n_us\": %.4f}",
                  fits.empty() ? "" : ",\n", kNames[which], at0, per);
    fits += line;
  }
  const std::string json = "{\"device\": \"" + device + "\", \"measured\": " +
                           (device.rfind("dry run", 0) == 0 ? "false" : "true") +
                           ", \"nodes\": " + std::to_string(kNodes) +
                           ", \"repeats\": " + std::to_string(kRepeats) + ",\n \"rows\": [\n" +
                           rows + "\n ],\n \"fits\": {\n" + fits + "\n }\n}\n";
  FILE* f = std::fopen(argv[1], "w");
  if (f == nullptr) {
    std::fprintf(stderr, "error: cannot write %s\n", argv[1]);
    return 1;
  }
  std::fputs(json.c_str(), f);
  std::fclose(f);
  std::printf("wrote %s\n", argv[1]);
  return 0;
}
