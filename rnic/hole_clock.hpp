// How long a receive side takes, once a TCP hole closes, to deliver the octets that had
// arrived beyond it (their completions generated), per hole: what placing data beyond holes
// at once saves over holding it or discarding it (RxOptions::beyond_holes). Engine thread only.
//
// It is told the extents of every segment that arrives beyond the in-order point (octets are
// not kept) and where the in-order point is after each step. A run of octets seen beyond the
// in-order point sits behind a hole; the hole has closed once the in-order point reaches the
// run's start, and the run is delivered once it reaches the run's end (the segment path then
// has delivered every FPDU inside it: placed and completed, or its deferred completion
// released). One sample per run: its octets and the time between those two moments, the first
// taken when the step that closed the hole began (the segment filling it arrived), the second
// when the step that delivered the run's last octet ended. The run's extent is fixed when its
// hole closes: what arrives after that, adjoining it, is not behind that hole (with Discard it
// is behind the run the segment path dropped) and is not timed. The same measure fits every
// arm: with Discard the segment path drops the octets beyond the hole and the run is
// delivered when the socket's in-order stream brings them again.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/interval_set.hpp"

namespace iwarp::rnic {

class HoleClock {
 public:
  using Clock = std::chrono::steady_clock;
  struct Sample {
    std::uint64_t octets = 0;  // octets that had arrived beyond the hole when it closed
    std::uint64_t ns = 0;      // hole closed -> those octets delivered in order
  };
  // Runs tracked at once (as mpa::kMaxHoles): a segment that would start one more is not timed.
  static constexpr std::size_t kMaxRuns = 4096;
  // Samples kept per connection (1 MiB); later holes are counted, not kept.
  static constexpr std::size_t kMaxSamples = 65536;

  // [lo, hi) arrived beyond the in-order point `in_order` (a duplicate below it is not).
  void seen(std::uint64_t in_order, std::uint64_t lo, std::uint64_t hi) {
    if (lo <= in_order || hi <= lo) return;
    // Adjoins a run whose hole has closed, until the in-order point passes it: not behind a
    // hole (with Discard: behind the octets the segment path dropped).
    if (lo <= tail_) {
      tail_ = std::max(tail_, hi);
      return;
    }
    if (runs_.size() >= kMaxRuns && !runs_.find(lo) && !runs_.find(lo - 1) && !runs_.find(hi)) {
      if (lo > untracked_hi_) ++untracked_;  // once per run, not per segment
      untracked_hi_ = std::max(untracked_hi_, hi);
      return;
    }
    runs_.insert(lo, hi);
  }
  // A step that began at `began` (a segment arrived, a read returned) and ended at `now` moved
  // the in-order point to `in_order`.
  void advanced(std::uint64_t in_order, Clock::time_point began, Clock::time_point now) {
    for (;;) {
      if (!closing_) {
        if (runs_.empty() || runs_.front().lo > in_order) return;  // no hole has closed
        closing_ = Closing{runs_.front(), began};                  // its extent fixed now
        tail_ = closing_->run.hi;
        runs_.pop_front();
      }
      if (closing_->run.hi > in_order) return;  // being delivered
      record(closing_->run.hi - closing_->run.lo, now - closing_->at);
      closing_.reset();
    }
  }

  const std::vector<Sample>& samples() const { return samples_; }
  std::uint64_t untracked() const { return untracked_; }  // runs not timed (kMaxRuns)
  std::uint64_t not_kept() const { return not_kept_; }    // samples past kMaxSamples
  std::size_t open_runs() const { return runs_.size() + (closing_ ? 1 : 0); }

 private:
  void record(std::uint64_t octets, Clock::duration d) {
    if (samples_.size() >= kMaxSamples) {
      ++not_kept_;
      return;
    }
    samples_.push_back({octets, static_cast<std::uint64_t>(std::max<std::int64_t>(
                                    0, std::chrono::nanoseconds(d).count()))});
  }
  struct Closing {
    IntervalSet<std::uint64_t>::Range run;
    Clock::time_point at;  // when its hole closed
  };
  IntervalSet<std::uint64_t> runs_;  // runs whose hole is open
  std::optional<Closing> closing_;   // the run being delivered
  std::uint64_t tail_ = 0;           // arrivals adjoining a closed run reach this far
  std::uint64_t untracked_hi_ = 0;
  std::vector<Sample> samples_;
  std::uint64_t untracked_ = 0, not_kept_ = 0;
};

// Percentiles of samples whose octets lie in [min_octets, max_octets) (nearest rank).
struct HoleTimingSummary {
  std::size_t count = 0;
  std::uint64_t p50_ns = 0, p99_ns = 0, max_ns = 0;
};
inline HoleTimingSummary summarize(const std::vector<HoleClock::Sample>& s,
                                   std::uint64_t min_octets = 0,
                                   std::uint64_t max_octets = ~std::uint64_t{0}) {
  std::vector<std::uint64_t> ns;
  for (const auto& x : s)
    if (x.octets >= min_octets && x.octets < max_octets) ns.push_back(x.ns);
  HoleTimingSummary out;
  out.count = ns.size();
  if (ns.empty()) return out;
  std::sort(ns.begin(), ns.end());
  auto rank = [&](double p) {
    const auto r = static_cast<std::size_t>(p * static_cast<double>(ns.size()) + 0.999999);
    return ns[std::clamp<std::size_t>(r, 1, ns.size()) - 1];
  };
  out.p50_ns = rank(0.50);
  out.p99_ns = rank(0.99);
  out.max_ns = ns.back();
  return out;
}

}  // namespace iwarp::rnic
