// A raw TCP peer for tests that play a hostile or careless iWARP peer byte by byte: it completes
// the MPA exchange as initiator with an emulated RNIC (an Endpoint server), then sends FPDUs it
// builds (whole, in pieces, or not at all while it lets its receive window fill) and decodes
// what the RNIC sends back, Terminates included.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <chrono>
#include <expected>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ddp/segment.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/negotiation.hpp"
#include "mpa/stream_decoder.hpp"
#include "rnic/connection_manager.hpp"  // the engine behind the endpoint
#include "verbs_shim/endpoint.hpp"

namespace iwarp::testing {

// What the RNIC sent: every DDP segment in order and the Terminates among them.
struct PeerReplies : mpa::StreamVisitor {
  std::vector<ddp::Segment> segments;
  std::vector<Bytes> ulpdus;  // the segments point into these
  std::vector<rdmap::Terminate> terminates;
  std::optional<WireError> error;
  void on_mpa_frame(const mpa::MpaFrame&, std::uint64_t, std::size_t) override {}
  void on_fpdu(const mpa::Fpdu& f) override {
    ulpdus.emplace_back(f.ulpdu.begin(), f.ulpdu.end());
    auto s = ddp::parse_segment(ulpdus.back());
    if (!s) {
      error = s.error();
      return;
    }
    if (s->hdr.opcode == static_cast<std::uint8_t>(rdmap::Opcode::Terminate))
      terminates.push_back(std::get<rdmap::Terminate>(s->body));
    segments.push_back(*s);
  }
  void on_error(const WireError& e) override { error = e; }
};

// A TCP connection to 127.0.0.1:port (close-on-exec); -1 on failure.
inline int connect_loopback(std::uint16_t port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

// Sends all of `b`; false once the connection refuses more.
inline bool write_all(int fd, ByteSpan b) {
  while (!b.empty()) {
    ssize_t n = ::send(fd, b.data(), b.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    b = b.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

// Reads exactly `n` octets; false on close, error or the socket's receive timeout.
inline bool read_n(int fd, std::uint8_t* p, std::size_t n) {
  while (n) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Runs nothing on a device's engine thread until released (or `limit` passes), so that what a
// peer sends meanwhile is all in the socket when the engine next reads it.
class EngineBlocker {
 public:
  EngineBlocker(verbs::ibv_context* ctx, std::chrono::milliseconds limit) {
    auto entered = std::make_shared<std::promise<void>>();
    auto f = entered->get_future();
    boost::asio::post(ctx->dev->io(), [entered, gate = gate_, limit] {
      entered->set_value();
      gate.wait_for(limit);
    });
    ok_ = f.wait_for(limit) == std::future_status::ready;
  }
  ~EngineBlocker() { release(); }
  EngineBlocker(const EngineBlocker&) = delete;
  EngineBlocker& operator=(const EngineBlocker&) = delete;
  bool ok() const { return ok_; }
  void release() {
    if (!released_) {
      released_ = true;
      open_.set_value();
    }
  }

 private:
  std::promise<void> open_;
  std::shared_future<void> gate_ = open_.get_future().share();
  bool released_ = false;
  bool ok_ = false;
};

class RawPeer {
 public:
  // Connects to 127.0.0.1:port, sends an MPA Request with `policy` and reads the Reply. The
  // server side must be accepting (Endpoint::accept_one on another thread).
  explicit RawPeer(std::uint16_t port, mpa::Policy policy = {}, int rcvbuf = 0)
      : cfg_{policy.crc == mpa::CrcPolicy::Required, false}, enc_(cfg_), dec_(cfg_) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    policy.markers = mpa::MarkerPolicy::Off;
    if (!write(mpa::make_request(policy).encode())) return;
    std::uint8_t hdr[mpa::kFrameHeaderSize];
    if (!read_n(hdr, sizeof hdr)) return;
    std::vector<std::uint8_t> pd(load_be16(hdr + 18));
    if (!read_n(pd.data(), pd.size())) return;
    ok_ = true;
  }
  ~RawPeer() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  bool ok() const { return ok_; }
  int fd() const { return fd_; }

  // One DDP segment as an FPDU (CRC as negotiated).
  Bytes fpdu(const ddp::Segment& s) {
    Bytes ulpdu, out;
    ddp::encode_segment(s, ulpdu);
    if (!enc_.encode(ulpdu, out)) return {};
    return out;
  }

  bool write(ByteSpan b) { return write_all(fd_, b); }

  // Reads and decodes what arrives until the RNIC closes the stream or `limit` passes.
  PeerReplies& read_until_closed(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    std::uint8_t buf[65536];
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      dec_.feed(ByteSpan(buf, static_cast<std::size_t>(n)), replies_);
    }
    return replies_;
  }
  bool closed() const { return closed_; }
  PeerReplies& replies() { return replies_; }

 private:
  bool read_n(std::uint8_t* p, std::size_t n) { return testing::read_n(fd_, p, n); }

  int fd_ = -1;
  bool ok_ = false, closed_ = false;
  mpa::FramingConfig cfg_;
  mpa::FpduEncoder enc_;
  mpa::StreamDecoder dec_;
  PeerReplies replies_;
};

// A server Endpoint with a raw peer connected to it (CRC required).
struct RawConnection {
  verbs::Endpoint server;
  std::unique_ptr<RawPeer> peer;
  std::expected<void, std::string> accepted;

  explicit RawConnection(verbs::EndpointOptions so, int peer_rcvbuf = 0)
      : server((so.cm.policy.crc = mpa::CrcPolicy::Required, so)) {
    auto port = server.listen("127.0.0.1", 0);
    if (!port) {
      accepted = std::unexpected(port.error());
      return;
    }
    std::thread acc([&] { accepted = server.accept_one(); });
    mpa::Policy pol;
    pol.crc = mpa::CrcPolicy::Required;
    peer = std::make_unique<RawPeer>(*port, pol, peer_rcvbuf);
    acc.join();
  }
  bool ok() const { return accepted && peer && peer->ok(); }
};

// Waits until `pred` holds, polling, for at most `limit`.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// The next work completion on `cq`, polled for at most `limit`; empty when none came.
inline std::optional<verbs::ibv_wc> wait_wc(
    verbs::ibv_cq* cq, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  std::optional<verbs::ibv_wc> got;
  eventually(
      [&] {
        verbs::ibv_wc wc;
        if (verbs::ibv_poll_cq(cq, 1, &wc) == 1) got = wc;
        return got.has_value();
      },
      limit);
  return got;
}

}  // namespace iwarp::testing
