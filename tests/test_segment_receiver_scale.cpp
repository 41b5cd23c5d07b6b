// SegmentReceiver at scale and at its limits (mpa/segment_receiver.hpp): many holes at once
// (per segment the work must stay logarithmic in their number), the bound on open holes, and
// the memory a flood of tiny segments may hold (octets plus kHeldEntryOverhead per entry).
// Every test ends by retransmitting what was dropped and checking the stream comes out whole:
// a limit may delay octets, never lose them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "mpa/segment_receiver.hpp"

namespace iwarp::mpa {
namespace {

constexpr FramingConfig kCrcOn{.crc = true, .markers = false};

// Collects what the receiver hands over; checks the hole events add up.
class Sink : public SegmentVisitor {
 public:
  void on_stream(ByteSpan b) override { stream.insert(stream.end(), b.begin(), b.end()); }
  OooVerdict on_ooo_fpdu(const OooFpdu&, const Hole&) override {
    ++offers;
    return OooVerdict::Wait;
  }
  void on_claimed_reached(std::uint64_t, std::uint32_t) override { ADD_FAILURE(); }
  void on_hole_opened(const Hole& h) override {
    EXPECT_LT(h.begin, h.end);
    ++opened;
  }
  void on_hole_closed(const Hole& h, bool first) override {
    EXPECT_LT(h.begin, h.end);
    ++closed;
    if (first) ++closed_first;
  }
  void on_duplicate(std::uint64_t, std::size_t n) override { dup += n; }

