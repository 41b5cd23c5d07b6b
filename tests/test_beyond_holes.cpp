// The three things a receive side can do with data beyond a TCP hole (rnic::BeyondHoles,
// --beyond-holes): place it at once (completions deferred), hold it until the hole closes, or
// discard it; and what the placement benchmark measures of each (HoleClock: hole closed ->
// octets beyond it delivered; the segment receiver's peak held octets and copies). Over real
// bytes: the peer's FPDU stream is built with the real encoders and fed to a queue pair's
// segment path (tests/rx_harness.hpp).
#include <gtest/gtest.h>

#include <thread>

#include "rnic/hole_clock.hpp"
#include "rx_harness.hpp"

using namespace iwarp;
using namespace iwarp::rnic;
using namespace iwarp::rnic::rx_harness;
using namespace std::chrono_literals;

namespace {

TEST(HoleClock, TimesEachRunFromItsHoleClosingToItsLastOctetDelivered) {
  HoleClock c;
  const auto t0 = HoleClock::Clock::time_point{} + 1s;
  c.seen(0, 100, 200);   // a hole [0, 100), a run [100, 200)
  c.seen(0, 150, 300);   // the run grows to [100, 300)
  c.seen(0, 500, 600);   // a second hole [300, 500)
  c.seen(0, 0, 50);      // at the in-order point: not beyond
  c.seen(100, 50, 100);  // below it: a duplicate
  EXPECT_EQ(c.open_runs(), 2u);
  c.advanced(50, t0, t0 + 1us);  // the first hole still open
  EXPECT_TRUE(c.samples().empty());
  c.advanced(120, t0 + 10us, t0 + 11us);  // it closed in the step that began at +10 us
  EXPECT_TRUE(c.samples().empty()) << "the run is not delivered yet";
  c.advanced(300, t0 + 20us, t0 + 25us);  // delivered at +25 us
  ASSERT_EQ(c.samples().size(), 1u);
  EXPECT_EQ(c.samples()[0].octets, 200u);
  EXPECT_EQ(c.samples()[0].ns, 15000u);
  c.advanced(600, t0 + 40us, t0 + 42us);  // the second closes and is delivered in one step
  ASSERT_EQ(c.samples().size(), 2u);
  EXPECT_EQ(c.samples()[1].octets, 100u);
  EXPECT_EQ(c.samples()[1].ns, 2000u);
  EXPECT_EQ(c.open_runs(), 0u);
  const auto s = summarize(c.samples());
  EXPECT_EQ(s.count, 2u);
  EXPECT_EQ(s.p50_ns, 2000u);
  EXPECT_EQ(s.p99_ns, 15000u);
  EXPECT_EQ(summarize(c.samples(), 150).count, 1u) << "by octets beyond the hole";
}

TEST(HoleClock, RunsAndSamplesAreBounded) {
  HoleClock c;
  for (std::uint64_t i = 0; i < HoleClock::kMaxRuns + 10; ++i) c.seen(0, 10 + 3 * i, 11 + 3 * i);
  EXPECT_EQ(c.open_runs(), HoleClock::kMaxRuns);
  EXPECT_EQ(c.untracked(), 10u);
  c.seen(0, 11, 12);  // touching a tracked run: still timed
  EXPECT_EQ(c.untracked(), 10u);
  const auto t = HoleClock::Clock::now();
  c.advanced(~std::uint64_t{0} >> 1, t, t);
  EXPECT_EQ(c.samples().size(), HoleClock::kMaxRuns);
  HoleClock d;
  for (std::uint64_t i = 0; i < HoleClock::kMaxSamples + 5; ++i) {
    d.seen(2 * i, 2 * i + 1, 2 * i + 2);
    d.advanced(2 * i + 2, t, t);
  }
  EXPECT_EQ(d.samples().size(), HoleClock::kMaxSamples);
  EXPECT_EQ(d.not_kept(), 5u);
}

struct Stream {
  Bytes a, w, b, c;
  std::size_t s0, s1, s2, s3;
};
// A Send, a Write and two Sends; the first segment is the hole.
Stream build(Harness& h) {
  Stream s{pattern(300, 1), pattern(1000, 2), pattern(700, 3), pattern(50, 4), 0, 0, 0, 0};
  h.post_recv(101, 0, 4096);
  h.post_recv(102, 4096, 4096);
  h.post_recv(103, 8192, 4096);
  s.s0 = h.send(1, s.a);
  s.s1 = h.write(65536, s.w);
  s.s2 = h.send(2, s.b);
  s.s3 = h.send(3, s.c);
  return s;
}
std::uint64_t beyond_octets(const Harness& h, const Stream& s) {
  return h.stream_len - h.segs[s.s1].first;
}
void expect_all_delivered(Harness& h, const Stream& s) {
  auto wcs = h.poll(h.rcq);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].wr_id, 101u);
  EXPECT_EQ(wcs[1].wr_id, 102u);
  EXPECT_EQ(wcs[2].wr_id, 103u);
  for (const auto& wc : wcs) EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_TRUE(region_has(h, 0, s.a));
  EXPECT_TRUE(region_has(h, 65536, s.w));
  EXPECT_TRUE(region_has(h, 4096, s.b));
  EXPECT_TRUE(region_has(h, 8192, s.c));
  EXPECT_EQ(h.qp->state(), QpState::Rts);
  EXPECT_TRUE(h.canaries_intact());
}

