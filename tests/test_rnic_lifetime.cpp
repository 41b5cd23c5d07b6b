// Object lifetimes and liveness in the engine, tried as a hostile peer and a careless program
// would: memory deregistered or flushed while the engine is still in the middle of using it,
// Terminates and disconnects toward a peer that takes nothing, errors found while a batch is
// being built, objects destroyed in any order, limits the wire format sets. Every test here
// failed before the fix it names.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <cstring>
#include <filesystem>
#include <future>
#include <thread>

#include "common/log.hpp"
#include "raw_peer.hpp"
#include "verbs_shim/endpoint.hpp"

using namespace iwarp;
using namespace iwarp::verbs;
using namespace iwarp::testing;
using namespace std::chrono_literals;

namespace {

constexpr std::uint8_t kCanary = 0x5C;
constexpr std::uint8_t kPeerData = 0xAB;
constexpr std::uint8_t kNewOwner = 0x11;

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// Memory with guard octets on both sides of the part a test registers.
struct Guarded {
  explicit Guarded(std::size_t n) : mem(n + 2 * kGuard, kCanary) {}
  static constexpr std::size_t kGuard = 4096;
  std::vector<std::uint8_t> mem;
  std::uint8_t* data() { return mem.data() + kGuard; }
  std::size_t size() const { return mem.size() - 2 * kGuard; }
  bool guards_intact() const {
    return std::all_of(mem.begin(), mem.begin() + kGuard, [](auto b) { return b == kCanary; }) &&
           std::all_of(mem.end() - kGuard, mem.end(), [](auto b) { return b == kCanary; });
  }
  bool all(std::uint8_t v) const {
    return std::all_of(mem.begin() + kGuard, mem.end() - kGuard, [v](auto b) { return b == v; });
  }
};

ddp::Segment write_segment(STag stag, std::uint64_t to, ByteSpan payload) {
  ddp::Segment s;
  s.hdr = ddp::tagged_header(rdmap::Opcode::Write, stag, TaggedOffset{to});
  s.payload = payload;
  return s;
}

ddp::Segment send_segment(std::uint32_t msn, std::uint32_t mo, ByteSpan payload, bool last = true) {
  ddp::Segment s;
  s.hdr =
      ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{msn}, MessageOffset{mo}, last);
  s.payload = payload;
  return s;
}

// A zero-length Write (not checked against any STag, RFC 5041 §7.2): the initiator's first
// FPDU, after which the responder may send (RFC 5044 §7.1.2).
ddp::Segment opener() {
  return write_segment(STag{1}, 0, {});
}

ddp::Segment bad_write() {
  static const std::uint8_t payload[4] = {1, 2, 3, 4};
  return write_segment(STag{0x00ABCD42}, 0x1000, payload);
}

rnic::QueuePair& engine_qp(Endpoint& ep) {
  return *ep.qp()->qp;
}

std::uint64_t received_bytes(Endpoint& ep) {
  return engine_qp(ep).stats().bytes_received;
}

}  // namespace

// Defect 1: a Write whose head was checked before its region was deregistered must not place
// the rest of its payload into memory that is no longer registered (and that a second owner
// may already use). Both the staging path (a small FPDU cut in two) and the direct-read path
// (a large one) are tried. The FPDU ends in a Terminate: DDP, tagged buffer error (1), invalid
// STag (0x00), RFC 5041 §7.2 / RFC 5040 Table 7.
TEST(RnicLifetime, DeregistrationStopsAHalfPlacedWrite) {
  log::configure("rnic=error");
  for (std::size_t payload_len : {std::size_t{1200}, std::size_t{60000}}) {
    SCOPED_TRACE(payload_len);
    Guarded g(65536);
    EndpointOptions so;
    RawConnection rc(so);
    ASSERT_TRUE(rc.ok());
    ibv_mr* mr = ibv_reg_mr(rc.server.pd(), g.data(), g.size(), kAllAccess);
    ASSERT_NE(mr, nullptr);
    const std::uint64_t base = reinterpret_cast<std::uint64_t>(g.data());
    Bytes payload(payload_len, kPeerData);
    Bytes wire = rc.peer->fpdu(write_segment(STag{mr->rkey}, base + 100, payload));
    ASSERT_FALSE(wire.empty());
    const std::size_t half = wire.size() / 2;
    const std::uint64_t before = received_bytes(rc.server);
    ASSERT_TRUE(rc.peer->write(ByteSpan(wire).first(half)));
    ASSERT_TRUE(eventually([&] { return received_bytes(rc.server) - before >= half; }));
    // The head is checked and placement has begun; the application deregisters and the
    // memory gets a new owner at once.
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
    std::memset(g.data(), kNewOwner, g.size());
    ASSERT_TRUE(rc.peer->write(ByteSpan(wire).subspan(half)));
    auto& r = rc.peer->read_until_closed();
    EXPECT_TRUE(rc.peer->closed());
    EXPECT_FALSE(r.error) << r.error->to_string();
    ASSERT_EQ(r.terminates.size(), 1u);
    EXPECT_EQ(r.terminates[0].layer, 1);  // DDP
    EXPECT_EQ(r.terminates[0].etype, 1);  // tagged buffer
    EXPECT_EQ(r.terminates[0].ecode, 0);  // invalid STag
    EXPECT_TRUE(g.all(kNewOwner)) << "the Write went on placing into deregistered memory";
    EXPECT_TRUE(g.guards_intact());
    EXPECT_EQ(ibv_query_qp_state(rc.server.qp()), IBV_QPS_ERR);
  }
}

