// Protection beyond a TCP hole (rnic/qp_ooo.cpp): an RDMA Write, a Read Response or a Read
// Request found beyond a hole is checked as strictly as in stream order before any octet
// moves. For each check (access rights, protection domain, bounds, TO wrap, an invalidated,
// stale or deregistered STag) the target memory (and the guard octets around it) is untouched
// while the hole is open and after it closes, no Read Response carries data the peer may not
// read, and the Terminate that goes out when the hole closes carries the code written out
// here by hand from RFC 5040 §4.8 (layer, error type, error code).
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "rx_harness.hpp"

using namespace iwarp;
using namespace iwarp::rnic;
using namespace iwarp::rnic::rx_harness;

namespace {

constexpr std::uint8_t kUntouched = 0x5A;

// What the peer may not touch: a region of its own between guard octets, all kUntouched.
struct Victim {
  static constexpr std::size_t kSize = 4096, kGuard = 256;
  Bytes mem = Bytes(kSize + 2 * kGuard, kUntouched);
  STag stag{0};
  std::uint8_t* data() { return mem.data() + kGuard; }
  std::uint64_t to(std::uint64_t off = 0) { return reinterpret_cast<std::uint64_t>(data()) + off; }
  bool untouched() const {
    return std::all_of(mem.begin(), mem.end(), [](std::uint8_t b) { return b == kUntouched; });
  }
};

// The protection fault a case sets up.
enum class Fault { Rights, OtherPd, Bounds, ToWrap, Invalidated, StaleKey, Deregistered };

const char* name(Fault f) {
  switch (f) {
    case Fault::Rights:
      return "access rights";
    case Fault::OtherPd:
      return "another PD";
    case Fault::Bounds:
      return "bounds";
    case Fault::ToWrap:
      return "TO wrap";
    case Fault::Invalidated:
      return "invalidated STag";
    case Fault::StaleKey:
      return "stale key";
    case Fault::Deregistered:
      return "deregistered STag";
  }
  return "?";
}

// The STag, TO and length a peer names on the wire for a fault on `v`. `grant` is the access
// the operation needs (REMOTE_WRITE for tagged placement, REMOTE_READ for a Read source); the
// region has every other right, so only the fault under test is wrong.
struct Target {
  STag stag;
  std::uint64_t to;
  std::uint32_t len;
};
Target arm(Harness& h, Victim& v, Fault f, std::uint32_t grant) {
  auto& mem = h.dev.memory();
  const std::uint32_t all = kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic;
  const std::uint32_t access = f == Fault::Rights ? all & ~grant : all;
  const PdHandle pd = f == Fault::OtherPd ? mem.alloc_pd() : h.pd;
  v.stag = mem.register_region(pd, v.data(), Victim::kSize, v.to(), access);
  Target t{v.stag, v.to(128), 64};
  switch (f) {
    case Fault::Bounds:
      t.to = v.to(Victim::kSize - 32);  // the last 32 octets and 32 past the end
      break;
    case Fault::ToWrap:
      t.to = ~std::uint64_t{0} - 31;
      break;
    case Fault::Invalidated:
      EXPECT_TRUE(mem.invalidate(v.stag, h.pd));
      break;
    case Fault::StaleKey:
      // The same index with another key (the low 8 bits), as after re-registration.
      t.stag = STag{(v.stag.value() & ~0xFFu) | ((v.stag.value() + 1) & 0xFFu)};
      break;
    case Fault::Deregistered:
      EXPECT_TRUE(mem.deregister(v.stag));
      break;
    default:
      break;
  }
  return t;
}

std::optional<rdmap::Terminate> last_terminate(Harness& h) {
  std::vector<Bytes> keep;
  auto tx = h.transmitted(keep);
  if (tx.empty() || tx.back().hdr.op() != Opcode::Terminate) return std::nullopt;
  return std::get<rdmap::Terminate>(tx.back().body);
}

struct Code {
  int layer, etype, ecode;
};

constexpr mpa::FramingConfig kFramings[] = {{true, false}, {false, true}};

// The FPDU the hole is made of: a Write whose wire form ends at stream octet 500 (with markers,
// the one at octet 0 is part of it), so the bad FPDU after it crosses the marker at 512. Without
// the CRC only a marker proves an FPDU found beyond a hole (RFC 5044 §5); one that crossed none
// would wait for the stream and never meet the checks under test.
constexpr std::size_t kHoleLen = 476;
std::size_t hole(Harness& h) {
  const auto i = h.write(0, pattern(kHoleLen, 1));
  EXPECT_EQ(h.segs[i].second.size(), h.framing.markers ? 500u : 496u);
  return i;
}

// Runs `bad` (an FPDU index of h's stream, after the hole-closing segment `s0`) beyond the
// hole, then closes it: `untouched` must hold throughout, and the Terminate carries `want`.
// `checked_beyond`: the bad FPDU meets its checks beyond the hole (a deferred error), rather
// than waiting for the stream (a Read Response that answers no outstanding Read).
template <class Untouched>
void expect_refused_beyond_the_hole(Harness& h, std::size_t s0, std::size_t bad, Code want,
                                    Untouched untouched, bool checked_beyond = true) {
  h.inject_all({bad});
  EXPECT_TRUE(untouched()) << "written beyond the hole";
  EXPECT_EQ(h.qp->state(), QpState::Rts) << "no Terminate while the hole is open";
  EXPECT_EQ(h.count_tx(Opcode::Terminate), 0u);
  if (h.framing.markers) {
    const auto& [off, wire] = h.segs[bad];
    ASSERT_LT(off, 512u);
    ASSERT_GT(off + wire.size(), 516u) << "the bad FPDU must carry a marker";
  }
  auto holes = h.qp->hole_report();
  ASSERT_EQ(holes.size(), 1u);
  EXPECT_EQ(holes[0].placed_fpdus, 0u) << "the bad FPDU was placed";
  // It was found and checked beyond the hole (or, where no check applies yet, left to wait).
  EXPECT_EQ(holes[0].deferred_errors, checked_beyond ? 1u : 0u);
  h.inject_all({s0});
  EXPECT_TRUE(untouched()) << "written once the hole closed";
  EXPECT_EQ(h.qp->state(), QpState::Error);
  auto t = last_terminate(h);
  ASSERT_TRUE(t) << "no Terminate";
  EXPECT_EQ(t->layer, want.layer);
  EXPECT_EQ(t->etype, want.etype);
  EXPECT_EQ(t->ecode, want.ecode);
  EXPECT_TRUE(h.canaries_intact());
}

}  // namespace

