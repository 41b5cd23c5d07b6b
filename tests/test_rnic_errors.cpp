// Two emulated RNICs in one process, connected over 127.0.0.1 through the verbs shim.
// Part 1 (RnicErrors): a peer breaks the protocol (bad STag, bounds, rights, PD, IRD, missing or
// short receive buffers, invalidated STags); the side that sees it sends the Terminate RFC
// 5040 §7.4 / RFC 5041 §7.2 prescribe, both QPs end in ERROR with every work request completed
// (in error or flushed), and no octet outside the target region moves (guard bytes).
// Part 2 (RnicFeatures): atomics, Write with Immediate, solicited events, SRQ, inline, unsignaled,
// fence, WR chains and multi-SGE messages, with their data checked.
// Every test runs over each framing: MPA rev 2 plain, with CRC, with markers, with both, and rev 1.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "common/wire_error.hpp"
#include "raw_peer.hpp"
#include "verbs_shim/endpoint.hpp"

using namespace iwarp;
using namespace iwarp::verbs;
using iwarp::testing::EngineBlocker;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

constexpr std::chrono::milliseconds kTimeout{4000};

struct Framing {
  const char* name;
  std::uint8_t revision;
  mpa::CrcPolicy crc;
  mpa::MarkerPolicy markers;
  std::size_t emss;  // 0: the socket's MSS (large on loopback); 1448: Ethernet-sized FPDUs
};

const Framing kFramings[] = {
    {"Rev2", 2, mpa::CrcPolicy::Optional, mpa::MarkerPolicy::Off, 0},
    {"Rev2Crc", 2, mpa::CrcPolicy::Required, mpa::MarkerPolicy::Off, 1448},
    {"Rev2Markers", 2, mpa::CrcPolicy::Optional, mpa::MarkerPolicy::Required, 1448},
    {"Rev2CrcMarkers", 2, mpa::CrcPolicy::Required, mpa::MarkerPolicy::Required, 0},
    {"Rev1", 1, mpa::CrcPolicy::Optional, mpa::MarkerPolicy::Off, 1448},
    {"Rev1CrcMarkers", 1, mpa::CrcPolicy::Required, mpa::MarkerPolicy::Required, 1448},
};

void PrintTo(const Framing& f, std::ostream* os) {
  *os << f.name;
}

std::string framing_name(const ::testing::TestParamInfo<Framing>& info) {
  return info.param.name;
}

EndpointOptions options_for(const Framing& f) {
  EndpointOptions o;
  o.cm.policy.revision = f.revision;
  o.cm.policy.crc = f.crc;
  o.cm.policy.markers = f.markers;
  o.cm.emss = f.emss;
  o.timeout = kTimeout;
  return o;
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7 + (i >> 9));
  return v;
}