// Defect 1, receive side of a Send: the receive buffer's region goes while a multi-FPDU Send
// is arriving into it. Its receive WR fails (local protection), nothing lands after.
TEST(RnicLifetime, DeregistrationStopsASendArrivingIntoTheReceiveBuffer) {
  log::configure("rnic=error");
  Guarded g(65536);
  ibv_mr* mr = nullptr;
  EndpointOptions so;
  so.on_qp_created = [&](Endpoint& ep) {
    mr = ibv_reg_mr(ep.pd(), g.data(), g.size(), IBV_ACCESS_LOCAL_WRITE);
    post_one_recv(ep.qp(), g.data(), static_cast<std::uint32_t>(g.size()), mr->lkey, 7);
  };
  RawConnection rc(so);
  ASSERT_TRUE(rc.ok());
  Bytes payload(3000, kPeerData);
  Bytes first = rc.peer->fpdu(send_segment(1, 0, payload, false));
  Bytes second = rc.peer->fpdu(send_segment(1, 3000, payload, true));
  const std::uint64_t before = received_bytes(rc.server);
  ASSERT_TRUE(rc.peer->write(first));
  ASSERT_TRUE(eventually([&] { return received_bytes(rc.server) - before >= first.size(); }));
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  std::memset(g.data(), kNewOwner, g.size());
  ASSERT_TRUE(rc.peer->write(second));
  auto& r = rc.peer->read_until_closed();
  ASSERT_EQ(r.terminates.size(), 1u);
  EXPECT_EQ(r.terminates[0].layer, 1);  // DDP
  EXPECT_EQ(r.terminates[0].etype, 0);  // local catastrophic
  auto wc = wait_wc(rc.server.recv_cq());
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 7u);
  EXPECT_EQ(wc->status, IBV_WC_LOC_PROT_ERR);
  EXPECT_TRUE(g.all(kNewOwner)) << "the Send went on placing into deregistered memory";
  EXPECT_TRUE(g.guards_intact());
}

// Defect 2: a send WR reported flushed must not be read afterwards. The peer takes nothing (a
// closed window) while an 8 MiB Send waits to go, then sends an invalid FPDU: the QP flushes
// the Send, the program reuses the buffer, and only then does the peer read. Every payload
// octet that reaches it must be the data as it was before the flush.
TEST(RnicLifetime, FlushedSendIsNotReadAfterItsCompletion) {
  log::configure("rnic=error");
  const std::size_t n = 8u << 20;
  std::vector<std::uint8_t> src(n, kPeerData);
  EndpointOptions so;
  RawConnection rc(so, /*peer_rcvbuf=*/4096);
  ASSERT_TRUE(rc.ok());
  ibv_mr* mr = ibv_reg_mr(rc.server.pd(), src.data(), n, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(rc.peer->write(rc.peer->fpdu(opener())));
  ASSERT_EQ(post_one(rc.server.qp(), {.op = IBV_WR_SEND,
                                      .addr = src.data(),
                                      .len = static_cast<std::uint32_t>(n),
                                      .lkey = mr->lkey,
                                      .wr_id = 9}),
            0);
  // Let the engine fill the socket and block on the peer's window.
  ASSERT_TRUE(eventually([&] { return engine_qp(rc.server).stats().fpdus_sent > 100; }));
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(rc.peer->write(rc.peer->fpdu(bad_write())));
  auto wc = wait_wc(rc.server.send_cq());
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 9u);
  EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR);
  // The program owns its buffer again.
  std::memset(src.data(), kNewOwner, n);
  auto& r = rc.peer->read_until_closed(20s);
  EXPECT_FALSE(r.error) << r.error->to_string();
  std::size_t payload_octets = 0, stale = 0;
  for (const auto& s : r.segments) {
    if (s.hdr.opcode != static_cast<std::uint8_t>(rdmap::Opcode::Send)) continue;
    payload_octets += s.payload.size();
    stale += static_cast<std::size_t>(std::count(s.payload.begin(), s.payload.end(), kNewOwner));
  }
  EXPECT_GT(payload_octets, 0u);
  EXPECT_EQ(stale, 0u) << "octets of a flushed WR were read after its completion";
  EXPECT_EQ(r.terminates.size(), 1u);
  ibv_dereg_mr(mr);
}

