// SegmentReceiver (mpa/segment_receiver): TCP segments in any order, with duplicates and
// overlaps, become the in-order stream plus FPDUs found beyond holes. All streams here are real
// FPDUs (FpduEncoder) carrying real DDP segments (ddp_header), checked byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ddp/ddp_header.hpp"
#include "framing_support.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/segment_receiver.hpp"

namespace iwarp::mpa {
namespace {

using test::encode_stream;
using test::framing_name;
using test::kBoth;
using test::kCrc;
using test::kMarkers;
using test::kNone;
using test::param_name;
using test::Rng;
using test::Stream;
using test::TrueFpdu;
using test::uniform;

Bytes random_bytes(Rng& rng, std::size_t n) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

// A real DDP segment: a tagged RDMA Write or an untagged Send header, then `payload` octets.
Bytes make_ulpdu(Rng& rng, std::size_t payload, std::uint32_t index) {
  Bytes out;
  if (rng() % 2) {
    ddp::tagged_header(rdmap::Opcode::Write, STag{static_cast<std::uint32_t>(rng())},
                       TaggedOffset{rng() % 1000000}, (rng() % 2) != 0)
        .encode(out);
  } else {
    ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{index + 1}, MessageOffset{0})
        .encode(out);
  }
  const Bytes p = random_bytes(rng, payload);
  out.insert(out.end(), p.begin(), p.end());
  return out;
}

Stream make_stream(FramingConfig cfg, const std::vector<std::size_t>& payloads,
                   std::uint64_t seed) {
  Rng rng(seed);
  std::vector<Bytes> ulpdus;
  for (std::size_t i = 0; i < payloads.size(); ++i)
    ulpdus.push_back(make_ulpdu(rng, payloads[i], static_cast<std::uint32_t>(i)));
  return encode_stream(cfg, ulpdus);
}

bool has_marker_in(std::uint64_t begin, std::uint64_t end) {
  for (std::uint64_t p = begin; p < end; ++p)
    if (is_marker_position(p)) return true;
  return false;
}

// Records every callback, checks each against the original stream and the receiver's state,
// and rebuilds the stream from on_stream octets plus the placed FPDUs (re-encoded at the
// position the receiver reports them reached).
class Recorder : public SegmentVisitor {
 public:
  struct Offer {
    std::uint64_t offset;
    std::uint32_t wire;
    Bytes ulpdu;
    CrcStatus crc;
    Hole hole;
    OooVerdict verdict;
  };
  struct Event {
    char kind;  // 'S' stream run, 'C' claimed reached
    std::uint64_t offset, length;
    friend bool operator==(const Event&, const Event&) = default;
  };

  Recorder(const Stream& truth, const SegmentReceiver& rx) : truth_(truth), rx_(rx) {}

  std::function<OooVerdict(const OooFpdu&)> decide = [](const OooFpdu&) {
    return OooVerdict::Placed;
  };

  void on_stream(ByteSpan bytes) override {
    EXPECT_FALSE(bytes.empty());
    add_event('S', bytes.size());
    streamed.insert(streamed.end(), bytes.begin(), bytes.end());
    rebuilt.insert(rebuilt.end(), bytes.begin(), bytes.end());
    pos += bytes.size();
  }

  OooVerdict on_ooo_fpdu(const OooFpdu& f, const Hole& hole) override {
    EXPECT_EQ(f.ulpdu.size(), f.ulpdu_length);
    EXPECT_TRUE(offered_at.insert(f.offset).second) << "FPDU at " << f.offset << " offered twice";
    EXPECT_GT(f.offset, rx_.in_order()) << "offered FPDU is not beyond the in-order point";
    // The hole passed is the nearest one before the FPDU in the receiver's current state.
    std::optional<Hole> nearest;
    for (const auto& h : rx_.holes())
      if (h.end <= f.offset) nearest = h;
    EXPECT_TRUE(nearest.has_value()) << "no hole before the FPDU at " << f.offset;
    if (nearest) {
      EXPECT_EQ(hole, *nearest) << "at " << f.offset;
    }
    EXPECT_EQ(f.crc, truth_.cfg.crc ? CrcStatus::Good : CrcStatus::NotChecked);
    const Bytes ulpdu(f.ulpdu.begin(), f.ulpdu.end());
    const TrueFpdu* t = truth_.at(f.offset);
    if (t && t->wire == f.wire_length && t->ulpdu == ulpdu) {
      ++true_offers;
    } else {
      ++false_offers;
      false_offer_offsets.push_back(f.offset);
    }
    const OooVerdict v = decide(f);
    offers.push_back({f.offset, f.wire_length, ulpdu, f.crc, hole, v});
    if (v == OooVerdict::Placed) placed[f.offset] = Placed{f.wire_length, ulpdu, 0};
    return v;
  }

  void on_claimed_reached(std::uint64_t offset, std::uint32_t wire_length) override {
    EXPECT_EQ(offset, pos) << "claimed FPDU reached out of stream order";
    add_event('C', wire_length);
    auto it = placed.find(offset);
    if (it == placed.end()) {
      ADD_FAILURE() << "on_claimed_reached(" << offset << ") for an FPDU never placed";
      pos += wire_length;
      return;
    }
    EXPECT_EQ(it->second.wire, wire_length);
    ++it->second.reached;
    Bytes enc;
    auto w = FpduEncoder(truth_.cfg, offset).encode(it->second.ulpdu, enc);
    EXPECT_TRUE(w.has_value());
    EXPECT_EQ(enc.size(), wire_length);
    rebuilt.insert(rebuilt.end(), enc.begin(), enc.end());
    pos += wire_length;
  }

  void on_hole_opened(const Hole& h) override { opened.push_back(h); }
  void on_hole_closed(const Hole& h, bool first) override { closed.emplace_back(h, first); }
  void on_duplicate(std::uint64_t offset, std::size_t length) override {
    dups.emplace_back(offset, length);
    dup_total += length;
  }

  // Placed FPDUs whose on_claimed_reached did not come exactly once.
  std::size_t placed_not_reached_once() const {
    std::size_t n = 0;
    for (const auto& [off, p] : placed)
      if (p.reached != 1) ++n;
    return n;
  }
  std::vector<std::uint64_t> offer_offsets() const {
    std::vector<std::uint64_t> v;
    for (const auto& o : offers) v.push_back(o.offset);
    return v;
  }

  struct Placed {
    std::uint32_t wire;
    Bytes ulpdu;
    int reached;
  };
  std::uint64_t pos = 0;
  Bytes streamed, rebuilt;
  std::vector<Event> events;  // adjacent stream runs merged
  std::vector<Offer> offers;
  std::set<std::uint64_t> offered_at;
  std::map<std::uint64_t, Placed> placed;
  std::vector<Hole> opened;
  std::vector<std::pair<Hole, bool>> closed;
  std::vector<std::pair<std::uint64_t, std::size_t>> dups;
  std::uint64_t dup_total = 0;
  std::size_t true_offers = 0, false_offers = 0;
  std::vector<std::uint64_t> false_offer_offsets;