// RFC 5041 §7.2 / RFC 5040 §4.8, DDP layer (1), tagged buffer error (1): 0x00 invalid STag
// (also for missing REMOTE_WRITE: DDP has no access code, siw reports it so too), 0x01 base or
// bounds violation, 0x02 STag not associated with the DDP stream, 0x03 TO wrap.
TEST(OooProtection, WriteBeyondAHoleNeverTouchesMemoryItMayNotWrite) {
  const std::pair<Fault, Code> cases[] = {
      {Fault::Rights, {1, 1, 0x00}},       {Fault::OtherPd, {1, 1, 0x02}},
      {Fault::Bounds, {1, 1, 0x01}},       {Fault::ToWrap, {1, 1, 0x03}},
      {Fault::Invalidated, {1, 1, 0x00}},  {Fault::StaleKey, {1, 1, 0x00}},
      {Fault::Deregistered, {1, 1, 0x00}},
  };
  for (auto framing : kFramings) {
    for (const auto& [fault, want] : cases) {
      SCOPED_TRACE(testing::Message()
                   << name(fault) << ", crc " << framing.crc << " markers " << framing.markers);
      Harness h(framing);
      Victim v;
      const Target t = arm(h, v, fault, kRemoteWrite);
      const auto s0 = hole(h);
      ddp::Segment seg;
      seg.hdr = ddp::tagged_header(Opcode::Write, t.stag, TaggedOffset{t.to}, true);
      const Bytes data = pattern(t.len, 2);
      seg.payload = data;
      const auto bad = h.fpdu(seg);
      expect_refused_beyond_the_hole(h, s0, bad, want, [&] { return v.untouched(); });
      EXPECT_TRUE(region_has(h, 0, pattern(kHoleLen, 1))) << "the Write before it is placed";
    }
  }
}