// Defect 3: a local error while a large Send is arriving flushes its receive WR; the rest of
// the FPDU must not land in the buffer the program got back. The stream has to stay open for
// the rest to arrive, so the Terminate must wait: the peer takes nothing while an 8 MiB Send
// is queued, and the local error is that Send's region deregistered under it.
TEST(RnicLifetime, LocalErrorStopsPlacementIntoTheFlushedReceive) {
  log::configure("rnic=error");
  Guarded g(65536);
  // The 8 MiB Send's source, before the endpoints: a failed assertion that returns with its
  // region still registered leaves the engine's flush reading it as the endpoints go.
  const std::size_t n = 8u << 20;
  std::vector<std::uint8_t> src(n, 0x33);
  ibv_mr* mr = nullptr;
  EndpointOptions so;
  so.cm.close_timeout = 20s;
  so.on_qp_created = [&](Endpoint& ep) {
    mr = ibv_reg_mr(ep.pd(), g.data(), g.size(), IBV_ACCESS_LOCAL_WRITE);
    post_one_recv(ep.qp(), g.data(), static_cast<std::uint32_t>(g.size()), mr->lkey, 5);
  };
  RawConnection rc(so, /*peer_rcvbuf=*/4096);
  ASSERT_TRUE(rc.ok());
  Bytes payload(50000, kPeerData);
  Bytes wire = rc.peer->fpdu(send_segment(1, 0, payload));
  const std::size_t part = wire.size() / 3;
  const std::uint64_t before = received_bytes(rc.server);
  ASSERT_TRUE(rc.peer->write(ByteSpan(wire).first(part)));
  ASSERT_TRUE(eventually([&] { return received_bytes(rc.server) - before >= part; }));
  // A large Send that blocks on the peer's closed window.
  ibv_mr* smr = ibv_reg_mr(rc.server.pd(), src.data(), n, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_one(rc.server.qp(), {.op = IBV_WR_SEND,
                                      .addr = src.data(),
                                      .len = static_cast<std::uint32_t>(n),
                                      .lkey = smr->lkey,
                                      .wr_id = 1}),
            0);
  ASSERT_TRUE(eventually([&] { return engine_qp(rc.server).stats().fpdus_sent > 100; }));
  std::this_thread::sleep_for(100ms);
  // The local error: the Send's region goes while the Send is being sent.
  ASSERT_EQ(ibv_dereg_mr(smr), 0);
  std::optional<ibv_wc> rwc = wait_wc(rc.server.recv_cq());
  ASSERT_TRUE(rwc);
  EXPECT_EQ(rwc->wr_id, 5u);
  EXPECT_EQ(rwc->status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(ibv_query_qp_state(rc.server.qp()), IBV_QPS_SQE);  // TERMINATE: the stream is open
  // The program reuses its receive buffer; the peer sends the rest of the FPDU, which is read.
  std::memset(g.data(), kNewOwner, g.size());
  ASSERT_TRUE(rc.peer->write(ByteSpan(wire).subspan(part)));
  ASSERT_TRUE(eventually([&] { return received_bytes(rc.server) - before >= wire.size(); }));
  EXPECT_TRUE(g.all(kNewOwner)) << "placement went on into a flushed receive buffer";
  EXPECT_TRUE(g.guards_intact());
  rc.peer->read_until_closed(30s);
  ibv_dereg_mr(mr);
}

// Defect 4: a peer with a zero window cannot keep a disconnect (or a Terminate) from ending
// the connection: after the close timeout the stream is aborted and DISCONNECTED comes.
TEST(RnicLifetime, CloseIsBoundedWhenThePeerTakesNothing) {
  log::configure("rnic=error");
  for (bool terminate : {false, true}) {
    SCOPED_TRACE(terminate ? "Terminate" : "disconnect");
    const std::size_t n = 16u << 20;
    std::vector<std::uint8_t> src(n, kPeerData);
    EndpointOptions so;
    so.cm.close_timeout = 1000ms;
    RawConnection rc(so, 4096);
    ASSERT_TRUE(rc.ok());
    ibv_mr* mr = ibv_reg_mr(rc.server.pd(), src.data(), n, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_TRUE(rc.peer->write(rc.peer->fpdu(opener())));
    ASSERT_EQ(post_one(rc.server.qp(), {.op = IBV_WR_SEND,
                                        .addr = src.data(),
                                        .len = static_cast<std::uint32_t>(n),
                                        .lkey = mr->lkey}),
              0);
    ASSERT_TRUE(eventually([&] { return engine_qp(rc.server).stats().fpdus_sent > 100; }));
    std::this_thread::sleep_for(100ms);
    const auto t0 = std::chrono::steady_clock::now();
    if (terminate)
      ASSERT_TRUE(rc.peer->write(rc.peer->fpdu(bad_write())));
    else
      rdma_disconnect(rc.server.id());
    auto ev = rc.server.wait_event(RDMA_CM_EVENT_DISCONNECTED, 10s);
    EXPECT_TRUE(ev) << "no DISCONNECTED while the peer's window stays closed";
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 8s);
    EXPECT_EQ(ibv_query_qp_state(rc.server.qp()), IBV_QPS_ERR);
    auto wc = wait_wc(rc.server.send_cq());
    ASSERT_TRUE(wc);
    EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR);
    ibv_dereg_mr(mr);
  }
}

