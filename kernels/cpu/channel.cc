// Bounded byte channels between XLA programs running at the same time on different host
// threads: the pipelined loop's stages pass batches, priorities and parameters through them
// from inside their jitted chunk programs (docs/design.md section 6), so no Python runs per
// stage call. A send waits while its channel is full, a receive while it is empty; closing a
// channel ends every waiting call with CANCELLED (the run stops).
//
// A call that cannot finish at once is queued on its channel, and its handler waits for the
// other end up to 100 ms (`kHold`); past that, it returns an unfinished XLA FFI future and
// lets go of its thread. The call on the other end that lets it finish moves its messages
// (under the channel's lock, in order) and wakes it, or for one that let go, hands the
// future's completion to a completer thread of this library, on which XLA resumes the
// waiting program (never inline in the other program's call). A call that waited for as long
// as it took held a thread of XLA's CPU pool (max(cores, devices) threads) all that time:
// where XLA ran two programs' waiting calls on that pool (it may: the scheduling of a
// program's independent operations is XLA's), the program that would send to them never got
// a thread, and the run hung.
//
// FFI handlers (CPU):
//   drlhet_channel_send(x, token, id) -> token   attr: count  (x: count messages, row-major)
//   drlhet_channel_recv(token, id) -> y          attr: count  (y: count messages)
// The token (int32 scalar) orders the calls of one program: thread it from each receive to the
// next send. The channel's id is an operand (an int32 scalar), not an attribute, so a compiled
// program does not depend on which channels it was compiled for: JAX's compilation cache
// serves it again to a later run with new channels. C API (ctypes): open, close, destroy, put
// (host seeding), take (host draining), stats (time waited).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs tasks on threads of its own: one idle thread a task, a new thread where none is idle
// (so a long task never delays another), threads idle for a minute exit. Leaked on purpose:
// its threads may outlive static destruction at exit.
class Completer {
 public:
  static Completer& Get() {
    static Completer* completer = new Completer();
    return *completer;
  }

