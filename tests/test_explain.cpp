// The explainer (trace/explain.hpp, replay/replay_explain.hpp): every RDMAP opcode, every
// Terminate code and every replay timeline event kind has its own sentence with the event's
// values and an RFC citation; a reserved opcode gets a sentence saying so and what a receiver
// does; segments are counted within their message.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "replay/replay_explain.hpp"
#include "trace/explain.hpp"

namespace iwarp {
namespace {

using trace::explain_segment;
using trace::SegmentBody;
using trace::SegmentPlace;

// A header for `op` as RFC 5040 §4.2's table sends it, with distinctive values.
ddp::DdpHeader header_for(std::uint8_t op) {
  const auto* info = rdmap::opcode_info(op);
  ddp::DdpHeader h;
  h.opcode = op;
  h.tagged = info && info->tagged;
  if (h.tagged) {
    h.stag = STag{0x1a2b3c04};
    h.to = TaggedOffset{0x2000};
  } else {
    h.qn = QueueNumber{info ? info->qn : 0};
    h.msn = Msn{7};
    h.mo = MessageOffset{0};
    h.rsvd_ulp = info && info->invalidate ? 0x00abcd01 : 0;
  }
  return h;
}

SegmentBody body_for(std::uint8_t op) {
  switch (static_cast<rdmap::Opcode>(op)) {
    case rdmap::Opcode::ReadRequest:
      return rdmap::ReadRequest{STag{0x11111100}, TaggedOffset{0x40}, 4000, STag{0x22222200},
                                TaggedOffset{0x80}};
    case rdmap::Opcode::Terminate: {
      rdmap::Terminate t;
      t.layer = 1;
      t.etype = 1;
      t.ecode = 0;
      return t;
    }
    case rdmap::Opcode::AtomicRequest: {
      rdmap::AtomicRequest a;
      a.op = static_cast<std::uint8_t>(rdmap::AtomicOp::CompareSwap);
      a.request_id = 100;
      a.stag = STag{0x77770100};
      a.to = TaggedOffset{0x1010};
      a.add_swap_data = 0x3333;
      a.compare_data = 0x42;
      return a;
    }
    case rdmap::Opcode::AtomicResponse:
      return rdmap::AtomicResponse{101, 0x4242};
    case rdmap::Opcode::ImmediateData:
    case rdmap::Opcode::ImmediateDataSe:
      return std::uint64_t{0x0102030405060708};
    default:
      return std::monostate{};
  }
}

TEST(Explain, EveryOpcodeHasItsOwnSentenceWithItsValues) {
  std::set<std::string> seen;
  for (std::uint8_t op = 0; op <= rdmap::kMaxOpcode; ++op) {
    const auto* info = rdmap::opcode_info(op);
    ASSERT_NE(info, nullptr);
    const auto h = header_for(op);
    const SegmentBody body = body_for(op);
    const std::string s = explain_segment(h, &body, 64, SegmentPlace{1, true});
    SCOPED_TRACE(fmt::format("opcode 0x{:x} {}: {}", op, info->name, s));
    EXPECT_TRUE(seen.insert(s).second) << "same sentence as another opcode";
    EXPECT_EQ(s.find("reserved"), std::string::npos);
    EXPECT_NE(s.find("(RFC "), std::string::npos) << "no RFC rule cited";
    if (h.tagged) {
      EXPECT_NE(s.find("0x1a2b3c04"), std::string::npos) << "STag missing";
      EXPECT_NE(s.find("0x2000"), std::string::npos) << "TO missing";
    } else {
      EXPECT_NE(s.find("MSN 7"), std::string::npos) << "MSN missing";
    }
    if (info->invalidate) {
      EXPECT_NE(s.find("0x00abcd01"), std::string::npos);
    }
  }
  EXPECT_EQ(seen.size(), rdmap::kMaxOpcode + 1u);
  // The bodies' values reach the sentences.
  auto with = [](rdmap::Opcode op) {
    const auto o = static_cast<std::uint8_t>(op);
    const SegmentBody b = body_for(o);
    return explain_segment(header_for(o), &b, 0, SegmentPlace{1, true});
  };
  EXPECT_NE(with(rdmap::Opcode::ReadRequest).find("4000 octets from its STag 0x22222200"),
            std::string::npos);
  EXPECT_NE(with(rdmap::Opcode::Terminate).find("STag that is not valid"), std::string::npos);
  EXPECT_NE(with(rdmap::Opcode::AtomicRequest).find("if it equals 0x42, swap 0x3333"),
            std::string::npos);
  EXPECT_NE(with(rdmap::Opcode::AtomicResponse).find("held 0x4242"), std::string::npos);
  EXPECT_NE(with(rdmap::Opcode::ImmediateData).find("0x0102030405060708"), std::string::npos);
}

TEST(Explain, ReservedOpcodesSayReservedAndWhatTheReceiverDoes) {
  std::set<std::string> seen;
  for (unsigned op = rdmap::kMaxOpcode + 1; op <= 0xF; ++op) {
    ddp::DdpHeader h;
    h.opcode = static_cast<std::uint8_t>(op);
    const std::string s = explain_segment(h, nullptr, 0, SegmentPlace{});
    SCOPED_TRACE(s);
    EXPECT_NE(s.find(fmt::format("opcode 0x{:x} is reserved", op)), std::string::npos);
    // RFC 5040 §7.4.1: RDMAP remote operation error, unexpected opcode.
    EXPECT_NE(s.find("Terminate"), std::string::npos);
    EXPECT_NE(s.find("layer 0 etype 2 code 0x06"), std::string::npos);
    EXPECT_NE(s.find("RFC 5040 §7.4.1"), std::string::npos);
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 4u);
}

TEST(Explain, SegmentsAreCountedWithinTheirMessage) {
  trace::RecordExplainer x;
  auto rec = [](std::uint64_t to, bool last, std::uint8_t op = 0) {
    trace::Record r;
    r.kind = trace::Record::Kind::Fpdu;
    r.ddp = ddp::tagged_header(static_cast<rdmap::Opcode>(op), STag{0x1a2b3c04}, TaggedOffset{to},
                               last);
    r.payload_length = 1024;
    r.summary = "RDMA Read Response STag ... len 1024";
    return r;
  };
  EXPECT_NE(x.explain(rec(0x1000, false, 2)).find("Read Response first segment (more follow)"),
            std::string::npos);
  EXPECT_NE(x.explain(rec(0x1400, false, 2)).find("segment 2 (more follow)"), std::string::npos);
  const auto last = x.explain(rec(0x1800, true, 2));
  EXPECT_NE(last.find("last segment (3 of 3): 1024 octets placed at TO 0x1800 of STag 0x1a2b3c04"),
            std::string::npos)
      << last;
  EXPECT_NE(last.find("the oldest outstanding RDMA Read completes"), std::string::npos);
  // The next message starts again at 1.
  EXPECT_NE(x.explain(rec(0, true, 0)).find("RDMA Write single segment"), std::string::npos);
  // A capture cannot make it count more open messages than its limit.
  trace::RecordExplainer y;
  for (std::uint32_t i = 0; i < trace::RecordExplainer::kMaxMessagesInProgress; ++i) {
    auto r = rec(0, false, 0);
    r.ddp->stag = STag{i};
    EXPECT_NE(y.explain(r).find("first segment"), std::string::npos);
  }
  auto over = rec(0, false, 0);
  over.ddp->stag = STag{0xffffff00};
  EXPECT_NE(y.explain(over).find("RDMA Write segment (more follow): 1024 octets"),
            std::string::npos);
  // An FPDU with a reserved opcode, as rnic decode records it.
  trace::Record r;
  r.kind = trace::Record::Kind::Fpdu;
  r.ddp = ddp::DdpHeader{};
  r.ddp->opcode = 0xC;
  r.summary = "Unknown";
  EXPECT_NE(x.explain(r).find("opcode 0xc is reserved"), std::string::npos);
}

TEST(Explain, EveryTerminateCodeHasItsOwnRule) {
  std::set<std::string> seen;
  constexpr auto kLast = static_cast<std::size_t>(Errc::RdmapOpUnspecified);
  for (std::size_t i = 0; i <= kLast; ++i) {
    const auto e = static_cast<Errc>(i);
    const std::string rule(trace::terminate_rule(e));
    SCOPED_TRACE(fmt::format("{}: {}", errc_name(e), rule));
    EXPECT_TRUE(seen.insert(rule).second) << "same rule as another code";
    EXPECT_NE(rule.find("(RFC "), std::string::npos);
    // The rule for the triple as received is that code's own, not a fallback.
    const auto t = term_code(e);
    EXPECT_EQ(trace::explain_terminate_code(static_cast<std::uint8_t>(t.layer), t.etype, t.ecode),
              rule);
    // A violation names it with its Terminate.
    const auto v = trace::explain_error(WireError{e, "rule", "", 0});
    EXPECT_NE(v.find(rule), std::string::npos);
    EXPECT_NE(v.find(fmt::format("layer {} etype {} code 0x{:02x}", static_cast<int>(t.layer),
                                 t.etype, t.ecode)),
              std::string::npos);
  }
  EXPECT_EQ(seen.size(), kLast + 1);
  // RFC 5040 §7.4.1: a local catastrophic error may carry any code; other triples are unknown.
  EXPECT_NE(trace::explain_terminate_code(1, 0, 0x33).find("local catastrophic error in the DDP"),
            std::string::npos);
  EXPECT_NE(trace::explain_terminate_code(3, 7, 0x99).find("is no combination"), std::string::npos);
}

TEST(Explain, MpaFramesExplainTheNegotiation) {
  mpa::MpaFrame req;
  req.revision = 2;
  req.crc = true;
  req.markers = true;
  req.enhanced = true;
  req.params = mpa::EnhancedParams{.peer_to_peer = true, .ird = 4, .rtr = 0, .ord = 8};
  const auto r = trace::explain_mpa_frame(req);
  EXPECT_NE(r.find("MPA Request rev 2"), std::string::npos);
  EXPECT_NE(r.find("markers toward it requested (M=1)"), std::string::npos);
  EXPECT_NE(r.find("CRC asked for by it (C=1"), std::string::npos);
  EXPECT_NE(r.find("IRD 4 and ORD 8"), std::string::npos);
  mpa::MpaFrame rej;
  rej.kind = mpa::FrameKind::Reply;
  rej.reject = true;
  EXPECT_NE(trace::explain_mpa_frame(rej).find("rejects the connection"), std::string::npos);
  mpa::MpaFrame acc;
  acc.kind = mpa::FrameKind::Reply;
  EXPECT_NE(trace::explain_mpa_frame(acc).find("the responder accepts"), std::string::npos);
}

TEST(Explain, EveryReplayEventKindHasItsOwnSentence) {
  using K = rnic::RxEvent::Kind;
  std::set<std::string> seen;
  for (int k = 0; k <= static_cast<int>(K::Duplicate); ++k) {
    rnic::RxEvent e;
    e.kind = static_cast<K>(k);
    e.offset = 164;
    e.end = 1624;
    e.hdr = ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{3}, MessageOffset{0});
    e.payload = 1436;
    e.sends = 2;
    if (e.kind == K::TerminateSent || e.kind == K::TerminateReceived || e.kind == K::DeferredError)
      e.term = term_code(Errc::DdpTaggedInvalidStag);
    const auto s = replay::explain_event(e);
    SCOPED_TRACE(fmt::format("kind {}: {}", k, s));
    EXPECT_TRUE(seen.insert(s).second) << "same sentence as another kind";
    EXPECT_NE(s.find("RFC "), std::string::npos);
    if (e.term) {
      EXPECT_NE(s.find(trace::terminate_rule(Errc::DdpTaggedInvalidStag)), std::string::npos);
    }
    if (e.kind == K::HoleOpened || e.kind == K::HoleClosed || e.kind == K::Released) {
      EXPECT_NE(s.find("[164, 1624)"), std::string::npos);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(K::Duplicate) + 1);
}

TEST(Explain, PlacedBeyondAHoleSaysWhatWaits) {
  std::set<std::string> seen;
  for (auto op : {rdmap::Opcode::Write, rdmap::Opcode::ReadResponse, rdmap::Opcode::Send,
                  rdmap::Opcode::ReadRequest}) {
    rnic::RxEvent e;
    e.kind = rnic::RxEvent::Kind::Placed;
    e.beyond_hole = true;
    e.offset = 1624;
    e.end = 3084;
    e.payload = 1436;
    e.hdr = header_for(static_cast<std::uint8_t>(op));
    const auto s = replay::explain_event(e);
    SCOPED_TRACE(s);
    EXPECT_NE(s.find("beyond a TCP hole"), std::string::npos);
    EXPECT_NE(s.find("RFC 5041 §5.4"), std::string::npos);
    EXPECT_TRUE(seen.insert(s).second);
  }
  rnic::RxEvent send;
  send.kind = rnic::RxEvent::Kind::Placed;
  send.beyond_hole = true;
  send.payload = 1436;
  send.hdr = ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{3}, MessageOffset{1436});
  EXPECT_NE(replay::explain_event(send).find(
                "Send beyond a TCP hole: MSN 3 placed now, 1436 octets at MO 1436"),
            std::string::npos);
  EXPECT_NE(replay::explain_event(send).find("its completion waits for the hole to close"),
            std::string::npos);
}

}  // namespace
}  // namespace iwarp
