#include <gtest/gtest.h>

#include <random>
#include <set>
#include <tuple>

#include "ddp/segmentation.hpp"

namespace iwarp::ddp {
namespace {

using rdmap::Opcode;

Bytes encode(const Segment& s) {
  Bytes b;
  encode_segment(s, b);
  return b;
}

Segment untagged(Opcode op, std::uint32_t msn = 1, std::uint32_t mo = 0, bool last = true) {
  Segment s;
  s.hdr = untagged_header(op, QueueNumber{rdmap::opcode_info(static_cast<std::uint8_t>(op))->qn},
                          Msn{msn}, MessageOffset{mo}, last);
  return s;
}

TEST(DdpHeader, TaggedBytesMatchSiw) {
  // siw's RDMA Write (last segment) as seen in hostpeer_eth0_terminate.pcap: c1 40 + STag + TO.
  auto h = tagged_header(Opcode::Write, STag{0xdeadbe00}, TaggedOffset{0x1000});
  Bytes b;
  h.encode(b);
  const Bytes want = {0xc1, 0x40, 0xde, 0xad, 0xbe, 0x00, 0, 0, 0, 0, 0, 0, 0x10, 0x00};
  EXPECT_EQ(b, want);
  auto d = DdpHeader::decode(b);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, h);
}

TEST(DdpHeader, UntaggedSendLastBytes) {
  auto h = untagged_header(Opcode::Send, QueueNumber{0}, Msn{7}, MessageOffset{1442});
  Bytes b;
  h.encode(b);
  const Bytes want = {0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0x05, 0xa2};
  EXPECT_EQ(b, want);
}

TEST(DdpSegment, EveryOpcodeRoundTrips) {
  Bytes payload(100, 0x5a);
  std::vector<Segment> all;
  all.push_back([&] {
    Segment s;
    s.hdr = tagged_header(Opcode::Write, STag{0x1234}, TaggedOffset{99});
    s.payload = payload;
    return s;
  }());
  all.push_back([&] {
    auto s = untagged(Opcode::ReadRequest);
    s.body = rdmap::ReadRequest{STag{1}, TaggedOffset{2}, 3, STag{4}, TaggedOffset{5}};
    return s;
  }());
  all.push_back([&] {
    Segment s;
    s.hdr = tagged_header(Opcode::ReadResponse, STag{0x99}, TaggedOffset{0}, false);
    s.payload = payload;
    return s;
  }());
  for (auto op : {Opcode::Send, Opcode::SendInvalidate, Opcode::SendSe, Opcode::SendSeInvalidate}) {
    auto s = untagged(op, 3, 1442, false);
    s.hdr.rsvd_ulp = rdmap::opcode_info(static_cast<std::uint8_t>(op))->invalidate ? 0xabcd : 0;
    s.payload = payload;
    all.push_back(s);
  }
  all.push_back([&] {
    auto s = untagged(Opcode::Terminate);
    rdmap::Terminate t;
    t.layer = 1;
    t.etype = 2;
    t.ecode = 3;
    t.m = t.d = t.r = true;
    t.ddp_segment_length = 30;
    Bytes h;
    untagged_header(Opcode::ReadRequest, QueueNumber{1}, Msn{4}, MessageOffset{0}).encode(h);
    t.ddp_header = h;
    t.rdmap_header = Bytes(28, 0x11);
    s.body = t;
    return s;
  }());
  for (auto op : {Opcode::ImmediateData, Opcode::ImmediateDataSe}) {
    auto s = untagged(op);
    s.body = std::uint64_t{0x0102030405060708};
    all.push_back(s);
  }
  all.push_back([&] {
    auto s = untagged(Opcode::AtomicRequest);
    rdmap::AtomicRequest a;
    a.op = 2;
    a.request_id = 77;
    a.stag = STag{0x42};
    a.to = TaggedOffset{0x1000};
    a.add_swap_data = 1;
    a.add_swap_mask = 2;
    a.compare_data = 3;
    a.compare_mask = 4;
    s.body = a;
    return s;
  }());
  all.push_back([&] {
    auto s = untagged(Opcode::AtomicResponse);
    s.body = rdmap::AtomicResponse{77, 0xfeedface};
    return s;
  }());
  ASSERT_EQ(all.size(), 12u);  // every opcode 0x0..0xB
  for (const auto& s : all) {
    Bytes b = encode(s);
    auto p = parse_segment(b);
    ASSERT_TRUE(p) << describe(s) << ": " << p.error().to_string();
    EXPECT_EQ(p->hdr, s.hdr) << describe(s);
    EXPECT_EQ(p->body, s.body) << describe(s);
    EXPECT_TRUE(
        std::equal(p->payload.begin(), p->payload.end(), s.payload.begin(), s.payload.end()));
    EXPECT_EQ(encode(*p), b);
  }
}

// describe() of an opcode outside RFC 5040's table (0xF marks the peer-to-peer RTR Send in the
// engine) names it Unknown: it used to dereference the table's null entry (`rnic replay` of a
// Send-RTR capture crashed in the timeline).
TEST(DdpSegment, DescribeNamesAnUnknownOpcode) {
  for (std::uint8_t op : {std::uint8_t{0xF}, std::uint8_t{0xD}}) {
    Segment s = untagged(Opcode::Send);
    s.hdr.opcode = op;
    EXPECT_EQ(describe(s), "Unknown QN 0 MSN 1 MO 0 L len 0");
  }
}

TEST(DdpSegment, AtomicRequestLayoutFollowsRfc7306) {
  auto s = untagged(Opcode::AtomicRequest);
  rdmap::AtomicRequest a;
  a.op = 1;
  a.request_id = 0x01020304;
  a.stag = STag{0x0a0b0c0d};
  a.to = TaggedOffset{0x1112131415161718};
  a.add_swap_data = 0x2122232425262728;
  a.add_swap_mask = 0x3132333435363738;
  a.compare_data = 0x4142434445464748;
  a.compare_mask = 0x5152535455565758;
  s.body = a;
  Bytes b = encode(s);
  ASSERT_EQ(b.size(), 18u + 52u);
  EXPECT_EQ(load_be32(&b[18]), 1u);  // Rsvd(28) | AtomicOp(4)
  EXPECT_EQ(load_be32(&b[22]), 0x01020304u);
  EXPECT_EQ(load_be32(&b[26]), 0x0a0b0c0du);
  EXPECT_EQ(load_be64(&b[30]), 0x1112131415161718u);
  EXPECT_EQ(load_be64(&b[38]), 0x2122232425262728u);
  EXPECT_EQ(load_be64(&b[46]), 0x3132333435363738u);
  EXPECT_EQ(load_be64(&b[54]), 0x4142434445464748u);
  EXPECT_EQ(load_be64(&b[62]), 0x5152535455565758u);
  EXPECT_EQ(load_be32(&b[6]), 1u);  // QN 1, shared with Read Requests
}

TEST(DdpSegment, SiwTerminateIsDecodedWithItsBitFieldQuirk) {
  // hostpeer_eth0_terminate.pcap: siw's Terminate after a Write to STag 0xdeadbe00.
  Bytes t = {0x41, 0x47, 0,    0,    0,    0,    0, 0, 0, 2, 0, 0, 0,    1,
             0,    0,    0,    0,     // untagged QN 2 MSN 1
             0x11, 0x00, 0x03, 0x00,  // siw's control word
             0x00, 0x11,              // DDP segment length
             0xc1, 0x40, 0xde, 0xad, 0xbe, 0x00, 0, 0, 0, 0, 0, 0, 0x10, 0x00};
  auto s = parse_segment(t);
  ASSERT_TRUE(s) << s.error().to_string();
  auto& term = std::get<rdmap::Terminate>(s->body);
  EXPECT_TRUE(term.siw_bitfield_quirk);
  EXPECT_EQ(term.layer, 1);  // DDP
  EXPECT_EQ(term.etype, 1);  // tagged buffer
  EXPECT_EQ(term.ecode, 0);  // invalid STag
  EXPECT_TRUE(term.m);
  EXPECT_TRUE(term.d);
  EXPECT_FALSE(term.r);
  EXPECT_EQ(term.ddp_segment_length, 0x11);
  ASSERT_EQ(term.ddp_header.size(), 14u);
  // Our encoder writes the RFC 5040 layout for the same content.
  Bytes ours;
  term.encode(ours);
  EXPECT_EQ(ours[0], 0x11);  // layer 1 << 4 | etype 1
  EXPECT_EQ(ours[2], 0xC0);  // M | D in the top bits
  auto back = rdmap::Terminate::decode(ours);
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->siw_bitfield_quirk);
  EXPECT_EQ(back->layer, 1);
  EXPECT_EQ(back->ddp_header, term.ddp_header);
}

