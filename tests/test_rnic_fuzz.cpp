// A hostile peer: a raw TCP client completes the MPA exchange with an emulated RNIC and then
// sends valid and mutated DDP segments (mutated before the CRC is computed, so the bad headers
// reach DDP and RDMAP, and sometimes after, so the CRC catches them). Whatever arrives, the RNIC
// must not crash or hang, must never write outside its registered memory, and must end the
// connection with a well-formed Terminate when it finds a violation.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <random>

#include "common/log.hpp"
#include "ddp/segment.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/negotiation.hpp"
#include "mpa/stream_decoder.hpp"
#include "raw_peer.hpp"
#include "rnic/connection_manager.hpp"  // the engine behind the endpoint
#include "verbs_shim/endpoint.hpp"

using namespace iwarp;
using namespace iwarp::verbs;
using namespace std::chrono_literals;
using iwarp::testing::read_n;
using iwarp::testing::write_all;

namespace {

constexpr std::uint8_t kCanary = 0x5C;

// Collects what the RNIC sends back, to check its Terminate is well formed.
struct Replies : mpa::StreamVisitor {
  int fpdus = 0, terminates = 0;
  std::optional<WireError> error;
  void on_mpa_frame(const mpa::MpaFrame&, std::uint64_t, std::size_t) override {}
  void on_fpdu(const mpa::Fpdu& f) override {
    ++fpdus;
    auto s = ddp::parse_segment(f.ulpdu);
    if (s && s->hdr.opcode == 7) {
      ++terminates;
      last = std::get<rdmap::Terminate>(s->body);
    }
    if (!s) error = s.error();
  }
  std::optional<rdmap::Terminate> last;
  void on_error(const WireError& e) override { error = e; }
};

}  // namespace

