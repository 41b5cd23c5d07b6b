#include "mpa/segment_receiver.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "mpa/crc32c.hpp"

namespace iwarp::mpa {

namespace {
// The most stream octets one FPDU can take: length, the largest ULPDU, pad, CRC and markers.
constexpr std::uint64_t kMaxFpduWire = 2 + 0xFFFF + 3 + 4 + 4 * (0x10000 / kMarkerInterval + 2);
// Segment starts (and chained FPDU starts) looked at per segment, nearest first, on each side
// of the new octets' first one: enough for the largest FPDU cut into the smallest segments a
// sender uses (65,535 octets in 536-octet segments: 123 starts), and a bound on the work when
// a peer sends tiny segments.
constexpr std::size_t kMaxCandidates = 256;
// Without the CRC or a marker to prove an FPDU, a chain of FPDUs is trusted only once it ends
// where a segment ended, so a start whose first FPDU was all there before may still be proven
// by a new segment (its end, or the octets that extend the chain). It is followed again, but
// only for the starts nearest the new octets, this many.
constexpr std::size_t kMaxRewalks = 16;
// Octets parse_at may look at for one segment (about 1 MB, a millisecond of CRC at worst): the
// FPDUs one segment completes take far less, unless it joins two long runs. Past it the search
// stops for this segment (where a trusted chain stopped is chained, and followed later).
constexpr std::size_t kDiscoverBudget = 16 * kMaxFpduWire;

using Chunks = std::map<std::uint64_t, Bytes>;

// The chunk holding stream octet `p` (which must be held); `it` is a guess (the last one).
Chunks::const_iterator chunk_at(const Chunks& c, Chunks::const_iterator it, std::uint64_t p) {
  if (it != c.end() && it->first <= p) {
    if (p < it->first + it->second.size()) return it;
    auto nx = std::next(it);
    if (nx != c.end() && nx->first <= p && p < nx->first + nx->second.size()) return nx;
  }
  return std::prev(c.upper_bound(p));
}

// Calls f(ByteSpan) for the held octets [p, p + n), in order, chunk by chunk. All are held.
template <class F>
void read_held(const Chunks& c, Chunks::const_iterator& it, std::uint64_t p, std::size_t n, F&& f) {
  while (n > 0) {
    it = chunk_at(c, it, p);
    const auto in = static_cast<std::size_t>(it->first + it->second.size() - p);
    const std::size_t k = std::min(n, in);
    f(ByteSpan(it->second.data() + (p - it->first), k));
    p += k;
    n -= k;
  }
}

// Copies the held octets [p, p + n) to dst.
void copy_held(const Chunks& c, Chunks::const_iterator& it, std::uint64_t p, std::size_t n,
               std::uint8_t* dst) {
  read_held(c, it, p, n, [&dst](ByteSpan s) {
    std::memcpy(dst, s.data(), s.size());
    dst += s.size();
  });
}
}  // namespace

std::vector<Hole> SegmentReceiver::holes() const {
  std::vector<Hole> out;
  out.reserve(blocks_.size());
  std::uint64_t cur = next_;
  for (const auto& [b, e] : blocks_) {
    if (b > cur) out.push_back({cur, b});
    cur = e;
  }
  return out;
}

std::size_t SegmentReceiver::entries() const {
  return blocks_.size() + chunks_.size() + seg_starts_.size() + seg_ends_.size() + claimed_.size() +
         known_.size() + chained_.size();
}

std::size_t SegmentReceiver::held_memory() const {
  return held_octets_ + kHeldEntryOverhead * entries();
}

Hole SegmentReceiver::hole_before(std::uint64_t off) const {
  // The hole before the block holding `off`.
  auto it = blocks_.upper_bound(off);
  if (it == blocks_.begin()) return {next_, next_};
  --it;
  const std::uint64_t begin = it == blocks_.begin() ? next_ : std::prev(it)->second;
  return {begin, it->first};
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
  if (at == next_ && blocks_.empty()) {
    // The common case: in order, nothing waiting.
    ++stats_.in_order_segments;
    next_ += payload.size();
    v.on_stream(payload);
    return;
  }
  if (at != next_) ++stats_.ooo_segments;
  const std::uint64_t end = at + payload.size();

  // The holes [at, end) closes (wholly covers) and the one it opens: a range split off the end
  // of the hole it falls inside, or the gap before it when it lies beyond everything held. A
  // segment that opens a hole closes none. Only the holes it reaches are looked at.
  std::vector<Hole> closed;
  std::optional<Hole> opened;
  {
    auto it = blocks_.upper_bound(at);
    std::uint64_t gap = it == blocks_.begin() ? next_ : std::prev(it)->second;
    for (; it != blocks_.end() && gap < end; ++it) {
      ++stats_.steps;
      const Hole h{gap, it->first};
      if (at <= h.begin && end >= h.end)
        closed.push_back(h);
      else if (at > h.begin && end < h.end)
        opened = Hole{end, h.end};
      gap = it->second;
    }
    if (it == blocks_.end() && at > gap) opened = Hole{gap, at};
  }
  // The limits. A segment at the in-order point only ever shrinks what is held.
  if (opened && blocks_.size() >= limits_.max_holes) {
    ++stats_.dropped_hole_limit;
    ++stats_.dropped_segments;
    return;
  }
  if (at != next_ && held_memory() + payload.size() + kHeldEntryOverhead * (closed.size() + 4) >
                         limits_.max_held) {
    ++stats_.dropped_memory_limit;
    ++stats_.dropped_segments;
    return;
  }

  const std::uint64_t old_next = next_;
  if (!trimmed) seg_starts_.insert(at);
  seg_ends_.insert(end);
  insert(at, payload, v);
  deliver(v);
  for (const auto& h : closed) {
    ++stats_.holes_closed;
    v.on_hole_closed(h, h.begin == old_next);
  }
  if (opened) {
    ++stats_.holes_opened;
    v.on_hole_opened(*opened);
  }
  // FPDUs beyond a hole that this segment completed.
  if (limits_.discover && !blocks_.empty()) {
    auto it = blocks_.upper_bound(at);
    if (it != blocks_.begin()) {
      --it;
      budget_used_ = 0;
      if (it->second >= at && !discover(it->first, it->second, at, end, v)) ++stats_.discovery_cut;
    }
  }
}

void SegmentReceiver::add_chunk(std::uint64_t off, ByteSpan data) {
  held_octets_ += data.size();
  stats_.held_copied_bytes += data.size();
  stats_.peak_held_bytes = std::max<std::uint64_t>(stats_.peak_held_bytes, held_octets_);
  chunks_.emplace_hint(chunks_.lower_bound(off), off, Bytes(data.begin(), data.end()));
}

void SegmentReceiver::insert(std::uint64_t off, ByteSpan data, SegmentVisitor& v) {
  // The blocks [off, end] reaches (touching counts) become one block; the gaps between them
  // are filled from `data`, and what they hold already is duplicate.
  stats_.steps += blocks_.insert(
      off, off + data.size(),
      [&](std::uint64_t lo, std::uint64_t hi) {
        add_chunk(lo, data.subspan(static_cast<std::size_t>(lo - off),
                                   static_cast<std::size_t>(hi - lo)));
      },
      [&](std::uint64_t lo, std::uint64_t hi) {
        stats_.duplicate_bytes += hi - lo;
        v.on_duplicate(lo, static_cast<std::size_t>(hi - lo));
      });
}

void SegmentReceiver::deliver(SegmentVisitor& v) {
  while (!blocks_.empty() && blocks_.front().lo <= next_) {
    const std::uint64_t end = blocks_.front().hi;
    blocks_.pop_front();
    while (next_ < end) {
      ++stats_.steps;
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
      const auto ch = std::prev(chunks_.upper_bound(next_));
      stop = std::min<std::uint64_t>(stop, ch->first + ch->second.size());
      const ByteSpan run(ch->second.data() + (next_ - ch->first),
                         static_cast<std::size_t>(stop - next_));
      next_ = stop;
      v.on_stream(run);
    }
    // The block's chunks are all behind the in-order point now.
    while (!chunks_.empty() && chunks_.begin()->first + chunks_.begin()->second.size() <= next_) {
      ++stats_.steps;
      held_octets_ -= chunks_.begin()->second.size();
      chunks_.erase(chunks_.begin());
    }
  }
  seg_starts_.erase(seg_starts_.begin(), seg_starts_.lower_bound(next_));
  seg_ends_.erase(seg_ends_.begin(), seg_ends_.upper_bound(next_));
  known_.erase(known_.begin(), known_.lower_bound(next_));
  claimed_.erase(claimed_.begin(), claimed_.lower_bound(next_));
  chained_.erase(chained_.begin(), chained_.lower_bound(next_));
}

std::optional<std::uint64_t> SegmentReceiver::fpdu_end_at(std::uint64_t off,
                                                          std::uint64_t bend) const {
  std::uint64_t p = off;
  std::uint8_t len[kUlpduLengthSize];
  auto it = chunks_.cend();
  for (std::size_t got = 0; got < kUlpduLengthSize;) {
    if (cfg_.markers && is_marker_position(p)) {
      p += kMarkerSize;
      continue;
    }
    if (p >= bend) return std::nullopt;
    copy_held(chunks_, it, p, 1, len + got);
    ++p;
    ++got;
  }
  const std::uint16_t ulen = load_be16(len);
  const std::uint64_t rest = ulen + pad_length(ulen) + kCrcSize;
  return cfg_.markers ? logical_to_wire(p, rest) : p + rest;  // no markers: no grid to skip
}

bool SegmentReceiver::parse_at(std::uint64_t bend, std::uint64_t off, OooFpdu& out, Bytes& ulpdu) {
  std::uint64_t p = off;
  Crc32c crc;
  auto it = chunks_.cend();
  // Takes `n` FPDU octets (markers removed and checked) starting at p.
  auto take = [&](std::uint8_t* dst, std::size_t n, bool covered) {
    std::size_t got = 0;
    while (got < n) {
      if (cfg_.markers && is_marker_position(p)) {
        // RFC 5044 §5: Reserved 0, FPDUPTR = octets back to this FPDU's first octet.
        if (p + kMarkerSize > bend) return false;
        std::uint8_t m[kMarkerSize];
        copy_held(chunks_, it, p, kMarkerSize, m);
        if (load_be16(m) != 0 || load_be16(m + 2) != p - off) return false;
        crc.update(ByteSpan(m, kMarkerSize));
        p += kMarkerSize;
        continue;
      }
      std::size_t chunk = n - got;
      if (cfg_.markers) chunk = std::min<std::size_t>(chunk, octets_to_next_marker(p));
      if (p + chunk > bend) return false;
      read_held(chunks_, it, p, chunk, [&](ByteSpan s) {
        if (dst) std::memcpy(dst + got, s.data(), s.size());
        if (covered) crc.update(s);
        got += s.size();
      });
      p += chunk;
    }
    return true;
  };
  std::uint8_t len[kUlpduLengthSize];
  if (!take(len, sizeof len, true)) return false;
  const std::uint16_t ulen = load_be16(len);
  if (ulen < 14) return false;  // smaller than any DDP header (RFC 5041 §5.2)
  // Not all there (markers would only add to it): nothing more to look at.
  if (p + ulen + pad_length(ulen) + kCrcSize > bend) return false;
  budget_used_ += fpdu_length(ulen);
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

// Where a candidate FPDU start comes from: a segment start (none of these), a marker's FPDUPTR,
// or the FPDU before it (chained).
constexpr std::uint8_t kFromMarker = 1, kFromChain = 2;

bool SegmentReceiver::discover(std::uint64_t block, std::uint64_t bend, std::uint64_t changed,
                               std::uint64_t changed_end, SegmentVisitor& v) {
  // Only FPDUs that may include the new octets: those starting at most one FPDU before them
  // and before their end. A segment or marker start after them was looked at when its own
  // octets came, and nothing it depends on has changed. Chained starts are the exception: one
  // may have been added (by a chain ending at a segment end) after its FPDU was all there.
  const std::uint64_t lo = changed > block + kMaxFpduWire ? changed - kMaxFpduWire : block;
  Candidates cand;
  if (cfg_.markers) add_marker_candidates(cand, block, lo, bend, changed_end);
  add_start_candidates(cand, lo, bend, changed, changed_end);
  drop_unchanged_candidates(cand, bend, changed);
  Bytes ulpdu;
  for (const auto& [c, from] : cand) {
    ++stats_.steps;
    if (budget_used_ >= kDiscoverBudget) return false;
    // A start already found was followed then: its chain went as far as it could, and where it
    // stopped is chained (or found).
    if (known_.count(c) || overlaps_known(c, 1)) continue;
    if (!follow_chain(c, from, bend, ulpdu, v)) return false;
  }
  return true;
}

void SegmentReceiver::add_marker_candidates(Candidates& cand, std::uint64_t block, std::uint64_t lo,
                                            std::uint64_t bend, std::uint64_t changed_end) {
  // RFC 5044 §5: every marker points back to the start of the FPDU it sits in.
  const std::uint64_t mend = std::min<std::uint64_t>(bend, changed_end + kMaxFpduWire);
  auto it = chunks_.cend();
  for (std::uint64_t m = first_marker_at_or_after(lo); m + kMarkerSize <= mend;
       m += kMarkerInterval) {
    ++stats_.steps;
    std::uint8_t p[kMarkerSize];
    copy_held(chunks_, it, m, kMarkerSize, p);
    const std::uint16_t ptr = load_be16(p + 2);
    if (load_be16(p) == 0 && ptr <= m && m - ptr >= block && m - ptr < changed_end)
      cand[m - ptr] |= kFromMarker;
  }
}

void SegmentReceiver::add_start_candidates(Candidates& cand, std::uint64_t lo, std::uint64_t bend,
                                           std::uint64_t changed, std::uint64_t changed_end) {
  // The starts in `s` nearest the new octets: before them (down to lo) and after their first
  // one (up to `hi`).
  auto nearest = [&](const std::set<std::uint64_t>& s, std::uint64_t hi, auto&& add) {
    auto it = s.lower_bound(changed);
    auto back = it;
    for (std::size_t n = 0; n < kMaxCandidates && back != s.begin(); ++n) {
      --back;
      ++stats_.steps;
      if (*back < lo) break;
      add(*back);
    }
    for (std::size_t n = 0; n < kMaxCandidates && it != s.end() && *it < hi; ++n, ++it) {
      ++stats_.steps;
      add(*it);
    }
  };
  // RFC 5044 §8 (FPDU alignment): a sender starts each TCP segment with an FPDU. With markers
  // no FPDU starts inside a marker or right after one (an FPDU that begins at a marker position
  // begins with the marker, FPDUPTR 0, §5), so a segment cut there (a re-segmented
  // retransmission, or a hostile peer) is no candidate: from 4 octets into a real FPDU its
  // length field reads true and its chain would land on the next real start.
  nearest(seg_starts_, changed_end, [&](std::uint64_t c) {
    const std::uint64_t in = c % kMarkerInterval;
    if (!cfg_.markers || in == 0 || in > kMarkerSize) cand.emplace(c, 0);
  });
  nearest(chained_, bend, [&](std::uint64_t c) { cand[c] |= kFromChain; });
}

void SegmentReceiver::drop_unchanged_candidates(Candidates& cand, std::uint64_t bend,
                                                std::uint64_t changed) {
  // Starts whose first FPDU was all there before the new octets were looked at then. A segment
  // or marker start that proves itself (CRC, or a marker) cannot have changed; a start that
  // needs a segment end may, and so may a chained one (its chain may have stopped at the
  // budget), so the nearest kMaxRewalks of those are followed again.
  std::vector<std::uint64_t> rewalks;
  for (auto it = cand.begin(); it != cand.end();) {
    ++stats_.steps;
    const std::uint64_t c = it->first;
    auto e = fpdu_end_at(c, bend);
    if (!e || *e > changed || known_.count(c)) {
      ++it;
      continue;
    }
    if (!(it->second & kFromChain) && (cfg_.crc || (cfg_.markers && (it->second & kFromMarker)))) {
      it = cand.erase(it);
      continue;
    }
    rewalks.push_back(c);
    ++it;
  }
  for (std::size_t i = 0; i + kMaxRewalks < rewalks.size(); ++i) cand.erase(rewalks[i]);
}

bool SegmentReceiver::overlaps_known(std::uint64_t s, std::uint64_t w) const {
  auto it = known_.upper_bound(s);
  if (it != known_.end() && it->first < s + w) return true;
  if (it == known_.begin()) return false;
  --it;
  return it->first != s && it->first + it->second > s;
}

bool SegmentReceiver::follow_chain(std::uint64_t c, std::uint8_t from, std::uint64_t bend,
                                   Bytes& ulpdu, SegmentVisitor& v) {
  // Follow the chain of FPDUs from this start: each one's length gives the next. With the
  // CRC on each FPDU proves itself. With markers (and no CRC) a marker's pointer proves the
  // FPDU it sits in (RFC 5044 §5), and the FPDUs after it follow by their lengths; the FPDUs
  // of a chain from a segment start before its first marker prove nothing (octets inside an
  // FPDU may read as a length that ends exactly where the next FPDU begins), so they wait
  // for the stream. Without either, nothing checks the framing but alignment (RFC 5044 §8):
  // the chain counts once an FPDU ends exactly where a received segment ended.
  bool trusted = cfg_.crc || (cfg_.markers && from != 0);
  const bool needs_marker = cfg_.markers && !cfg_.crc && from == 0;
  std::size_t proven_from = needs_marker ? SIZE_MAX : 0;  // the chain's first proven FPDU
  std::vector<std::pair<OooFpdu, Bytes>> chain;
  std::uint64_t s = c;
  bool crossed_marker = false;
  bool cut = false;
  while (s < bend && !claimed_.count(s)) {
    ++stats_.steps;
    if (budget_used_ >= kDiscoverBudget) {
      cut = true;
      break;
    }
    OooFpdu f;
    if (!parse_at(bend, s, f, ulpdu) || overlaps_known(s, f.wire_length)) {
      if (trusted && !chain.empty()) chained_.insert(s);  // complete it later
      break;
    }
    // A marker inside the FPDU (at its start too, except the one at stream offset 0).
    if (cfg_.markers && markers_in(s == 0 ? 1 : s, s + f.wire_length) > 0) {
      crossed_marker = true;
      if (proven_from == SIZE_MAX) {
        proven_from = chain.size();
        trusted = true;
      }
    }
    chain.emplace_back(f, ulpdu);
    s += f.wire_length;
    // A chain that lands exactly on an FPDU already found is proven by it (and, trusted, it
    // goes on as that one's chain did).
    if (known_.count(s)) {
      trusted = true;
      break;
    }
    if (!trusted && seg_ends_.count(s) && (!cfg_.markers || crossed_marker)) {
      trusted = true;
      break;
    }
  }
  // A chain no marker proved (it reached a known FPDU or a segment end) proves nothing.
  if (proven_from == SIZE_MAX) trusted = false;
  // The FPDU after a trusted chain starts where the chain ended, whenever it arrives.
  if (trusted && !chain.empty() && !known_.count(s) && !claimed_.count(s)) chained_.insert(s);
  if (trusted) offer(chain, proven_from, v);
  return !cut;
}

void SegmentReceiver::offer(std::vector<std::pair<OooFpdu, Bytes>>& chain, std::size_t proven_from,
                            SegmentVisitor& v) {
  for (std::size_t i = proven_from; i < chain.size(); ++i) {
    auto& [f, bytes] = chain[i];
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

}  // namespace iwarp::mpa