 private:
  void add_event(char kind, std::uint64_t length) {
    if (kind == 'S' && !events.empty() && events.back().kind == 'S' &&
        events.back().offset + events.back().length == pos) {
      events.back().length += length;
      return;
    }
    events.push_back({kind, pos, length});
  }
  const Stream& truth_;
  const SegmentReceiver& rx_;
};

void feed(SegmentReceiver& rx, Recorder& rec, TcpSeq start, ByteSpan stream, std::uint64_t off,
          std::uint64_t end) {
  rx.receive(start + static_cast<std::uint32_t>(off),
             stream.subspan(static_cast<std::size_t>(off), static_cast<std::size_t>(end - off)),
             rec);
}

// ---------------------------------------------------------------------------------------------

class SegmentReceiverFraming : public ::testing::TestWithParam<FramingConfig> {};

INSTANTIATE_TEST_SUITE_P(SegmentReceiver, SegmentReceiverFraming,
                         ::testing::Values(kNone, kCrc, kMarkers, kBoth), param_name);

TEST_P(SegmentReceiverFraming, InOrderFastPathPassesTheStreamThroughUnchanged) {
  const Stream s = make_stream(GetParam(), {0, 10, 600, 1500, 3, 2000, 50, 700}, 11);
  const TcpSeq start{123456};
  SegmentReceiver rx(GetParam(), start);
  Recorder rec(s, rx);
  Rng rng(5);
  std::uint64_t off = 0;
  std::size_t n = 0;
  while (off < s.bytes.size()) {
    // Arbitrary cuts: in order nothing is parsed, so alignment does not matter.
    const std::uint64_t end = std::min<std::uint64_t>(s.bytes.size(), off + uniform(rng, 1, 1500));
    const std::size_t before = rec.streamed.size();
    feed(rx, rec, start, s.bytes, off, end);
    ++n;
    // Each segment comes out at once and whole.
    ASSERT_EQ(rec.streamed.size() - before, end - off);
    EXPECT_EQ(rx.in_order(), end);
    EXPECT_FALSE(rx.has_holes());
    off = end;
  }
  EXPECT_EQ(rec.streamed, s.bytes);
  EXPECT_EQ(rec.events.size(), 1u);  // one contiguous run of stream octets, nothing claimed
  EXPECT_TRUE(rec.offers.empty());
  EXPECT_TRUE(rec.opened.empty());
  EXPECT_TRUE(rec.closed.empty());
  EXPECT_TRUE(rec.dups.empty());
  EXPECT_EQ(rx.next_seq(), start + static_cast<std::uint32_t>(s.bytes.size()));
  EXPECT_EQ(rx.held_bytes(), 0u);
  const auto& st = rx.stats();
  EXPECT_EQ(st.segments, n);
  EXPECT_EQ(st.in_order_segments, n);
  EXPECT_EQ(st.ooo_segments, 0u);
  EXPECT_EQ(st.duplicate_bytes, 0u);
  EXPECT_EQ(st.holes_opened, 0u);
  EXPECT_EQ(st.ooo_fpdus_found, 0u);
}

TEST(SegmentReceiverHoles, OpenAndCloseWithTheirBoundsAndFirstFlag) {
  Rng rng(21);
  const Bytes data = random_bytes(rng, 200);  // not FPDUs: nothing may be offered (CRC on)
  const Stream none{kCrc, data, {}};
  const TcpSeq start{1000};
  SegmentReceiver rx(kCrc, start);
  Recorder rec(none, rx);
  auto recv = [&](std::uint64_t a, std::uint64_t b) { feed(rx, rec, start, data, a, b); };
  using Holes = std::vector<Hole>;

  recv(20, 30);
  EXPECT_EQ(rec.opened, (Holes{{0, 20}}));
  EXPECT_EQ(rx.holes(), (Holes{{0, 20}}));
  EXPECT_EQ(rx.held_bytes(), 10u);
  EXPECT_EQ(rx.in_order(), 0u);
  EXPECT_TRUE(rec.streamed.empty());

  recv(40, 50);
  EXPECT_EQ(rec.opened, (Holes{{0, 20}, {30, 40}}));
  EXPECT_EQ(rx.holes(), (Holes{{0, 20}, {30, 40}}));
  EXPECT_EQ(rx.held_bytes(), 20u);

  recv(30, 40);  // closes the second hole: not the first one, delivery does not move
  ASSERT_EQ(rec.closed.size(), 1u);
  EXPECT_EQ(rec.closed[0], std::make_pair(Hole{30, 40}, false));
  EXPECT_EQ(rx.holes(), (Holes{{0, 20}}));
  EXPECT_EQ(rx.held_bytes(), 30u);
  EXPECT_EQ(rx.in_order(), 0u);

  recv(100, 110);
  EXPECT_EQ(rec.opened.back(), (Hole{50, 100}));
  recv(70, 80);  // splits [50,100): the part split off is a new hole
  EXPECT_EQ(rec.opened.size(), 4u);
  EXPECT_EQ(rec.opened.back(), (Hole{80, 100}));
  EXPECT_EQ(rx.holes(), (Holes{{0, 20}, {50, 70}, {80, 100}}));
  EXPECT_EQ(rx.held_bytes(), 50u);
  EXPECT_EQ(rec.closed.size(), 1u);

  recv(0, 20);  // the first hole: delivery moves to the next hole
  ASSERT_EQ(rec.closed.size(), 2u);
  EXPECT_EQ(rec.closed[1], std::make_pair(Hole{0, 20}, true));
  EXPECT_EQ(rx.in_order(), 50u);
  EXPECT_EQ(rec.streamed, Bytes(data.begin(), data.begin() + 50));
  EXPECT_EQ(rx.holes(), (Holes{{50, 70}, {80, 100}}));
  EXPECT_EQ(rx.held_bytes(), 20u);

  recv(50, 70);
  ASSERT_EQ(rec.closed.size(), 3u);
  EXPECT_EQ(rec.closed[2], std::make_pair(Hole{50, 70}, true));
  EXPECT_EQ(rx.in_order(), 80u);
  recv(80, 100);
  ASSERT_EQ(rec.closed.size(), 4u);
  EXPECT_EQ(rec.closed[3], std::make_pair(Hole{80, 100}, true));
  EXPECT_EQ(rx.in_order(), 110u);
  EXPECT_FALSE(rx.has_holes());
  EXPECT_EQ(rx.held_bytes(), 0u);

  recv(110, 200);  // nothing held any more: the fast path again
  EXPECT_EQ(rec.streamed, data);
  EXPECT_EQ(rx.stats().holes_opened, 4u);
  EXPECT_EQ(rx.stats().holes_closed, 4u);
  EXPECT_EQ(rx.stats().ooo_segments, 5u);
  EXPECT_EQ(rx.stats().in_order_segments, 1u);
  EXPECT_EQ(rec.opened.size(), 4u);
  EXPECT_TRUE(rec.offers.empty());
  EXPECT_TRUE(rec.dups.empty());
}

// Retransmissions here carry different octets than the first arrival, so it shows which won.
TEST(SegmentReceiverDuplicates, ExistingOctetsWinAndDuplicatesAreCounted) {
  Rng rng(31);
  const Bytes truth = random_bytes(rng, 400);
  Bytes garbage = truth;
  for (auto& b : garbage) b = static_cast<std::uint8_t>(~b);
  const Stream none{kCrc, truth, {}};
  const TcpSeq start{0xFFFFFF00u};
  SegmentReceiver rx(kCrc, start);
  Recorder rec(none, rx);
  // Octets [a,b) taken from `src`.
  auto recv_mixed = [&](std::uint64_t a, std::uint64_t b,
                        const std::function<bool(std::uint64_t)>& from_garbage) {
    Bytes seg;
    for (std::uint64_t i = a; i < b; ++i) seg.push_back(from_garbage(i) ? garbage[i] : truth[i]);
    rx.receive(start + static_cast<std::uint32_t>(a), seg, rec);
  };
  auto all_true = [](std::uint64_t) { return false; };
  auto all_garbage = [](std::uint64_t) { return true; };

  recv_mixed(0, 100, all_true);
  EXPECT_EQ(rx.in_order(), 100u);
  // Wholly before the in-order point.
  recv_mixed(10, 50, all_garbage);
  EXPECT_EQ(rx.stats().duplicate_segments, 1u);
  EXPECT_EQ(rx.stats().duplicate_bytes, 40u);
  ASSERT_EQ(rec.dups.size(), 1u);
  EXPECT_EQ(rec.dups[0], std::make_pair(std::uint64_t{10}, std::size_t{40}));
  EXPECT_EQ(rx.in_order(), 100u);

  // Beyond the in-order point: held octets win over later ones.
  recv_mixed(200, 300, all_true);
  recv_mixed(250, 350, [](std::uint64_t i) { return i < 300; });  // [300,350) is new: true
  recv_mixed(150, 260, [](std::uint64_t i) { return i >= 200; });
  recv_mixed(210, 220, all_garbage);  // wholly inside what is held
  recv_mixed(120, 400, [](std::uint64_t i) { return i >= 150 && i < 350; });
  EXPECT_EQ(rx.holes(), (std::vector<Hole>{{100, 120}}));
  EXPECT_EQ(rx.held_bytes(), 280u);
  EXPECT_EQ(rx.in_order(), 100u);
  recv_mixed(100, 120, all_true);
  EXPECT_EQ(rec.streamed, truth);
  EXPECT_EQ(rx.in_order(), 400u);
  EXPECT_FALSE(rx.has_holes());
  EXPECT_EQ(rx.stats().duplicate_bytes, 40u + 50u + 60u + 10u + 200u);
  EXPECT_EQ(rec.dup_total, rx.stats().duplicate_bytes);
  EXPECT_EQ(rec.dups.size(), 5u);
  EXPECT_EQ(rec.closed.size(), 1u);
  EXPECT_EQ(rec.opened.size(), 1u);

  // Fully duplicate again after everything was delivered, once more with other octets.
  recv_mixed(0, 400, all_garbage);
  EXPECT_EQ(rec.streamed, truth);
  EXPECT_EQ(rx.stats().duplicate_segments, 2u);
}

// A segment that starts before the in-order point and ends after it: the delivered prefix is
// dropped and the rest delivered. Its duplicated octets are counted in the stats, and the
// visitor must hear of them too (on_duplicate), as for every other duplicate.
TEST(SegmentReceiverDuplicates, PrefixBeforeTheInOrderPointIsTrimmedAndReported) {
  Rng rng(41);
  const Bytes truth = random_bytes(rng, 300);
  const Stream none{kCrc, truth, {}};
  const TcpSeq start{7};
  SegmentReceiver rx(kCrc, start);
  Recorder rec(none, rx);
  feed(rx, rec, start, truth, 0, 100);
  Bytes seg(truth.begin() + 80, truth.begin() + 150);
  std::fill(seg.begin(), seg.begin() + 20, std::uint8_t{0xEE});  // the delivered part differs
  rx.receive(start + 80u, seg, rec);
  EXPECT_EQ(rec.streamed, Bytes(truth.begin(), truth.begin() + 150));
  EXPECT_EQ(rx.in_order(), 150u);
  EXPECT_EQ(rx.stats().duplicate_bytes, 20u);
  EXPECT_EQ(rec.dup_total, rx.stats().duplicate_bytes)
      << "on_duplicate did not report the 20 trimmed octets [80,100)";

  // The same while a hole is open (the slow path).
  feed(rx, rec, start, truth, 200, 250);
  Bytes seg2(truth.begin() + 140, truth.begin() + 180);
  rx.receive(start + 140u, seg2, rec);
  EXPECT_EQ(rx.in_order(), 180u);
  EXPECT_EQ(rx.stats().duplicate_bytes, 30u);
  EXPECT_EQ(rec.dup_total, rx.stats().duplicate_bytes)
      << "on_duplicate did not report the 10 trimmed octets [140,150)";
  feed(rx, rec, start, truth, 180, 300);
  EXPECT_EQ(rec.streamed, truth);
}

// on_duplicate(offset, length) names stream octets [offset, offset + length): those must be
// exactly the octets of the segment that were already held (one call per contiguous run).
TEST(SegmentReceiverDuplicates, ReportedRangesAreTheDuplicatedOctets) {
  Rng rng(43);
  const Bytes truth = random_bytes(rng, 400);
  const Stream none{kCrc, truth, {}};
  const TcpSeq start{0};
  SegmentReceiver rx(kCrc, start);
  Recorder rec(none, rx);
  feed(rx, rec, start, truth, 200, 300);
  // [150,260): new [150,200), duplicate [200,260).
  rec.dups.clear();
  feed(rx, rec, start, truth, 150, 260);
  std::set<std::uint64_t> reported;
  for (auto [o, n] : rec.dups)
    for (std::uint64_t i = o; i < o + n; ++i) reported.insert(i);
  std::set<std::uint64_t> want;
  for (std::uint64_t i = 200; i < 260; ++i) want.insert(i);
  EXPECT_EQ(reported, want) << "reported " << (rec.dups.empty() ? 0 : rec.dups[0].first) << "+"
                            << (rec.dups.empty() ? 0 : rec.dups[0].second)
                            << ", duplicated octets are [200,260)";
}

// An FPDU beyond a hole, at a segment start, is offered once with its real offset, length and
// ULPDU; the ones after it in the same segment follow as a chain.
TEST_P(SegmentReceiverFraming, FpduAtASegmentStartBeyondAHoleIsOfferedOnce) {
  const FramingConfig cfg = GetParam();
  // B and D each carry a marker, so that with markers (and no CRC) a marker vouches for them;
  // C follows B in the same segment.
  const Stream s = make_stream(cfg, {100, 500, 0, 700}, 51);
  const auto& f = s.fpdus;
  ASSERT_TRUE(has_marker_in(f[1].offset, f[1].end()));
  ASSERT_TRUE(has_marker_in(f[3].offset, f[3].end()));
  const TcpSeq start{5000};
  SegmentReceiver rx(cfg, start);
  Recorder rec(s, rx);
  // s1 = B + C, s2 = D; A (s0) is late.
  feed(rx, rec, start, s.bytes, f[1].offset, f[2].end());
  ASSERT_EQ(rec.offers.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& o = rec.offers[i];
    EXPECT_EQ(o.offset, f[i + 1].offset);
    EXPECT_EQ(o.wire, f[i + 1].wire);
    EXPECT_EQ(o.ulpdu, f[i + 1].ulpdu);
    EXPECT_EQ(o.hole, (Hole{0, f[1].offset}));
  }
  EXPECT_EQ(rec.opened, (std::vector<Hole>{{0, f[1].offset}}));
  feed(rx, rec, start, s.bytes, f[3].offset, f[3].end());
  ASSERT_EQ(rec.offers.size(), 3u);
  EXPECT_EQ(rec.offers[2].offset, f[3].offset);
  EXPECT_EQ(rec.offers[2].wire, f[3].wire);
  EXPECT_EQ(rec.offers[2].ulpdu, f[3].ulpdu);
  EXPECT_EQ(rec.offers[2].hole, (Hole{0, f[1].offset}));
  // Retransmitted: nothing offered again.
  feed(rx, rec, start, s.bytes, f[1].offset, f[3].end());
  EXPECT_EQ(rec.offers.size(), 3u);
  EXPECT_TRUE(rec.streamed.empty());
  feed(rx, rec, start, s.bytes, 0, f[1].offset);
  EXPECT_EQ(rec.offers.size(), 3u);
  const std::vector<Recorder::Event> want = {{'S', 0, f[0].wire},
                                             {'C', f[1].offset, f[1].wire},
                                             {'C', f[2].offset, f[2].wire},
                                             {'C', f[3].offset, f[3].wire}};
  EXPECT_EQ(rec.events, want);
  EXPECT_EQ(rec.rebuilt, s.bytes);
  EXPECT_EQ(rec.closed, (std::vector<std::pair<Hole, bool>>{{{0, f[1].offset}, true}}));
  EXPECT_EQ(rec.false_offers, 0u);
  EXPECT_EQ(rec.placed_not_reached_once(), 0u);
  EXPECT_EQ(rx.stats().ooo_fpdus_found, 3u);
  EXPECT_EQ(rx.stats().ooo_fpdus_placed, 3u);
  EXPECT_EQ(rx.in_order(), s.bytes.size());
}

TEST(SegmentReceiverCrc, CorruptFpduBeyondAHoleIsNotOfferedAndGoesThroughTheStream) {
  for (FramingConfig cfg : {kCrc, kBoth}) {
    for (int where = 0; where < 2; ++where) {  // a ULPDU octet, or the CRC field itself
      SCOPED_TRACE(framing_name(cfg) + (where ? " CRC field" : " ULPDU octet"));
      const Stream s = make_stream(cfg, {100, 200, 50}, 61);
      const auto& f = s.fpdus;
      Bytes wire = s.bytes;
      const std::uint64_t bad = where ? f[1].end() - 1 : f[1].offset + 40;
      ASSERT_FALSE(has_marker_in(bad - 3, bad + 1));
      wire[bad] ^= 0x10;
      const TcpSeq start{77};
      SegmentReceiver rx(cfg, start);
      Recorder rec(s, rx);
      feed(rx, rec, start, wire, f[2].offset, f[2].end());
      feed(rx, rec, start, wire, f[1].offset, f[1].end());
      ASSERT_EQ(rec.offers.size(), 1u);
      EXPECT_EQ(rec.offers[0].offset, f[2].offset);
      feed(rx, rec, start, wire, 0, f[1].offset);
      // A and the corrupt B as received, then C (placed) skipped.
      EXPECT_EQ(rec.streamed, Bytes(wire.begin(), wire.begin() + static_cast<long>(f[2].offset)));
      EXPECT_EQ(rec.events, (std::vector<Recorder::Event>{{'S', 0, f[2].offset},
                                                          {'C', f[2].offset, f[2].wire}}));
      EXPECT_EQ(rx.stats().ooo_fpdus_found, 1u);
      EXPECT_FALSE(rx.has_holes());
    }
  }
}

// Without markers the 512-octet marker grid means nothing (RFC 5044 §4.3 places markers only
// when negotiated): where an FPDU sits against it must not change the receiver's work. The same
// corrupt FPDUs beyond a hole, once on the grid and once shifted by half of it, take the same
// steps. (A receiver that skipped marker octets here saw a corrupt FPDU end 4 octets late,
// kept it as a start and walked it again with the next segment.)
TEST(SegmentReceiverCrc, WithoutMarkersTheMarkerGridDoesNotChangeTheWork) {
  constexpr FramingConfig cfg = kCrc;
  auto send_ulpdu = [](std::size_t ulpdu_len, std::uint32_t msn) {
    Bytes u;
    ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{msn}, MessageOffset{0}).encode(u);
    u.resize(ulpdu_len, static_cast<std::uint8_t>(msn));
    return u;
  };
  // Beyond the first FPDU (the hole), 40 corrupt FPDUs of 512 wire octets each (2 + 506 + 4).
  auto run = [&](std::size_t first_ulpdu) {
    std::vector<Bytes> ulpdus{send_ulpdu(first_ulpdu, 1)};
    for (std::uint32_t k = 0; k < 40; ++k) ulpdus.push_back(send_ulpdu(506, k + 2));
    const Stream s = encode_stream(cfg, ulpdus);
    Bytes wire = s.bytes;
    for (std::size_t k = 1; k < s.fpdus.size(); ++k) wire[s.fpdus[k].offset + 40] ^= 0x10;
    const TcpSeq start{500};
    SegmentReceiver rx(cfg, start);
    Recorder rec(s, rx);
    for (std::size_t k = 1; k < s.fpdus.size(); ++k)
      feed(rx, rec, start, wire, s.fpdus[k].offset, s.fpdus[k].end());
    EXPECT_TRUE(rec.offers.empty());  // every one fails its CRC
    const auto steps = rx.stats().steps;
    feed(rx, rec, start, wire, 0, s.fpdus[1].offset);
    EXPECT_EQ(rec.streamed, wire);
    EXPECT_FALSE(rx.has_holes());
    return std::pair{s.fpdus[1].offset, steps};
  };
  const auto on_grid = run(506);  // FPDUs at 512, 1024, ...: none crosses a multiple of 512
  const auto shifted = run(250);  // FPDUs at 256, 768, ...: each crosses one
  ASSERT_EQ(on_grid.first, 512u);
  ASSERT_EQ(shifted.first, 256u);
  EXPECT_EQ(shifted.second, on_grid.second);
}

