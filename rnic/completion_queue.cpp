#include "rnic/completion_queue.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

#include "rnic/device.hpp"

namespace iwarp::rnic {

CompletionChannel::CompletionChannel(bool nonblocking_fd)
    : fd_(::eventfd(0, EFD_CLOEXEC | (nonblocking_fd ? EFD_NONBLOCK : 0))) {
  if (fd_ < 0) throw std::runtime_error("eventfd failed for a completion channel");
}

CompletionChannel::~CompletionChannel() {
  if (fd_ >= 0) ::close(fd_);
}

void CompletionChannel::signal(CompletionQueue* cq) {
  // The eventfd is written under the lock, so wait() never drains it between our push and the
  // write (which would leave it readable with no event: a busy loop).
  std::lock_guard l(mu_);
  events_.push_back(cq);
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd_, &one, sizeof one);
}

void CompletionChannel::purge(CompletionQueue* cq) {
  std::lock_guard l(mu_);
  // The eventfd counts while events are queued: read it only when this purge emptied the
  // queue (reading a zero count would block on a blocking eventfd).
  if (std::erase(events_, cq) > 0 && events_.empty()) {
    std::uint64_t v;
    [[maybe_unused]] auto n = ::read(fd_, &v, sizeof v);
  }
}

CompletionQueue* CompletionChannel::try_take() {
  std::lock_guard l(mu_);
  if (events_.empty()) return nullptr;
  auto* cq = events_.front();
  events_.pop_front();
  if (events_.empty()) {
    std::uint64_t v;
    [[maybe_unused]] auto n = ::read(fd_, &v, sizeof v);
  }
  std::lock_guard cl(cq->mu_);
  ++cq->events_;
  return cq;
}

CompletionQueue* CompletionChannel::wait(std::optional<std::chrono::milliseconds> timeout) {
  const auto deadline = timeout ? std::chrono::steady_clock::now() + *timeout
                                : std::chrono::steady_clock::time_point{};
  for (;;) {
    if (auto* cq = try_take()) return cq;
    int ms = -1;
    if (timeout) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return nullptr;
      ms = static_cast<int>(left.count());
    }
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, ms);
    if (r < 0 && errno != EINTR) return nullptr;
  }
}

CompletionQueue::CompletionQueue(std::size_t depth, CompletionChannel* channel, void* context)
    : ring_(depth < 1 ? 1 : depth), channel_(channel), context_(context) {}

int CompletionQueue::poll(std::span<Wc> out, bool may_progress) {
  thread_local unsigned empty_polls = 0;
  bool armed = false;
  int n = take(out, &armed);
  // WRs posted while this program busy-polls wait for its poll (Device::defer_post): this one
  // sends them, all in one batch, and returns their completions with the rest. Not a poll of
  // an armed CQ: the program is about to block, and the engine thread has the work.
  if (may_progress && !armed && dev_ && dev_->busy_poll()) {
    dev_->note_poll();
    if (dev_->take_deferred_posts() && dev_->progress(false) && n < static_cast<int>(out.size()))
      n += take(out.subspan(static_cast<std::size_t>(n)), nullptr);
  }
  if (n > 0) {
    empty_polls = 0;
    return n;
  }
  // Busy polling: nothing here yet, so this thread moves the engine itself (outside mu_: the
  // handlers push into this CQ), once it has looked a few times in a row. Not on an armed CQ:
  // the program is about to wait for its event (the poll between arming and waiting), and the
  // engine thread is the one to run meanwhile.
  if (out.empty() || !may_progress || armed || !dev_ || !dev_->busy_poll()) return 0;
  if (++empty_polls < Device::kEmptyPollsBeforeProgress) return 0;
  if (!dev_->progress()) return 0;
  const int got = take(out, nullptr);
  if (got > 0) empty_polls = 0;  // a completion ends the run of empty polls, however it came
  return got;
}