TEST(BeyondHoles, PlacePlacesAtOnceAndTimesTheHole) {
  Harness h({true, false}, 1 << 20, BeyondHoles::Place);
  const auto s = build(h);
  h.inject_all({s.s3, s.s1, s.s2});
  EXPECT_TRUE(region_has(h, 65536, s.w)) << "placed beyond the hole";
  EXPECT_EQ(h.qp->stats().ooo_placed, 3u);
  h.inject_all({s.s0});
  expect_all_delivered(h, s);
  const auto st = h.qp->segment_stats();
  EXPECT_EQ(st.holes_opened, 2u) << "S3 opens one, S1 splits it";
  EXPECT_EQ(st.holes_closed, 2u);
  // Placed FPDUs stay in reassembly storage until the in-order point passes them, and the
  // segment that closes the hole goes through it too: every octet of the stream once.
  EXPECT_EQ(st.peak_held_bytes, h.stream_len);
  EXPECT_EQ(st.held_copied_bytes, h.stream_len);
  const auto t = h.qp->hole_timing();
  ASSERT_EQ(t.samples.size(), 1u);
  EXPECT_EQ(t.samples[0].octets, beyond_octets(h, s));
}

TEST(BeyondHoles, HoldPlacesNothingBeyondAHoleAndDeliversItInOrderWhenItCloses) {
  for (auto framing : {mpa::FramingConfig{true, false}, mpa::FramingConfig{false, true}}) {
    Harness h(framing, 1 << 20, BeyondHoles::Hold);
    const auto s = build(h);
    h.inject_all({s.s3, s.s1, s.s2});
    EXPECT_FALSE(region_has(h, 65536, s.w)) << "held, not placed";
    EXPECT_FALSE(region_has(h, 4096, s.b));
    EXPECT_EQ(h.qp->stats().ooo_placed, 0u);
    EXPECT_TRUE(h.poll(h.rcq).empty());
    auto holes = h.qp->hole_report();
    ASSERT_EQ(holes.size(), 1u);
    EXPECT_EQ(holes[0].placed_fpdus, 0u);
    EXPECT_EQ(h.qp->segment_stats().held_copied_bytes, beyond_octets(h, s));
    h.inject_all({s.s0});
    expect_all_delivered(h, s);
    EXPECT_EQ(h.qp->stats().released, 0u) << "nothing was deferred";
    const auto t = h.qp->hole_timing();
    ASSERT_EQ(t.samples.size(), 1u);
    EXPECT_EQ(t.samples[0].octets, beyond_octets(h, s));
  }
}

TEST(BeyondHoles, DiscardDropsWhatIsBeyondAndTakesItAgainInOrder) {
  Harness h({true, false}, 1 << 20, BeyondHoles::Discard);
  const auto s = build(h);
  h.inject_all({s.s3, s.s1, s.s2});
  EXPECT_FALSE(region_has(h, 65536, s.w));
  auto st = h.qp->segment_stats();
  EXPECT_EQ(st.dropped_segments, 3u);
  EXPECT_EQ(st.dropped_hole_limit, 3u);
  EXPECT_EQ(st.holes_opened, 0u);
  EXPECT_EQ(st.peak_held_bytes, 0u);
  EXPECT_TRUE(h.qp->hole_report().empty());
  h.inject_all({s.s0});
  auto first = h.poll(h.rcq);
  ASSERT_EQ(first.size(), 1u) << "only the Send before the hole";
  // The rest comes again in order (the socket's stream, or retransmissions).
  h.inject_all({s.s1, s.s2, s.s3});
  auto wcs = h.poll(h.rcq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_TRUE(region_has(h, 65536, s.w));
  EXPECT_TRUE(region_has(h, 4096, s.b));
  EXPECT_TRUE(region_has(h, 8192, s.c));
  EXPECT_EQ(h.qp->segment_stats().held_copied_bytes, 0u) << "nothing went through reassembly";
  const auto t = h.qp->hole_timing();
  ASSERT_EQ(t.samples.size(), 1u) << "the hole is timed though its data was dropped";
  EXPECT_EQ(t.samples[0].octets, beyond_octets(h, s));
  EXPECT_TRUE(h.canaries_intact());
}

}  // namespace