// A segment starting in the middle of an FPDU: the marker inside the next FPDU points back to
// its start (RFC 5044 §5), and the FPDUs after it follow by their lengths.
TEST(SegmentReceiverMarkers, SegmentStartingMidFpduYieldsTheNextFpdusViaFpduptr) {
  for (FramingConfig cfg : {kMarkers, kBoth}) {
    SCOPED_TRACE(framing_name(cfg));
    const Stream s = make_stream(cfg, {985, 585, 40, 40}, 71);
    const auto& f = s.fpdus;
    ASSERT_EQ(f.size(), 4u);
    // B carries a marker after its start; C and D carry none; the cut is inside A.
    ASSERT_TRUE(has_marker_in(f[1].offset + 1, f[1].end()));
    ASSERT_FALSE(has_marker_in(f[2].offset, f[3].end()));
    const std::uint64_t cut = f[0].offset + 300;
    const TcpSeq start{0x7FFFFFF0u};
    SegmentReceiver rx(cfg, start);
    Recorder rec(s, rx);
    feed(rx, rec, start, s.bytes, cut, f[3].end());
    EXPECT_EQ(rec.offer_offsets(),
              (std::vector<std::uint64_t>{f[1].offset, f[2].offset, f[3].offset}));
    EXPECT_EQ(rec.true_offers, 3u);
    EXPECT_EQ(rec.false_offers, 0u);
    for (const auto& o : rec.offers) EXPECT_EQ(o.hole, (Hole{0, cut}));
    feed(rx, rec, start, s.bytes, 0, cut);
    EXPECT_EQ(rec.events, (std::vector<Recorder::Event>{{'S', 0, f[0].wire},
                                                        {'C', f[1].offset, f[1].wire},
                                                        {'C', f[2].offset, f[2].wire},
                                                        {'C', f[3].offset, f[3].wire}}));
    EXPECT_EQ(rec.rebuilt, s.bytes);
  }
}

