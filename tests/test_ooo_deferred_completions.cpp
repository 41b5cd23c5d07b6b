// Out-of-order RDMA messages placed at once, completions deferred per TCP hole, over real
// bytes: a peer's FPDU stream is built with the real encoders, cut into TCP segments, and fed
// to a queue pair's segment path in a chosen order. What the QP transmits (Read Responses,
// Terminates) is captured and decoded. Placement may run ahead of the stream (RFC 5041 §5.3);
// delivery and completions keep its order (RFC 5041 §5.4, RFC 5040 §5.5). docs/seed-map.md
// maps each part of the design to the test that shows it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <mutex>
#include <random>

#include "ddp/segment.hpp"
#include "mpa/fpdu_reader.hpp"
#include "rnic/device.hpp"
#include "rnic/queue_pair.hpp"
#include "rx_harness.hpp"

using namespace iwarp;
using namespace iwarp::rnic;
using rdmap::Opcode;
using namespace iwarp::rnic::rx_harness;

namespace {

// Messages beyond a hole are placed at once, what their delivery needs is kept per hole, and
// they are delivered in order when it closes.
TEST(DeferredCompletions, OutOfOrderMessagesArePlacedAtOnceAndDeliveredInOrder) {
  for (auto framing : {mpa::FramingConfig{true, false}, mpa::FramingConfig{false, false},
                       mpa::FramingConfig{true, true}, mpa::FramingConfig{false, true}}) {
    SCOPED_TRACE(testing::Message() << "crc " << framing.crc << " markers " << framing.markers);
    Harness h(framing);
    h.post_recv(101, 0, 4096);
    h.post_recv(102, 4096, 4096);
    h.post_recv(103, 8192, 4096);
    const auto a = pattern(300, 1), w = pattern(1000, 2), b = pattern(700, 3), c = pattern(50, 4);
    const auto s0 = h.send(1, a);
    const auto s1 = h.write(65536, w);
    const auto s2 = h.send(2, b);
    const auto s3 = h.send(3, c);
    // Everything but the first segment: one hole at the start of the stream.
    h.inject_all({s3, s1, s2});
    EXPECT_TRUE(region_has(h, 65536, w)) << "the Write beyond the hole is placed at once";
    EXPECT_TRUE(region_has(h, 4096, b)) << "Send MSN 2 is placed in its receive WQE at once";
    EXPECT_TRUE(region_has(h, 8192, c)) << "Send MSN 3 too";
    EXPECT_TRUE(h.poll(h.rcq).empty()) << "nothing is delivered while the hole is open";
    auto holes = h.qp->hole_report();
    ASSERT_EQ(holes.size(), 1u);
    EXPECT_EQ(holes[0].hole.begin, 0u);
    EXPECT_EQ(holes[0].hole.end, h.segs[s1].first);
    EXPECT_EQ(holes[0].sends, 2u);
    EXPECT_EQ(holes[0].writes, 1u);
    EXPECT_EQ(holes[0].placed_fpdus, 3u);
    // The hole closes: in-order delivery of all four.
    h.inject_all({s0});
    auto wcs = h.poll(h.rcq);
    ASSERT_EQ(wcs.size(), 3u);
    EXPECT_EQ(wcs[0].wr_id, 101u);
    EXPECT_EQ(wcs[0].byte_len, a.size());
    EXPECT_EQ(wcs[1].wr_id, 102u);
    EXPECT_EQ(wcs[1].byte_len, b.size());
    EXPECT_EQ(wcs[2].wr_id, 103u);
    EXPECT_EQ(wcs[2].byte_len, c.size());
    for (const auto& wc : wcs) EXPECT_EQ(wc.status, WcStatus::Success);
    EXPECT_TRUE(region_has(h, 0, a));
    EXPECT_TRUE(h.qp->hole_report().empty());
    EXPECT_EQ(h.qp->stats().ooo_placed, 3u);
    EXPECT_EQ(h.qp->stats().released, 3u);
    EXPECT_EQ(h.qp->state(), QpState::Rts);
    EXPECT_TRUE(h.canaries_intact());
  }
}

// SegmentInput::receive_segment_on_engine (what `rnic replay` hands a batch over with: one
// handler, the octets in one shared buffer) does what receive_segment's handler does, hole and
// all; off the engine thread it is refused.
TEST(DeferredCompletions, SegmentsHandedOverOnTheEngineAreTakenAsPostedOnes) {
  Harness h;
  h.post_recv(101, 0, 4096);
  h.post_recv(102, 4096, 4096);
  const auto a = pattern(300, 1), w = pattern(1000, 2), b = pattern(700, 3);
  const auto s0 = h.send(1, a);
  const auto s1 = h.write(65536, w);
  const auto s2 = h.send(2, b);
  Bytes octets;
  std::vector<std::pair<std::size_t, std::pair<std::size_t, std::size_t>>> batch;
  for (auto i : {s2, s1}) {  // beyond a hole at the stream's start
    batch.push_back({h.segs[i].first, {octets.size(), h.segs[i].second.size()}});
    octets.insert(octets.end(), h.segs[i].second.begin(), h.segs[i].second.end());
  }
  SegmentInput& in = *h.qp;
  EXPECT_THROW(in.receive_segment_on_engine(TcpSeq{kIsn}, h.segs[s0].second), std::logic_error);
  h.on_engine([&] {
    for (const auto& [off, where] : batch)
      in.receive_segment_on_engine(TcpSeq{kIsn} + static_cast<std::uint32_t>(off),
                                   ByteSpan(octets).subspan(where.first, where.second));
  });
  h.settle();
  EXPECT_TRUE(region_has(h, 65536, w)) << "the Write beyond the hole is placed at once";
  EXPECT_TRUE(region_has(h, 4096, b));
  EXPECT_TRUE(h.poll(h.rcq).empty()) << "nothing is delivered while the hole is open";
  ASSERT_EQ(h.qp->hole_report().size(), 1u);
  EXPECT_FALSE(region_has(h, 0, a)) << "the segment refused off the engine was not taken";
  h.on_engine([&] { in.receive_segment_on_engine(TcpSeq{kIsn}, h.segs[s0].second); });
  h.settle();
  const auto wcs = h.poll(h.rcq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 101u);
  EXPECT_EQ(wcs[1].wr_id, 102u);
  EXPECT_TRUE(region_has(h, 0, a));
  EXPECT_TRUE(h.qp->hole_report().empty());
  EXPECT_EQ(h.qp->stats().bytes_received, octets.size() + h.segs[s0].second.size());
  EXPECT_TRUE(h.canaries_intact());
}

// Read Requests beyond a hole wait for the doorbell, which rings when the hole closes; each
// read queue WQE is then processed (its Read Response goes out).
TEST(DeferredCompletions, ReadRequestsBeyondAHoleRingTheDoorbellWhenItCloses) {
  Harness h;
  const auto src1 = pattern(500, 5), src2 = pattern(3000, 6);
  std::memcpy(h.region + 200000, src1.data(), src1.size());
  std::memcpy(h.region + 300000, src2.data(), src2.size());
  const STag peer_sink{0x00abcd01};
  const auto s0 = h.write(0, pattern(100, 7));
  const auto s1 = h.read_request(1, peer_sink, 0x1000, 500, 200000);
  const auto s2 = h.read_request(2, peer_sink, 0x9000, 3000, 300000);
  h.inject_all({s1, s2});
  auto holes = h.qp->hole_report();
  ASSERT_EQ(holes.size(), 1u);
  EXPECT_EQ(holes[0].read_requests, 2u) << "two Read Responses wait for the doorbell";
  EXPECT_EQ(h.count_tx(Opcode::ReadResponse), 0u) << "no Read Response before the hole closes";
  const auto doorbells_before = h.qp->stats().doorbells;
  h.inject_all({s0});
  // Each read queue WQE is processed: both Read Responses, in order, with the data.
  std::vector<Bytes> keep;
  auto tx = h.transmitted(keep);
  std::vector<ddp::Segment> rr;
  for (const auto& s : tx)
    if (s.hdr.op() == Opcode::ReadResponse) rr.push_back(s);
  ASSERT_GE(rr.size(), 2u);
  Bytes got1, got2;
  for (const auto& s : rr) {
    EXPECT_EQ(s.hdr.stag, peer_sink);
    auto& dst = s.hdr.to.value() < 0x9000 ? got1 : got2;
    dst.insert(dst.end(), s.payload.begin(), s.payload.end());
  }
  EXPECT_EQ(got1, src1);
  EXPECT_EQ(got2, src2);
  EXPECT_LT(rr.front().hdr.to.value(), 0x9000u) << "the first Read is answered first";
  // One doorbell for what the hole held (posting coalesces in the engine).
  EXPECT_EQ(h.qp->stats().doorbells - doorbells_before, 1u);
  auto rel = h.rec->of(RxEvent::Kind::Released);
  ASSERT_EQ(rel.size(), 1u);
  EXPECT_EQ(rel[0].read_requests, 2u);
  EXPECT_EQ(rel[0].writes, 0u);
}

// The Send-specific information of each Send beyond a hole is put in the WQE its MSN selects
// (RFC 5041 §5.3), before the hole closes.
TEST(DeferredCompletions, SendBeyondAHoleGoesToTheWqeItsMsnSelects) {
  Harness h;
  for (std::uint64_t i = 0; i < 4; ++i) h.post_recv(200 + i, i * 8192, 8192);
  const auto m1 = pattern(10, 1), m2 = pattern(5000, 2), m3 = pattern(1, 3), m4 = pattern(8192, 4);
  const auto s0 = h.send(1, m1);
  // MSN 2 in two segments; MSN 4 before MSN 3 on the wire order we inject.
  const auto s1 = h.send(2, ByteSpan(m2).first(1400), 0, false);
  const auto s2 = h.send(2, ByteSpan(m2).subspan(1400), 1400, true);
  const auto s3 = h.send(3, m3);
  const auto s4 = h.send(4, m4);
  h.inject_all({s4, s2, s3, s1});
  auto holes = h.qp->hole_report();
  ASSERT_EQ(holes.size(), 1u);
  EXPECT_EQ(holes[0].sends, 3u);
  EXPECT_EQ(holes[0].send_wr_ids, (std::vector<std::uint64_t>{201, 202, 203}));
  EXPECT_TRUE(region_has(h, 8192, m2));
  EXPECT_TRUE(region_has(h, 2 * 8192, m3));
  EXPECT_TRUE(region_has(h, 3 * 8192, m4));
  EXPECT_TRUE(h.poll(h.rcq).empty());
  h.inject_all({s0});
  EXPECT_EQ(h.poll(h.rcq).size(), 4u);
}

// The CQEs go to the CQ when the hole closes, as many as there were Sends beyond it; two
// holes release separately.
TEST(DeferredCompletions, AsManyCqesAsSendsWhenEachHoleCloses) {
  Harness h;
  for (std::uint64_t i = 0; i < 8; ++i) h.post_recv(300 + i, i * 4096, 4096);
  std::vector<std::size_t> s;
  for (std::uint32_t m = 1; m <= 8; ++m)
    s.push_back(h.send(m, pattern(100 * m, static_cast<std::uint8_t>(m))));
  // Holes at MSN 1 and MSN 5: three Sends beyond the first, three beyond the second.
  h.inject_all({s[1], s[2], s[3], s[5], s[6], s[7]});
  auto holes = h.qp->hole_report();
  ASSERT_EQ(holes.size(), 2u);
  EXPECT_EQ(holes[0].sends, 3u);
  EXPECT_EQ(holes[1].sends, 3u);
  EXPECT_TRUE(h.poll(h.rcq).empty());
  // The second hole closes first: nothing may complete (the first is still open); its Sends
  // now wait on the first hole.
  h.inject_all({s[4]});
  EXPECT_TRUE(h.poll(h.rcq).empty());
  holes = h.qp->hole_report();
  ASSERT_EQ(holes.size(), 1u);
  EXPECT_EQ(holes[0].sends, 7u);
  h.inject_all({s[0]});
  auto wcs = h.poll(h.rcq);
  ASSERT_EQ(wcs.size(), 8u) << "one CQE per Send";
  for (std::size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].wr_id, 300 + i);
    EXPECT_EQ(wcs[i].byte_len, 100 * (i + 1));
  }
  auto rel = h.rec->of(RxEvent::Kind::Released);
  ASSERT_EQ(rel.size(), 1u);
  EXPECT_EQ(rel[0].sends, 7u);

  // And a hole that closes with one Send beyond it releases exactly one CQE.
  Harness g;
  g.post_recv(1, 0, 64);
  g.post_recv(2, 64, 64);
  const auto a = g.send(1, pattern(10, 1)), b = g.send(2, pattern(20, 2));
  g.inject_all({b});
  EXPECT_TRUE(g.poll(g.rcq).empty());
  g.inject_all({a});
  EXPECT_EQ(g.poll(g.rcq).size(), 2u);
}