// memcmp that allows null pointers for zero octets (an empty vector's data()).
bool same(const void* a, const void* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

std::uint64_t addr_of(const void* p) {
  return reinterpret_cast<std::uint64_t>(p);
}

// A registered range in the middle of a larger buffer whose guard bytes before and after must
// never change.
struct Guarded {
  static constexpr std::size_t kGuard = 256;
  explicit Guarded(std::size_t n, std::uint8_t fill = 0) : len(n), buf(n + 2 * kGuard) {
    for (std::size_t i = 0; i < kGuard; ++i) {
      buf[i] = guard_byte(i);
      buf[kGuard + n + i] = guard_byte(kGuard + i);
    }
    std::fill(buf.begin() + kGuard, buf.begin() + static_cast<std::ptrdiff_t>(kGuard + n), fill);
  }
  static std::uint8_t guard_byte(std::size_t i) {
    return static_cast<std::uint8_t>(0xA5 ^ (i * 13));
  }
  std::uint8_t* data() { return buf.data() + kGuard; }
  std::uint64_t addr() { return addr_of(data()); }
  ::testing::AssertionResult guards_intact() const {
    for (std::size_t i = 0; i < kGuard; ++i) {
      if (buf[i] != guard_byte(i))
        return ::testing::AssertionFailure()
               << "guard byte " << (kGuard - i) << " before the region changed";
      if (buf[kGuard + len + i] != guard_byte(kGuard + i))
        return ::testing::AssertionFailure() << "guard byte " << i << " after the region changed";
    }
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult body_is(std::size_t from, std::size_t n, std::uint8_t v) const {
    for (std::size_t i = from; i < from + n; ++i)
      if (buf[kGuard + i] != v)
        return ::testing::AssertionFailure()
               << "region octet " << i << " is " << int(buf[kGuard + i]) << ", expected " << int(v);
    return ::testing::AssertionSuccess();
  }
  std::size_t len;
  std::vector<std::uint8_t> buf;
};

ibv_send_wr make_wr(ibv_wr_opcode op, ibv_sge* sges, int n, std::uint64_t id,
                    unsigned flags = IBV_SEND_SIGNALED) {
  ibv_send_wr wr;
  wr.wr_id = id;
  wr.sg_list = sges;
  wr.num_sge = n;
  wr.opcode = op;
  wr.send_flags = flags;
  return wr;
}

int post(ibv_qp* qp, ibv_send_wr& wr) {
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
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

int post_atomic(Endpoint& e, ibv_wr_opcode op, ibv_mr* mr, std::uint64_t* result, std::uint64_t id,
                std::uint64_t raddr, std::uint32_t rkey, std::uint64_t compare_add,
                std::uint64_t swap = 0) {
  return post_one(e.qp(), {.op = op,
                           .addr = result,
                           .len = 8,
                           .lkey = mr->lkey,
                           .remote_addr = raddr,
                           .rkey = rkey,
                           .wr_id = id,
                           .compare_add = compare_add,
                           .swap = swap});
}

int post_recv_sges(ibv_qp* qp, std::vector<ibv_sge> sges, std::uint64_t id) {
  ibv_recv_wr wr;
  wr.wr_id = id;
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(sges.size());
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

int post_recv(Endpoint& e, ibv_mr* mr, void* addr, std::uint32_t len, std::uint64_t id) {
  return post_one_recv(e.qp(), addr, len, mr->lkey, id);
}

// Every completion the CQ holds now (no waiting).
std::vector<ibv_wc> drain(ibv_cq* cq) {
  std::vector<ibv_wc> out;
  ibv_wc wc;
  while (ibv_poll_cq(cq, 1, &wc) == 1) out.push_back(wc);
  return out;
}

// Waits for the next completion on a CQ that has a completion channel (poll, arm, poll,
// sleep on the channel), as Endpoint::wait does.
std::expected<ibv_wc, std::string> wait_cq(ibv_cq* cq) {
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  ibv_wc wc;
  for (;;) {
    if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
    ibv_req_notify_cq(cq, 0);
    if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::unexpected(std::string("no completion in time"));
    if (auto* got = cq->channel->ch.wait(left))
      ibv_ack_cq_events(static_cast<ibv_cq*>(got->context()), 1);
  }
}

// Returns once every handler queued on the device's engine before the call has run (a posted
// doorbell, so its batch is in the kernel: the engine hands it to the socket at once).
bool engine_idle(ibv_context* ctx) {
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  boost::asio::post(ctx->dev->io(), [done] { done->set_value(); });
  return f.wait_for(kTimeout) == std::future_status::ready;
}

#define WAIT_WC(var, ep, cq)                   \
  auto var##_got = (ep).wait(cq);              \
  ASSERT_TRUE(var##_got) << var##_got.error(); \
  const ibv_wc var = *var##_got

class RnicPair : public ::testing::TestWithParam<Framing> {
 protected:
  EndpointOptions opts() const { return options_for(GetParam()); }

  void connect(EndpointOptions so, EndpointOptions co) {
    server_ = std::make_unique<Endpoint>(so);
    client_ = std::make_unique<Endpoint>(co);
    auto port = server_->listen("127.0.0.1", 0);
    ASSERT_TRUE(port) << port.error();
    std::expected<void, std::string> acc;
    std::thread t([&] { acc = server_->accept_one(); });
    auto cr = client_->connect("127.0.0.1", *port);
    t.join();
    ASSERT_TRUE(cr) << cr.error();
    ASSERT_TRUE(acc) << acc.error();
    ASSERT_TRUE(client_->params() && server_->params());
    // The framing asked for is the framing in use.
    const auto& p = *client_->params();
    const Framing& f = GetParam();
    EXPECT_EQ(p.revision, f.revision);
    EXPECT_EQ(p.crc, f.crc == mpa::CrcPolicy::Required);
    EXPECT_EQ(p.markers_to_responder, f.markers == mpa::MarkerPolicy::Required);
    EXPECT_EQ(p.markers_to_initiator, f.markers == mpa::MarkerPolicy::Required);
    EXPECT_EQ(*server_->params(), p);
  }
  void connect() { connect(opts(), opts()); }

  Endpoint& s() { return *server_; }
  Endpoint& c() { return *client_; }

  // Buffers that outlive the endpoints (their regions are deregistered by the endpoints).
  std::vector<std::uint8_t>& buffer(std::size_t n, std::uint8_t fill = 0) {
    return bufs_.emplace_back(n, fill);
  }
  std::vector<std::uint8_t>& buffer(std::vector<std::uint8_t> v) {
    return bufs_.emplace_back(std::move(v));
  }
  Guarded& guarded(std::size_t n, std::uint8_t fill = 0) { return guarded_.emplace_back(n, fill); }

  // A receive WR that nothing will consume: it must come back flushed.
  void post_witness(Endpoint& e, std::uint64_t id) {
    auto& b = buffer(64);
    auto* mr = e.reg(b.data(), b.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_EQ(post_recv(e, mr, b.data(), 64, id), 0) << ibv_last_error();
  }

  // The receive CQ holds exactly these flushed receive WRs, in order.
  static void expect_recv_flushed(Endpoint& e, std::vector<std::uint64_t> ids) {
    auto wcs = drain(e.recv_cq());
    ASSERT_EQ(wcs.size(), ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(wcs[i].wr_id, ids[i]);
      EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(wcs[i].status);
      EXPECT_EQ(wcs[i].opcode, IBV_WC_RECV);
    }
  }

  // The Terminate each error gets, typed in from the RFC tables (never computed with the
  // library's own term_code()): layer 0 RDMAP, 1 DDP (RFC 5040 §7.4.1, RFC 5041 §7.2).
  static TermCode rfc_term_code(Errc code) {
    switch (code) {
      case Errc::RdmapLocalCatastrophic:  // RDMAP, local catastrophic error
        return {TermLayer::Rdmap, 0, 0x00};
      case Errc::RdmapInvalidStag:  // RDMAP remote protection: invalid STag
        return {TermLayer::Rdmap, 1, 0x00};
      case Errc::RdmapBaseBounds:  // RDMAP remote protection: base or bounds violation
        return {TermLayer::Rdmap, 1, 0x01};
      case Errc::RdmapAccessRights:  // RDMAP remote protection: access rights violation
        return {TermLayer::Rdmap, 1, 0x02};
      case Errc::RdmapCatastrophicStream:  // RDMAP remote operation: catastrophic, this stream
        return {TermLayer::Rdmap, 2, 0x07};
      case Errc::RdmapOpCannotInvalidate:  // RDMAP remote operation: STag cannot be invalidated
        return {TermLayer::Rdmap, 2, 0x09};
      case Errc::DdpLocalCatastrophic:  // DDP, local catastrophic error
        return {TermLayer::Ddp, 0, 0x00};
      case Errc::DdpTaggedInvalidStag:  // DDP tagged buffer: invalid STag
        return {TermLayer::Ddp, 1, 0x00};
      case Errc::DdpTaggedBaseBounds:  // DDP tagged buffer: base or bounds violation
        return {TermLayer::Ddp, 1, 0x01};
      case Errc::DdpTaggedStagNotAssociated:  // DDP tagged buffer: STag not associated
        return {TermLayer::Ddp, 1, 0x02};
      case Errc::DdpTaggedToWrap:  // DDP tagged buffer: TO wrap
        return {TermLayer::Ddp, 1, 0x03};
      case Errc::DdpUntaggedNoBuffer:  // DDP untagged buffer: invalid MSN, no buffer available
        return {TermLayer::Ddp, 2, 0x02};
      case Errc::DdpUntaggedTooLong:  // DDP untagged buffer: message too long for the buffer
        return {TermLayer::Ddp, 2, 0x05};
      default:
        ADD_FAILURE() << "no RFC code typed in for " << errc_name(code);
        return {TermLayer::Llp, 0xF, 0xFF};
    }
  }

  // `detector` found `code` (with `detail` in its words) and sent the Terminate; `peer`
  // received it. Both QPs end in ERROR and later work requests complete flushed at once.
  void expect_terminate(Endpoint& detector, Endpoint& peer, Errc code, const std::string& detail) {
    auto d = detector.wait_event(RDMA_CM_EVENT_DISCONNECTED);
    ASSERT_TRUE(d) << d.error();
    auto p = peer.wait_event(RDMA_CM_EVENT_DISCONNECTED);
    ASSERT_TRUE(p) << p.error();
    EXPECT_EQ(ibv_query_qp_state(detector.qp()), IBV_QPS_ERR);
    EXPECT_EQ(ibv_query_qp_state(peer.qp()), IBV_QPS_ERR);
    const TermCode tc = rfc_term_code(code);
    const std::string triple = fmt::format("layer {} etype {} code 0x{:02x}",
                                           static_cast<int>(tc.layer), tc.etype, tc.ecode);
    const std::string name(errc_name(code));
    const std::string dr = detector.qp()->qp->error_reason();
    EXPECT_THAT(dr, StartsWith("sent Terminate [" + name + "]"));
    EXPECT_THAT(dr, HasSubstr("[Terminate " + triple + "]"));
    EXPECT_THAT(dr, HasSubstr(detail));
    EXPECT_THAT(d->detail, HasSubstr(name));
    const std::string pr = peer.qp()->qp->error_reason();
    EXPECT_THAT(pr, StartsWith("peer sent Terminate [" + name + "] (" + triple + ")"));
    EXPECT_THAT(p->detail, HasSubstr("peer sent Terminate"));
  }

  // A Send or Write completes once handed to the LLP (RFC 5040 §5, as siw), so one the peer
  // refuses still completes successfully when it left in one small FPDU. A message of many
  // FPDUs may still be in the socket when the peer's Terminate arrives (the peer refuses an
  // early segment): then it is flushed instead.
  static void expect_handed_to_llp(const ibv_wc& wc, bool single_small_fpdu) {
    if (single_small_fpdu)
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    else
      EXPECT_THAT(wc.status, ::testing::AnyOf(IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR))
          << ibv_wc_status_str(wc.status);
  }

  // After the error every new work request completes at once as flushed.
  void expect_new_wrs_flush(Endpoint& e) {
    auto& b = buffer(64);
    auto* mr = e.reg(b.data(), b.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_EQ(post_recv(e, mr, b.data(), 64, 901), 0);
    WAIT_WC(r, e, e.recv_cq());
    EXPECT_EQ(r.wr_id, 901u);
    EXPECT_EQ(r.status, IBV_WC_WR_FLUSH_ERR);
    ASSERT_EQ(post_send(e, IBV_WR_SEND, mr, b.data(), 8, 902), 0);
    WAIT_WC(w, e, e.send_cq());
    EXPECT_EQ(w.wr_id, 902u);
    EXPECT_EQ(w.status, IBV_WC_WR_FLUSH_ERR);
  }

  // The client Writes `len` octets to [raddr, +len) under `rkey`; the server must refuse it
  // with `code`. The Write itself completes (it was handed to the LLP, RFC 5040 §5 / siw); the
  // receive WRs both sides had posted are flushed; `target` keeps its guards and contents.
  void bad_write(Guarded& target, std::uint32_t rkey, std::uint64_t raddr, std::uint32_t len,
                 Errc code, const std::string& detail) {
    auto& src = buffer(pattern(len, 0x31));
    auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NO_FATAL_FAILURE(post_witness(s(), 71));
    ASSERT_NO_FATAL_FAILURE(post_witness(c(), 72));
    const auto before = target.buf;
    ASSERT_EQ(post_send(c(), IBV_WR_RDMA_WRITE, smr, src.data(), len, 1, raddr, rkey), 0)
        << ibv_last_error();
    WAIT_WC(wc, c(), c().send_cq());
    EXPECT_EQ(wc.wr_id, 1u);
    expect_handed_to_llp(wc, len <= 1024);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    ASSERT_NO_FATAL_FAILURE(expect_terminate(s(), c(), code, detail));
    expect_recv_flushed(s(), {71});
    expect_recv_flushed(c(), {72});
    EXPECT_TRUE(drain(s().send_cq()).empty());
    EXPECT_TRUE(drain(c().send_cq()).empty());
    EXPECT_TRUE(target.guards_intact());
    // A segment that fails its checks places nothing (RFC 5041 §7.2): only whole segments that
    // passed before it may have been placed, and these tests send one failing segment.
    if (len <= 1024) {
      EXPECT_TRUE(target.buf == before) << "the refused Write placed data";
    }
    ASSERT_NO_FATAL_FAILURE(expect_new_wrs_flush(s()));
    ASSERT_NO_FATAL_FAILURE(expect_new_wrs_flush(c()));
  }

  // Declared before the endpoints, so they are freed after them.
  std::deque<std::vector<std::uint8_t>> bufs_;
  std::deque<Guarded> guarded_;
  std::unique_ptr<Endpoint> server_, client_;
};

constexpr int kRw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

}  // namespace

// ---------------------------------------------------------------------------------------------
// Part 1: peer protocol violations.

class RnicErrors : public RnicPair {};

// RFC 5041 §7.2 has no access-rights code for tagged placement: like siw, an STag without
// REMOTE_WRITE is reported as an invalid STag (1/1/0x00).
TEST_P(RnicErrors, WriteWithoutRemoteWriteAccess) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& t = guarded(4096);
  auto* mr = s().reg(t.data(), t.len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  bad_write(t, mr->rkey, t.addr(), 512, Errc::DdpTaggedInvalidStag, "lacks REMOTE_WRITE");
}

TEST_P(RnicErrors, WritePastTheEndOfTheRegion) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& t = guarded(4096);
  auto* mr = s().reg(t.data(), t.len, kRw);
  bad_write(t, mr->rkey, t.addr() + t.len - 8, 16, Errc::DdpTaggedBaseBounds, "outside");
}

TEST_P(RnicErrors, WriteBeforeTheStartOfTheRegion) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& t = guarded(4096);
  auto* mr = s().reg(t.data(), t.len, kRw);
  bad_write(t, mr->rkey, t.addr() - 8, 16, Errc::DdpTaggedBaseBounds, "outside");
}

// A Write that exactly fills the region succeeds and touches no guard; one that overruns it
// by a few segments is refused at the first segment that leaves it.
TEST_P(RnicErrors, MultiSegmentWriteOverrunningTheRegion) {
  ASSERT_NO_FATAL_FAILURE(connect());
  constexpr std::size_t kLen = 96 * 1024;
  auto& t = guarded(kLen);
  auto* mr = s().reg(t.data(), t.len, kRw);
  auto& src = buffer(pattern(kLen + 8192, 0x5A));
  auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_send(c(), IBV_WR_RDMA_WRITE, smr, src.data(), kLen, 5, t.addr(), mr->rkey), 0);
  // A Read of one octet orders after the Write: once it completes, the Write is placed.
  auto& one = buffer(1);
  auto* omr = c().reg(one.data(), 1, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(post_send(c(), IBV_WR_RDMA_READ, omr, one.data(), 1, 6, t.addr(), mr->rkey), 0);
  WAIT_WC(w, c(), c().send_cq());
  EXPECT_EQ(w.wr_id, 5u);
  EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  WAIT_WC(r, c(), c().send_cq());
  EXPECT_EQ(r.wr_id, 6u);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(t.guards_intact());
  EXPECT_TRUE(same(t.data(), src.data(), kLen));
  EXPECT_EQ(one[0], src[0]);

  bad_write(t, mr->rkey, t.addr(), kLen + 8192, Errc::DdpTaggedBaseBounds, "outside");
}

TEST_P(RnicErrors, WriteWrappingTheTaggedOffset) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& t = guarded(4096);
  auto* mr = s().reg(t.data(), t.len, kRw);
  bad_write(t, mr->rkey, ~std::uint64_t{0} - 7, 16, Errc::DdpTaggedToWrap, "TO 0x");
}

TEST_P(RnicErrors, WriteToAnUnknownStag) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& t = guarded(4096);
  // Registered and deregistered again: the STag names nothing now.
  auto* mr = ibv_reg_mr(s().pd(), t.data(), t.len, kRw);
  ASSERT_NE(mr, nullptr);
  const std::uint32_t rkey = mr->rkey;
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  bad_write(t, rkey, t.addr(), 64, Errc::DdpTaggedInvalidStag, "is not registered");
}

// Same index, another key (RFC 5040 §2.1: the key part of an STag): the stale STag is invalid.
TEST_P(RnicErrors, WriteWithAStaleKey) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& t = guarded(4096);
  auto* mr = s().reg(t.data(), t.len, kRw);
  bad_write(t, mr->rkey ^ 0xFFu, t.addr(), 64, Errc::DdpTaggedInvalidStag, "has a stale key");
}

// An STag of a region in another protection domain of the target (RFC 5041 §7.2, 1/1/0x02).
TEST_P(RnicErrors, WriteToARegionOfAnotherPd) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& t = guarded(4096);
  std::unique_ptr<ibv_pd, int (*)(ibv_pd*)> pd2(ibv_alloc_pd(s().ctx()), ibv_dealloc_pd);
  ASSERT_NE(pd2->handle, s().pd()->handle);
  std::unique_ptr<ibv_mr, int (*)(ibv_mr*)> mr(ibv_reg_mr(pd2.get(), t.data(), t.len, kRw),
                                               ibv_dereg_mr);
  ASSERT_NE(mr, nullptr);
  bad_write(t, mr->rkey, t.addr(), 64, Errc::DdpTaggedStagNotAssociated,
            "another protection domain");
}

