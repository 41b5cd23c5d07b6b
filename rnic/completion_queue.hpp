// Completion queues and completion channels (the CQ half of RFC 5040 §5's completion model,
// with the libibverbs notification scheme): a CQ is a ring of work completions; req_notify()
// arms it once, for all completions or for solicited ones only (RFC 5040 §4.3, Send with SE);
// the next matching completion then raises one event on the CQ's channel, which a consumer
// waits for without spinning (the channel is an eventfd).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "rnic/work_request.hpp"

namespace iwarp::rnic {

class CompletionQueue;
class Device;

class CompletionChannel {
 public:
  // nonblocking_fd = false: the eventfd is blocking, as rdma-core's channel fd, so a consumer
  // that set O_NONBLOCK on it can be told apart (the drop-in libibverbs reads its flags).
  explicit CompletionChannel(bool nonblocking_fd = true);
  ~CompletionChannel();
  CompletionChannel(const CompletionChannel&) = delete;
  CompletionChannel& operator=(const CompletionChannel&) = delete;

  // Blocks until a CQ on this channel has an event (or the timeout passes: nullptr).
  CompletionQueue* wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // The next event without waiting (nullptr when none), counted as delivered like wait()'s.
  CompletionQueue* try_take();
  int fd() const { return fd_; }  // readable while an event is pending

  void signal(CompletionQueue* cq);  // engine side
  // Drops the events of `cq` not yet taken by wait() (the CQ is being destroyed).
  void purge(CompletionQueue* cq);

 private:
  friend class CompletionQueue;
  int fd_ = -1;
  std::mutex mu_;
  std::deque<CompletionQueue*> events_;
};

class CompletionQueue {
 public:
  CompletionQueue(std::size_t depth, CompletionChannel* channel, void* context);

  // Up to out.size() completions, oldest first. Returns how many. When the CQ is empty, not
  // armed, its device busy-polls and this thread found CQs empty kEmptyPollsBeforeProgress
  // times in a row, the polling thread first runs the engine's ready handlers itself
  // (Device::progress()) and looks again.
  // `may_progress` false: never drive progress (a later chunk of one ibv_poll_cq call).
  int poll(std::span<Wc> out, bool may_progress = true);
  // The device whose engine fills this CQ, for busy polling (ibv_create_cq sets it; the CQ
  // must not be polled after the device is gone). Null: poll() never drives progress.
  void set_device(Device* dev) { dev_ = dev; }
  // Arms the CQ for one event. Returns 0.
  int req_notify(bool solicited_only);
  // Completion events acknowledged so far (ibv_ack_cq_events).
  void ack_events(unsigned n);
  unsigned events_unacked() const;

  // Engine side: adds a completion; `solicited` for a Send with SE (RFC 5040 §4.3).
  // Returns false when the ring overflowed (the completion is lost).
  bool push(const Wc& wc, bool solicited = false);
  // Several completions, oldest first, under one lock and with at most one channel event
  // (`solicited`: one of them is a Send with SE). Returns how many went in; the rest are lost
  // when the ring overflows.
  std::size_t push(std::span<const Wc> wcs, bool solicited = false);

  // What push() did, for tests and benchmarks: completions, the push calls they came in
  // (a batch is one call), and the channel events raised.
  struct Stats {
    std::uint64_t completions = 0, pushes = 0, events = 0;
  };
  Stats stats() const;

  // Stops reporting events to the channel and takes this CQ's pending events off it
  // (ibv_destroy_cq); completions may still be pushed and polled.
  void detach_channel();
  // The same, only when every event taken so far was acknowledged, checked under the channel's
  // lock so that no wait() can take one in between (ibv_destroy_cq's EBUSY). False otherwise.
  bool detach_channel_if_acked();

  void* context() const { return context_; }
  CompletionChannel* channel() {
    std::lock_guard l(channel_mu_);
    return channel_;
  }
  std::size_t depth() const { return ring_.size(); }
  bool overflowed() const;
  // Completions in the ring not yet polled (`rnic stat`).
  std::size_t used() const;

 private:
  friend class CompletionChannel;
  enum class Arm : std::uint8_t { None, Solicited, All };
  mutable std::mutex mu_;
  std::vector<Wc> ring_;
  // Free-running; they and arm_ change only under mu_, and are atomic so that take() can see an
  // empty ring without taking mu_ (the lock the engine's push needs). That look reads no ring
  // slot: one read without mu_ would need acquire loads of tail_ (push stores it with release).
  std::atomic<std::uint64_t> head_{0}, tail_{0};
  std::atomic<Arm> arm_{Arm::None};
  bool overflow_ = false;
  Stats stats_;
  std::mutex channel_mu_;  // guards channel_ (taken before the channel's own lock)
  CompletionChannel* channel_;
  void* context_;
  Device* dev_ = nullptr;
  int take(std::span<Wc> out, bool* armed);
  unsigned events_ = 0, acked_ = 0;
};

}  // namespace iwarp::rnic
