// A hostile peer, one RFC violation per test. A raw TCP client (tests/raw_peer.hpp, or the
// MPA initiator below) connects to an emulated RNIC and breaks exactly one rule of MPA (RFC 5044,
// RFC 6581), DDP (RFC 5041) or RDMAP (RFC 5040, RFC 7306). Each test checks:
//  (a) what goes back on the wire: the Terminate's Layer / EType / Error Code, typed in by hand
//      from the RFC tables (never computed with the library's term_code()) and decoded by hand
//      from the ULPDU octets, with the terminated DDP / RDMAP headers where the RFC has them
//      echoed; before Full Operation (a bad MPA Request) the connection is closed instead;
//  (b) a clean QP error: ERROR state, every posted receive and send WR completed (flushed
//      unless the violation consumed it), RDMA_CM_EVENT_DISCONNECTED on the server's channel;
//  (c) nothing written outside registered memory (guard octets with a canary around every
//      region), and registered memory unchanged where the violation must place nothing;
//  (d) the attacked process still serves others: a second, well-behaved connection on the same
//      device (an Endpoint sharing it) completes a Send, an RDMA Write and an RDMA Read after the
//      attack.
// docs/hostile-peers.md has the table of cases.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "ddp/segment.hpp"
#include "enlarge/connection.hpp"
#include "enlarge/node.hpp"
#include "enlarge/wire_format.hpp"
#include "mpa/crc32c.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/mpa_frame.hpp"
#include "mpa/negotiation.hpp"
#include "mpa/stream_decoder.hpp"
#include "raw_peer.hpp"
#include "verbs_shim/endpoint.hpp"

using namespace iwarp;
using namespace iwarp::verbs;
using namespace iwarp::testing;
using namespace std::chrono_literals;
using rdmap::Opcode;

namespace {

constexpr std::uint8_t kCanary = 0x5C;    // guard octets around every region
constexpr std::uint8_t kInitial = 0x3C;   // registered memory before the attack
constexpr std::uint8_t kPeerData = 0xAB;  // what the hostile peer sends
constexpr std::uint8_t kNewOwner = 0x11;  // memory handed to a new owner after it was freed

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// ---------------------------------------------------------------------------------------------
// The Terminate codes, typed in from the RFC tables.

struct TermCodeRfc {
  std::uint8_t layer, etype, ecode;
  const char* name;
};
// RFC 5040 §7.4.1, Layer: 0 RDMAP, 1 DDP, 2 LLP (MPA).
// RFC 5044 §8 (LLP, EType 0 "MPA error"):
constexpr TermCodeRfc kMpaCrc{2, 0, 0x02, "LLP: MPA CRC error"};
constexpr TermCodeRfc kMpaMarker{2, 0, 0x03, "LLP: MPA Marker and ULPDU Length field mismatch"};
// RFC 5041 §7.2 (DDP), EType 1 tagged buffer error:
constexpr TermCodeRfc kDdpInvalidStag{1, 1, 0x00, "DDP tagged: invalid STag"};
constexpr TermCodeRfc kDdpBaseBounds{1, 1, 0x01, "DDP tagged: base or bounds violation"};
constexpr TermCodeRfc kDdpStagNotAssociated{1, 1, 0x02,
                                            "DDP tagged: STag not associated with DDP stream"};
constexpr TermCodeRfc kDdpToWrap{1, 1, 0x03, "DDP tagged: TO wrap"};
constexpr TermCodeRfc kDdpTaggedVersion{1, 1, 0x04, "DDP tagged: invalid DDP version"};
// RFC 5041 §7.2 (DDP), EType 2 untagged buffer error:
constexpr TermCodeRfc kDdpInvalidQn{1, 2, 0x01, "DDP untagged: invalid QN"};
constexpr TermCodeRfc kDdpNoBuffer{1, 2, 0x02, "DDP untagged: invalid MSN, no buffer available"};
constexpr TermCodeRfc kDdpMsnRange{1, 2, 0x03, "DDP untagged: invalid MSN, MSN range not valid"};
constexpr TermCodeRfc kDdpTooLong{1, 2, 0x05,
                                  "DDP untagged: DDP message too long for available buffer"};
constexpr TermCodeRfc kDdpUntaggedVersion{1, 2, 0x06, "DDP untagged: invalid DDP version"};
// RFC 5040 §7.4.1 (RDMAP), EType 1 remote protection error:
constexpr TermCodeRfc kRdmapBaseBounds{0, 1, 0x01, "RDMAP protection: base or bounds violation"};
constexpr TermCodeRfc kRdmapAccessRights{0, 1, 0x02, "RDMAP protection: access rights violation"};
// RFC 5040 §7.4.1 (RDMAP), EType 2 remote operation error:
constexpr TermCodeRfc kRdmapVersion{0, 2, 0x05, "RDMAP operation: invalid RDMAP version"};
constexpr TermCodeRfc kRdmapUnexpectedOpcode{0, 2, 0x06, "RDMAP operation: unexpected OpCode"};
constexpr TermCodeRfc kRdmapCatastrophicStream{
    0, 2, 0x07, "RDMAP operation: catastrophic error, localized to RDMAP stream"};
constexpr TermCodeRfc kRdmapCannotInvalidate{0, 2, 0x09,
                                             "RDMAP operation: STag cannot be invalidated"};

// A Terminate as RFC 5040 §4.8 lays it out, decoded here octet by octet.
struct HandTerminate {
  std::uint32_t qn = 0, msn = 0, mo = 0;
  std::uint8_t layer = 0, etype = 0, ecode = 0;
  bool m = false, d = false, r = false;
  std::uint16_t ddp_segment_length = 0;
  Bytes ddp_header, rdmap_header;
};

std::uint32_t be32_at(ByteSpan b, std::size_t at) {
  return (std::uint32_t{b[at]} << 24) | (std::uint32_t{b[at + 1]} << 16) |
         (std::uint32_t{b[at + 2]} << 8) | b[at + 3];
}

bool is_terminate_ulpdu(ByteSpan u) {
  // Untagged (T=0) with RDMAP opcode 0111b.
  return u.size() >= 2 && (u[0] & 0x80) == 0 && (u[1] & 0x0F) == 0x7;
}

::testing::AssertionResult decode_terminate_by_hand(ByteSpan u, HandTerminate& t) {
  // DDP untagged header (RFC 5041 §5.1/§5.3): T=0, L=1, DV=01 -> 0x41; RDMAP control (RFC 5040
  // §4.1): RV=01, opcode Terminate 0111 -> 0x47; RsvdULP(32) QN(32) MSN(32) MO(32).
  if (u.size() < 22)
    return ::testing::AssertionFailure() << "Terminate of " << u.size() << " octets";
  if (u[0] != 0x41 || u[1] != 0x47)
    return ::testing::AssertionFailure() << "Terminate control octets " << int(u[0]) << " "
                                         << int(u[1]) << ", expected 0x41 0x47";
  t.qn = be32_at(u, 6);
  t.msn = be32_at(u, 10);
  t.mo = be32_at(u, 14);
  // Terminate Control (RFC 5040 §4.8): Layer(4) EType(4) | Error Code(8) | M D R Rsvd(13).
  ByteSpan c = u.subspan(18);
  t.layer = c[0] >> 4;
  t.etype = c[0] & 0x0F;
  t.ecode = c[1];
  t.m = c[2] & 0x80;
  t.d = c[2] & 0x40;
  t.r = c[2] & 0x20;
  if ((c[2] & 0x1F) != 0 || c[3] != 0)
    return ::testing::AssertionFailure() << "reserved bits of the Terminate control are set";
  std::size_t at = 4;
  if (t.d) {
    // DDP Segment Length(16), then the terminated DDP header: 14 octets if its T bit is set.
    if (c.size() < at + 3) return ::testing::AssertionFailure() << "D set, header missing";
    t.ddp_segment_length = static_cast<std::uint16_t>((c[at] << 8) | c[at + 1]);
    at += 2;
    const std::size_t n = (c[at] & 0x80) ? 14 : 18;
    if (c.size() < at + n) return ::testing::AssertionFailure() << "D set, header cut short";
    t.ddp_header.assign(c.begin() + static_cast<std::ptrdiff_t>(at),
                        c.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  if (t.r) {
    if (c.size() < at + 28) return ::testing::AssertionFailure() << "R set, header cut short";
    t.rdmap_header.assign(c.begin() + static_cast<std::ptrdiff_t>(at),
                          c.begin() + static_cast<std::ptrdiff_t>(at + 28));
    at += 28;
  }
  if (at != c.size())
    return ::testing::AssertionFailure() << (c.size() - at) << " octets after the headers";
  return ::testing::AssertionSuccess();
}

// The one Terminate among what the RNIC sent, checked against `want`.
std::optional<HandTerminate> expect_terminate(const PeerReplies& r, const TermCodeRfc& want) {
  std::vector<ByteSpan> terms;
  for (const auto& u : r.ulpdus)
    if (is_terminate_ulpdu(u)) terms.emplace_back(u);
  EXPECT_FALSE(r.error) << "the RNIC's own stream is malformed: " << r.error->to_string();
  EXPECT_EQ(terms.size(), 1u) << "expected exactly one Terminate (" << want.name << ")";
  if (terms.empty()) return std::nullopt;
  HandTerminate t;
  auto ok = decode_terminate_by_hand(terms[0], t);
  EXPECT_TRUE(ok);
  if (!ok) return std::nullopt;
  EXPECT_EQ(t.qn, 2u) << "RFC 5040 §5.1: Terminate goes on QN 2";
  EXPECT_EQ(t.msn, 1u) << "RFC 5041 §5.3: the first message on a queue has MSN 1";
  EXPECT_EQ(t.mo, 0u);
  EXPECT_EQ(int(t.layer), int(want.layer)) << want.name;
  EXPECT_EQ(int(t.etype), int(want.etype)) << want.name;
  EXPECT_EQ(int(t.ecode), int(want.ecode)) << want.name;
  return t;
}

// RFC 5040 §4.8: the Terminate for a DDP error carries the DDP header of the segment that
// caused it (D=1) and that segment's length (M=1).
void expect_ddp_header_echo(const std::optional<HandTerminate>& t, ByteSpan ulpdu) {
  ASSERT_TRUE(t);
  const std::size_t n = (ulpdu[0] & 0x80) ? 14 : 18;
  EXPECT_TRUE(t->d) << "the terminated DDP header is missing";
  EXPECT_TRUE(t->m) << "the DDP segment length is not marked valid";
  EXPECT_EQ(t->ddp_segment_length, ulpdu.size());
  EXPECT_EQ(t->ddp_header, Bytes(ulpdu.begin(), ulpdu.begin() + static_cast<std::ptrdiff_t>(n)));
}

// ---------------------------------------------------------------------------------------------
// Memory, segments, FPDUs.

// Memory with canary guard octets on both sides of the part a test registers.
struct Guarded {
  static constexpr std::size_t kGuard = 4096;
  explicit Guarded(std::size_t n, std::uint8_t fill = kInitial) : mem(n + 2 * kGuard, kCanary) {
    std::fill(mem.begin() + kGuard, mem.end() - kGuard, fill);
  }
  std::vector<std::uint8_t> mem;
  std::uint8_t* data() { return mem.data() + kGuard; }
  std::size_t size() const { return mem.size() - 2 * kGuard; }
  std::uint64_t addr() { return reinterpret_cast<std::uint64_t>(data()); }
  bool guards_intact() const {
    return std::all_of(mem.begin(), mem.begin() + kGuard, [](auto b) { return b == kCanary; }) &&
           std::all_of(mem.end() - kGuard, mem.end(), [](auto b) { return b == kCanary; });
  }
  ::testing::AssertionResult all(std::uint8_t v, std::size_t from = 0,
                                 std::size_t n = SIZE_MAX) const {
    n = std::min(n, size() - from);
    for (std::size_t i = from; i < from + n; ++i)
      if (mem[kGuard + i] != v)
        return ::testing::AssertionFailure() << "octet " << i << " of the region is "
                                             << int(mem[kGuard + i]) << ", expected " << int(v);
    return ::testing::AssertionSuccess();
  }
};

Bytes ulpdu_of(const ddp::Segment& s) {
  Bytes u;
  ddp::encode_segment(s, u);
  return u;
}

// One FPDU around `ulpdu`: CRC on, no markers (as RawConnection negotiates).
Bytes fpdu_of(ByteSpan ulpdu) {
  mpa::FpduEncoder enc({true, false});
  Bytes out;
  EXPECT_TRUE(enc.encode(ulpdu, out));
  return out;
}

// Recomputes the CRC of one whole FPDU (RFC 5044 §6: it covers everything before it, markers
// included; sent least significant octet first).
void reseal(Bytes& fpdu) {
  const std::uint32_t crc = mpa::crc32c(ByteSpan(fpdu).first(fpdu.size() - 4));
  for (int i = 0; i < 4; ++i) fpdu[fpdu.size() - 4 + i] = static_cast<std::uint8_t>(crc >> (8 * i));
}

ddp::Segment write_seg(STag stag, std::uint64_t to, ByteSpan payload) {
  ddp::Segment s;
  s.hdr = ddp::tagged_header(Opcode::Write, stag, TaggedOffset{to});
  s.payload = payload;
  return s;
}

ddp::Segment send_seg(std::uint32_t msn, std::uint32_t mo, ByteSpan payload, bool last = true) {
  ddp::Segment s;
  s.hdr = ddp::untagged_header(Opcode::Send, QueueNumber{0}, Msn{msn}, MessageOffset{mo}, last);
  s.payload = payload;
  return s;
}

ddp::Segment read_request_seg(std::uint32_t msn, STag src, std::uint64_t src_to,
                              std::uint32_t size) {
  ddp::Segment s;
  s.hdr = ddp::untagged_header(Opcode::ReadRequest, QueueNumber{1}, Msn{msn}, MessageOffset{0});
  s.body =
      rdmap::ReadRequest{STag{0x00C0FE01}, TaggedOffset{0x7000}, size, src, TaggedOffset{src_to}};
  return s;
}

// A zero-length Write: not checked against any STag (RFC 5041 §7.2); the initiator's first FPDU.
ddp::Segment opener() {
  return write_seg(STag{1}, 0, {});
}

// An STag whose index no region has: the registered ones are consecutive from a random start.
STag unknown_stag(std::uint32_t registered) {
  const STag s{registered};
  return STag::make(s.index() ^ 0x400000, s.key());
}

std::uint64_t addr_of(const void* p) {
  return reinterpret_cast<std::uint64_t>(p);
}

// Returns once every handler queued on the device's engine before the call has run.
bool engine_idle(ibv_context* ctx) {
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  boost::asio::post(ctx->dev->io(), [done] { done->set_value(); });
  return f.wait_for(5s) == std::future_status::ready;
}

// ---------------------------------------------------------------------------------------------
// Raw sockets (connect_loopback, write_all: raw_peer.hpp).

// Reads until the other side closes (or resets) within `limit`: the octets received, and
// whether it closed.
struct Drained {
  Bytes data;
  bool closed = false;
};
Drained drain_socket(int fd, std::chrono::milliseconds limit) {
  Drained d;
  const auto end = std::chrono::steady_clock::now() + limit;
  std::uint8_t buf[4096];
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      d.closed = true;
      break;
    }
    if (n > 0) d.data.insert(d.data.end(), buf, buf + n);
  }
  return d;
}

std::uint16_t local_port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// Octets the kernel holds unread for the loopback TCP socket local_port -> remote_port
// (/proc/net/tcp rx_queue); nullopt when there is no such socket.
std::optional<std::uint64_t> unread_octets(std::uint16_t local_port, std::uint16_t remote_port) {
  std::ifstream f("/proc/net/tcp");
  std::string line;
  std::getline(f, line);  // the column names
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string sl, local, remote, st, queues;
    in >> sl >> local >> remote >> st >> queues;
    auto port = [](const std::string& a) {
      return static_cast<std::uint16_t>(std::stoul(a.substr(a.find(':') + 1), nullptr, 16));
    };
    if (local.find(':') == std::string::npos || remote.find(':') == std::string::npos) continue;
    if (port(local) != local_port || port(remote) != remote_port) continue;
    return std::stoull(queues.substr(queues.find(':') + 1), nullptr, 16);
  }
  return std::nullopt;
}

