// Connection management (listen, connect, accept, reject, unreachable, private data, IRD/ORD,
// MPA policies, peer-to-peer RTR), the QP state table, and doorbell batching, through the
// verbs shim over 127.0.0.1.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "rnic/connection_manager.hpp"  // the engine behind the endpoint
#include "rnic/queue_pair.hpp"
#include "verbs_shim/endpoint.hpp"

using namespace iwarp;
using namespace iwarp::verbs;
using namespace std::chrono_literals;

namespace {

std::string text(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

struct Connected {
  std::unique_ptr<Endpoint> server, client;
  std::expected<void, std::string> accepted, connected;
};

Connected connect(EndpointOptions so, EndpointOptions co) {
  Connected c;
  c.server = std::make_unique<Endpoint>(so);
  c.client = std::make_unique<Endpoint>(co);
  auto port = c.server->listen("127.0.0.1", 0);
  EXPECT_TRUE(port);
  std::thread t([&] { c.accepted = c.server->accept_one(); });
  c.connected = c.client->connect("127.0.0.1", *port);
  t.join();
  return c;
}

}  // namespace

// Private data up to what MPA carries (512 octets, less RFC 6581's 4 octets of IRD/ORD) and
// IRD/ORD past 255 (14 bits, RFC 6581 §3) reach the peer whole through Endpoint: they used to
// be cut to 8 bits (300 octets arrived as 44, an IRD of 300 as 44).
TEST(RnicCm, EndpointPrivateDataAndIrdOrdAreNotCutTo8Bits) {
  EndpointOptions so, co;
  so.private_data = Bytes(300, 's');
  co.private_data = Bytes(508, 'c');
  so.ird = 300;
  so.ord = 300;
  co.ird = 400;
  co.ord = 260;
  auto c = connect(so, co);
  ASSERT_TRUE(c.connected) << c.connected.error();
  ASSERT_TRUE(c.accepted) << c.accepted.error();
  EXPECT_EQ(c.server->peer_private_data(), Bytes(508, 'c'));
  EXPECT_EQ(c.client->peer_private_data(), Bytes(300, 's'));
  const auto& p = *c.client->params();
  EXPECT_EQ(p.responder_ord, 300);  // min(responder ORD 300, initiator IRD 400)
  EXPECT_EQ(p.initiator_ord, 260);  // min(initiator ORD 260, responder IRD 300)
  EXPECT_EQ(*c.client->params(), *c.server->params());
}

// More private data than an MPA frame carries is refused with the reason, never cut to the
// 16-bit length (65,636 octets would have gone out as 100).
TEST(RnicCm, EndpointRefusesPrivateDataBeyond512) {
  EndpointOptions co;
  co.private_data = Bytes(65536 + 100, 'x');
  Endpoint client(co);
  auto r = client.connect("127.0.0.1", 9);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("65636 octets of private data"), std::string::npos) << r.error();
}

TEST(RnicCm, PrivateDataAndIrdOrdBothWays) {
  EndpointOptions so, co;
  so.private_data = Bytes{'s', 'r', 'v'};
  co.private_data = Bytes{'c', 'l', 'i', 'e', 'n', 't'};
  so.ird = 4;
  so.ord = 8;
  co.ird = 2;
  co.ord = 6;
  auto c = connect(so, co);
  ASSERT_TRUE(c.connected) << c.connected.error();
  ASSERT_TRUE(c.accepted) << c.accepted.error();
  EXPECT_EQ(text(c.server->peer_private_data()), "client");
  EXPECT_EQ(text(c.client->peer_private_data()), "srv");
  // RFC 6581 §6: the responder's ORD never exceeds the initiator's IRD, and the initiator's ORD
  // never exceeds the responder's IRD.
  const auto& p = *c.client->params();
  EXPECT_TRUE(p.enhanced);
  EXPECT_EQ(p.responder_ord, 2);
  EXPECT_EQ(p.initiator_ord, 4);
  EXPECT_EQ(*c.client->params(), *c.server->params());
  EXPECT_EQ(ibv_query_qp_state(c.client->qp()), IBV_QPS_RTS);
  EXPECT_EQ(ibv_query_qp_state(c.server->qp()), IBV_QPS_RTS);
}

