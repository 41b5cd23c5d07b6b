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

class TcpReassembler {
 public:
  // `next` is the sequence number of the first stream octet (ISN + 1 after a SYN). `window`
  // bounds what is held: octets more than `window` beyond the in-order point are dropped (as
  // if never captured) and counted in dropped(); the default holds everything.
  explicit TcpReassembler(TcpSeq next, std::size_t window = SIZE_MAX)
      : next_(next), window_(window) {}

  // Adds a segment. Octets before the in-order point are dropped (already delivered);
  // the rest are held until contiguous. Calls `deliver` with each newly contiguous run,
  // in stream order. Returns the number of octets delivered.
  std::size_t add(TcpSeq seq, ByteSpan payload, const std::function<void(ByteSpan)>& deliver);

  TcpSeq next() const { return next_; }  // in-order point
  std::size_t held_bytes() const { return static_cast<std::size_t>(held_.covered()); }
  std::size_t holes() const { return held_.size(); }  // one gap before each held run
  std::uint64_t delivered() const { return delivered_; }
  std::uint64_t dropped() const { return dropped_; }  // octets beyond the window
  std::uint64_t dropped_segments() const { return dropped_segments_; }

 private:
  TcpSeq next_;
  std::size_t window_;
  std::uint64_t delivered_ = 0;
  std::uint64_t dropped_ = 0, dropped_segments_ = 0;
  // Out-of-order data keyed by offset from next_ at insertion time is fragile under wrap;
  // keyed by absolute 64-bit stream offset instead (offset of next_ is delivered_). The
  // extents of what is held, and the octets, one chunk per part a segment added.
  IntervalSet<std::uint64_t> held_;
  std::map<std::uint64_t, Bytes> chunks_;
};

}  // namespace iwarp::trace