// RFC 5040 §5.4: Send with Invalidate invalidates the named STag once the message is placed;
// a later Write to it is a tagged access to an invalid STag.
TEST_P(RnicErrors, WriteAfterRemoteInvalidation) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& t = guarded(4096);
  auto* mr = s().reg(t.data(), t.len, kRw);
  auto& src = buffer(pattern(100, 3));
  auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  auto& rb = buffer(64);
  auto* rmr = s().reg(rb.data(), rb.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_recv(s(), rmr, rb.data(), 64, 10), 0);
  // Valid first.
  ASSERT_EQ(post_send(c(), IBV_WR_RDMA_WRITE, smr, src.data(), 100, 1, t.addr(), mr->rkey), 0);
  ibv_sge sge{addr_of(src.data()), 16, smr->lkey};
  auto inv = make_wr(IBV_WR_SEND_WITH_INV, &sge, 1, 2);
  inv.invalidate_rkey = mr->rkey;
  ASSERT_EQ(post(c().qp(), inv), 0);
  WAIT_WC(w1, c(), c().send_cq());
  EXPECT_EQ(w1.wr_id, 1u);
  EXPECT_EQ(w1.status, IBV_WC_SUCCESS);
  WAIT_WC(w2, c(), c().send_cq());
  EXPECT_EQ(w2.wr_id, 2u);
  EXPECT_EQ(w2.status, IBV_WC_SUCCESS);
  EXPECT_EQ(w2.opcode, IBV_WC_SEND);
  WAIT_WC(r, s(), s().recv_cq());
  EXPECT_EQ(r.wr_id, 10u);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.opcode, IBV_WC_RECV);
  EXPECT_EQ(r.byte_len, 16u);
  EXPECT_TRUE(r.wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(r.invalidated_rkey, mr->rkey);
  EXPECT_TRUE(same(rb.data(), src.data(), 16));
  EXPECT_TRUE(same(t.data(), src.data(), 100));  // placed before the Send
  bad_write(t, mr->rkey, t.addr() + 200, 64, Errc::DdpTaggedInvalidStag, "was invalidated");
}

// A Read Request naming a locally invalidated STag: RDMAP remote protection error, invalid
// STag (RFC 5040 §7.4.1, 0/1/0x00); the Read completes with a remote access error.
TEST_P(RnicErrors, ReadAfterLocalInvalidation) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& src = buffer(pattern(4096, 9));
  auto* mr = s().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  auto& sink = guarded(1024, 0xEE);
  auto* kmr = c().reg(sink.data(), sink.len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(
      post_send(c(), IBV_WR_RDMA_READ, kmr, sink.data(), 512, 1, addr_of(src.data()), mr->rkey), 0);
  WAIT_WC(r1, c(), c().send_cq());
  EXPECT_EQ(r1.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(sink.data(), src.data(), 512));

  auto li = make_wr(IBV_WR_LOCAL_INV, nullptr, 0, 20);
  li.invalidate_rkey = mr->rkey;
  ASSERT_EQ(post(s().qp(), li), 0);
  WAIT_WC(l, s(), s().send_cq());
  EXPECT_EQ(l.wr_id, 20u);
  EXPECT_EQ(l.status, IBV_WC_SUCCESS);
  EXPECT_EQ(l.opcode, IBV_WC_LOCAL_INV);

  ASSERT_NO_FATAL_FAILURE(post_witness(s(), 71));
  ASSERT_NO_FATAL_FAILURE(post_witness(c(), 72));
  ASSERT_EQ(post_send(c(), IBV_WR_RDMA_READ, kmr, sink.data() + 512, 512, 2, addr_of(src.data()),
                      mr->rkey),
            0);
  WAIT_WC(r2, c(), c().send_cq());
  EXPECT_EQ(r2.wr_id, 2u);
  EXPECT_EQ(r2.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(r2.status);
  EXPECT_EQ(r2.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(r2.vendor_err, 0x000100u);  // layer 0, etype 1, code 0x00
  ASSERT_NO_FATAL_FAILURE(expect_terminate(s(), c(), Errc::RdmapInvalidStag, "was invalidated"));
  expect_recv_flushed(s(), {71});
  expect_recv_flushed(c(), {72});
  EXPECT_TRUE(sink.guards_intact());
  EXPECT_TRUE(sink.body_is(512, 512, 0xEE));
  ASSERT_NO_FATAL_FAILURE(expect_new_wrs_flush(s()));
  ASSERT_NO_FATAL_FAILURE(expect_new_wrs_flush(c()));
}

// RFC 5040 §7.4.1: a Read source outside the region (0/1/0x01) and one without REMOTE_READ
// (0/1/0x02).
TEST_P(RnicErrors, ReadOutsideTheRegion) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& src = buffer(4096);
  auto* mr = s().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  auto& sink = buffer(4096);
  auto* kmr = c().reg(sink.data(), sink.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(post_send(c(), IBV_WR_RDMA_READ, kmr, sink.data(), 4096, 1, addr_of(src.data()) + 1,
                      mr->rkey),
            0);
  WAIT_WC(r, c(), c().send_cq());
  EXPECT_EQ(r.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(r.status);
  EXPECT_EQ(r.vendor_err, 0x000101u);
  ASSERT_NO_FATAL_FAILURE(expect_terminate(s(), c(), Errc::RdmapBaseBounds, "outside"));
}

TEST_P(RnicErrors, ReadWithoutRemoteReadAccess) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& src = buffer(4096);
  auto* mr = s().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  auto& sink = buffer(4096);
  auto* kmr = c().reg(sink.data(), sink.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(
      post_send(c(), IBV_WR_RDMA_READ, kmr, sink.data(), 64, 1, addr_of(src.data()), mr->rkey), 0);
  WAIT_WC(r, c(), c().send_cq());
  EXPECT_EQ(r.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(r.status);
  EXPECT_EQ(r.vendor_err, 0x000102u);
  ASSERT_NO_FATAL_FAILURE(expect_terminate(s(), c(), Errc::RdmapAccessRights, "lacks REMOTE_READ"));
}

TEST_P(RnicErrors, AtomicWithoutRemoteAtomicAccess) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& target = buffer(64);
  auto* mr = s().reg(target.data(), target.size(), kRw);
  auto& res = buffer(8);
  auto* rmr = c().reg(res.data(), 8, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_atomic(c(), IBV_WR_ATOMIC_FETCH_AND_ADD, rmr,
                        reinterpret_cast<std::uint64_t*>(res.data()), 1, addr_of(target.data()),
                        mr->rkey, 1),
            0);
  WAIT_WC(r, c(), c().send_cq());
  EXPECT_EQ(r.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(r.status);
  EXPECT_EQ(r.opcode, IBV_WC_FETCH_ADD);
  ASSERT_NO_FATAL_FAILURE(
      expect_terminate(s(), c(), Errc::RdmapAccessRights, "lacks REMOTE_ATOMIC"));
  EXPECT_EQ(target, std::vector<std::uint8_t>(64, 0));
}

// A Read outstanding behind a refused Write did not cause the Terminate (its DDP header names
// the Write): the Read is flushed, not reported as the remote access error.
TEST_P(RnicErrors, AReadBehindARefusedWriteIsFlushed) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& t = guarded(4096);
  auto* ro = s().reg(t.data(), t.len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  auto& src = buffer(pattern(64, 1));
  auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ibv_sge ws{addr_of(src.data()), 64, smr->lkey};
  ibv_sge rs{addr_of(src.data()), 64, smr->lkey};
  auto wr = make_wr(IBV_WR_RDMA_WRITE, &ws, 1, 1);
  wr.wr.rdma.remote_addr = t.addr();
  wr.wr.rdma.rkey = ro->rkey;
  auto rd = make_wr(IBV_WR_RDMA_READ, &rs, 1, 2);
  rd.wr.rdma.remote_addr = t.addr();
  rd.wr.rdma.rkey = ro->rkey;
  wr.next = &rd;
  ASSERT_EQ(post(c().qp(), wr), 0);
  WAIT_WC(w, c(), c().send_cq());
  EXPECT_EQ(w.wr_id, 1u);
  EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  WAIT_WC(r, c(), c().send_cq());
  EXPECT_EQ(r.wr_id, 2u);
  EXPECT_EQ(r.status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(r.status);
  EXPECT_EQ(r.vendor_err, 0u);
  ASSERT_NO_FATAL_FAILURE(
      expect_terminate(s(), c(), Errc::DdpTaggedInvalidStag, "lacks REMOTE_WRITE"));
  EXPECT_EQ(src, pattern(64, 1));
  EXPECT_TRUE(t.guards_intact());
  EXPECT_TRUE(t.body_is(0, t.len, 0));
}

// RFC 5040 §6.3 / RFC 6581 §6: the initiator may have no more Reads outstanding than the IRD
// the responder offered. The client here ignores its ORD; the server's IRD is 1.
TEST_P(RnicErrors, ReadsBeyondTheResponderIrd) {
  auto so = opts();
  so.ird = 1;
  auto co = opts();
  co.ord = 8;
  co.cm.ignore_ord = true;
  ASSERT_NO_FATAL_FAILURE(connect(so, co));
  if (GetParam().revision == 2) {
    EXPECT_EQ(c().params()->responder_ird, 1);
    EXPECT_EQ(c().params()->initiator_ord, 1);  // lowered to the responder's IRD
  }
  constexpr std::uint32_t kN = 4, kSize = 64 * 1024;
  auto& src = buffer(pattern(kN * kSize, 4));
  auto* mr = s().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  auto& sink = buffer(kN * kSize, 0xEE);
  auto* kmr = c().reg(sink.data(), sink.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ibv_sge sges[kN];
  ibv_send_wr wrs[kN];
  for (std::uint32_t i = 0; i < kN; ++i) {
    sges[i] = ibv_sge{addr_of(sink.data() + i * kSize), kSize, kmr->lkey};
    wrs[i] = make_wr(IBV_WR_RDMA_READ, &sges[i], 1, i + 1);
    wrs[i].wr.rdma.remote_addr = addr_of(src.data() + i * kSize);
    wrs[i].wr.rdma.rkey = mr->rkey;
    wrs[i].next = i + 1 < kN ? &wrs[i + 1] : nullptr;
  }
  {
    // All four Read Requests reach the server's socket before its engine reads any of them
    // (one chain, one doorbell, one gather write), so the second is over the IRD for sure.
    EngineBlocker block(s().ctx(), kTimeout);
    ASSERT_TRUE(block.ok());
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(c().qp(), wrs, &bad), 0) << ibv_last_error();
    ASSERT_TRUE(engine_idle(c().ctx()));
  }
  std::vector<ibv_wc> wcs;
  for (std::uint32_t i = 0; i < kN; ++i) {
    WAIT_WC(w, c(), c().send_cq());
    wcs.push_back(w);
  }
  for (std::uint32_t i = 0; i < kN; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].opcode, IBV_WC_RDMA_READ);
  }
  // The oldest Read learns why; the rest are flushed. None was answered.
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_OP_ERR) << ibv_wc_status_str(wcs[0].status);
  EXPECT_EQ(wcs[0].vendor_err, 0x000207u);
  for (std::uint32_t i = 1; i < kN; ++i)
    EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR) << i << ": " << ibv_wc_status_str(wcs[i].status);
  ASSERT_NO_FATAL_FAILURE(
      expect_terminate(s(), c(), Errc::RdmapCatastrophicStream, "1 already outstanding, IRD 1"));
  EXPECT_EQ(sink, std::vector<std::uint8_t>(kN * kSize, 0xEE));
  ASSERT_NO_FATAL_FAILURE(expect_new_wrs_flush(c()));
}

// RFC 5041 §7.2: an untagged message with no receive buffer posted (2/0x02).
TEST_P(RnicErrors, SendWithNoReceivePosted) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& src = buffer(pattern(100, 1));
  auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NO_FATAL_FAILURE(post_witness(c(), 72));
  ASSERT_EQ(post_send(c(), IBV_WR_SEND, smr, src.data(), 100, 1), 0);
  WAIT_WC(w, c(), c().send_cq());
  EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  EXPECT_EQ(w.opcode, IBV_WC_SEND);
  ASSERT_NO_FATAL_FAILURE(
      expect_terminate(s(), c(), Errc::DdpUntaggedNoBuffer, "no receive WR posted"));
  EXPECT_TRUE(drain(s().recv_cq()).empty());
  EXPECT_TRUE(drain(s().send_cq()).empty());
  expect_recv_flushed(c(), {72});
  ASSERT_NO_FATAL_FAILURE(expect_new_wrs_flush(s()));
  ASSERT_NO_FATAL_FAILURE(expect_new_wrs_flush(c()));
}

