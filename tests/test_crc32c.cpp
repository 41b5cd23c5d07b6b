#include <gtest/gtest.h>

#include <random>
#include <string>

#include "mpa/crc32c.hpp"

namespace iwarp::mpa {
namespace {

TEST(Crc32c, CheckValueOf123456789) {
  EXPECT_EQ(crc32c(as_bytes(std::string("123456789"))), 0xE3069283u);
}

TEST(Crc32c, ThirtyTwoZeroBytes) {
  Bytes z(32, 0);
  EXPECT_EQ(crc32c(z), 0x8A9136AAu);
  EXPECT_EQ(~crc32c_update_isal(~0u, z), 0x8A9136AAu);
  if (crc32c_has_sse42()) {
    EXPECT_EQ(~crc32c_update_sse42(~0u, z), 0x8A9136AAu);
  }
}

TEST(Crc32c, EmptyInputIsZero) {
  EXPECT_EQ(crc32c({}), 0u);
}

// Both implementations agree for every length around the size threshold and beyond, at every
// alignment, and chained updates equal one update over the whole buffer.
TEST(Crc32c, IsalAndSse42AgreeOnAllSizesAndAlignments) {
  ASSERT_TRUE(crc32c_has_sse42()) << "this machine has no SSE4.2; the fast path is unused";
  std::mt19937 rng(7);
  Bytes buf(5000);
  for (auto& b : buf) b = static_cast<std::uint8_t>(rng());
  for (std::size_t align = 0; align < 8; ++align) {
    for (std::size_t n = 0; n < 1100; n += (n < 300 ? 1 : 37)) {
      ByteSpan s(buf.data() + align, n);
      ASSERT_EQ(crc32c_update_isal(~0u, s), crc32c_update_sse42(~0u, s)) << n << " " << align;
    }
  }
  ByteSpan all(buf);
  Crc32c chained;
  for (std::size_t off = 0; off < all.size();) {
    std::size_t n = std::min<std::size_t>(all.size() - off, rng() % 700);
    chained.update(all.subspan(off, n));
    off += n;
  }
  EXPECT_EQ(chained.value(), crc32c(all));
}

}  // namespace
}  // namespace iwarp::mpa
