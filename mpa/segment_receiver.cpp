#include "mpa/segment_receiver.hpp"

#include <algorithm>
#include <cstring>

#include "mpa/crc32c.hpp"

namespace iwarp::mpa {

namespace {
// Beyond this many held octets a segment is dropped, as a TCP receive window would refuse it.
constexpr std::size_t kMaxHeld = 64 * 1024 * 1024;
// The most stream octets one FPDU can take: length, the largest ULPDU, pad, CRC and markers.
constexpr std::uint64_t kMaxFpduWire = 2 + 0xFFFF + 3 + 4 + 4 * (0x10000 / kMarkerInterval + 2);
}  // namespace

std::vector<Hole> SegmentReceiver::holes() const {
  std::vector<Hole> out;
  std::uint64_t cur = next_;
  for (const auto& [b, bytes] : held_) {
    if (b > cur) out.push_back({cur, b});
    cur = b + bytes.size();
  }
  return out;
}

std::size_t SegmentReceiver::held_bytes() const {
  std::size_t n = 0;
  for (const auto& [b, bytes] : held_) n += bytes.size();
  return n;
}

Hole SegmentReceiver::hole_before(std::uint64_t off) const {
  Hole h{next_, next_};
  std::uint64_t cur = next_;
  for (const auto& [b, bytes] : held_) {
    if (b > off) break;
    if (b > cur) h = {cur, b};
    cur = b + bytes.size();
  }
  return h;
}

void SegmentReceiver::advance(std::size_t n) {
  next_ += n;
}

void SegmentReceiver::receive(TcpSeq seq, ByteSpan payload, SegmentVisitor& v) {
  ++stats_.segments;
  if (payload.empty()) return;
  // Serial arithmetic (RFC 1982) against the in-order point.
  const std::int64_t rel = seq - next_seq();
  const std::int64_t off = static_cast<std::int64_t>(next_) + rel;
  const auto size = static_cast<std::int64_t>(payload.size());
  if (off + size <= static_cast<std::int64_t>(next_)) {
    ++stats_.duplicate_segments;
    stats_.duplicate_bytes += payload.size();
    v.on_duplicate(static_cast<std::uint64_t>(std::max<std::int64_t>(off, 0)), payload.size());
    return;
  }
  bool trimmed = false;
  if (off < static_cast<std::int64_t>(next_)) {
    const auto skip = static_cast<std::size_t>(static_cast<std::int64_t>(next_) - off);
    stats_.duplicate_bytes += skip;
    v.on_duplicate(static_cast<std::uint64_t>(std::max<std::int64_t>(off, 0)), skip);
    payload = payload.subspan(skip);
    trimmed = true;
  }
  const std::uint64_t at = trimmed ? next_ : static_cast<std::uint64_t>(off);
  if (at == next_ && held_.empty()) {
    // The common case: in order, nothing waiting.
    ++stats_.in_order_segments;
    next_ += payload.size();
    v.on_stream(payload);
    return;
  }
  if (at != next_) ++stats_.ooo_segments;
  if (held_bytes() + payload.size() > kMaxHeld) {
    ++stats_.dropped_segments;
    return;
  }
  const auto before = holes();
  const std::uint64_t old_next = next_;
  if (!trimmed) seg_starts_.insert(at);
  seg_ends_.insert(at + payload.size());
  insert(at, payload, v);
  deliver(v);
  // Holes that closed (no hole now overlaps them) and holes that opened (new, or split off).
  auto after = holes();
  std::vector<bool> matched(after.size(), false);
  for (const auto& h : before) {
    bool still = false;
    for (std::size_t i = 0; i < after.size(); ++i)
      if (!matched[i] && after[i].begin < h.end && h.begin < after[i].end) {
        matched[i] = true;
        still = true;
        break;
      }
    if (!still) {
      ++stats_.holes_closed;
      v.on_hole_closed(h, h.begin == old_next);
    }
  }
  for (std::size_t i = 0; i < after.size(); ++i)
    if (!matched[i]) {
      ++stats_.holes_opened;
      v.on_hole_opened(after[i]);
    }
  // FPDUs beyond a hole that this segment completed.
  if (!held_.empty()) {
    auto it = held_.upper_bound(at);
    if (it != held_.begin()) {
      --it;
      if (it->first + it->second.size() >= at) discover(it->first, at, v);
    }
  }
}

void SegmentReceiver::insert(std::uint64_t off, ByteSpan data, SegmentVisitor& v) {
  const std::uint64_t end = off + data.size();
  // The block that starts at or before `off` and reaches it: extend it in place.
  auto it = held_.upper_bound(off);
  std::uint64_t base;
  Bytes* blk = nullptr;
  if (it != held_.begin() && std::prev(it)->first + std::prev(it)->second.size() >= off) {
    --it;
    base = it->first;
    blk = &it->second;
    ++it;
  } else {
    base = off;
    blk = &held_[off];
    it = held_.upper_bound(off);
  }
  // Octets already held are kept as first received (a retransmission carries the same data).
  auto dup = [&](std::uint64_t from, std::uint64_t to) {
    if (to <= from) return;
    stats_.duplicate_bytes += to - from;
    v.on_duplicate(from, static_cast<std::size_t>(to - from));
  };
  const std::uint64_t old_end = base + blk->size();
  if (end > old_end) {
    const std::size_t keep = old_end > off ? static_cast<std::size_t>(old_end - off) : 0;
    dup(off, off + keep);
    blk->insert(blk->end(), data.begin() + static_cast<std::ptrdiff_t>(keep), data.end());
  } else {
    dup(off, end);
  }
  // Swallow the blocks the new octets reach.
  while (it != held_.end() && it->first <= base + blk->size()) {
    const std::uint64_t cur_end = base + blk->size();
    const std::uint64_t b_end = it->first + it->second.size();
    if (b_end > cur_end) {
      // Octets of this block before cur_end duplicate the new data; the block's own win.
      const std::size_t overlap = static_cast<std::size_t>(cur_end - it->first);
      std::memcpy(blk->data() + (it->first - base), it->second.data(), overlap);
      dup(it->first, cur_end);
      blk->insert(blk->end(), it->second.begin() + static_cast<std::ptrdiff_t>(overlap),
                  it->second.end());
    } else {
      std::memcpy(blk->data() + (it->first - base), it->second.data(), it->second.size());
      dup(it->first, b_end);
    }
    it = held_.erase(it);
  }
}

void SegmentReceiver::deliver(SegmentVisitor& v) {
  while (!held_.empty() && held_.begin()->first <= next_) {
    auto node = held_.extract(held_.begin());
    const std::uint64_t base = node.key();
    const Bytes& block = node.mapped();
    const std::uint64_t end = base + block.size();
    while (next_ < end) {
      if (auto c = claimed_.find(next_); c != claimed_.end()) {
        const std::uint64_t at = next_;
        const std::uint32_t w = c->second.wire_length;
        claimed_.erase(c);
        next_ += w;
        v.on_claimed_reached(at, w);
        continue;
      }
      std::uint64_t stop = end;
      if (auto nc = claimed_.lower_bound(next_); nc != claimed_.end() && nc->first < end)
        stop = nc->first;
      const ByteSpan run(block.data() + (next_ - base), static_cast<std::size_t>(stop - next_));
      next_ = stop;
      v.on_stream(run);
    }
  }
  seg_starts_.erase(seg_starts_.begin(), seg_starts_.lower_bound(next_));
  seg_ends_.erase(seg_ends_.begin(), seg_ends_.upper_bound(next_));
  known_.erase(known_.begin(), known_.lower_bound(next_));
  claimed_.erase(claimed_.begin(), claimed_.lower_bound(next_));
}

bool SegmentReceiver::parse_at(std::uint64_t block, std::uint64_t off, OooFpdu& out,
                               Bytes& ulpdu) const {
  const Bytes& b = held_.at(block);
  const std::uint64_t bend = block + b.size();
  std::uint64_t p = off;
  Crc32c crc;
  // Takes `n` FPDU octets (markers removed and checked) starting at p.
  auto take = [&](std::uint8_t* dst, std::size_t n, bool covered) {
    std::size_t got = 0;
    while (got < n) {
      if (cfg_.markers && is_marker_position(p)) {
        // RFC 5044 §5: Reserved 0, FPDUPTR = octets back to this FPDU's first octet.
        if (p + kMarkerSize > bend) return false;
        const std::uint8_t* m = b.data() + (p - block);
        if (load_be16(m) != 0 || load_be16(m + 2) != p - off) return false;
        crc.update(ByteSpan(m, kMarkerSize));
        p += kMarkerSize;
        continue;
      }
      std::size_t chunk = n - got;
      if (cfg_.markers) chunk = std::min<std::size_t>(chunk, kMarkerInterval - p % kMarkerInterval);
      if (p + chunk > bend) return false;
      const ByteSpan src(b.data() + (p - block), chunk);
      if (dst) std::memcpy(dst + got, src.data(), chunk);
      if (covered) crc.update(src);
      p += chunk;
      got += chunk;
    }
    return true;
  };
  std::uint8_t len[kUlpduLengthSize];
  if (!take(len, sizeof len, true)) return false;
  const std::uint16_t ulen = load_be16(len);
  if (ulen < 14) return false;  // smaller than any DDP header (RFC 5041 §5.2)
  ulpdu.resize(ulen);
  if (!take(ulpdu.data(), ulen, true)) return false;
  std::uint8_t pad[3];
  if (!take(pad, pad_length(ulen), true)) return false;
  std::uint8_t crcb[kCrcSize];
  if (!take(crcb, kCrcSize, false)) return false;
  out.offset = off;
  out.wire_length = static_cast<std::uint32_t>(p - off);
  out.ulpdu_length = ulen;
  out.ulpdu = ulpdu;
  out.crc = CrcStatus::NotChecked;
  if (cfg_.crc) {
    // RFC 5044 §6.2: trust nothing found beyond a hole before its CRC matches.
    if (load_le32(crcb) != crc.value()) return false;
    out.crc = CrcStatus::Good;
  }
  return true;
}

void SegmentReceiver::discover(std::uint64_t block, std::uint64_t changed, SegmentVisitor& v) {
  const Bytes& b = held_.at(block);
  const std::uint64_t bend = block + b.size();
  // Only FPDUs that may include the new octets: those starting at most one FPDU before them.
  const std::uint64_t lo = changed > block + kMaxFpduWire ? changed - kMaxFpduWire : block;
  // Candidate FPDU starts; `anchored` ones are known from a marker or the FPDU before them.
  std::map<std::uint64_t, bool> cand;
  if (cfg_.markers) {
    // RFC 5044 §5: every marker points back to the start of the FPDU it sits in.
    for (std::uint64_t m = (lo + kMarkerInterval - 1) / kMarkerInterval * kMarkerInterval;
         m + kMarkerSize <= bend; m += kMarkerInterval) {
      const std::uint8_t* p = b.data() + (m - block);
      const std::uint16_t ptr = load_be16(p + 2);
      if (load_be16(p) == 0 && ptr <= m && m - ptr >= block) cand[m - ptr] = true;
    }
  }
  // RFC 5044 §8 (FPDU alignment): a sender starts each TCP segment with an FPDU.
  for (auto it = seg_starts_.lower_bound(lo); it != seg_starts_.end() && *it < bend; ++it)
    cand.emplace(*it, false);
  for (auto it = chained_.lower_bound(lo); it != chained_.end() && *it < bend; ++it)
    cand[*it] = true;
  // True when [s, s + w) overlaps an FPDU already found: a start inside a known FPDU is an
  // image of one in its payload, not a boundary.
  auto overlaps_known = [&](std::uint64_t s, std::uint64_t w) {
    auto it = known_.upper_bound(s);
    if (it != known_.end() && it->first < s + w) return true;
    if (it == known_.begin()) return false;
    --it;
    return it->first != s && it->first + it->second > s;
  };
  Bytes ulpdu;
  for (const auto& [c, anchored] : cand) {
    if (overlaps_known(c, 1)) continue;
    // Follow the chain of FPDUs from this start: each one's length gives the next. With the
    // CRC on each FPDU proves itself; with markers a marker's pointer does (every marker inside
    // an FPDU must point back to its start, so a chain from a segment start that crosses a
    // marker is proven too). Otherwise nothing checks the framing but alignment: the chain
    // counts once an FPDU ends exactly where a received segment ended.
    std::vector<std::pair<OooFpdu, Bytes>> chain;
    std::uint64_t s = c;
    bool trusted = cfg_.crc || (cfg_.markers && anchored);
    bool crossed_marker = false;
    while (s < bend && !claimed_.count(s)) {
      OooFpdu f;
      if (!parse_at(block, s, f, ulpdu) || overlaps_known(s, f.wire_length)) {
        if (trusted && !chain.empty()) chained_.insert(s);  // complete it later
        break;
      }
      if (cfg_.markers &&
          (s + f.wire_length - 1) / kMarkerInterval > (s == 0 ? 0 : (s - 1) / kMarkerInterval))
        crossed_marker = true;
      chain.emplace_back(f, ulpdu);
      s += f.wire_length;
      // A chain that lands exactly on an FPDU already found is proven by it.
      if (!trusted && known_.count(s)) {
        trusted = true;
        break;
      }
      if (!trusted && seg_ends_.count(s) && (!cfg_.markers || crossed_marker)) {
        trusted = true;
        break;
      }
    }
    // The FPDU after a trusted chain starts where the chain ended, whenever it arrives.
    if (trusted && !chain.empty() && !known_.count(s) && !claimed_.count(s)) chained_.insert(s);
    if (!trusted) continue;
    for (auto& [f, bytes] : chain) {
      if (known_.count(f.offset) || f.offset < next_) continue;
      known_[f.offset] = f.wire_length;
      chained_.erase(f.offset);
      f.ulpdu = bytes;
      ++stats_.ooo_fpdus_found;
      const auto verdict = v.on_ooo_fpdu(f, hole_before(f.offset));
      if (verdict == OooVerdict::Placed) {
        ++stats_.ooo_fpdus_placed;
        claimed_[f.offset] = Claimed{f.wire_length};
      }
    }
  }
}

}  // namespace iwarp::mpa