// Defect 5: an error found while a batch is built (here a Read whose sink lacks REMOTE_WRITE,
// and an lkey that does not exist) sends one Terminate, after the WRs before it.
TEST(RnicLifetime, ABadWrInABatchSendsOneTerminateBehindTheGoodOnes) {
  log::configure("rnic=error");
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant);
    std::vector<std::uint8_t> buf(4096, 0x42), sink(4096, 0);
    EndpointOptions so;
    RawConnection rc(so);
    ASSERT_TRUE(rc.ok());
    ibv_mr* mr = ibv_reg_mr(rc.server.pd(), buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ibv_mr* smr = ibv_reg_mr(rc.server.pd(), sink.data(), sink.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_TRUE(rc.peer->write(rc.peer->fpdu(opener())));
    ASSERT_TRUE(eventually([&] { return engine_qp(rc.server).stats().fpdus_received >= 1; }));
    ibv_sge sa{reinterpret_cast<std::uint64_t>(buf.data()), 100, mr->lkey};
    ibv_sge sb{reinterpret_cast<std::uint64_t>(buf.data()) + 100, 200, mr->lkey};
    ibv_sge bad{reinterpret_cast<std::uint64_t>(sink.data()), 64,
                variant == 0 ? smr->lkey : 0xBAD0001u};
    ibv_send_wr w3{};
    w3.wr_id = 3;
    w3.sg_list = &bad;
    w3.num_sge = 1;
    w3.opcode = variant == 0 ? IBV_WR_RDMA_READ : IBV_WR_SEND;
    w3.send_flags = IBV_SEND_SIGNALED;
    w3.wr.rdma.remote_addr = 0x1000;
    w3.wr.rdma.rkey = 0x1234;
    ibv_send_wr w2{};
    w2.wr_id = 2;
    w2.sg_list = &sb;
    w2.num_sge = 1;
    w2.opcode = IBV_WR_SEND;
    w2.send_flags = IBV_SEND_SIGNALED;
    w2.next = &w3;
    ibv_send_wr w1 = w2;
    w1.wr_id = 1;
    w1.sg_list = &sa;
    w1.next = &w2;
    ibv_send_wr* bad_wr = nullptr;
    ASSERT_EQ(ibv_post_send(rc.server.qp(), &w1, &bad_wr), 0);
    auto& r = rc.peer->read_until_closed();
    EXPECT_FALSE(r.error) << r.error->to_string();
    ASSERT_EQ(r.segments.size(), 3u) << "expected Send, Send, Terminate";
    EXPECT_EQ(r.segments[0].hdr.opcode, static_cast<std::uint8_t>(rdmap::Opcode::Send));
    EXPECT_EQ(r.segments[0].payload.size(), 100u);
    EXPECT_EQ(r.segments[1].hdr.opcode, static_cast<std::uint8_t>(rdmap::Opcode::Send));
    EXPECT_EQ(r.segments[1].payload.size(), 200u);
    ASSERT_EQ(r.terminates.size(), 1u);
    EXPECT_EQ(r.terminates[0].layer, 0);  // RDMAP
    EXPECT_EQ(r.terminates[0].etype, 0);  // local catastrophic
    // The bad WR fails with a protection error.
    bool saw_bad = false;
    for (int i = 0; i < 3 && !saw_bad; ++i)
      if (auto wc = wait_wc(rc.server.send_cq(), 5s); wc && wc->wr_id == 3) {
        saw_bad = true;
        EXPECT_EQ(wc->status, IBV_WC_LOC_PROT_ERR);
      }
    EXPECT_TRUE(saw_bad);
    ibv_dereg_mr(mr);
    ibv_dereg_mr(smr);
  }
}

// Defect 6: after LOCAL_INV completes, its send-queue slot may be reused by a post at once;
// the engine must not read the slot again (a data race ThreadSanitizer reports). A small send
// queue, refilled as fast as completions free it.
TEST(RnicLifetime, LocalInvalidateSlotIsNotReadAfterItsCompletion) {
  log::configure("rnic=error");
  EndpointOptions so, co;
  co.cap.max_send_wr = 2;
  Endpoint server(so), client(co);
  auto port = server.listen("127.0.0.1", 0);
  ASSERT_TRUE(port);
  std::expected<void, std::string> acc;
  std::thread t([&] { acc = server.accept_one(); });
  ASSERT_TRUE(client.connect("127.0.0.1", *port));
  t.join();
  ASSERT_TRUE(acc);
  std::vector<std::uint8_t> buf(64);
  ibv_mr* mr = client.reg(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  int done = 0, posted = 0;
  const int total = 3000;
  while (done < total) {
    if (posted < total) {
      ibv_send_wr w{};
      w.wr_id = static_cast<std::uint64_t>(posted);
      w.opcode = IBV_WR_LOCAL_INV;
      w.invalidate_rkey = mr->lkey;
      w.send_flags = IBV_SEND_SIGNALED;
      ibv_send_wr* bad = nullptr;
      if (ibv_post_send(client.qp(), &w, &bad) == 0) ++posted;
    }
    ibv_wc wc[4];
    const int n = ibv_poll_cq(client.send_cq(), 4, wc);
    for (int i = 0; i < n; ++i) ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS);
    done += n;
  }
  EXPECT_EQ(ibv_query_qp_state(client.qp()), IBV_QPS_RTS);
}

