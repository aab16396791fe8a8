// Bounded byte channels between XLA programs running at the same time on different host
// threads: the pipelined loop's stages pass batches, priorities and parameters through them
// from inside their jitted chunk programs (docs/design.md section 6), so no Python runs per
// stage call. A send blocks while its channel is full, a receive while it is empty; closing a
// channel wakes every waiter, whose custom call then fails with CANCELLED (the run stops).
//
// FFI handlers (CPU):
//   drlhet_channel_send(x, token, id) -> token   attr: count  (x: count messages, row-major)
//   drlhet_channel_recv(token, id) -> y          attr: count  (y: count messages)
// The token (int32 scalar) orders the calls of one program: thread it from each receive to the
// next send. The channel's id is an operand (an int32 scalar), not an attribute, so a compiled
// program does not depend on which channels it was compiled for: JAX's compilation cache
// serves it again to a later run with new channels. C API (ctypes): open, close, destroy, put (host seeding), take (host draining),
// stats (time blocked).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<char>> items;
  int64_t capacity = 1;
  int64_t message_bytes = 0;
  bool closed = false;
  double send_wait_s = 0, recv_wait_s = 0;  // time callers spent blocked (full / empty)
  int64_t sent = 0, received = 0;
};

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::mutex g_mu;
std::map<int64_t, std::shared_ptr<Channel>> g_channels;
int64_t g_next_id = 1;

std::shared_ptr<Channel> Find(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_channels.find(id);
  return it == g_channels.end() ? nullptr : it->second;
}

// Appends `count` messages from `data`; false if the channel was closed meanwhile.
bool Push(Channel& ch, const char* data, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    std::unique_lock<std::mutex> lock(ch.mu);
    if (!ch.closed && int64_t(ch.items.size()) >= ch.capacity) {
      auto t0 = std::chrono::steady_clock::now();
      ch.cv.wait(lock, [&] { return ch.closed || int64_t(ch.items.size()) < ch.capacity; });
      ch.send_wait_s += Since(t0);
    }
    if (ch.closed) return false;
    ++ch.sent;
    const char* at = data + i * ch.message_bytes;
    ch.items.emplace_back(at, at + ch.message_bytes);
    ch.cv.notify_all();
  }
  return true;
}

// Removes `count` messages into `out`; false if the channel was closed meanwhile.
bool Pop(Channel& ch, char* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    std::unique_lock<std::mutex> lock(ch.mu);
    if (!ch.closed && ch.items.empty()) {
      auto t0 = std::chrono::steady_clock::now();
      ch.cv.wait(lock, [&] { return ch.closed || !ch.items.empty(); });
      ch.recv_wait_s += Since(t0);
    }
    if (ch.closed) return false;
    ++ch.received;
    std::memcpy(out + i * ch.message_bytes, ch.items.front().data(), ch.message_bytes);
    ch.items.pop_front();
    ch.cv.notify_all();
  }
  return true;
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

ffi::Error SendImpl(ffi::AnyBuffer x, ffi::Buffer<ffi::S32> token, ffi::Buffer<ffi::S32> id_arg,
                    ffi::ResultBuffer<ffi::S32> token_out, int64_t count) {
  const int64_t id = id_arg.typed_data()[0];
  std::shared_ptr<Channel> ch;
  if (auto e = Checked(id, count, x.size_bytes(), &ch); e.failure()) return e;
  if (!Push(*ch, static_cast<const char*>(x.untyped_data()), count)) return Cancelled(id);
  token_out->typed_data()[0] = token.typed_data()[0] + 1;
  return ffi::Error::Success();
}

ffi::Error RecvImpl(ffi::Buffer<ffi::S32> token, ffi::Buffer<ffi::S32> id_arg,
                    ffi::Result<ffi::AnyBuffer> y, int64_t count) {
  const int64_t id = id_arg.typed_data()[0];
  std::shared_ptr<Channel> ch;
  if (auto e = Checked(id, count, y->size_bytes(), &ch); e.failure()) return e;
  if (!Pop(*ch, static_cast<char*>(y->untyped_data()), count)) return Cancelled(id);
  return ffi::Error::Success();
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

// Wakes every sender and receiver of channel `id`; they fail with CANCELLED. Idempotent.
void drlhet_channel_close(int64_t id) {
  auto ch = Find(id);
  if (!ch) return;
  std::lock_guard<std::mutex> lock(ch->mu);
  ch->closed = true;
  ch->cv.notify_all();
}

// Closes channel `id` and forgets it (its messages are freed once no call holds it).
void drlhet_channel_destroy(int64_t id) {
  drlhet_channel_close(id);
  std::lock_guard<std::mutex> lock(g_mu);
  g_channels.erase(id);
}

// Host side, never blocks: appends one message (1), or 0 if full or closed, -1 bad id/size.
int drlhet_channel_put(int64_t id, const void* data, int64_t bytes) {
  auto ch = Find(id);
  if (!ch || bytes != ch->message_bytes) return -1;
  std::lock_guard<std::mutex> lock(ch->mu);
  if (ch->closed || int64_t(ch->items.size()) >= ch->capacity) return 0;
  const char* at = static_cast<const char*>(data);
  ch->items.emplace_back(at, at + bytes);
  ch->cv.notify_all();
  return 1;
}

// Host side, never blocks (also after close): removes the oldest message into `out` (1), or 0
// if there is none, -1 bad id/size.
int drlhet_channel_take(int64_t id, void* out, int64_t bytes) {
  auto ch = Find(id);
  if (!ch || bytes != ch->message_bytes) return -1;
  std::lock_guard<std::mutex> lock(ch->mu);
  if (ch->items.empty()) return 0;
  std::memcpy(out, ch->items.front().data(), bytes);
  ch->items.pop_front();
  ch->cv.notify_all();
  return 1;
}

// Seconds senders and receivers spent blocked, and messages sent and received by programs:
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