// An FPDU too large for one segment is sent in two (as StreamCutter does at the MSS). The
// second segment starts inside it, where the payload happens to look like a small FPDU with no
// marker in it (zero CRC). Nothing vouches for that start: no marker points at it, no CRC
// covers it, and it lies inside an FPDU a marker did vouch for.
Stream stream_with_fpdu_image(FramingConfig cfg, std::uint64_t& image_at) {
  Rng rng(81);
  std::vector<Bytes> ulpdus;
  ulpdus.push_back(make_ulpdu(rng, 10, 0));
  Bytes b;
  ddp::tagged_header(rdmap::Opcode::Write, STag{0x1234}, TaggedOffset{0}).encode(b);
  Bytes payload = random_bytes(rng, 700);
  // At payload offset 40: ULPDU_Length 16, a 14-octet tagged header + 2 octets, 2 pad, CRC 0.
  Bytes image = {0x00, 0x10};
  ddp::tagged_header(rdmap::Opcode::Write, STag{0x9999}, TaggedOffset{64}).encode(image);
  image.insert(image.end(), {0xAB, 0xCD, 0, 0, 0, 0, 0, 0});
  std::copy(image.begin(), image.end(), payload.begin() + 40);
  b.insert(b.end(), payload.begin(), payload.end());
  ulpdus.push_back(b);
  ulpdus.push_back(make_ulpdu(rng, 30, 2));
  Stream s = encode_stream(cfg, ulpdus);
  image_at = s.fpdus[1].offset + (cfg.markers && is_marker_position(s.fpdus[1].offset) ? 4 : 0) +
             2 + ddp::kTaggedHeaderSize + 40;
  return s;
}