TEST(RnicCm, RejectCarriesPrivateData) {
  Endpoint server, client;
  auto port = server.listen("127.0.0.1", 0);
  ASSERT_TRUE(port);
  std::thread t([&] {
    auto ev = server.wait_event(RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(ev);
    EXPECT_EQ(std::string(static_cast<const char*>(ev->param.conn.private_data),
                          ev->param.conn.private_data_len),
              "let me in");
    rdma_reject(ev->id, "go away", 7);
    rdma_destroy_id(ev->id);
  });
  client.options().private_data = Bytes{'l', 'e', 't', ' ', 'm', 'e', ' ', 'i', 'n'};
  auto r = client.connect("127.0.0.1", *port);
  t.join();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("RDMA_CM_EVENT_REJECTED"), std::string::npos) << r.error();
}

TEST(RnicCm, RejectedEventHasThePrivateData) {
  Endpoint server;
  auto port = server.listen("127.0.0.1", 0);
  ASSERT_TRUE(port);
  std::thread t([&] {
    auto ev = server.wait_event(RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_TRUE(ev);
    rdma_reject(ev->id, "full", 4);
    rdma_destroy_id(ev->id);
  });
  ibv_context* ctx = ibv_open_device("rnic-test");
  auto* ch = rdma_create_event_channel(ctx);
  rdma_cm_id* id = nullptr;
  rdma_create_id(ch, &id, nullptr);
  rdma_resolve_addr(id, "127.0.0.1", *port, 1000);
  rdma_cm_event* ev = nullptr;
  ASSERT_EQ(rdma_get_cm_event(ch, &ev, 5000), 0);
  EXPECT_EQ(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  rdma_ack_cm_event(ev);
  auto* pd = ibv_alloc_pd(ctx);
  auto* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr attr;
  attr.send_cq = attr.recv_cq = cq;
  ASSERT_EQ(rdma_create_qp(id, pd, &attr), 0);
  rdma_conn_param p;
  ASSERT_EQ(rdma_connect(id, &p), 0);
  ASSERT_EQ(rdma_get_cm_event(ch, &ev, 5000), 0);
  EXPECT_EQ(ev->event, RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(ev->status, ECONNREFUSED);
  ASSERT_EQ(ev->param.conn.private_data_len, 4);
  EXPECT_EQ(std::string(static_cast<const char*>(ev->param.conn.private_data), 4), "full");
  rdma_ack_cm_event(ev);
  t.join();
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
}

// A wait for a completion that gives up says what the QP moved so far: here the client's 4096
// octets Written into the server arrived (an RDMA Write completes nothing at its target), and
// no Send came. Without it the message was "no completion within 300 ms", whichever side or
// link had stopped (ctest ImpairedLink.xfer once ended so under a sanitizer).
TEST(RnicCm, AWaitThatTimesOutSaysWhatTheQpMoved) {
  // (Declared before the endpoints, so freed after them: registered memory outlives its MRs.)
  std::vector<std::uint8_t> target(4096), source(4096, 0x5a);
  auto c = connect({}, {});
  ASSERT_TRUE(c.connected) << c.connected.error();
  ASSERT_TRUE(c.accepted) << c.accepted.error();
  c.server->options().timeout = 300ms;  // (after the connection: its setup keeps the default)
  ibv_mr* tmr =
      c.server->reg(target.data(), target.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ibv_mr* smr = c.client->reg(source.data(), source.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(tmr && smr);
  ASSERT_EQ(
      post_one(c.client->qp(), {.op = IBV_WR_RDMA_WRITE,
                                .addr = source.data(),
                                .len = 4096,
                                .lkey = smr->lkey,
                                .remote_addr = reinterpret_cast<std::uintptr_t>(target.data()),
                                .rkey = tmr->rkey}),
      0);
  auto w = c.client->wait(c.client->send_cq());
  ASSERT_TRUE(w) << w.error();
  EXPECT_EQ(w->status, IBV_WC_SUCCESS);
  // The Write's octets have arrived before the server's wait: its counters include them.
  for (int i = 0; i < 2000 && c.server->qp()->qp->stats().bytes_received < 4096; ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_GE(c.server->qp()->qp->stats().bytes_received, 4096u);
  auto r = c.server->wait(c.server->recv_cq());
  ASSERT_FALSE(r);
  const std::string e = r.error();
  EXPECT_NE(e.find("no completion within 300 ms (QP "), std::string::npos) << e;
  EXPECT_NE(e.find(" octets received in "), std::string::npos) << e;
  EXPECT_NE(e.find("0 Terminates sent, 0 received)"), std::string::npos) << e;
  const auto at = e.find("; ");
  ASSERT_NE(at, std::string::npos) << e;
  const auto got = std::stoull(e.substr(at + 2));
  EXPECT_GE(got, 4096u) << e;  // the Write's payload and its headers
  EXPECT_LT(got, 4096u + 64u) << e;
  // The engine placed the Write's octets; deregistration waits until it touches them no more.
  EXPECT_TRUE(c.server->dereg(tmr));
  EXPECT_TRUE(c.client->dereg(smr));
}

TEST(RnicCm, UnreachableWhenNobodyListens) {
  // A port that was just free: listen on it, note it, close it again.
  std::uint16_t dead = 0;
  {
    Endpoint tmp;
    auto p = tmp.listen("127.0.0.1", 0);
    ASSERT_TRUE(p);
    dead = *p;
  }
  Endpoint client;
  auto r = client.connect("127.0.0.1", dead);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("RDMA_CM_EVENT_UNREACHABLE"), std::string::npos) << r.error();
}

TEST(RnicCm, CrcPolicyMismatchIsRefusedWithTheReason) {
  EndpointOptions so, co;
  so.cm.policy.crc = mpa::CrcPolicy::Off;
  co.cm.policy.crc = mpa::CrcPolicy::Required;
  auto c = connect(so, co);
  ASSERT_FALSE(c.connected);
  ASSERT_FALSE(c.accepted);
  EXPECT_NE(c.connected.error().find("REJECTED"), std::string::npos) << c.connected.error();
  EXPECT_NE(c.accepted.error().find("CRC"), std::string::npos) << c.accepted.error();
}

TEST(RnicCm, MarkersRefusedByASideThatDoesNotDoThem) {
  EndpointOptions so, co;
  so.cm.policy.markers = mpa::MarkerPolicy::Off;
  co.cm.policy.markers = mpa::MarkerPolicy::Required;
  auto c = connect(so, co);
  ASSERT_FALSE(c.connected);
  EXPECT_NE(c.connected.error().find("REJECTED"), std::string::npos) << c.connected.error();
}

TEST(RnicCm, StrictIrdOrdInitiatorTerminates) {
  // RFC 6581 §7: an initiator that cannot live with the responder's IRD/ORD answers with a
  // Terminate (LLP 0x06) and the connection fails.
  EndpointOptions so, co;
  so.ird = 1;
  co.ord = 8;
  co.cm.policy.strict_ird_ord = true;
  auto c = connect(so, co);
  ASSERT_FALSE(c.connected);
  EXPECT_NE(c.connected.error().find("CONNECT_ERROR"), std::string::npos) << c.connected.error();
  EXPECT_NE(c.connected.error().find("IRD"), std::string::npos) << c.connected.error();
}

class PeerToPeer : public ::testing::TestWithParam<mpa::RtrType> {};

// RFC 6581 §4: in peer-to-peer mode the initiator's zero-length RTR message opens the stream,
// after which the responder may send first.
TEST_P(PeerToPeer, ResponderMaySendFirstAfterTheRtr) {
  EndpointOptions so, co;
  for (auto* o : {&so, &co}) {
    o->cm.policy.peer_to_peer = true;
    o->cm.policy.rtr = static_cast<mpa::RtrMask>(GetParam());
  }
  char rbuf[32] = {};
  ibv_mr* rmr = nullptr;
  co.on_qp_created = [&](Endpoint& ep) {
    rmr = ep.reg(rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
    post_one_recv(ep.qp(), rbuf, sizeof rbuf, rmr->lkey);
  };
  // (Before the endpoints: a failed assertion leaves no Send reading a freed buffer.)
  char msg[] = "responder first";
  auto c = connect(so, co);
  ASSERT_TRUE(c.connected) << c.connected.error();
  ASSERT_TRUE(c.accepted) << c.accepted.error();
  EXPECT_TRUE(c.server->params()->peer_to_peer);
  EXPECT_EQ(c.server->params()->rtr, GetParam());
  auto* smr = c.server->reg(msg, sizeof msg, 0);
  ASSERT_EQ(post_one(c.server->qp(), {.addr = msg, .len = sizeof msg, .lkey = smr->lkey}), 0);
  auto wc = c.client->wait(c.client->recv_cq());
  ASSERT_TRUE(wc) << wc.error();
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS);
  EXPECT_STREQ(rbuf, "responder first");
  // The Send's buffer (on this stack) must outlive its WR: the sender's completion, not the
  // peer's receive, says the engine is done with it. (Without this wait ASan once caught the
  // engine's sendmsg() still reading `msg` after the test had returned: the peer had its octets
  // before sendmsg() returned.)
  auto sent = c.server->wait(c.server->send_cq());
  ASSERT_TRUE(sent) << sent.error();
  EXPECT_EQ(sent->status, IBV_WC_SUCCESS);
}

INSTANTIATE_TEST_SUITE_P(Rnic, PeerToPeer,
                         ::testing::Values(mpa::RtrType::Write, mpa::RtrType::Read,
                                           mpa::RtrType::Send),
                         [](const auto& p) { return std::string(mpa::rtr_name(p.param)); });

TEST(RnicQpState, TransitionTable) {
  using rnic::legal_transition;
  using rnic::QpState;
  EXPECT_TRUE(legal_transition(QpState::Idle, QpState::Rtr));
  EXPECT_TRUE(legal_transition(QpState::Rtr, QpState::Rts));
  EXPECT_TRUE(legal_transition(QpState::Rts, QpState::Closing));
  EXPECT_TRUE(legal_transition(QpState::Rts, QpState::Terminate));
  EXPECT_TRUE(legal_transition(QpState::Terminate, QpState::Error));
  EXPECT_TRUE(legal_transition(QpState::Closing, QpState::Error));
  EXPECT_TRUE(legal_transition(QpState::Error, QpState::Idle));
  EXPECT_FALSE(legal_transition(QpState::Idle, QpState::Rts));
  EXPECT_FALSE(legal_transition(QpState::Rts, QpState::Rtr));
  EXPECT_FALSE(legal_transition(QpState::Terminate, QpState::Rts));
  EXPECT_FALSE(legal_transition(QpState::Error, QpState::Rts));
  EXPECT_FALSE(legal_transition(QpState::Error, QpState::Error));
}

TEST(RnicQpState, PostingBeforeConnectingSaysWhy) {
  Endpoint e;
  ibv_qp_init_attr attr;
  attr.send_cq = e.send_cq();
  attr.recv_cq = e.recv_cq();
  ibv_qp* qp = ibv_create_qp(e.pd(), &attr);
  ASSERT_NE(qp, nullptr);
  ibv_send_wr wr;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  EXPECT_NE(ibv_last_error().find("not connected"), std::string::npos) << ibv_last_error();
  EXPECT_EQ(ibv_query_qp_state(qp), IBV_QPS_INIT);
  ibv_destroy_qp(qp);
}

// Many WRs posted as one chain go out in one gather write, not one system call each.
TEST(RnicDoorbell, ChainIsOneBatch) {
  // (The buffers before the endpoints: a failed assertion leaves no WR reading a freed one.)
  constexpr int kN = 64;
  std::vector<char> buf(kN * 16, 'x'), rbuf(kN * 16);
  auto c = connect({}, {});
  ASSERT_TRUE(c.connected) << c.connected.error();
  ASSERT_TRUE(c.accepted) << c.accepted.error();
  auto* smr = c.client->reg(buf.data(), buf.size(), 0);
  auto* rmr = c.server->reg(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  std::vector<ibv_recv_wr> rw(kN);
  std::vector<ibv_sge> rs(kN);
  for (int i = 0; i < kN; ++i) {
    rs[i] = {reinterpret_cast<std::uint64_t>(&rbuf[i * 16]), 16, rmr->lkey};
    rw[i].sg_list = &rs[i];
    rw[i].num_sge = 1;
    rw[i].wr_id = static_cast<std::uint64_t>(i);
    rw[i].next = i + 1 < kN ? &rw[i + 1] : nullptr;
  }
  ibv_recv_wr* rbad;
  ASSERT_EQ(ibv_post_recv(c.server->qp(), rw.data(), &rbad), 0);
  const auto before = c.client->qp()->qp->stats();
  std::vector<ibv_send_wr> sw(kN);
  std::vector<ibv_sge> ss(kN);
  for (int i = 0; i < kN; ++i) {
    ss[i] = {reinterpret_cast<std::uint64_t>(&buf[i * 16]), 16, smr->lkey};
    sw[i].sg_list = &ss[i];
    sw[i].num_sge = 1;
    sw[i].opcode = IBV_WR_SEND;
    sw[i].send_flags = i + 1 == kN ? IBV_SEND_SIGNALED : 0u;  // one completion for all
    sw[i].next = i + 1 < kN ? &sw[i + 1] : nullptr;
  }
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(c.client->qp(), sw.data(), &bad), 0);
  auto wc = c.client->wait(c.client->send_cq());
  ASSERT_TRUE(wc) << wc.error();
  EXPECT_EQ(wc->status, IBV_WC_SUCCESS);
  ibv_wc extra;
  EXPECT_EQ(ibv_poll_cq(c.client->send_cq(), 1, &extra), 0) << "unsignaled WRs completed";
  for (int i = 0; i < kN; ++i) {
    auto r = c.server->wait(c.server->recv_cq());
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->wr_id, static_cast<std::uint64_t>(i));
  }
  const auto after = c.client->qp()->qp->stats();
  EXPECT_EQ(after.fpdus_sent - before.fpdus_sent, static_cast<std::uint64_t>(kN));
  // One wake-up of the transmitter: a doorbell, or the posting thread sending the chain itself
  // (docs/progress-model.md).
  EXPECT_EQ((after.doorbells - before.doorbells) +
                (after.posted_inline_batches - before.posted_inline_batches),
            1u);
  EXPECT_EQ(after.tx_batches - before.tx_batches, 1u);
}

// RFC 7306 §4.3: Immediate Data reports the length of the Write right before it; a bare
// SEND_WITH_IMM after an unrelated Write and a Send reports no Write length.
TEST(RnicImmediate, BareImmediateAfterOtherMessagesHasNoWriteLength) {
  // (The buffers before the endpoints: a failed assertion leaves no WR reading a freed one.)
  std::vector<char> src(1000, 'w'), dst(1000), rbuf(64);
  auto c = connect({}, {});
  ASSERT_TRUE(c.connected) << c.connected.error();
  ASSERT_TRUE(c.accepted) << c.accepted.error();
  auto* smr = c.client->reg(src.data(), src.size(), 0);
  auto* dmr =
      c.server->reg(dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  auto* rmr = c.server->reg(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(post_one_recv(c.server->qp(), rbuf.data(), 64, rmr->lkey), 0);
  auto* q = c.client->qp();
  const auto dst_addr = reinterpret_cast<std::uint64_t>(dst.data());
  // Write with Immediate: the receive reports the Write's 1000 octets.
  ASSERT_EQ(post_one(q, {.op = IBV_WR_RDMA_WRITE_WITH_IMM,
                         .addr = src.data(),
                         .len = 1000,
                         .lkey = smr->lkey,
                         .remote_addr = dst_addr,
                         .rkey = dmr->rkey,
                         .imm = 7}),
            0);
  // A plain Write, a Send, then a bare immediate: no Write length.
  ASSERT_EQ(post_one(q, {.op = IBV_WR_RDMA_WRITE,
                         .addr = src.data(),
                         .len = 500,
                         .lkey = smr->lkey,
                         .remote_addr = dst_addr,
                         .rkey = dmr->rkey}),
            0);
  ASSERT_EQ(post_one(q, {.addr = src.data(), .len = 10, .lkey = smr->lkey}), 0);
  ASSERT_EQ(post_one(q, {.op = IBV_WR_SEND_WITH_IMM, .imm = 8}), 0);
  auto w1 = c.server->wait(c.server->recv_cq());
  auto w2 = c.server->wait(c.server->recv_cq());
  auto w3 = c.server->wait(c.server->recv_cq());
  ASSERT_TRUE(w1 && w2 && w3);
  EXPECT_EQ(w1->opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(w1->imm_data, 7u);
  EXPECT_EQ(w1->byte_len, 1000u);
  EXPECT_EQ(w2->opcode, IBV_WC_RECV);
  EXPECT_EQ(w2->byte_len, 10u);
  EXPECT_EQ(w3->imm_data, 8u);
  EXPECT_EQ(w3->byte_len, 0u);
  // `src` may go only once the client's engine is done with it: its four send completions.
  for (int i = 0; i < 4; ++i) {
    auto s = c.client->wait(c.client->send_cq());
    ASSERT_TRUE(s) << s.error();
    EXPECT_EQ(s->status, IBV_WC_SUCCESS);
  }
}
