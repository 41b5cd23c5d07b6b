// Busy polling (docs/progress-model.md "Busy polling"): a program thread that polls an empty CQ
// runs the engine's handlers itself while the engine thread is parked, over real sockets. Each
// test reads Device::engine_stats() to tell which thread did the work, so it fails when the
// polling thread does nothing; every wait is bounded.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "endpoint_pair.hpp"
#include "raw_peer.hpp"
#include "rnic/device.hpp"
#include "rnic/queue_pair.hpp"
#include "verbs_shim/endpoint.hpp"

using namespace iwarp;
using namespace iwarp::verbs;
using namespace iwarp::testing;
using namespace std::chrono_literals;

namespace {

rnic::Device& device_of(Endpoint& e) {
  return *e.ctx()->dev;
}

// Spins on ibv_poll_cq (as perftest does) until one completion comes or `limit` passes.
std::optional<ibv_wc> spin_wc(ibv_cq* cq, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  ibv_wc wc;
  while (std::chrono::steady_clock::now() < end)
    if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
  return std::nullopt;
}

// Polls `cq` (empty) until the device's engine thread has parked for this thread, at most 5 s:
// from then on the polling thread is the one that runs the engine.
bool take_engine(rnic::Device& dev, ibv_cq* cq) {
  const auto parks = dev.engine_stats().parks;
  const auto end = std::chrono::steady_clock::now() + 5s;
  ibv_wc wc;
  while (std::chrono::steady_clock::now() < end) {
    if (ibv_poll_cq(cq, 1, &wc) != 0) return false;
    if (dev.engine_stats().parks > parks) return true;
  }
  return false;
}

void fill(std::vector<std::uint8_t>& v, unsigned seed) {
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>(i * 7 + seed * 13);
}

// One side's buffers for the ping-pong: what it sends, where it receives, and (server) a region
// the client reads.
struct Buffers {
  std::vector<std::uint8_t> out = std::vector<std::uint8_t>(64), in = std::vector<std::uint8_t>(64),
                            readable = std::vector<std::uint8_t>(4096),
                            read_into = std::vector<std::uint8_t>(4096);
  ibv_mr *out_mr = nullptr, *in_mr = nullptr, *readable_mr = nullptr, *read_into_mr = nullptr;
  Endpoint* ep = nullptr;
  // Deregistered before the memory goes: the engine lets go of it then (a Read Response it
  // sent from `readable` is ordered before the free only through the socket, which TSan
  // cannot see).
  ~Buffers() {
    if (ep)
      for (ibv_mr* m : {out_mr, in_mr, readable_mr, read_into_mr})
        if (m) ep->dereg(m);
  }
  void reg(Endpoint& e) {
    ep = &e;
    out_mr = e.reg(out.data(), out.size(), IBV_ACCESS_LOCAL_WRITE);
    in_mr = e.reg(in.data(), in.size(), IBV_ACCESS_LOCAL_WRITE);
    readable_mr =
        e.reg(readable.data(), readable.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    // An iWARP Read's sink is written by the peer's Read Responses (RFC 5040 §4.4).
    read_into_mr =
        e.reg(read_into.data(), read_into.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  }
};

// `rounds` of: the client Sends 64 octets, the server (spinning on its CQ) checks them and Sends
// back; every 4th round the client also RDMA Reads 4 KiB of the server's memory (the server's
// engine answers the Read Request). Byte-exact on both sides. Returns "" or what went wrong.
std::string ping_pong(Endpoint& server, Endpoint& client, int rounds, unsigned seed) {
  Buffers s, c;
  s.reg(server);
  c.reg(client);
  fill(s.readable, seed);
  if (post_one_recv(server.qp(), s.in.data(), 64, s.in_mr->lkey, 1000) != 0)
    return "server: post_recv failed";
  std::atomic<bool> stop{false};
  std::string serr, cerr;  // each thread its own
  std::thread srv([&] {
    auto fail = [&] { stop = true; };
    for (int r = 0; r < rounds && !stop.load(); ++r) {
      auto got = spin_wc(server.recv_cq());
      if (!got || got->status != IBV_WC_SUCCESS || got->byte_len != 64) {
        serr = fmt::format("server: round {}: no good receive (status {})", r,
                           got ? static_cast<int>(got->status) : -1);
        return fail();
      }
      std::vector<std::uint8_t> want(64);
      fill(want, seed + static_cast<unsigned>(r));
      if (s.in != want) {
        serr = fmt::format("server: round {}: the Send's octets differ", r);
        return fail();
      }
      // The next round's receive goes before this round's reply, which the next Send follows.
      if (r + 1 < rounds && post_one_recv(server.qp(), s.in.data(), 64, s.in_mr->lkey,
                                          1001 + static_cast<unsigned>(r)) != 0) {
        serr = "server: post_recv failed";
        return fail();
      }
      fill(s.out, seed + 1000 + static_cast<unsigned>(r));
      if (post_one(server.qp(), {.op = IBV_WR_SEND,
                                 .addr = s.out.data(),
                                 .len = 64,
                                 .lkey = s.out_mr->lkey,
                                 .flags = IBV_SEND_SIGNALED,
                                 .wr_id = 5000u + static_cast<unsigned>(r)}) != 0) {
        serr = "server: post_send failed";
        return fail();
      }
      auto sent = spin_wc(server.send_cq());
      if (!sent || sent->status != IBV_WC_SUCCESS) {
        serr = fmt::format("server: round {}: the reply did not complete", r);
        return fail();
      }
    }
  });
  for (int r = 0; r < rounds && !stop.load(); ++r) {
    if (post_one_recv(client.qp(), c.in.data(), 64, c.in_mr->lkey, 2000 + r) != 0) {
      cerr = "client: post_recv failed";
      stop = true;
      break;
    }
    fill(c.out, seed + static_cast<unsigned>(r));
    if (post_one(client.qp(), {.op = IBV_WR_SEND,
                               .addr = c.out.data(),
                               .len = 64,
                               .lkey = c.out_mr->lkey,
                               .flags = IBV_SEND_SIGNALED,
                               .wr_id = 1}) != 0) {
      cerr = "client: post_send failed";
      stop = true;
      break;
    }
    auto sent = wait_wc(client.send_cq(), 10s);
    auto back = wait_wc(client.recv_cq(), 10s);
    std::vector<std::uint8_t> want(64);
    fill(want, seed + 1000 + static_cast<unsigned>(r));
    if (!sent || !back || back->status != IBV_WC_SUCCESS || c.in != want) {
      cerr = fmt::format("client: round {}: {}", r,
                         !sent   ? "the Send did not complete"
                         : !back ? "no reply"
                                 : "the reply's octets differ");
      stop = true;
      break;
    }
    if (r % 4 == 3) {
      std::fill(c.read_into.begin(), c.read_into.end(), 0);
      if (post_one(client.qp(), {.op = IBV_WR_RDMA_READ,
                                 .addr = c.read_into.data(),
                                 .len = 4096,
                                 .lkey = c.read_into_mr->lkey,
                                 .remote_addr = reinterpret_cast<std::uint64_t>(s.readable.data()),
                                 .rkey = s.readable_mr->rkey,
                                 .flags = IBV_SEND_SIGNALED,
                                 .wr_id = 3}) != 0) {
        cerr = "client: post Read failed";
        stop = true;
        break;
      }
      auto read = wait_wc(client.send_cq(), 10s);
      std::vector<std::uint8_t> expect(4096);
      fill(expect, seed);
      if (!read || read->status != IBV_WC_SUCCESS || c.read_into != expect) {
        cerr = fmt::format("client: round {}: the Read {}", r,
                           !read ? "did not complete" : "brought other octets");
        stop = true;
        break;
      }
    }
  }
  srv.join();
  return serr.empty() ? cerr : serr + (cerr.empty() ? "" : "; " + cerr);
}

}  // namespace

// The server's thread spins on its CQ with busy polling on: the receives it waits for and the
// Read Requests it answers are run by that thread (the engine thread parked), and every octet
// arrives. With busy polling off the same run leaves everything to the engine thread.
TEST(BusyPoll, APollingThreadRunsTheReceivesItWaitsFor) {
  constexpr int kRounds = 200;
  {
    auto p = connect_pair();
    device_of(*p.server).set_busy_poll(true);
    // A descheduled poller keeps the engine (the default lease is 250 us).
    device_of(*p.server).set_busy_poll_lease(2s);
    const auto before = device_of(*p.server).engine_stats();
    ASSERT_EQ(ping_pong(*p.server, *p.client, kRounds, 1), "");
    const auto after = device_of(*p.server).engine_stats();
    // At least a read of the socket per received Send; a loaded machine may deschedule the
    // poller past the lease now and then, when the engine thread takes a round.
    EXPECT_GE(after.polled_handlers - before.polled_handlers, std::uint64_t{kRounds / 2})
        << "engine thread ran " << after.engine_handlers - before.engine_handlers;
    EXPECT_GT(after.parks, before.parks) << "the engine thread never stepped aside";
    // The client did not busy-poll: its engine thread did all its work.
    EXPECT_EQ(device_of(*p.client).engine_stats().polled_handlers, 0u);
  }
  {
    auto p = connect_pair();
    ASSERT_EQ(ping_pong(*p.server, *p.client, 20, 2), "");
    EXPECT_EQ(device_of(*p.server).engine_stats().polled_handlers, 0u);
    EXPECT_EQ(device_of(*p.server).engine_stats().parks, 0u);
  }
}

// A program that stops polling gets its engine thread back: a Send that arrives after the
// last poll is received and completed into the CQ without anyone polling (the CQ's ring is read
// without driving progress).
TEST(BusyPoll, TheEngineThreadTakesOverWhenTheProgramStopsPolling) {
  std::vector<std::uint8_t> src(300), dst(300, 0);  // outlive the endpoints
  auto p = connect_pair();
  auto& dev = device_of(*p.server);
  dev.set_busy_poll(true);
  ASSERT_EQ(ping_pong(*p.server, *p.client, 8, 3), "");
  ASSERT_GT(dev.engine_stats().parks, 0u);
  fill(src, 9);
  auto* smr = p.client->reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  auto* dmr = p.server->reg(dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_one_recv(p.server->qp(), dst.data(), 300, dmr->lkey, 77), 0);
  // The polling thread holds the engine when the Send goes, and then stops polling.
  ASSERT_TRUE(take_engine(dev, p.server->recv_cq()));
  const auto polled = dev.engine_stats().polled_handlers;
  ASSERT_EQ(post_one(p.client->qp(), {.op = IBV_WR_SEND,
                                      .addr = src.data(),
                                      .len = 300,
                                      .lkey = smr->lkey,
                                      .flags = IBV_SEND_SIGNALED,
                                      .wr_id = 1}),
            0);
  rnic::CompletionQueue& rcq = *p.server->recv_cq()->cq;
  EXPECT_TRUE(eventually([&] { return rcq.used() == 1; }, 5s))
      << "nobody received the Send once the program stopped polling";
  EXPECT_EQ(dev.engine_stats().polled_handlers, polled) << "no poll ran since";
  auto got = wait_wc(p.server->recv_cq(), 1s);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->wr_id, 77u);
  EXPECT_EQ(got->byte_len, 300u);
  EXPECT_EQ(dst, src);
}

// A polling thread that unregisters memory waits for the engine thread to take the region out
// of every QP; parked for that very thread, the engine thread is woken at once (a hand-back),
// not when its lease runs out (2 s here), as for a program that stops polling to wait.
TEST(BusyPoll, UnregisteringHandsTheEngineBackInsteadOfWaitingOutTheLease) {
  std::vector<std::uint8_t> buf(4096);  // outlives the endpoints
  auto p = connect_pair();
  auto& dev = device_of(*p.server);
  dev.set_busy_poll(true);
  ASSERT_EQ(ping_pong(*p.server, *p.client, 8, 3), "");
  auto* mr = p.server->reg(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  dev.set_busy_poll_lease(2s);
  ASSERT_TRUE(take_engine(dev, p.server->recv_cq()));
  const auto handbacks = dev.engine_stats().handbacks;
  ASSERT_TRUE(p.server->dereg(mr));
  EXPECT_GT(dev.engine_stats().handbacks, handbacks)
      << "the engine thread ran the revocation only when its lease ran out";
}

// Arming a CQ (what a program does before it sleeps on the channel) hands the engine back to
// the engine thread at once, and polling an armed CQ (the poll between ibv_req_notify_cq and
// waiting for the event) does not take it: the engine thread delivers the event.
TEST(BusyPoll, AnArmedCqIsWaitedOnNotDriven) {
  std::vector<std::uint8_t> src(64), dst(64, 0);  // outlive the endpoints
  auto p = connect_pair();
  auto& dev = device_of(*p.server);
  dev.set_busy_poll(true);
  ASSERT_EQ(ping_pong(*p.server, *p.client, 4, 4), "");
  fill(src, 5);
  auto* smr = p.client->reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  auto* dmr = p.server->reg(dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_one_recv(p.server->qp(), dst.data(), 64, dmr->lkey, 8), 0);
  // A 2 s lease: only arming, not the lease running out, can hand the engine back here.
  dev.set_busy_poll_lease(2s);
  ASSERT_TRUE(take_engine(dev, p.server->recv_cq()));
  const auto handbacks = dev.engine_stats().handbacks;
  ASSERT_EQ(ibv_req_notify_cq(p.server->recv_cq(), 0), 0);
  // Arming handed the engine back at once (not at the end of the lease).
  EXPECT_TRUE(eventually([&] { return dev.engine_stats().handbacks > handbacks; }, 5s))
      << "arming the CQ did not hand the engine back";
  const auto polled = dev.engine_stats().polled_handlers;
  ASSERT_EQ(post_one(p.client->qp(), {.op = IBV_WR_SEND,
                                      .addr = src.data(),
                                      .len = 64,
                                      .lkey = smr->lkey,
                                      .flags = IBV_SEND_SIGNALED,
                                      .wr_id = 1}),
            0);
  auto got = spin_wc(p.server->recv_cq(), 5s);
  ASSERT_TRUE(got) << "the engine thread did not take over for an armed CQ";
  EXPECT_EQ(got->wr_id, 8u);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(dev.engine_stats().polled_handlers, polled)
      << "polls of an armed CQ ran engine handlers";
  auto* ch = p.server->recv_cq()->channel;
  ASSERT_NE(ch, nullptr);
  EXPECT_NE(ch->ch.wait(1s), nullptr) << "the armed CQ raised no event";
  ibv_ack_cq_events(p.server->recv_cq(), 1);
}

// A protocol error found by the polling thread (an RDMA Write to an STag the server never
// registered) takes the usual path there: a Terminate to the peer, the QP in error, the posted
// receives flushed into the CQ the program polls.
TEST(BusyPoll, AProtocolErrorFoundWhilePollingEndsTheQpCleanly) {
  std::vector<std::uint8_t> src(128, 0x5a), r1(64), r2(64), cr(64);  // outlive the endpoints
  auto p = connect_pair();
  auto& dev = device_of(*p.server);
  dev.set_busy_poll(true);
  dev.set_busy_poll_lease(2s);  // the polling thread keeps the engine however it is scheduled
  auto* smr = p.client->reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  auto* m1 = p.server->reg(r1.data(), r1.size(), IBV_ACCESS_LOCAL_WRITE);
  auto* m2 = p.server->reg(r2.data(), r2.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_one_recv(p.server->qp(), r1.data(), 64, m1->lkey, 11), 0);
  ASSERT_EQ(post_one_recv(p.server->qp(), r2.data(), 64, m2->lkey, 12), 0);
  auto* cm = p.client->reg(cr.data(), cr.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_one_recv(p.client->qp(), cr.data(), 64, cm->lkey, 31), 0);
  ASSERT_TRUE(take_engine(dev, p.server->recv_cq()));
  const auto before = dev.engine_stats();
  ASSERT_EQ(post_one(p.client->qp(), {.op = IBV_WR_RDMA_WRITE,
                                      .addr = src.data(),
                                      .len = 128,
                                      .lkey = smr->lkey,
                                      .remote_addr = 0x1000,
                                      .rkey = 0x7e7e7e00,
                                      .flags = IBV_SEND_SIGNALED,
                                      .wr_id = 21}),
            0);
  auto f1 = spin_wc(p.server->recv_cq(), 10s);
  auto f2 = spin_wc(p.server->recv_cq(), 10s);
  ASSERT_TRUE(f1 && f2) << "the posted receives were not flushed";
  EXPECT_EQ(f1->wr_id, 11u);
  EXPECT_EQ(f2->wr_id, 12u);
  EXPECT_EQ(f1->status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(f2->status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_GT(dev.engine_stats().polled_handlers, before.polled_handlers);
  // The writer's Write left (it completes once sent); the Terminate then ends its QP, and the
  // receive it had posted is flushed.
  auto w = wait_wc(p.client->send_cq(), 10s);
  ASSERT_TRUE(w) << "the writer heard nothing of its Write";
  EXPECT_EQ(w->wr_id, 21u);
  auto cf = wait_wc(p.client->recv_cq(), 10s);
  ASSERT_TRUE(cf) << "the Terminate did not end the writer's QP";
  EXPECT_EQ(cf->wr_id, 31u);
  EXPECT_EQ(cf->status, IBV_WC_WR_FLUSH_ERR);
}

// Two program threads busy-poll two QPs of one device at once: they take turns running the
// engine (one at a time), and both streams stay whole (TSan checks the hand-overs).
TEST(BusyPoll, TwoThreadsPollingOneDeviceTakeTurns) {
  EndpointOptions so;
  Endpoint s1(so);
  Endpoint s2(so, s1.ctx());
  Endpoint c1, c2;
  device_of(s1).set_busy_poll(true);
  auto port1 = s1.listen("127.0.0.1", 0);
  auto port2 = s2.listen("127.0.0.1", 0);
  ASSERT_TRUE(port1 && port2);
  std::expected<void, std::string> a1, a2;
  std::thread t1([&] { a1 = s1.accept_one(10s); });
  std::thread t2([&] { a2 = s2.accept_one(10s); });
  auto k1 = c1.connect("127.0.0.1", *port1);
  auto k2 = c2.connect("127.0.0.1", *port2);
  t1.join();
  t2.join();
  ASSERT_TRUE(k1 && k2 && a1 && a2);
  const auto before = device_of(s1).engine_stats();
  std::string e1, e2;
  std::thread r1([&] { e1 = ping_pong(s1, c1, 100, 6); });
  std::thread r2([&] { e2 = ping_pong(s2, c2, 100, 7); });
  r1.join();
  r2.join();
  EXPECT_EQ(e1, "");
  EXPECT_EQ(e2, "");
  EXPECT_GT(device_of(s1).engine_stats().polled_handlers, before.polled_handlers);
}

// A program that looks at its CQ a few times and then waits some other way does not take the
// engine: fewer than kEmptyPollsBeforeProgress empty polls in a row run nothing, counted afresh
// after every completion, including one this thread's own progress brought.
TEST(BusyPoll, AFewEmptyPollsDoNotTakeTheEngine) {
  std::vector<std::uint8_t> src(8, 1), dst(8);  // outlive the endpoints
  auto p = connect_pair();
  auto& dev = device_of(*p.server);
  dev.set_busy_poll(true);
  auto* smr = p.client->reg(src.data(), 8, IBV_ACCESS_LOCAL_WRITE);
  auto* dmr = p.server->reg(dst.data(), 8, IBV_ACCESS_LOCAL_WRITE);
  ibv_wc wc;
  // This thread takes the engine and receives a Send by its own progress.
  ASSERT_EQ(post_one_recv(p.server->qp(), dst.data(), 8, dmr->lkey, 1), 0);
  ASSERT_TRUE(take_engine(dev, p.server->recv_cq()));
  ASSERT_EQ(post_one(p.client->qp(), {.op = IBV_WR_SEND,
                                      .addr = src.data(),
                                      .len = 8,
                                      .lkey = smr->lkey,
                                      .flags = 0,
                                      .wr_id = 2}),
            0);
  auto got = spin_wc(p.server->recv_cq(), 5s);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->wr_id, 1u);
  std::this_thread::sleep_for(20ms);  // the lease runs out: the engine thread is back
  const auto before = dev.engine_stats();
  for (unsigned i = 0; i + 1 < rnic::Device::kEmptyPollsBeforeProgress; ++i)
    EXPECT_EQ(ibv_poll_cq(p.server->recv_cq(), 1, &wc), 0);
  std::this_thread::sleep_for(20ms);  // a park asked for would have happened by now
  const auto after = dev.engine_stats();
  EXPECT_EQ(after.polled_handlers, before.polled_handlers);
  EXPECT_EQ(after.parks, before.parks) << "a few polls parked the engine thread";
  p.client->dereg(smr);
  p.server->dereg(dmr);
}

// A QP with a soft RNR wait (QpInit::rnr_wait) suspends busy polling on its device: the wait
// for a receive must be the engine thread's, since the polling thread is the one that posts it
// (the drop-in refuses RNIC_BUSY_POLL=1 with RNIC_RNR_WAIT_MS).
TEST(BusyPoll, ASoftRnrWaitKeepsTheWorkOnTheEngineThread) {
  auto p = connect_pair();
  auto& dev = device_of(*p.server);
  dev.set_busy_poll(true);
  rnic::QpInit init;
  init.rnr_wait = std::chrono::milliseconds(100);
  {
    auto waiting = std::make_shared<rnic::QueuePair>(dev, init);
    ASSERT_EQ(ping_pong(*p.server, *p.client, 20, 9), "");
    EXPECT_EQ(dev.engine_stats().polled_handlers, 0u);
    EXPECT_EQ(dev.engine_stats().parks, 0u);
  }
  ASSERT_EQ(ping_pong(*p.server, *p.client, 20, 10), "");
  EXPECT_GT(dev.engine_stats().polled_handlers, 0u) << "busy polling did not come back";
}

namespace {

// A busy-polling client (lease `lease`) that has just taken its engine, 64 receives of 64 octets
// posted at the server, and what the client sends from.
struct Batching {
  static constexpr int kWrs = 64;
  std::vector<std::uint8_t> src = std::vector<std::uint8_t>(64 * kWrs),
                            dst = std::vector<std::uint8_t>(64 * kWrs, 0);
  Pair p = connect_pair();
  ibv_mr *smr = nullptr, *dmr = nullptr;
  rnic::Device& dev() { return device_of(*p.client); }
  rnic::QueuePair& qp() { return *p.client->qp()->qp; }
  std::string setup(std::chrono::microseconds lease) {
    fill(src, 11);
    smr = p.client->reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    dmr = p.server->reg(dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE);
    for (int i = 0; i < kWrs; ++i)
      if (post_one_recv(p.server->qp(), dst.data() + 64 * i, 64, dmr->lkey,
                        static_cast<unsigned>(100 + i)) != 0)
        return "post_recv failed";
    dev().set_busy_poll(true);
    dev().set_busy_poll_lease(lease);
    return take_engine(dev(), p.client->send_cq()) ? "" : "the engine thread did not park";
  }
  // Sends number `i`: 64 octets, signaled only when `signaled`.
  int send(int i, bool signaled) {
    return post_one(p.client->qp(), {.op = IBV_WR_SEND,
                                     .addr = src.data() + 64 * i,
                                     .len = 64,
                                     .lkey = smr->lkey,
                                     .flags = signaled ? unsigned{IBV_SEND_SIGNALED} : 0u,
                                     .wr_id = static_cast<std::uint64_t>(i)});
  }
  // The server's receives of sends [first, first + n), in order and byte-exact: "" or what
  // differs.
  std::string received(int first, int n) {
    for (int i = first; i < first + n; ++i) {
      auto wc = wait_wc(p.server->recv_cq(), 10s);
      if (!wc) return fmt::format("receive {} did not come", i);
      if (wc->status != IBV_WC_SUCCESS || wc->wr_id != static_cast<std::uint64_t>(100 + i) ||
          wc->byte_len != 64)
        return fmt::format("receive {}: status {} wr_id {} length {}", i,
                           static_cast<int>(wc->status), wc->wr_id, wc->byte_len);
    }
    if (!std::equal(dst.begin() + 64 * first, dst.begin() + 64 * (first + n),
                    src.begin() + 64 * first))
      return "the octets received differ from those sent";
    return "";
  }
  ~Batching() {
    if (smr) p.client->dereg(smr);
    if (dmr) p.server->dereg(dmr);
  }
};

}  // namespace

// Posts while the program busy-polls wait for its next poll (Device::defer_post): the first
// after a poll is written by the posting thread, the 63 after it are not written when posted,
// and the poll sends them in one batch (one doorbell, one gather write), in order, every octet
// as posted.
TEST(BusyPoll, PostsWhileTheProgramPollsLeaveInOneBatchAtItsNextPoll) {
  Batching b;
  ASSERT_EQ(b.setup(2s), "");
  const auto before = b.qp().stats();
  const auto deferred = b.dev().engine_stats().deferred_posts;
  for (int i = 0; i < Batching::kWrs; ++i) ASSERT_EQ(b.send(i, i + 1 == Batching::kWrs), 0);
  EXPECT_EQ(b.dev().engine_stats().deferred_posts - deferred, std::uint64_t{Batching::kWrs - 1});
  const auto posted = b.qp().stats();
  EXPECT_EQ(posted.fpdus_sent - before.fpdus_sent, 1u) << "only the first post writes at once";
  EXPECT_EQ(posted.posted_inline_batches - before.posted_inline_batches, 1u);
  auto wc = spin_wc(b.p.client->send_cq(), 10s);
  ASSERT_TRUE(wc) << "the poll did not send the posts";
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc->wr_id, std::uint64_t{Batching::kWrs - 1});
  const auto after = b.qp().stats();
  EXPECT_EQ(after.fpdus_sent - before.fpdus_sent, std::uint64_t{Batching::kWrs});
  EXPECT_EQ(after.tx_batches - before.tx_batches, 2u) << "not the first post and one batch";
  EXPECT_EQ(after.doorbells - before.doorbells, 1u);
  EXPECT_EQ(after.posted_inline_batches - before.posted_inline_batches, 1u);
  EXPECT_EQ(b.received(0, Batching::kWrs), "");
}

// A program that posts and then stops polling (it waits some other way) still has its posts
// sent: by the engine thread, once the lease (1 s here) has run out.
TEST(BusyPoll, PostsThatWaitForAPollGoWhenTheProgramStopsPolling) {
  Batching b;
  ASSERT_EQ(b.setup(1s), "");
  const auto deferred = b.dev().engine_stats().deferred_posts;
  const auto polled = b.dev().engine_stats().polled_handlers;
  for (int i = 0; i < 8; ++i) ASSERT_EQ(b.send(i, false), 0);
  EXPECT_EQ(b.dev().engine_stats().deferred_posts - deferred, 7u);
  EXPECT_EQ(b.received(0, 8), "");
  EXPECT_EQ(b.dev().engine_stats().polled_handlers, polled) << "no poll ran since";
}

// Arming a CQ (the program is about to block on its channel) sends the posts at once, not at
// the end of the lease (2 s here); a poll of the armed CQ (between arming and waiting) runs
// nothing and brings no deferral back, and posts after it are written by the posting thread.
TEST(BusyPoll, ArmingACqSendsThePostsThatWaitForAPoll) {
  Batching b;
  ASSERT_EQ(b.setup(2s), "");
  const auto deferred_before = b.dev().engine_stats().deferred_posts;
  for (int i = 0; i < 4; ++i) ASSERT_EQ(b.send(i, false), 0);
  EXPECT_EQ(b.dev().engine_stats().deferred_posts - deferred_before, 3u);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(ibv_req_notify_cq(b.p.client->recv_cq(), 0), 0);
  const auto polled = b.dev().engine_stats().polled_handlers;
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(b.p.client->recv_cq(), 1, &wc), 0);
  EXPECT_EQ(b.received(0, 4), "");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms) << "the posts waited for the lease";
  EXPECT_EQ(b.dev().engine_stats().polled_handlers, polled) << "a poll of the armed CQ ran them";
  const auto deferred = b.dev().engine_stats().deferred_posts;
  ASSERT_EQ(b.send(4, false), 0);
  EXPECT_EQ(b.received(4, 1), "");
  EXPECT_EQ(b.dev().engine_stats().deferred_posts, deferred) << "a post after arming waited";
}

