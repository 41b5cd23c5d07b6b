#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "test_support.hpp"

namespace iwarp::mpa {
namespace {

using test::Streams;
using test::Transcript;

std::vector<std::string> per_direction(const Transcript& t) {
  std::vector<std::string> out;
  for (const auto& l : t.lines)
    if (l.rfind("negotiated", 0) != 0) out.push_back(l);
  // Keep each direction's order, group by direction.
  std::stable_sort(out.begin(), out.end(),
                   [](const std::string& a, const std::string& b) { return a[0] < b[0]; });
  return out;
}

// Feeds both streams with chunk sizes drawn by `cut`, choosing the direction by `pick`.
template <class Cut, class Pick>
Transcript run(const Streams& s, Cut cut, Pick pick) {
  Transcript t;
  ConnectionDecoder dec;
  std::size_t off[2] = {0, 0};
  while (off[0] < s.dir[0].size() || off[1] < s.dir[1].size()) {
    int d = pick();
    if (off[d] >= s.dir[d].size()) d ^= 1;
    std::size_t n = std::min<std::size_t>(cut(), s.dir[d].size() - off[d]);
    dec.feed(static_cast<Direction>(d), ByteSpan(s.dir[d]).subspan(off[d], n), t);
    off[d] += n;
  }
  return t;
}

struct Case {
  std::uint8_t rev;
  CrcPolicy crc;
  MarkerPolicy markers;
};

class StreamDecoderChunking : public ::testing::TestWithParam<Case> {};

TEST_P(StreamDecoderChunking, WholeBuffersOneByteAndRandomChunksGiveIdenticalResults) {
  Policy p;
  p.revision = GetParam().rev;
  p.crc = GetParam().crc;
  p.markers = GetParam().markers;
  Streams s = test::make_streams(p, p, 1234, 60);
  ASSERT_EQ(s.params.crc, p.crc == CrcPolicy::Required);

  // Whole streams, initiator first (its FPDUs wait for the Reply to fix their framing).
  Transcript whole = run(
      s, [] { return SIZE_MAX; }, [flip = 0]() mutable { return flip++ ? 1 : 0; });
  ASSERT_EQ(whole.errors, 0) << whole.lines.back();
  EXPECT_GT(whole.fpdus, 60);
  auto ref = per_direction(whole);

  Transcript bytes = run(
      s, [] { return std::size_t{1}; }, [i = 0]() mutable { return (i++) & 1; });
  EXPECT_EQ(per_direction(bytes), ref);

  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    Transcript t = run(
        s, [&] { return std::size_t{1} + rng() % (seed % 2 ? 7 : 3000); },
        [&] { return static_cast<int>(rng() % 2); });
    ASSERT_EQ(per_direction(t), ref) << "seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(AllFramings, StreamDecoderChunking,
                         ::testing::Values(Case{1, CrcPolicy::Optional, MarkerPolicy::Optional},
                                           Case{1, CrcPolicy::Required, MarkerPolicy::Optional},
                                           Case{1, CrcPolicy::Optional, MarkerPolicy::Required},
                                           Case{1, CrcPolicy::Required, MarkerPolicy::Required},
                                           Case{2, CrcPolicy::Required, MarkerPolicy::Required},
                                           Case{2, CrcPolicy::Optional, MarkerPolicy::Optional}),
                         [](const auto& p) {
                           return "rev" + std::to_string(p.param.rev) +
                                  (p.param.crc == CrcPolicy::Required ? "_crc" : "_nocrc") +
                                  (p.param.markers == MarkerPolicy::Required ? "_markers"
                                                                             : "_nomarkers");
                         });

Streams crc_marker_streams() {
  Policy p;
  p.crc = CrcPolicy::Required;
  p.markers = MarkerPolicy::Required;
  return test::make_streams(p, p, 99, 20);
}

Transcript decode_all(const Streams& s) {
  Transcript t;
  ConnectionDecoder dec;
  dec.feed(Direction::FromInitiator, s.dir[0], t);
  dec.feed(Direction::FromResponder, s.dir[1], t);
  return t;
}

TEST(StreamDecoderErrors, FlippedPayloadBitIsACrcErrorAtThatFpdu) {
  Streams s = crc_marker_streams();
  // Flip a bit well inside the initiator's stream (past the frame).
  s.dir[0][s.dir[0].size() / 2] ^= 0x10;
  Transcript t = decode_all(s);
  ASSERT_TRUE(t.last_error);
  EXPECT_EQ(t.last_error->code, Errc::MpaCrcError);
  EXPECT_EQ(term_code(Errc::MpaCrcError), (TermCode{TermLayer::Llp, 0, 0x02}));
  EXPECT_NE(std::string(t.last_error->rule).find("RFC 5044"), std::string::npos);
}

TEST(StreamDecoderErrors, CorruptMarkerIsAFramingError) {
  Streams s = crc_marker_streams();
  // Find the frame length: the first marker sits right after the MPA Request.
  auto req = decode_frame(ByteSpan(s.dir[0]).first(kFrameHeaderSize + load_be16(&s.dir[0][18])),
                          FrameKind::Request);
  ASSERT_TRUE(req);
  std::size_t origin = req->wire_size();
  // The second marker: FPDUPTR changed.
  s.dir[0][origin + 512 + 3] ^= 0x01;
  Transcript t = decode_all(s);
  ASSERT_TRUE(t.last_error);
  EXPECT_EQ(t.last_error->code, Errc::MpaMarkerError);
  // The error names the stream offset of the bad marker itself.
  EXPECT_EQ(t.last_error->offset, origin + 512);
  EXPECT_NE(t.last_error->detail.find("FPDUPTR"), std::string::npos);
}

TEST(StreamDecoderErrors, EveryMarkerFieldIsChecked) {
  Streams base = crc_marker_streams();
  auto req =
      decode_frame(ByteSpan(base.dir[0]).first(kFrameHeaderSize + load_be16(&base.dir[0][18])),
                   FrameKind::Request);
  ASSERT_TRUE(req);
  const std::size_t origin = req->wire_size();
  struct Poke {
    std::size_t at;  // octet of the stream to change
    std::uint8_t xor_with;
    const char* detail;
  };
  // The leading marker's FPDUPTR (0 -> 4), a reserved octet of the leading marker, a reserved
  // octet of a later marker.
  for (Poke p : {Poke{origin + 3, 0x04, "FPDUPTR"}, Poke{origin + 0, 0x80, "reserved"},
                 Poke{origin + 1024 + 1, 0x01, "reserved"}}) {
    Streams s = base;
    s.dir[0][p.at] ^= p.xor_with;
    Transcript t = decode_all(s);
    ASSERT_TRUE(t.last_error) << p.at;
    EXPECT_EQ(t.last_error->code, Errc::MpaMarkerError) << t.last_error->to_string();
    EXPECT_NE(t.last_error->detail.find(p.detail), std::string::npos) << t.last_error->detail;
    EXPECT_EQ(t.last_error->offset, p.at - p.at % 4);
  }
}

TEST(StreamDecoderErrors, WrongKeyIsReportedOnItsFirstOctet) {
  struct V : StreamVisitor {
    std::optional<WireError> e;
    void on_mpa_frame(const MpaFrame&, std::uint64_t, std::size_t) override {}
    void on_fpdu(const Fpdu&) override {}
    void on_error(const WireError& err) override { e = err; }
  } v;
  StreamDecoder d(FrameKind::Request);
  std::string s = "MPA ID Rep Frame";  // a Reply where a Request belongs
  for (char c : s) d.feed(ByteSpan(reinterpret_cast<const std::uint8_t*>(&c), 1), v);
  ASSERT_TRUE(v.e);
  EXPECT_EQ(v.e->code, Errc::MpaBadReqRep);
  EXPECT_EQ(d.state(), StreamDecoder::State::Failed);
}

TEST(StreamDecoderErrors, NothingAfterARejectingReply) {
  Policy init;
  init.crc = CrcPolicy::Required;
  Policy resp;
  resp.crc = CrcPolicy::Off;  // refuses
  auto n = negotiate(init, resp);
  ASSERT_TRUE(n.reply.reject);
  Transcript t;
  ConnectionDecoder dec;
  dec.feed(Direction::FromInitiator, n.request.encode(), t);
  dec.feed(Direction::FromResponder, n.reply.encode(), t);
  EXPECT_EQ(t.errors, 0);
  Bytes junk(24, 0);
  dec.feed(Direction::FromInitiator, junk, t);
  ASSERT_TRUE(t.last_error);
  EXPECT_EQ(t.last_error->code, Errc::MpaBadReqRep);
}

TEST(StreamDecoderErrors, HeldBytesBeforeTheReplyAreBounded) {
  struct V : StreamVisitor {
    std::optional<WireError> e;
    void on_mpa_frame(const MpaFrame&, std::uint64_t, std::size_t) override {}
    void on_fpdu(const Fpdu&) override {}
    void on_error(const WireError& err) override { e = err; }
  } v;
  StreamDecoder d(FrameKind::Request, {.max_pending = 100});
  d.feed(make_request(Policy{}).encode(), v);
  EXPECT_EQ(d.state(), StreamDecoder::State::AwaitFraming);
  Bytes more(101, 0);
  d.feed(more, v);
  ASSERT_TRUE(v.e);
  EXPECT_EQ(v.e->code, Errc::MpaBadReqRep);
}

}  // namespace
}  // namespace iwarp::mpa
