// Seed 004 (out-of-order RDMA messages placed at once, completions deferred per TCP hole),
// claim by claim, over real bytes: a peer's FPDU stream is built with the real encoders, cut
// into TCP segments, and fed to a queue pair's segment path in a chosen order. What the QP
// transmits (Read Responses, Terminates) is captured and decoded.
//
// The system claims (9-15) and program-product claims (16-22) restate the method claims
// (1-8) for the same engine; each test names every form it shows.
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

using namespace iwarp;
using namespace iwarp::rnic;
using rdmap::Opcode;

namespace {

constexpr std::uint32_t kIsn = 0xFFFFF000;  // the stream crosses 2^32 early on

// Collects whole ULPDUs from an MPA stream (what the QP under test transmitted).
class UlpduCollector : public mpa::FpduSink {
 public:
  MutableByteSpan on_fpdu_head(const mpa::FpduHead& h) override {
    cur_.assign(h.head.begin(), h.head.end());
    const std::size_t have = cur_.size();
    cur_.resize(h.ulpdu_length);
    return MutableByteSpan(cur_).subspan(have);
  }
  void on_fpdu_end(const mpa::FpduTrailer&) override { ulpdus.push_back(cur_); }
  void on_framing_error(const WireError& e) override { ADD_FAILURE() << e.to_string(); }
  std::vector<Bytes> ulpdus;

 private:
  Bytes cur_;
};

class Recorder : public RxObserver {
 public:
  void on_event(const RxEvent& e) override {
    std::lock_guard l(mu);
    events.push_back(e);
  }
  std::vector<RxEvent> of(RxEvent::Kind k) {
    std::lock_guard l(mu);
    std::vector<RxEvent> out;
    for (const auto& e : events)
      if (e.kind == k) out.push_back(e);
    return out;
  }
  std::mutex mu;
  std::vector<RxEvent> events;
};

// One QP (the MPA initiator) whose receive side is fed segments of a scripted peer stream.
struct Harness {
  explicit Harness(mpa::FramingConfig f = {true, false}, std::size_t buf = 1 << 20)
      : framing(f),
        enc(f),
        scq(256, nullptr, nullptr),
        rcq(256, nullptr, nullptr),
        mem(buf + 2 * kCanary, kCanaryByte) {
    pd = dev.memory().alloc_pd();
    region = mem.data() + kCanary;
    stag = dev.memory().register_region(pd, region, buf, reinterpret_cast<std::uint64_t>(region),
                                        kLocalWrite | kRemoteWrite | kRemoteRead);
    QpInit init;
    init.pd = pd;
    init.send_cq = &scq;
    init.recv_cq = &rcq;
    qp = std::make_shared<QueuePair>(dev, init);
    StreamSetup st;
    st.params.revision = 2;
    st.params.enhanced = true;
    st.params.crc = framing.crc;
    st.params.markers_to_initiator = framing.markers;
    st.params.initiator_ird = st.params.initiator_ord = 8;
    st.params.responder_ird = st.params.responder_ord = 8;
    st.initiator = true;
    RxOptions rx;
    rx.stream_start = TcpSeq{kIsn};
    rx.observer = rec;
    auto t = std::make_unique<NullTransport>(dev.io(), [this](ByteSpan b) {
      std::lock_guard l(tx_mu);
      tx.insert(tx.end(), b.begin(), b.end());
    });
    on_engine([&] {
      qp->start(
          std::move(t), st, {}, nullptr, [](const QpClosed&) {}, rx);
    });
  }
  ~Harness() {
    qp->modify_to_error();
    settle();
  }

  template <class F>
  void on_engine(F f) {
    std::promise<void> done;
    boost::asio::post(dev.io(), [&] {
      f();
      done.set_value();
    });
    done.get_future().get();
  }
  // Everything posted to the engine so far has run (twice: doorbells post again).
  void settle() {
    for (int i = 0; i < 3; ++i) on_engine([] {});
  }

