// drlhet::rmm::Stream: the FIFO between the replay module's dataflow stages.
//
// Under Vitis HLS synthesis (__SYNTHESIS__) it is hls::stream, so every stage keeps the
// blocking read()/write() of a hardware FIFO. Everywhere else (the g++ testbench, the
// C-simulation behind XLA FFI) it is an unbounded software queue: Vitis' own C-simulation runs
// the stages of a dataflow region one after the other, each to completion, and so does ours.
#ifndef DRLHET_RMM_STREAM_H_
#define DRLHET_RMM_STREAM_H_

#ifdef __SYNTHESIS__
#include <hls_stream.h>
namespace drlhet {
namespace rmm {
template <typename T>
using Stream = hls::stream<T>;
}  // namespace rmm
}  // namespace drlhet
#else
#include <cstddef>
#include <deque>
#include <stdexcept>

namespace drlhet {
namespace rmm {

template <typename T>
class Stream {
 public:
  void write(const T& x) { q_.push_back(x); }
  T read() {
    if (q_.empty()) throw std::logic_error("rmm::Stream::read on an empty stream");
    T x = q_.front();
    q_.pop_front();
    return x;
  }
  bool empty() const { return q_.empty(); }
  std::size_t size() const { return q_.size(); }

 private:
  std::deque<T> q_;
};

}  // namespace rmm
}  // namespace drlhet
#endif  // __SYNTHESIS__
#endif  // DRLHET_RMM_STREAM_H_
