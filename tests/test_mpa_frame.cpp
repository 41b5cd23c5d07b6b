// MPA Request/Reply frames (RFC 5044 §7.1) and the RFC 6581 enhanced private-data prefix:
// byte-exact encodings (including siw's frames from the captures in pcap_traces/siw), round trips
// over every flag combination, and every decode error.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "mpa/mpa_frame.hpp"

namespace iwarp::mpa {
namespace {

// ---- hand-written wire bytes, independent of the encoder -------------------------------------

Bytes key_bytes(std::string_view key) {
  return Bytes(key.begin(), key.end());
}

// key ‖ flags ‖ rev ‖ PD_Length(be16) ‖ pd — PD_Length given explicitly so it can lie.
Bytes raw_frame(std::string_view key, std::uint8_t flags, std::uint8_t rev, std::uint16_t pd_len,
                const Bytes& pd) {
  Bytes b = key_bytes(key);
  b.push_back(flags);
  b.push_back(rev);
  b.push_back(static_cast<std::uint8_t>(pd_len >> 8));
  b.push_back(static_cast<std::uint8_t>(pd_len & 0xff));
  b.insert(b.end(), pd.begin(), pd.end());
  return b;
}

Bytes raw_frame(std::string_view key, std::uint8_t flags, std::uint8_t rev, const Bytes& pd) {
  return raw_frame(key, flags, rev, static_cast<std::uint16_t>(pd.size()), pd);
}

Bytes concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Bytes pattern(std::size_t n, std::uint8_t seed = 0) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(seed + i * 7 + 3);
  return b;
}

std::string_view key_of(FrameKind k) {
  return k == FrameKind::Request ? kRequestKey : kReplyKey;
}

constexpr RtrMask kSend = static_cast<RtrMask>(RtrType::Send);
constexpr RtrMask kWrite = static_cast<RtrMask>(RtrType::Write);
constexpr RtrMask kRead = static_cast<RtrMask>(RtrType::Read);

// Checks that `bytes` is rejected as an invalid MPA Request/Reply naming an RFC rule.
void expect_bad(const Bytes& bytes, FrameKind kind, std::string_view what) {
  SCOPED_TRACE(what);
  auto r = decode_frame(bytes, kind);
  ASSERT_FALSE(r.has_value()) << "decoded: " << describe(*r);
  EXPECT_EQ(r.error().code, Errc::MpaBadReqRep);
  ASSERT_NE(r.error().rule, nullptr);
  EXPECT_NE(std::string_view(r.error().rule).find("RFC"), std::string_view::npos) << r.error().rule;
  EXPECT_EQ(term_code(r.error().code), (TermCode{TermLayer::Llp, 0, 0x04}));
}

// Encodes `f`, checks the bytes against `want`, decodes them back and checks equality.
void expect_wire(const MpaFrame& f, const Bytes& want) {
  Bytes got = f.encode();
  EXPECT_EQ(hex(got, 2048), hex(want, 2048));
  EXPECT_EQ(f.wire_size(), want.size());
  ASSERT_GE(want.size(), kFrameHeaderSize);
  EXPECT_EQ(frame_size_from_header(ByteSpan(want).first(kFrameHeaderSize)), want.size());
  EXPECT_EQ(frame_size_from_header(ByteSpan(want).first(kFrameHeaderSize - 1)), std::nullopt);
  auto d = decode_frame(want, f.kind);
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  EXPECT_EQ(*d, f) << "decoded " << describe(*d) << " want " << describe(f);
}

// ---- siw's frames, byte for byte from the captures -------------------------------------------

TEST(MpaFrameSiwBytes, V2RequestFromCapture) {
  // hostpeer_eth0_siw_client.pcap: stock siw initiator. Flags 0x10 (H=1, M=0, C=0, R=0), Rev 2,
  // PD_Length 4, IRD 1 / ORD 1.
  const Bytes want = {'M', 'P', 'A', ' ', 'I',  'D',  ' ',  'R',  'e',  'q',  ' ',  'F',
                      'r', 'a', 'm', 'e', 0x10, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01};
  MpaFrame f;
  f.kind = FrameKind::Request;
  f.enhanced = true;
  f.revision = 2;
  f.params = EnhancedParams{.peer_to_peer = false, .ird = 1, .rtr = 0, .ord = 1};
  expect_wire(f, want);
  EXPECT_EQ(describe(f), "MPA Request rev 2 M=0 C=0 R=0 H=1 IRD 1 ORD 1 pd 0");
}

TEST(MpaFrameSiwBytes, CrcReplyFromCapture) {
  // hostpeer_eth0_siw_client.pcap: the host responder answers C=1 (flags 0x50), IRD 1 / ORD 1.
  const Bytes want = raw_frame(kReplyKey, 0x50, 2, {0x00, 0x01, 0x00, 0x01});
  MpaFrame f;
  f.kind = FrameKind::Reply;
  f.crc = true;
  f.enhanced = true;
  f.revision = 2;
  f.params = EnhancedParams{.peer_to_peer = false, .ird = 1, .rtr = 0, .ord = 1};
  expect_wire(f, want);
}

TEST(MpaFrameSiwBytes, P2PRequestFromCapture) {
  // siw_p2p.pcap: pd 80 01 c0 01 = A=1 B=0 IRD 1 ‖ C=1 (Write RTR) D=1 (Read RTR) ORD 1.
  const Bytes want = raw_frame(kRequestKey, 0x10, 2, {0x80, 0x01, 0xc0, 0x01});
  MpaFrame f;
  f.kind = FrameKind::Request;
  f.enhanced = true;
  f.revision = 2;
  f.params = EnhancedParams{.peer_to_peer = true, .ird = 1, .rtr = kWrite | kRead, .ord = 1};
  expect_wire(f, want);
  EXPECT_EQ(describe(f), "MPA Request rev 2 M=0 C=0 R=0 H=1 IRD 1 ORD 1 P2P rtr=write|read pd 0");
}

TEST(MpaFrameSiwBytes, P2PReplyFromCapture) {
  // siw_p2p.pcap: pd 80 01 80 01 = A=1 IRD 1 ‖ C=1 (Write RTR chosen) ORD 1.
  const Bytes want = raw_frame(kReplyKey, 0x10, 2, {0x80, 0x01, 0x80, 0x01});
  MpaFrame f;
  f.kind = FrameKind::Reply;
  f.enhanced = true;
  f.revision = 2;
  f.params = EnhancedParams{.peer_to_peer = true, .ird = 1, .rtr = kWrite, .ord = 1};
  expect_wire(f, want);
}

TEST(MpaFrameSiwBytes, V1FramesFromCapture) {
  // siw_mpa_v1.pcap: flags 0x00, Rev 1, no private data, both directions.
  for (FrameKind k : {FrameKind::Request, FrameKind::Reply}) {
    MpaFrame f;
    f.kind = k;
    f.revision = 1;
    expect_wire(f, raw_frame(key_of(k), 0x00, 1, {}));
  }
}

// ---- the enhanced prefix ---------------------------------------------------------------------

TEST(MpaFrameEnhancedPrefix, EachControlFlagAlone) {
  struct Case {
    const char* name;
    bool a;
    RtrMask rtr;
    Bytes prefix;
  };
  const std::vector<Case> cases = {
      {"none", false, 0, {0x00, 0x00, 0x00, 0x00}},
      {"A (peer-to-peer)", true, 0, {0x80, 0x00, 0x00, 0x00}},
      {"B (zero-length Send RTR)", false, kSend, {0x40, 0x00, 0x00, 0x00}},
      {"C (zero-length Write RTR)", false, kWrite, {0x00, 0x00, 0x80, 0x00}},
      {"D (zero-length Read RTR)", false, kRead, {0x00, 0x00, 0x40, 0x00}},
      {"A B C D", true, kSend | kWrite | kRead, {0xc0, 0x00, 0xc0, 0x00}},
  };
  for (FrameKind k : {FrameKind::Request, FrameKind::Reply}) {
    for (const auto& c : cases) {
      SCOPED_TRACE(c.name);
      MpaFrame f;
      f.kind = k;
      f.enhanced = true;
      f.revision = 2;
      f.params = EnhancedParams{.peer_to_peer = c.a, .ird = 0, .rtr = c.rtr, .ord = 0};
      expect_wire(f, raw_frame(key_of(k), 0x10, 2, c.prefix));
    }
  }
}

TEST(MpaFrameEnhancedPrefix, IrdOrdValuesWithEveryFlagCombination) {
  const std::array<std::uint16_t, 3> values = {0, 1, kMaxIrdOrd};
  int checked = 0;
  for (FrameKind k : {FrameKind::Request, FrameKind::Reply}) {
    for (std::uint16_t ird : values) {
      for (std::uint16_t ord : values) {
        for (int a = 0; a < 2; ++a) {
          for (RtrMask rtr = 0; rtr <= kAllRtr; ++rtr) {
            SCOPED_TRACE(fmt::format("IRD {:#x} ORD {:#x} A={} rtr={:#x}", ird, ord, a, rtr));
            MpaFrame f;
            f.kind = k;
            f.enhanced = true;
            f.revision = 2;
            f.params = EnhancedParams{.peer_to_peer = a == 1, .ird = ird, .rtr = rtr, .ord = ord};
            std::uint16_t w0 =
                static_cast<std::uint16_t>((a ? 0x8000 : 0) | ((rtr & kSend) ? 0x4000 : 0) | ird);
            std::uint16_t w1 = static_cast<std::uint16_t>(((rtr & kWrite) ? 0x8000 : 0) |
                                                          ((rtr & kRead) ? 0x4000 : 0) | ord);
            Bytes prefix = {static_cast<std::uint8_t>(w0 >> 8), static_cast<std::uint8_t>(w0),
                            static_cast<std::uint8_t>(w1 >> 8), static_cast<std::uint8_t>(w1)};
            expect_wire(f, raw_frame(key_of(k), 0x10, 2, prefix));
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 3 * 3 * 2 * 8);
}

TEST(MpaFrameEnhancedPrefix, AllOnesPrefixDecodesToMaxValuesAndAllFlags) {
  auto d = decode_frame(raw_frame(kRequestKey, 0x10, 2, {0xff, 0xff, 0xff, 0xff, 0xab}),
                        FrameKind::Request);
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  ASSERT_TRUE(d->params.has_value());
  EXPECT_EQ(*d->params,
            (EnhancedParams{.peer_to_peer = true, .ird = 0x3FFF, .rtr = kAllRtr, .ord = 0x3FFF}));
  EXPECT_EQ(d->private_data, (Bytes{0xab}));  // the prefix is hidden from the ULP
}

TEST(MpaFrameEnhancedPrefix, Rev2WithoutEnhancedFlagHasNoPrefix) {
  // A Rev 2 frame without H carries plain private data; nothing is taken as IRD/ORD.
  const Bytes pd = {0x00, 0x01, 0x00, 0x01};
  auto d = decode_frame(raw_frame(kRequestKey, 0x00, 2, pd), FrameKind::Request);
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  EXPECT_FALSE(d->enhanced);
  EXPECT_FALSE(d->params.has_value());
  EXPECT_EQ(d->private_data, pd);
}

// ---- round trips over every flag combination and private-data length -----------------------

TEST(MpaFrameRoundTrip, EveryFlagCombinationRevisionAndPdLength) {
  int checked = 0;
  for (FrameKind k : {FrameKind::Request, FrameKind::Reply}) {
    for (std::uint8_t rev : {std::uint8_t{1}, std::uint8_t{2}}) {
      for (bool enhanced : {false, true}) {
        if (enhanced && rev != 2) continue;  // H requires Rev 2 (an error case, tested below)
        for (int m = 0; m < 2; ++m) {
          for (int c = 0; c < 2; ++c) {
            for (int r = 0; r < 2; ++r) {
              if (r && k == FrameKind::Request) continue;  // R=1 in a Request: error case
              // Total PD_Length 0, 1, 508, 512; enhanced frames spend 4 of it on the prefix.
              for (std::size_t total :
                   {std::size_t{0}, std::size_t{1}, std::size_t{508}, std::size_t{512}}) {
                if (enhanced && total < kEnhancedPrefixSize) {
                  // Only a rejecting Reply may go without the prefix (and only with PD empty).
                  if (!(r && total == 0)) continue;
                }
                std::size_t prefix = enhanced && total >= kEnhancedPrefixSize ? 4 : 0;
                SCOPED_TRACE(fmt::format("{} rev {} H={} M={} C={} R={} PD_Length {}",
                                         k == FrameKind::Request ? "Request" : "Reply", rev,
                                         int(enhanced), m, c, r, total));
                MpaFrame f;
                f.kind = k;
                f.revision = rev;
                f.enhanced = enhanced;
                f.markers = m;
                f.crc = c;
                f.reject = r;
                if (prefix)
                  f.params = EnhancedParams{.peer_to_peer = false, .ird = 7, .rtr = 0, .ord = 3};
                f.private_data = pattern(total - prefix, static_cast<std::uint8_t>(checked));
                std::uint8_t flags = static_cast<std::uint8_t>(
                    (m ? 0x80 : 0) | (c ? 0x40 : 0) | (r ? 0x20 : 0) | (enhanced ? 0x10 : 0));
                Bytes pd = prefix ? Bytes{0x00, 0x07, 0x00, 0x03} : Bytes{};
                pd = concat(pd, f.private_data);
                expect_wire(f, raw_frame(key_of(k), flags, rev, pd));
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  // Request: rev1 4 flag combos x 4 lengths + rev2 plain 4 x 4 + rev2 enhanced 4 x 2 lengths.
  // Reply: 8 flag combos each: 8x4 + 8x4 + (R=0: 4 x 2 lengths, R=1: 4 x 3 lengths).
  EXPECT_EQ(checked, (16 + 16 + 8) + (32 + 32 + 8 + 12));
}

TEST(MpaFrameRoundTrip, Enhanced508UlpBytesPlusPrefixIs512) {
  MpaFrame f;
  f.kind = FrameKind::Reply;
  f.revision = 2;
  f.enhanced = true;
  f.params = EnhancedParams{.peer_to_peer = true, .ird = 0x3FFF, .rtr = kRead, .ord = 0};
  f.private_data = pattern(508);
  Bytes b = f.encode();
  ASSERT_EQ(b.size(), kFrameHeaderSize + 512);
  EXPECT_EQ(b[18], 0x02);  // PD_Length 512 counts the prefix
  EXPECT_EQ(b[19], 0x00);
  EXPECT_EQ((Bytes{b[20], b[21], b[22], b[23]}), (Bytes{0xbf, 0xff, 0x40, 0x00}));
  expect_wire(f, raw_frame(kReplyKey, 0x10, 2, concat({0xbf, 0xff, 0x40, 0x00}, f.private_data)));
  EXPECT_EQ(describe(f), "MPA Reply rev 2 M=0 C=0 R=0 H=1 IRD 16383 ORD 0 P2P rtr=read pd 508");

  // One octet more no longer fits: the encoder writes PD_Length 513 and the decoder refuses it.
  f.private_data.push_back(0);
  expect_bad(f.encode(), FrameKind::Reply, "enhanced 509 + 4");
}

TEST(MpaFrameRoundTrip, RejectingReplyWithEmptyPrivateData) {
  MpaFrame f;
  f.kind = FrameKind::Reply;
  f.revision = 2;
  f.enhanced = true;
  f.reject = true;
  expect_wire(f, raw_frame(kReplyKey, 0x30, 2, {}));
}

TEST(MpaFrameRoundTrip, ReservedBitsAreKeptAsReceived) {
  for (std::uint8_t res = 0; res <= kFlagReservedMask; ++res) {
    MpaFrame f;
    f.kind = FrameKind::Reply;
    f.revision = 1;
    f.reserved = res;
    f.private_data = {1, 2, 3};
    expect_wire(f, raw_frame(kReplyKey, res, 1, {1, 2, 3}));
  }
}

// ---- decode errors: all Errc::MpaBadReqRep naming an RFC rule --------------------------------

TEST(MpaFrameDecodeError, WrongKey) {
  const Bytes pd = {0x00, 0x01, 0x00, 0x01};
  expect_bad(raw_frame(kReplyKey, 0x10, 2, pd), FrameKind::Request, "Reply key, Request expected");
  expect_bad(raw_frame(kRequestKey, 0x10, 2, pd), FrameKind::Reply, "Request key, Reply expected");
  expect_bad(raw_frame("MPA ID Req Framf", 0x10, 2, pd), FrameKind::Request, "last octet off");
  expect_bad(raw_frame("mpa id req frame", 0x10, 2, pd), FrameKind::Request, "lower case");
  Bytes zeros(kFrameHeaderSize, 0);
  expect_bad(zeros, FrameKind::Request, "all zeros");
  auto r = decode_frame(raw_frame(kReplyKey, 0x10, 2, pd), FrameKind::Request);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().detail.find("MPA ID Rep Frame"), std::string::npos) << r.error().detail;
}

TEST(MpaFrameDecodeError, TruncatedHeader) {
  const Bytes full = raw_frame(kRequestKey, 0x10, 2, {0x00, 0x01, 0x00, 0x01});
  for (std::size_t n = 0; n < kFrameHeaderSize; ++n)
    expect_bad(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)),
               FrameKind::Request, fmt::format("{} octets", n));
}

TEST(MpaFrameDecodeError, RevisionOtherThanOneOrTwo) {
  for (std::uint8_t rev : {std::uint8_t{0}, std::uint8_t{3}, std::uint8_t{0xff}}) {
    expect_bad(raw_frame(kRequestKey, 0x00, rev, {}), FrameKind::Request,
               fmt::format("Request Rev {}", rev));
    expect_bad(raw_frame(kReplyKey, 0x00, rev, {}), FrameKind::Reply,
               fmt::format("Reply Rev {}", rev));
    expect_bad(raw_frame(kRequestKey, 0x10, rev, {0, 1, 0, 1}), FrameKind::Request,
               fmt::format("enhanced Request Rev {}", rev));
  }
}

TEST(MpaFrameDecodeError, PdLengthAbove512) {
  expect_bad(raw_frame(kRequestKey, 0x00, 1, pattern(513)), FrameKind::Request, "513, rev 1");
  expect_bad(raw_frame(kReplyKey, 0x10, 2, pattern(513)), FrameKind::Reply, "513, enhanced");
  expect_bad(raw_frame(kReplyKey, 0x00, 1, 0xffff, {}), FrameKind::Reply, "0xffff, nothing sent");
  MpaFrame f;
  f.revision = 1;
  f.private_data = pattern(513);
  expect_bad(f.encode(), FrameKind::Request, "encoder output with 513 octets");
}

TEST(MpaFrameDecodeError, PdLengthDoesNotMatchTheOctets) {
  expect_bad(raw_frame(kRequestKey, 0x10, 2, 4, {0, 1, 0}), FrameKind::Request, "one short");
  expect_bad(raw_frame(kRequestKey, 0x10, 2, 4, {0, 1, 0, 1, 9}), FrameKind::Request, "one extra");
  expect_bad(raw_frame(kReplyKey, 0x00, 1, 0, {1}), FrameKind::Reply, "PD_Length 0, 1 octet");
  expect_bad(raw_frame(kReplyKey, 0x00, 1, 512, pattern(511)), FrameKind::Reply, "512 vs 511");
  expect_bad(raw_frame(kReplyKey, 0x00, 1, 1, {}), FrameKind::Reply, "header only");
}

TEST(MpaFrameDecodeError, RejectFlagInRequest) {
  expect_bad(raw_frame(kRequestKey, 0x20, 1, {}), FrameKind::Request, "R=1 rev 1");
  expect_bad(raw_frame(kRequestKey, 0x30, 2, {0, 1, 0, 1}), FrameKind::Request, "R=1 enhanced");
  expect_bad(raw_frame(kRequestKey, 0xe0, 1, {}), FrameKind::Request, "M=1 C=1 R=1");
  MpaFrame f;
  f.kind = FrameKind::Request;
  f.reject = true;
  expect_bad(f.encode(), FrameKind::Request, "encoder output");
}

TEST(MpaFrameDecodeError, EnhancedFlagWithRev1) {
  expect_bad(raw_frame(kRequestKey, 0x10, 1, {0, 1, 0, 1}), FrameKind::Request, "Request");
  expect_bad(raw_frame(kReplyKey, 0x10, 1, {0, 1, 0, 1}), FrameKind::Reply, "Reply");
  expect_bad(raw_frame(kReplyKey, 0x30, 1, {}), FrameKind::Reply, "rejecting Reply, no pd");
}

TEST(MpaFrameDecodeError, EnhancedWithoutRoomForThePrefix) {
  for (std::size_t n = 0; n < kEnhancedPrefixSize; ++n) {
    expect_bad(raw_frame(kRequestKey, 0x10, 2, pattern(n)), FrameKind::Request,
               fmt::format("Request PD_Length {}", n));
    expect_bad(raw_frame(kRequestKey, 0xd0, 2, pattern(n)), FrameKind::Request,
               fmt::format("Request M=1 C=1 PD_Length {}", n));
    expect_bad(raw_frame(kReplyKey, 0x10, 2, pattern(n)), FrameKind::Reply,
               fmt::format("accepting Reply PD_Length {}", n));
    if (n > 0)  // the exception is for an empty PD only
      expect_bad(raw_frame(kReplyKey, 0x30, 2, pattern(n)), FrameKind::Reply,
                 fmt::format("rejecting Reply PD_Length {}", n));
  }
}

TEST(MpaFrameDecodeError, RejectingReplyMayOmitThePrefix) {
  for (std::uint8_t flags : {std::uint8_t{0x30}, std::uint8_t{0xf0}}) {
    auto d = decode_frame(raw_frame(kReplyKey, flags, 2, {}), FrameKind::Reply);
    ASSERT_TRUE(d.has_value()) << d.error().to_string();
    EXPECT_TRUE(d->reject);
    EXPECT_TRUE(d->enhanced);
    EXPECT_EQ(d->revision, 2);
    EXPECT_FALSE(d->params.has_value());
    EXPECT_TRUE(d->private_data.empty());
  }
  // With the prefix present it is parsed as usual.
  auto d = decode_frame(raw_frame(kReplyKey, 0x30, 2, {0, 0, 0, 0, 'n', 'o'}), FrameKind::Reply);
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  ASSERT_TRUE(d->params.has_value());
  EXPECT_EQ(*d->params, EnhancedParams{});
  EXPECT_EQ(d->private_data, (Bytes{'n', 'o'}));
}

}  // namespace
}  // namespace iwarp::mpa