  std::uint64_t to(std::size_t off) const { return reinterpret_cast<std::uint64_t>(region) + off; }

  // Appends one FPDU (one TCP segment) to the peer's stream; returns its index.
  std::size_t fpdu(const ddp::Segment& s) {
    Bytes ulpdu;
    ddp::encode_segment(s, ulpdu);
    Bytes wire;
    auto r = enc.encode(ulpdu, wire);
    EXPECT_TRUE(r) << r.error().to_string();
    segs.push_back({stream_len, wire});
    stream_len += wire.size();
    return segs.size() - 1;
  }
  std::size_t write(std::size_t off, ByteSpan data, bool last = true, STag s = STag{0}) {
    ddp::Segment seg;
    seg.hdr = ddp::tagged_header(Opcode::Write, s.value() ? s : stag, TaggedOffset{to(off)}, last);
    seg.payload = data;
    return fpdu(seg);
  }
  std::size_t send(std::uint32_t msn, ByteSpan data, std::uint32_t mo = 0, bool last = true) {
    ddp::Segment seg;
    seg.hdr = ddp::untagged_header(Opcode::Send, QueueNumber{0}, Msn{msn}, MessageOffset{mo}, last);
    seg.payload = data;
    return fpdu(seg);
  }
  std::size_t read_request(std::uint32_t msn, STag sink, std::uint64_t sink_to, std::uint32_t size,
                           std::size_t src_off) {
    ddp::Segment seg;
    seg.hdr = ddp::untagged_header(Opcode::ReadRequest, QueueNumber{rdmap::kQnReadReq}, Msn{msn},
                                   MessageOffset{0});
    seg.body =
        rdmap::ReadRequest{sink, TaggedOffset{sink_to}, size, stag, TaggedOffset{to(src_off)}};
    return fpdu(seg);
  }
  std::size_t read_response(std::size_t sink_off, ByteSpan data, bool last = true) {
    ddp::Segment seg;
    seg.hdr = ddp::tagged_header(Opcode::ReadResponse, stag, TaggedOffset{to(sink_off)}, last);
    seg.payload = data;
    return fpdu(seg);
  }

  void inject(std::size_t i) {
    qp->receive_segment(TcpSeq{kIsn} + static_cast<std::uint32_t>(segs[i].first), segs[i].second);
  }
  void inject_all(std::initializer_list<std::size_t> order) {
    for (auto i : order) inject(i);
    settle();
  }

  void post_recv(std::uint64_t id, std::size_t off, std::uint32_t len) {
    RecvWr wr;
    wr.wr_id = id;
    wr.sg_list.push_back(Sge{to(off), len, stag});
    std::string why;
    ASSERT_EQ(qp->post_recv(wr, &why), 0) << why;
  }
  void post_read(std::uint64_t id, std::size_t sink_off, std::uint32_t len, STag remote,
                 std::uint64_t remote_to) {
    SendWr wr;
    wr.wr_id = id;
    wr.opcode = WrOpcode::RdmaRead;
    wr.flags = kSendSignaled;
    wr.sg_list.push_back(Sge{to(sink_off), len, stag});
    wr.rkey = remote;
    wr.remote_addr = remote_to;
    std::string why;
    ASSERT_EQ(qp->post_send(wr, &why), 0) << why;
  }