// Defect 7: objects destroyed in the order a careless program might: rdma-core's EBUSY while
// something still uses them, and a destroyed CQ's pending events never handed out.
TEST(RnicLifetime, DestroyingObjectsInUseFailsWithEbusy) {
  ibv_context* ctx = ibv_open_device("rnic0");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, ch, 0);
  ibv_cq* cq2 = ibv_create_cq(ctx, 16, nullptr, ch, 0);
  std::vector<std::uint8_t> buf(64);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_qp_init_attr attr;
  attr.send_cq = attr.recv_cq = cq;
  ibv_qp* qp = ibv_create_qp(pd, &attr);
  ASSERT_NE(qp, nullptr);

  EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);  // the QP completes into it
  EXPECT_EQ(errno, EBUSY);
  EXPECT_NE(ibv_last_error().find("QP"), std::string::npos);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);  // MR and QP
  EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);

  // A completion event taken but not acknowledged keeps its CQ.
  ibv_req_notify_cq(cq2, 0);
  cq2->cq->push(rnic::Wc{});
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, cq2);
  EXPECT_EQ(ibv_destroy_cq(cq2), EBUSY);
  ibv_ack_cq_events(cq2, 1);
  // An event still queued on the channel goes with its CQ.
  ibv_req_notify_cq(cq2, 0);
  cq2->cq->push(rnic::Wc{});
  EXPECT_EQ(ibv_destroy_cq(cq2), 0);
  EXPECT_EQ(ch->ch.wait(50ms), nullptr) << "an event of a destroyed CQ was handed out";

  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);  // the MR
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
  ibv_close_device(ctx);
}

// Defect 7: a queue pair the engine still holds after the program destroyed it (a flush
// under way) completes into its CQ safely although the program destroyed the CQ right after
// (ASan reports the use after free without the fix).
TEST(RnicLifetime, ACqOutlivesItsWrapperWhileTheEngineHoldsTheQp) {
  ibv_context* ctx = ibv_open_device("rnic0");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr attr;
  attr.send_cq = attr.recv_cq = cq;
  ibv_qp* qp = ibv_create_qp(pd, &attr);
  ASSERT_NE(qp, nullptr);
  ibv_modify_qp_to_err(qp);
  auto held = qp->qp;  // what a pending engine handler holds
  ASSERT_TRUE(eventually([&] { return held->state() == rnic::QpState::Error; }));
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  // The engine flushes a receive posted to the failed QP into the (destroyed) CQ.
  rnic::RecvWr wr;
  wr.wr_id = 1;
  EXPECT_EQ(held->post_recv(wr), 0);
  std::promise<void> ran;
  boost::asio::post(ctx->dev->io(), [&] { ran.set_value(); });
  ran.get_future().wait();
  held.reset();
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  ibv_close_device(ctx);
}

// A listener destroyed while its device lives on (endpoints sharing one device, as `rnic soak`'s
// slots do) closes its socket: the port is free for the next listener and no descriptor stays
// open. Without the fix the accept loop kept the socket listening: EADDRINUSE.
TEST(RnicLifetime, ADestroyedListenerFreesItsPortAndDescriptor) {
  auto fds = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                         std::filesystem::directory_iterator{});
  };
  Endpoint device;  // the device outlives both listeners
  const auto before = fds();
  std::uint16_t port = 0;
  {
    Endpoint first({}, device.ctx());
    auto p = first.listen("127.0.0.1", 0);
    ASSERT_TRUE(p) << p.error();
    port = *p;
  }
  EXPECT_EQ(fds(), before);
  Endpoint second({}, device.ctx());
  auto p = second.listen("127.0.0.1", port);
  ASSERT_TRUE(p) << "the port of a destroyed listener is still taken: " << p.error();
  auto accepted = std::async(std::launch::async, [&] { return second.accept_one(5s); });
  Endpoint client;
  auto c = client.connect("127.0.0.1", port);
  ASSERT_TRUE(c) << c.error();
  auto a = accepted.get();
  EXPECT_TRUE(a) << a.error();
}