TEST(DdpSegment, SiwBitFieldLayoutKeepsLayerAndETypeApart) {
  // siw's bit-fields put Layer in the low nibble of octet 0 and EType in the high one, and
  // M/D/R in bits 0..2 of octet 2. RDMAP (layer 0), remote operation (etype 2), unexpected
  // opcode (0x06), with M only: 20 06 01 00.
  Bytes body = {0x20, 0x06, 0x01, 0x00};
  auto t = rdmap::Terminate::decode(body);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->siw_bitfield_quirk);
  EXPECT_EQ(t->layer, 0);
  EXPECT_EQ(t->etype, 2);
  EXPECT_EQ(t->ecode, 6);
  EXPECT_TRUE(t->m);
  EXPECT_FALSE(t->d);
  // The same error in RFC layout: 02 06 80 00.
  Bytes rfc = {0x02, 0x06, 0x80, 0x00};
  auto r = rdmap::Terminate::decode(rfc);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->siw_bitfield_quirk);
  EXPECT_EQ(r->layer, 0);
  EXPECT_EQ(r->etype, 2);
  EXPECT_TRUE(r->m);
}

struct BadCase {
  const char* name;
  Bytes bytes;
  Errc expect;
};

TEST(DdpSegment, MalformedSegmentsGiveTheRfcError) {
  auto hdr = [](Segment s) { return encode(s); };
  std::vector<BadCase> cases;
  {
    Bytes b = hdr(untagged(Opcode::Send));
    b[0] = (b[0] & ~0x03) | 2;  // DV 2
    cases.push_back({"untagged DV 2", b, Errc::DdpUntaggedVersion});
  }
  {
    Segment s;
    s.hdr = tagged_header(Opcode::Write, STag{1}, TaggedOffset{0});
    Bytes b = hdr(s);
    b[0] = (b[0] & ~0x03) | 0;  // DV 0
    cases.push_back({"tagged DV 0", b, Errc::DdpTaggedVersion});
  }
  {
    Bytes b = hdr(untagged(Opcode::Send));
    b[1] = (b[1] & 0x3F) | 0x80;  // RV 2
    cases.push_back({"RV 2", b, Errc::RdmapVersion});
  }
  {
    Bytes b = hdr(untagged(Opcode::Send));
    b[1] = (b[1] & 0xF0) | 0x0C;  // opcode 12
    cases.push_back({"opcode 0xC", b, Errc::RdmapUnexpectedOpcode});
  }
  {
    Bytes b = hdr(untagged(Opcode::Send));
    b[0] |= 0x80;  // T=1 on a Send
    cases.push_back({"tagged Send", b, Errc::RdmapUnexpectedOpcode});
  }
  {
    auto s = untagged(Opcode::Send);
    s.hdr.qn = QueueNumber{1};
    cases.push_back({"Send on QN 1", hdr(s), Errc::DdpUntaggedInvalidQn});
  }
  {
    auto s = untagged(Opcode::ReadRequest);
    s.body = rdmap::ReadRequest{};
    Bytes b = hdr(s);
    b.pop_back();
    cases.push_back({"short Read Request", b, Errc::RdmapCatastrophicStream});
    b.push_back(0);
    b.push_back(0);
    cases.push_back({"Read Request with payload", b, Errc::RdmapCatastrophicStream});
  }
  {
    auto s = untagged(Opcode::ReadRequest, 1, 0, false);
    s.body = rdmap::ReadRequest{};
    cases.push_back({"Read Request L=0", hdr(s), Errc::RdmapCatastrophicStream});
  }
  {
    auto s = untagged(Opcode::AtomicResponse, 1, 8);
    s.body = rdmap::AtomicResponse{};
    cases.push_back({"Atomic Response MO 8", hdr(s), Errc::DdpUntaggedInvalidMo});
  }
  {
    auto s = untagged(Opcode::AtomicRequest);
    rdmap::AtomicRequest a;
    a.op = 5;
    s.body = a;
    cases.push_back({"AtomicOp 5", hdr(s), Errc::RdmapUnexpectedOpcode});
  }
  {
    Segment s;
    s.hdr = tagged_header(Opcode::Write, STag{1}, TaggedOffset{~0ull - 2});
    Bytes p(4);
    s.payload = p;
    cases.push_back({"TO wrap", hdr(s), Errc::DdpTaggedToWrap});
    s.hdr.to = TaggedOffset{~0ull - 3};
    EXPECT_TRUE(parse_segment(hdr(s))) << "ends exactly at 2^64";
  }
  cases.push_back({"13 octets tagged", Bytes{0xc1, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                   Errc::MpaMarkerError});
  cases.push_back({"1 octet", Bytes{0x41}, Errc::MpaMarkerError});
  {
    auto s = untagged(Opcode::Terminate);
    rdmap::Terminate t;
    t.d = true;
    s.body = t;  // D set but no header
    Bytes b = hdr(s);
    cases.push_back({"Terminate D without header", b, Errc::RdmapCatastrophicStream});
  }
  for (const auto& c : cases) {
    auto r = parse_segment(c.bytes);
    ASSERT_FALSE(r) << c.name;
    EXPECT_EQ(r.error().code, c.expect) << c.name << ": " << r.error().to_string();
    EXPECT_NE(std::string(r.error().rule).find("RFC"), std::string::npos) << c.name;
  }
}

TEST(DdpSegmentation, SplitsAtMulpduAndAdvancesMoAndTo) {
  Bytes payload(10000);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i);
  for (bool tagged : {false, true}) {
    Segment whole;
    whole.hdr = tagged ? tagged_header(Opcode::Write, STag{5}, TaggedOffset{1000})
                       : untagged_header(Opcode::Send, QueueNumber{0}, Msn{9}, MessageOffset{0});
    whole.payload = payload;
    auto segs = segment_message(whole, 1442);
    ASSERT_TRUE(segs);
    const std::size_t room = 1442 - whole.hdr.size();
    ASSERT_EQ(segs->size(), (payload.size() + room - 1) / room);
    std::size_t off = 0;
    SegmentChecker chk;
    for (std::size_t i = 0; i < segs->size(); ++i) {
      const auto& s = (*segs)[i];
      EXPECT_LE(ulpdu_size(s), 1442u);
      EXPECT_EQ(s.hdr.last, i + 1 == segs->size());
      if (tagged)
        EXPECT_EQ(s.hdr.to.value(), 1000 + off);
      else {
        EXPECT_EQ(s.hdr.mo.value(), off);
        EXPECT_EQ(s.hdr.msn.value(), 9u);
      }
      EXPECT_EQ(s.payload.data(), payload.data() + off);
      off += s.payload.size();
      if (!tagged) {
        // The checker wants MSN 1 first: renumber for it.
        Segment c = s;
        c.hdr.msn = Msn{1};
        EXPECT_TRUE(chk.check(c));
      } else {
        EXPECT_TRUE(chk.check(s));
      }
    }
    EXPECT_EQ(off, payload.size());
  }
  // Zero-length message: one segment with L.
  Segment z;
  z.hdr = tagged_header(Opcode::Write, STag{1}, TaggedOffset{0});
  auto segs = segment_message(z, 100);
  ASSERT_TRUE(segs);
  ASSERT_EQ(segs->size(), 1u);
  EXPECT_TRUE((*segs)[0].hdr.last);
  // A MULPDU smaller than the header cannot work.
  EXPECT_FALSE(segment_message(z, 10));
}

