// The posting thread's transmitter (docs/progress-model.md) over real sockets: a post from the
// application thread goes out without the engine, the engine takes over when the socket would
// block, two threads posting at once keep the stream whole and in order, deregistration,
// disconnect and moving to ERR racing posts, a capture sending everything through the engine,
// and completions reaching the CQs in batches; on the receive side, payload runs read straight
// into their target from the direct-read threshold up. Each test asserts the counters that tell
// which path ran, so it fails when the fast path is off.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "endpoint_pair.hpp"
#include "raw_peer.hpp"
#include "rnic/connection_manager.hpp"
#include "rnic/queue_pair.hpp"
#include "verbs_shim/endpoint.hpp"

using namespace iwarp;
using namespace iwarp::verbs;
using namespace iwarp::testing;
using namespace std::chrono_literals;

namespace {

EndpointOptions deep(std::uint32_t wrs) {
  EndpointOptions o;
  o.cap.max_send_wr = wrs;
  o.cap.max_recv_wr = wrs;
  o.cq_depth = static_cast<int>(2 * wrs);
  return o;
}

rnic::QueuePair& engine_qp(Endpoint& ep) {
  return *ep.qp()->qp;
}

rnic::CompletionQueue& engine_cq(ibv_cq* cq) {
  return *cq->cq;
}

// All `n` completions from `cq` (polled, bounded), in the order the CQ gives them.
std::vector<ibv_wc> drain(ibv_cq* cq, std::size_t n, std::chrono::milliseconds limit = 20s) {
  std::vector<ibv_wc> out;
  eventually(
      [&] {
        ibv_wc wc[64];
        int k = ibv_poll_cq(cq, 64, wc);
        for (int i = 0; i < k; ++i) out.push_back(wc[i]);
        return out.size() >= n;
      },
      limit);
  return out;
}

int post_send_from(Endpoint& e, ibv_wr_opcode op, ibv_mr* mr, const void* addr, std::uint32_t len,
                   std::uint64_t id, std::uint64_t raddr = 0, std::uint32_t rkey = 0) {
  return post_one(e.qp(), {.op = op,
                           .addr = addr,
                           .len = len,
                           .lkey = mr->lkey,
                           .remote_addr = raddr,
                           .rkey = rkey,
                           .flags = IBV_SEND_SIGNALED,
                           .wr_id = id});
}

}  // namespace