// A Read Response beyond a hole lands only in the sink of a Read this side has outstanding
// (RFC 5040 §4.5), and only while that sink's STag is still valid. One into a sink invalidated
// after the Read went out fails its check beyond the hole; one naming another region, or the
// sink's index with a stale key, answers no outstanding Read and waits for the stream, which
// checks it against the Read's sink STag (as siw's siw_proc_rresp does). None is placed: DDP
// tagged buffer error (1, 1), 0x00 invalid STag, and the Read does not complete successfully.
TEST(OooProtection, ReadResponseBeyondAHoleOnlyLandsInAValidOutstandingSink) {
  enum class Rr { SinkInvalidated, OtherStag, StaleKey };
  for (auto framing : kFramings) {
    for (Rr mode : {Rr::SinkInvalidated, Rr::OtherStag, Rr::StaleKey}) {
      SCOPED_TRACE(testing::Message() << (mode == Rr::SinkInvalidated ? "sink invalidated"
                                          : mode == Rr::OtherStag     ? "other STag"
                                                                      : "stale key")
                                      << ", crc " << framing.crc << " markers " << framing.markers);
      Harness h(framing);
      Victim sink, other;
      sink.stag = h.dev.memory().register_region(h.pd, sink.data(), Victim::kSize, sink.to(),
                                                 kLocalWrite | kRemoteWrite);
      other.stag = h.dev.memory().register_region(h.pd, other.data(), Victim::kSize, other.to(),
                                                  kLocalWrite | kRemoteWrite | kRemoteRead);
      SendWr wr;
      wr.wr_id = 7;
      wr.opcode = WrOpcode::RdmaRead;
      wr.flags = kSendSignaled;
      wr.sg_list.push_back(Sge{sink.to(128), 64, sink.stag});
      wr.rkey = STag{0x1234'5600};
      wr.remote_addr = 0x10000;
      std::string why;
      ASSERT_EQ(h.qp->post_send(wr, &why), 0) << why;
      h.settle();
      ASSERT_EQ(h.count_tx(Opcode::ReadRequest), 1u);
      if (mode == Rr::SinkInvalidated) {
        ASSERT_TRUE(h.dev.memory().invalidate(sink.stag, h.pd));
      }
      const auto s0 = hole(h);
      STag named = sink.stag;
      std::uint64_t to = sink.to(128);
      if (mode == Rr::OtherStag) {
        named = other.stag;
        to = other.to(128);
      } else if (mode == Rr::StaleKey) {
        named = STag{(sink.stag.value() & ~0xFFu) | ((sink.stag.value() + 1) & 0xFFu)};
      }
      ddp::Segment seg;
      seg.hdr = ddp::tagged_header(Opcode::ReadResponse, named, TaggedOffset{to}, true);
      const Bytes data = pattern(64, 3);
      seg.payload = data;
      const auto bad = h.fpdu(seg);
      const Code want{1, 1, 0x00};
      expect_refused_beyond_the_hole(
          h, s0, bad, want, [&] { return sink.untouched() && other.untouched(); },
          mode == Rr::SinkInvalidated);
      auto wcs = h.poll(h.scq);
      ASSERT_EQ(wcs.size(), 1u);
      EXPECT_EQ(wcs[0].wr_id, 7u);
      EXPECT_NE(wcs[0].status, WcStatus::Success) << "the Read did not get its data";
    }
  }
}

// RFC 5040 §7.4.1 / §4.8, RDMAP layer (0), remote protection error (1): 0x00 invalid STag,
// 0x01 base or bounds violation, 0x02 access rights violation, 0x03 STag not associated with
// the RDMAP stream, 0x04 TO wrap. A Read Request beyond a hole whose source fails any check
// never gets a Read Response (no octet of the source leaves), before or after the hole closes.
TEST(OooProtection, ReadRequestBeyondAHoleNeverReadsMemoryItMayNotRead) {
  const std::pair<Fault, Code> cases[] = {
      {Fault::Rights, {0, 1, 0x02}},       {Fault::OtherPd, {0, 1, 0x03}},
      {Fault::Bounds, {0, 1, 0x01}},       {Fault::ToWrap, {0, 1, 0x04}},
      {Fault::Invalidated, {0, 1, 0x00}},  {Fault::StaleKey, {0, 1, 0x00}},
      {Fault::Deregistered, {0, 1, 0x00}},
  };
  for (auto framing : kFramings) {
    for (const auto& [fault, want] : cases) {
      SCOPED_TRACE(testing::Message()
                   << name(fault) << ", crc " << framing.crc << " markers " << framing.markers);
      Harness h(framing);
      Victim v;
      std::fill(v.data(), v.data() + Victim::kSize, std::uint8_t{0xC3});  // the secret
      const Target t = arm(h, v, fault, kRemoteRead);
      const auto s0 = hole(h);
      ddp::Segment seg;
      seg.hdr = ddp::untagged_header(Opcode::ReadRequest, QueueNumber{rdmap::kQnReadReq}, Msn{1},
                                     MessageOffset{0});
      seg.body =
          rdmap::ReadRequest{STag{0x0BAD'0000}, TaggedOffset{0}, t.len, t.stag, TaggedOffset{t.to}};
      const auto bad = h.fpdu(seg);
      expect_refused_beyond_the_hole(h, s0, bad, want, [&] {
        return h.count_tx(Opcode::ReadResponse) == 0 &&
               std::all_of(v.data(), v.data() + Victim::kSize,
                           [](std::uint8_t b) { return b == 0xC3; });
      });
    }
  }
}
