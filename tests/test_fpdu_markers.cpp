#include <gtest/gtest.h>

#include <random>

#include "mpa/crc32c.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/stream_decoder.hpp"

namespace iwarp::mpa {
namespace {

TEST(FpduFraming, PadMakesLengthPlusUlpduAMultipleOfFour) {
  EXPECT_EQ(pad_length(0), 2u);
  EXPECT_EQ(pad_length(1), 1u);
  EXPECT_EQ(pad_length(2), 0u);
  EXPECT_EQ(pad_length(3), 3u);
  EXPECT_EQ(pad_length(1442), 0u);  // siw's full-MSS FPDU: 2 + 1442 + 4 = 1448
  for (std::size_t n = 0; n < 100; ++n) EXPECT_EQ((n + 2 + pad_length(n)) % 4, 0u);
  EXPECT_EQ(fpdu_length(1442), 1448u);
  EXPECT_EQ(fpdu_length(16), 24u);
}

TEST(FpduFraming, MulpduFollowsRfc5044) {
  // EMSS 1448 (MSS 1460 with timestamps): siw sends 1442-octet ULPDUs.
  EXPECT_EQ(mulpdu(1448, false), 1442u);
  // With markers: ceil(1448 / 512) = 3 markers of room.
  EXPECT_EQ(mulpdu(1448, true), 1448u - (6 + 12));
  EXPECT_EQ(mulpdu(1460, false), 1454u);
  EXPECT_EQ(mulpdu(1460, true), 1460u - (6 + 12));
  EXPECT_EQ(mulpdu(1024, true), 1024u - (6 + 8));  // exactly two intervals
  EXPECT_EQ(mulpdu(1025, true), 1025u - (6 + 12 + 1));
  EXPECT_EQ(mulpdu(5, false), 0u);
  // Whatever the position, an FPDU of MULPDU octets fits the EMSS with its markers.
  for (std::size_t emss : {536u, 1024u, 1448u, 1460u, 9000u, 65495u}) {
    std::size_t logical = fpdu_length(mulpdu(emss, true));
    for (std::uint64_t pos = 0; pos < 1024; pos += 4)
      ASSERT_LE(marked_length(pos, logical).wire, emss) << emss << " at " << pos;
  }
}

TEST(FpduFraming, MarkedLengthAtAndAcrossBoundaries) {
  // An FPDU starting exactly on a marker position carries a leading marker.
  EXPECT_EQ(marked_length(0, 24).markers, 1u);
  EXPECT_EQ(marked_length(0, 24).wire, 28u);
  // Ending exactly at a marker position: the marker belongs to the next FPDU.
  EXPECT_EQ(marked_length(488, 24).markers, 0u);
  // A marker due right after the pad, before the CRC, belongs to this FPDU.
  EXPECT_EQ(marked_length(492, 24).markers, 1u);
  EXPECT_EQ(marked_length(492, 24).wire, 28u);
  // Spanning two boundaries.
  EXPECT_EQ(marked_length(4, 1100).markers, 2u);  // at 512 and 1024
  EXPECT_EQ(marked_length(4, 1100).wire, 1108u);
}

// Encodes FPDUs of many sizes back to back with markers, then checks every marker in the raw
// bytes: one at each 512-octet position, reserved zero, FPDUPTR pointing at its FPDU.
TEST(FpduFraming, MarkersSitEvery512OctetsAndPointBackToTheirFpdu) {
  std::mt19937 rng(3);
  FpduEncoder enc({.crc = true, .markers = true});
  Bytes wire;
  std::vector<std::pair<std::size_t, std::size_t>> fpdus;  // start, wire length
  for (int i = 0; i < 300; ++i) {
    Bytes ulpdu(rng() % 1500);
    for (auto& b : ulpdu) b = static_cast<std::uint8_t>(rng());
    std::size_t start = wire.size();
    auto n = enc.encode(ulpdu, wire);
    ASSERT_TRUE(n);
    fpdus.emplace_back(start, *n);
    ASSERT_EQ(wire.size() % 4, 0u);
  }
  std::size_t k = 0;
  for (std::size_t pos = 0; pos < wire.size(); pos += kMarkerInterval) {
    while (fpdus[k].first + fpdus[k].second <= pos) ++k;
    EXPECT_EQ(load_be16(&wire[pos]), 0u) << "reserved at " << pos;
    EXPECT_EQ(load_be16(&wire[pos + 2]), pos - fpdus[k].first) << "FPDUPTR at " << pos;
    // The CRC covers the markers inside its FPDU (RFC 5044 §6.2).
    auto [s, len] = fpdus[k];
    EXPECT_EQ(load_le32(&wire[s + len - 4]), crc32c(ByteSpan(wire).subspan(s, len - 4)));
  }
  EXPECT_GT(k, 100u);
}

TEST(FpduFraming, EncodeDecodeRoundTripWithAndWithoutMarkersAndCrc) {
  std::mt19937 rng(11);
  for (bool crc : {false, true}) {
    for (bool markers : {false, true}) {
      FpduEncoder enc({crc, markers});
      Bytes wire;
      std::vector<Bytes> sent;
      for (int i = 0; i < 200; ++i) {
        Bytes u(rng() % 2000);
        for (auto& b : u) b = static_cast<std::uint8_t>(rng());
        ASSERT_TRUE(enc.encode(u, wire));
        sent.push_back(std::move(u));
      }
      struct V : StreamVisitor {
        std::vector<Bytes> got;
        std::vector<CrcStatus> crcs;
        int errors = 0;
        void on_mpa_frame(const MpaFrame&, std::uint64_t, std::size_t) override {}
        void on_fpdu(const Fpdu& f) override {
          got.emplace_back(f.ulpdu.begin(), f.ulpdu.end());
          crcs.push_back(f.crc);
        }
        void on_error(const WireError&) override { ++errors; }
      } v;
      StreamDecoder dec(FramingConfig{crc, markers});
      dec.feed(wire, v);
      EXPECT_EQ(v.errors, 0);
      EXPECT_EQ(v.got, sent) << "crc " << crc << " markers " << markers;
      for (auto c : v.crcs) EXPECT_EQ(c, crc ? CrcStatus::Good : CrcStatus::NotChecked);
      EXPECT_EQ(dec.pending(), 0u);
    }
  }
}

TEST(FpduFraming, CrcFieldIsZeroWhenCrcIsOff) {
  FpduEncoder enc({.crc = false, .markers = false});
  Bytes wire;
  Bytes u(10, 0xAB);
  ASSERT_TRUE(enc.encode(u, wire));
  ASSERT_EQ(wire.size(), 16u);
  EXPECT_EQ(load_be32(&wire[12]), 0u);
  EXPECT_EQ(load_be16(&wire[0]), 10u);
}

TEST(FpduFraming, RefusesUlpduOver64KiB) {
  FpduEncoder enc({});
  Bytes wire;
  Bytes u(70000);
  auto r = enc.encode(u, wire);
  ASSERT_FALSE(r);
  EXPECT_NE(std::string(r.error().rule).find("RFC 5044"), std::string::npos);
}

}  // namespace
}  // namespace iwarp::mpa