// The Send information comes back from the WQE on poll: wr_id, length, opcode, and the data
// is in the WQE's buffer.
TEST(DeferredCompletions, PollReturnsTheSendInformationStoredInTheWqe) {
  Harness h;
  h.post_recv(77, 0, 100);
  h.post_recv(78, 100, 3000);
  const auto m2 = pattern(2999, 9);
  const auto s0 = h.send(1, pattern(1, 1));
  const auto s1 = h.send(2, m2);
  h.inject_all({s1});
  EXPECT_EQ(h.qp->hole_report().at(0).send_wr_ids, std::vector<std::uint64_t>{78});
  h.inject_all({s0});
  auto wcs = h.poll(h.rcq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[1].wr_id, 78u);
  EXPECT_EQ(wcs[1].byte_len, 2999u);
  EXPECT_EQ(wcs[1].opcode, WcOpcode::Recv);
  EXPECT_EQ(wcs[1].status, WcStatus::Success);
  EXPECT_EQ(wcs[1].qp_num, h.qp->qp_num());
  EXPECT_TRUE(region_has(h, 100, m2));
}

// Completed Read Responses beyond a hole are counted per hole; the Read work requests
// complete when it closes.
TEST(DeferredCompletions, ReadResponsesBeyondAHoleCompleteTheReadsWhenItCloses) {
  Harness h;
  h.post_recv(1, 0, 4096);
  const STag remote{0x00123401};
  h.post_read(901, 100000, 3000, remote, 0x5000);
  h.post_read(902, 200000, 700, remote, 0x8000);
  h.settle();
  EXPECT_EQ(h.count_tx(Opcode::ReadRequest), 2u);
  const auto d1 = pattern(3000, 11), d2 = pattern(700, 12);
  const auto s0 = h.send(1, pattern(64, 13));
  const auto r1a = h.read_response(100000, ByteSpan(d1).first(1440), false);
  const auto r1b = h.read_response(100000 + 1440, ByteSpan(d1).subspan(1440), true);
  const auto r2 = h.read_response(200000, d2);
  h.inject_all({r2, r1b, r1a});
  EXPECT_TRUE(region_has(h, 100000, d1)) << "Read Response data is placed beyond the hole";
  EXPECT_TRUE(region_has(h, 200000, d2));
  EXPECT_TRUE(h.poll(h.scq).empty()) << "the Reads do not complete while the hole is open";
  auto holes = h.qp->hole_report();
  ASSERT_EQ(holes.size(), 1u);
  EXPECT_EQ(holes[0].read_responses, 2u);
  h.inject_all({s0});
  auto wcs = h.poll(h.scq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 901u);
  EXPECT_EQ(wcs[0].opcode, WcOpcode::RdmaRead);
  EXPECT_EQ(wcs[0].byte_len, 3000u);
  EXPECT_EQ(wcs[1].wr_id, 902u);
  EXPECT_EQ(h.poll(h.rcq).size(), 1u);
  auto rel = h.rec->of(RxEvent::Kind::Released);
  ASSERT_EQ(rel.size(), 1u);
  EXPECT_EQ(rel[0].read_responses, 2u);
}