// RFC 5041 §7.2: a message longer than the posted buffer (2/0x05); that receive WR completes
// with a local length error, the next one is flushed, and nothing lands past the buffer.
TEST_P(RnicErrors, SendLongerThanTheReceiveBuffer) {
  struct Case {
    std::uint32_t buffer, message;
  };
  // One FPDU; then many, the first of which fit.
  for (const Case k : {Case{64, 100}, Case{5000, 200000}}) {
    SCOPED_TRACE(k.message);
    ASSERT_NO_FATAL_FAILURE(connect());
    auto& rb = guarded(k.buffer);
    auto* rmr = s().reg(rb.data(), rb.len, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_EQ(post_recv(s(), rmr, rb.data(), k.buffer, 1), 0);
    ASSERT_NO_FATAL_FAILURE(post_witness(s(), 2));
    ASSERT_NO_FATAL_FAILURE(post_witness(c(), 72));
    auto& src = buffer(pattern(k.message, 2));
    auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_EQ(post_send(c(), IBV_WR_SEND, smr, src.data(), k.message, 7), 0);
    WAIT_WC(w, c(), c().send_cq());
    EXPECT_EQ(w.wr_id, 7u);
    expect_handed_to_llp(w, k.message <= 1024);
    ASSERT_NO_FATAL_FAILURE(expect_terminate(s(), c(), Errc::DdpUntaggedTooLong, "needs at least"));
    auto wcs = drain(s().recv_cq());
    ASSERT_EQ(wcs.size(), 2u);
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[0].status, IBV_WC_LOC_LEN_ERR) << ibv_wc_status_str(wcs[0].status);
    EXPECT_EQ(wcs[0].opcode, IBV_WC_RECV);
    EXPECT_EQ(wcs[1].wr_id, 2u);
    EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
    expect_recv_flushed(c(), {72});
    EXPECT_TRUE(rb.guards_intact());
    if (k.message <= 1024) {
      EXPECT_TRUE(rb.body_is(0, k.buffer, 0)) << "the refused segment placed data";
    }
    ASSERT_NO_FATAL_FAILURE(expect_new_wrs_flush(s()));
    ASSERT_NO_FATAL_FAILURE(expect_new_wrs_flush(c()));
  }
}

// Work requests posted from another thread while the QP fails all complete: each is either
// flushed with the queue or, posted after the failure, completes flushed at once. None may be
// left behind in a queue that was already flushed.
TEST_P(RnicErrors, WorkRequestsPostedWhileTheQpFailsAllComplete) {
  auto co = opts();
  co.cap.max_recv_wr = 16384;
  co.cap.max_send_wr = 16384;
  co.cq_depth = 65536;
  ASSERT_NO_FATAL_FAILURE(connect(opts(), co));
  auto& b = buffer(64);
  auto* mr = c().reg(b.data(), b.size(), IBV_ACCESS_LOCAL_WRITE);
  auto& t = buffer(64);
  auto* tmr = s().reg(t.data(), t.size(), IBV_ACCESS_LOCAL_WRITE);  // no REMOTE_WRITE
  auto& src = buffer(16);
  auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  constexpr int kMax = 12000;
  std::atomic<bool> stop{false};
  std::atomic<int> recvs{0}, sends{0};
  std::thread poster([&] {
    for (int i = 0; i < kMax && !stop.load(); ++i) {
      if (post_recv(c(), mr, b.data(), 64, 1000000 + static_cast<std::uint64_t>(i)) == 0) ++recvs;
    }
  });
  std::thread poster2([&] {
    // Zero-length Writes place nothing and are not checked (RFC 5041 §7.2), so they keep the
    // send queue busy without an error of their own.
    for (int i = 0; i < kMax && !stop.load(); ++i) {
      if (post_send(c(), IBV_WR_RDMA_WRITE, mr, b.data(), 0,
                    2000000 + static_cast<std::uint64_t>(i), addr_of(t.data()), tmr->rkey) == 0)
        ++sends;
    }
  });
  // The Write that breaks the stream (no ASSERT while the posting threads run).
  EXPECT_EQ(post_send(c(), IBV_WR_RDMA_WRITE, smr, src.data(), 16, 1, addr_of(t.data()), tmr->rkey),
            0);
  auto ev = c().wait_event(RDMA_CM_EVENT_DISCONNECTED);
  stop = true;
  poster.join();
  poster2.join();
  ASSERT_TRUE(ev) << ev.error();
  // Every posted WR completes; count until all are in (each wait is bounded).
  int rc = 0, sc = 0;
  while (rc < recvs.load()) {
    auto w = c().wait(c().recv_cq());
    ASSERT_TRUE(w) << w.error() << " after " << rc << " of " << recvs.load() << " receives";
    ++rc;
  }
  while (sc < sends.load() + 1) {
    auto w = c().wait(c().send_cq());
    ASSERT_TRUE(w) << w.error() << " after " << sc << " of " << sends.load() + 1 << " sends";
    ++sc;
  }
}

// RFC 5040 §5.4 / §7.4.1: a Send with Invalidate naming an STag that cannot be invalidated is
// placed, but its receive WR completes with a remote invalid request error and the receiver
// ends the stream with RDMAP remote operation error 0x09 (as siw).
TEST_P(RnicErrors, SendWithInvalidateOfAnInvalidStag) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& t = buffer(64);
  auto* mr = ibv_reg_mr(s().pd(), t.data(), t.size(), kRw);
  ASSERT_NE(mr, nullptr);
  const std::uint32_t gone = mr->rkey;
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  auto& rb = buffer(64);
  auto* rmr = s().reg(rb.data(), rb.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_recv(s(), rmr, rb.data(), 64, 1), 0);
  ASSERT_NO_FATAL_FAILURE(post_witness(s(), 2));
  ASSERT_NO_FATAL_FAILURE(post_witness(c(), 72));
  auto& src = buffer(pattern(16, 4));
  auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_sge sge{addr_of(src.data()), 16, smr->lkey};
  auto inv = make_wr(IBV_WR_SEND_WITH_INV, &sge, 1, 3);
  inv.invalidate_rkey = gone;
  ASSERT_EQ(post(c().qp(), inv), 0);
  WAIT_WC(w, c(), c().send_cq());
  EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(
      expect_terminate(s(), c(), Errc::RdmapOpCannotInvalidate, "not a valid STag"));
  auto wcs = drain(s().recv_cq());
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(wcs[0].status);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  expect_recv_flushed(c(), {72});
}

// The receiver's own receive WR names memory it cannot write: a local error at the receiver
// (RFC 5041 §7.2 DDP local catastrophic, 0/0x00, as siw), and that receive WR completes with a
// local protection error, not as flushed.
TEST_P(RnicErrors, SendIntoAReceiveBufferWithABadLkey) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& rb = guarded(64);
  auto* ro = s().reg(rb.data(), rb.len, IBV_ACCESS_REMOTE_READ);  // no LOCAL_WRITE
  ASSERT_EQ(post_recv(s(), ro, rb.data(), 64, 1), 0);
  ASSERT_NO_FATAL_FAILURE(post_witness(s(), 2));
  ASSERT_NO_FATAL_FAILURE(post_witness(c(), 72));
  auto& src = buffer(pattern(32, 4));
  auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_send(c(), IBV_WR_SEND, smr, src.data(), 32, 3), 0);
  WAIT_WC(w, c(), c().send_cq());
  EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(
      expect_terminate(s(), c(), Errc::DdpLocalCatastrophic, "not writable local memory"));
  auto wcs = drain(s().recv_cq());
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(wcs[0].status);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  expect_recv_flushed(c(), {72});
  EXPECT_TRUE(rb.guards_intact());
  EXPECT_TRUE(rb.body_is(0, 64, 0));
}

