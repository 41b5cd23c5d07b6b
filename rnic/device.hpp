// The emulated RNIC: one engine thread running a Boost.Asio event loop that does all transmit,
// receive and connection work for the device's queue pairs, plus the device's protection
// domains and memory regions. Applications talk to it from any thread; posting a work request
// rings a doorbell that wakes the engine. In busy-poll mode a program thread that polls an
// empty CQ runs the event loop's handlers itself while the engine thread steps aside
// (docs/progress-model.md "Busy polling"): one thread at a time runs them, whichever it is.
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rnic/memory.hpp"

namespace iwarp::rnic {

struct DeviceLimits {
  std::uint32_t max_qp_wr = 16384;
  std::uint32_t max_sge = 16;
  std::uint32_t max_inline_data = 256;
  std::uint32_t max_cqe = 1u << 20;
  std::uint16_t max_ird = 128;
  std::uint16_t max_ord = 128;
};

// Anything on the engine that may hold spans of registered memory between two handlers (a queue
// pair: the FPDU being placed, a receive WR in use, queued Read Responses, the unsent rest of a
// batch). Device::deregister() calls revoke() on the engine thread before it returns, and from
// then on the user no longer reads or writes that region.
class QueuePair;
class StatServer;

class MemoryUser {
 public:
  virtual ~MemoryUser() = default;
  virtual void revoke(const MemoryRegion& r) = 0;
};

class Device {
 public:
  explicit Device(std::string name = "rnic0", std::uint64_t seed = 0);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::string& name() const { return name_; }
  boost::asio::io_context& io() { return io_; }
  MemoryTable& memory() { return memory_; }
  const DeviceLimits& limits() const { return limits_; }
  std::uint32_t next_qp_num() { return next_qp_num_++; }
  // True while this thread runs the engine's handlers: the engine thread inside its event loop,
  // or a busy-polling program thread inside progress(). Engine state is touched only then.
  bool on_engine_thread() const {
    return const_cast<boost::asio::io_context&>(io_).get_executor().running_in_this_thread();
  }
  // True on a program thread that runs the handlers inside progress() (not the engine thread):
  // a handler there must not wait for the program (it is the program).
  bool on_polling_thread() const;

  // Busy polling (issue 15's progress model): when on, a CQ of this device that a program polls
  // and finds empty several times in a row calls progress(), and the polling thread runs the
  // engine's ready handlers itself (reads, placements, completions, doorbells, timers,
  // connection steps) while the engine thread stays parked; the engine thread takes over
  // kBusyPollLease after the last poll. Off by default. Any thread. Suspended while a QP of the
  // device has a soft RNR wait (QpInit::rnr_wait): its wait for a receive must be the engine
  // thread's, since the polling thread is the one that would post it.
  void set_busy_poll(bool on) { busy_poll_ = on; }
  bool busy_poll() const { return busy_poll_; }
  // Runs the engine's ready handlers on this thread, without blocking, if the engine thread is
  // parked for a poller; otherwise asks it to park (unless `ask_lease` is false: a poll that
  // only sends deferred posts does not take the engine). True when a handler ran. A no-op when
  // busy polling is off or on the engine's own thread.
  bool progress(bool ask_lease = true);
  // The program is about to block (it armed a CQ for an event): the engine thread takes over at
  // once instead of after the lease.
  void end_busy_poll();
  // end_busy_poll() if the engine thread is parked for a poller (deregister, run_and_wait).
  void hand_back_for_wait();
  static constexpr std::chrono::microseconds kBusyPollLease{250};
  // Tests: a longer lease, so that what a test makes happen while its thread polls is run by
  // that thread even when the machine deschedules it for a while.
  void set_busy_poll_lease(std::chrono::microseconds lease) { lease_us_ = lease.count(); }
  // Empty polls in a row on a thread before a poll drives progress: a program that looks once
  // and then waits some other way does not take the engine.
  static constexpr unsigned kEmptyPollsBeforeProgress = 4;
  // QueuePair: one more (+1) or one fewer (-1) QP with a soft RNR wait.
  void count_rnr_waiter(int delta) { rnr_waiters_ += delta; }
  // Posts while a program busy-polls (issue 15, small messages; docs/progress-model.md "Posts
  // batched by the poll"): when a program thread has polled a CQ of this device within the
  // lease, the first post after a poll is written by the posting thread as before (a
  // ping-pong keeps its latency), and each further one does not write to the socket itself: it
  // rings the engine's doorbell, and the program's next poll of any CQ of this device runs it
  // (Device::progress()), so the WRs posted between two polls leave together (one gather write
  // of up to 1 MiB when the engine thread is parked for the poller). A program that stops
  // polling gets them sent by the engine thread, which was never parked or comes back within
  // the lease (at once when a CQ is armed, or the device stops). Counts the post.
  bool defer_post();
  // CompletionQueue::poll, busy polling on: a program thread polled a CQ of this device now.
  void note_poll();
  // QueuePair, after posting its doorbell handler: a poll is to run it.
  void note_deferred_post() {
    ++deferred_posts_;
    flush_wanted_.store(true);
  }
  // CompletionQueue::poll: true once per batch of deferred posts (the poll then runs them).
  bool take_deferred_posts() {
    return flush_wanted_.load(std::memory_order_relaxed) && flush_wanted_.exchange(false);
  }
  // Handlers run by the engine thread and by polling threads, lease periods the engine thread
  // spent parked, and times it was handed the engine back by end_busy_poll().
  // `deferred_posts`: posts that waited for a poll of the program (defer_post()).
  struct EngineStats {
    std::uint64_t engine_handlers = 0, polled_handlers = 0, parks = 0, handbacks = 0;
    std::uint64_t deferred_posts = 0;
  };
  EngineStats engine_stats() const {
    return {engine_handlers_.load(), polled_handlers_.load(), parks_.load(), handbacks_.load(),
            deferred_posts_.load()};
  }

