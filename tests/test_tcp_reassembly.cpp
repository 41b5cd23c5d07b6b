// TcpReassembler: in-order delivery, holes, duplicates and overlaps (first arrival wins),
// retransmissions of delivered data, and sequence numbers wrapping at 2^32.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "trace/tcp_reassembly.hpp"

namespace iwarp::trace {
namespace {

Bytes filled(std::size_t n, std::uint8_t v) {
  return Bytes(n, v);
}

// Collects everything delivered, and checks the return values against it.
struct Sink {
  Bytes out;
  std::size_t calls = 0;
  std::function<void(ByteSpan)> fn() {
    return [this](ByteSpan b) {
      EXPECT_FALSE(b.empty());
      out.insert(out.end(), b.begin(), b.end());
      ++calls;
    };
  }
};

TEST(TcpReassemblerBasics, InOrderIsDeliveredAtOnce) {
  TcpReassembler r(TcpSeq{1000});
  Sink s;
  EXPECT_EQ(r.add(TcpSeq{1000}, filled(10, 1), s.fn()), 10u);
  EXPECT_EQ(r.add(TcpSeq{1010}, filled(5, 2), s.fn()), 5u);
  EXPECT_EQ(r.next(), TcpSeq{1015});
  EXPECT_EQ(r.delivered(), 15u);
  EXPECT_EQ(r.held_bytes(), 0u);
  EXPECT_EQ(r.holes(), 0u);
  Bytes want = filled(10, 1);
  want.resize(15, 2);
  EXPECT_EQ(s.out, want);
  EXPECT_EQ(r.add(TcpSeq{1015}, {}, s.fn()), 0u);  // empty segment: nothing
  EXPECT_EQ(s.calls, 2u);
}

TEST(TcpReassemblerBasics, HolesAndHeldBytesThenOneContiguousRun) {
  TcpReassembler r(TcpSeq{0});
  Sink s;
  EXPECT_EQ(r.add(TcpSeq{20}, filled(10, 3), s.fn()), 0u);  // [20,30)
  EXPECT_EQ(r.holes(), 1u);
  EXPECT_EQ(r.held_bytes(), 10u);
  EXPECT_EQ(r.add(TcpSeq{30}, filled(10, 4), s.fn()), 0u);  // [30,40) adjoins: still one hole
  EXPECT_EQ(r.holes(), 1u);
  EXPECT_EQ(r.held_bytes(), 20u);
  EXPECT_EQ(r.add(TcpSeq{50}, filled(5, 6), s.fn()), 0u);  // [50,55): a second hole
  EXPECT_EQ(r.holes(), 2u);
  EXPECT_EQ(r.held_bytes(), 25u);
  EXPECT_EQ(r.add(TcpSeq{10}, filled(10, 2), s.fn()), 0u);  // [10,20): hole [0,10) remains
  EXPECT_EQ(r.holes(), 2u);
  EXPECT_EQ(r.held_bytes(), 35u);
  EXPECT_TRUE(s.out.empty());
  EXPECT_EQ(r.next(), TcpSeq{0});

  // Filling [0,10) releases [0,40) in one call; [50,55) stays behind the hole [40,50).
  EXPECT_EQ(r.add(TcpSeq{0}, filled(10, 1), s.fn()), 40u);
  EXPECT_EQ(s.calls, 1u);
  EXPECT_EQ(r.next(), TcpSeq{40});
  EXPECT_EQ(r.holes(), 1u);
  EXPECT_EQ(r.held_bytes(), 5u);
  EXPECT_EQ(r.add(TcpSeq{40}, filled(10, 5), s.fn()), 15u);
  EXPECT_EQ(r.holes(), 0u);
  EXPECT_EQ(r.held_bytes(), 0u);
  Bytes want;
  for (std::uint8_t v = 1; v <= 6; ++v) want.resize(want.size() + (v == 6 ? 5 : 10), v);
  EXPECT_EQ(s.out, want);
  EXPECT_EQ(r.delivered(), 55u);
}

TEST(TcpReassemblerBasics, DeliveredOctetsAreDroppedOrTrimmed) {
  TcpReassembler r(TcpSeq{100});
  Sink s;
  r.add(TcpSeq{100}, filled(10, 1), s.fn());
  EXPECT_EQ(r.add(TcpSeq{100}, filled(10, 9), s.fn()), 0u);  // exact retransmission
  EXPECT_EQ(r.add(TcpSeq{95}, filled(15, 9), s.fn()), 0u);   // ends at the in-order point
  EXPECT_EQ(r.add(TcpSeq{50}, filled(3, 9), s.fn()), 0u);    // long before
  EXPECT_EQ(r.held_bytes(), 0u);
  // Overlaps the delivered part: only [110,115) is new.
  EXPECT_EQ(r.add(TcpSeq{105}, filled(10, 2), s.fn()), 5u);
  Bytes want = filled(10, 1);
  want.resize(15, 2);
  EXPECT_EQ(s.out, want);
  EXPECT_EQ(r.next(), TcpSeq{115});
}

// Octets that arrived first are kept; a later, overlapping segment only fills the gaps.
TEST(TcpReassemblerBasics, OverlapsKeepFirstArrival) {
  TcpReassembler r(TcpSeq{0});
  Sink s;
  r.add(TcpSeq{10}, filled(10, 'A'), s.fn());  // [10,20)
  r.add(TcpSeq{30}, filled(5, 'C'), s.fn());   // [30,35)
  EXPECT_EQ(r.holes(), 2u);
  r.add(TcpSeq{5}, filled(40, 'B'), s.fn());  // [5,45) covers both and the gaps
  EXPECT_EQ(r.holes(), 1u);
  EXPECT_EQ(r.held_bytes(), 40u);
  r.add(TcpSeq{12}, filled(3, 'D'), s.fn());  // inside held data: no change
  EXPECT_EQ(r.held_bytes(), 40u);
  EXPECT_EQ(r.add(TcpSeq{0}, filled(7, 'Z'), s.fn()), 45u);
  std::string want = std::string(5, 'Z') + std::string(5, 'B') + std::string(10, 'A') +
                     std::string(10, 'B') + std::string(5, 'C') + std::string(10, 'B');
  EXPECT_EQ(std::string(s.out.begin(), s.out.end()), want);
  EXPECT_EQ(r.holes(), 0u);
}

TEST(TcpReassemblerBasics, SegmentStartingInsideAHeldRangeAndEndingInAnother) {
  TcpReassembler r(TcpSeq{0});
  Sink s;
  r.add(TcpSeq{10}, filled(10, 'a'), s.fn());  // [10,20)
  r.add(TcpSeq{25}, filled(10, 'b'), s.fn());  // [25,35)
  r.add(TcpSeq{15}, filled(15, 'x'), s.fn());  // [15,30): only [20,25) is new
  EXPECT_EQ(r.held_bytes(), 25u);
  EXPECT_EQ(r.holes(), 1u);
  r.add(TcpSeq{0}, filled(10, '0'), s.fn());
  EXPECT_EQ(
      std::string(s.out.begin(), s.out.end()),
      std::string(10, '0') + std::string(10, 'a') + std::string(5, 'x') + std::string(10, 'b'));
}

TEST(TcpReassemblerWrap, InOrderAcrossTwoToThe32) {
  TcpReassembler r(TcpSeq{0xfffffff0u});
  Sink s;
  EXPECT_EQ(r.add(TcpSeq{0xfffffff0u}, filled(10, 1), s.fn()), 10u);
  EXPECT_EQ(r.add(TcpSeq{0xfffffffau}, filled(20, 2), s.fn()), 20u);  // straddles the wrap
  EXPECT_EQ(r.next(), TcpSeq{14});
  EXPECT_EQ(r.add(TcpSeq{14}, filled(1, 3), s.fn()), 1u);
  EXPECT_EQ(r.delivered(), 31u);
  EXPECT_EQ(r.next(), TcpSeq{15});
}

TEST(TcpReassemblerWrap, OutOfOrderAcrossTwoToThe32) {
  TcpReassembler r(TcpSeq{0xffffff00u});
  Sink s;
  // Held data after the wrap, ahead of a hole before it.
  EXPECT_EQ(r.add(TcpSeq{0x10}, filled(0x10, 3), s.fn()), 0u);         // [2^32+16, +32)
  EXPECT_EQ(r.add(TcpSeq{0xffffff80u}, filled(0x90, 2), s.fn()), 0u);  // [..80, 2^32+16)
  EXPECT_EQ(r.holes(), 1u);
  EXPECT_EQ(r.held_bytes(), 0xa0u);
  // A retransmission from before the in-order point (serially "less") is dropped.
  EXPECT_EQ(r.add(TcpSeq{0xfffffe00u}, filled(0x100, 9), s.fn()), 0u);
  EXPECT_EQ(r.add(TcpSeq{0xffffff00u}, filled(0x80, 1), s.fn()), 0x120u);
  EXPECT_EQ(r.next(), TcpSeq{0x20});
  Bytes want = filled(0x80, 1);
  want.resize(0x110, 2);
  want.resize(0x120, 3);
  EXPECT_EQ(s.out, want);
  EXPECT_EQ(r.holes(), 0u);
}

// A random stream cut into random segments, with duplicates and overlapping
// retransmissions (same octets, other boundaries), in random order: the reassembler delivers
// exactly the stream, whatever the ISN (some streams cross 2^32).
TEST(TcpReassemblerRandom, PermutationsWithDuplicatesAndOverlapsDeliverTheStream) {
  for (std::uint32_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 gen(seed);
    const std::size_t n = 1 + gen() % 30000;
    Bytes stream(n);
    for (auto& b : stream) b = static_cast<std::uint8_t>(gen());
    // Every third seed starts just before the wrap.
    const std::uint32_t isn =
        seed % 3 == 0 ? 0xffffffffu - static_cast<std::uint32_t>(gen() % 20000) : gen();
    const TcpSeq first{isn + 1};

    struct Seg {
      std::size_t off, len;
    };
    std::vector<Seg> segs;
    for (std::size_t off = 0; off < n;) {
      const std::size_t len = std::min<std::size_t>(n - off, 1 + gen() % 1500);
      segs.push_back({off, len});
      off += len;
    }
    const std::size_t base = segs.size();
    for (std::size_t i = 0; i < base / 2 + 1; ++i) segs.push_back(segs[gen() % base]);  // dups
    for (std::size_t i = 0; i < base / 2 + 1; ++i) {  // overlaps at arbitrary boundaries
      const std::size_t off = gen() % n;
      segs.push_back({off, std::min<std::size_t>(n - off, 1 + gen() % 4000)});
    }
    std::shuffle(segs.begin(), segs.end(), gen);

    TcpReassembler r(first);
    Sink s;
    std::size_t returned = 0;
    for (const Seg& g : segs) {
      const std::size_t before = s.out.size();
      returned += r.add(first + static_cast<std::uint32_t>(g.off),
                        ByteSpan(stream).subspan(g.off, g.len), s.fn());
      ASSERT_LE(s.out.size(), n);
      ASSERT_TRUE(std::equal(s.out.begin() + static_cast<std::ptrdiff_t>(before), s.out.end(),
                             stream.begin() + static_cast<std::ptrdiff_t>(before)));
      ASSERT_EQ(r.delivered(), s.out.size());
      ASSERT_EQ(r.next(), first + static_cast<std::uint32_t>(s.out.size()));
      // Held octets never overlap delivered ones or each other.
      ASSERT_LE(r.held_bytes(), n - s.out.size());
      if (r.held_bytes() == 0) {
        ASSERT_EQ(r.holes(), 0u);
      } else {
        ASSERT_GE(r.holes(), 1u);
      }
    }
    EXPECT_EQ(returned, n);
    EXPECT_EQ(s.out, stream);
    EXPECT_EQ(r.held_bytes(), 0u);
    EXPECT_EQ(r.holes(), 0u);
  }
}

// Held bytes and holes against a brute-force model of which octets have arrived.
TEST(TcpReassemblerRandom, HeldBytesAndHolesMatchAModel) {
  std::mt19937 gen(99);
  for (int round = 0; round < 40; ++round) {
    const std::size_t n = 2000;
    const std::uint32_t isn = gen();
    TcpReassembler r(TcpSeq{isn});
    std::vector<bool> have(n, false);
    Sink s;
    for (int k = 0; k < 30; ++k) {
      const std::size_t off = gen() % n, len = std::min<std::size_t>(n - off, 1 + gen() % 120);
      r.add(TcpSeq{isn + static_cast<std::uint32_t>(off)}, Bytes(len, 0x5a), s.fn());
      for (std::size_t i = off; i < off + len; ++i) have[i] = true;
      std::size_t in_order = 0;
      while (in_order < n && have[in_order]) ++in_order;
      std::size_t held = 0, holes = 0;
      for (std::size_t i = in_order; i < n; ++i) {
        if (have[i]) ++held;
        if (have[i] && !have[i - 1]) ++holes;
      }
      ASSERT_EQ(r.delivered(), in_order);
      ASSERT_EQ(r.held_bytes(), held);
      ASSERT_EQ(r.holes(), holes);
    }
  }
}

}  // namespace
}  // namespace iwarp::trace