// An invalid segment beyond a hole is never placed; its Terminate comes in stream order when
// the hole closes, after what came before it, and what came after it is flushed.
TEST(DeferredCompletions, InvalidSegmentBeyondAHoleTerminatesInStreamOrderWhenItCloses) {
  Harness h;
  h.post_recv(1, 0, 4096);
  h.post_recv(2, 4096, 4096);
  const auto s0 = h.send(1, pattern(100, 1));
  const auto bad = h.write(0, pattern(64, 2), true, STag{0xdead0001});
  const auto oob = h.write((1 << 20) - 10, pattern(64, 3));  // runs past the region
  const auto s1 = h.send(2, pattern(100, 4));
  h.inject_all({s1, oob, bad});
  EXPECT_EQ(h.qp->state(), QpState::Rts) << "no Terminate while the hole is open";
  EXPECT_EQ(h.count_tx(Opcode::Terminate), 0u);
  auto holes = h.qp->hole_report();
  ASSERT_EQ(holes.size(), 1u);
  EXPECT_EQ(holes[0].deferred_errors, 2u);
  EXPECT_TRUE(h.canaries_intact()) << "nothing placed outside a validated range";
  h.inject_all({s0});
  EXPECT_EQ(h.qp->state(), QpState::Error);
  std::vector<Bytes> keep;
  auto tx = h.transmitted(keep);
  ASSERT_FALSE(tx.empty());
  ASSERT_EQ(tx.back().hdr.op(), Opcode::Terminate);
  const auto& t = std::get<rdmap::Terminate>(tx.back().body);
  EXPECT_EQ(t.layer, 1);  // DDP
  EXPECT_EQ(t.etype, 1);  // tagged buffer
  EXPECT_EQ(t.ecode, 0);  // invalid STag: the first bad segment in stream order
  auto wcs = h.poll(h.rcq);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::Success) << "the Send before the bad Write completes";
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, WcStatus::WrFlushErr) << "the Send after it is flushed";
  EXPECT_TRUE(h.canaries_intact());
}