// The sender's own SGE is bad: its WR completes with a local protection error, the ones after
// it are flushed, and the stream ends with an RDMAP local catastrophic Terminate (RFC 5040
// §7.4).
TEST_P(RnicErrors, SendFromAnUnregisteredBuffer) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& rb = buffer(64);
  auto* rmr = s().reg(rb.data(), rb.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_recv(s(), rmr, rb.data(), 64, 1), 0);
  auto& src = buffer(pattern(32, 4));
  auto* smr = ibv_reg_mr(c().pd(), src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(smr, nullptr);
  const std::uint32_t lkey = smr->lkey;
  ASSERT_EQ(ibv_dereg_mr(smr), 0);
  ibv_sge bad_sge{addr_of(src.data()), 32, lkey};
  auto w1 = make_wr(IBV_WR_SEND, &bad_sge, 1, 5);
  auto w2 = make_wr(IBV_WR_SEND, &bad_sge, 1, 6, 0);  // unsignaled: flushed all the same
  w1.next = &w2;
  ASSERT_EQ(post(c().qp(), w1), 0);
  WAIT_WC(e1, c(), c().send_cq());
  EXPECT_EQ(e1.wr_id, 5u);
  EXPECT_EQ(e1.status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(e1.status);
  WAIT_WC(e2, c(), c().send_cq());
  EXPECT_EQ(e2.wr_id, 6u);
  EXPECT_EQ(e2.status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(e2.status);
  ASSERT_NO_FATAL_FAILURE(
      expect_terminate(c(), s(), Errc::RdmapLocalCatastrophic, "no such valid STag"));
  expect_recv_flushed(s(), {1});
  EXPECT_EQ(rb, std::vector<std::uint8_t>(64, 0));
}

INSTANTIATE_TEST_SUITE_P(Rnic, RnicErrors, ::testing::ValuesIn(kFramings), framing_name);

// ---------------------------------------------------------------------------------------------
// Part 2: features, with their data checked.

class RnicFeatures : public RnicPair {};

TEST_P(RnicFeatures, SendWriteReadSizes) {
  ASSERT_NO_FATAL_FAILURE(connect());
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1447}, std::size_t{4096},
                        std::size_t{65537}, std::size_t{700000}}) {
    SCOPED_TRACE(n);
    auto& src = buffer(pattern(n, static_cast<std::uint8_t>(n)));
    auto& dst = guarded(n + 16, 0xEE);
    auto& rdst = guarded(n, 0xCC);
    auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    auto* dmr = s().reg(dst.data(), dst.len, kRw);
    auto* rmr = c().reg(rdst.data(), rdst.len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_EQ(post_recv(s(), dmr, dst.data(), static_cast<std::uint32_t>(n + 16), 1), 0);
    ASSERT_EQ(post_send(c(), IBV_WR_SEND, smr, src.data(), static_cast<std::uint32_t>(n), 2), 0);
    WAIT_WC(rw, s(), s().recv_cq());
    EXPECT_EQ(rw.status, IBV_WC_SUCCESS);
    EXPECT_EQ(rw.byte_len, n);
    EXPECT_TRUE(same(dst.data(), src.data(), n));
    EXPECT_TRUE(dst.body_is(n, 16, 0xEE));
    WAIT_WC(sw, c(), c().send_cq());
    EXPECT_EQ(sw.status, IBV_WC_SUCCESS);
    EXPECT_EQ(sw.byte_len, n);

    std::fill(dst.data(), dst.data() + dst.len, 0xEE);
    ASSERT_EQ(post_send(c(), IBV_WR_RDMA_WRITE, smr, src.data(), static_cast<std::uint32_t>(n), 3,
                        dst.addr() + 16, dmr->rkey),
              0);
    ASSERT_EQ(post_send(c(), IBV_WR_RDMA_READ, rmr, rdst.data(), static_cast<std::uint32_t>(n), 4,
                        dst.addr() + 16, dmr->rkey),
              0);
    WAIT_WC(ww, c(), c().send_cq());
    EXPECT_EQ(ww.wr_id, 3u);
    EXPECT_EQ(ww.status, IBV_WC_SUCCESS);
    WAIT_WC(rr, c(), c().send_cq());
    EXPECT_EQ(rr.wr_id, 4u);
    EXPECT_EQ(rr.status, IBV_WC_SUCCESS) << ibv_wc_status_str(rr.status);
    EXPECT_EQ(rr.opcode, IBV_WC_RDMA_READ);
    EXPECT_EQ(rr.byte_len, n);
    EXPECT_TRUE(same(rdst.data(), src.data(), n));
    EXPECT_TRUE(same(dst.data() + 16, src.data(), n));
    EXPECT_TRUE(dst.body_is(0, 16, 0xEE));
    EXPECT_TRUE(dst.guards_intact());
    EXPECT_TRUE(rdst.guards_intact());
  }
}

// A Write that exactly fills a region registered in the middle of a buffer.
TEST_P(RnicFeatures, WriteExactlyFillingTheRegion) {
  ASSERT_NO_FATAL_FAILURE(connect());
  for (std::size_t n : {std::size_t{1}, std::size_t{4099}, std::size_t{200000}}) {
    SCOPED_TRACE(n);
    auto& t = guarded(n);
    auto* mr = s().reg(t.data(), t.len, kRw);
    auto& src = buffer(pattern(n, 0x77));
    auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_EQ(post_send(c(), IBV_WR_RDMA_WRITE, smr, src.data(), static_cast<std::uint32_t>(n), 1,
                        t.addr(), mr->rkey),
              0);
    // A zero-length Read orders after the Write (RFC 5040 §5.5): the Write is placed once it
    // completes.
    ASSERT_EQ(post_send(c(), IBV_WR_RDMA_READ, nullptr, nullptr, 0, 2, t.addr(), mr->rkey), 0);
    WAIT_WC(w, c(), c().send_cq());
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    WAIT_WC(r, c(), c().send_cq());
    EXPECT_EQ(r.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(same(t.data(), src.data(), n));
    EXPECT_TRUE(t.guards_intact());
  }
}

// RFC 7306 §5: Fetch and Add and Compare and Swap return the original value and update the
// target.
TEST_P(RnicFeatures, Atomics) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& target = guarded(16);
  auto* mr = s().reg(target.data(), target.len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  auto* word = reinterpret_cast<std::uint64_t*>(target.data() + 8);
  ASSERT_EQ(addr_of(word) % 8, 0u);
  *word = 100;
  auto& res = buffer(8);
  auto* rmr = c().reg(res.data(), 8, IBV_ACCESS_LOCAL_WRITE);
  auto* result = reinterpret_cast<std::uint64_t*>(res.data());
  auto load = [&] { return __atomic_load_n(word, __ATOMIC_SEQ_CST); };

  struct Step {
    ibv_wr_opcode op;
    std::uint64_t compare_add, swap, expect_result, expect_after;
  };
  const Step steps[] = {
      {IBV_WR_ATOMIC_FETCH_AND_ADD, 5, 0, 100, 105},
      {IBV_WR_ATOMIC_FETCH_AND_ADD, ~std::uint64_t{0}, 0, 105, 104},  // wraps: adds -1
      {IBV_WR_ATOMIC_CMP_AND_SWP, 104, 0x1122334455667788ull, 104, 0x1122334455667788ull},
      {IBV_WR_ATOMIC_CMP_AND_SWP, 999, 7, 0x1122334455667788ull, 0x1122334455667788ull},
  };
  std::uint64_t id = 1;
  for (const auto& st : steps) {
    SCOPED_TRACE(id);
    *result = 0xDEAD;
    ASSERT_EQ(
        post_atomic(c(), st.op, rmr, result, id, addr_of(word), mr->rkey, st.compare_add, st.swap),
        0)
        << ibv_last_error();
    WAIT_WC(w, c(), c().send_cq());
    EXPECT_EQ(w.wr_id, id);
    EXPECT_EQ(w.status, IBV_WC_SUCCESS) << ibv_wc_status_str(w.status);
    EXPECT_EQ(w.opcode, st.op == IBV_WR_ATOMIC_FETCH_AND_ADD ? IBV_WC_FETCH_ADD : IBV_WC_COMP_SWAP);
    EXPECT_EQ(w.byte_len, 8u);
    EXPECT_EQ(*result, st.expect_result);
    EXPECT_EQ(load(), st.expect_after);
    ++id;
  }
  EXPECT_TRUE(target.body_is(0, 8, 0));
  EXPECT_TRUE(target.guards_intact());
  // A misaligned target is refused at posting (RFC 7306 §5).
  EXPECT_EQ(
      post_atomic(c(), IBV_WR_ATOMIC_FETCH_AND_ADD, rmr, result, 9, addr_of(word) + 4, mr->rkey, 1),
      EINVAL);
}

// RFC 7306 §4.3: the Write is placed, then the Immediate Data consumes a receive WR.
TEST_P(RnicFeatures, WriteWithImmediate) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& t = guarded(3000);
  auto* mr = s().reg(t.data(), t.len, kRw);
  auto& rb = buffer(32, 0x11);
  auto* rmr = s().reg(rb.data(), rb.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_recv(s(), rmr, rb.data(), 32, 40), 0);
  auto& src = buffer(pattern(3000, 8));
  auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_sge sge{addr_of(src.data()), 3000, smr->lkey};
  auto wr = make_wr(IBV_WR_RDMA_WRITE_WITH_IMM, &sge, 1, 4);
  wr.imm_data = 0xDEADBEEF;
  wr.wr.rdma.remote_addr = t.addr();
  wr.wr.rdma.rkey = mr->rkey;
  ASSERT_EQ(post(c().qp(), wr), 0);
  WAIT_WC(w, c(), c().send_cq());
  EXPECT_EQ(w.wr_id, 4u);
  EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  EXPECT_EQ(w.opcode, IBV_WC_RDMA_WRITE);
  WAIT_WC(r, s(), s().recv_cq());
  EXPECT_EQ(r.wr_id, 40u);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_TRUE(r.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(r.imm_data, 0xDEADBEEFu);
  EXPECT_EQ(r.byte_len, 3000u);
  EXPECT_TRUE(same(t.data(), src.data(), 3000));
  EXPECT_TRUE(t.guards_intact());
  EXPECT_EQ(rb, std::vector<std::uint8_t>(32, 0x11));  // the receive buffer holds no data
}

// RFC 5040 §4.3: a CQ armed for solicited completions only wakes its channel for a Send with
// Solicited Event (or an error), not for a plain Send; arming for all wakes on either.
TEST_P(RnicFeatures, SolicitedEventWakesTheChannel) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& rb = buffer(4 * 64);
  auto* rmr = s().reg(rb.data(), rb.size(), IBV_ACCESS_LOCAL_WRITE);
  for (std::uint64_t i = 0; i < 4; ++i)
    ASSERT_EQ(post_recv(s(), rmr, rb.data() + i * 64, 64, 100 + i), 0);
  auto& src = buffer(pattern(64, 5));
  auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  auto& probe = buffer(8);
  auto* pmr = s().reg(probe.data(), 8, IBV_ACCESS_REMOTE_READ);
  auto& psink = buffer(8);
  auto* psmr = c().reg(psink.data(), 8, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  auto& ch = s().recv_cq()->channel->ch;
  std::uint64_t id = 1;
  // A Read round trip: the server has handled everything sent before it.
  auto barrier = [&] {
    ASSERT_EQ(post_send(c(), IBV_WR_RDMA_READ, psmr, psink.data(), 8, 50, addr_of(probe.data()),
                        pmr->rkey),
              0);
    WAIT_WC(b, c(), c().send_cq());
    ASSERT_EQ(b.status, IBV_WC_SUCCESS);
  };
  auto send = [&](unsigned flags) {
    ASSERT_EQ(post_send(c(), IBV_WR_SEND, smr, src.data(), 16, id++, 0, 0, flags), 0);
    WAIT_WC(w, c(), c().send_cq());
    ASSERT_EQ(w.status, IBV_WC_SUCCESS);
  };

  ASSERT_EQ(ibv_req_notify_cq(s().recv_cq(), 1), 0);
  ASSERT_NO_FATAL_FAILURE(send(IBV_SEND_SIGNALED));
  ASSERT_NO_FATAL_FAILURE(barrier());
  EXPECT_EQ(ch.wait(std::chrono::milliseconds(0)), nullptr) << "a plain Send woke the channel";
  auto wcs = drain(s().recv_cq());
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 100u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);

  ASSERT_NO_FATAL_FAILURE(send(IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
  auto* got = ch.wait(kTimeout);
  ASSERT_NE(got, nullptr) << "the solicited Send did not wake the channel";
  EXPECT_EQ(got->context(), s().recv_cq());
  ibv_ack_cq_events(s().recv_cq(), 1);
  wcs = drain(s().recv_cq());
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 101u);
  EXPECT_TRUE(same(rb.data() + 64, src.data(), 16));

  // The arm is used up: another solicited Send raises no event until the CQ is armed again.
  ASSERT_NO_FATAL_FAILURE(send(IBV_SEND_SIGNALED | IBV_SEND_SOLICITED));
  ASSERT_NO_FATAL_FAILURE(barrier());
  EXPECT_EQ(ch.wait(std::chrono::milliseconds(0)), nullptr);
  EXPECT_EQ(drain(s().recv_cq()).size(), 1u);

  ASSERT_EQ(ibv_req_notify_cq(s().recv_cq(), 0), 0);
  ASSERT_NO_FATAL_FAILURE(send(IBV_SEND_SIGNALED));
  got = ch.wait(kTimeout);
  ASSERT_NE(got, nullptr) << "a CQ armed for all completions did not wake on a plain Send";
  ibv_ack_cq_events(s().recv_cq(), 1);
  EXPECT_EQ(drain(s().recv_cq()).size(), 1u);
}

// Inline data is copied at posting: the buffer may change (and need no region) afterwards.
TEST_P(RnicFeatures, InlineSendAndWrite) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& rb = buffer(80);
  auto* rmr = s().reg(rb.data(), rb.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_recv(s(), rmr, rb.data(), 80, 1), 0);
  auto& t = guarded(64);
  auto* tmr = s().reg(t.data(), t.len, kRw);
  std::vector<std::uint8_t> data = pattern(80, 0x40);  // not registered
  const auto original = data;
  ASSERT_EQ(post_send(c(), IBV_WR_SEND, nullptr, data.data(), 80, 2, 0, 0,
                      IBV_SEND_SIGNALED | IBV_SEND_INLINE),
            0)
      << ibv_last_error();
  std::fill(data.begin(), data.end(), 0);
  data = original;
  ASSERT_EQ(post_send(c(), IBV_WR_RDMA_WRITE, nullptr, data.data(), 64, 3, t.addr(), tmr->rkey,
                      IBV_SEND_SIGNALED | IBV_SEND_INLINE),
            0);
  std::fill(data.begin(), data.end(), 0);
  // A zero-length Read orders after the Write: once it completes, the Write is placed.
  ASSERT_EQ(post_send(c(), IBV_WR_RDMA_READ, nullptr, nullptr, 0, 8, t.addr(), tmr->rkey), 0);
  WAIT_WC(w1, c(), c().send_cq());
  EXPECT_EQ(w1.status, IBV_WC_SUCCESS);
  EXPECT_EQ(w1.byte_len, 80u);
  WAIT_WC(w2, c(), c().send_cq());
  EXPECT_EQ(w2.status, IBV_WC_SUCCESS);
  WAIT_WC(w3, c(), c().send_cq());
  EXPECT_EQ(w3.wr_id, 8u);
  EXPECT_EQ(w3.status, IBV_WC_SUCCESS);
  WAIT_WC(r, s(), s().recv_cq());
  EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.byte_len, 80u);
  EXPECT_EQ(rb, original);
  EXPECT_TRUE(same(t.data(), original.data(), 64));
  EXPECT_TRUE(t.guards_intact());
  // More than max_inline_data is refused, and bad_wr names the WR.
  std::vector<std::uint8_t> big(c().options().cap.max_inline_data + 1);
  ibv_sge sge{addr_of(big.data()), static_cast<std::uint32_t>(big.size()), 0};
  auto wr = make_wr(IBV_WR_SEND, &sge, 1, 4, IBV_SEND_INLINE);
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(c().qp(), &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  EXPECT_THAT(ibv_last_error(), HasSubstr("inline"));
}

