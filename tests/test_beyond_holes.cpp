// The three things a receive side can do with data beyond a TCP hole (rnic::BeyondHoles,
// --beyond-holes): place it at once (completions deferred), hold it until the hole closes, or
// discard it; and what the placement benchmark measures of each (HoleClock: hole closed ->
// octets beyond it delivered; the segment receiver's peak held octets and copies). Over real
// bytes: the peer's FPDU stream is built with the real encoders and fed to a queue pair's
// segment path (tests/rx_harness.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "process_support.hpp"
#include "rnic/hole_clock.hpp"
#include "rx_harness.hpp"
#include "test_support.hpp"

using namespace iwarp;
using namespace iwarp::rnic;
using namespace iwarp::rnic::rx_harness;
using namespace std::chrono_literals;
using iwarp::test::Process;

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

// What arrives adjoining a run after its hole closed (with Discard: while the socket catches
// up with what the segment path dropped) is not behind a hole: the run keeps the extent it had
// when its hole closed, and the arrivals make no run of their own.
TEST(HoleClock, ARunsExtentIsFixedWhenItsHoleCloses) {
  HoleClock c;
  const auto t0 = HoleClock::Clock::time_point{} + 1s;
  c.seen(0, 100, 200);
  c.advanced(100, t0 + 10us, t0 + 11us);  // closed; the socket has not brought [100, 200)
  c.seen(100, 200, 300);                  // the tap goes on beyond it
  c.seen(100, 300, 400);
  c.advanced(250, t0 + 20us, t0 + 30us);  // the socket's stream passes the run
  ASSERT_EQ(c.samples().size(), 1u);
  EXPECT_EQ(c.samples()[0].octets, 100u) << "what it had when its hole closed";
  EXPECT_EQ(c.samples()[0].ns, 20000u);
  c.seen(250, 400, 500);  // still adjoining: no hole before it
  c.seen(250, 600, 700);  // beyond a real gap [500, 600): a new run
  EXPECT_EQ(c.open_runs(), 1u);
  c.advanced(600, t0 + 40us, t0 + 41us);
  c.advanced(700, t0 + 50us, t0 + 52us);
  ASSERT_EQ(c.samples().size(), 2u);
  EXPECT_EQ(c.samples()[1].octets, 100u);
  EXPECT_EQ(c.samples()[1].ns, 12000u);
}

TEST(HoleClock, RunsAndSamplesAreBounded) {
  HoleClock c;
  for (std::uint64_t i = 0; i < HoleClock::kMaxRuns + 10; ++i) c.seen(0, 10 + 3 * i, 11 + 3 * i);
  EXPECT_EQ(c.open_runs(), HoleClock::kMaxRuns);
  EXPECT_EQ(c.untracked(), 10u);
  c.seen(0, 11, 12);  // touching a tracked run: still timed
  EXPECT_EQ(c.untracked(), 10u);
  const std::uint64_t past = 10 + 3 * (HoleClock::kMaxRuns + 20);
  c.seen(0, past, past + 5);
  c.seen(0, past + 5, past + 9);  // the same untracked run: counted once
  EXPECT_EQ(c.untracked(), 11u);
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
    EXPECT_EQ(h.qp->segment_stats().ooo_fpdus_found, 0u) << "not even searched for";
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
  Harness h({true, false}, 1 << 20, BeyondHoles::Discard, 1u << 24);
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

// Without a live segment tap nothing would bring discarded octets again (a replay, a
// simulated wire): the QP holds them instead.
TEST(BeyondHoles, DiscardWithoutALiveTapHoldsInstead) {
  Harness h({true, false}, 1 << 20, BeyondHoles::Discard, 0);
  const auto s = build(h);
  h.inject_all({s.s3, s.s1, s.s2});
  auto st = h.qp->segment_stats();
  EXPECT_EQ(st.dropped_segments, 0u);
  EXPECT_EQ(st.holes_opened, 2u);
  EXPECT_EQ(h.qp->stats().ooo_placed, 0u) << "held, as with Hold";
  h.inject_all({s.s0});
  expect_all_delivered(h, s);
}

// The options, on the programs: a value that cannot work is one line naming what it needs.
TEST(BeyondHolesCli, AValueThatCannotWorkIsOneLine) {
  struct Case {
    std::vector<std::string> args;
    const char* named;
  };
  const Case cases[] = {
      {{"--beyond-holes", "discard"}, "--real-segments"},
      {{"--beyond-holes", "discard", "--wire", "reorder=0.3"}, "--real-segments"},
      {{"--beyond-holes", "hold"}, "--wire"},
      {{"--beyond-holes", "sometimes", "--wire", "reorder=0.3"}, "sometimes"},
      {{"--hole-times", "/nonexistent-dir/h.csv", "--wire", "reorder=0.3"}, "/nonexistent-dir"},
  };
  int i = 0;
  for (const auto& c : cases) {
    std::vector<std::string> args{"xfer", "--client", "127.0.0.1", "--port", "1"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Process p(args, "beyond_bad" + std::to_string(i++));
    EXPECT_EQ(p.wait(10s), 2) << c.named;
    const std::string out = p.output();
    EXPECT_NE(out.find(c.named), std::string::npos) << out;
    EXPECT_LE(std::count(out.begin(), out.end(), '\n'), 2) << out;
  }
}

// Two processes through a simulated wire with --beyond-holes hold: every operation verifies,
// nothing is placed beyond a hole, and --hole-times writes one row per hole the line reports.
TEST(BeyondHolesCli, HoldOverTheWireWritesItsHoleTimes) {
  const std::string port = test::free_port();
  ASSERT_FALSE(port.empty());
  const std::string csv = ::testing::TempDir() + "beyond_hold_times.csv";
  std::remove(csv.c_str());
  Process server(
      {"xfer", "--server", "--bind", "127.0.0.1", "--port", port, "--sizes", "4096", "1048576",
       "--wire", "reorder=0.3,seed=5", "--beyond-holes", "hold", "--hole-times", csv},
      "beyond_hold_server");
  ASSERT_TRUE(server.wait_for_output("listening")) << server.output();
  Process client({"xfer", "--client", "127.0.0.1", "--port", port, "--sizes", "4096", "1048576",
                  "--ops", "write,send", "--loop", "2"},
                 "beyond_hold_client");
  EXPECT_EQ(client.wait(120s), 0) << client.output();
  EXPECT_EQ(server.wait(30s), 0) << server.output();
  const std::string out = server.output();
  EXPECT_NE(out.find("server: all checks passed"), std::string::npos) << out;
  EXPECT_NE(out.find("0 FPDUs placed beyond a hole"), std::string::npos) << out;
  EXPECT_NE(client.output().find("MB/s goodput"), std::string::npos) << client.output();
  const auto at = out.find("server: beyond holes: hold;");
  ASSERT_NE(at, std::string::npos) << out;
  unsigned long long holes = 0;
  const auto d = out.find("delivered: ", at);
  ASSERT_NE(d, std::string::npos) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + d, "delivered: %llu holes", &holes), 1) << out;
  EXPECT_GT(holes, 0u) << out;
  std::ifstream f(csv);
  std::string line;
  ASSERT_TRUE(std::getline(f, line));
  EXPECT_EQ(line, "octets_beyond,ns");
  unsigned long long rows = 0;
  while (std::getline(f, line)) {
    unsigned long long octets = 0, ns = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%llu,%llu", &octets, &ns), 2) << line;
    EXPECT_GT(octets, 0u) << line;
    ++rows;
  }
  EXPECT_EQ(rows, holes);
}

}  // namespace
