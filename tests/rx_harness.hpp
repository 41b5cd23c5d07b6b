// One queue pair's segment path driven by a scripted peer: the peer's FPDU stream is built with
// the real encoders (one FPDU per TCP segment) and fed to QueuePair::receive_segment in any
// order, so TCP holes are exact and repeatable; what the QP transmits (Read Responses,
// Terminates) is captured and decoded. The registered region sits between canaries.
// Used by test_ooo_deferred_completions.cpp and test_ooo_protection.cpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <mutex>

#include "ddp/segment.hpp"
#include "mpa/fpdu_reader.hpp"
#include "rnic/device.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic::rx_harness {

using rdmap::Opcode;

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
  explicit Harness(mpa::FramingConfig f = {true, false}, std::size_t buf = 1 << 20,
                   BeyondHoles beyond = BeyondHoles::Place, std::uint32_t tap_window = 0)
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
    rx.beyond_holes = beyond;
    rx.tap_window = tap_window;  // as a live segment tap's connection has it
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
    // Markers go to the initiator only (markers_to_initiator): none in what it sends.
    mpa::FpduReader rd(mpa::FramingConfig{framing.crc, false});
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

inline Bytes pattern(std::size_t n, std::uint8_t seed) {
  Bytes v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::uint8_t>(seed * 31 + i * 7 + (i >> 8));
  return v;
}

inline bool region_has(const Harness& h, std::size_t off, const Bytes& data) {
  return std::memcmp(h.region + off, data.data(), data.size()) == 0;
}

}  // namespace iwarp::rnic::rx_harness