// A send queue slot keeps its inline buffer for the next inline WR it carries: whatever the
// slot held before (a larger inline message, two SGEs copied inline, a WR sent from its
// registered SGE), each message carries its own octets and no more. A queue of 4 slots, each
// reused five times.
TEST_P(RnicFeatures, ReusedSendQueueSlotsCarryOnlyTheirOwnOctets) {
  auto co = opts();
  co.cap.max_send_wr = 4;
  ASSERT_NO_FATAL_FAILURE(connect(opts(), co));
  auto& rb = buffer(80);
  auto* rmr = s().reg(rb.data(), rb.size(), IBV_ACCESS_LOCAL_WRITE);
  auto& src = buffer(80);
  auto* smr = c().reg(src.data(), src.size(), 0);
  const std::uint32_t sizes[] = {80, 8, 0, 40, 1, 80, 3};
  for (std::uint64_t i = 0; i < 20; ++i) {
    const std::uint32_t n = sizes[i % std::size(sizes)];
    const int how = static_cast<int>(i % 3);  // 0: inline, 1: inline from two SGEs, 2: from src
    const std::vector<std::uint8_t> want = pattern(n, static_cast<std::uint8_t>(0x30 + i));
    std::vector<std::uint8_t> data = want;  // not registered
    std::fill(rb.begin(), rb.end(), 0xEE);
    ASSERT_EQ(post_recv(s(), rmr, rb.data(), 80, 100 + i), 0);
    if (how == 0) {
      ASSERT_EQ(post_send(c(), IBV_WR_SEND, nullptr, data.data(), n, i, 0, 0,
                          IBV_SEND_SIGNALED | IBV_SEND_INLINE),
                0)
          << ibv_last_error();
    } else if (how == 1) {
      ibv_sge sges[2] = {{addr_of(data.data()), n / 2, 0},
                         {addr_of(data.data() + n / 2), n - n / 2, 0}};
      auto wr = make_wr(IBV_WR_SEND, sges, 2, i, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
      ibv_send_wr* bad = nullptr;
      ASSERT_EQ(ibv_post_send(c().qp(), &wr, &bad), 0) << ibv_last_error();
    } else {
      std::copy(want.begin(), want.end(), src.begin());
      ASSERT_EQ(post_send(c(), IBV_WR_SEND, smr, src.data(), n, i), 0) << ibv_last_error();
    }
    std::fill(data.begin(), data.end(), 0);  // inline octets were copied at posting
    WAIT_WC(w, c(), c().send_cq());
    EXPECT_EQ(w.wr_id, i);
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    WAIT_WC(r, s(), s().recv_cq());
    EXPECT_EQ(r.wr_id, 100 + i);
    ASSERT_EQ(r.status, IBV_WC_SUCCESS);
    EXPECT_EQ(r.byte_len, n) << "message " << i;
    EXPECT_TRUE(same(rb.data(), want.data(), n)) << "message " << i;
    EXPECT_TRUE(std::all_of(rb.begin() + n, rb.end(), [](std::uint8_t b) { return b == 0xEE; }))
        << "message " << i << " wrote beyond its " << n << " octets";
  }
}

// Unsignaled WRs produce no completion; the signaled one after them does.
TEST_P(RnicFeatures, UnsignaledSendsHaveNoCompletion) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& rb = buffer(4 * 32);
  auto* rmr = s().reg(rb.data(), rb.size(), IBV_ACCESS_LOCAL_WRITE);
  for (std::uint64_t i = 0; i < 4; ++i)
    ASSERT_EQ(post_recv(s(), rmr, rb.data() + i * 32, 32, 10 + i), 0);
  auto& src = buffer(pattern(4 * 32, 6));
  auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  for (std::uint64_t i = 0; i < 4; ++i)
    ASSERT_EQ(post_send(c(), IBV_WR_SEND, smr, src.data() + i * 32, 32, i + 1, 0, 0,
                        i == 3 ? IBV_SEND_SIGNALED : 0u),
              0);
  WAIT_WC(w, c(), c().send_cq());
  EXPECT_EQ(w.wr_id, 4u);
  EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  for (std::uint64_t i = 0; i < 4; ++i) {
    WAIT_WC(r, s(), s().recv_cq());
    EXPECT_EQ(r.wr_id, 10 + i);
    EXPECT_EQ(r.status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(rb, src);
  // Send-queue completions retire in order, so nothing of the first three can follow.
  EXPECT_TRUE(drain(c().send_cq()).empty());
}

// RFC 5040 §5.5: a fenced WR starts only once the Reads before it completed, so a Write
// fenced behind a Read of the same memory cannot change what the Read returns.
TEST_P(RnicFeatures, FencedWriteWaitsForTheRead) {
  ASSERT_NO_FATAL_FAILURE(connect());
  constexpr std::uint32_t kN = 1u << 20;
  auto& remote = buffer(pattern(kN, 0x10));
  const auto old = remote;
  auto* mr = s().reg(remote.data(), remote.size(), kRw);
  auto& sink = buffer(kN);
  auto* kmr = c().reg(sink.data(), sink.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  auto& fresh = buffer(pattern(kN, 0x90));
  auto* fmr = c().reg(fresh.data(), fresh.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_sge rs{addr_of(sink.data()), kN, kmr->lkey};
  ibv_sge ws{addr_of(fresh.data()), kN, fmr->lkey};
  auto rd = make_wr(IBV_WR_RDMA_READ, &rs, 1, 1);
  rd.wr.rdma.remote_addr = addr_of(remote.data());
  rd.wr.rdma.rkey = mr->rkey;
  auto wr = make_wr(IBV_WR_RDMA_WRITE, &ws, 1, 2, IBV_SEND_SIGNALED | IBV_SEND_FENCE);
  wr.wr.rdma.remote_addr = addr_of(remote.data());
  wr.wr.rdma.rkey = mr->rkey;
  rd.next = &wr;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(c().qp(), &rd, &bad), 0);
  WAIT_WC(w1, c(), c().send_cq());
  EXPECT_EQ(w1.wr_id, 1u);
  EXPECT_EQ(w1.status, IBV_WC_SUCCESS);
  WAIT_WC(w2, c(), c().send_cq());
  EXPECT_EQ(w2.wr_id, 2u);
  EXPECT_EQ(w2.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(sink == old) << "the Read saw the fenced Write's data";
  // Read the region back to know the Write is placed.
  ASSERT_EQ(
      post_send(c(), IBV_WR_RDMA_READ, kmr, sink.data(), kN, 3, addr_of(remote.data()), mr->rkey),
      0);
  WAIT_WC(w3, c(), c().send_cq());
  EXPECT_EQ(w3.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(sink == fresh);
  EXPECT_TRUE(remote == fresh);
}

// FencedWriteWaitsForTheRead shows the data, but whether a Write without the fence would change
// what the Read returns depends on timing. Here a raw peer answers the Read only when it
// chooses: nothing of the fenced Write may reach the wire before the Read Response has come
// (RFC 5040 §5.5: a fenced WR waits until every earlier Read has completed), and then it
// follows. Without the fence the Write leaves right behind the Read Request.
TEST(RnicFence, FencedWriteLeavesOnlyOnceTheReadIsAnswered) {
  using iwarp::testing::RawConnection;
  // (The buffers before the endpoints: a failed assertion leaves no WR reading a freed one.)
  std::vector<std::uint8_t> sink(64, 0), src(64, 0x77);
  std::vector<std::uint8_t> hello(16, 0);
  EndpointOptions so;
  so.on_qp_created = [&](Endpoint& e) {
    auto* mr = e.reg(hello.data(), hello.size(), IBV_ACCESS_LOCAL_WRITE);
    post_one_recv(e.qp(), hello.data(), 16, mr->lkey, 9);
  };
  RawConnection rc(so);
  ASSERT_TRUE(rc.ok()) << (rc.accepted ? "the raw peer failed" : rc.accepted.error());
  Endpoint& ep = rc.server;
  // The initiator speaks first (RFC 5044 §7.1.2): a Send, then the server may send.
  {
    ddp::Segment first;
    first.hdr = ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{1}, MessageOffset{0});
    const Bytes four(4, 0x01);
    first.payload = four;
    ASSERT_TRUE(rc.peer->write(rc.peer->fpdu(first)));
    auto wc = ep.wait(ep.recv_cq());
    ASSERT_TRUE(wc) << wc.error();
    EXPECT_EQ(wc->status, IBV_WC_SUCCESS);
  }
  auto* kmr = ep.reg(sink.data(), sink.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  auto* smr = ep.reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_one(ep.qp(), {.op = IBV_WR_RDMA_READ,
                               .addr = sink.data(),
                               .len = 64,
                               .lkey = kmr->lkey,
                               .remote_addr = 0x1000,
                               .rkey = 0x00BEEF01,
                               .wr_id = 1}),
            0)
      << ibv_last_error();
  ASSERT_EQ(post_one(ep.qp(), {.op = IBV_WR_RDMA_WRITE,
                               .addr = src.data(),
                               .len = 64,
                               .lkey = smr->lkey,
                               .remote_addr = 0x2000,
                               .rkey = 0x00CAFE01,
                               .flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE,
                               .wr_id = 2}),
            0)
      << ibv_last_error();
  auto& peer = *rc.peer;
  // The Read Request (however long a loaded machine takes), then a window in which nothing
  // more may come: without the fence the Write is right behind it.
  auto& got = peer.replies();
  for (int i = 0; i < 100 && got.segments.empty(); ++i)
    peer.read_until_closed(std::chrono::milliseconds(100));
  ASSERT_FALSE(got.segments.empty()) << "no Read Request";
  peer.read_until_closed(std::chrono::milliseconds(300));
  ASSERT_EQ(got.segments.size(), 1u) << "the fenced Write left before the Read was answered";
  ASSERT_EQ(got.segments[0].hdr.op(), rdmap::Opcode::ReadRequest);
  const auto rr = std::get<rdmap::ReadRequest>(got.segments[0].body);
  EXPECT_TRUE(drain(ep.send_cq()).empty()) << "nothing completes before the Read Response";
  ddp::Segment resp;
  resp.hdr = ddp::tagged_header(rdmap::Opcode::ReadResponse, rr.sink_stag, rr.sink_to, true);
  const Bytes answer(64, 0x42);
  resp.payload = answer;
  ASSERT_TRUE(peer.write(peer.fpdu(resp)));
  for (int i = 0; i < 50 && got.segments.size() < 2; ++i)
    peer.read_until_closed(std::chrono::milliseconds(100));
  ASSERT_EQ(got.segments.size(), 2u) << "the fenced Write did not follow the Read Response";
  EXPECT_EQ(got.segments[1].hdr.op(), rdmap::Opcode::Write);
  EXPECT_EQ(got.segments[1].hdr.stag, STag{0x00CAFE01});
  EXPECT_EQ(Bytes(got.segments[1].payload.begin(), got.segments[1].payload.end()), Bytes(64, 0x77));
  for (std::uint64_t id : {1u, 2u}) {
    auto wc = ep.wait(ep.send_cq());
    ASSERT_TRUE(wc) << wc.error();
    EXPECT_EQ(wc->wr_id, id);
    EXPECT_EQ(wc->status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc->status);
  }
  EXPECT_EQ(Bytes(sink.begin(), sink.end()), answer);
}

// A chain of WRs linked by `next` is posted with one doorbell and leaves in one gather write.
TEST_P(RnicFeatures, ChainOfWorkRequestsOneDoorbell) {
  ASSERT_NO_FATAL_FAILURE(connect());
  constexpr int kN = 16;
  auto& rb = buffer(kN * 32);
  auto* rmr = s().reg(rb.data(), rb.size(), IBV_ACCESS_LOCAL_WRITE);
  auto& t = guarded(kN * 32);
  auto* tmr = s().reg(t.data(), t.len, kRw);
  for (int i = 0; i < kN / 2; ++i)
    ASSERT_EQ(post_recv(s(), rmr, rb.data() + i * 32, 32, 100 + static_cast<std::uint64_t>(i)), 0);
  auto& src = buffer(pattern(kN * 32, 0x21));
  auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_sge sges[kN];
  ibv_send_wr wrs[kN];
  for (int i = 0; i < kN; ++i) {
    sges[i] = ibv_sge{addr_of(src.data() + i * 32), 32, smr->lkey};
    const bool send = i % 2 == 0;
    wrs[i] = make_wr(send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE, &sges[i], 1,
                     static_cast<std::uint64_t>(i + 1));
    wrs[i].wr.rdma.remote_addr = t.addr() + static_cast<std::uint64_t>(i) * 32;
    wrs[i].wr.rdma.rkey = tmr->rkey;
    wrs[i].next = i + 1 < kN ? &wrs[i + 1] : nullptr;
  }
  const auto before = c().qp()->qp->stats();
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(c().qp(), wrs, &bad), 0) << ibv_last_error();
  for (int i = 0; i < kN; ++i) {
    WAIT_WC(w, c(), c().send_cq());
    EXPECT_EQ(w.wr_id, static_cast<std::uint64_t>(i + 1));
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    EXPECT_EQ(w.opcode, i % 2 == 0 ? IBV_WC_SEND : IBV_WC_RDMA_WRITE);
  }
  const auto after = c().qp()->qp->stats();
  // One wake-up of the transmitter: a doorbell, or the posting thread sending the chain itself
  // (docs/progress-model.md).
  EXPECT_EQ((after.doorbells - before.doorbells) +
                (after.posted_inline_batches - before.posted_inline_batches),
            1u);
  EXPECT_EQ(after.tx_batches - before.tx_batches, 1u);
  EXPECT_EQ(after.fpdus_sent - before.fpdus_sent, static_cast<std::uint64_t>(kN));
  for (int i = 0; i < kN / 2; ++i) {
    WAIT_WC(r, s(), s().recv_cq());
    EXPECT_EQ(r.wr_id, 100u + static_cast<std::uint64_t>(i));
    EXPECT_TRUE(same(rb.data() + i * 32, src.data() + 2 * i * 32, 32));
  }
  // A zero-length Read orders after the last Write: once it completes all Writes are placed.
  ASSERT_EQ(post_send(c(), IBV_WR_RDMA_READ, nullptr, nullptr, 0, 99, t.addr(), tmr->rkey), 0);
  WAIT_WC(b, c(), c().send_cq());
  EXPECT_EQ(b.status, IBV_WC_SUCCESS);
  for (int i = 1; i < kN; i += 2) EXPECT_TRUE(same(t.data() + i * 32, src.data() + i * 32, 32));
  EXPECT_TRUE(t.body_is(0, 32, 0));
  EXPECT_TRUE(t.guards_intact());
}

// A bad WR in the middle of a chain: bad_wr names it, the WRs before it are posted (and go
// out), the ones after it are not.
TEST_P(RnicFeatures, ChainStopsAtTheBadWorkRequest) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto& rb = buffer(3 * 32);
  auto* rmr = s().reg(rb.data(), rb.size(), IBV_ACCESS_LOCAL_WRITE);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(post_recv(s(), rmr, rb.data() + i * 32, 32, 100 + static_cast<std::uint64_t>(i)), 0);
  auto& src = buffer(pattern(32, 0x22));
  auto* smr = c().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  std::vector<ibv_sge> many(c().options().cap.max_send_sge + 1,
                            ibv_sge{addr_of(src.data()), 1, smr->lkey});
  ibv_sge one{addr_of(src.data()), 32, smr->lkey};
  ibv_send_wr wrs[4] = {make_wr(IBV_WR_SEND, &one, 1, 1), make_wr(IBV_WR_SEND, &one, 1, 2),
                        make_wr(IBV_WR_SEND, many.data(), static_cast<int>(many.size()), 3),
                        make_wr(IBV_WR_SEND, &one, 1, 4)};
  for (int i = 0; i < 3; ++i) wrs[i].next = &wrs[i + 1];
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(c().qp(), wrs, &bad), EINVAL);
  EXPECT_EQ(bad, &wrs[2]);
  EXPECT_THAT(ibv_last_error(), HasSubstr("SGEs"));
  for (std::uint64_t i = 1; i <= 2; ++i) {
    WAIT_WC(w, c(), c().send_cq());
    EXPECT_EQ(w.wr_id, i);
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    WAIT_WC(r, s(), s().recv_cq());
    EXPECT_EQ(r.wr_id, 99 + i);
  }
  // Nothing else went: a barrier Send arrives in the third receive WR.
  ASSERT_EQ(post_send(c(), IBV_WR_SEND, smr, src.data(), 5, 9), 0);
  WAIT_WC(w, c(), c().send_cq());
  EXPECT_EQ(w.wr_id, 9u);
  WAIT_WC(r, s(), s().recv_cq());
  EXPECT_EQ(r.wr_id, 102u);
  EXPECT_EQ(r.byte_len, 5u);
}

// A Send gathered from three SGEs (two regions) lands scattered over three receive SGEs whose
// boundaries do not match the sender's, across several FPDUs.
TEST_P(RnicFeatures, MultiSgeSendAndReceive) {
  ASSERT_NO_FATAL_FAILURE(connect());
  const std::uint32_t out_len[3] = {100, 5000, 70000};
  const std::uint32_t in_len[3] = {7, 40000, 40000};
  constexpr std::uint32_t kTotal = 75100;
  auto& a = buffer(pattern(100 + 5000, 0x61));
  auto& b = buffer(pattern(70000, 0x62));
  auto* amr = c().reg(a.data(), a.size(), IBV_ACCESS_LOCAL_WRITE);
  auto* bmr = c().reg(b.data(), b.size(), IBV_ACCESS_LOCAL_WRITE);
  std::vector<std::uint8_t> expect(a.begin(), a.end());
  expect.insert(expect.end(), b.begin(), b.end());
  ASSERT_EQ(expect.size(), kTotal);

  std::vector<Guarded*> rg;
  std::vector<ibv_sge> rs;
  for (auto n : in_len) {
    auto& g = guarded(n, 0xEE);
    auto* mr = s().reg(g.data(), g.len, IBV_ACCESS_LOCAL_WRITE);
    rg.push_back(&g);
    rs.push_back(ibv_sge{g.addr(), n, mr->lkey});
  }
  ASSERT_EQ(post_recv_sges(s().qp(), rs, 77), 0) << ibv_last_error();

  ibv_sge ss[3] = {{addr_of(a.data()), out_len[0], amr->lkey},
                   {addr_of(a.data() + 100), out_len[1], amr->lkey},
                   {addr_of(b.data()), out_len[2], bmr->lkey}};
  auto wr = make_wr(IBV_WR_SEND, ss, 3, 5);
  ASSERT_EQ(post(c().qp(), wr), 0);
  WAIT_WC(w, c(), c().send_cq());
  EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  EXPECT_EQ(w.byte_len, kTotal);
  WAIT_WC(r, s(), s().recv_cq());
  EXPECT_EQ(r.wr_id, 77u);
  EXPECT_EQ(r.status, IBV_WC_SUCCESS) << ibv_wc_status_str(r.status);
  EXPECT_EQ(r.byte_len, kTotal);
  std::size_t off = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const std::size_t n = std::min<std::size_t>(in_len[i], kTotal - off);
    EXPECT_TRUE(same(rg[i]->data(), expect.data() + off, n));
    EXPECT_TRUE(rg[i]->body_is(n, in_len[i] - n, 0xEE));
    EXPECT_TRUE(rg[i]->guards_intact());
    off += n;
  }

  // The same gather as an RDMA Write into one region.
  auto& t = guarded(kTotal);
  auto* tmr = s().reg(t.data(), t.len, kRw);
  auto ww = make_wr(IBV_WR_RDMA_WRITE, ss, 3, 6);
  ww.wr.rdma.remote_addr = t.addr();
  ww.wr.rdma.rkey = tmr->rkey;
  ASSERT_EQ(post(c().qp(), ww), 0);
  ASSERT_EQ(post_send(c(), IBV_WR_RDMA_READ, nullptr, nullptr, 0, 7, t.addr(), tmr->rkey), 0);
  WAIT_WC(w2, c(), c().send_cq());
  EXPECT_EQ(w2.status, IBV_WC_SUCCESS);
  WAIT_WC(w3, c(), c().send_cq());
  EXPECT_EQ(w3.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(same(t.data(), expect.data(), kTotal));
  EXPECT_TRUE(t.guards_intact());
}

// A shared receive queue (ibv_create_srq) serving two QPs of one server: receive WRs are
// consumed in posting order by whichever QP gets a Send; ibv_post_recv on such a QP is refused.
TEST_P(RnicFeatures, SharedReceiveQueue) {
  struct Server {
    ibv_context* ctx = ibv_open_device("srq0");
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
    ibv_cq* scq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    ibv_cq* rcq = ibv_create_cq(ctx, 64, nullptr, ch, 0);
    ibv_srq* srq = ibv_create_srq(pd, 8, 2);
    rdma_event_channel* ech = rdma_create_event_channel(ctx);
    rdma_cm_id* listen = nullptr;
    std::vector<rdma_cm_id*> ids;
    std::vector<ibv_mr*> mrs;
    ~Server() {
      for (auto* id : ids) {
        if (id->qp) {
          rdma_disconnect(id);
          rdma_destroy_qp(id);
        }
        rdma_destroy_id(id);
      }
      if (listen) rdma_destroy_id(listen);
      for (auto* mr : mrs) ibv_dereg_mr(mr);
      rdma_destroy_event_channel(ech);
      ctx->dev.reset();  // stop the engine before the CQs go
      ibv_destroy_srq(srq);
      ibv_destroy_cq(scq);
      ibv_destroy_cq(rcq);
      ibv_destroy_comp_channel(ch);
      ibv_dealloc_pd(pd);
      ibv_close_device(ctx);
    }
  };
  auto& rb = buffer(4 * 64);
  auto server = std::make_unique<Server>();
  auto& sv = *server;
  ASSERT_EQ(rdma_create_id(sv.ech, &sv.listen, nullptr), 0);
  rdma_set_mpa(sv.listen, options_for(GetParam()).cm);
  rdma_bind_addr(sv.listen, "127.0.0.1", 0);
  ASSERT_EQ(rdma_listen(sv.listen, 4), 0) << ibv_last_error();
  const std::uint16_t port = rdma_get_src_port(sv.listen);

  // The private data says which client a connect request comes from.
  auto o1 = opts(), o2 = opts();
  o1.private_data = {0};
  o2.private_data = {1};
  Endpoint c1(o1), c2(o2);
  ibv_qp* qp_of[2] = {nullptr, nullptr};
  std::expected<void, std::string> r1, r2;
  std::thread t1([&] { r1 = c1.connect("127.0.0.1", port); });
  std::thread t2([&] { r2 = c2.connect("127.0.0.1", port); });
  int established = 0;
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (established < 2 && std::chrono::steady_clock::now() < deadline) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(sv.ech, &ev, 200) != 0) continue;
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      ibv_qp_init_attr attr;
      attr.send_cq = sv.scq;
      attr.recv_cq = sv.rcq;
      attr.srq = sv.srq;
      rdma_cm_id* id = ev->id;
      sv.ids.push_back(id);
      EXPECT_EQ(rdma_create_qp(id, sv.pd, &attr), 0) << ibv_last_error();
      if (ev->param.conn.private_data_len == 1) {
        const auto who = *static_cast<const std::uint8_t*>(ev->param.conn.private_data);
        if (who < 2) qp_of[who] = id->qp;
      }
      rdma_conn_param p;
      EXPECT_EQ(rdma_accept(id, &p), 0);
    } else if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
      ++established;
    } else {
      ADD_FAILURE() << "unexpected " << rdma_event_str(ev->event) << ": " << ev->detail;
    }
    rdma_ack_cm_event(ev);
  }
  t1.join();
  t2.join();
  ASSERT_TRUE(r1) << r1.error();
  ASSERT_TRUE(r2) << r2.error();
  ASSERT_EQ(established, 2);
  ASSERT_EQ(sv.ids.size(), 2u);
  ASSERT_TRUE(qp_of[0] && qp_of[1] && qp_of[0] != qp_of[1]);

  auto* rmr = ibv_reg_mr(sv.pd, rb.data(), rb.size(), IBV_ACCESS_LOCAL_WRITE);
  sv.mrs.push_back(rmr);
  // Receive WRs go to the SRQ, not to the QPs.
  ibv_sge one{addr_of(rb.data()), 64, rmr->lkey};
  ibv_recv_wr rw;
  rw.sg_list = &one;
  rw.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_recv(qp_of[0], &rw, &bad), EINVAL);
  EXPECT_THAT(ibv_last_error(), HasSubstr("shared receive queue"));
  ibv_recv_wr srq_wrs[4];
  ibv_sge srq_sges[4];
  for (int i = 0; i < 4; ++i) {
    srq_sges[i] = ibv_sge{addr_of(rb.data() + i * 64), 64, rmr->lkey};
    srq_wrs[i].wr_id = 200 + static_cast<std::uint64_t>(i);
    srq_wrs[i].sg_list = &srq_sges[i];
    srq_wrs[i].num_sge = 1;
    srq_wrs[i].next = i < 3 ? &srq_wrs[i + 1] : nullptr;
  }
  ASSERT_EQ(ibv_post_srq_recv(sv.srq, srq_wrs, &bad), 0) << ibv_last_error();

  auto& m1 = buffer(pattern(64, 0x01));
  auto& m2 = buffer(pattern(64, 0x02));
  auto* m1r = c1.reg(m1.data(), 64, IBV_ACCESS_LOCAL_WRITE);
  auto* m2r = c2.reg(m2.data(), 64, IBV_ACCESS_LOCAL_WRITE);
  struct Step {
    Endpoint* ep;
    ibv_mr* mr;
    std::vector<std::uint8_t>* data;
    std::size_t qp_index;
  };
  const Step steps[] = {{&c2, m2r, &m2, 1}, {&c1, m1r, &m1, 0}, {&c2, m2r, &m2, 1}};
  for (std::size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const auto& st = steps[i];
    ASSERT_EQ(post_send(*st.ep, IBV_WR_SEND, st.mr, st.data->data(), 48, i), 0);
    auto r = wait_cq(sv.rcq);
    ASSERT_TRUE(r) << r.error();
    EXPECT_EQ(r->status, IBV_WC_SUCCESS) << ibv_wc_status_str(r->status);
    EXPECT_EQ(r->wr_id, 200 + i);  // the SRQ's WRs in posting order
    EXPECT_EQ(r->qp_num, qp_of[st.qp_index]->qp_num);
    EXPECT_EQ(r->byte_len, 48u);
    EXPECT_TRUE(same(rb.data() + i * 64, st.data->data(), 48));
  }
  EXPECT_EQ(sv.srq->srq->size(), 1u);
}

