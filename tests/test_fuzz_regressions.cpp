// Bugs the fuzz targets in fuzz/ found, one test each (each fails without its fix). The crash
// inputs themselves are in fuzz/regressions/<target>/ and run in `bash scripts/fuzz.sh --smoke`.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "enlarge/wire_format.hpp"
#include "mpa/connection_decoder.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/mpa_frame.hpp"
#include "mpa/negotiation.hpp"
#include "mpa/stream_decoder.hpp"

using namespace iwarp;
using namespace iwarp::mpa;

namespace {

struct Seen final : StreamVisitor {
  int frames = 0, fpdus = 0;
  std::vector<WireError> errors;
  void on_mpa_frame(const MpaFrame&, std::uint64_t, std::size_t) override { ++frames; }
  void on_fpdu(const Fpdu&) override { ++fpdus; }
  void on_error(const WireError& e) override { errors.push_back(e); }
};

// A 20-octet header that is no MPA frame, whose PD_Length field claims `pd` more octets.
Bytes not_a_frame(std::uint16_t pd) {
  Bytes b(kFrameHeaderSize, 0x96);
  store_be16(b.data() + 18, pd);
  return b;
}

}  // namespace

// fuzz/regressions/stream_decoder/wrong-key-waits-for-pd-length: with a whole header in hand
// the decoder used to wait for PD_Length more octets before checking the key, so the same
// stream failed at once when fed in small pieces and not at all when fed in one.
TEST(FuzzRegressions, WrongKeyFailsAtOnceWhateverTheChunking) {
  for (std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{20}}) {
    SCOPED_TRACE(piece);
    const Bytes wire = not_a_frame(400);
    StreamDecoder dec(FrameKind::Request);
    Seen seen;
    for (std::size_t at = 0; at < wire.size(); at += piece)
      dec.feed(ByteSpan(wire).subspan(at, std::min(piece, wire.size() - at)), seen);
    ASSERT_EQ(seen.errors.size(), 1u);
    EXPECT_EQ(seen.errors[0].code, Errc::MpaBadReqRep);
    EXPECT_EQ(seen.errors[0].offset, 0u);
    EXPECT_EQ(dec.state(), StreamDecoder::State::Failed);
  }
}

// The swapped key (a Reply where a Request belongs) is still named as such.
TEST(FuzzRegressions, SwappedKeyIsNamed) {
  MpaFrame reply;
  reply.kind = FrameKind::Reply;
  StreamDecoder dec(FrameKind::Request);
  Seen seen;
  dec.feed(reply.encode(), seen);
  ASSERT_EQ(seen.errors.size(), 1u);
  EXPECT_NE(seen.errors[0].detail.find("got \"MPA ID Rep Frame\""), std::string::npos)
      << seen.errors[0].detail;
}

namespace {

struct ConnSeen final : ConnectionVisitor {
  std::vector<WireError> errors[2];
  int fpdus[2] = {0, 0};
  void on_mpa_frame(Direction, const MpaFrame&, std::uint64_t, std::size_t) override {}
  void on_negotiated(const ConnectionParams&) override {}
  void on_fpdu(Direction d, const Fpdu&) override { ++fpdus[static_cast<int>(d)]; }
  void on_error(Direction d, const WireError& e) override {
    errors[static_cast<int>(d)].push_back(e);
  }
};

}  // namespace

// fuzz/regressions/stream_decoder/bytes-before-a-rejecting-reply: octets the initiator sent
// after its Request were held until the Reply fixed the framing; when the Reply rejected the
// connection they were never looked at again, so the violation (RFC 5044 §7.1: a rejected
// connection carries no FPDUs) went unreported unless more octets came after the Reply. With
// the Reply decoded first, the Request's own decoder ignored the close() (its state was set
// after the frame's callback) and held the octets for good.
TEST(FuzzRegressions, OctetsHeldBeforeARejectingReplyAreAViolation) {
  const Policy p;
  const MpaFrame req = make_request(p);
  const MpaFrame rej = make_reject(req);
  Bytes from_initiator = req.encode();
  FpduEncoder enc({false, false});
  const Bytes ulpdu(20, 0x11);
  ASSERT_TRUE(enc.encode(ulpdu, from_initiator));
  for (bool initiator_first : {true, false}) {
    SCOPED_TRACE(initiator_first);
    ConnectionDecoder dec;
    ConnSeen seen;
    if (initiator_first) {
      dec.feed(Direction::FromInitiator, from_initiator, seen);
      dec.feed(Direction::FromResponder, rej.encode(), seen);
    } else {
      dec.feed(Direction::FromResponder, rej.encode(), seen);
      dec.feed(Direction::FromInitiator, from_initiator, seen);
    }
    ASSERT_EQ(seen.errors[0].size(), 1u);
    EXPECT_EQ(seen.errors[0][0].code, Errc::MpaBadReqRep);
    EXPECT_EQ(seen.errors[0][0].offset, req.wire_size());
    EXPECT_EQ(seen.fpdus[0], 0);
    EXPECT_TRUE(seen.errors[1].empty());
  }
}

// fuzz/regressions/enlarge_wire/nak-reserved-octets: an EnlargeNak whose octets 9-11 (zero
// in docs/enlarge.md) were set decoded as if they were zero.
TEST(FuzzRegressions, EnlargeNakReservedOctetsMustBeZero) {
  using namespace iwarp::enlarge;
  Message m;
  m.seq = 7;
  m.body = EnlargeNak{NakReason::Budget, 4096};
  Bytes wire = encode(m);
  ASSERT_TRUE(decode(wire).has_value());
  for (std::size_t i : {9u, 10u, 11u}) {
    Bytes bad = wire;
    bad[i] = 0x04;
    auto r = decode(bad);
    ASSERT_FALSE(r.has_value()) << "octet " << i;
    EXPECT_NE(r.error().what.find("9-11"), std::string::npos) << r.error().what;
  }
}
