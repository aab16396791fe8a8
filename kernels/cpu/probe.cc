// Memory probes: what this machine's memory allows one core to do, so that benchmarks can report
// a memory-bound primitive as a fraction of the limit.
//   drlhet_probe_dependent_ns     ns per dependent random read (pointer chasing)
//   drlhet_probe_independent_rate independent random 8-byte reads per second (a large gather)
//   drlhet_probe_sequential_gbs   sequential read bandwidth, GB/s
// Each allocates and first-touches `bytes` of memory, measures, and frees it. Single thread.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace {

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t Elements(int64_t bytes) {
  int64_t n = 1;
  while (n * 2 * static_cast<int64_t>(sizeof(uint64_t)) <= bytes) n *= 2;
  return n;
}

}  // namespace

extern "C" {

double drlhet_probe_dependent_ns(int64_t bytes, int64_t steps, uint64_t seed) {
  const int64_t n = Elements(bytes);
  std::vector<uint64_t> next(n);
  for (int64_t i = 0; i < n; ++i) next[i] = static_cast<uint64_t>(i);
  for (int64_t i = n - 1; i > 0; --i) {  // Sattolo: one cycle through every element
    const int64_t j = static_cast<int64_t>(SplitMix(seed) % static_cast<uint64_t>(i));
    const uint64_t t = next[i];
    next[i] = next[j];
    next[j] = t;
  }
  uint64_t cur = 0;
  for (int64_t s = 0; s < steps / 10; ++s) cur = next[cur];  // warm the TLB/caches a little
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) cur = next[cur];
  const double dt = Seconds(t0);
  volatile uint64_t sink = cur;
  (void)sink;
  return dt / static_cast<double>(steps) * 1e9;
}

double drlhet_probe_independent_rate(int64_t bytes, int64_t reads, uint64_t seed) {
  const int64_t n = Elements(bytes);
  std::vector<uint64_t> data(n);
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<uint64_t>(i) * 2654435761ull;
  const uint64_t mask = static_cast<uint64_t>(n - 1);
  uint64_t sum = 0, x = seed;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < reads; ++r) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;  // xorshift64: independent addresses, a few cycles each
    sum += data[x & mask];
  }
  const double dt = Seconds(t0);
  volatile uint64_t sink = sum;
  (void)sink;
  return static_cast<double>(reads) / dt;
}

double drlhet_probe_sequential_gbs(int64_t bytes, int repeats) {
  const int64_t n = Elements(bytes);
  std::vector<uint64_t> data(n);
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<uint64_t>(i) ^ 0x5555ull;
  uint64_t sum = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) {
    for (int64_t i = 0; i < n; ++i) sum += data[i];
  }
  const double dt = Seconds(t0);
  volatile uint64_t sink = sum;
  (void)sink;
  return static_cast<double>(n) * sizeof(uint64_t) * repeats / dt / 1e9;
}

}  // extern "C"