  void Submit(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    if (int64_t(tasks_.size()) > idle_) {
      std::thread([this] { Loop(); }).detach();
    } else {
      cv_.notify_one();
    }
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      ++idle_;
      bool got = cv_.wait_for(lock, std::chrono::seconds(60), [&] { return !tasks_.empty(); });
      --idle_;
      if (!got) return;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  int64_t idle_ = 0;
};

// How one send or receive ends, under its channel's lock: `finished` (its messages moved) or
// `error` (closed); `async` once its handler has returned an unfinished future, which is
// then completed by a completer thread, else by the handler itself.
struct Call {
  ffi::Promise promise;
  bool finished = false, async = false;
  std::optional<ffi::Error> error;
};

// A program's send or receive, queued until its `count` messages have moved.
struct Waiter {
  std::shared_ptr<Call> call;
  char* out;            // a receive's result buffer (XLA keeps it until the call completes)
  const char* in;       // a send's operand (likewise)
  int64_t count, done;  // messages in all, moved so far
  Clock::time_point since;
};

struct Channel {
  std::mutex mu;
  std::condition_variable cv;  // where a handler holds its call (up to `kHold`)
  std::deque<std::vector<char>> items;
  std::deque<Waiter> senders, receivers;  // each in call order
  int64_t capacity = 1;
  int64_t message_bytes = 0;
  bool closed = false;
  double send_wait_s = 0, recv_wait_s = 0;  // from each call to its completion
  int64_t sent = 0, received = 0;
};

// Calls whose futures a completer thread must complete.
using Finished = std::vector<std::shared_ptr<Call>>;

std::mutex g_mu;
std::map<int64_t, std::shared_ptr<Channel>> g_channels;
int64_t g_next_id = 1;

std::shared_ptr<Channel> Find(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_channels.find(id);
  return it == g_channels.end() ? nullptr : it->second;
}

// Moves one message into the oldest receiver; true when it has all of its messages.
bool Deliver(Channel& ch) {
  Waiter& w = ch.receivers.front();
  std::memcpy(w.out + w.done * ch.message_bytes, ch.items.front().data(), ch.message_bytes);
  ch.items.pop_front();
  ++ch.received;
  return ++w.done == w.count;
}

// Moves one message of the oldest sender into the channel; true when all of its have moved.
bool Accept(Channel& ch) {
  Waiter& w = ch.senders.front();
  const char* at = w.in + w.done * ch.message_bytes;
  ch.items.emplace_back(at, at + ch.message_bytes);
  ++ch.sent;
  return ++w.done == w.count;
}

// Marks the front call of `queue` finished and dequeues it: an async one goes to `finished`,
// a held one is woken.
void Finish(Channel& ch, std::deque<Waiter>& queue, double& wait_s, Finished& finished) {
  Waiter& w = queue.front();
  wait_s += Since(w.since);
  w.call->finished = true;
  if (w.call->async) {
    finished.push_back(w.call);
  } else {
    ch.cv.notify_all();
  }
  queue.pop_front();
}

// Moves messages from queued senders to queued receivers, in order, as far as the channel's
// capacity lets them (`ch.mu` held).
void Pump(Channel& ch, Finished& finished) {
  bool moved = true;
  while (moved) {
    moved = false;
    while (!ch.receivers.empty() && !ch.items.empty()) {
      moved = true;
      if (Deliver(ch)) Finish(ch, ch.receivers, ch.recv_wait_s, finished);
    }
    while (!ch.senders.empty() && int64_t(ch.items.size()) < ch.capacity) {
      moved = true;
      if (Accept(ch)) Finish(ch, ch.senders, ch.send_wait_s, finished);
    }
  }
}

// Completes async calls on a completer thread: their programs resume there, not inside the
// call that let them finish.
void Complete(Finished& finished) {
  for (auto& call : finished) {
    Completer::Get().Submit([call] {
      if (call->error) {
        call->promise.SetError(std::move(*call->error));
      } else {
        call->promise.SetAvailable();
      }
    });
  }
}

ffi::Error Checked(int64_t id, int64_t count, size_t bytes, std::shared_ptr<Channel>* out) {
  *out = Find(id);
  if (!*out) return ffi::Error::InvalidArgument("no open channel with id " + std::to_string(id));
  if (count < 1 || int64_t(bytes) != count * (*out)->message_bytes) {
    return ffi::Error::InvalidArgument(
        "channel " + std::to_string(id) + " carries messages of " +
        std::to_string((*out)->message_bytes) + " bytes; got " + std::to_string(bytes) +
        " bytes for " + std::to_string(count));
  }
  return ffi::Error::Success();
}

ffi::Error Cancelled(int64_t id) {
  return ffi::Error(ffi::ErrorCode::kCancelled,
                    "channel " + std::to_string(id) + " closed: the pipeline stopped");
}

ffi::Future Failed(ffi::Error error) {
  ffi::Promise promise;
  promise.SetError(std::move(error));
  return ffi::Future(promise);
}

// How long a handler holds its thread for a call that cannot finish at once before it returns
// an unfinished future. A pipeline in step waits far less (0.01-0.6 ms a call on average), and
// a held call resumes its program on its own thread as before: a split run that resumed every
// waiting call asynchronously trained about a fifth slower (2026-11-29, 2-core VM). A wait past
// it is a stuck one: then the call lets go of XLA's thread.
constexpr auto kHold = std::chrono::milliseconds(100);

// Queues a send (of `in`) or a receive (into `out`) on channel `id`; moves what can move,
// then holds the call up to `kHold` for the other end.
ffi::Future Enqueue(bool send, int64_t id, int64_t count, size_t bytes, const char* in,
                    char* out) {
  std::shared_ptr<Channel> ch;
  if (auto e = Checked(id, count, bytes, &ch); e.failure()) return Failed(std::move(e));
  auto call = std::make_shared<Call>();
  Finished finished;
  std::optional<ffi::Error> failed;
  {
    std::unique_lock<std::mutex> lock(ch->mu);
    if (ch->closed) return Failed(Cancelled(id));
    auto& queue = send ? ch->senders : ch->receivers;
    queue.push_back(Waiter{call, out, in, count, 0, Clock::now()});
    Pump(*ch, finished);
    ch->cv.wait_for(lock, kHold, [&] { return call->finished || call->error.has_value(); });
    if (call->error) {
      failed = std::move(*call->error);
    } else {
      call->async = !call->finished;
    }
  }
  // the other end's calls that Pump finished are off the queues: only this completes them,
  // this call's own failure (a close while it waited) included
  Complete(finished);
  if (failed) return Failed(std::move(*failed));
  if (!call->async) call->promise.SetAvailable();
  return ffi::Future(call->promise);
}

ffi::Future SendImpl(ffi::AnyBuffer x, ffi::Buffer<ffi::S32> token, ffi::Buffer<ffi::S32> id_arg,
                     ffi::ResultBuffer<ffi::S32> token_out, int64_t count) {
  token_out->typed_data()[0] = token.typed_data()[0] + 1;
  return Enqueue(true, id_arg.typed_data()[0], count, x.size_bytes(),
                 static_cast<const char*>(x.untyped_data()), nullptr);
}

ffi::Future RecvImpl(ffi::Buffer<ffi::S32> token, ffi::Buffer<ffi::S32> id_arg,
                     ffi::Result<ffi::AnyBuffer> y, int64_t count) {
  return Enqueue(false, id_arg.typed_data()[0], count, y->size_bytes(), nullptr,
                 static_cast<char*>(y->untyped_data()));
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetChannelSend, SendImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<int64_t>("count"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(DrlhetChannelRecv, RecvImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("count"));

extern "C" {

// A new channel of `capacity` messages of `message_bytes` each; returns its id (> 0), or 0
// for a bad argument or when the process has used up int32's ids (programs pass ids as int32).
// Ids are never reused: a program still running after its run ended finds no channel rather
// than a later run's.
int64_t drlhet_channel_open(int64_t capacity, int64_t message_bytes) {
  if (capacity < 1 || message_bytes < 1) return 0;
  auto ch = std::make_shared<Channel>();
  ch->capacity = capacity;
  ch->message_bytes = message_bytes;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_next_id > INT32_MAX) return 0;
  int64_t id = g_next_id++;
  g_channels[id] = ch;
  return id;
}

// Ends every queued send and receive of channel `id` with CANCELLED, and every later one.
// Idempotent.
void drlhet_channel_close(int64_t id) {
  auto ch = Find(id);
  if (!ch) return;
  Finished finished;
  {
    std::lock_guard<std::mutex> lock(ch->mu);
    ch->closed = true;
    for (auto* queue : {&ch->senders, &ch->receivers}) {
      for (Waiter& w : *queue) {
        w.call->error = Cancelled(id);
        if (w.call->async) finished.push_back(w.call);
      }
      queue->clear();
    }
    ch->cv.notify_all();  // held calls fail in their own handler
  }
  Complete(finished);
}

// Closes channel `id` and forgets it (its messages are freed once no call holds it).
void drlhet_channel_destroy(int64_t id) {
  drlhet_channel_close(id);
  std::lock_guard<std::mutex> lock(g_mu);
  g_channels.erase(id);
}

// Host side, never waits: appends one message (1), or 0 if full or closed, -1 bad id/size.
int drlhet_channel_put(int64_t id, const void* data, int64_t bytes) {
  auto ch = Find(id);
  if (!ch || bytes != ch->message_bytes) return -1;
  Finished finished;
  {
    std::lock_guard<std::mutex> lock(ch->mu);
    if (ch->closed || int64_t(ch->items.size()) >= ch->capacity) return 0;
    const char* at = static_cast<const char*>(data);
    ch->items.emplace_back(at, at + bytes);
    Pump(*ch, finished);  // a queued receive may take it
  }
  Complete(finished);
  return 1;
}

// Host side, never waits (also after close): removes the oldest message into `out` (1), or 0
// if there is none, -1 bad id/size.
int drlhet_channel_take(int64_t id, void* out, int64_t bytes) {
  auto ch = Find(id);
  if (!ch || bytes != ch->message_bytes) return -1;
  Finished finished;
  {
    std::lock_guard<std::mutex> lock(ch->mu);
    if (ch->items.empty()) return 0;
    std::memcpy(out, ch->items.front().data(), bytes);
    ch->items.pop_front();
    if (!ch->closed) Pump(*ch, finished);  // a queued send may fill the place
  }
  Complete(finished);
  return 1;
}

// Seconds from programs' sends and receives to their completion (waiting for room or for a
// message), and messages sent and received by programs:
// out[0..3] = send_wait_s, recv_wait_s, sent, received. Returns 0, or -1 for a bad id.
int drlhet_channel_stats(int64_t id, double* out) {
  auto ch = Find(id);
  if (!ch) return -1;
  std::lock_guard<std::mutex> lock(ch->mu);
  out[0] = ch->send_wait_s;
  out[1] = ch->recv_wait_s;
  out[2] = double(ch->sent);
  out[3] = double(ch->received);
  return 0;
}

}  // extern "C"