void run_fpdu_image_case(FramingConfig cfg) {
  std::uint64_t image_at = 0;
  const Stream s = stream_with_fpdu_image(cfg, image_at);
  const auto& f = s.fpdus;
  ASSERT_EQ(f.size(), 3u);
  ASSERT_EQ(load_be16(&s.bytes[image_at]), 16u);
  ASSERT_FALSE(has_marker_in(image_at, image_at + 24));     // the image carries no marker
  ASSERT_TRUE(has_marker_in(f[1].offset + 1, f[1].end()));  // B does
  ASSERT_FALSE(has_marker_in(f[2].offset, f[2].end()));     // C does not
  // B (its marker vouches for it), and C after it (its CRC, or B's length, proves it).
  const std::vector<std::uint64_t> want = {f[1].offset, f[2].offset};
  for (bool tail_first : {false, true}) {
    SCOPED_TRACE(tail_first ? "second half of B first" : "first half of B first");
    const TcpSeq start{100};
    SegmentReceiver rx(cfg, start);
    Recorder rec(s, rx);
    // A is lost; B arrives in two segments cut at `image_at`; then C; then A.
    if (tail_first) feed(rx, rec, start, s.bytes, image_at, f[1].end());
    feed(rx, rec, start, s.bytes, f[1].offset, image_at);
    if (!tail_first) feed(rx, rec, start, s.bytes, image_at, f[1].end());
    feed(rx, rec, start, s.bytes, f[2].offset, f[2].end());
    feed(rx, rec, start, s.bytes, 0, f[1].offset);
    EXPECT_EQ(rec.false_offers, 0u) << "offered an FPDU at " << image_at << ", inside the FPDU ["
                                    << f[1].offset << ", " << f[1].end() << ")";
    EXPECT_EQ(rec.offer_offsets(), want);
    EXPECT_EQ(rec.placed_not_reached_once(), 0u) << "a Placed FPDU never reached";
    EXPECT_EQ(rec.rebuilt, s.bytes);
  }
}

TEST(SegmentReceiverMarkers, FpduImageInsideASplitFpduIsNotOfferedWithCrc) {
  run_fpdu_image_case(kBoth);
}

TEST(SegmentReceiverMarkers, FpduImageInsideASplitFpduIsNotOfferedWithoutCrc) {
  run_fpdu_image_case(kMarkers);
}

// With markers and no CRC a segment start alone proves nothing: an FPDU is offered when a
// marker vouches for it or for an FPDU before it in its chain (by lengths). A chain that only
// lands on a marker-proven start does not prove its own FPDUs: octets inside an FPDU may read
// as a length that ends exactly there (found by fuzzing: fuzz/regressions/segment_receiver/
// markers-chain-lands-on-a-proven-fpdu), so they wait for the stream.
TEST(SegmentReceiverMarkers, WithoutCrcOnlyFpdusAMarkerVouchesForAreOffered) {
  for (FramingConfig cfg : {kMarkers, kBoth}) {
    SCOPED_TRACE(framing_name(cfg));
    const Stream s = make_stream(cfg, {100, 40, 0, 700}, 53);
    const auto& f = s.fpdus;
    ASSERT_FALSE(has_marker_in(f[1].offset, f[2].end()));
    ASSERT_TRUE(has_marker_in(f[3].offset, f[3].end()));
    const TcpSeq start{1};
    SegmentReceiver rx(cfg, start);
    Recorder rec(s, rx);
    feed(rx, rec, start, s.bytes, f[1].offset, f[2].end());  // B + C: no marker in either
    const std::vector<std::uint64_t> bc = cfg.crc
                                              ? std::vector<std::uint64_t>{f[1].offset, f[2].offset}
                                              : std::vector<std::uint64_t>{};
    EXPECT_EQ(rec.offer_offsets(), bc);
    // D carries a marker, which proves D; the chain B, C lands exactly on D's start, which
    // proves B and C only with the CRC.
    feed(rx, rec, start, s.bytes, f[3].offset, f[3].end());
    EXPECT_EQ(rec.offer_offsets().size(), cfg.crc ? 3u : 1u);
    EXPECT_EQ(rec.true_offers, cfg.crc ? 3u : 1u);
    feed(rx, rec, start, s.bytes, 0, f[1].offset);
    EXPECT_EQ(rec.rebuilt, s.bytes);
  }
  {
    // Without D the chain B, C reaches no marker: with markers alone nothing vouches for them.
    const Stream s = make_stream(kMarkers, {100, 40, 0, 40, 700}, 55);
    const auto& f = s.fpdus;
    ASSERT_FALSE(has_marker_in(f[1].offset, f[3].end()));
    ASSERT_TRUE(has_marker_in(f[4].offset, f[4].end()));
    const TcpSeq start{1};
    SegmentReceiver rx(kMarkers, start);
    Recorder rec(s, rx);
    rec.decide = [](const OooFpdu&) { return OooVerdict::Wait; };
    feed(rx, rec, start, s.bytes, f[1].offset, f[2].end());  // B + C
    feed(rx, rec, start, s.bytes, f[4].offset, f[4].end());  // E; D missing
    EXPECT_EQ(rec.offer_offsets(), (std::vector<std::uint64_t>{f[4].offset}));
    feed(rx, rec, start, s.bytes, f[3].offset, f[3].end());  // D: now B, C, D reach E
    EXPECT_EQ(rec.offer_offsets(), (std::vector<std::uint64_t>{f[4].offset}))
        << "a chain without a marker of its own proves nothing";
    EXPECT_EQ(rec.false_offers, 0u);
    feed(rx, rec, start, s.bytes, 0, f[1].offset);
    EXPECT_EQ(rec.streamed, s.bytes);
  }
}

