// The per-process registered-memory budget (issue 6, "Failure"): every buffer the protocol
// registers is charged here and released when it is unregistered. A receiver that cannot
// charge an enlarged buffer answers EnlargeNak and the sender falls back to pieces.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>

namespace iwarp::enlarge {

class Budget {
 public:
  static constexpr std::uint64_t kUnlimited = std::numeric_limits<std::uint64_t>::max();
  explicit Budget(std::uint64_t limit = kUnlimited) : limit_(limit) {}

  // Charges `n` bytes when they fit under the limit. Safe from any thread.
  bool try_charge(std::uint64_t n) {
    std::uint64_t cur = used_.load(std::memory_order_relaxed);
    do {
      if (n > limit_ || cur > limit_ - n) return false;
    } while (!used_.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed));
    return true;
  }
  void release(std::uint64_t n) { used_.fetch_sub(n, std::memory_order_relaxed); }

  std::uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  std::uint64_t limit() const { return limit_; }
  std::uint64_t available() const {
    const std::uint64_t u = used();
    return u >= limit_ ? 0 : limit_ - u;
  }

 private:
  const std::uint64_t limit_;
  std::atomic<std::uint64_t> used_{0};
};

}  // namespace iwarp::enlarge