// Defect 13: ORD 0 (the responder offered IRD 0): a Read cannot ever go. The post fails at
// once with a reason instead of stalling the send queue.
TEST(RnicLifetime, ReadWithOrdZeroFailsAtPostTime) {
  EndpointOptions so, co;
  so.ird = 0;
  Endpoint server(so), client(co);
  auto port = server.listen("127.0.0.1", 0);
  ASSERT_TRUE(port);
  std::expected<void, std::string> acc;
  std::thread t([&] { acc = server.accept_one(); });
  ASSERT_TRUE(client.connect("127.0.0.1", *port));
  t.join();
  ASSERT_TRUE(acc);
  ASSERT_TRUE(client.params());
  std::vector<std::uint8_t> buf(64);
  ibv_mr* mr = client.reg(buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  const int rc = post_one(client.qp(), {.op = IBV_WR_RDMA_READ,
                                        .addr = buf.data(),
                                        .len = 64,
                                        .lkey = mr->lkey,
                                        .remote_addr = 0x1000,
                                        .rkey = 0x1234});
  EXPECT_EQ(rc, EINVAL);
  EXPECT_NE(ibv_last_error().find("ORD is 0"), std::string::npos) << ibv_last_error();
  // A Send behind it still goes: the queue is not stalled.
  ASSERT_EQ(post_one(client.qp(), {.op = IBV_WR_SEND, .addr = buf.data(), .len = 0, .wr_id = 4}),
            0);
  auto wc = client.wait(client.send_cq());
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 4u);
}

// Defect 15: a Send or Write longer than 4 GiB - 1 cannot be carried (32-bit MO, byte_len): it
// is refused at post time rather than killing the connection.
TEST(RnicLifetime, MessagesOver4GiBAreRefusedAtPostTime) {
  EndpointOptions so;
  RawConnection rc(so);
  ASSERT_TRUE(rc.ok());
  std::uint8_t x = 0;
  ibv_mr* mr = ibv_reg_mr(rc.server.pd(), &x, 1, IBV_ACCESS_LOCAL_WRITE);
  for (auto op : {IBV_WR_SEND, IBV_WR_RDMA_WRITE}) {
    ibv_sge sges[2] = {{reinterpret_cast<std::uint64_t>(&x), 0xC0000000u, mr->lkey},
                       {reinterpret_cast<std::uint64_t>(&x), 0xC0000000u, mr->lkey}};
    ibv_send_wr w{};
    w.opcode = op;
    w.sg_list = sges;
    w.num_sge = 2;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(rc.server.qp(), &w, &bad), EINVAL);
    EXPECT_EQ(bad, &w);
    EXPECT_NE(ibv_last_error().find("4 GiB"), std::string::npos) << ibv_last_error();
  }
  EXPECT_EQ(ibv_query_qp_state(rc.server.qp()), IBV_QPS_RTS);
  ibv_dereg_mr(mr);
}

// Defect 15, receive side: the DDP checker every received untagged segment goes through must
// not let a message's MO wrap past 2^32 (the QP would then place at the start of a receive
// buffer of 4 GiB or more with a wrong byte_len): DDP untagged, message too long (1/2/0x05).
TEST(RnicLifetime, SendOffsetsNeverWrapPast4GiB) {
  ddp::SegmentChecker checker;
  const std::uint32_t seg = 65000;
  std::uint64_t mo = 0;
  for (;;) {
    ddp::DdpHeader h = ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{1},
                                            MessageOffset{static_cast<std::uint32_t>(mo)}, false);
    auto r = checker.check(h, seg);
    if (mo + seg > 0xFFFFFFFFull) {
      ASSERT_FALSE(r) << "MO " << mo << " + " << seg << " accepted";
      const TermCode tc = term_code(r.error().code);
      EXPECT_EQ(static_cast<int>(tc.layer), 1);  // DDP
      EXPECT_EQ(tc.etype, 2);                    // untagged buffer
      EXPECT_EQ(tc.ecode, 0x05);                 // message too long
      break;
    }
    ASSERT_TRUE(r) << r.error().to_string();
    mo += seg;
  }
  EXPECT_GT(mo, 0xFFFF0000ull);
}

namespace {

// Sends `wire` with its CRC spoilt, head first (so a large payload is then read straight into
// its target), and expects the RNIC's one answer: the LLP CRC Terminate, 2/0/0x02.
void send_with_bad_crc(RawConnection& rc, Bytes wire) {
  ASSERT_FALSE(wire.empty());
  wire.back() ^= 0x01;  // the CRC's last octet
  const std::uint64_t before = received_bytes(rc.server);
  ASSERT_TRUE(rc.peer->write(ByteSpan(wire).first(64)));
  ASSERT_TRUE(eventually([&] { return received_bytes(rc.server) - before >= 64; }));
  ASSERT_TRUE(rc.peer->write(ByteSpan(wire).subspan(64)));
  auto& r = rc.peer->read_until_closed();
  EXPECT_TRUE(rc.peer->closed());
  ASSERT_EQ(r.terminates.size(), 1u);
  EXPECT_EQ(r.terminates[0].layer, 2);     // LLP (MPA)
  EXPECT_EQ(r.terminates[0].etype, 0);     // MPA error
  EXPECT_EQ(r.terminates[0].ecode, 0x02);  // CRC error
  EXPECT_EQ(ibv_query_qp_state(rc.server.qp()), IBV_QPS_ERR);
}

}  // namespace

