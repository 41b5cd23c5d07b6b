// The receiver's FPDU reader (mpa/fpdu_reader): for every framing (CRC on/off, markers on/off)
// and any cut of the stream (whole, one octet at a time, random, and "direct" reads straight
// into the placement target), it delivers every ULPDU intact, removes and checks the markers,
// checks the CRC, and stops with the RFC's error on a bad CRC or a broken marker.
#include <gtest/gtest.h>

#include <random>

#include "mpa/fpdu.hpp"
#include "mpa/fpdu_reader.hpp"

using namespace iwarp;
using namespace iwarp::mpa;

namespace {

// Collects ULPDUs: the head, then the rest placed into a buffer of its own.
struct Collector : FpduSink {
  std::vector<Bytes> ulpdus;
  std::vector<FpduTrailer> trailers;
  std::optional<WireError> error;
  Bytes rest;
  bool discard = false;
  MutableByteSpan on_fpdu_head(const FpduHead& h) override {
    ulpdus.emplace_back(h.head.begin(), h.head.end());
    rest.assign(h.ulpdu_length - h.head.size(), 0);
    if (discard) return {};
    return rest;
  }
  void on_fpdu_end(const FpduTrailer& t) override {
    trailers.push_back(t);
    if (!discard) ulpdus.back().insert(ulpdus.back().end(), rest.begin(), rest.end());
  }
  void on_framing_error(const WireError& e) override { error = e; }
};

struct Stream {
  Bytes wire;
  std::vector<Bytes> ulpdus;
};

Stream make_stream(FramingConfig cfg, std::uint32_t seed, int count, std::size_t max_len) {
  std::mt19937 rng(seed);
  Stream s;
  FpduEncoder enc(cfg);
  for (int i = 0; i < count; ++i) {
    std::size_t len = rng() % (max_len + 1);
    if (i % 7 == 3) len = max_len;  // some at the largest size
    Bytes u(len);
    for (auto& b : u) b = static_cast<std::uint8_t>(rng());
    EXPECT_TRUE(enc.encode(u, s.wire));
    s.ulpdus.push_back(std::move(u));
  }
  return s;
}

enum class Cut { Whole, OneOctet, Random, Direct };

Collector run(const Stream& s, FramingConfig cfg, Cut cut, std::uint32_t seed) {
  Collector c;
  FpduReader r(cfg);
  std::mt19937 rng(seed);
  ByteSpan in(s.wire);
  while (!in.empty() && !r.failed()) {
    std::size_t n = in.size();
    if (cut == Cut::OneOctet) n = 1;
    if (cut == Cut::Random || cut == Cut::Direct)
      n = std::min<std::size_t>(in.size(), 1 + rng() % 700);
    if (cut == Cut::Direct) {
      auto win = r.direct_window();
      if (!win.empty()) {
        // What a socket read straight into the target memory would do.
        n = std::min(n, win.size());
        std::copy_n(in.begin(), n, win.begin());
        r.commit_direct(n, c);
        in = in.subspan(n);
        continue;
      }
    }
    r.feed(in.first(n), c);
    in = in.subspan(n);
  }
  return c;
}

struct Case {
  bool crc, markers;
};

class FpduReaderAllFramings : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(FpduReaderAllFramings, EveryCutDeliversTheSameUlpdus) {
  const FramingConfig cfg{GetParam().crc, GetParam().markers};
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    const auto s = make_stream(cfg, seed, 40, seed % 2 ? 1500 : 9000);
    for (Cut cut : {Cut::Whole, Cut::OneOctet, Cut::Random, Cut::Direct}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << " cut " << int(cut));
      auto c = run(s, cfg, cut, seed);
      ASSERT_FALSE(c.error) << c.error->to_string();
      ASSERT_EQ(c.ulpdus.size(), s.ulpdus.size());
      for (std::size_t i = 0; i < s.ulpdus.size(); ++i) ASSERT_EQ(c.ulpdus[i], s.ulpdus[i]) << i;
      for (const auto& t : c.trailers)
        EXPECT_EQ(t.crc, cfg.crc ? CrcStatus::Good : CrcStatus::NotChecked);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Mpa, FpduReaderAllFramings,
                         ::testing::Values(Case{false, false}, Case{true, false}, Case{false, true},
                                           Case{true, true}),
                         [](const auto& p) {
                           return std::string(p.param.crc ? "crc" : "nocrc") +
                                  (p.param.markers ? "_markers" : "_nomarkers");
                         });

TEST(FpduReader, DiscardedPayloadStillCountsForTheCrc) {
  const FramingConfig cfg{true, true};
  const auto s = make_stream(cfg, 7, 10, 3000);
  Collector c;
  c.discard = true;
  FpduReader r(cfg);
  r.feed(s.wire, c);
  EXPECT_FALSE(c.error);
  ASSERT_EQ(c.trailers.size(), 10u);
  for (const auto& t : c.trailers) EXPECT_EQ(t.crc, CrcStatus::Good);
}

TEST(FpduReader, BadCrcStopsWithLlpError) {
  const FramingConfig cfg{true, false};
  auto s = make_stream(cfg, 3, 5, 200);
  // Flip one payload octet of the third FPDU.
  std::size_t off = 0;
  for (int i = 0; i < 2; ++i) off += fpdu_length(s.ulpdus[i].size());
  s.wire[off + 3] ^= 0x40;
  auto c = run(s, cfg, Cut::Random, 1);
  ASSERT_TRUE(c.error);
  EXPECT_EQ(c.error->code, Errc::MpaCrcError);
  EXPECT_EQ(term_code(c.error->code), (TermCode{TermLayer::Llp, 0, 0x02}));
  EXPECT_EQ(c.trailers.size(), 3u);
  EXPECT_EQ(c.trailers.back().crc, CrcStatus::Bad);
}

TEST(FpduReader, BrokenMarkerStopsWithMarkerError) {
  const FramingConfig cfg{false, true};
  auto s = make_stream(cfg, 5, 20, 1500);
  s.wire[512 + 3] ^= 0x01;  // the FPDUPTR of the marker at stream offset 512
  auto c = run(s, cfg, Cut::Whole, 1);
  ASSERT_TRUE(c.error);
  EXPECT_EQ(c.error->code, Errc::MpaMarkerError);
  EXPECT_NE(c.error->detail.find("stream offset 512"), std::string::npos) << c.error->detail;
}

TEST(FpduReader, DirectWindowStopsAtTheNextMarker) {
  const FramingConfig cfg{false, true};
  FpduEncoder enc(cfg);
  Bytes wire, u(4000, 0xAB);
  ASSERT_TRUE(enc.encode(u, wire));
  Collector c;
  FpduReader r(cfg);
  // Marker (4) + length (2) + 72 head octets: then placement, up to the marker at 512.
  r.feed(ByteSpan(wire).first(4 + 2 + kFpduHeadSize), c);
  auto win = r.direct_window();
  EXPECT_EQ(win.size(), 512u - (4 + 2 + kFpduHeadSize));
  EXPECT_EQ(win.data(), c.rest.data());
}