// Octets this socket sent that the other side has not acknowledged yet.
int unacked_octets(int fd) {
  int n = 0;
  ::ioctl(fd, SIOCOUTQ, &n);
  return n;
}

// An MPA initiator on a raw socket, for peers that need their own MPA Request (private data,
// a broken frame): CRC on, no markers either way.
class MpaInitiator {
 public:
  explicit MpaInitiator(std::uint16_t port) : fd_(connect_loopback(port)) {}
  ~MpaInitiator() {
    if (fd_ >= 0) ::close(fd_);
  }
  MpaInitiator(const MpaInitiator&) = delete;
  MpaInitiator& operator=(const MpaInitiator&) = delete;

  int fd() const { return fd_; }
  bool send_request(ByteSpan private_data) {
    mpa::Policy pol;
    pol.crc = mpa::CrcPolicy::Required;
    return write(mpa::make_request(pol, private_data).encode());
  }
  Result<mpa::MpaFrame> read_reply() {
    std::uint8_t hdr[mpa::kFrameHeaderSize];
    if (!read_n(hdr, sizeof hdr))
      return fail(Errc::MpaTcpLost, "RFC 5044 §7.1", "no MPA Reply header");
    Bytes frame(hdr, hdr + sizeof hdr);
    frame.resize(mpa::kFrameHeaderSize + load_be16(hdr + 18));
    if (!read_n(frame.data() + mpa::kFrameHeaderSize, frame.size() - mpa::kFrameHeaderSize))
      return fail(Errc::MpaTcpLost, "RFC 5044 §7.1", "MPA Reply cut short");
    return mpa::decode_frame(frame, mpa::FrameKind::Reply);
  }
  bool write(ByteSpan b) { return write_all(fd_, b); }
  Bytes fpdu(const ddp::Segment& s) { return fpdu_of(ulpdu_of(s)); }
  // Decodes what arrives within `t` (without blocking past it).
  void pump(std::chrono::milliseconds t) {
    const auto end = std::chrono::steady_clock::now() + t;
    std::uint8_t buf[65536];
    do {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 1) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN)) {
        closed_ = true;
        return;
      }
      if (n > 0) dec_.feed(ByteSpan(buf, static_cast<std::size_t>(n)), replies_);
    } while (std::chrono::steady_clock::now() < end);
  }
  bool closed() const { return closed_; }
  PeerReplies& replies() { return replies_; }

 private:
  bool read_n(std::uint8_t* p, std::size_t n) {
    while (n) {
      pollfd pf{fd_, POLLIN, 0};
      if (::poll(&pf, 1, 5000) <= 0) return false;
      const ssize_t r = ::recv(fd_, p, n, 0);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<std::size_t>(r);
    }
    return true;
  }
  int fd_;
  bool closed_ = false;
  mpa::StreamDecoder dec_{mpa::FramingConfig{true, false}};
  PeerReplies replies_;
};

// ---------------------------------------------------------------------------------------------
// Well-behaved connections.