// A segment cut right after a marker (4 octets into an FPDU that begins with it) reads a true
// length there, and its chain lands on the next real FPDU, which a marker proves: before the
// fix the FPDU was offered at the wrong offset, 4 octets late (fuzz regression
// segment_receiver/markers-fpdu-start-after-a-marker). Inside or right after a marker no FPDU
// starts (RFC 5044 §5), so only B is offered until the hole closes.
TEST(SegmentReceiverMarkers, SegmentCutRightAfterAMarkerIsNoFpduStart) {
  for (FramingConfig cfg : {kMarkers, kBoth}) {
    SCOPED_TRACE(framing_name(cfg));
    const Stream s = make_stream(cfg, {100, 700}, 61);
    const auto& f = s.fpdus;
    ASSERT_EQ(f[0].offset, 0u);  // A begins with the marker at 0
    ASSERT_TRUE(has_marker_in(f[1].offset + 1, f[1].end()));
    for (std::uint64_t cut = 1; cut <= kMarkerSize; ++cut) {
      SCOPED_TRACE(cut);
      const TcpSeq start{7};
      SegmentReceiver rx(cfg, start);
      Recorder rec(s, rx);
      feed(rx, rec, start, s.bytes, cut, f[1].end());  // all but the first `cut` octets
      EXPECT_EQ(rec.offer_offsets(), (std::vector<std::uint64_t>{f[1].offset}));
      EXPECT_EQ(rec.false_offers, 0u);
      feed(rx, rec, start, s.bytes, 0, cut);
      EXPECT_EQ(rec.rebuilt, s.bytes);
    }
  }
}

// With markers and no CRC, an FPDU already found beyond the hole proves where the next one
// starts (its length) and that a chain reaching its start is aligned, whether the visitor
// placed it or let it wait. These run each case with both verdicts for the found FPDU.

// Forward: C arrives in its own segment right after B, with no marker of its own.
TEST(SegmentReceiverMarkers, FpduAfterAFoundOneIsChainedByItsLengthWhenItArrivesLater) {
  for (OooVerdict first : {OooVerdict::Wait, OooVerdict::Placed}) {
    SCOPED_TRACE(first == OooVerdict::Wait ? "B waits" : "B placed");
    const Stream s = make_stream(kMarkers, {100, 500, 20}, 57);
    const auto& f = s.fpdus;
    ASSERT_TRUE(has_marker_in(f[1].offset + 1, f[1].end()));
    ASSERT_FALSE(has_marker_in(f[2].offset, f[2].end()));
    const TcpSeq start{3};
    SegmentReceiver rx(kMarkers, start);
    Recorder rec(s, rx);
    rec.decide = [&](const OooFpdu& o) {
      return o.offset == f[1].offset ? first : OooVerdict::Placed;
    };
    feed(rx, rec, start, s.bytes, f[1].offset, f[1].end());
    EXPECT_EQ(rec.offer_offsets(), (std::vector<std::uint64_t>{f[1].offset}));
    feed(rx, rec, start, s.bytes, f[2].offset, f[2].end());
    EXPECT_EQ(rec.offer_offsets(), (std::vector<std::uint64_t>{f[1].offset, f[2].offset}))
        << "C at " << f[2].offset << " follows B [" << f[1].offset << ", " << f[1].end()
        << ") by B's length";
    feed(rx, rec, start, s.bytes, 0, f[1].offset);
    EXPECT_EQ(rec.rebuilt, s.bytes);
    EXPECT_EQ(rec.false_offers, 0u);
  }
}

// Backward: B, C, D (no markers) arrive after E (a marker); the chain from B's segment start
// lands exactly on E's start. That proves E's start, not B's: B, C and D wait for the stream
// (before, the chain was trusted whole, and a fuzzed payload showed a false start inside an
// FPDU whose length reached the next FPDU exactly).
TEST(SegmentReceiverMarkers, ChainReachingAFoundFpduIsNotProvenByIt) {
  for (OooVerdict last : {OooVerdict::Wait, OooVerdict::Placed}) {
    SCOPED_TRACE(last == OooVerdict::Wait ? "E waits" : "E placed");
    const Stream s = make_stream(kMarkers, {100, 40, 0, 40, 700}, 55);
    const auto& f = s.fpdus;
    ASSERT_FALSE(has_marker_in(f[1].offset, f[3].end()));
    ASSERT_TRUE(has_marker_in(f[4].offset, f[4].end()));
    const TcpSeq start{3};
    SegmentReceiver rx(kMarkers, start);
    Recorder rec(s, rx);
    rec.decide = [&](const OooFpdu& o) {
      return o.offset == f[4].offset ? last : OooVerdict::Placed;
    };
    feed(rx, rec, start, s.bytes, f[4].offset, f[4].end());  // E
    feed(rx, rec, start, s.bytes, f[1].offset, f[3].end());  // B + C + D
    EXPECT_EQ(rec.offer_offsets(), (std::vector<std::uint64_t>{f[4].offset}))
        << "the chain B, C, D ends exactly at E [" << f[4].offset << ", " << f[4].end()
        << "), which proves nothing about B";
    feed(rx, rec, start, s.bytes, 0, f[1].offset);
    EXPECT_EQ(rec.rebuilt, s.bytes);
    EXPECT_EQ(rec.false_offers, 0u);
  }
}

// Placed FPDUs are skipped by the stream; on_claimed_reached comes exactly when the in-order
// point gets to them, between the stream octets around them.
TEST(SegmentReceiverPlaced, ClaimedReachedComesInStreamOrderWhenTheInOrderPointGetsThere) {
  const Stream s = make_stream(kCrc, {100, 200, 300, 50, 10}, 91);
  const auto& f = s.fpdus;
  const TcpSeq start{0};
  SegmentReceiver rx(kCrc, start);
  Recorder rec(s, rx);
  auto seg = [&](std::size_t i) { feed(rx, rec, start, s.bytes, f[i].offset, f[i].end()); };
  seg(0);
  seg(2);  // beyond hole B
  seg(4);  // beyond hole D
  EXPECT_EQ(rec.offer_offsets(), (std::vector<std::uint64_t>{f[2].offset, f[4].offset}));
  EXPECT_EQ(rec.offers[0].hole, (Hole{f[1].offset, f[2].offset}));
  EXPECT_EQ(rec.offers[1].hole, (Hole{f[3].offset, f[4].offset}));
  EXPECT_EQ(rec.events, (std::vector<Recorder::Event>{{'S', 0, f[0].wire}}));
  seg(1);
  EXPECT_EQ(rec.events,
            (std::vector<Recorder::Event>{{'S', 0, f[1].end()}, {'C', f[2].offset, f[2].wire}}));
  EXPECT_EQ(rx.in_order(), f[3].offset);
  seg(3);
  EXPECT_EQ(rec.events, (std::vector<Recorder::Event>{{'S', 0, f[1].end()},
                                                      {'C', f[2].offset, f[2].wire},
                                                      {'S', f[3].offset, f[3].wire},
                                                      {'C', f[4].offset, f[4].wire}}));
  EXPECT_EQ(rec.rebuilt, s.bytes);
  EXPECT_EQ(rec.placed_not_reached_once(), 0u);
  EXPECT_EQ(rx.stats().ooo_fpdus_placed, 2u);
}