  Bytes stream;
  std::uint64_t offers = 0, opened = 0, closed = 0, closed_first = 0, dup = 0;
};

// Octets that differ from place to place (so a misplaced one shows) and that seldom read as
// the length of an FPDU: every even octet is 0 and every odd one below 14. The point here is
// the bookkeeping, not FPDU discovery.
Bytes pattern(std::size_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = i % 2 == 0 ? 0 : static_cast<std::uint8_t>(1 + (i / 2) % 13);
  return b;
}

void send(SegmentReceiver& rx, Sink& sink, TcpSeq start, const Bytes& data, std::uint64_t off,
          std::size_t len) {
  rx.receive(start + static_cast<std::uint32_t>(off),
             ByteSpan(data.data() + off, std::min<std::size_t>(len, data.size() - off)), sink);
}

// The capture: one missing octet, then 1-octet segments at every other offset, 40,000
// of them (a hole before each). The old receiver recounted the held octets and rebuilt and
// matched the hole lists on every segment (cubic: 5,000 segments took 20 s, 40,000 take hours);
// this one must finish at once (ctest's timeout bounds it; nothing here measures time). The
// receiver's step count (every loop of its receive path) shows the cost per segment does not
// grow with the number of holes: 1,000 segments with 39,000 holes open take no more steps than
// 1,000 with 10,000 open.
TEST(SegmentReceiverScale, FortyThousandSegmentsEachBeyondAHole) {
  constexpr std::size_t kSegs = 40000;
  const Bytes data = pattern(2 * kSegs + 1);
  const TcpSeq start{0xFFFF0000u};  // wraps on the way
  // The hole bound lifted, so all 40,000 holes are really open at once.
  SegmentReceiver rx(kCrcOn, start, {.max_held = kMaxHeldMemory, .max_holes = 1u << 20});
  Sink sink;
  std::uint64_t mid = 0, late = 0;  // steps of segments [10,000, 11,000) and the last 1,000
  for (std::size_t k = 0; k < kSegs; ++k) {
    if (k == 10000) mid = rx.stats().steps;
    if (k == 11000) mid = rx.stats().steps - mid;
    if (k == kSegs - 1000) late = rx.stats().steps;
    send(rx, sink, start, data, 2 * k + 1, 1);
  }
  late = rx.stats().steps - late;
  EXPECT_GT(mid, 0u);
  EXPECT_LE(late, mid + mid / 10) << "the cost per segment grows with the holes open";
  EXPECT_EQ(rx.hole_count(), kSegs);
  EXPECT_EQ(rx.stats().dropped_segments, 0u);
  EXPECT_EQ(rx.in_order(), 0u);
  EXPECT_TRUE(sink.stream.empty());
  EXPECT_EQ(rx.stats().ooo_segments, kSegs);
  // Everything, retransmitted in order, one octet at a time.
  for (std::size_t off = 0; off < data.size(); ++off) send(rx, sink, start, data, off, 1);
  EXPECT_EQ(sink.stream, data);
  EXPECT_FALSE(rx.has_holes());
  EXPECT_EQ(rx.held_bytes(), 0u);
  EXPECT_EQ(sink.opened, sink.closed);
  EXPECT_EQ(rx.stats().holes_opened, rx.stats().holes_closed);
}

// With the hole bound lifted, 20,000 holes open at once and close in random order: each close
// is found next to the segment that fills it, and the bookkeeping stays exact.
TEST(SegmentReceiverScale, TwentyThousandHolesCloseInAnyOrder) {
  constexpr std::size_t kHoles = 20000;
  const Bytes data = pattern(2 * kHoles + 1);
  const TcpSeq start{12345};
  SegmentReceiver rx(kCrcOn, start, {.max_held = kMaxHeldMemory, .max_holes = 1u << 20});
  Sink sink;
  for (std::size_t k = 0; k < kHoles; ++k) send(rx, sink, start, data, 2 * k + 1, 1);
  EXPECT_EQ(rx.hole_count(), kHoles);
  EXPECT_EQ(rx.holes().size(), kHoles);
  EXPECT_EQ(rx.held_bytes(), kHoles);
  EXPECT_EQ(sink.opened, kHoles);
  std::vector<std::size_t> order(kHoles);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  for (std::size_t k : order) send(rx, sink, start, data, 2 * k, 1);
  EXPECT_EQ(sink.stream, Bytes(data.begin(), data.end() - 1));
  EXPECT_FALSE(rx.has_holes());
  EXPECT_EQ(rx.held_bytes(), 0u);
  EXPECT_EQ(rx.held_memory(), 0u);
  EXPECT_EQ(sink.opened, kHoles);
  EXPECT_EQ(sink.closed, kHoles);
  EXPECT_GE(sink.closed_first, 1u);
  EXPECT_EQ(rx.stats().dropped_segments, 0u);
}

// At most kMaxHoles holes are open at once. A segment that would open one more is dropped and
// counted (no hole event); segments that fill or shrink a hole, or extend what is held without
// a gap, are still taken; the retransmission of the dropped ones completes the stream.
TEST(SegmentReceiverLimits, HolesAreBoundedAndDroppedSegmentsComeBackWithTheirRetransmission) {
  constexpr std::size_t kExtra = 100;
  const Bytes data = pattern(2 * (kMaxHoles + kExtra) + 10);
  const TcpSeq start{77};
  SegmentReceiver rx(kCrcOn, start);
  Sink sink;
  for (std::size_t k = 0; k < kMaxHoles + kExtra; ++k) send(rx, sink, start, data, 2 * k + 1, 1);
  EXPECT_EQ(rx.hole_count(), kMaxHoles);
  EXPECT_EQ(sink.opened, kMaxHoles);
  EXPECT_EQ(rx.stats().dropped_hole_limit, kExtra);
  EXPECT_EQ(rx.stats().dropped_segments, kExtra);
  EXPECT_EQ(rx.stats().dropped_memory_limit, 0u);
  EXPECT_EQ(rx.held_bytes(), kMaxHoles);
  const std::uint64_t last = 2 * (kMaxHoles - 1) + 1;  // the last octet held
  // Extending the last block (no gap): taken.
  send(rx, sink, start, data, last + 1, 1);
  EXPECT_EQ(rx.held_bytes(), kMaxHoles + 1);
  // A gap after it: dropped.
  send(rx, sink, start, data, last + 3, 1);
  EXPECT_EQ(rx.stats().dropped_hole_limit, kExtra + 1);
  // Closing a hole in the middle: taken, and then one more may open.
  send(rx, sink, start, data, 2 * 100, 1);
  EXPECT_EQ(rx.hole_count(), kMaxHoles - 1);
  EXPECT_EQ(sink.closed, 1u);
  send(rx, sink, start, data, last + 3, 1);
  EXPECT_EQ(rx.hole_count(), kMaxHoles);
  EXPECT_EQ(rx.stats().dropped_hole_limit, kExtra + 1);
  // Everything again, in MSS-sized retransmissions from the in-order point.
  for (std::size_t off = 0; off < data.size(); off += 1000) send(rx, sink, start, data, off, 1000);
  EXPECT_EQ(sink.stream, data);
  EXPECT_FALSE(rx.has_holes());
  EXPECT_EQ(sink.opened, sink.closed);
}

// held_memory() counts every held octet plus kHeldEntryOverhead per held block, chunk, segment
// start and end: a 1-octet segment beyond its own hole costs 1 + 4 x 64 octets, not 1.
TEST(SegmentReceiverLimits, BookkeepingCountsTowardTheMemoryLimit) {
  const Bytes data = pattern(1000);
  const TcpSeq start{5};
  SegmentReceiver rx(kCrcOn, start);
  Sink sink;
  constexpr std::size_t kSegs = 100;
  for (std::size_t k = 0; k < kSegs; ++k) send(rx, sink, start, data, 2 * k + 1, 1);
  EXPECT_EQ(rx.held_bytes(), kSegs);
  EXPECT_EQ(rx.held_memory(), kSegs * (1 + 4 * kHeldEntryOverhead));
  EXPECT_EQ(rx.limits().max_held, kMaxHeldMemory);
}

// A flood of 1-octet segments that open no hole (each extends the block before it) stops at
// the memory limit long before the octets alone would reach it; the in-order point still moves
// (a segment there is never dropped) and the dropped octets come with their retransmission.
TEST(SegmentReceiverLimits, TinySegmentFloodStopsAtTheMemoryLimit) {
  constexpr std::size_t kLimit = 512 * 1024;
  constexpr std::size_t kSegs = 6000;
  const Bytes data = pattern(kSegs + 1);
  const TcpSeq start{0};
  SegmentReceiver rx(kCrcOn, start, {.max_held = kLimit, .max_holes = kMaxHoles});
  Sink sink;
  for (std::size_t off = 1; off <= kSegs; ++off) send(rx, sink, start, data, off, 1);
  const auto& st = rx.stats();
  EXPECT_GT(st.dropped_memory_limit, 0u);
  EXPECT_EQ(st.dropped_segments, st.dropped_memory_limit);
  EXPECT_LE(rx.held_memory(), kLimit);
  // Each octet took a chunk, a segment start and a segment end: about 1/193 of the limit.
  EXPECT_LT(rx.held_bytes(), kLimit / 100);
  EXPECT_EQ(rx.hole_count(), 1u);
  // The in-order point moves even now.
  const std::uint64_t taken = kSegs - st.dropped_segments;  // octets 1 .. taken, in one block
  send(rx, sink, start, data, 0, 1);
  EXPECT_EQ(rx.in_order(), 1 + taken);
  EXPECT_EQ(rx.held_bytes(), 0u);
  // The retransmission of everything completes the stream.
  for (std::size_t off = 0; off < data.size(); off += 1448) send(rx, sink, start, data, off, 1448);
  EXPECT_EQ(sink.stream, data);
  EXPECT_FALSE(rx.has_holes());
  EXPECT_EQ(rx.held_memory(), 0u);
}

// A segment at the in-order point is taken even when the memory is all used: it only ever
// shrinks what is held.
TEST(SegmentReceiverLimits, SegmentAtTheInOrderPointIsNeverDropped) {
  const Bytes data = pattern(4000);
  const TcpSeq start{900};
  SegmentReceiver rx(kCrcOn, start, {.max_held = 2500, .max_holes = kMaxHoles});
  Sink sink;
  send(rx, sink, start, data, 1000, 2500);  // 2500 octets and their bookkeeping: dropped
  EXPECT_EQ(rx.stats().dropped_memory_limit, 1u);
  send(rx, sink, start, data, 1000, 2000);  // fits
  EXPECT_EQ(rx.held_bytes(), 2000u);
  EXPECT_EQ(rx.held_memory(), 2000u + 4 * kHeldEntryOverhead);
  send(rx, sink, start, data, 3500, 100);  // would pass the limit
  EXPECT_EQ(rx.stats().dropped_memory_limit, 2u);
  send(rx, sink, start, data, 0, 1000);  // the in-order point: taken, and the held block follows
  EXPECT_EQ(rx.in_order(), 3000u);
  send(rx, sink, start, data, 3000, 1000);
  EXPECT_EQ(sink.stream, data);
  EXPECT_EQ(rx.held_memory(), 0u);
}

}  // namespace
}  // namespace iwarp::mpa
