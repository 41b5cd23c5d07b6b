// IntervalSet (common/interval_set.hpp): the one range merger behind TCP reassembly, the MPA
// segment receiver and replay's stream rebuilding. Also the marker arithmetic of
// mpa/markers.hpp against a walk octet by octet.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "common/interval_set.hpp"
#include "mpa/markers.hpp"

namespace iwarp {
namespace {

using Set = IntervalSet<std::uint64_t>;
using Parts = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

std::vector<Set::Range> runs(const Set& s) {
  std::vector<Set::Range> out;
  for (const auto& [lo, hi] : s) out.push_back({lo, hi});
  return out;
}

TEST(IntervalSet, AdjacentRangesMergeIntoOneRun) {
  Set s;
  EXPECT_EQ(s.insert(10, 20), 0u);
  EXPECT_EQ(s.insert(20, 30), 1u);
  EXPECT_EQ(s.insert(0, 10), 1u);
  EXPECT_EQ(runs(s), (std::vector<Set::Range>{{0, 30}}));
  EXPECT_EQ(s.covered(), 30u);
}

TEST(IntervalSet, OverlappingInsertReportsNewAndCoveredParts) {
  Set s;
  s.insert(10, 20);
  s.insert(30, 40);
  Parts fresh, old;
  const auto reached = s.insert(
      15, 35, [&](auto a, auto b) { fresh.emplace_back(a, b); },
      [&](auto a, auto b) { old.emplace_back(a, b); });
  EXPECT_EQ(reached, 2u);
  EXPECT_EQ(fresh, (Parts{{20, 30}}));
  EXPECT_EQ(old, (Parts{{15, 20}, {30, 35}}));
  EXPECT_EQ(runs(s), (std::vector<Set::Range>{{10, 40}}));
  EXPECT_EQ(s.covered(), 30u);
}

TEST(IntervalSet, ContainedInsertAddsNothing) {
  Set s;
  s.insert(0, 100);
  Parts fresh, old;
  s.insert(
      40, 60, [&](auto a, auto b) { fresh.emplace_back(a, b); },
      [&](auto a, auto b) { old.emplace_back(a, b); });
  EXPECT_TRUE(fresh.empty());
  EXPECT_EQ(old, (Parts{{40, 60}}));
  EXPECT_EQ(runs(s), (std::vector<Set::Range>{{0, 100}}));
}

TEST(IntervalSet, InsertSpanningSeveralRunsFillsEachGap) {
  Set s;
  s.insert(10, 12);
  s.insert(14, 16);
  s.insert(18, 20);
  Parts fresh;
  s.insert(
      0, 30, [&](auto a, auto b) { fresh.emplace_back(a, b); }, [](auto, auto) {});
  EXPECT_EQ(fresh, (Parts{{0, 10}, {12, 14}, {16, 18}, {20, 30}}));
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.covered(), 30u);
}

TEST(IntervalSet, EmptyInsertIsIgnored) {
  Set s;
  EXPECT_EQ(s.insert(5, 5), 0u);
  EXPECT_TRUE(s.empty());
}

TEST(IntervalSet, KeysNearTheTopOfSixtyFourBitsNeedNoWrap) {
  Set s;
  const std::uint64_t top = UINT64_MAX;
  s.insert(top - 10, top);
  s.insert(top - 20, top - 10);
  EXPECT_EQ(runs(s), (std::vector<Set::Range>{{top - 20, top}}));
  EXPECT_EQ(s.covered_up_to(top - 15), top);
  EXPECT_FALSE(s.first_gap(top - 20).has_value());
}

TEST(IntervalSet, GapsAndCoverageQueries) {
  Set s;
  s.insert(10, 20);
  s.insert(30, 40);
  EXPECT_EQ(s.covered_up_to(0), 0u);
  EXPECT_EQ(s.covered_up_to(12), 20u);
  EXPECT_EQ(s.first_gap(0), (Set::Range{0, 10}));
  EXPECT_EQ(s.first_gap(12), (Set::Range{20, 30}));
  EXPECT_FALSE(s.first_gap(30).has_value());
  EXPECT_TRUE(s.contains(31, 40));
  EXPECT_FALSE(s.contains(15, 31));
  EXPECT_EQ(s.find(20), std::nullopt);
  EXPECT_EQ(s.find(19), (Set::Range{10, 20}));
  s.pop_front();
  EXPECT_EQ(s.front(), (Set::Range{30, 40}));
  EXPECT_EQ(s.covered(), 10u);
}

// Many random inserts against a bitmap: the runs are the maximal covered stretches, and each
// insert reports as new exactly the keys the bitmap did not have.
TEST(IntervalSet, RandomInsertsMatchABitmap) {
  constexpr std::uint64_t kKeys = 2000;
  std::mt19937_64 rng(14);
  for (int round = 0; round < 20; ++round) {
    Set s;
    std::vector<bool> bits(kKeys, false);
    for (int i = 0; i < 300; ++i) {
      const std::uint64_t lo = rng() % kKeys;
      const std::uint64_t hi = std::min<std::uint64_t>(kKeys, lo + rng() % 40);
      std::vector<bool> fresh(kKeys, false), old(kKeys, false);
      s.insert(
          lo, hi,
          [&](auto a, auto b) {
            for (auto k = a; k < b; ++k) fresh[k] = true;
          },
          [&](auto a, auto b) {
            for (auto k = a; k < b; ++k) old[k] = true;
          });
      for (auto k = lo; k < hi; ++k) {
        ASSERT_EQ(fresh[k], !bits[k]) << k;
        ASSERT_EQ(old[k], bits[k]) << k;
        bits[k] = true;
      }
      std::vector<Set::Range> want;
      std::uint64_t covered = 0;
      for (std::uint64_t k = 0; k < kKeys; ++k) {
        if (!bits[k]) continue;
        ++covered;
        if (!want.empty() && want.back().hi == k)
          want.back().hi = k + 1;
        else
          want.push_back({k, k + 1});
      }
      ASSERT_EQ(runs(s), want);
      ASSERT_EQ(s.covered(), covered);
      const std::uint64_t q = rng() % kKeys;
      std::uint64_t up = q;
      while (up < kKeys && bits[up]) ++up;
      ASSERT_EQ(s.covered_up_to(q), up);
    }
  }
}

// The marker arithmetic, against a walk one octet at a time (RFC 5044 §5: a marker at every
// multiple of 512 of Full Operation, taken before the octet due there).
TEST(MarkerArithmetic, LogicalToWireMatchesAnOctetWalk) {
  for (std::uint64_t pos = 0; pos < 1100; pos += 3) {
    std::uint64_t p = pos;
    std::uint64_t markers = 0;
    for (std::uint64_t n = 0; n < 1600; ++n) {
      ASSERT_EQ(mpa::logical_to_wire(pos, n), p) << pos << " " << n;
      ASSERT_EQ(mpa::marked_length(pos, n).wire, p - pos);
      ASSERT_EQ(mpa::marked_length(pos, n).markers, markers);
      if (mpa::is_marker_position(p)) {
        p += mpa::kMarkerSize;
        ++markers;
      }
      ASSERT_EQ(mpa::wire_position_of(pos, n), p);
      ++p;
    }
  }
}

TEST(MarkerArithmetic, CountsAndDistances) {
  EXPECT_EQ(mpa::octets_to_next_marker(0), 512u);
  EXPECT_EQ(mpa::octets_to_next_marker(500), 12u);
  EXPECT_EQ(mpa::first_marker_at_or_after(0), 0u);
  EXPECT_EQ(mpa::first_marker_at_or_after(1), 512u);
  EXPECT_EQ(mpa::markers_in(0, 1), 1u);
  EXPECT_EQ(mpa::markers_in(1, 512), 0u);
  EXPECT_EQ(mpa::markers_in(1, 513), 1u);
  EXPECT_EQ(mpa::markers_in(512, 1025), 2u);
}

}  // namespace
}  // namespace iwarp