TEST(SegmentReceiverPlaced, MixedVerdictsInterleaveClaimedAndStreamOctets) {
  const Stream s = make_stream(kCrc, {100, 200, 300, 50, 10}, 93);
  const auto& f = s.fpdus;
  const TcpSeq start{0xFFFFFFFFu};
  SegmentReceiver rx(kCrc, start);
  Recorder rec(s, rx);
  rec.decide = [&](const OooFpdu& o) {
    if (o.offset == f[2].offset) return OooVerdict::Wait;
    if (o.offset == f[4].offset) return OooVerdict::Invalid;
    return OooVerdict::Placed;
  };
  for (std::size_t i = 1; i < 5; ++i) feed(rx, rec, start, s.bytes, f[i].offset, f[i].end());
  EXPECT_EQ(rec.offer_offsets(),
            (std::vector<std::uint64_t>{f[1].offset, f[2].offset, f[3].offset, f[4].offset}));
  EXPECT_TRUE(rec.events.empty());
  feed(rx, rec, start, s.bytes, 0, f[0].end());
  EXPECT_EQ(rec.events, (std::vector<Recorder::Event>{{'S', 0, f[0].wire},
                                                      {'C', f[1].offset, f[1].wire},
                                                      {'S', f[2].offset, f[2].wire},
                                                      {'C', f[3].offset, f[3].wire},
                                                      {'S', f[4].offset, f[4].wire}}));
  EXPECT_EQ(rec.rebuilt, s.bytes);
  EXPECT_EQ(rx.stats().ooo_fpdus_found, 4u);
  EXPECT_EQ(rx.stats().ooo_fpdus_placed, 2u);
}

TEST(SegmentReceiverVerdicts, WaitAndInvalidDeliverTheFpdusThroughTheStream) {
  for (OooVerdict v : {OooVerdict::Wait, OooVerdict::Invalid}) {
    SCOPED_TRACE(v == OooVerdict::Wait ? "Wait" : "Invalid");
    const Stream s = make_stream(kBoth, {100, 700, 30, 1200, 0}, 95);
    const auto& f = s.fpdus;
    const TcpSeq start{42};
    SegmentReceiver rx(kBoth, start);
    Recorder rec(s, rx);
    rec.decide = [v](const OooFpdu&) { return v; };
    for (std::size_t i = f.size(); i-- > 0;) feed(rx, rec, start, s.bytes, f[i].offset, f[i].end());
    EXPECT_EQ(rec.offers.size(), f.size() - 1);
    EXPECT_EQ(rec.true_offers, f.size() - 1);
    EXPECT_EQ(rec.streamed, s.bytes);
    EXPECT_EQ(rec.events.size(), 1u);
    EXPECT_EQ(rx.stats().ooo_fpdus_placed, 0u);
    EXPECT_FALSE(rx.has_holes());
  }
}

// Without CRC or markers a chain of FPDUs counts only once it ends where a segment ended.
TEST(SegmentReceiverNoCrcNoMarkers, ChainNotEndingAtASegmentEndIsNotOffered) {
  const Stream s = make_stream(kNone, {100, 60, 80, 500}, 97);
  const auto& f = s.fpdus;
  const TcpSeq start{9};
  {
    SegmentReceiver rx(kNone, start);
    Recorder rec(s, rx);
    const std::uint64_t mid = f[3].offset + f[3].wire / 2;
    feed(rx, rec, start, s.bytes, f[1].offset, mid);  // B, C, half of D
    EXPECT_TRUE(rec.offers.empty());
    EXPECT_EQ(rx.stats().ooo_fpdus_found, 0u);
    // The rest of D: now B, C, D end where this segment ends.
    feed(rx, rec, start, s.bytes, mid, f[3].end());
    EXPECT_EQ(rec.offer_offsets(),
              (std::vector<std::uint64_t>{f[1].offset, f[2].offset, f[3].offset}));
    EXPECT_EQ(rec.false_offers, 0u);
    feed(rx, rec, start, s.bytes, 0, f[1].offset);
    EXPECT_EQ(rec.rebuilt, s.bytes);
  }
  {
    // The segment ends in the middle of C: B is whole but its chain does not end at a
    // segment end, so nothing is offered, and it all comes through the stream.
    SegmentReceiver rx(kNone, start);
    Recorder rec(s, rx);
    feed(rx, rec, start, s.bytes, f[1].offset, f[2].offset + 10);
    EXPECT_TRUE(rec.offers.empty());
    feed(rx, rec, start, s.bytes, 0, f[1].offset);
    feed(rx, rec, start, s.bytes, f[2].offset + 10, s.bytes.size());
    EXPECT_EQ(rec.streamed, s.bytes);
  }
  {
    SegmentReceiver rx(kNone, start);
    Recorder rec(s, rx);
    feed(rx, rec, start, s.bytes, f[1].offset, f[2].end());  // B, C: ends at a segment end
    EXPECT_EQ(rec.offer_offsets(), (std::vector<std::uint64_t>{f[1].offset, f[2].offset}));
  }
}

TEST(SegmentReceiverWrap, SequenceNumbersWrapAroundTwoToThe32) {
  for (FramingConfig cfg : {kNone, kCrc, kMarkers, kBoth}) {
    SCOPED_TRACE(framing_name(cfg));
    const Stream s = make_stream(cfg, {50, 600, 30, 100, 700, 20, 200, 10}, 99);
    const auto& f = s.fpdus;
    const TcpSeq start{static_cast<std::uint32_t>((std::uint64_t{1} << 32) - 100)};
    ASSERT_GT(s.bytes.size(), 100u);
    SegmentReceiver rx(cfg, start);
    Recorder rec(s, rx);
    for (std::size_t i = f.size(); i-- > 1;) feed(rx, rec, start, s.bytes, f[i].offset, f[i].end());
    // One hole, opened by the last FPDU and shrinking as the earlier ones arrive.
    EXPECT_EQ(rec.opened, (std::vector<Hole>{{0, f.back().offset}}));
    EXPECT_EQ(rx.holes(), (std::vector<Hole>{{0, f[1].offset}}));
    // With markers alone only what a marker vouches for is offered (some of them here).
    if (cfg.crc || !cfg.markers) {
      EXPECT_EQ(rec.offers.size(), f.size() - 1);
    } else {
      EXPECT_GE(rec.offers.size(), 2u);
    }
    EXPECT_EQ(rec.true_offers, rec.offers.size());
    feed(rx, rec, start, s.bytes, 0, f[0].end());
    EXPECT_EQ(rec.rebuilt, s.bytes);
    EXPECT_EQ(rx.next_seq(), TcpSeq{static_cast<std::uint32_t>(start.value() + s.bytes.size())});
    EXPECT_LT(rx.next_seq().value(), start.value());  // wrapped
    // A retransmission from before the wrap is a duplicate.
    feed(rx, rec, start, s.bytes, 0, 60);
    EXPECT_EQ(rx.stats().duplicate_segments, 1u);
    EXPECT_EQ(rec.rebuilt, s.bytes);
  }
}

// ---------------------------------------------------------------------------------------------
// Property: random FPDU streams cut into FPDU-aligned segments (each starts with an FPDU and
// holds whole FPDUs, sometimes several), presented in a random permutation with exact
// duplicates and overlapping retransmissions.
//   Aligned:  every segment starts at an FPDU boundary (an FPDU larger than the segment size
//             goes whole; retransmissions start at an FPDU too).
//   Anywhere: an FPDU larger than the segment size is cut at it, as StreamCutter does, and
//             retransmissions cover arbitrary ranges: segments also start inside FPDUs.

struct Seg {
  std::uint64_t off, end;
};

enum class Starts { Aligned, Anywhere };