// CRC and placement (docs/hostile-peers.md, "CRC and placement"): DDP places an FPDU's payload
// as it arrives, before the CRC at the FPDU's end is known, as siw does (siw_rx_data places,
// the CRC is checked at the end); checking first would stage every FPDU. What a bad CRC never
// gets: an octet outside the range its (checked) header names, a completion, or an action
// (RnicFuzz.NothingActsOnAnFpduBeforeItsCrcIsGood). The answer is the LLP CRC Terminate:
// layer 2 (LLP), error type 0, code 0x02 (RFC 5044 §8 / RFC 5040 §4.8). Both receive paths:
// a small FPDU (staging copy) and a 60,000-octet one (read straight into the region).
TEST(RnicLifetime, BadCrcWritePlacesNothingOutsideItsRangeAndEndsInTheCrcTerminate) {
  log::configure("rnic=error");
  for (std::size_t payload_len : {std::size_t{1200}, std::size_t{60000}}) {
    SCOPED_TRACE(payload_len);
    Guarded g(65536);
    RawConnection rc(EndpointOptions{});
    ASSERT_TRUE(rc.ok());
    ibv_mr* mr = ibv_reg_mr(rc.server.pd(), g.data(), g.size(), kAllAccess);
    ASSERT_NE(mr, nullptr);
    const std::uint64_t base = reinterpret_cast<std::uint64_t>(g.data());
    Bytes payload(payload_len, kPeerData);
    ASSERT_NO_FATAL_FAILURE(
        send_with_bad_crc(rc, rc.peer->fpdu(write_segment(STag{mr->rkey}, base + 100, payload))));
    // Outside [100, 100 + len) of the region, and around it, nothing changed.
    EXPECT_TRUE(std::all_of(g.data(), g.data() + 100, [](auto b) { return b == kCanary; }));
    EXPECT_TRUE(std::all_of(g.data() + 100 + payload_len, g.data() + g.size(),
                            [](auto b) { return b == kCanary; }));
    EXPECT_TRUE(g.guards_intact());
    if (payload_len > 1200) {
      EXPECT_GT(engine_qp(rc.server).stats().direct_reads, 0u) << "the direct path was not taken";
    }
    ibv_dereg_mr(mr);
  }
}

// The same for a Send: its receive WR never completes successfully (it is flushed), and
// nothing lands outside the receive buffer. Both paths again.
TEST(RnicLifetime, BadCrcSendFlushesItsReceiveWr) {
  log::configure("rnic=error");
  for (std::size_t payload_len : {std::size_t{1200}, std::size_t{60000}}) {
    SCOPED_TRACE(payload_len);
    Guarded g(65536);
    ibv_mr* mr = nullptr;
    EndpointOptions so;
    so.on_qp_created = [&](Endpoint& ep) {
      mr = ibv_reg_mr(ep.pd(), g.data(), g.size(), IBV_ACCESS_LOCAL_WRITE);
      post_one_recv(ep.qp(), g.data(), static_cast<std::uint32_t>(payload_len), mr->lkey, 7);
    };
    RawConnection rc(so);
    ASSERT_TRUE(rc.ok());
    Bytes payload(payload_len, kPeerData);
    ASSERT_NO_FATAL_FAILURE(send_with_bad_crc(rc, rc.peer->fpdu(send_segment(1, 0, payload))));
    auto wc = wait_wc(rc.server.recv_cq());
    ASSERT_TRUE(wc);
    EXPECT_EQ(wc->wr_id, 7u);
    EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(wc->status);
    EXPECT_TRUE(std::all_of(g.data() + payload_len, g.data() + g.size(),
                            [](auto b) { return b == kCanary; }));
    EXPECT_TRUE(g.guards_intact());
    if (payload_len > 1200) {
      EXPECT_GT(engine_qp(rc.server).stats().direct_reads, 0u) << "the direct path was not taken";
    }
    ibv_dereg_mr(mr);
  }
}

