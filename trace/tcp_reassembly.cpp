// One direction of a TCP connection back into its byte stream (RFC 793 §3.3, §3.9 "segment
// arrives"): sequence numbers are compared with serial arithmetic and mapped onto a 64-bit
// stream offset, so wrap-around at 2^32 needs no special case.
#include "trace/tcp_reassembly.hpp"

#include <algorithm>
#include <iterator>

namespace iwarp::trace {

std::size_t TcpReassembler::add(TcpSeq seq, ByteSpan payload,
                                const std::function<void(ByteSpan)>& deliver) {
  if (payload.empty()) return 0;
  // Stream offset of the segment: distance from the in-order point (valid while within
  // ±2^31, RFC 1982 serial arithmetic) added to the offset of that point.
  std::int64_t start = static_cast<std::int64_t>(delivered_) + (seq - next_);
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
  if (start > in_order && window_ != SIZE_MAX &&
      static_cast<std::uint64_t>(end - in_order) > window_) {
    const std::int64_t limit = in_order + static_cast<std::int64_t>(window_);
    ++dropped_segments_;
    if (start >= limit) {
      dropped_ += payload.size();
      return 0;
    }
    dropped_ += static_cast<std::uint64_t>(end - limit);
    payload = payload.first(static_cast<std::size_t>(limit - start));
    end = limit;
  }
  const auto ustart = static_cast<std::uint64_t>(start);
  const auto uend = static_cast<std::uint64_t>(end);

  // Fast path: in order with nothing held; hand the octets straight through.
  if (ustart == delivered_ && held_.empty()) {
    if (deliver) deliver(payload);
    delivered_ += payload.size();
    next_ += static_cast<std::uint32_t>(payload.size());
    return payload.size();
  }

  // Hold the octets no earlier segment has supplied: octets already held win (first arrival).
  held_.insert(
      ustart, uend,
      [&](std::uint64_t lo, std::uint64_t hi) {
        const auto from = payload.begin() + static_cast<std::ptrdiff_t>(lo - ustart);
        const auto to = payload.begin() + static_cast<std::ptrdiff_t>(hi - ustart);
        chunks_.emplace(lo, Bytes(from, to));
      },
      [](std::uint64_t, std::uint64_t) {});

  // Deliver what became contiguous with the in-order point, as one run.
  if (held_.front().lo != delivered_) return 0;
  const std::uint64_t pos = held_.front().hi;
  held_.pop_front();
  auto first = chunks_.begin();
  const auto last = chunks_.lower_bound(pos);
  std::size_t n = 0;
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

}  // namespace iwarp::trace