TEST(DdpSegmentChecker, ReportsBrokenContinuity) {
  Bytes p(100);
  auto send = [&](std::uint32_t msn, std::uint32_t mo, bool last) {
    Segment s = untagged(Opcode::Send, msn, mo, last);
    s.payload = p;
    return s;
  };
  {
    SegmentChecker c;
    auto r = c.check(send(2, 0, true));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::DdpUntaggedMsnRange);  // MSN starts at 1
  }
  {
    SegmentChecker c;
    ASSERT_TRUE(c.check(send(1, 0, false)));
    auto r = c.check(send(1, 150, true));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::DdpUntaggedInvalidMo);
  }
  {
    SegmentChecker c;
    ASSERT_TRUE(c.check(send(1, 0, true)));
    ASSERT_TRUE(c.check(send(2, 0, false)));
    ASSERT_TRUE(c.check(send(2, 100, true)));
    EXPECT_EQ(c.expected_msn(0).value(), 3u);
    auto r = c.check(send(2, 0, true));  // replayed MSN
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::DdpUntaggedMsnRange);
  }
  {
    SegmentChecker c;
    Segment w;
    w.hdr = tagged_header(Opcode::Write, STag{7}, TaggedOffset{0}, false);
    w.payload = p;
    ASSERT_TRUE(c.check(w));
    Segment w2 = w;
    w2.hdr.to = TaggedOffset{101};
    auto r = c.check(w2);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::DdpTaggedBaseBounds);
    Segment w3 = w;
    w3.hdr.to = TaggedOffset{100};
    w3.hdr.stag = STag{8};
    r = c.check(w3);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::DdpTaggedInvalidStag);
  }
  {
    SegmentChecker c;
    Segment w;
    w.hdr = tagged_header(Opcode::Write, STag{7}, TaggedOffset{0}, false);
    w.payload = p;
    ASSERT_TRUE(c.check(w));
    Segment rr = w;
    rr.hdr.opcode = static_cast<std::uint8_t>(Opcode::ReadResponse);
    rr.hdr.to = TaggedOffset{100};
    auto r = c.check(rr);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, Errc::RdmapUnexpectedOpcode);
  }
}

TEST(WireErrors, EveryCodeMapsToADistinctTerminateTriple) {
  std::set<std::tuple<int, int, int>> seen;
  for (int e = 0; e <= static_cast<int>(Errc::RdmapOpUnspecified); ++e) {
    auto t = term_code(static_cast<Errc>(e));
    EXPECT_TRUE(seen.insert({static_cast<int>(t.layer), t.etype, t.ecode}).second) << e;
    EXPECT_FALSE(errc_name(static_cast<Errc>(e)).empty());
  }
  EXPECT_EQ(term_code(Errc::DdpUntaggedTooLong), (TermCode{TermLayer::Ddp, 2, 0x05}));
  EXPECT_EQ(term_code(Errc::RdmapAccessRights), (TermCode{TermLayer::Rdmap, 1, 0x02}));
  EXPECT_EQ(term_code(Errc::MpaNoMatchingRtr), (TermCode{TermLayer::Llp, 0, 0x07}));
}

}  // namespace
}  // namespace iwarp::ddp