int CompletionQueue::take(std::span<Wc> out, bool* armed) {
  constexpr auto relaxed = std::memory_order_relaxed;
  // An empty ring is seen without mu_: a program that spins on its CQ would otherwise take, at
  // every poll, the lock the engine's push needs. The ring moves only under mu_, so a look
  // without it is at worst a poll too early; and a completion pushed before this thread armed
  // the CQ (under mu_) is seen here, the lock ordering the two.
  if (tail_.load(relaxed) == head_.load(relaxed)) {
    if (armed) *armed = arm_.load(relaxed) != Arm::None;
    return 0;
  }
  std::lock_guard l(mu_);
  if (armed) *armed = arm_.load(relaxed) != Arm::None;
  std::uint64_t h = head_.load(relaxed);
  const std::uint64_t t = tail_.load(relaxed);
  int n = 0;
  for (; n < static_cast<int>(out.size()) && h != t; ++h)
    out[static_cast<std::size_t>(n++)] = ring_[h % ring_.size()];
  head_.store(h, relaxed);
  return n;
}

int CompletionQueue::req_notify(bool solicited_only) {
  // Arming is what a program does before it blocks on the channel: a busy-polling thread
  // hands the engine back now, so the completion it waits for does not wait for the lease.
  if (dev_ && dev_->busy_poll()) dev_->end_busy_poll();
  std::lock_guard l(mu_);
  // Arming for all completions wins over an earlier solicited-only arm.
  if (!solicited_only)
    arm_.store(Arm::All, std::memory_order_relaxed);
  else if (arm_.load(std::memory_order_relaxed) == Arm::None)
    arm_.store(Arm::Solicited, std::memory_order_relaxed);
  return 0;
}

void CompletionQueue::ack_events(unsigned n) {
  std::lock_guard l(mu_);
  acked_ += n;
}

unsigned CompletionQueue::events_unacked() const {
  std::lock_guard l(mu_);
  return events_ - acked_;
}

bool CompletionQueue::overflowed() const {
  std::lock_guard l(mu_);
  return overflow_;
}

std::size_t CompletionQueue::used() const {
  std::lock_guard l(mu_);
  return static_cast<std::size_t>(tail_.load(std::memory_order_relaxed) -
                                  head_.load(std::memory_order_relaxed));
}

bool CompletionQueue::push(const Wc& wc, bool solicited) {
  return push(std::span<const Wc>(&wc, 1), solicited) == 1;
}

std::size_t CompletionQueue::push(std::span<const Wc> wcs, bool solicited) {
  bool notify = false;
  std::size_t n = 0;
  {
    std::lock_guard l(mu_);
    ++stats_.pushes;
    bool failed = false;
    std::uint64_t t = tail_.load(std::memory_order_relaxed);
    const std::uint64_t h = head_.load(std::memory_order_relaxed);
    for (const auto& wc : wcs) {
      if (t - h == ring_.size()) {
        overflow_ = true;
        break;
      }
      ring_[t % ring_.size()] = wc;
      ++t;
      ++n;
      failed |= wc.status != WcStatus::Success;
    }
    tail_.store(t, std::memory_order_release);
    stats_.completions += n;
    // A failed completion counts as solicited, as in the verbs specification.
    const Arm arm = arm_.load(std::memory_order_relaxed);
    if (n > 0 && (arm == Arm::All || (arm == Arm::Solicited && (solicited || failed)))) {
      arm_.store(Arm::None, std::memory_order_relaxed);
      notify = true;
      ++stats_.events;
    }
  }
  if (notify) {
    std::lock_guard l(channel_mu_);
    if (channel_) channel_->signal(this);
  }
  return n;
}

CompletionQueue::Stats CompletionQueue::stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

void CompletionQueue::detach_channel() {
  std::lock_guard l(channel_mu_);
  if (channel_) channel_->purge(this);
  channel_ = nullptr;
}

bool CompletionQueue::detach_channel_if_acked() {
  std::lock_guard l(channel_mu_);
  if (!channel_) return events_unacked() == 0;
  // try_take() counts an event under the channel's lock: hold it across the check and purge.
  std::lock_guard cl(channel_->mu_);
  {
    std::lock_guard ql(mu_);
    if (events_ != acked_) return false;
  }
  if (std::erase(channel_->events_, this) > 0 && channel_->events_.empty()) {
    std::uint64_t v;
    [[maybe_unused]] auto n = ::read(channel_->fd_, &v, sizeof v);
  }
  channel_ = nullptr;
  return true;
}

}  // namespace iwarp::rnic
