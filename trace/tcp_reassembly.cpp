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
  const auto ustart = static_cast<std::uint64_t>(start);
  const auto uend = static_cast<std::uint64_t>(end);

  // Fast path: in order with nothing held; hand the octets straight through.
  if (ustart == delivered_ && held_.empty()) {
    if (deliver) deliver(payload);
    delivered_ += payload.size();
    next_ += static_cast<std::uint32_t>(payload.size());
    return payload.size();
  }

  // Hold the octets no earlier segment has supplied: octets already held win (first arrival),
  // so only the gaps between held ranges inside [ustart, uend) are stored. Held ranges never
  // overlap each other.
  std::uint64_t cur = ustart;
  auto it = held_.upper_bound(cur);
  if (it != held_.begin()) {
    auto prev = std::prev(it);
    cur = std::max(cur, prev->first + prev->second.size());
  }
  while (cur < uend) {
    it = held_.lower_bound(cur);
    const std::uint64_t gap_end = it == held_.end() ? uend : std::min(uend, it->first);
    if (gap_end > cur) {
      const auto from = payload.begin() + static_cast<std::ptrdiff_t>(cur - ustart);
      const auto to = payload.begin() + static_cast<std::ptrdiff_t>(gap_end - ustart);
      held_.emplace(cur, Bytes(from, to));
      cur = gap_end;
    }
    if (it != held_.end() && it->first == cur) cur = it->first + it->second.size();
  }

  // Deliver what became contiguous with the in-order point, as one run.
  std::size_t n = 0;
  Bytes run;
  auto first = held_.begin();
  auto last = first;
  std::uint64_t pos = delivered_;
  while (last != held_.end() && last->first == pos) {
    pos += last->second.size();
    ++last;
  }
  if (last == first) return 0;
  if (std::next(first) == last) {
    n = first->second.size();
    if (deliver) deliver(first->second);
  } else {
    run.reserve(static_cast<std::size_t>(pos - delivered_));
    for (auto i = first; i != last; ++i) run.insert(run.end(), i->second.begin(), i->second.end());
    n = run.size();
    if (deliver) deliver(run);
  }
  held_.erase(first, last);
  delivered_ += n;
  next_ += static_cast<std::uint32_t>(n);
  return n;
}

std::size_t TcpReassembler::held_bytes() const {
  std::size_t n = 0;
  for (const auto& [off, bytes] : held_) n += bytes.size();
  return n;
}

std::size_t TcpReassembler::holes() const {
  std::size_t n = 0;
  std::uint64_t pos = delivered_;
  for (const auto& [off, bytes] : held_) {
    if (off > pos) ++n;
    pos = std::max(pos, off + bytes.size());
  }
  return n;
}

}  // namespace iwarp::trace
