// Bounded, seeded mutation testing of the receive path (MPA framing + DDP/RDMAP parsing and
// checks): a million mutated connection streams must neither crash (the suite also runs under
// ASan/UBSan) nor produce an error that does not name the RFC rule it breaks.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>

#include "test_support.hpp"
#include "tests/sanitizers.hpp"

namespace iwarp::mpa {
namespace {

// A million in the plain build. The sanitizer builds run the first 200,000 of the same seeded
// sequence: under ASan (-O0) and TSan the million cost CI 3 and 2 minutes, and the code is
// single-threaded (nothing for TSan to find) and fuzzed under ASan by scripts/fuzz.sh as well.
std::size_t mutation_count() {
  if (const char* s = std::getenv("IWARP_MUTATIONS")) return std::strtoull(s, nullptr, 10);
#if IWARP_TEST_ASAN || IWARP_TEST_TSAN
  return 200'000;
#else
  return 1'000'000;
#endif
}

void mutate(Bytes& b, std::mt19937& rng) {
  int rounds = 1 + static_cast<int>(rng() % 4);
  for (int r = 0; r < rounds && !b.empty(); ++r) {
    std::size_t at = rng() % b.size();
    switch (rng() % 7) {
      case 0:
        b[at] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
        break;
      case 1:
        b[at] = static_cast<std::uint8_t>(rng());
        break;
      case 2:
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::uint8_t>(rng()));
        break;
      case 3:
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at));
        break;
      case 4:
        b.resize(at);
        break;
      case 5: {  // duplicate a run
        std::size_t n = std::min<std::size_t>(rng() % 32, b.size() - at);
        Bytes run(b.begin() + static_cast<std::ptrdiff_t>(at),
                  b.begin() + static_cast<std::ptrdiff_t>(at + n));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), run.begin(), run.end());
        break;
      }
      default:  // interesting values in a 16-bit field (lengths, PD_Length)
        if (at + 1 < b.size()) {
          static constexpr std::uint16_t kVals[] = {0,  1,  2,   3,   13,  14,     17,    18,
                                                    45, 46, 511, 512, 513, 0x7fff, 0xffff};
          store_be16(&b[at], kVals[rng() % std::size(kVals)]);
        }
    }
  }
}

TEST(MutationFuzz, MillionMutatedStreamsGiveOnlyTypedRfcErrors) {
  // A few base connections covering each framing, kept small so a million runs stay quick.
  std::vector<test::Streams> bases;
  for (std::uint8_t rev : {1, 2})
    for (auto crc : {CrcPolicy::Optional, CrcPolicy::Required})
      for (auto mk : {MarkerPolicy::Optional, MarkerPolicy::Required}) {
        Policy p;
        p.revision = rev;
        p.crc = crc;
        p.markers = mk;
        bases.push_back(
            test::make_streams(p, p, rev * 10u + static_cast<unsigned>(crc), 4, 600, 200));
      }
  std::mt19937 rng(20261122);
  const std::size_t n = mutation_count();
  std::size_t errors = 0, clean = 0;
  std::map<Errc, std::size_t> by_code;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& base = bases[i % bases.size()];
    const int d = static_cast<int>(rng() % 2);
    Bytes m = base.dir[d];
    mutate(m, rng);
    test::Transcript t;
    ConnectionDecoder dec;
    // Chunk the mutated direction randomly too.
    if (d == 1) dec.feed(Direction::FromInitiator, base.dir[0], t);
    for (std::size_t off = 0; off < m.size();) {
      std::size_t c = std::min<std::size_t>(m.size() - off, 1 + rng() % 300);
      dec.feed(static_cast<Direction>(d), ByteSpan(m).subspan(off, c), t);
      off += c;
    }
    if (d == 0) dec.feed(Direction::FromResponder, base.dir[1], t);
    if (t.errors == 0) {
      ++clean;
      continue;
    }
    ++errors;
    for (const auto& line : t.lines) {
      if (line.find(" error ") == std::string::npos && line.find("SEGMENT ") == std::string::npos &&
          line.find("CHECK ") == std::string::npos)
        continue;
      ASSERT_NE(line.find("(RFC "), std::string::npos) << "error without an RFC rule: " << line;
    }
    if (t.last_error) ++by_code[t.last_error->code];
  }
  EXPECT_EQ(errors + clean, n);
  EXPECT_GT(errors, n / 2) << "mutations should mostly break something";
  // The framing errors the mutations must reach.
  for (Errc e : {Errc::MpaCrcError, Errc::MpaMarkerError, Errc::MpaBadReqRep})
    EXPECT_GT(by_code[e], 0u) << errc_name(e);
  RecordProperty("mutations", std::to_string(n));
}

}  // namespace
}  // namespace iwarp::mpa
