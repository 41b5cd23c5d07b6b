// Turns one direction's TCP segments (any order, duplicates, overlaps, retransmissions) into
// the in-order byte stream, and keeps track of the holes: octets beyond the in-order point
// that have arrived while something before them is still missing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

#include "common/bytes.hpp"
#include "common/interval_set.hpp"
#include "common/strong_types.hpp"

namespace iwarp::trace {

// What a held piece costs besides its octets: its map node (80), its extent node (64) and its
// buffer's allocator rounding (up to 31) with glibc on 64-bit hosts: a 1-octet piece takes 176.
// Counted against the window, so that the window bounds memory, not only octets.
inline constexpr std::size_t kHeldPieceOverhead = 176;

// A limit on what several reassemblers hold together (the held cost: octets plus
// kHeldPieceOverhead per piece). Each reassembler sharing it adds what it holds to `used` and
// takes it back when delivered or destroyed.
struct HeldBudget {
  std::size_t limit = SIZE_MAX;
  std::size_t used = 0;
};

class TcpReassembler {
 public:
  // `next` is the sequence number of the first stream octet (ISN + 1 after a SYN). `window`
  // bounds what is held: octets more than `window` beyond the in-order point, and octets whose
  // held cost would take held_cost() past `window`, are dropped (as if never captured) and
  // counted in dropped(); the default holds everything. With a `budget`, octets that would take
  // its total past its limit are dropped too, counted in dropped_by_budget().
  explicit TcpReassembler(TcpSeq next, std::size_t window = SIZE_MAX, HeldBudget* budget = nullptr)
      : next_(next), window_(window), budget_(budget) {}
  TcpReassembler(const TcpReassembler&) = delete;
  TcpReassembler& operator=(const TcpReassembler&) = delete;
  ~TcpReassembler() {
    if (budget_) budget_->used -= cost_;
  }

  // Adds a segment. Octets before the in-order point are dropped (already delivered);
  // the rest are held until contiguous. Calls `deliver` with each newly contiguous run,
  // in stream order. Returns the number of octets delivered.
  std::size_t add(TcpSeq seq, ByteSpan payload, const std::function<void(ByteSpan)>& deliver);

  TcpSeq next() const { return next_; }  // in-order point
  std::size_t held_bytes() const { return static_cast<std::size_t>(held_.covered()); }
  std::size_t holes() const { return held_.size(); }  // one gap before each held run
  std::uint64_t delivered() const { return delivered_; }
  // What is held including kHeldPieceOverhead per piece (at most the window).
  std::size_t held_cost() const { return cost_; }
  std::size_t pieces() const { return chunks_.size(); }
  std::uint64_t dropped() const { return dropped_; }  // octets beyond the window
  std::uint64_t dropped_segments() const { return dropped_segments_; }
  std::uint64_t dropped_by_budget() const { return budget_dropped_; }  // octets past the budget
  std::uint64_t dropped_by_budget_segments() const { return budget_dropped_segments_; }
  // Hands over what is held beyond the in-order point, piece by piece by stream offset from
  // the first octet (pieces that touch are separate entries), and holds nothing after.
  std::map<std::uint64_t, Bytes> take_held();

 private:
  TcpSeq next_;
  std::size_t window_;
  HeldBudget* budget_;
  std::size_t cost_ = 0;  // held octets + kHeldPieceOverhead per chunk
  std::uint64_t delivered_ = 0;
  std::uint64_t dropped_ = 0, dropped_segments_ = 0;
  std::uint64_t budget_dropped_ = 0, budget_dropped_segments_ = 0;
  // Out-of-order data keyed by offset from next_ at insertion time is fragile under wrap;
  // keyed by absolute 64-bit stream offset instead (offset of next_ is delivered_). The
  // extents of what is held, and the octets, one chunk per part a segment added.
  IntervalSet<std::uint64_t> held_;
  std::map<std::uint64_t, Bytes> chunks_;
};

}  // namespace iwarp::trace
