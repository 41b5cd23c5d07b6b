#include "rnic/device.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
#include <random>

#include "common/log.hpp"
#include "rnic/queue_pair.hpp"
#include "rnic/stat_server.hpp"

namespace iwarp::rnic {

Device::Device(std::string name, std::uint64_t seed)
    : name_(std::move(name)),
      work_(boost::asio::make_work_guard(io_)),
      memory_(seed ? seed : std::random_device{}()) {
  // The stat server listens before the engine runs (docs/stat.md). Each device of the process
  // has its own index; a failure costs only `rnic stat`.
  if (stat_enabled()) {
    static std::atomic<int> next_index{0};
    const std::string address = stat_socket_name(::getpid(), next_index++);
    std::string why;
    stat_ = StatServer::listen(*this, address, &why);
    if (stat_)
      stat_address_ = address;
    else
      log::layer("rnic").info("{}: rnic stat cannot reach this device: @{}: {}", name_, address,
                              why);
  }
  engine_ = std::thread([this] { engine_loop(); });
  // Named for top -H, gdb and ps -L (at most 15 characters); by this thread, so the name is
  // there when the constructor returns.
  engine_id_ = engine_.get_id();
  ::pthread_setname_np(engine_.native_handle(), "rnic-engine");
}

namespace {
std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

// The engine thread runs handlers holding engine_mu_ (up to kHandlersPerBatch in a row), so that a
// busy-polling program thread (progress()) can run them instead while this thread is parked.
// Parked, it wakes every lease period to see whether the program still polls; a stopped io_context
// ends the loop either way (run_one() returns 0, as run() would return).
namespace {
constexpr std::uint64_t kHandlersPerBatch = 16;
}  // namespace

void Device::engine_loop() {
  try {
    for (;;) {
      if (lease_wanted_.load()) {
        std::unique_lock p(park_mu_);
        ++parks_;
        // end_busy_poll() zeroes the time of the last poll: the program is about to block.
        const std::chrono::microseconds lease(lease_us_.load());
        park_cv_.wait_for(p, lease, [&] { return io_.stopped() || last_poll_ns_.load() == 0; });
        if (io_.stopped()) break;
        const std::int64_t last = last_poll_ns_.load();
        if (last != 0 && now_ns() - last < lease.count() * 1000) continue;
        if (last == 0) ++handbacks_;
        lease_wanted_ = false;  // nobody polled for a lease period: the engine takes over
      }
      // Up to kHandlersPerBatch handlers under one hold of the lock and one count, each run as
      // run_one() runs it (blocking in epoll when nothing is queued, as before: no poll of the
      // reactor in between, no extra system call), until a poller asks for the engine
      // (lease_wanted_, looked at after each handler as before) or the engine stops.
      std::lock_guard l(engine_mu_);
      struct Count {  // (counted even when a handler throws)
        std::atomic<std::uint64_t>& total;
        std::uint64_t ran = 0;
        ~Count() { total.fetch_add(ran, std::memory_order_relaxed); }
      } count{engine_handlers_};
      bool stopped = false;
      while (count.ran < kHandlersPerBatch) {
        if (io_.run_one() == 0) {
          stopped = true;
          break;
        }
        ++count.ran;
        if (lease_wanted_.load()) break;
      }
      if (stopped) break;
    }
  } catch (const std::exception& e) {
    log::layer("rnic").critical("{}: engine stopped by an exception: {}", name_, e.what());
    io_.stop();  // a polling thread runs no handler of a stopped engine either
  }
  // A polling thread may be inside progress(): once it is out, no handler runs any more (a
  // stopped io_context runs none), and callers may do engine work themselves (run_and_wait).
  std::lock_guard l(engine_mu_);
  engine_running_ = false;
}

bool Device::on_polling_thread() const {
  return on_engine_thread() && std::this_thread::get_id() != engine_id_;
}

bool Device::progress(bool ask_lease) {
  if (!busy_poll_ || !engine_running_ || rnr_waiters_.load() > 0 || on_engine_thread())
    return false;
  // Not asking (a poll that sends deferred posts): the engine thread, not parked for a poller,
  // runs what is queued (the deferred post's doorbell woke it); the lease is neither taken nor
  // renewed here.
  if (!ask_lease && !lease_wanted_.load()) return false;
  last_poll_ns_ = now_ns();
  std::unique_lock l(engine_mu_, std::try_to_lock);
  if (!l.owns_lock() && !ask_lease) {
    // Another poller runs the engine, or the engine thread finishes a handler before it parks:
    // the next poll tries again.
    flush_wanted_ = true;
    return false;
  }
  if (!l.owns_lock()) {
    // The engine thread is in its event loop (perhaps asleep in epoll): ask it to park, and
    // wake it so it sees the request, with at most one wake-up handler on its way.
    lease_wanted_ = true;
    if (!wake_pending_.exchange(true)) boost::asio::post(io_, [this] { wake_pending_ = false; });
    return false;
  }
  lease_wanted_ = true;
  // A bounded number of handlers per poll: a busy stream keeps making more, and the program
  // wants its completions back.
  constexpr std::size_t kHandlersPerPoll = 64;
  std::size_t n = 0;
  try {
    while (n < kHandlersPerPoll && io_.poll_one() != 0) ++n;
  } catch (const std::exception& e) {
    // As on the engine thread: a handler that throws stops the engine (never the program).
    log::layer("rnic").critical("{}: engine stopped by an exception: {}", name_, e.what());
    io_.stop();
    wake_parked();
  }
  polled_handlers_ += n;
  return n > 0;
}

bool Device::defer_post() {
  // The engine's own doorbells (a fenced WR that may go, a Read Response due) are run by it.
  if (!busy_poll_.load(std::memory_order_relaxed) || rnr_waiters_.load() > 0 || !engine_running_ ||
      on_engine_thread())
    return false;
  const std::int64_t last = last_any_poll_ns_.load(std::memory_order_relaxed);
  if (last == 0 || now_ns() - last >= lease_us_.load() * 1000) return false;
  return posts_since_poll_.fetch_add(1, std::memory_order_relaxed) > 0;
}

void Device::note_poll() {
  last_any_poll_ns_.store(now_ns(), std::memory_order_relaxed);
  if (posts_since_poll_.load(std::memory_order_relaxed) != 0)
    posts_since_poll_.store(0, std::memory_order_relaxed);
}

// A thread about to wait for the engine to run what it posted (deregister, run_and_wait) may
// be the very poller the engine thread is parked for: waking it now, rather than at the end of
// its lease, is what a program that stops polling to wait gets too (end_busy_poll).
void Device::hand_back_for_wait() {
  if (busy_poll_.load(std::memory_order_relaxed) && lease_wanted_.load()) end_busy_poll();
}

void Device::end_busy_poll() {
  last_any_poll_ns_ = 0;  // the program is about to block: its posts go at once again
  if (!lease_wanted_.load()) return;
  last_poll_ns_ = 0;
  wake_parked();
}

// Under park_mu_, so the notification cannot fall between the parked thread's check of its
// condition and its wait (it would then wait out the lease).
void Device::wake_parked() {
  std::lock_guard l(park_mu_);
  park_cv_.notify_all();
}

void Device::attach(std::weak_ptr<MemoryUser> user) {
  std::lock_guard l(users_mu_);
  std::erase_if(users_, [](const auto& w) { return w.expired(); });
  users_.push_back(std::move(user));
}

bool Device::revoke_now(STag stag) {
  auto r = memory_.take(stag);
  if (!r) return false;
  std::vector<std::shared_ptr<MemoryUser>> live;
  {
    std::lock_guard l(users_mu_);
    for (const auto& w : users_)
      if (auto u = w.lock()) live.push_back(std::move(u));
  }
  for (const auto& u : live) u->revoke(*r);
  return true;
}

bool Device::deregister(STag stag) {
  // On the engine thread (a callback) or once the engine has stopped, nothing else can be
  // touching the region: revoke at once.
  if (on_engine_thread() || !engine_running_) return revoke_now(stag);
  auto done = std::make_shared<std::promise<bool>>();
  auto result = done->get_future();
  boost::asio::post(io_, [this, stag, done] { done->set_value(revoke_now(stag)); });
  hand_back_for_wait();
  while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    // The engine stopped (device shutting down) before it ran the revocation: nothing runs
    // on it any more, so the region can go from here.
    if (!engine_running_) {
      if (result.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready) break;
      return revoke_now(stag);
    }
  }
  return result.get();
}

bool Device::run_and_wait(std::function<void()> fn, std::chrono::milliseconds bound) {
  if (on_engine_thread() || !engine_running_) {
    fn();
    return true;
  }
  // Whoever claims it runs it: the engine, or this thread once the engine has stopped.
  struct Shared {
    std::function<void()> fn;
    std::atomic<bool> claimed{false};
    std::promise<void> done;
  };
  auto sh = std::make_shared<Shared>();
  sh->fn = std::move(fn);
  auto ran = sh->done.get_future();
  boost::asio::post(io_, [sh] {
    if (sh->claimed.exchange(true)) return;
    sh->fn();
    sh->done.set_value();
  });
  hand_back_for_wait();
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    const auto left = deadline - std::chrono::steady_clock::now();
    const auto slice =
        std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(50));
    if (slice > slice.zero() && ran.wait_for(slice) == std::future_status::ready) return true;
    if (!engine_running_) {
      // io_.run() has returned: the handler ran to the end (ready) or never will.
      if (ran.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready) return true;
      if (sh->claimed.exchange(true)) return true;
      sh->fn();
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

bool Device::stop(std::chrono::milliseconds bound) {
  if (on_engine_thread()) return false;
  // Posts that wait for a poll (defer_post) are doorbells in the engine's queue, which stopping
  // abandons: a program that posts and exits without polling again has them run first (the
  // engine thread taken back from a poller; handlers run in the order queued).
  if (busy_poll_ && engine_running_) {
    end_busy_poll();
    run_and_wait([] {}, std::min(bound / 2, std::chrono::milliseconds(500)));
  }
  work_.reset();
  io_.stop();
  wake_parked();
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (engine_running_ && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (engine_running_) return false;
  if (engine_.joinable()) engine_.join();
  // Its own layer, so `--log engine=info` shows just this line (tests read it).
  if (busy_poll_)
    log::layer("engine").info(
        "{}: busy polling: {} handlers ran on polling threads, {} on the engine thread, which "
        "spent {} lease periods parked and was handed the engine back {} times (arming, "
        "waits for the engine); {} "
        "posts waited for a poll",
        name_, polled_handlers_.load(), engine_handlers_.load(), parks_.load(), handbacks_.load(),
        deferred_posts_.load());
  // Nothing answers on the engine any more: `rnic stat` finds no RNIC here.
  stat_.reset();
  return true;
}

void Device::track(std::weak_ptr<QueuePair> qp) {
  std::lock_guard l(qps_mu_);
  std::erase_if(qps_, [](const auto& w) { return w.expired(); });
  qps_.push_back(std::move(qp));
}

std::vector<std::shared_ptr<QueuePair>> Device::queue_pairs() {
  std::vector<std::shared_ptr<QueuePair>> out;
  {
    std::lock_guard l(qps_mu_);
    for (const auto& w : qps_)
      if (auto p = w.lock()) out.push_back(std::move(p));
  }
  {
    std::lock_guard l(users_mu_);
    for (const auto& w : users_)
      if (auto p = std::dynamic_pointer_cast<QueuePair>(w.lock())) out.push_back(std::move(p));
  }
  std::ranges::sort(out);
  const auto dup = std::ranges::unique(out);
  out.erase(dup.begin(), dup.end());
  return out;
}

void Device::forget_stat_in_forked_child() {
  if (stat_) ::close(stat_->native_handle());
  // The StatServer object is the parent's too (its memory was copied): left as it is.
  (void)stat_.release();
}

Device::~Device() {
  work_.reset();
  io_.stop();
  wake_parked();
  if (engine_.joinable()) engine_.join();
  stat_.reset();
}

}  // namespace iwarp::rnic