  std::vector<Wc> poll(CompletionQueue& cq) {
    std::vector<Wc> out(256);
    out.resize(static_cast<std::size_t>(cq.poll(out)));
    return out;
  }
  // The QP's transmitted ULPDUs decoded (the framing toward the responder mirrors ours).
  std::vector<ddp::Segment> transmitted(std::vector<Bytes>& keep) {
    Bytes copy;
    {
      std::lock_guard l(tx_mu);
      copy = tx;
    }
    UlpduCollector c;
    mpa::FpduReader rd(framing);
    rd.feed(copy, c);
    keep = c.ulpdus;
    std::vector<ddp::Segment> out;
    for (const auto& u : keep) {
      auto s = ddp::parse_segment(u);
      EXPECT_TRUE(s);
      if (s) out.push_back(*s);
    }
    return out;
  }
  std::size_t count_tx(Opcode op) {
    std::vector<Bytes> keep;
    auto segs_tx = transmitted(keep);
    return static_cast<std::size_t>(std::count_if(
        segs_tx.begin(), segs_tx.end(), [&](const ddp::Segment& s) { return s.hdr.op() == op; }));
  }
  bool canaries_intact() const {
    return std::all_of(mem.begin(), mem.begin() + kCanary,
                       [](std::uint8_t b) { return b == kCanaryByte; }) &&
           std::all_of(mem.end() - kCanary, mem.end(),
                       [](std::uint8_t b) { return b == kCanaryByte; });
  }

  static constexpr std::size_t kCanary = 4096;
  static constexpr std::uint8_t kCanaryByte = 0xA5;
  mpa::FramingConfig framing;
  mpa::FpduEncoder enc;
  Device dev;
  CompletionQueue scq, rcq;
  Bytes mem;
  std::uint8_t* region = nullptr;
  PdHandle pd = 0;
  STag stag{0};
  std::shared_ptr<QueuePair> qp;
  std::shared_ptr<Recorder> rec = std::make_shared<Recorder>();
  std::vector<std::pair<std::size_t, Bytes>> segs;  // (stream offset, wire octets)
  std::size_t stream_len = 0;
  std::mutex tx_mu;
  Bytes tx;
};

Bytes pattern(std::size_t n, std::uint8_t seed) {
  Bytes v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::uint8_t>(seed * 31 + i * 7 + (i >> 8));
  return v;
}

bool region_has(const Harness& h, std::size_t off, const Bytes& data) {
  return std::memcmp(h.region + off, data.data(), data.size()) == 0;
}

// --- claims 1, 9, 16: place out-of-order messages, keep their information per hole, deliver
// in order.
TEST(Seed004Claims, Claim1_9_16_PlacesOutOfOrderMessagesAndDeliversInOrder) {
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

// --- claims 2, 3, 10, 17: Read Requests beyond a hole wait for the doorbell, which rings
// when the hole closes; each read queue WQE is then processed (its Read Response goes out).
TEST(Seed004Claims, Claim2_3_10_17_ReadRequestsBeyondAHoleRingTheDoorbellWhenItCloses) {
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
  // Claim 3: each read queue WQE is processed: both Read Responses, in order, with the data.
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

// --- claims 4, 11, 18: the Send-specific information of each Send beyond a hole is put in the
// WQE its MSN selects (before the hole closes).
TEST(Seed004Claims, Claim4_11_18_SendInformationGoesToTheWqeItsMsnSelects) {
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

// --- claims 5, 12, 19 and 6, 13, 20: the CQEs go to the CQ when the hole closes, as many as
// there were Sends beyond it; two holes release separately.
TEST(Seed004Claims, Claim5_6_12_13_19_20_AsManyCqesAsSendsWhenEachHoleCloses) {
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

// --- claims 7, 14, 21: the Send information comes back from the WQE on poll: wr_id, length,
// opcode, and the data is in the WQE's buffer.
TEST(Seed004Claims, Claim7_14_21_PollReturnsTheSendInformationStoredInTheWqe) {
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

// --- claims 8, 15, 22: completed Read Responses beyond a hole are counted per hole; the Read
// work requests complete when it closes.
TEST(Seed004Claims, Claim8_15_22_ReadResponsesBeyondAHoleCompleteTheReadsWhenItCloses) {
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
TEST(Seed004Claims, InvalidSegmentBeyondAHoleTerminatesInStreamOrderWhenItCloses) {
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
TEST(Seed004Claims, AnyArrivalOrderGivesTheSameMemoryAndCompletions) {
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
TEST(Seed004Claims, Claim4_HoleInsideASendsLastFpduKeepsTheMsnToWqeMapping) {
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
