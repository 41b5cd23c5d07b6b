// One direction of a TCP connection back into its byte stream (RFC 793 §3.3, §3.9 "segment
// arrives"): sequence numbers are compared with serial arithmetic and mapped onto a 64-bit
// stream offset, so wrap-around at 2^32 needs no special case.
#include "trace/tcp_reassembly.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

namespace iwarp::trace {

std::size_t TcpReassembler::add(TcpSeq seq, ByteSpan payload,
                                const std::function<void(ByteSpan)>& deliver) {
  if (payload.empty()) return 0;
  // Stream offset of the segment: distance from the in-order point (valid while within
  // ±2^31, RFC 1982 serial arithmetic) added to the offset of that point. A distance of
  // exactly 2^31 is undefined there (RFC 1982 §3.2); it is taken as ahead, so that the window
  // drops it with a note rather than as a retransmission without one.
  std::int64_t dist = seq - next_;
  if (dist == INT32_MIN) dist = -dist;
  std::int64_t start = static_cast<std::int64_t>(delivered_) + dist;
  std::int64_t end = start + static_cast<std::int64_t>(payload.size());
  const auto in_order = static_cast<std::int64_t>(delivered_);
  if (end <= in_order) return 0;  // entirely a retransmission of delivered octets
  if (start < in_order) {         // trim the part already delivered
    payload = payload.subspan(static_cast<std::size_t>(in_order - start));
    start = in_order;
  }
  // The window: octets beyond it are not held, so what is held is always within
  // [in-order point, in-order point + window). A segment starting at the in-order point is
  // delivered at once (whatever its length) and holds nothing.
  bool dropped_some = false;
  if (start > in_order && window_ != SIZE_MAX &&
      static_cast<std::uint64_t>(end - in_order) > window_) {
    const std::int64_t limit = in_order + static_cast<std::int64_t>(window_);
    ++dropped_segments_;
    if (start >= limit) {
      dropped_ += payload.size();
      return 0;
    }
    dropped_some = true;
    dropped_ += static_cast<std::uint64_t>(end - limit);
    payload = payload.first(static_cast<std::size_t>(limit - start));
    end = limit;
  }
  const auto ustart = static_cast<std::uint64_t>(start);
  auto uend = static_cast<std::uint64_t>(end);

  // Fast path: in order with nothing held; hand the octets straight through.
  if (ustart == delivered_ && held_.empty()) {
    if (deliver) deliver(payload);
    delivered_ += payload.size();
    next_ += static_cast<std::uint32_t>(payload.size());
    return payload.size();
  }

  // The held cost: each new piece costs its octets plus kHeldPieceOverhead, and the pieces
  // (the parts no held run covers, in order) are kept while the cost stays within the window
  // and the budget; from the first that does not fit (cut to what fits) on, the octets are
  // dropped. A segment at the in-order point is delivered at once and is not limited.
  if (ustart != delivered_) {
    std::size_t cost = 0;
    std::uint64_t cut = uend, lost = 0;
    bool by_budget = false;
    for (std::uint64_t pos = ustart; pos < uend;) {
      if (const auto run = held_.find(pos)) {
        pos = run->hi;
        continue;
      }
      const auto next_run = held_.upper_bound(pos);
      const std::uint64_t hi =
          next_run == held_.end() ? uend : std::min<std::uint64_t>(uend, next_run->first);
      if (cut != uend) {  // already cut: everything new from here on is dropped
        lost += hi - pos;
        pos = hi;
        continue;
      }
      const std::size_t want = static_cast<std::size_t>(hi - pos) + kHeldPieceOverhead;
      const std::size_t room_window =
          window_ == SIZE_MAX ? SIZE_MAX : window_ - std::min(window_, cost_ + cost);
      const std::size_t room_budget =
          budget_ ? budget_->limit - std::min(budget_->limit, budget_->used + cost) : SIZE_MAX;
      const std::size_t room = std::min(room_window, room_budget);
      if (want <= room) {
        cost += want;
      } else {
        by_budget = room_budget < room_window;
        const std::uint64_t keep =
            room > kHeldPieceOverhead ? room - kHeldPieceOverhead : 0;  // octets that fit
        cut = pos + keep;
        if (keep > 0) cost += static_cast<std::size_t>(keep) + kHeldPieceOverhead;
        lost += hi - cut;
      }
      pos = hi;
    }
    if (lost > 0) {
      if (by_budget) {
        budget_dropped_ += lost;
        ++budget_dropped_segments_;
      } else {
        dropped_ += lost;
        if (!dropped_some) ++dropped_segments_;
      }
      uend = cut;
      if (uend <= ustart) return 0;
    }
  }

  // Hold the octets no earlier segment has supplied: octets already held win (first arrival).
  held_.insert(
      ustart, uend,
      [&](std::uint64_t lo, std::uint64_t hi) {
        const auto from = payload.begin() + static_cast<std::ptrdiff_t>(lo - ustart);
        const auto to = payload.begin() + static_cast<std::ptrdiff_t>(hi - ustart);
        chunks_.emplace(lo, Bytes(from, to));
        const std::size_t c = static_cast<std::size_t>(hi - lo) + kHeldPieceOverhead;
        cost_ += c;
        if (budget_) budget_->used += c;
      },
      [](std::uint64_t, std::uint64_t) {});

  // Deliver what became contiguous with the in-order point, as one run.
  if (held_.front().lo != delivered_) return 0;
  const std::uint64_t pos = held_.front().hi;
  held_.pop_front();
  auto first = chunks_.begin();
  const auto last = chunks_.lower_bound(pos);
  std::size_t n = 0;
  const std::size_t freed =
      static_cast<std::size_t>(pos - delivered_) +
      kHeldPieceOverhead * static_cast<std::size_t>(std::distance(first, last));
  cost_ -= freed;
  if (budget_) budget_->used -= freed;
  if (std::next(first) == last) {
    n = first->second.size();
    if (deliver) deliver(first->second);
  } else {
    Bytes run;
    run.reserve(static_cast<std::size_t>(pos - delivered_));
    for (auto i = first; i != last; ++i) run.insert(run.end(), i->second.begin(), i->second.end());
    n = run.size();
    if (deliver) deliver(run);
  }
  chunks_.erase(first, last);
  delivered_ += n;
  next_ += static_cast<std::uint32_t>(n);
  return n;
}

std::map<std::uint64_t, Bytes> TcpReassembler::take_held() {
  if (budget_) budget_->used -= cost_;
  cost_ = 0;
  held_.clear();
  return std::exchange(chunks_, {});
}

}  // namespace iwarp::trace