TEST(RnicFuzz, HostilePeerNeverCorruptsMemoryOrHangs) {
  log::configure("rnic=error");  // a thousand Terminates are expected here
  const int iterations =
      std::getenv("RNIC_FUZZ_ITERATIONS") ? std::atoi(std::getenv("RNIC_FUZZ_ITERATIONS")) : 1000;
  std::mt19937 rng(20261122);
  int terminated = 0, clean = 0, crc_checked = 0;
  for (int it = 0; it < iterations; ++it) {
    SCOPED_TRACE(it);
    // The target: a region with canaries on both sides, and receive buffers.
    std::vector<std::uint8_t> mem(3 * 4096, kCanary), rbuf(2 * 4096, kCanary);
    ibv_mr *mr = nullptr, *rmr = nullptr;
    EndpointOptions so;
    so.cm.policy.crc = mpa::CrcPolicy::Required;
    so.timeout = 5s;
    so.on_qp_created = [&](Endpoint& ep) {
      mr = ep.reg(&mem[4096], 4096,
                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                      IBV_ACCESS_REMOTE_ATOMIC);
      rmr = ep.reg(&rbuf[2048], 2048, IBV_ACCESS_LOCAL_WRITE);
      for (int k = 0; k < 2; ++k) post_one_recv(ep.qp(), &rbuf[2048 + k * 1024], 1024, rmr->lkey);
    };
    Endpoint server(so);
    auto port = server.listen("127.0.0.1", 0);
    ASSERT_TRUE(port);
    std::expected<void, std::string> accepted;
    std::thread acc([&] { accepted = server.accept_one(); });

    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(*port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    mpa::Policy pol;
    pol.crc = mpa::CrcPolicy::Required;
    ASSERT_TRUE(write_all(fd, mpa::make_request(pol).encode()));
    std::uint8_t hdr[mpa::kFrameHeaderSize];
    ASSERT_TRUE(read_n(fd, hdr, sizeof hdr));
    std::vector<std::uint8_t> pd(load_be16(hdr + 18));
    ASSERT_TRUE(read_n(fd, pd.data(), pd.size()));
    acc.join();
    ASSERT_TRUE(accepted) << accepted.error();
    const STag stag{mr->rkey};
    const std::uint64_t base = reinterpret_cast<std::uint64_t>(mr->addr);

    // A few segments: Writes inside the region, Sends, a Read Request, an atomic.
    mpa::FpduEncoder enc({true, false});
    Bytes wire;
    std::uint32_t send_msn = 0, read_msn = 0;
    // Whether every FPDU so far is valid by construction (unmutated, inside the region, with a
    // receive for each Send), and whether a CRC corruption came while that held: then the
    // RNIC's one answer must be the CRC Terminate.
    bool valid_so_far = true, crc_first = false;
    const int segments = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < segments; ++k) {
      ddp::Segment s;
      Bytes payload(rng() % 600);
      for (auto& b : payload) b = static_cast<std::uint8_t>(rng());
      bool valid = true;
      switch (rng() % 4) {
        case 0: {
          const std::uint64_t off = rng() % 3000;
          s.hdr = ddp::tagged_header(rdmap::Opcode::Write, stag, TaggedOffset{base + off});
          s.payload = payload;
          valid = off + payload.size() <= 4096;
          break;
        }
        case 1:
          s.hdr = ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{++send_msn},
                                       MessageOffset{0});
          s.payload = payload;
          valid = send_msn <= 2;  // two receives of 1024 octets are posted
          break;
        case 2:
          s.hdr = ddp::untagged_header(rdmap::Opcode::ReadRequest, QueueNumber{1}, Msn{++read_msn},
                                       MessageOffset{0});
          s.body =
              rdmap::ReadRequest{STag{1}, TaggedOffset{0}, static_cast<std::uint32_t>(rng() % 512),
                                 stag, TaggedOffset{base + rng() % 3000}};
          break;
        default: {
          s.hdr = ddp::untagged_header(rdmap::Opcode::AtomicRequest, QueueNumber{1},
                                       Msn{++read_msn}, MessageOffset{0});
          rdmap::AtomicRequest ar;
          ar.stag = stag;
          ar.to = TaggedOffset{base + 8 * (rng() % 512)};
          ar.add_swap_data = 1;
          s.body = ar;
        }
      }
      Bytes ulpdu;
      ddp::encode_segment(s, ulpdu);
      // Mutate the ULPDU itself (the CRC then covers the bad bytes) in most iterations.
      if (rng() % 4 != 0) {
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f)
          ulpdu[rng() % ulpdu.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
        valid = false;
      }
      const std::size_t before = wire.size();
      ASSERT_TRUE(enc.encode(ulpdu, wire));
      if (rng() % 10 == 0) {
        // A CRC error, anywhere but the length field (so the FPDU still ends where it should).
        const std::size_t at = before + 2 + rng() % (wire.size() - before - 2);
        wire[at] ^= 0x10;
        if (valid_so_far) crc_first = true;
        valid = false;
      }
      valid_so_far = valid_so_far && valid;
    }
    write_all(fd, wire);
    ::shutdown(fd, SHUT_WR);

    // The RNIC's answer: at most a Terminate, well formed, then the end of the stream.
    mpa::StreamDecoder dec(mpa::FramingConfig{true, false});
    Replies replies;
    std::uint8_t buf[4096];
    for (;;) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      dec.feed(ByteSpan(buf, static_cast<std::size_t>(n)), replies);
    }
    ::close(fd);
    EXPECT_FALSE(replies.error) << replies.error->to_string();
    EXPECT_LE(replies.terminates, 1);
    auto ev = server.wait_event(RDMA_CM_EVENT_DISCONNECTED, 5s);
    EXPECT_TRUE(ev) << "the RNIC did not end the connection";
    EXPECT_EQ(ibv_query_qp_state(server.qp()), IBV_QPS_ERR);
    if (crc_first) {
      // RFC 5044 §8: the CRC error is what ends the stream, LLP 2/0/0x02.
      ++crc_checked;
      ASSERT_EQ(replies.terminates, 1) << "no Terminate for the CRC error";
      EXPECT_EQ(replies.last->layer, 2);
      EXPECT_EQ(replies.last->etype, 0);
      EXPECT_EQ(replies.last->ecode, 0x02);
    }
    if (replies.terminates) {
      ++terminated;
      EXPECT_NE(server.qp()->qp->error_reason().find("sent Terminate"), std::string::npos);
    } else {
      ++clean;
    }
    // No octet outside the registered ranges changed.
    for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(mem[i], kCanary) << "below the region";
    for (std::size_t i = 8192; i < mem.size(); ++i)
      ASSERT_EQ(mem[i], kCanary) << "above the region";
    for (std::size_t i = 0; i < 2048; ++i)
      ASSERT_EQ(rbuf[i], kCanary) << "below the receive buffers";
    for (std::size_t i = 4096; i < rbuf.size(); ++i) ASSERT_EQ(rbuf[i], kCanary);
  }
  // The mutations must really have exercised the error paths, and the clean ones the others.
  EXPECT_GT(terminated, iterations / 3);
  EXPECT_GT(clean, 0);
  EXPECT_GT(crc_checked, iterations / 50) << "too few CRC corruptions came first";
}