// Defect 1, queued Read Responses: a Read Request whose response waits behind another (the
// peer's window is closed) keeps a span of its source region; the source is deregistered and
// reused before its turn. The response must never carry the new owner's octets: revoke()
// drops the span, and the Read ends in a Terminate instead.
TEST(RnicLifetime, QueuedReadResponseNeverReadsADeregisteredSource) {
  log::configure("rnic=error");
  const std::size_t big = 8u << 20, small = 64u << 10;
  std::vector<std::uint8_t> first(big, kPeerData), second(small, kPeerData);
  RawConnection rc(EndpointOptions{}, /*peer_rcvbuf=*/4096);
  ASSERT_TRUE(rc.ok());
  ibv_mr* a = ibv_reg_mr(rc.server.pd(), first.data(), big, IBV_ACCESS_REMOTE_READ);
  ibv_mr* b = ibv_reg_mr(rc.server.pd(), second.data(), small, IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(a && b);
  auto read_request = [](std::uint32_t msn, ibv_mr* mr, std::uint32_t size) {
    ddp::Segment s;
    s.hdr = ddp::untagged_header(rdmap::Opcode::ReadRequest, QueueNumber{rdmap::kQnReadReq},
                                 Msn{msn}, MessageOffset{0});
    s.body = rdmap::ReadRequest{STag{0x00AB0001 + msn}, TaggedOffset{0}, size, STag{mr->rkey},
                                TaggedOffset{reinterpret_cast<std::uint64_t>(mr->addr)}};
    return s;
  };
  Bytes wire = rc.peer->fpdu(read_request(1, a, static_cast<std::uint32_t>(big)));
  const Bytes second_rr = rc.peer->fpdu(read_request(2, b, static_cast<std::uint32_t>(small)));
  wire.insert(wire.end(), second_rr.begin(), second_rr.end());
  ASSERT_TRUE(rc.peer->write(wire));
  // The first response fills the peer's window; the second waits in the queue.
  ASSERT_TRUE(eventually([&] { return engine_qp(rc.server).stats().fpdus_sent > 100; }));
  std::this_thread::sleep_for(200ms);
  ASSERT_EQ(ibv_dereg_mr(b), 0);
  std::memset(second.data(), kNewOwner, small);
  auto& r = rc.peer->read_until_closed(30s);
  EXPECT_FALSE(r.error) << r.error->to_string();
  std::size_t response_octets = 0, stale = 0;
  for (const auto& s : r.segments) {
    if (s.hdr.opcode != static_cast<std::uint8_t>(rdmap::Opcode::ReadResponse)) continue;
    response_octets += s.payload.size();
    stale += static_cast<std::size_t>(std::count(s.payload.begin(), s.payload.end(), kNewOwner));
  }
  EXPECT_GE(response_octets, big) << "the first Read was not answered in full";
  EXPECT_EQ(stale, 0u) << "a Read Response read the deregistered, reused source";
  ASSERT_EQ(r.terminates.size(), 1u);
  EXPECT_EQ(r.terminates[0].layer, 0);  // RDMAP
  EXPECT_EQ(r.terminates[0].etype, 1);  // remote protection error
  EXPECT_EQ(r.terminates[0].ecode, 0);  // invalid STag
  ibv_dereg_mr(a);
}

// Defect 1, the atomic result buffer: this side's Fetch-and-Add waits for the peer's Atomic
// Response while its result buffer is deregistered and reused. The response must not write
// the original value into it, and the WR must not succeed.
TEST(RnicLifetime, AtomicResponseNeverWritesADeregisteredResultBuffer) {
  log::configure("rnic=error");
  Guarded g(64);
  RawConnection rc(EndpointOptions{});
  ASSERT_TRUE(rc.ok());
  ibv_mr* mr = ibv_reg_mr(rc.server.pd(), g.data(), g.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_TRUE(rc.peer->write(rc.peer->fpdu(opener())));
  ASSERT_EQ(post_one(rc.server.qp(), {.op = IBV_WR_ATOMIC_FETCH_AND_ADD,
                                      .addr = g.data(),
                                      .len = 8,
                                      .lkey = mr->lkey,
                                      .remote_addr = 0x10000,
                                      .rkey = 0x00CAFE01,
                                      .wr_id = 5,
                                      .compare_add = 1}),
            0)
      << ibv_last_error();
  auto& r = rc.peer->replies();
  for (int i = 0; i < 100 && r.segments.empty(); ++i)
    rc.peer->read_until_closed(std::chrono::milliseconds(100));
  ASSERT_EQ(r.segments.size(), 1u);
  ASSERT_EQ(r.segments[0].hdr.op(), rdmap::Opcode::AtomicRequest);
  const auto req = std::get<rdmap::AtomicRequest>(r.segments[0].body);
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  std::memset(g.data(), kNewOwner, g.size());
  ddp::Segment resp;
  resp.hdr = ddp::untagged_header(rdmap::Opcode::AtomicResponse, QueueNumber{rdmap::kQnAtomicResp},
                                  Msn{1}, MessageOffset{0});
  resp.body = rdmap::AtomicResponse{req.request_id, 0x0102030405060708ull};
  ASSERT_TRUE(rc.peer->write(rc.peer->fpdu(resp)));
  auto wc = wait_wc(rc.server.send_cq());
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 5u);
  EXPECT_NE(wc->status, IBV_WC_SUCCESS) << "the result buffer was gone";
  EXPECT_TRUE(g.all(kNewOwner)) << "the Atomic Response wrote into the reused result buffer";
  EXPECT_TRUE(g.guards_intact());
}