  // ibv_dereg_mr: takes the region out of the table and, on the engine thread, out of every
  // memory user. When this returns nothing in the engine reads or writes the region any more,
  // so its memory may be freed (a Write arriving into it later ends in a Terminate). Any
  // thread; bounded (the engine never blocks, except while a QP waits for a receive to be
  // posted: QpInit::rnr_wait, an opt-in bounded wait). False for an unknown STag.
  bool deregister(STag stag);
  // A memory user to tell about deregistrations (any thread; held weakly).
  void attach(std::weak_ptr<MemoryUser> user);

  // Runs `fn` on the engine thread and waits for it, at most `bound`. On the engine thread, or
  // once the engine has stopped (nothing else touches engine state then, and a queued handler
  // never runs), `fn` runs here. False when it has not run within `bound` (the engine is busy,
  // e.g. a QP in a bounded RNR wait): it may still run later, so it must own what it touches.
  bool run_and_wait(std::function<void()> fn, std::chrono::milliseconds bound);

  // Stops the engine thread: the handler running finishes, queued ones are abandoned
  // (connections stay as they are until their sockets close), except that with busy polling on
  // what is queued runs first (posts that waited for a poll, defer_post), for at most
  // min(bound / 2, 500 ms). Waits at most `bound`; true when
  // the thread has ended. Not from the engine thread. For the process's end: verbs calls after
  // this run their engine work on the caller's thread (run_and_wait, deregister) or do
  // nothing (a disconnect or a post is never carried out).
  bool stop(std::chrono::milliseconds bound);
  bool engine_running() const { return engine_running_; }

  // The queue pairs `rnic stat` lists (rnic/live_state.hpp): those made through the verbs
  // APIs, which track() them once made, and every connected one (a memory user). Any thread;
  // held weakly.
  void track(std::weak_ptr<QueuePair> qp);
  std::vector<std::shared_ptr<QueuePair>> queue_pairs();
  // The abstract socket `rnic stat` reaches this device on ("rnic-stat-<pid>-<index>", no
  // leading NUL; rnic/stat_server.hpp), empty when it does not listen (RNIC_STAT=0, or the
  // socket could not be had). Closed by stop().
  const std::string& stat_address() const { return stat_address_; }
  // In a child forked from this process, whose copy of the device is never used: closes the
  // child's copy of the stat listener, so the name is the parent's alone (a stat query reaches
  // the process that has the engine) and ends with it. Nothing else is touched.
  void forget_stat_in_forked_child();

 private:
  std::string name_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  MemoryTable memory_;
  DeviceLimits limits_;
  std::atomic<std::uint32_t> next_qp_num_{1};
  std::mutex users_mu_;
  std::vector<std::weak_ptr<MemoryUser>> users_;
  std::atomic<bool> engine_running_{true};
  std::mutex qps_mu_;
  std::vector<std::weak_ptr<QueuePair>> qps_;
  std::string stat_address_;
  std::unique_ptr<StatServer> stat_;  // uses io_: destroyed before it
  bool revoke_now(STag stag);
  void engine_loop();
  // Busy polling: whoever runs handlers holds engine_mu_ (the engine thread for up to 16
  // handlers in a row, a poller for up to 64 in one progress()); lease_wanted_ asks the engine
  // thread to park until no program thread has polled for the lease (lease_us_; last_poll_ns_,
  // steady clock).
  std::atomic<bool> busy_poll_{false};
  std::mutex engine_mu_;
  std::atomic<bool> lease_wanted_{false};
  std::atomic<bool> wake_pending_{false};  // a handler that wakes the engine thread is queued
  std::atomic<std::int64_t> last_poll_ns_{0};
  std::mutex park_mu_;
  std::condition_variable park_cv_;
  std::atomic<std::uint64_t> engine_handlers_{0}, polled_handlers_{0}, parks_{0}, handbacks_{0};
  std::atomic<int> rnr_waiters_{0};
  std::atomic<std::uint64_t> deferred_posts_{0};
  std::atomic<bool> flush_wanted_{false};           // a deferred post's doorbell waits for a poll
  std::atomic<std::int64_t> last_any_poll_ns_{0};   // note_poll(): the last poll, empty or not
  std::atomic<std::uint32_t> posts_since_poll_{0};  // defer_post() since the last note_poll()
  std::atomic<std::int64_t> lease_us_{kBusyPollLease.count()};
  void wake_parked();
  std::thread engine_;
  // The engine thread's id, set once by the constructor: stop()'s join() clears engine_'s while
  // other threads may be asking on_engine_thread().
  std::thread::id engine_id_;
};

}  // namespace iwarp::rnic
