#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "rnic/memory.hpp"

namespace iwarp::rnic {
namespace {

TEST(RnicMemory, StagsAreUnpredictableAndNeverZero) {
  std::set<std::uint32_t> first_indexes;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    MemoryTable t(seed);
    std::vector<std::uint8_t> buf(16);
    auto pd = t.alloc_pd();
    STag s = t.register_region(pd, buf.data(), buf.size(), 0, kLocalWrite);
    EXPECT_NE(s.index(), 0u);
    first_indexes.insert(s.index());
  }
  EXPECT_GT(first_indexes.size(), 15u) << "the first STag index must depend on the seed";
}

TEST(RnicMemory, RemoteChecksFollowValidityPdRightsBoundsOrder) {
  MemoryTable t(7);
  std::vector<std::uint8_t> buf(4096);
  auto pd = t.alloc_pd(), other = t.alloc_pd();
  STag w = t.register_region(pd, buf.data(), buf.size(), 0x10000, kLocalWrite | kRemoteWrite);
  STag r = t.register_region(pd, buf.data(), buf.size(), 0x10000, kRemoteRead);

  auto ok = t.check_remote(w, pd, 0x10000 + 100, 200, kRemoteWrite, true);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, buf.data() + 100);
  EXPECT_TRUE(t.check_remote(w, pd, 0x10000, 4096, kRemoteWrite, true));  // the whole region

  auto code = [&](STag s, PdHandle p, std::uint64_t to, std::uint64_t len, std::uint32_t need,
                  bool ddp) { return t.check_remote(s, p, to, len, need, ddp).error().code; };
  EXPECT_EQ(code(STag{w.value() ^ 0x01}, pd, 0x10000, 1, kRemoteWrite, true),
            Errc::DdpTaggedInvalidStag);  // stale key
  EXPECT_EQ(code(STag::make(w.index() + 1000, 0), pd, 0x10000, 1, kRemoteWrite, true),
            Errc::DdpTaggedInvalidStag);  // unknown
  EXPECT_EQ(code(w, other, 0x10000, 1, kRemoteWrite, true), Errc::DdpTaggedStagNotAssociated);
  EXPECT_EQ(code(r, pd, 0x10000, 1, kRemoteWrite, true), Errc::DdpTaggedInvalidStag);  // no right
  EXPECT_EQ(code(w, pd, 0x10000 + 4000, 97, kRemoteWrite, true), Errc::DdpTaggedBaseBounds);
  EXPECT_EQ(code(w, pd, 0x10000 - 1, 1, kRemoteWrite, true), Errc::DdpTaggedBaseBounds);
  EXPECT_EQ(code(w, pd, ~0ull - 2, 8, kRemoteWrite, true), Errc::DdpTaggedToWrap);
  // RDMAP layer codes for a Read source.
  EXPECT_EQ(code(w, pd, 0x10000, 1, kRemoteRead, false), Errc::RdmapAccessRights);
  EXPECT_EQ(code(r, other, 0x10000, 1, kRemoteRead, false), Errc::RdmapStagNotAssociated);
  EXPECT_EQ(code(r, pd, 0x10000 + 4096, 1, kRemoteRead, false), Errc::RdmapBaseBounds);
  EXPECT_TRUE(t.check_remote(r, pd, 0x10000, 4096, kRemoteRead, false));
}

TEST(RnicMemory, InvalidateAndDeregister) {
  MemoryTable t(9);
  std::vector<std::uint8_t> buf(64);
  auto pd = t.alloc_pd(), other = t.alloc_pd();
  STag s = t.register_region(pd, buf.data(), buf.size(), 0, kLocalWrite | kRemoteWrite);
  EXPECT_EQ(t.registered_bytes(), 64u);
  EXPECT_FALSE(t.invalidate(s, other));  // another PD may not
  EXPECT_TRUE(t.check_local(s, pd, 0, 64, kLocalWrite));
  EXPECT_TRUE(t.invalidate(s, pd));
  EXPECT_EQ(t.check_local(s, pd, 0, 1, 0).error(), LocalFault::InvalidStag);
  auto e = t.check_remote(s, pd, 0, 1, kRemoteWrite, true);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().detail.find("invalidated"), std::string::npos);
  EXPECT_TRUE(t.deregister(s));
  EXPECT_FALSE(t.deregister(s));
  EXPECT_EQ(t.regions(), 0u);
}

TEST(RnicMemory, LocalChecks) {
  MemoryTable t(11);
  std::vector<std::uint8_t> buf(100);
  auto pd = t.alloc_pd(), other = t.alloc_pd();
  STag ro = t.register_region(pd, buf.data(), buf.size(), 5000, 0);
  EXPECT_TRUE(t.check_local(ro, pd, 5000, 100, 0));  // send data needs no right
  EXPECT_EQ(t.check_local(ro, pd, 5000, 1, kLocalWrite).error(), LocalFault::AccessRights);
  EXPECT_EQ(t.check_local(ro, other, 5000, 1, 0).error(), LocalFault::PdMismatch);
  EXPECT_EQ(t.check_local(ro, pd, 5050, 51, 0).error(), LocalFault::Bounds);
  EXPECT_EQ(t.check_local(ro, pd, 4999, 1, 0).error(), LocalFault::Bounds);
}

}  // namespace
}  // namespace iwarp::rnic