// Whatever order the segments arrive in (with duplicates and overlapping retransmissions), the
// memory and the completions are the same as in order.
TEST(DeferredCompletions, AnyArrivalOrderGivesTheSameMemoryAndCompletions) {
  for (auto framing : {mpa::FramingConfig{true, false}, mpa::FramingConfig{false, false},
                       mpa::FramingConfig{true, true}, mpa::FramingConfig{false, true}}) {
    SCOPED_TRACE(testing::Message() << "crc " << framing.crc << " markers " << framing.markers);
    struct Result {
      Bytes memory;
      std::vector<std::tuple<std::uint64_t, int, std::uint32_t>> rcq, scq;
    };
    auto run = [&](std::uint64_t seed) {
      Harness h(framing, 1 << 19);
      std::mt19937_64 rng(42);  // the same conversation every run
      for (std::uint64_t i = 0; i < 40; ++i) h.post_recv(i, i * 4096, 4096);
      h.post_read(1000, 300000, 5000, STag{0x00777701}, 0);
      h.settle();
      std::uint32_t msn = 1;
      bool read_done = false;
      for (int i = 0; i < 60; ++i) {
        const auto kind = rng() % 3;
        const auto len = static_cast<std::size_t>(rng() % 1400);
        const auto data = pattern(len, static_cast<std::uint8_t>(i));
        if (kind == 0 && msn <= 40) {
          h.send(msn++, data);
        } else if (kind == 1) {
          h.write(200000 + (rng() % 64) * 1024, data);
        } else if (!read_done) {
          const auto d = pattern(5000, 99);
          h.read_response(300000, ByteSpan(d).first(2500), false);
          h.read_response(302500, ByteSpan(d).subspan(2500), true);
          read_done = true;
        }
      }
      // Arrival order: identity for seed 0, else windows shuffled, some duplicated, some
      // retransmitted later as an overlapping piece.
      std::vector<std::pair<std::size_t, Bytes>> arrivals;
      for (auto& s : h.segs) arrivals.push_back(s);
      if (seed) {
        std::mt19937_64 r(seed);
        for (std::size_t i = 0; i < arrivals.size(); i += 6)
          std::shuffle(arrivals.begin() + static_cast<long>(i),
                       arrivals.begin() + static_cast<long>(std::min(i + 6, arrivals.size())), r);
        std::vector<std::pair<std::size_t, Bytes>> more;
        for (const auto& a : arrivals) {
          more.push_back(a);
          if (r() % 5 == 0 && a.second.size() > 8) {
            const std::size_t cut = 1 + r() % (a.second.size() - 1);
            more.push_back(
                {a.first + cut, Bytes(a.second.begin() + static_cast<long>(cut), a.second.end())});
          }
        }
        arrivals = more;
        std::rotate(arrivals.begin(), arrivals.begin() + 1, arrivals.begin() + 8);  // a late one
      }
      for (auto& [off, bytes] : arrivals)
        h.qp->receive_segment(TcpSeq{kIsn} + static_cast<std::uint32_t>(off), bytes);
      h.settle();
      EXPECT_TRUE(h.qp->hole_report().empty());
      EXPECT_EQ(h.qp->state(), QpState::Rts) << h.qp->error_reason();
      if (seed) {
        EXPECT_GT(h.qp->stats().ooo_placed, 0u);
      }
      Result res;
      res.memory.assign(h.region, h.region + (1 << 19));
      for (const auto& wc : h.poll(h.rcq))
        res.rcq.emplace_back(wc.wr_id, static_cast<int>(wc.status), wc.byte_len);
      for (const auto& wc : h.poll(h.scq))
        res.scq.emplace_back(wc.wr_id, static_cast<int>(wc.status), wc.byte_len);
      EXPECT_TRUE(h.canaries_intact());
      return res;
    };
    const auto ref = run(0);
    EXPECT_FALSE(ref.rcq.empty());
    EXPECT_EQ(ref.scq.size(), 1u);
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      const auto got = run(seed);
      EXPECT_TRUE(got.memory == ref.memory) << "seed " << seed;
      EXPECT_EQ(got.rcq, ref.rcq) << "seed " << seed;
      EXPECT_EQ(got.scq, ref.scq) << "seed " << seed;
    }
  }
}

}  // namespace