EndpointOptions calm_options() {
  EndpointOptions o;
  o.timeout = 5s;
  o.cm.mpa_timeout = 5s;
  return o;
}

// One Send, one RDMA Write and one RDMA Read from a well-behaved client to `server_qp` (which
// completes into `server`'s CQs), all verified.
::testing::AssertionResult round_trip(Endpoint& client, Endpoint& server, ibv_qp* server_qp,
                                      std::uint8_t salt) {
  if (!server_qp || !client.qp()) return ::testing::AssertionFailure() << "not connected";
  std::vector<std::uint8_t> msg(100), rbuf(256, 0), region(4096, 0), src(4096), sink(4096, 0);
  for (std::size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<std::uint8_t>(salt + i);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(salt * 3 + i);
  ibv_mr* rmr = ibv_reg_mr(server.pd(), rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* gmr =
      ibv_reg_mr(server.pd(), region.data(), region.size(),
                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  ibv_mr* mmr = ibv_reg_mr(client.pd(), msg.data(), msg.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* smr = ibv_reg_mr(client.pd(), src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* kmr = ibv_reg_mr(client.pd(), sink.data(), sink.size(),
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  struct Dereg {
    std::vector<ibv_mr*> mrs;
    ~Dereg() {
      for (auto* m : mrs)
        if (m) ibv_dereg_mr(m);
    }
  } dereg{{rmr, gmr, mmr, smr, kmr}};
  if (!rmr || !gmr || !mmr || !smr || !kmr) return ::testing::AssertionFailure() << "ibv_reg_mr";
  auto step = [&](const char* what, Endpoint& e, ibv_cq* cq,
                  std::uint64_t id) -> ::testing::AssertionResult {
    auto wc = e.wait(cq);
    if (!wc) return ::testing::AssertionFailure() << what << ": " << wc.error();
    if (wc->status != IBV_WC_SUCCESS || wc->wr_id != id)
      return ::testing::AssertionFailure()
             << what << ": WR " << wc->wr_id << " " << ibv_wc_status_str(wc->status);
    return ::testing::AssertionSuccess();
  };
  if (post_one_recv(server_qp, rbuf.data(), 256, rmr->lkey, 7000) != 0)
    return ::testing::AssertionFailure() << "post_recv: " << ibv_last_error();
  if (post_one(
          client.qp(),
          {.op = IBV_WR_SEND, .addr = msg.data(), .len = 100, .lkey = mmr->lkey, .wr_id = 1}) != 0)
    return ::testing::AssertionFailure() << "post Send: " << ibv_last_error();
  if (auto r = step("Send", client, client.send_cq(), 1); !r) return r;
  if (auto r = step("receive", server, server.recv_cq(), 7000); !r) return r;
  if (!std::equal(msg.begin(), msg.end(), rbuf.begin()))
    return ::testing::AssertionFailure() << "the Send arrived changed";
  if (post_one(client.qp(), {.op = IBV_WR_RDMA_WRITE,
                             .addr = src.data(),
                             .len = 4096,
                             .lkey = smr->lkey,
                             .remote_addr = addr_of(region.data()),
                             .rkey = gmr->rkey,
                             .wr_id = 2}) != 0 ||
      post_one(client.qp(), {.op = IBV_WR_RDMA_READ,
                             .addr = sink.data(),
                             .len = 4096,
                             .lkey = kmr->lkey,
                             .remote_addr = addr_of(region.data()),
                             .rkey = gmr->rkey,
                             .wr_id = 3}) != 0)
    return ::testing::AssertionFailure() << "post Write/Read: " << ibv_last_error();
  if (auto r = step("Write", client, client.send_cq(), 2); !r) return r;
  if (auto r = step("Read", client, client.send_cq(), 3); !r) return r;
  if (region != src || sink != src)
    return ::testing::AssertionFailure() << "the Write or the Read moved the wrong octets";
  return ::testing::AssertionSuccess();
}

// A second connection on the attacked device: an Endpoint sharing it, with its own client.
struct Bystander {
  explicit Bystander(ibv_context* shared) : server(calm_options(), shared), client(calm_options()) {
    auto port = server.listen("127.0.0.1", 0);
    if (!port) return;
    std::expected<void, std::string> acc;
    std::thread t([&] { acc = server.accept_one(); });
    auto con = client.connect("127.0.0.1", *port);
    t.join();
    ok = acc && con;
  }
  ::testing::AssertionResult serves(std::uint8_t salt) {
    if (!ok) return ::testing::AssertionFailure() << "the bystander never connected";
    return round_trip(client, server, server.qp(), salt);
  }
  Endpoint server;
  Endpoint client;
  bool ok = false;
};

// An id accepted on an Endpoint's listener by hand (so that failed connections before it can
// be skipped): torn down before the Endpoint.
struct Accepted {
  rdma_cm_id* id = nullptr;
  ~Accepted() {
    if (!id) return;
    rdma_disconnect(id);
    rdma_destroy_qp(id);
    rdma_destroy_id(id);
  }
};

// Accepts the next connect request on `server`'s listener, skipping the CONNECT_ERRORs of
// connections that failed before it; `seen` gets every event type.
std::expected<std::unique_ptr<Accepted>, std::string> accept_next(
    Endpoint& server, std::chrono::milliseconds limit, std::vector<int>* seen = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto a = std::make_unique<Accepted>();
  while (std::chrono::steady_clock::now() < deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto ev = server.next_event(std::max(left, 1ms));
    if (!ev) continue;
    if (seen) seen->push_back(ev->event);
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && !a->id) {
      a->id = ev->id;
      ibv_qp_init_attr attr;
      attr.send_cq = server.send_cq();
      attr.recv_cq = server.recv_cq();
      if (rdma_create_qp(a->id, server.pd(), &attr) != 0)
        return std::unexpected("rdma_create_qp: " + ibv_last_error());
      rdma_conn_param p;
      if (rdma_accept(a->id, &p) != 0) return std::unexpected("rdma_accept: " + ibv_last_error());
    } else if (ev->event == RDMA_CM_EVENT_ESTABLISHED && a->id && ev->id == a->id) {
      return a;
    }
  }
  return std::unexpected(std::string(a->id ? "no ESTABLISHED" : "no CONNECT_REQUEST") +
                         " within the time allowed");
}

// ---------------------------------------------------------------------------------------------
// The fixture: a server Endpoint with a raw peer connected (RawConnection), witness work
// requests, and a bystander connection on the same device.

struct AttackSetup {
  int recvs = 2;                // receive WRs posted before the connection (ids 100, 101, ...)
  std::uint32_t recv_len = 64;  // octets each
  bool witness_read = true;     // an RDMA Read (id 200) to the peer, which never answers it
  int peer_rcvbuf = 0;
  std::function<void(EndpointOptions&)> tweak;
};

class HostilePeer : public ::testing::Test {
 protected:
  void SetUp() override { log::configure("rnic=error,cm=error"); }
  void TearDown() override {
    for (auto& f : cleanup_) f();
    bystander_.reset();
    rc_.reset();
  }

  Guarded& guarded(std::size_t n, std::uint8_t fill = kInitial) {
    return mem_.emplace_back(n, fill);
  }

  void connect(AttackSetup s = {}) {
    setup_ = s;
    EndpointOptions so = calm_options();
    so.cm.close_timeout = 2s;
    if (s.tweak) s.tweak(so);
    if (s.recvs > 0) {
      recv_area_ = &guarded(static_cast<std::size_t>(s.recvs) * s.recv_len);
      so.on_qp_created = [this, s](Endpoint& ep) {
        auto* mr = ep.reg(recv_area_->data(), recv_area_->size(), IBV_ACCESS_LOCAL_WRITE);
        for (int i = 0; i < s.recvs; ++i) {
          const std::uint64_t id = 100 + static_cast<std::uint64_t>(i);
          post_one_recv(ep.qp(), recv_area_->data() + static_cast<std::size_t>(i) * s.recv_len,
                        s.recv_len, mr->lkey, id);
          recv_ids_.push_back(id);
        }
      };
    }
    rc_ = std::make_unique<RawConnection>(so, s.peer_rcvbuf);
    ASSERT_TRUE(rc_->ok()) << (rc_->accepted ? "the raw peer failed" : rc_->accepted.error());
    if (s.witness_read) {
      read_sink_ = &guarded(64);
      auto* mr =
          server().reg(read_sink_->data(), 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      ASSERT_EQ(post_one(server().qp(), {.op = IBV_WR_RDMA_READ,
                                         .addr = read_sink_->data(),
                                         .len = 64,
                                         .lkey = mr->lkey,
                                         .remote_addr = 0x1000,
                                         .rkey = 0x00BEEF01,
                                         .wr_id = 200}),
                0)
          << ibv_last_error();
    }
    bystander_ = std::make_unique<Bystander>(server().ctx());
    ASSERT_TRUE(bystander_->ok);
  }

  Endpoint& server() { return rc_->server; }
  RawPeer& peer() { return *rc_->peer; }
  rnic::QueuePair& engine_qp() { return *server().qp()->qp; }

  // A region registered on the attacked server.
  std::pair<Guarded*, ibv_mr*> region(std::size_t n, int access) {
    auto& g = guarded(n);
    return {&g, server().reg(g.data(), g.size(), access)};
  }

  // Sends `wire` and reads what the RNIC answers until it closes the connection.
  PeerReplies& attack(ByteSpan wire) {
    EXPECT_TRUE(peer().write(wire));
    auto& r = peer().read_until_closed(10s);
    EXPECT_TRUE(peer().closed()) << "the RNIC did not close the connection after its Terminate";
    return r;
  }

  // (b): DISCONNECTED, ERROR, every WR completed; `consumed` names receive WRs the violation
  // took, with their status (-1: any error).
  void expect_clean_error(std::map<std::uint64_t, int> consumed = {}) {
    auto ev = server().wait_event(RDMA_CM_EVENT_DISCONNECTED, 5s);
    ASSERT_TRUE(ev) << ev.error();
    EXPECT_EQ(ibv_query_qp_state(server().qp()), IBV_QPS_ERR);
    std::vector<ibv_wc> wcs;
    eventually(
        [&] {
          ibv_wc wc;
          while (ibv_poll_cq(server().recv_cq(), 1, &wc) == 1) wcs.push_back(wc);
          return wcs.size() >= recv_ids_.size();
        },
        2s);
    ASSERT_EQ(wcs.size(), recv_ids_.size()) << "receive WRs not completed";
    for (std::size_t i = 0; i < wcs.size(); ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ(wcs[i].wr_id, recv_ids_[i]);
      EXPECT_EQ(wcs[i].opcode, IBV_WC_RECV);
      auto it = consumed.find(wcs[i].wr_id);
      if (it == consumed.end())
        EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(wcs[i].status);
      else if (it->second < 0)
        EXPECT_NE(wcs[i].status, IBV_WC_SUCCESS);
      else
        EXPECT_EQ(wcs[i].status, it->second) << ibv_wc_status_str(wcs[i].status);
    }
    if (setup_.witness_read) {
      auto wc = wait_wc(server().send_cq(), 5s);
      ASSERT_TRUE(wc) << "the outstanding RDMA Read was not completed";
      EXPECT_EQ(wc->wr_id, 200u);
      EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR) << ibv_wc_status_str(wc->status);
    }
    // A receive posted now is flushed at once.
    auto& late = guarded(16);
    auto* mr = server().reg(late.data(), 16, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_EQ(post_one_recv(server().qp(), late.data(), 16, mr->lkey, 300), 0);
    auto wc = wait_wc(server().recv_cq(), 5s);
    ASSERT_TRUE(wc);
    EXPECT_EQ(wc->wr_id, 300u);
    EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR);
  }

  // (c) and (d): no guard octet changed anywhere; the bystander still works.
  void expect_contained_and_others_served() {
    for (std::size_t i = 0; i < mem_.size(); ++i)
      EXPECT_TRUE(mem_[i].guards_intact()) << "memory outside region " << i << " was written";
    EXPECT_TRUE(bystander_->serves(0x21));
  }

  // Unposted receive areas must keep their initial octets.
  Guarded& recv_area() { return *recv_area_; }

  std::deque<Guarded> mem_;  // outlives the endpoints below
  std::vector<std::function<void()>> cleanup_;
  AttackSetup setup_;
  Guarded* recv_area_ = nullptr;
  Guarded* read_sink_ = nullptr;
  std::vector<std::uint64_t> recv_ids_;
  std::unique_ptr<RawConnection> rc_;
  std::unique_ptr<Bystander> bystander_;
};

// ---------------------------------------------------------------------------------------------
// MPA before Full Operation: a bad MPA Request. RFC 5044 §7.1: the responder checks Key, Rev and
// PD_Length and on a bad one closes the connection and reports the error locally (no Reply,
// no Terminate: the framing is not agreed yet).

class HostilePeerMpa : public HostilePeer {
 protected:
  // Sends `request` to a listening server, checks the connection is closed at once without a
  // Reply, that the listener reports CONNECT_ERROR naming `why`, and that the same listener
  // then serves a real client while a bystander on the same device keeps working.
  void bad_request(const Bytes& request, const std::string& why) {
    EndpointOptions so = calm_options();
    Endpoint listener(so);
    auto port = listener.listen("127.0.0.1", 0);
    ASSERT_TRUE(port) << port.error();
    Bystander by(listener.ctx());
    ASSERT_TRUE(by.ok);

    const int fd = connect_loopback(*port);
    ASSERT_GE(fd, 0);
    const auto t0 = std::chrono::steady_clock::now();
    write_all(fd, request);  // the server may close before all of it is sent
    const Drained d = drain_socket(fd, 3s);
    const auto took = std::chrono::steady_clock::now() - t0;
    ::close(fd);
    EXPECT_TRUE(d.closed) << "the connection was not closed";
    EXPECT_LT(took, 2s) << "closed only after the MPA timeout, not at once";
    EXPECT_TRUE(d.data.empty()) << "the server answered a bad Request with " << d.data.size()
                                << " octets (a Reply needs a valid Request)";

    auto ev = listener.next_event(2s);
    ASSERT_TRUE(ev) << "no CM event for the failed exchange";
    EXPECT_EQ(ev->event, RDMA_CM_EVENT_CONNECT_ERROR) << rdma_event_str(ev->event);
    EXPECT_NE(ev->detail.find(why), std::string::npos) << ev->detail;

    // The listener still serves a real client.
    Endpoint client(calm_options());
    std::expected<void, std::string> con;
    std::thread t([&] { con = client.connect("127.0.0.1", *port); });
    auto acc = accept_next(listener, 5s);
    t.join();
    ASSERT_TRUE(acc) << acc.error();
    ASSERT_TRUE(con) << con.error();
    EXPECT_TRUE(round_trip(client, listener, (*acc)->id->qp, 0x31));
    EXPECT_TRUE(by.serves(0x41));
    acc->reset();
  }

  static Bytes good_request() {
    mpa::Policy pol;
    pol.crc = mpa::CrcPolicy::Required;
    return mpa::make_request(pol).encode();
  }
};

}  // namespace

// RFC 5044 §7.1: Key must be "MPA ID Req Frame".
TEST_F(HostilePeerMpa, RequestWithABadKeyIsClosedWithoutAReply) {
  Bytes req = good_request();
  req[0] = 'X';  // "XPA ID Req Frame"
  bad_request(req, "MPA key");
}

// RFC 5044 §7.1 / RFC 6581 §4: this responder speaks Rev 1 and 2; a Request for Rev 3 cannot
// interoperate.
TEST_F(HostilePeerMpa, RequestWithAnUnsupportedRevisionIsClosedWithoutAReply) {
  Bytes req = good_request();
  req[17] = 3;
  bad_request(req, "Rev 3");
}

// RFC 5044 §7.1: PD_Length must not exceed 512.
TEST_F(HostilePeerMpa, RequestWithMoreThan512OctetsOfPrivateDataIsClosedWithoutAReply) {
  Bytes req = good_request();
  req.resize(mpa::kFrameHeaderSize);
  req[18] = 513 >> 8;
  req[19] = 513 & 0xFF;
  req.resize(mpa::kFrameHeaderSize + 513, 0x55);
  bad_request(req, "PD_Length 513");
}

// ---------------------------------------------------------------------------------------------
// MPA in Full Operation.

// RFC 5044 §6: the CRC covers the FPDU; a mismatch is LLP error 0x02. The Send's receive WR must
// not complete successfully.
TEST_F(HostilePeer, BadCrc) {
  ASSERT_NO_FATAL_FAILURE(connect());
  Bytes payload(32, kPeerData);
  Bytes wire = peer().fpdu(send_seg(1, 0, payload));
  wire.back() ^= 0x01;
  auto& r = attack(wire);
  expect_terminate(r, kMpaCrc);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(recv_area().all(kInitial, 64)) << "the second receive buffer was written";
  expect_contained_and_others_served();
}

// RFC 5044 §5: with markers negotiated (the responder set M), every marker's FPDUPTR points back
// to its FPDU's first octet; a wrong one is LLP error 0x03. Only the marker is wrong (the CRC,
// which covers markers, is recomputed).
TEST_F(HostilePeer, WrongMarker) {
  ASSERT_NO_FATAL_FAILURE(connect({.recvs = 2, .recv_len = 1024, .tweak = [](EndpointOptions& o) {
                                     o.cm.policy.markers = mpa::MarkerPolicy::Required;
                                   }}));
  ASSERT_TRUE(server().params() && server().params()->markers_to_responder);
  Bytes payload(700, kPeerData);
  mpa::FpduEncoder enc({true, true}, 0);
  Bytes wire;
  ASSERT_TRUE(enc.encode(ulpdu_of(send_seg(1, 0, payload)), wire));
  // Markers sit at stream octets 0 and 512 (RFC 5044 §5); the one at 512 points back to the
  // FPDU's start. It is made to point 256 octets back instead: into the middle of the ULPDU.
  ASSERT_GT(wire.size(), 520u);
  ASSERT_EQ(load_be16(&wire[512]), 0);
  ASSERT_EQ(load_be16(&wire[514]), 512);
  wire[514] = 0x01;
  wire[515] = 0x00;  // FPDUPTR 256
  reseal(wire);
  auto& r = attack(wire);
  expect_terminate(r, kMpaMarker);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(recv_area().all(kInitial, 1024)) << "the second receive buffer was written";
  expect_contained_and_others_served();
}

// RFC 5044 §5: an FPDU whose ULPDU_Length claims more than it carries runs past the next
// marker, whose FPDUPTR then does not match: LLP error 0x03.
TEST_F(HostilePeer, UlpduLengthPastTheFpduWithMarkers) {
  ASSERT_NO_FATAL_FAILURE(connect({.recvs = 3, .recv_len = 1024, .tweak = [](EndpointOptions& o) {
                                     o.cm.policy.markers = mpa::MarkerPolicy::Required;
                                   }}));
  ASSERT_TRUE(server().params() && server().params()->markers_to_responder);
  Bytes payload(100, kPeerData), more(300, kPeerData);
  mpa::FpduEncoder enc({true, true}, 0);
  Bytes f1, rest;
  ASSERT_TRUE(enc.encode(ulpdu_of(send_seg(1, 0, payload)), f1));
  ASSERT_TRUE(enc.encode(ulpdu_of(send_seg(2, 0, more)), rest));
  ASSERT_TRUE(enc.encode(ulpdu_of(send_seg(3, 0, more)), rest));
  // f1: marker(4) | ULPDU_Length | ...; say 900 octets instead of 118.
  ASSERT_EQ(load_be16(&f1[4]), 118);
  f1[4] = 900 >> 8;
  f1[5] = 900 & 0xFF;
  reseal(f1);
  f1.insert(f1.end(), rest.begin(), rest.end());
  auto& r = attack(f1);
  expect_terminate(r, kMpaMarker);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(recv_area().all(kInitial, 1024)) << "a later receive buffer was written";
  expect_contained_and_others_served();
}

// Without markers an inflated ULPDU_Length swallows the next FPDU; the CRC found where that
// length puts it does not match: LLP error 0x02 (RFC 5044 §6).
TEST_F(HostilePeer, UlpduLengthPastTheFpduWithoutMarkers) {
  ASSERT_NO_FATAL_FAILURE(connect({.recvs = 3, .recv_len = 1024, .tweak = nullptr}));
  Bytes payload(100, kPeerData), more(300, kPeerData);
  Bytes f1 = peer().fpdu(send_seg(1, 0, payload));
  ASSERT_EQ(load_be16(&f1[0]), 118);
  f1[0] = 300 >> 8;
  f1[1] = 300 & 0xFF;
  reseal(f1);
  for (std::uint32_t msn : {2u, 3u}) {
    Bytes f = peer().fpdu(send_seg(msn, 0, more));
    f1.insert(f1.end(), f.begin(), f.end());
  }
  auto& r = attack(f1);
  expect_terminate(r, kMpaCrc);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(recv_area().all(kInitial, 1024)) << "a later receive buffer was written";
  expect_contained_and_others_served();
}

// ---------------------------------------------------------------------------------------------
// DDP and RDMAP headers.

// RFC 5041 §5.1 / §7.2: DV must be 01b; untagged: EType 2 code 0x06.
TEST_F(HostilePeer, DdpVersionUntagged) {
  ASSERT_NO_FATAL_FAILURE(connect());
  Bytes payload(32, kPeerData);
  Bytes u = ulpdu_of(send_seg(1, 0, payload));
  u[0] = static_cast<std::uint8_t>((u[0] & 0xFC) | 0x02);  // DV 2
  auto& r = attack(fpdu_of(u));
  expect_terminate(r, kDdpUntaggedVersion);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(recv_area().all(kInitial)) << "a receive buffer was written";
  expect_contained_and_others_served();
}

// RFC 5041 §5.1 / §7.2: DV must be 01b; tagged: EType 1 code 0x04. Nothing is placed.
TEST_F(HostilePeer, DdpVersionTagged) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto [g, mr] = region(4096, kAllAccess);
  Bytes payload(64, kPeerData);
  Bytes u = ulpdu_of(write_seg(STag{mr->rkey}, g->addr(), payload));
  u[0] = static_cast<std::uint8_t>((u[0] & 0xFC) | 0x00);  // DV 0
  auto& r = attack(fpdu_of(u));
  expect_terminate(r, kDdpTaggedVersion);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// RFC 5040 §4.1 / §7.4.1: RV must be 01b: Remote Operation Error 0x05. Nothing is placed.
TEST_F(HostilePeer, RdmapVersion) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto [g, mr] = region(4096, kAllAccess);
  Bytes payload(64, kPeerData);
  Bytes u = ulpdu_of(write_seg(STag{mr->rkey}, g->addr(), payload));
  u[1] = static_cast<std::uint8_t>((u[1] & 0x3F) | 0x80);  // RV 2
  auto& r = attack(fpdu_of(u));
  expect_terminate(r, kRdmapVersion);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// RFC 5040 §5.1 / RFC 5041 §7.2: RDMAP's Send messages travel on QN 0; QN 5 is no queue:
// untagged error 0x01, with the segment's DDP header echoed.
TEST_F(HostilePeer, InvalidQueueNumber) {
  ASSERT_NO_FATAL_FAILURE(connect());
  Bytes payload(32, kPeerData);
  auto s = send_seg(1, 0, payload);
  s.hdr.qn = QueueNumber{5};
  Bytes u = ulpdu_of(s);
  auto& r = attack(fpdu_of(u));
  expect_ddp_header_echo(expect_terminate(r, kDdpInvalidQn), u);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(recv_area().all(kInitial));
  expect_contained_and_others_served();
}

// RFC 5041 §5.3 / §7.2: the first Send carries MSN 1; MSN 5 with two receives posted is outside
// the valid range: untagged error 0x03.
TEST_F(HostilePeer, MsnOutOfRange) {
  ASSERT_NO_FATAL_FAILURE(connect());
  Bytes payload(32, kPeerData);
  Bytes u = ulpdu_of(send_seg(5, 0, payload));
  auto& r = attack(fpdu_of(u));
  expect_ddp_header_echo(expect_terminate(r, kDdpMsnRange), u);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(recv_area().all(kInitial));
  expect_contained_and_others_served();
}

// RFC 5041 §7.2: a message longer than its receive buffer: untagged error 0x05. The second
// segment (MO 40, 40 octets) would end at 80 of a 64-octet buffer; none of it lands (the next
// receive buffer, right behind, is untouched), the consumed WR fails with a length error.
TEST_F(HostilePeer, MessageOffsetPastTheReceiveBuffer) {
  ASSERT_NO_FATAL_FAILURE(connect());
  Bytes payload(40, kPeerData);
  Bytes first = peer().fpdu(send_seg(1, 0, payload, false));
  Bytes u = ulpdu_of(send_seg(1, 40, payload, true));
  Bytes wire = first;
  Bytes second = fpdu_of(u);
  wire.insert(wire.end(), second.begin(), second.end());
  auto& r = attack(wire);
  expect_ddp_header_echo(expect_terminate(r, kDdpTooLong), u);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error({{100, IBV_WC_LOC_LEN_ERR}}));
  EXPECT_TRUE(recv_area().all(kPeerData, 0, 40));
  EXPECT_TRUE(recv_area().all(kInitial, 40)) << "the second segment was placed";
  expect_contained_and_others_served();
}

// RFC 5041 §7.2: a Send with no receive WR posted: untagged error 0x02.
TEST_F(HostilePeer, SendWithNoReceivePosted) {
  ASSERT_NO_FATAL_FAILURE(connect({.recvs = 0, .tweak = nullptr}));
  Bytes payload(32, kPeerData);
  Bytes u = ulpdu_of(send_seg(1, 0, payload));
  auto& r = attack(fpdu_of(u));
  expect_ddp_header_echo(expect_terminate(r, kDdpNoBuffer), u);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  expect_contained_and_others_served();
}

// ---------------------------------------------------------------------------------------------
// Tagged placement: STags, bounds, rights (RFC 5041 §7.2; RFC 5040 §7.4.1).

// An STag never registered: tagged error 0x00. Nothing anywhere is written.
TEST_F(HostilePeer, UnknownStag) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto [g, mr] = region(4096, kAllAccess);
  Bytes payload(64, kPeerData);
  Bytes u = ulpdu_of(write_seg(unknown_stag(mr->rkey), g->addr(), payload));
  auto& r = attack(fpdu_of(u));
  expect_ddp_header_echo(expect_terminate(r, kDdpInvalidStag), u);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// The right index with the wrong key (RFC 5040 §2.1: the key makes an old STag invalid):
// tagged error 0x00.
TEST_F(HostilePeer, StaleStagKey) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto [g, mr] = region(4096, kAllAccess);
  const STag good{mr->rkey};
  const STag stale = STag::make(good.index(), static_cast<std::uint8_t>(good.key() ^ 0x01));
  Bytes payload(64, kPeerData);
  Bytes u = ulpdu_of(write_seg(stale, g->addr(), payload));
  auto& r = attack(fpdu_of(u));
  expect_ddp_header_echo(expect_terminate(r, kDdpInvalidStag), u);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// An STag of another protection domain of the same device: tagged error 0x02 (STag not
// associated with this DDP stream).
TEST_F(HostilePeer, StagOfAnotherProtectionDomain) {
  ASSERT_NO_FATAL_FAILURE(connect());
  ibv_pd* other = ibv_alloc_pd(server().ctx());
  auto& g = guarded(4096);
  ibv_mr* mr = ibv_reg_mr(other, g.data(), g.size(), kAllAccess);
  ASSERT_NE(mr, nullptr);
  cleanup_.push_back([mr, other] {
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(other);
  });
  Bytes payload(64, kPeerData);
  Bytes u = ulpdu_of(write_seg(STag{mr->rkey}, g.addr(), payload));
  auto& r = attack(fpdu_of(u));
  expect_ddp_header_echo(expect_terminate(r, kDdpStagNotAssociated), u);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(g.all(kInitial));
  expect_contained_and_others_served();
}

// TO + length past the region's end: tagged error 0x01; not even the part inside is written.
TEST_F(HostilePeer, WritePastTheRegion) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto [g, mr] = region(4096, kAllAccess);
  Bytes payload(64, kPeerData);
  Bytes u = ulpdu_of(write_seg(STag{mr->rkey}, g->addr() + 4096 - 16, payload));
  auto& r = attack(fpdu_of(u));
  expect_ddp_header_echo(expect_terminate(r, kDdpBaseBounds), u);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// TO near 2^64 so that TO + length wraps: tagged error 0x03.
TEST_F(HostilePeer, TaggedOffsetWraps) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto [g, mr] = region(4096, kAllAccess);
  Bytes payload(64, kPeerData);
  Bytes u = ulpdu_of(write_seg(STag{mr->rkey}, 0xFFFFFFFFFFFFFFF0ull, payload));
  auto& r = attack(fpdu_of(u));
  expect_ddp_header_echo(expect_terminate(r, kDdpToWrap), u);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// A Write into a region registered without REMOTE_WRITE. RFC 5041 §7.2 has no access-rights
// code for tagged placement: the STag is not a valid STag for a Write (tagged error 0x00, as siw
// reports it).
TEST_F(HostilePeer, WriteWithoutRemoteWriteAccess) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto [g, mr] = region(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  Bytes payload(64, kPeerData);
  Bytes u = ulpdu_of(write_seg(STag{mr->rkey}, g->addr(), payload));
  auto& r = attack(fpdu_of(u));
  expect_ddp_header_echo(expect_terminate(r, kDdpInvalidStag), u);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// A Read Request whose source lacks REMOTE_READ: RDMAP Remote Protection Error 0x02, with the
// DDP header and (RFC 5040 §4.8: the error is on a Read Request) the 28-octet RDMAP header
// echoed. No Read Response leaves.
TEST_F(HostilePeer, ReadWithoutRemoteReadAccess) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto [g, mr] = region(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  Bytes u = ulpdu_of(read_request_seg(1, STag{mr->rkey}, g->addr(), 64));
  auto& r = attack(fpdu_of(u));
  auto t = expect_terminate(r, kRdmapAccessRights);
  expect_ddp_header_echo(t, u);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->r) << "the terminated RDMAP header is missing";
  EXPECT_EQ(t->rdmap_header, Bytes(u.begin() + 18, u.begin() + 46));
  for (const auto& s : r.segments)
    EXPECT_NE(s.hdr.opcode, static_cast<std::uint8_t>(Opcode::ReadResponse));
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// Two Read Requests with IRD 1 (RFC 5040 §6.1 / RFC 6581 §6: never more outstanding than the
// responder's IRD). No code names this; RDMAP Remote Operation Error 0x07 (catastrophic error,
// localized to the RDMAP stream), as siw sends. The engine is held while both arrive, so that
// the second is checked while the first is still queued.
TEST_F(HostilePeer, ReadRequestsBeyondTheIrd) {
  ASSERT_NO_FATAL_FAILURE(connect({.tweak = [](EndpointOptions& o) { o.ird = 1; }}));
  ASSERT_TRUE(server().params());
  EXPECT_EQ(server().params()->responder_ird, 1);
  auto [g, mr] = region(65536, kAllAccess);
  Bytes u1 = ulpdu_of(read_request_seg(1, STag{mr->rkey}, g->addr(), 65536));
  Bytes u2 = ulpdu_of(read_request_seg(2, STag{mr->rkey}, g->addr(), 65536));
  Bytes wire = fpdu_of(u1);
  Bytes f2 = fpdu_of(u2);
  wire.insert(wire.end(), f2.begin(), f2.end());
  {
    EngineBlocker hold(server().ctx(), 5s);
    ASSERT_TRUE(hold.ok());
    ASSERT_TRUE(peer().write(wire));
  }
  auto& r = peer().read_until_closed(10s);
  EXPECT_TRUE(peer().closed());
  auto t = expect_terminate(r, kRdmapCatastrophicStream);
  if (t && t->d) {
    EXPECT_EQ(t->ddp_header, Bytes(u2.begin(), u2.begin() + 18));
  }
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// A Read Response with no Read outstanding (RFC 5040 §4.5: a Read Response answers an RDMA Read
// Request): RDMAP Remote Operation Error 0x06, unexpected OpCode. Nothing is placed, although
// the STag is valid for remote writes.
TEST_F(HostilePeer, ReadResponseWithNoReadOutstanding) {
  ASSERT_NO_FATAL_FAILURE(connect({.witness_read = false, .tweak = nullptr}));
  auto [g, mr] = region(4096, kAllAccess);
  Bytes payload(64, kPeerData);
  ddp::Segment s;
  s.hdr = ddp::tagged_header(Opcode::ReadResponse, STag{mr->rkey}, TaggedOffset{g->addr()});
  s.payload = payload;
  auto& r = attack(fpdu_of(ulpdu_of(s)));
  expect_terminate(r, kRdmapUnexpectedOpcode);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// An opcode no RFC defines (0xC; RFC 7306 ends at 0xB): unexpected OpCode, 0x06.
TEST_F(HostilePeer, ReservedOpcode) {
  ASSERT_NO_FATAL_FAILURE(connect());
  Bytes payload(32, kPeerData);
  Bytes u = ulpdu_of(send_seg(1, 0, payload));
  u[1] = static_cast<std::uint8_t>((u[1] & 0xF0) | 0x0C);
  auto& r = attack(fpdu_of(u));
  expect_terminate(r, kRdmapUnexpectedOpcode);
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(recv_area().all(kInitial));
  expect_contained_and_others_served();
}

// Send with Invalidate naming an STag that does not exist (RFC 5040 §5.4): Remote Operation Error
// 0x09, STag cannot be invalidated. The receive WR it consumed does not succeed.
TEST_F(HostilePeer, SendWithInvalidateOfAnStagThatCannotBeInvalidated) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto [g, mr] = region(4096, kAllAccess);
  Bytes payload(32, kPeerData);
  ddp::Segment s;
  s.hdr = ddp::untagged_header(Opcode::SendInvalidate, QueueNumber{0}, Msn{1}, MessageOffset{0},
                               true, unknown_stag(mr->rkey).value());
  s.payload = payload;
  Bytes u = ulpdu_of(s);
  auto& r = attack(fpdu_of(u));
  auto t = expect_terminate(r, kRdmapCannotInvalidate);
  if (t && t->d) {
    EXPECT_EQ(t->ddp_header, Bytes(u.begin(), u.begin() + 18));
  }
  ASSERT_NO_FATAL_FAILURE(expect_clean_error({{100, -1}}));
  EXPECT_TRUE(recv_area().all(kInitial, 64)) << "the second receive buffer was written";
  // The region whose STag index is next to the named one is still valid and unchanged.
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// An atomic whose target is not 8-octet aligned (RFC 7306 §4.2.1: the Remote TO is aligned).
// RFC 7306 adds no code; the 8 octets are not a valid target: Remote Protection Error 0x01,
// base or bounds violation. The target is unchanged.
TEST_F(HostilePeer, MisalignedAtomic) {
  ASSERT_NO_FATAL_FAILURE(connect());
  auto [g, mr] = region(4096, kAllAccess);
  ddp::Segment s;
  s.hdr = ddp::untagged_header(Opcode::AtomicRequest, QueueNumber{1}, Msn{1}, MessageOffset{0});
  rdmap::AtomicRequest a;
  a.op = static_cast<std::uint8_t>(rdmap::AtomicOp::FetchAdd);
  a.request_id = 1;
  a.stag = STag{mr->rkey};
  a.to = TaggedOffset{g->addr() + 4};
  a.add_swap_data = 1;
  s.body = a;
  Bytes u = ulpdu_of(s);
  auto& r = attack(fpdu_of(u));
  auto t = expect_terminate(r, kRdmapBaseBounds);
  if (t && t->d) {
    EXPECT_EQ(t->ddp_header, Bytes(u.begin(), u.begin() + 18));
  }
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// ---------------------------------------------------------------------------------------------
// The end of the stream.

// The peer's own Terminate (RFC 5040 §5.4 / §6.2): the QP goes to ERROR and flushes; it does
// not answer with a Terminate of its own; the stream is closed.
TEST_F(HostilePeer, PeersTerminate) {
  ASSERT_NO_FATAL_FAILURE(connect());
  ddp::Segment s;
  s.hdr = ddp::untagged_header(Opcode::Terminate, QueueNumber{2}, Msn{1}, MessageOffset{0});
  rdmap::Terminate t;
  t.layer = 0;
  t.etype = 2;
  t.ecode = 0x07;
  s.body = t;
  auto& r = attack(fpdu_of(ulpdu_of(s)));
  for (const auto& u : r.ulpdus) EXPECT_FALSE(is_terminate_ulpdu(u)) << "a Terminate came back";
  ASSERT_NO_FATAL_FAILURE(expect_clean_error());
  EXPECT_NE(engine_qp().error_reason().find("peer sent Terminate"), std::string::npos)
      << engine_qp().error_reason();
  EXPECT_TRUE(recv_area().all(kInitial));
  expect_contained_and_others_served();
}

// A peer that stops reading (a zero window) and then breaks a rule: the Terminate cannot leave,
// yet the close is bounded by close_timeout (RFC 5040 §6.2 closes the stream after a Terminate
// and sets no time; siw aborts such a socket too). The 8 MiB Send waiting to go is flushed.
TEST_F(HostilePeer, ZeroWindowDuringTerminate) {
  constexpr auto kClose = 1000ms;
  ASSERT_NO_FATAL_FAILURE(
      connect({.witness_read = false, .peer_rcvbuf = 4096, .tweak = [&](EndpointOptions& o) {
                 o.cm.close_timeout = kClose;
               }}));
  const std::size_t n = 8u << 20;
  auto [big, bmr] = region(n, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(peer().write(peer().fpdu(opener())));
  ASSERT_EQ(post_one(server().qp(), {.op = IBV_WR_SEND,
                                     .addr = big->data(),
                                     .len = static_cast<std::uint32_t>(n),
                                     .lkey = bmr->lkey,
                                     .wr_id = 9}),
            0);
  // The engine fills the socket, then waits for a window that never opens.
  std::uint64_t last = 0;
  ASSERT_TRUE(eventually([&] {
    const auto now = engine_qp().stats().fpdus_sent;
    const bool stalled = now > 0 && now == last;
    last = now;
    if (!stalled) std::this_thread::sleep_for(20ms);
    return stalled;
  }));
  auto [g, mr] = region(4096, kAllAccess);
  Bytes payload(64, kPeerData);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(peer().write(peer().fpdu(write_seg(unknown_stag(mr->rkey), g->addr(), payload))));
  auto ev = server().wait_event(RDMA_CM_EVENT_DISCONNECTED, 10s);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(ev) << "no DISCONNECTED while the peer's window stays closed: " << ev.error();
  EXPECT_LT(took, kClose + 1500ms);
  EXPECT_EQ(ibv_query_qp_state(server().qp()), IBV_QPS_ERR);
  auto wc = wait_wc(server().send_cq(), 5s);
  ASSERT_TRUE(wc);
  EXPECT_EQ(wc->wr_id, 9u);
  EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR);
  for (std::uint64_t id : {100u, 101u}) {
    auto rw = wait_wc(server().recv_cq(), 5s);
    ASSERT_TRUE(rw);
    EXPECT_EQ(rw->wr_id, id);
    EXPECT_EQ(rw->status, IBV_WC_WR_FLUSH_ERR);
  }
  EXPECT_TRUE(g->all(kInitial));
  expect_contained_and_others_served();
}

// A peer that stops reading (a zero window) and breaks no rule: TCP would probe its window for
// ever (RFC 9293 §3.8.6.1); the LLP timeout (TCP_USER_TIMEOUT) ends the connection instead, the
// QP goes to Error and its work requests are flushed, the reason naming the timeout. The
// default (60 s) is shortened here.
class ZeroWindowPeer : public HostilePeer {
 protected:
  std::chrono::milliseconds llp_ = 1000ms;
  void SetUp() override {
    HostilePeer::SetUp();
    ASSERT_NO_FATAL_FAILURE(
        connect({.witness_read = false, .peer_rcvbuf = 4096, .tweak = [this](EndpointOptions& o) {
                   o.cm.llp_timeout = llp_;
                 }}));
    t0_ = std::chrono::steady_clock::now();
  }
  // DISCONNECTED within the timeout and the probes' back-off (Linux aborts at the first window
  // probe after it; probes back off from ~200 ms: 0.2, 0.6, 1.4, 3.0 s ...), the QP in ERROR
  // naming the timeout, the receives flushed, the other connections served.
  void expect_lost_to_the_llp_timeout() {
    auto ev = server().wait_event(RDMA_CM_EVENT_DISCONNECTED, 20s);
    const auto took = std::chrono::steady_clock::now() - t0_;
    ASSERT_TRUE(ev) << "no DISCONNECTED while the peer's window stays closed: " << ev.error();
    EXPECT_GE(took, llp_);
    EXPECT_LT(took, llp_ + 6s);
    EXPECT_EQ(ibv_query_qp_state(server().qp()), IBV_QPS_ERR);
    EXPECT_NE(engine_qp().error_reason().find("LLP timeout"), std::string::npos)
        << engine_qp().error_reason();
    for (std::uint64_t id : {100u, 101u}) {
      auto rw = wait_wc(server().recv_cq(), 5s);
      ASSERT_TRUE(rw);
      EXPECT_EQ(rw->wr_id, id);
      EXPECT_EQ(rw->status, IBV_WC_WR_FLUSH_ERR);
    }
    expect_contained_and_others_served();
  }
  // After the peer's opener, an 8 MiB `op` (wr_id 9) that fills the peer's window: a Send, or a
  // Write to an STag the peer names (it never reads it anyway).
  void post_bulk(ibv_wr_opcode op) {
    const std::size_t n = 8u << 20;
    auto [big, bmr] = region(n, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_TRUE(peer().write(peer().fpdu(opener())));
    ASSERT_EQ(post_one(server().qp(), {.op = op,
                                       .addr = big->data(),
                                       .len = static_cast<std::uint32_t>(n),
                                       .lkey = bmr->lkey,
                                       .remote_addr = 0x10000,
                                       .rkey = 0x1234,
                                       .wr_id = 9}),
              0);
  }
  // The bulk WR's completion: flushed.
  void expect_bulk_flushed() {
    auto wc = wait_wc(server().send_cq(), 5s);
    ASSERT_TRUE(wc);
    EXPECT_EQ(wc->wr_id, 9u);
    EXPECT_EQ(wc->status, IBV_WC_WR_FLUSH_ERR);
  }
  std::chrono::steady_clock::time_point t0_;
};

// During our bulk Send: the 8 MiB Send is flushed too.
TEST_F(ZeroWindowPeer, DuringABulkSendTheConnectionEndsAtTheLlpTimeout) {
  ASSERT_NO_FATAL_FAILURE(post_bulk(IBV_WR_SEND));
  ASSERT_NO_FATAL_FAILURE(expect_lost_to_the_llp_timeout());
  expect_bulk_flushed();
}

// During our bulk RDMA Write (to an STag the peer names; it never reads it anyway): the Write is
// flushed too.
TEST_F(ZeroWindowPeer, DuringABulkWriteTheConnectionEndsAtTheLlpTimeout) {
  ASSERT_NO_FATAL_FAILURE(post_bulk(IBV_WR_RDMA_WRITE));
  ASSERT_NO_FATAL_FAILURE(expect_lost_to_the_llp_timeout());
  expect_bulk_flushed();
}

// A peer that reads one octet a second during our bulk Send. It makes progress, but its TCP never
// reopens its window for it: receiver-side silly window syndrome avoidance (RFC 9293 §3.8.6.2.2)
// advertises no window until a full segment's worth (here its whole small buffer) is free, so on
// the wire it is a closed window whose probes are answered, and it ends at the LLP timeout too,
// however many octets it read meanwhile (a 3 s timeout here: three or more).
class SlowReaderPeer : public ZeroWindowPeer {
 protected:
  SlowReaderPeer() { llp_ = 3000ms; }
};
TEST_F(SlowReaderPeer, ThatReadsOneOctetASecondEndsAtTheLlpTimeout) {
  std::atomic<bool> stop{false};
  std::atomic<int> octets{0};
  std::thread reader([&, fd = peer().fd()] {
    while (!stop.load()) {
      // An octet as soon as one is there, then the next a second later.
      std::uint8_t b;
      const bool got = ::recv(fd, &b, 1, MSG_DONTWAIT) == 1;
      if (got) octets.fetch_add(1);
      for (int i = 0; i < (got ? 10 : 1) && !stop.load(); ++i) std::this_thread::sleep_for(100ms);
    }
  });
  struct Join {
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop = true;
      t.join();
    }
  } join{stop, reader};
  ASSERT_NO_FATAL_FAILURE(post_bulk(IBV_WR_SEND));
  ASSERT_NO_FATAL_FAILURE(expect_lost_to_the_llp_timeout());
  EXPECT_GE(octets.load(), 3) << "the peer did not read an octet a second";
  expect_bulk_flushed();
}

// While our RNIC answers the peer's own 8 MiB RDMA Read: the Read Responses fill the window the
// peer then never reopens (RFC 5040 §4.5: the responder streams them with no flow control of
// its own).
TEST_F(ZeroWindowPeer, DuringOurReadResponsesTheConnectionEndsAtTheLlpTimeout) {
  const std::size_t n = 8u << 20;
  auto [src, mr] = region(n, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(peer().write(peer().fpdu(opener())));
  ASSERT_TRUE(peer().write(fpdu_of(
      ulpdu_of(read_request_seg(1, STag{mr->rkey}, src->addr(), static_cast<std::uint32_t>(n))))));
  ASSERT_NO_FATAL_FAILURE(expect_lost_to_the_llp_timeout());
}

// ---------------------------------------------------------------------------------------------
// The connection manager under a flood of TCP connections that never send an MPA Request.

namespace {

struct Flood {
  std::vector<int> fds;
  ~Flood() {
    for (int fd : fds) ::close(fd);
  }
};

// How many of `fds` the server has closed (or reset) by `limit` from now.
int closed_by_server(const std::vector<int>& fds, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int n = 0;
  for (int fd : fds) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0))) <= 0) continue;
    char b;
    const auto r = ::recv(fd, &b, 1, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) ++n;
  }
  return n;
}

}  // namespace

// 200 idle connections within the listener's bound (CmOptions::max_pending_mpa, 1024): a real
// client that connects meanwhile is served at once; the idle ones are closed by the MPA timeout
// (RFC 5044 §7.1 leaves the time to the implementation), each reported as CONNECT_ERROR.
TEST_F(HostilePeer, ConnectionFloodWithinTheBound) {
  EndpointOptions so = calm_options();
  so.cm.mpa_timeout = 1500ms;
  Endpoint listener(so);
  auto port = listener.listen("127.0.0.1", 0);
  ASSERT_TRUE(port);
  Bystander by(listener.ctx());
  ASSERT_TRUE(by.ok);
  Flood flood;
  for (int i = 0; i < 200; ++i) {
    const int fd = connect_loopback(*port);
    ASSERT_GE(fd, 0) << i;
    flood.fds.push_back(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  Endpoint client(calm_options());
  std::expected<void, std::string> con;
  std::thread t([&] { con = client.connect("127.0.0.1", *port); });
  std::vector<int> seen;
  auto acc = accept_next(listener, 5s, &seen);
  t.join();
  ASSERT_TRUE(acc) << acc.error();
  ASSERT_TRUE(con) << con.error();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1000ms) << "the real client waited";
  EXPECT_TRUE(round_trip(client, listener, (*acc)->id->qp, 0x51));
  // The idle connections time out and are closed, each reported.
  EXPECT_EQ(closed_by_server(flood.fds, 5s), 200);
  int errors = static_cast<int>(std::count(seen.begin(), seen.end(), RDMA_CM_EVENT_CONNECT_ERROR));
  while (errors < 200) {
    auto ev = listener.next_event(1s);
    if (!ev) break;
    if (ev->event == RDMA_CM_EVENT_CONNECT_ERROR) ++errors;
  }
  EXPECT_EQ(errors, 200);
  EXPECT_TRUE(by.serves(0x61));
  acc->reset();
}

// More idle connections than the listener lets into the MPA exchange (max_pending_mpa 16 here):
// only 16 hold a descriptor on the server, and the listener must still serve a real client that
// arrives while idle ones hold every slot, long before they time out (a listener that refused
// every newcomer when full locked real clients out for as long as the flood went on).
TEST_F(HostilePeer, ConnectionFloodPastTheBoundDoesNotLockOutARealClient) {
  EndpointOptions so = calm_options();
  so.cm.mpa_timeout = 4s;
  so.cm.max_pending_mpa = 16;
  Endpoint listener(so);
  auto port = listener.listen("127.0.0.1", 0);
  ASSERT_TRUE(port);
  Bystander by(listener.ctx());
  ASSERT_TRUE(by.ok);
  Flood flood;
  for (int i = 0; i < 48; ++i) {
    const int fd = connect_loopback(*port);
    ASSERT_GE(fd, 0) << i;
    flood.fds.push_back(fd);
  }
  // 32 of them are closed at once: the server keeps no more than 16 (whichever it keeps).
  const int refused = closed_by_server(flood.fds, 500ms);
  EXPECT_EQ(refused, 32);
  const auto t0 = std::chrono::steady_clock::now();
  EndpointOptions co = calm_options();
  co.cm.mpa_timeout = 2s;
  Endpoint client(co);
  std::expected<void, std::string> con;
  std::thread t([&] { con = client.connect("127.0.0.1", *port); });
  auto acc = accept_next(listener, 2s);
  t.join();
  EXPECT_TRUE(con) << "a real client was locked out by idle connections: " << con.error();
  ASSERT_TRUE(acc) << acc.error();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  EXPECT_TRUE(round_trip(client, listener, (*acc)->id->qp, 0x71));
  EXPECT_TRUE(by.serves(0x72));
  acc->reset();
}

// ---------------------------------------------------------------------------------------------
// Buffer enlargement (enlarge/): a peer that gives up its enlarged buffer (Release) or asks for
// a new one (EnlargeReq, which frees the old) and at once starts an RDMA Write into the old
// buffer. The receiver frees the buffer while the Write is half placed: Device::deregister
// (ibv_dereg_mr) returns only once the engine has stopped placing into it, the rest of the Write
// is discarded and ends in a Terminate (DDP tagged, invalid STag: RFC 5041 §7.2), and the freed
// memory (taken by a new owner at once) is never written. The sanitizer build turns any write
// into the freed buffer into a heap-use-after-free report.

namespace {

struct EnlargeRace {
  std::unique_ptr<enlarge::Node> node = std::move(*enlarge::Node::create({}));
  std::uint16_t port = *node->listen("127.0.0.1", 0);
  MpaInitiator peer{port};
  enlarge::Connection* conn = nullptr;
  std::uint32_t send_msn = 0;

  bool connect() {
    if (!peer.send_request(enlarge::encode_hello({1024, 4, enlarge::Mode::Enlarge}))) return false;
    auto c = node->accept(5s);
    if (!c) return false;
    conn = *c;
    return peer.read_reply().has_value();
  }
  Bytes message(const enlarge::Message& m) {
    Bytes body = enlarge::encode(m);
    return peer.fpdu(send_seg(++send_msn, 0, body));
  }
  // Drives the node and reads the peer's socket until an EnlargeAck arrives.
  std::optional<enlarge::EnlargeAck> await_ack(std::size_t skip) {
    std::optional<enlarge::EnlargeAck> ack;
    eventually([&] {
      node->progress(1ms);
      peer.pump(1ms);
      std::size_t acks = 0;
      for (const auto& s : peer.replies().segments) {
        if (s.hdr.opcode != static_cast<std::uint8_t>(Opcode::Send)) continue;
        auto m = enlarge::decode(s.payload);
        if (m && m->type() == enlarge::MsgType::EnlargeAck && acks++ == skip)
          ack = std::get<enlarge::EnlargeAck>(m->body);
      }
      return ack.has_value();
    });
    return ack;
  }
};

}  // namespace

TEST_F(HostilePeer, EnlargeReleaseOrNewRequestRacingAWrite) {
  for (bool release : {true, false}) {
    SCOPED_TRACE(release ? "Release" : "new EnlargeReq");
    EnlargeRace race;
    ASSERT_TRUE(race.connect());
    // A second, well-behaved connection to the same node (and device), used after the attack.
    auto client = std::move(*enlarge::Node::create({}));
    enlarge::Connection* cc = client->connect_async("127.0.0.1", race.port);
    enlarge::Connection* sc = nullptr;
    ASSERT_TRUE(eventually([&] {
      race.node->progress(1ms);
      client->progress(1ms);
      if (!sc) {
        auto a = race.node->accept(0ms);
        if (a) sc = *a;
      }
      return sc && cc->state() != enlarge::Connection::State::Connecting;
    }));
    ASSERT_EQ(cc->state(), enlarge::Connection::State::Established) << cc->error();
    // The first enlargement: 65,536 octets, its STag and TO come back.
    ASSERT_TRUE(race.peer.write(
        race.message({.credits = 0, .seq = 1, .body = enlarge::EnlargeReq{65536}})));
    auto ack = race.await_ack(0);
    ASSERT_TRUE(ack) << "no EnlargeAck";
    ASSERT_EQ(ack->size, 65536u);
    const std::uint64_t freed_before = race.conn->stats().buffers_freed;

    // Release (or a larger EnlargeReq) and, in the same write, the head of an RDMA Write of
    // 60,000 octets into the old buffer.
    Bytes payload(60000, kPeerData);
    Bytes wu = ulpdu_of(write_seg(STag{ack->stag}, ack->to, payload));
    Bytes write_fpdu = fpdu_of(wu);
    const std::size_t half = write_fpdu.size() / 2;
    Bytes wire = release
                     ? race.message({.credits = 0, .seq = 0, .body = enlarge::Release{ack->stag}})
                     : race.message({.credits = 0, .seq = 2, .body = enlarge::EnlargeReq{131072}});
    wire.insert(wire.end(), write_fpdu.begin(),
                write_fpdu.begin() + static_cast<std::ptrdiff_t>(half));
    ASSERT_TRUE(race.peer.write(wire));
    // The engine reads all of it (the node is not driven meanwhile, so the buffer is still
    // registered): the Write's head is checked and its placement has begun.
    const std::uint16_t peer_port = local_port_of(race.peer.fd());
    ASSERT_TRUE(eventually([&] {
      auto unread = unread_octets(race.port, peer_port);
      return unacked_octets(race.peer.fd()) == 0 && unread && *unread == 0;
    }));
    ASSERT_TRUE(engine_idle(race.node->context()));
    // Placement has begun: the buffer (still allocated, the node has not run) holds the head.
    const auto* old_buffer = reinterpret_cast<const std::uint8_t*>(ack->to);
    ASSERT_TRUE(std::all_of(old_buffer, old_buffer + 1000, [](auto b) { return b == kPeerData; }))
        << "the Write's head was not placed before the buffer was freed: no race";
    // The node handles the message: the old buffer is unregistered and freed.
    ASSERT_TRUE(eventually([&] {
      race.node->progress(1ms);
      return race.conn->stats().buffers_freed > freed_before;
    }));
    // A new owner takes memory of that size at once (very likely the very same block).
    auto reuse = std::make_unique_for_overwrite<std::uint8_t[]>(65536);
    std::memset(reuse.get(), kNewOwner, 65536);
    const bool same_block = reinterpret_cast<std::uint64_t>(reuse.get()) == ack->to;
    RecordProperty(release ? "release_same_block" : "request_same_block", same_block ? 1 : 0);
    // The rest of the Write.
    ASSERT_TRUE(race.peer.write(ByteSpan(write_fpdu).subspan(half)));
    eventually([&] {
      race.peer.pump(2ms);
      race.node->progress(1ms);
      return race.peer.closed();
    });
    EXPECT_TRUE(race.peer.closed());
    auto t = expect_terminate(race.peer.replies(), kDdpInvalidStag);
    expect_ddp_header_echo(t, wu);
    EXPECT_TRUE(
        std::all_of(reuse.get(), reuse.get() + 65536, [](auto b) { return b == kNewOwner; }))
        << "the Write went on into the freed buffer" << (same_block ? " (same block)" : "");
    // The connection is over on the node's side too.
    EXPECT_TRUE(eventually([&] {
      race.node->progress(1ms);
      return race.conn->state() != enlarge::Connection::State::Established;
    }));

    // The other connection on the node is still served through the protocol, enlargement
    // included.
    Bytes msg(100000);
    for (std::size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<std::uint8_t>(i * 7);
    ASSERT_TRUE(cc->post(msg));
    std::optional<enlarge::Received> got;
    ASSERT_TRUE(eventually([&] {
      race.node->progress(1ms);
      client->progress(1ms);
      if (auto r = sc->try_recv()) got = std::move(*r);
      return got.has_value() || sc->state() == enlarge::Connection::State::Failed;
    }));
    ASSERT_TRUE(got) << sc->error();
    EXPECT_EQ(got->data, msg);
    EXPECT_GE(cc->stats().bulk_writes, 1u) << "the message did not go through an enlarged buffer";
  }
}
