// Two emulated RNICs in one process, connected over 127.0.0.1 through the verbs shim: every
// operation with its data checked, and the error paths with their Terminates and flushes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <numeric>
#include <thread>

#include "endpoint_pair.hpp"
#include "verbs_shim/endpoint.hpp"

using namespace iwarp;
using iwarp::testing::connect_pair;
using iwarp::testing::Pair;
using namespace iwarp::verbs;

namespace {

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7 + (i >> 9));
  return v;
}

int post_recv(Endpoint& e, ibv_mr* mr, void* addr, std::uint32_t len, std::uint64_t id) {
  return post_one_recv(e.qp(), addr, len, mr->lkey, id);
}

int post_send(Endpoint& e, ibv_wr_opcode op, ibv_mr* mr, void* addr, std::uint32_t len,
              std::uint64_t id, std::uint64_t raddr = 0, std::uint32_t rkey = 0,
              unsigned flags = IBV_SEND_SIGNALED) {
  return post_one(e.qp(), {.op = op,
                           .addr = addr,
                           .len = len,
                           .lkey = mr ? mr->lkey : 0,
                           .remote_addr = raddr,
                           .rkey = rkey,
                           .flags = flags,
                           .wr_id = id});
}

}  // namespace

TEST(RnicLoopback, SendWriteReadData) {
  // (Declared before the endpoints, so freed after them: the server's engine answers the last
  // Read straight out of `dst`, and nothing here waits for that sendmsg() to return.)
  std::deque<std::vector<std::uint8_t>> keep;
  auto p = connect_pair();
  auto& s = *p.server;
  auto& c = *p.client;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096},
                        std::size_t{65537}, std::size_t{1} << 20}) {
    SCOPED_TRACE(n);
    // The buffers stay registered until the endpoints go, so they live as long (the engine
    // may still be sending from them when an iteration ends).
    auto& src = keep.emplace_back(pattern(n, static_cast<std::uint8_t>(n)));
    auto& dst = keep.emplace_back(n + 16, 0xEE);
    auto& rdst = keep.emplace_back(n + 16, 0xCC);
    auto* smr = c.reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    auto* rmr = s.reg(dst.data(), dst.size(),
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    auto* cmr = c.reg(rdst.data(), rdst.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    // Send
    ASSERT_EQ(post_recv(s, rmr, dst.data(), static_cast<std::uint32_t>(n + 16), 1), 0);
    ASSERT_EQ(post_send(c, IBV_WR_SEND, smr, src.data(), static_cast<std::uint32_t>(n), 2), 0);
    auto rwc = s.wait(s.recv_cq());
    ASSERT_TRUE(rwc) << rwc.error();
    EXPECT_EQ(rwc->status, IBV_WC_SUCCESS);
    EXPECT_EQ(rwc->byte_len, n);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin()));
    auto swc = c.wait(c.send_cq());
    ASSERT_TRUE(swc) << swc.error();
    EXPECT_EQ(swc->status, IBV_WC_SUCCESS);
    // Write
    std::fill(dst.begin(), dst.end(), 0xEE);
    ASSERT_EQ(post_send(c, IBV_WR_RDMA_WRITE, smr, src.data(), static_cast<std::uint32_t>(n), 3,
                        reinterpret_cast<std::uint64_t>(dst.data()), rmr->rkey),
              0);
    swc = c.wait(c.send_cq());
    ASSERT_TRUE(swc) << swc.error();
    EXPECT_EQ(swc->status, IBV_WC_SUCCESS);
    // Read back what was written (this also orders after the Write on the stream).
    ASSERT_EQ(post_send(c, IBV_WR_RDMA_READ, cmr, rdst.data(), static_cast<std::uint32_t>(n), 4,
                        reinterpret_cast<std::uint64_t>(dst.data()), rmr->rkey),
              0);
    swc = c.wait(c.send_cq());
    ASSERT_TRUE(swc) << swc.error();
    EXPECT_EQ(swc->status, IBV_WC_SUCCESS) << ibv_wc_status_str(swc->status);
    EXPECT_EQ(swc->opcode, IBV_WC_RDMA_READ);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), rdst.begin()));
    EXPECT_EQ(rdst[n], 0xCC);
    EXPECT_EQ(dst[n], 0xEE);
  }
}