// A Send posted on the application thread reaches the peer while the engine of its own device
// is held: the posting thread built and wrote it (no doorbell was rung), and completed it.
TEST(FastPath, PostFromTheApplicationThreadNeedsNoEngine) {
  std::vector<std::uint8_t> src(256), dst(256, 0);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 3 + 1);
  auto p = connect_pair();
  auto* smr = p.client->reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  auto* dmr = p.server->reg(dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_one_recv(p.server->qp(), dst.data(), 256, dmr->lkey, 7), 0);
  const auto before = engine_qp(*p.client).stats();
  {
    EngineBlocker held(p.client->ctx(), 20s);
    ASSERT_TRUE(held.ok());
    ASSERT_EQ(post_send_from(*p.client, IBV_WR_SEND, smr, src.data(), 256, 1), 0);
    auto got = wait_wc(p.server->recv_cq(), 5s);
    ASSERT_TRUE(got) << "the Send waited for the held engine: no fast path";
    EXPECT_EQ(got->status, IBV_WC_SUCCESS);
    EXPECT_EQ(got->byte_len, 256u);
    auto sent = wait_wc(p.client->send_cq(), 2s);
    ASSERT_TRUE(sent) << "the Send's completion waited for the held engine";
    EXPECT_EQ(sent->wr_id, 1u);
    EXPECT_EQ(sent->status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(dst, src);
  const auto after = engine_qp(*p.client).stats();
  EXPECT_EQ(after.posted_inline_batches, before.posted_inline_batches + 1);
  EXPECT_EQ(after.posted_inline_wrs, before.posted_inline_wrs + 1);
  EXPECT_EQ(after.doorbells, before.doorbells);
  EXPECT_EQ(after.inline_handoffs, before.inline_handoffs);
}

// The receive side's direct reads (RxOptions::direct_min, RNIC_DIRECT_MIN): a payload run is
// read from the socket straight into its target when it is at least the threshold, through
// the staging buffer otherwise. Over loopback (MSS ~64 KiB) a 4 MiB Write's FPDUs carry
// ~64 KiB runs: read directly at the default threshold, never with it off or at 1 GiB. With
// the sender framing for an Ethernet MSS (1448: FPDUs of ~1.4 KiB, RFC 5044 §8) no run
// reaches the default, and a threshold of 256 reads them directly. Each way every octet
// arrives, and the counter tells the path.
TEST(FastPath, PayloadRunsFromTheThresholdUpAreReadStraightIntoTheirTarget) {
  constexpr std::size_t kTotal = 4 << 20;
  std::vector<std::uint8_t> src(kTotal);
  for (std::size_t i = 0; i < kTotal; ++i) src[i] = static_cast<std::uint8_t>((i * 7) ^ (i >> 9));
  struct Case {
    std::size_t threshold, emss;
    bool direct;
  };
  for (const Case k : {Case{rnic::kDirectReadMin, 0, true}, Case{rnic::kNoDirectReads, 0, false},
                       Case{rnic::kMaxDirectReadMin, 0, false},
                       Case{rnic::kDirectReadMin, 1448, false}, Case{256, 1448, true}}) {
    SCOPED_TRACE(::testing::Message() << "threshold " << k.threshold << ", sender's MSS "
                                      << (k.emss ? std::to_string(k.emss) : "loopback's"));
    EndpointOptions so, co;
    so.cm.direct_min = k.threshold;
    co.cm.emss = k.emss;
    std::vector<std::uint8_t> dst(kTotal, 0);
    auto p = connect_pair(so, co);
    auto* smr = p.client->reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    auto* dmr =
        p.server->reg(dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_TRUE(smr && dmr);
    // A Send behind the Write: its receive completes once the Write is placed (RFC 5040 §5.5).
    ASSERT_EQ(post_one_recv(p.server->qp(), dst.data(), 16, dmr->lkey, 9), 0);
    ASSERT_EQ(post_send_from(*p.client, IBV_WR_RDMA_WRITE, smr, src.data(), kTotal, 1,
                             reinterpret_cast<std::uintptr_t>(dst.data()), dmr->rkey),
              0);
    ASSERT_EQ(post_send_from(*p.client, IBV_WR_SEND, smr, src.data(), 0, 2), 0);
    auto got = wait_wc(p.server->recv_cq(), 20s);
    ASSERT_TRUE(got) << "the Send behind the Write never arrived";
    EXPECT_EQ(got->status, IBV_WC_SUCCESS);
    const auto& qp = engine_qp(*p.server);
    EXPECT_TRUE(dst == src);
    if (k.direct)
      EXPECT_GT(qp.stats().direct_reads, 0u) << "no payload run was read straight into place";
    else
      EXPECT_EQ(qp.stats().direct_reads, 0u) << "a run below the threshold was read directly";
  }
}

// The peer does not read (its engine is held) until the socket is full: the posting thread
// hands the rest of its batch to the engine, which writes it once there is room. Every octet
// arrives, in order, and the Writes complete in posting order.
TEST(FastPath, ASocketThatWouldBlockHandsTheRestToTheEngine) {
  constexpr std::size_t kChunk = 128 * 1024, kWrites = 128, kTotal = kChunk * kWrites;
  std::vector<std::uint8_t> src(kTotal), dst(kTotal, 0);
  for (std::size_t i = 0; i < kTotal; ++i)
    src[i] = static_cast<std::uint8_t>((i * 131) ^ (i >> 11));
  std::uint8_t mark_src[8] = {1}, mark_dst[8] = {};
  auto p = connect_pair(deep(512), deep(512));
  auto* smr = p.client->reg(src.data(), kTotal, IBV_ACCESS_LOCAL_WRITE);
  auto* kmr = p.client->reg(mark_src, 8, IBV_ACCESS_LOCAL_WRITE);
  auto* dmr = p.server->reg(dst.data(), kTotal, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  auto* mmr = p.server->reg(mark_dst, 8, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_one_recv(p.server->qp(), mark_dst, 8, mmr->lkey, 99), 0);
  const auto before = engine_qp(*p.client).stats();
  {
    EngineBlocker held(p.server->ctx(), 30s);
    ASSERT_TRUE(held.ok());
    for (std::size_t i = 0; i < kWrites; ++i)
      ASSERT_EQ(
          post_send_from(*p.client, IBV_WR_RDMA_WRITE, smr, src.data() + i * kChunk, kChunk, i,
                         reinterpret_cast<std::uintptr_t>(dst.data()) + i * kChunk, dmr->rkey),
          0);
    ASSERT_EQ(post_send_from(*p.client, IBV_WR_SEND, kmr, mark_src, 8, kWrites), 0);
    // The peer takes nothing: the socket fills and the posting thread gives up its batch.
    ASSERT_TRUE(eventually([&] { return engine_qp(*p.client).stats().inline_handoffs > 0; }, 10s))
        << "no posting-thread batch met a full socket";
  }
  auto wcs = drain(p.client->send_cq(), kWrites + 1);
  ASSERT_EQ(wcs.size(), kWrites + 1);
  for (std::size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].wr_id, i) << "completion " << i << " out of posting order";
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
  }
  auto mark = wait_wc(p.server->recv_cq(), 10s);
  ASSERT_TRUE(mark);
  EXPECT_EQ(mark->status, IBV_WC_SUCCESS);
  // The Send was placed after every Write before it (one stream, in order).
  EXPECT_TRUE(dst == src) << "the Writes' octets did not all arrive intact";
  const auto after = engine_qp(*p.client).stats();
  EXPECT_GT(after.posted_inline_batches, before.posted_inline_batches);
  EXPECT_GE(after.inline_handoffs, before.inline_handoffs + 1);
}

// Two threads post Sends on one QP at once: the stream stays whole (no interleaved FPDUs: the
// peer checks every CRC), each thread's messages arrive in its posting order (the MSNs select
// the receive WRs in order, RFC 5041 §5.3), and each thread's completions come in its order.
TEST(FastPath, TwoThreadsPostingOnOneQpKeepTheStreamInOrder) {
  constexpr std::uint32_t kPerThread = 1500, kLen = 64;
  std::vector<std::uint8_t> rbuf(2 * kPerThread * kLen, 0);
  std::vector<std::uint8_t> sbuf(2 * kPerThread * kLen);
  auto p = connect_pair(deep(4096), deep(4096));
  auto* rmr = p.server->reg(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  for (std::uint32_t i = 0; i < 2 * kPerThread; ++i)
    ASSERT_EQ(post_one_recv(p.server->qp(), rbuf.data() + i * kLen, kLen, rmr->lkey, i), 0);
  for (std::uint32_t t = 0; t < 2; ++t)
    for (std::uint32_t i = 0; i < kPerThread; ++i) {
      std::uint8_t* m = sbuf.data() + (t * kPerThread + i) * kLen;
      for (std::uint32_t k = 0; k < kLen; ++k) m[k] = static_cast<std::uint8_t>(t * 101 + i + k);
      std::memcpy(m, &t, 4);
      std::memcpy(m + 4, &i, 4);
    }
  auto* smr = p.client->reg(sbuf.data(), sbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  const auto before = engine_qp(*p.client).stats();
  std::atomic<int> ready{0};
  std::atomic<int> errors{0};
  auto poster = [&](std::uint32_t t) {
    ++ready;
    while (ready.load() < 2) std::this_thread::yield();
    for (std::uint32_t i = 0; i < kPerThread; ++i) {
      const std::uint8_t* m = sbuf.data() + (t * kPerThread + i) * kLen;
      if (post_send_from(*p.client, IBV_WR_SEND, smr, m, kLen, (std::uint64_t{t} << 32) | i) != 0)
        ++errors;
    }
  };
  std::thread a(poster, 0), b(poster, 1);
  a.join();
  b.join();
  ASSERT_EQ(errors.load(), 0);
  auto sent = drain(p.client->send_cq(), 2 * kPerThread);
  ASSERT_EQ(sent.size(), 2u * kPerThread);
  std::uint32_t next[2] = {0, 0};
  for (const auto& wc : sent) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    const auto t = static_cast<std::uint32_t>(wc.wr_id >> 32);
    ASSERT_LT(t, 2u);
    EXPECT_EQ(static_cast<std::uint32_t>(wc.wr_id), next[t]++) << "thread " << t;
  }
  auto recvd = drain(p.server->recv_cq(), 2 * kPerThread);
  ASSERT_EQ(recvd.size(), 2u * kPerThread);
  std::uint32_t seen[2] = {0, 0};
  for (std::uint32_t i = 0; i < recvd.size(); ++i) {
    ASSERT_EQ(recvd[i].status, IBV_WC_SUCCESS) << "receive " << i;
    ASSERT_EQ(recvd[i].wr_id, i);  // receive WRs complete in MSN order
    const std::uint8_t* m = rbuf.data() + i * kLen;
    std::uint32_t t, k;
    std::memcpy(&t, m, 4);
    std::memcpy(&k, m + 4, 4);
    ASSERT_LT(t, 2u);
    EXPECT_EQ(k, seen[t]++) << "thread " << t << "'s messages out of posting order";
    EXPECT_EQ(std::memcmp(m, sbuf.data() + (t * kPerThread + k) * kLen, kLen), 0);
  }
  EXPECT_EQ(seen[0], kPerThread);
  EXPECT_EQ(seen[1], kPerThread);
  EXPECT_GT(engine_qp(*p.client).stats().posted_inline_batches, before.posted_inline_batches);
  EXPECT_EQ(engine_qp(*p.client).state(), rnic::QpState::Rts);
}

// A region deregistered while another thread posts Writes from it: once ibv_dereg_mr returns,
// nothing reads it (the test writes a new owner's octets into it at once, which must never
// reach the peer; under ASan a read of it after it is freed would be reported).
TEST(FastPath, DeregistrationRacingPostsReadsNoFreedMemory) {
  constexpr std::size_t kChunk = 4096, kSlots = 512;
  for (int round = 0; round < 3; ++round) {
    auto src = std::make_unique<std::vector<std::uint8_t>>(kChunk * 16, std::uint8_t{0xAB});
    std::vector<std::uint8_t> dst(kChunk * kSlots, 0);
    auto p = connect_pair(deep(1024), deep(1024));
    auto* smr = ibv_reg_mr(p.client->pd(), src->data(), src->size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(smr, nullptr);
    auto* dmr = ibv_reg_mr(p.server->pd(), dst.data(), dst.size(),
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(dmr, nullptr);
    const auto before = engine_qp(*p.client).stats();
    // The poster keeps using the address and lkey after the region is gone (as a careless
    // program would): only as numbers in its work requests.
    const std::uintptr_t src_addr = reinterpret_cast<std::uintptr_t>(src->data());
    const std::uint32_t src_lkey = smr->lkey;
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> posted{0}, completed{0};
    std::thread poster([&] {
      for (std::uint64_t i = 0; !stop.load() && i < 100000; ++i) {
        const auto slot = i % kSlots;
        if (post_one(p.client->qp(),
                     {.op = IBV_WR_RDMA_WRITE,
                      .addr = reinterpret_cast<const void*>(src_addr + (i % 16) * kChunk),
                      .len = kChunk,
                      .lkey = src_lkey,
                      .remote_addr = reinterpret_cast<std::uintptr_t>(dst.data()) + slot * kChunk,
                      .rkey = dmr->rkey,
                      .flags = IBV_SEND_SIGNALED,
                      .wr_id = i}) != 0) {
          // The send queue is full: take completions.
          ibv_wc wc[64];
          const int k = ibv_poll_cq(p.client->send_cq(), 64, wc);
          completed += static_cast<std::uint64_t>(k);
          if (k == 0) std::this_thread::yield();
          --i;
          continue;
        }
        ++posted;
        // Completions come as fast as posts (the posting thread sends): take them as they
        // come, or the CQ overflows long before the send queue fills.
        ibv_wc wc[64];
        completed += static_cast<std::uint64_t>(ibv_poll_cq(p.client->send_cq(), 64, wc));
        if (engine_qp(*p.client).state() != rnic::QpState::Rts) break;
      }
    });
    ASSERT_TRUE(
        eventually([&] { return posted.load() > 200u * static_cast<unsigned>(round + 1); }));
    ASSERT_EQ(ibv_dereg_mr(smr), 0);
    // The region is someone else's now.
    std::fill(src->begin(), src->end(), std::uint8_t{0x11});
    src.reset();
    stop = true;
    poster.join();
    // Every WR completes (sent, failed on the deregistered lkey, or flushed); then the peer
    // holds only the old owner's octets (or nothing) in every slot.
    const std::uint64_t left = posted.load() - completed.load();
    EXPECT_EQ(drain(p.client->send_cq(), left).size(), left);
    std::this_thread::sleep_for(100ms);
    // Once the peer's region is deregistered its engine places nothing more there.
    ASSERT_EQ(ibv_dereg_mr(dmr), 0);
    EXPECT_EQ(std::count(dst.begin(), dst.end(), std::uint8_t{0x11}), 0);
    EXPECT_GT(engine_qp(*p.client).stats().posted_inline_batches, before.posted_inline_batches);
  }
}

// Disconnect, and moving to ERR, while another thread posts Sends: every posted WR completes
// exactly once (sent or flushed), in posting order, within a bound.
TEST(FastPath, DisconnectAndErrorRacingPostsCompleteEveryWrOnceInOrder) {
  for (int variant = 0; variant < 2; ++variant) {
    std::vector<std::uint8_t> sbuf(64, 0x42), rbuf(64 * 1024);
    auto p = connect_pair(deep(1024), deep(1024));
    auto* smr = p.client->reg(sbuf.data(), sbuf.size(), IBV_ACCESS_LOCAL_WRITE);
    auto* rmr = p.server->reg(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
    for (std::uint32_t i = 0; i < 1024; ++i)
      ASSERT_EQ(post_one_recv(p.server->qp(), rbuf.data() + (i % 1024) * 64, 64, rmr->lkey, i), 0);
    const auto before = engine_qp(*p.client).stats();
    std::atomic<std::uint64_t> posted{0};
    std::atomic<bool> stop{false};
    std::thread poster([&] {
      for (std::uint64_t i = 0; i < 900 && !stop.load(); ++i) {
        if (post_send_from(*p.client, IBV_WR_SEND, smr, sbuf.data(), 64, i) != 0) break;
        ++posted;
        if (i % 8 == 7) std::this_thread::yield();
      }
    });
    ASSERT_TRUE(eventually([&] { return posted.load() > 100; }));
    if (variant == 0) {
      ASSERT_EQ(rdma_disconnect(p.client->id()), 0);
    } else {
      engine_qp(*p.client).modify_to_error();  // what the drop-in's ibv_modify_qp(ERR) does
    }
    stop = true;
    poster.join();
    const std::uint64_t n = posted.load();
    auto wcs = drain(p.client->send_cq(), n);
    ASSERT_EQ(wcs.size(), n) << "variant " << variant;
    // Each WR once; the sent ones are a prefix of the posting order and complete in it (a WR
    // posted after the QP left RTS may report its flush before older flushed ones: that
    // completion is queued by post_send itself).
    std::vector<int> seen(n, 0);
    std::uint64_t successes = 0, first_flushed = n;
    for (std::uint64_t i = 0; i < n; ++i) {
      ASSERT_LT(wcs[i].wr_id, n);
      ++seen[wcs[i].wr_id];
      if (wcs[i].status == IBV_WC_SUCCESS) {
        EXPECT_EQ(wcs[i].wr_id, successes) << "variant " << variant;
        ++successes;
      } else {
        EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
        first_flushed = std::min<std::uint64_t>(first_flushed, wcs[i].wr_id);
      }
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(first_flushed, successes) << "a WR was sent after an older one was flushed";
    ibv_wc extra;
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(ibv_poll_cq(p.client->send_cq(), 1, &extra), 0) << "a WR completed twice";
    EXPECT_GT(engine_qp(*p.client).stats().posted_inline_batches, before.posted_inline_batches);
  }
}

namespace {
// Records what a QP sends.
struct RecordingTap : rnic::WireTap {
  std::mutex mu;
  std::uint64_t outbound = 0;
  void on_data(bool out, ByteSpan data) override {
    std::lock_guard l(mu);
    if (out) outbound += data.size();
  }
  void on_close(bool) override {}
};
}  // namespace

// With a capture installed every post goes through the engine (the tap is the engine's), and
// the capture holds every octet the QP sent.
TEST(FastPath, ACaptureSendsEverythingThroughTheEngine) {
  auto tap = std::make_shared<RecordingTap>();
  EndpointOptions co = deep(256);
  co.cm.tap = [tap](const rnic::TapInfo&) { return tap; };
  std::vector<std::uint8_t> sbuf(100, 0x5A), rbuf(100 * 200);
  auto p = connect_pair(deep(256), co);
  auto* smr = p.client->reg(sbuf.data(), sbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  auto* rmr = p.server->reg(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  for (std::uint32_t i = 0; i < 200; ++i)
    ASSERT_EQ(post_one_recv(p.server->qp(), rbuf.data() + i * 100, 100, rmr->lkey, i), 0);
  const auto before = engine_qp(*p.client).stats();
  std::uint64_t tapped_before;
  {
    std::lock_guard l(tap->mu);
    tapped_before = tap->outbound;  // the MPA exchange, and the RTR when it was sent
  }
  for (std::uint32_t i = 0; i < 200; ++i)
    ASSERT_EQ(post_send_from(*p.client, IBV_WR_SEND, smr, sbuf.data(), 100, i), 0);
  ASSERT_EQ(drain(p.client->send_cq(), 200).size(), 200u);
  ASSERT_EQ(drain(p.server->recv_cq(), 200).size(), 200u);
  const auto after = engine_qp(*p.client).stats();
  EXPECT_EQ(after.posted_inline_batches, before.posted_inline_batches);
  EXPECT_GT(after.doorbells, before.doorbells);
  std::lock_guard l(tap->mu);
  EXPECT_EQ(tap->outbound - tapped_before, after.bytes_sent - before.bytes_sent);
  EXPECT_EQ(after.bytes_sent - before.bytes_sent, 200u * (100 + 24));  // header, CRC, pad
  EXPECT_TRUE(
      eventually([&] { return engine_qp(*p.server).stats().bytes_received == after.bytes_sent; }));
}

// Completions reach the CQs in batches: many Sends read in one go complete on the receiver
// with fewer CQ pushes than completions, and a chain of Sends posted at once completes on the
// sender as one push.
TEST(FastPath, CompletionsReachTheCqInBatches) {
  constexpr std::uint32_t kN = 200;
  std::vector<std::uint8_t> sbuf(32, 0x33), rbuf(32 * kN);
  auto p = connect_pair(deep(512), deep(512));
  auto* smr = p.client->reg(sbuf.data(), sbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  auto* rmr = p.server->reg(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  for (std::uint32_t i = 0; i < kN; ++i)
    ASSERT_EQ(post_one_recv(p.server->qp(), rbuf.data() + i * 32, 32, rmr->lkey, i), 0);
  const auto rbefore = engine_cq(p.server->recv_cq()).stats();
  {
    // The receiver's engine is held while everything is sent: it reads it all at once.
    EngineBlocker held(p.server->ctx(), 20s);
    ASSERT_TRUE(held.ok());
    for (std::uint32_t i = 0; i < kN; ++i)
      ASSERT_EQ(post_send_from(*p.client, IBV_WR_SEND, smr, sbuf.data(), 32, i), 0);
    ASSERT_EQ(drain(p.client->send_cq(), kN).size(), kN);
  }
  auto got = drain(p.server->recv_cq(), kN);
  ASSERT_EQ(got.size(), kN);
  for (std::uint32_t i = 0; i < kN; ++i) EXPECT_EQ(got[i].wr_id, i);
  const auto rafter = engine_cq(p.server->recv_cq()).stats();
  EXPECT_EQ(rafter.completions - rbefore.completions, kN);
  EXPECT_LT(rafter.pushes - rbefore.pushes, kN / 4) << "receive completions pushed one by one";

  // A chain of 16 Sends, posted with one ibv_post_send, is one batch and one CQ push.
  const auto sbefore = engine_cq(p.client->send_cq()).stats();
  const auto qbefore = engine_qp(*p.client).stats();
  ibv_sge sge{reinterpret_cast<std::uintptr_t>(sbuf.data()), 32, smr->lkey};
  std::vector<ibv_send_wr> chain(16);
  for (std::size_t i = 0; i < chain.size(); ++i) {
    chain[i].wr_id = 1000 + i;
    chain[i].sg_list = &sge;
    chain[i].num_sge = 1;
    chain[i].opcode = IBV_WR_SEND;
    chain[i].send_flags = IBV_SEND_SIGNALED;
    chain[i].next = i + 1 < chain.size() ? &chain[i + 1] : nullptr;
  }
  for (std::uint32_t i = 0; i < 16; ++i)
    ASSERT_EQ(post_one_recv(p.server->qp(), rbuf.data() + i * 32, 32, rmr->lkey, i), 0);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.client->qp(), chain.data(), &bad), 0);
  auto chained = drain(p.client->send_cq(), 16);
  ASSERT_EQ(chained.size(), 16u);
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(chained[i].wr_id, 1000 + i);
  const auto safter = engine_cq(p.client->send_cq()).stats();
  const auto qafter = engine_qp(*p.client).stats();
  EXPECT_EQ(safter.completions - sbefore.completions, 16u);
  EXPECT_EQ(safter.pushes - sbefore.pushes, 1u);
  EXPECT_EQ(qafter.posted_inline_batches, qbefore.posted_inline_batches + 1);
  EXPECT_EQ(qafter.posted_inline_wrs, qbefore.posted_inline_wrs + 16);
}