namespace {

// A raw TCP peer that completes the MPA exchange (CRC on) with `server` and returns the socket.
int raw_peer(Endpoint& server, std::expected<void, std::string>& accepted) {
  auto port = server.listen("127.0.0.1", 0);
  if (!port) return -1;
  std::thread acc([&] { accepted = server.accept_one(); });
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(*port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  mpa::Policy pol;
  pol.crc = mpa::CrcPolicy::Required;
  std::uint8_t hdr[mpa::kFrameHeaderSize];
  ok = ok && write_all(fd, mpa::make_request(pol).encode()) && read_n(fd, hdr, sizeof hdr);
  std::vector<std::uint8_t> pd(ok ? load_be16(hdr + 18) : 0);
  ok = ok && read_n(fd, pd.data(), pd.size());
  acc.join();
  if (!ok) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One FPDU (CRC on) for `s`, its last CRC octet flipped when `bad_crc`.
Bytes fpdu(const ddp::Segment& s, bool bad_crc) {
  Bytes ulpdu, wire;
  ddp::encode_segment(s, ulpdu);
  mpa::FpduEncoder enc({true, false});
  EXPECT_TRUE(enc.encode(ulpdu, wire));
  if (bad_crc) wire.back() ^= 0x01;
  return wire;
}

// What the RNIC sent back until it closed: the opcodes of its FPDUs, in order.
std::vector<int> replies(int fd) {
  struct Ops : mpa::StreamVisitor {
    std::vector<int> ops;
    void on_mpa_frame(const mpa::MpaFrame&, std::uint64_t, std::size_t) override {}
    void on_fpdu(const mpa::Fpdu& f) override {
      auto s = ddp::parse_segment(f.ulpdu);
      ops.push_back(s ? s->hdr.opcode : -1);
    }
    void on_error(const WireError&) override { ops.push_back(-2); }
  } v;
  mpa::StreamDecoder dec(mpa::FramingConfig{true, false});
  std::uint8_t buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    dec.feed(ByteSpan(buf, static_cast<std::size_t>(n)), v);
  }
  return v.ops;
}

}  // namespace

// RFC 5044 §6.2: an Atomic Request whose CRC is bad never touches memory; a Read Request whose
// CRC is bad is never answered. The RNIC's only answer is the LLP CRC Terminate.
TEST(RnicFuzz, NothingActsOnAnFpduBeforeItsCrcIsGood) {
  for (bool atomic : {true, false}) {
    SCOPED_TRACE(atomic ? "atomic" : "read");
    alignas(8) std::uint64_t word = 40;
    std::vector<std::uint8_t> src(4096, 0x77);
    ibv_mr *wmr = nullptr, *smr = nullptr;
    EndpointOptions so;
    so.cm.policy.crc = mpa::CrcPolicy::Required;
    so.on_qp_created = [&](Endpoint& ep) {
      wmr = ep.reg(&word, 8, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
      smr = ep.reg(src.data(), src.size(), IBV_ACCESS_REMOTE_READ);
    };
    Endpoint server(so);
    std::expected<void, std::string> accepted;
    int fd = raw_peer(server, accepted);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(accepted) << accepted.error();
    ddp::Segment s;
    s.hdr = ddp::untagged_header(atomic ? rdmap::Opcode::AtomicRequest : rdmap::Opcode::ReadRequest,
                                 QueueNumber{1}, Msn{1}, MessageOffset{0});
    if (atomic) {
      rdmap::AtomicRequest ar;
      ar.stag = STag{wmr->rkey};
      ar.to = TaggedOffset{reinterpret_cast<std::uint64_t>(&word)};
      ar.add_swap_data = 2;
      s.body = ar;
    } else {
      s.body = rdmap::ReadRequest{STag{1}, TaggedOffset{0}, 4096, STag{smr->rkey},
                                  TaggedOffset{reinterpret_cast<std::uint64_t>(src.data())}};
    }
    const Bytes wire = fpdu(s, true);
    // Everything but the CRC, a pause in which nothing may happen, then the bad CRC.
    ASSERT_TRUE(write_all(fd, ByteSpan(wire).first(wire.size() - 4)));
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(__atomic_load_n(&word, __ATOMIC_SEQ_CST), 40u);
    ASSERT_TRUE(write_all(fd, ByteSpan(wire).last(4)));
    const auto ops = replies(fd);
    ::close(fd);
    EXPECT_EQ(ops, std::vector<int>{7}) << "only a Terminate may come back";
    EXPECT_EQ(word, 40u);
    EXPECT_NE(server.qp()->qp->error_reason().find("MPA: CRC mismatch"), std::string::npos)
        << server.qp()->qp->error_reason();
  }
}

// The same requests with a good CRC are carried out (the test above can fail).
TEST(RnicFuzz, GoodCrcRequestsAreCarriedOut) {
  alignas(8) std::uint64_t word = 40;
  ibv_mr* wmr = nullptr;
  EndpointOptions so;
  so.cm.policy.crc = mpa::CrcPolicy::Required;
  so.on_qp_created = [&](Endpoint& ep) {
    wmr = ep.reg(&word, 8, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  };
  Endpoint server(so);
  std::expected<void, std::string> accepted;
  int fd = raw_peer(server, accepted);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(accepted) << accepted.error();
  ddp::Segment s;
  s.hdr =
      ddp::untagged_header(rdmap::Opcode::AtomicRequest, QueueNumber{1}, Msn{1}, MessageOffset{0});
  rdmap::AtomicRequest ar;
  ar.request_id = 9;
  ar.stag = STag{wmr->rkey};
  ar.to = TaggedOffset{reinterpret_cast<std::uint64_t>(&word)};
  ar.add_swap_data = 2;
  s.body = ar;
  ASSERT_TRUE(write_all(fd, fpdu(s, false)));
  ::shutdown(fd, SHUT_WR);
  const auto ops = replies(fd);
  ::close(fd);
  ASSERT_FALSE(ops.empty());
  EXPECT_EQ(ops.front(), 0xB) << "an Atomic Response first";
  EXPECT_EQ(word, 42u);
}