// A device that stops (the drop-in, at the program's exit) with posts that wait for a poll and
// its engine thread parked for a 10 s lease sends them first: a program that posts and exits
// loses nothing it posted. In a child process that ends with _exit, as a program would: a
// stopped device abandons what its engine held, which is for the process's end only.
TEST(BusyPoll, ADeviceThatStopsSendsThePostsThatWaitForAPoll) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::string why;
        {
          Batching b;
          why = b.setup(10s);
          const auto deferred = b.dev().engine_stats().deferred_posts;
          for (int i = 0; why.empty() && i < 6; ++i)
            if (b.send(i, false) != 0) why = "post_send failed";
          if (why.empty() && b.dev().engine_stats().deferred_posts - deferred != 5)
            why = "not 5 posts deferred";
          const auto t0 = std::chrono::steady_clock::now();
          if (why.empty() && !b.dev().stop(4s)) why = "the device did not stop";
          if (why.empty() && std::chrono::steady_clock::now() - t0 > 3s)
            why = "stop waited for the lease";
          if (why.empty()) why = b.received(0, 6);
          std::fprintf(stderr, "result: %s\n", why.empty() ? "ok" : why.c_str());
          std::fflush(stderr);
          std::_Exit(why.empty() ? 0 : 1);
        }
      },
      ::testing::ExitedWithCode(0), "result: ok");
}