// RFC 5040 §6.3 / RFC 6581 §6: with more Reads posted than the ORD allows, the initiator
// holds the rest back until responses come; the responder (IRD 1) never sees too many. MPA
// rev 2 lowers the initiator's ORD to the responder's IRD; with rev 1 the application must.
TEST_P(RnicFeatures, ReadsWaitForTheOrd) {
  auto so = opts();
  so.ird = 1;
  auto co = opts();
  co.ord = GetParam().revision == 2 ? 8 : 1;
  ASSERT_NO_FATAL_FAILURE(connect(so, co));
  constexpr std::uint32_t kN = 8, kSize = 20000;
  auto& src = buffer(pattern(kN * kSize, 0x33));
  auto* mr = s().reg(src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  auto& sink = buffer(kN * kSize);
  auto* kmr = c().reg(sink.data(), sink.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ibv_sge sges[kN];
  ibv_send_wr wrs[kN];
  for (std::uint32_t i = 0; i < kN; ++i) {
    sges[i] = ibv_sge{addr_of(sink.data() + i * kSize), kSize, kmr->lkey};
    wrs[i] = make_wr(IBV_WR_RDMA_READ, &sges[i], 1, i + 1);
    wrs[i].wr.rdma.remote_addr = addr_of(src.data() + (kN - 1 - i) * kSize);
    wrs[i].wr.rdma.rkey = mr->rkey;
    wrs[i].next = i + 1 < kN ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(c().qp(), wrs, &bad), 0);
  for (std::uint32_t i = 0; i < kN; ++i) {
    WAIT_WC(w, c(), c().send_cq());
    EXPECT_EQ(w.wr_id, i + 1);
    EXPECT_EQ(w.status, IBV_WC_SUCCESS) << ibv_wc_status_str(w.status);
  }
  for (std::uint32_t i = 0; i < kN; ++i)
    EXPECT_TRUE(same(sink.data() + i * kSize, src.data() + (kN - 1 - i) * kSize, kSize)) << i;
  EXPECT_EQ(ibv_query_qp_state(c().qp()), IBV_QPS_RTS);
  EXPECT_EQ(ibv_query_qp_state(s().qp()), IBV_QPS_RTS);
}

INSTANTIATE_TEST_SUITE_P(Rnic, RnicFeatures, ::testing::ValuesIn(kFramings), framing_name);