namespace {

// A hole that starts inside the last FPDU of a Send (its head read, its WQE taken): later
// Sends beyond the hole still go to the WQEs their MSNs select (found by replaying perftest).
TEST(DeferredCompletions, HoleInsideASendsLastFpduKeepsTheMsnToWqeMapping) {
  Harness h;
  for (std::uint64_t i = 0; i < 3; ++i) h.post_recv(500 + i, i * 4096, 4096);
  const auto m1 = pattern(1000, 1), m2 = pattern(600, 2), m3 = pattern(700, 3);
  const auto s0 = h.send(1, m1);
  const auto s1 = h.send(2, m2);
  const auto s2 = h.send(3, m3);
  const auto& first = h.segs[s0];
  // The head of MSN 1 arrives, the rest of its FPDU is the hole.
  h.qp->receive_segment(TcpSeq{kIsn}, Bytes(first.second.begin(), first.second.begin() + 100));
  h.inject_all({s2, s1});
  EXPECT_TRUE(region_has(h, 4096, m2)) << "MSN 2 goes to the second WQE";
  EXPECT_TRUE(region_has(h, 8192, m3)) << "MSN 3 goes to the third WQE";
  auto holes = h.qp->hole_report();
  ASSERT_EQ(holes.size(), 1u);
  EXPECT_EQ(holes[0].send_wr_ids, (std::vector<std::uint64_t>{501, 502}));
  h.qp->receive_segment(TcpSeq{kIsn} + 100, Bytes(first.second.begin() + 100, first.second.end()));
  h.settle();
  auto wcs = h.poll(h.rcq);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].byte_len, m1.size());
  EXPECT_EQ(wcs[2].wr_id, 502u);
  EXPECT_TRUE(region_has(h, 0, m1));
}

}  // namespace