std::vector<Seg> cut_segments(const Stream& s, Rng& rng, std::size_t mss, Starts starts) {
  std::vector<std::uint64_t> ends;
  for (const auto& f : s.fpdus) ends.push_back(f.end());
  std::vector<Seg> out;
  std::uint64_t pos = 0;
  while (pos < s.bytes.size()) {
    std::vector<std::uint64_t> fit;
    for (auto e : ends)
      if (e > pos && e - pos <= mss) fit.push_back(e);
    std::uint64_t end;
    if (!fit.empty())
      end = rng() % 2 ? fit.back() : fit[uniform(rng, 0, fit.size() - 1)];
    else if (starts == Starts::Anywhere)
      end = std::min<std::uint64_t>(pos + mss, s.bytes.size());
    else
      end = *std::upper_bound(ends.begin(), ends.end(), pos);  // the whole FPDU
    out.push_back({pos, end});
    pos = end;
  }
  return out;
}

struct PropertyTotals {
  std::size_t true_offers = 0, false_offers = 0, placed = 0, runs = 0, failed_runs = 0;
  std::string first_failure;
};

void run_property(FramingConfig cfg, std::uint64_t seed, Starts starts, bool random_verdicts,
                  PropertyTotals& totals) {
  Rng rng(seed * 7919 + (cfg.crc ? 1 : 0) + (cfg.markers ? 2 : 0));
  std::vector<std::size_t> payloads(uniform(rng, 5, 30));
  for (auto& p : payloads) p = rng() % 4 == 0 ? uniform(rng, 0, 40) : uniform(rng, 0, 3000);
  const Stream s = make_stream(cfg, payloads, rng());
  const std::size_t mss = uniform(rng, 200, 4000);
  const auto segs = cut_segments(s, rng, mss, starts);
  std::vector<Seg> arrivals;
  for (const auto& g : segs) {
    arrivals.push_back(g);
    if (rng() % 8 == 0) arrivals.push_back(g);  // an exact duplicate
    if (rng() % 6 == 0) {
      // An overlapping retransmission, repacketized: from near this segment, of any length.
      std::uint64_t a = uniform(rng, g.off > 500 ? g.off - 500 : 0, g.end - 1);
      if (starts == Starts::Aligned) {
        auto it = std::upper_bound(s.fpdus.begin(), s.fpdus.end(), a,
                                   [](std::uint64_t o, const TrueFpdu& f) { return o < f.offset; });
        a = std::prev(it)->offset;
      }
      const std::uint64_t b = std::min<std::uint64_t>(s.bytes.size(), a + uniform(rng, 1, 3000));
      arrivals.push_back({a, b});
    }
  }
  std::shuffle(arrivals.begin(), arrivals.end(), rng);
  const TcpSeq start{seed % 3 == 0 ? static_cast<std::uint32_t>(0u - uniform(rng, 0, 20000))
                                   : static_cast<std::uint32_t>(rng())};
  SegmentReceiver rx(cfg, start);
  Recorder rec(s, rx);
  Rng vrng(seed + 17);
  if (random_verdicts)
    rec.decide = [&vrng](const OooFpdu&) {
      const auto r = vrng() % 10;
      return r < 5 ? OooVerdict::Placed : r < 8 ? OooVerdict::Wait : OooVerdict::Invalid;
    };
  const int failures_before =
      ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
  for (const auto& g : arrivals) {
    feed(rx, rec, start, s.bytes, g.off, g.end);
    ASSERT_EQ(rx.in_order(), rec.pos);
  }
  EXPECT_EQ(rec.rebuilt, s.bytes) << "stream not rebuilt";
  EXPECT_EQ(rx.in_order(), s.bytes.size());
  EXPECT_FALSE(rx.has_holes());
  EXPECT_TRUE(rx.holes().empty());
  EXPECT_EQ(rx.held_bytes(), 0u);
  EXPECT_EQ(rx.stats().holes_opened, rx.stats().holes_closed);
  EXPECT_EQ(rec.opened.size(), rec.closed.size());
  EXPECT_EQ(rec.opened.size(), rx.stats().holes_opened);
  EXPECT_EQ(rec.false_offers, 0u) << "false FPDU boundaries offered at offsets "
                                  << ::testing::PrintToString(rec.false_offer_offsets);
  EXPECT_EQ(rec.placed_not_reached_once(), 0u);
  EXPECT_EQ(rx.stats().ooo_fpdus_found, rec.offers.size());
  EXPECT_EQ(rx.stats().ooo_fpdus_placed, rec.placed.size());
  totals.true_offers += rec.true_offers;
  totals.false_offers += rec.false_offers;
  totals.placed += rec.placed.size();
  ++totals.runs;
  if (::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count() !=
      failures_before) {
    ++totals.failed_runs;
    if (totals.first_failure.empty()) totals.first_failure = "seed " + std::to_string(seed);
  }
}

struct PropertyCase {
  FramingConfig cfg;
  Starts starts;
};

void PrintTo(const PropertyCase& c, std::ostream* os) {
  *os << framing_name(c.cfg) << (c.starts == Starts::Aligned ? " aligned" : " mid-FPDU");
}

std::string property_name(const ::testing::TestParamInfo<PropertyCase>& p) {
  return framing_name(p.param.cfg) +
         (p.param.starts == Starts::Aligned ? "_AlignedStarts" : "_MidFpduStarts");
}

class SegmentReceiverProperty : public ::testing::TestWithParam<PropertyCase> {};

INSTANTIATE_TEST_SUITE_P(
    SegmentReceiver, SegmentReceiverProperty,
    ::testing::Values(PropertyCase{kNone, Starts::Aligned}, PropertyCase{kCrc, Starts::Aligned},
                      PropertyCase{kMarkers, Starts::Aligned}, PropertyCase{kBoth, Starts::Aligned},
                      PropertyCase{kNone, Starts::Anywhere}, PropertyCase{kCrc, Starts::Anywhere},
                      PropertyCase{kMarkers, Starts::Anywhere},
                      PropertyCase{kBoth, Starts::Anywhere}),
    property_name);

TEST_P(SegmentReceiverProperty, RandomDisorderRebuildsTheStreamAndOffersOnlyTrueFpdus) {
  PropertyTotals t;
  for (std::uint64_t seed = 1; seed <= 100; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_property(GetParam().cfg, seed, GetParam().starts, false, t);
    if (::testing::Test::HasFatalFailure()) return;
  }
  RecordProperty("true_offers", static_cast<int>(t.true_offers));
  RecordProperty("false_offers", static_cast<int>(t.false_offers));
  EXPECT_GT(t.true_offers, 200u);  // the FPDU discovery was really exercised
  EXPECT_EQ(t.false_offers, 0u) << "false FPDUs offered (and placed) in " << t.failed_runs << " of "
                                << t.runs << " runs, first " << t.first_failure
                                << "; true FPDUs offered: " << t.true_offers;
  EXPECT_EQ(t.placed, t.true_offers + t.false_offers);
}

TEST_P(SegmentReceiverProperty, RandomVerdictsRebuildTheStream) {
  PropertyTotals t;
  for (std::uint64_t seed = 101; seed <= 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_property(GetParam().cfg, seed, GetParam().starts, true, t);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(t.placed, 50u);
  EXPECT_LT(t.placed, t.true_offers + t.false_offers);  // some did Wait or were Invalid
  EXPECT_EQ(t.failed_runs, 0u) << "failed " << t.failed_runs << " of " << t.runs << " runs, first "
                               << t.first_failure << "; false FPDUs offered: " << t.false_offers;
}

}  // namespace
}  // namespace iwarp::mpa
