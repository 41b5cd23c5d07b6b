// rdmap::make_terminate: which headers a Terminate carries for each layer and error type
// (RFC 5040 §4.8), byte for byte as the QP engine, the connection manager and the trace
// generator assembled it by hand before.
#include <gtest/gtest.h>

#include "ddp/ddp_header.hpp"
#include "ddp/terminate.hpp"

namespace iwarp::rdmap {
namespace {

Bytes encoded(const Terminate& t) {
  Bytes b;
  t.encode(b);
  return b;
}

Bytes tagged_write_header() {
  Bytes b;
  ddp::tagged_header(Opcode::Write, STag{0xdeadbe00}, TaggedOffset{0x1000}).encode(b);
  return b;
}

Bytes read_request_header() {
  Bytes b;
  ddp::untagged_header(Opcode::ReadRequest, QueueNumber{kQnReadReq}, Msn{1}, MessageOffset{0})
      .encode(b);
  return b;
}

Bytes read_request_body() {
  Bytes b;
  ReadRequest{STag{0x100}, TaggedOffset{0x2000}, 64, STag{0x200}, TaggedOffset{0x3000}}.encode(b);
  return b;
}

// Which headers each error's Terminate echoes when both are at hand, as QueuePair::fatal
// decided before make_terminate existed: nothing for LLP, local catastrophic, version and
// opcode errors; the DDP header for the other DDP errors and RDMAP remote operation errors;
// the RDMAP header too for RDMAP remote protection errors.
enum class Echo : std::uint8_t { Nothing, Ddp, DdpAndRdmap };
Echo expected_echo(Errc code) {
  switch (code) {
    case Errc::DdpTaggedInvalidStag:
    case Errc::DdpTaggedBaseBounds:
    case Errc::DdpTaggedStagNotAssociated:
    case Errc::DdpTaggedToWrap:
    case Errc::DdpUntaggedInvalidQn:
    case Errc::DdpUntaggedNoBuffer:
    case Errc::DdpUntaggedMsnRange:
    case Errc::DdpUntaggedInvalidMo:
    case Errc::DdpUntaggedTooLong:
    case Errc::RdmapCatastrophicStream:
    case Errc::RdmapCatastrophicGlobal:
    case Errc::RdmapOpCannotInvalidate:
    case Errc::RdmapOpUnspecified:
      return Echo::Ddp;
    case Errc::RdmapInvalidStag:
    case Errc::RdmapBaseBounds:
    case Errc::RdmapAccessRights:
    case Errc::RdmapStagNotAssociated:
    case Errc::RdmapToWrap:
    case Errc::RdmapProtCannotInvalidate:
    case Errc::RdmapProtUnspecified:
      return Echo::DdpAndRdmap;
    default:
      return Echo::Nothing;
  }
}

TEST(MakeTerminate, EveryErrorCodeEchoesWhatItsLayerAndTypeAllow) {
  const Bytes ddp = read_request_header();
  const Bytes rdmap = read_request_body();
  for (int i = 0; i <= static_cast<int>(Errc::RdmapOpUnspecified); ++i) {
    const auto code = static_cast<Errc>(i);
    const TermCode tc = term_code(code);
    Bytes want{static_cast<std::uint8_t>((static_cast<std::uint8_t>(tc.layer) << 4) | tc.etype),
               tc.ecode, 0x00, 0x00};
    const Echo echo = expected_echo(code);
    if (echo != Echo::Nothing) {
      want[2] = echo == Echo::DdpAndRdmap ? 0xe0 : 0xc0;  // M|D(|R)
      want.push_back(0x00);
      want.push_back(46);  // DDP Segment Length
      want.insert(want.end(), ddp.begin(), ddp.end());
    }
    if (echo == Echo::DdpAndRdmap) want.insert(want.end(), rdmap.begin(), rdmap.end());
    EXPECT_EQ(encoded(make_terminate(code, ddp, rdmap, 46)), want) << errc_name(code);
    // Without the offending headers, only the triple.
    const Bytes triple{want[0], want[1], 0x00, 0x00};
    EXPECT_EQ(encoded(make_terminate(code)), triple) << errc_name(code);
  }
}

TEST(MakeTerminate, LlpErrorCarriesNoHeaders) {
  // RFC 5044 §8 / RFC 5040 §4.8: Layer 2 (LLP), EType 0, code 2 (CRC), M = D = R = 0.
  const Bytes ddp = tagged_write_header();
  const auto t = make_terminate(Errc::MpaCrcError, ddp, {}, 20);
  EXPECT_EQ(encoded(t), (Bytes{0x20, 0x02, 0x00, 0x00}));
}

TEST(MakeTerminate, ConnectionManagerRejectingAReplySendsTheBareTriple) {
  // What the initiator sent for an unacceptable MPA Reply: the LLP triple alone.
  const auto t = make_terminate(Errc::MpaNoMatchingRtr);
  EXPECT_EQ(encoded(t), (Bytes{0x20, 0x07, 0x00, 0x00}));
}

TEST(MakeTerminate, LocalCatastrophicCarriesNoHeaders) {
  const Bytes ddp = read_request_header();
  EXPECT_EQ(encoded(make_terminate(Errc::DdpLocalCatastrophic, ddp, {}, 20)),
            (Bytes{0x10, 0x00, 0x00, 0x00}));
  EXPECT_EQ(encoded(make_terminate(Errc::RdmapLocalCatastrophic, ddp, read_request_body(), 20)),
            (Bytes{0x00, 0x00, 0x00, 0x00}));
}

TEST(MakeTerminate, DdpTaggedErrorEchoesTheTaggedHeader) {
  // As the trace generator's Terminate: DDP, tagged buffer (EType 1), invalid STag (0), M and
  // D set, the DDP Segment Length, then the 14-octet tagged header.
  const Bytes ddp = tagged_write_header();
  const auto t = make_terminate(Errc::DdpTaggedInvalidStag, ddp, {}, 17);
  Bytes want{0x11, 0x00, 0xc0, 0x00, 0x00, 17};
  want.insert(want.end(), ddp.begin(), ddp.end());
  EXPECT_EQ(encoded(t), want);
  EXPECT_FALSE(t.r);
}

TEST(MakeTerminate, DdpUntaggedErrorEchoesTheUntaggedHeader) {
  const Bytes ddp = read_request_header();
  const auto t = make_terminate(Errc::DdpUntaggedNoBuffer, ddp, read_request_body(), 46);
  Bytes want{0x12, 0x02, 0xc0, 0x00, 0x00, 46};
  want.insert(want.end(), ddp.begin(), ddp.end());
  EXPECT_EQ(encoded(t), want);
}

TEST(MakeTerminate, VersionAndOpcodeErrorsEchoNothing) {
  const Bytes ddp = read_request_header();
  const Bytes rdmap = read_request_body();
  for (auto code : {Errc::DdpTaggedVersion, Errc::DdpUntaggedVersion, Errc::RdmapVersion,
                    Errc::RdmapUnexpectedOpcode}) {
    const auto t = make_terminate(code, ddp, rdmap, 46);
    EXPECT_FALSE(t.m || t.d || t.r) << errc_name(code);
    EXPECT_EQ(encoded(t).size(), kTerminateControlSize) << errc_name(code);
  }
}

TEST(MakeTerminate, RdmapRemoteProtectionEchoesTheReadRequestHeaderToo) {
  const Bytes ddp = read_request_header();
  const Bytes rdmap = read_request_body();
  const auto t = make_terminate(Errc::RdmapInvalidStag, ddp, rdmap, 46);
  Bytes want{0x01, 0x00, 0xe0, 0x00, 0x00, 46};
  want.insert(want.end(), ddp.begin(), ddp.end());
  want.insert(want.end(), rdmap.begin(), rdmap.end());
  EXPECT_EQ(encoded(t), want);
  // Without a whole 28-octet RDMAP header, only the DDP header.
  const Bytes part(rdmap.begin(), rdmap.begin() + 12);
  EXPECT_FALSE(make_terminate(Errc::RdmapInvalidStag, ddp, part, 46).r);
}

TEST(MakeTerminate, RdmapRemoteOperationEchoesOnlyTheDdpHeader) {
  const Bytes ddp = read_request_header();
  const auto t = make_terminate(Errc::RdmapOpUnspecified, ddp, read_request_body(), 46);
  Bytes want{0x02, 0xff, 0xc0, 0x00, 0x00, 46};
  want.insert(want.end(), ddp.begin(), ddp.end());
  EXPECT_EQ(encoded(t), want);
}

TEST(MakeTerminate, WithoutTheDdpHeaderNothingIsEchoed) {
  const auto t = make_terminate(Errc::RdmapInvalidStag, {}, read_request_body(), 46);
  EXPECT_EQ(encoded(t), (Bytes{0x01, 0x00, 0x00, 0x00}));
}

}  // namespace
}  // namespace iwarp::rdmap
