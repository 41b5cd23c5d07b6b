#include "rnic/segment_tap.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/bytes.hpp"
#include "common/internet_checksum.hpp"

namespace iwarp::rnic {

namespace {

constexpr std::size_t kEthHeader = 14;
constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
constexpr std::uint8_t kProtoTcp = 6;
constexpr std::uint8_t kTcpSyn = 0x02;
constexpr std::uint8_t kTcpRst = 0x04;
// A frame bigger than this (a GRO super-frame) is left to the socket.
constexpr std::size_t kFrameBuffer = 65536 + kEthHeader;
// Octets handed to QPs and not yet handled: beyond this the tap sheds frames (the socket still
// delivers them), so a slow engine never makes it queue without bound.
constexpr std::int64_t kMaxPendingOctets = 32 << 20;

// RFC 9293 §3.1: the checksum over the IPv4 pseudo header (addresses, protocol, TCP length)
// and the whole segment, its own checksum field included, comes out 0.
bool tcp_checksum_ok(const std::uint8_t* ip, const std::uint8_t* tcp, std::size_t tcp_len) {
  const std::uint64_t pseudo =
      checksum_add_words(ByteSpan(ip + 12, 8), kProtoTcp + std::uint64_t{tcp_len});
  return internet_checksum(ByteSpan(tcp, tcp_len), checksum_fold(pseudo)) == 0;
}

std::string errno_text(const std::string& what, const std::string& ifname) {
  return fmt::format("{}: {}: {}{}", ifname, what, std::strerror(errno),
                     errno == EPERM ? " (an AF_PACKET socket needs root or CAP_NET_RAW)" : "");
}

// Opens and binds the socket; the error is one line.
std::expected<int, std::string> open_socket(const std::string& ifname) {
  const unsigned index = if_nametoindex(ifname.c_str());
  if (index == 0) return std::unexpected(fmt::format("{}: no such interface", ifname));
  const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_IP));
  if (fd < 0) return std::unexpected(errno_text("socket(AF_PACKET)", ifname));
  auto fail = [&](const std::string& what) {
    auto e = errno_text(what, ifname);
    close(fd);
    return std::unexpected(e);
  };
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname.c_str());
  if (ioctl(fd, SIOCGIFHWADDR, &ifr) < 0) return fail("SIOCGIFHWADDR");
  const auto hw = ifr.ifr_hwaddr.sa_family;
  if (hw != ARPHRD_ETHER && hw != ARPHRD_LOOPBACK) {
    close(fd);
    return std::unexpected(fmt::format(
        "{}: link type {} is not Ethernet (a TAP, veth or Ethernet device is)", ifname, hw));
  }
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_IP);
  sll.sll_ifindex = static_cast<int>(index);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) < 0) return fail("bind");
  const int one = 1;
  // Only what arrives (kernels before 4.20 lack it: outgoing frames are skipped by type below).
  (void)setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
  // The kernel's word on each frame's checksum (TP_STATUS_CSUM_VALID / CSUMNOTREADY).
  if (setsockopt(fd, SOL_PACKET, PACKET_AUXDATA, &one, sizeof one) < 0)
    return fail("PACKET_AUXDATA");
  const int rcvbuf = 8 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0)
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  return fd;
}

class SocketNumbering : public RxSegmentShaper {
 public:
  SocketNumbering(TcpSeq start, std::string what) : next_(start), what_(std::move(what)) {}
  void push(ByteSpan data, const SegmentSink& out) override {
    out(next_, data);
    next_ += static_cast<std::uint32_t>(data.size());
  }
  void flush(const SegmentSink&) override {}
  bool holding() const override { return false; }
  std::string describe() const override { return what_; }

 private:
  TcpSeq next_;
  std::string what_;
};

}  // namespace

std::string SegmentTap::check(const std::string& ifname) {
  auto fd = open_socket(ifname);
  if (!fd) return fd.error();
  close(*fd);
  return {};
}

std::expected<std::unique_ptr<SegmentTap>, std::string> SegmentTap::open(
    const std::string& ifname) {
  auto fd = open_socket(ifname);
  if (!fd) return std::unexpected(fd.error());
  return std::unique_ptr<SegmentTap>(new SegmentTap(*fd, ifname));
}

SegmentTap::SegmentTap(int fd, std::string ifname)
    : fd_(fd), ifname_(std::move(ifname)), reader_([this] { run(); }) {}

SegmentTap::~SegmentTap() {
  stop_ = true;
  if (reader_.joinable()) reader_.join();
  close(fd_);
}

std::optional<SegmentTap::FlowKey> SegmentTap::key_of(const boost::asio::ip::tcp::endpoint& from,
                                                      const boost::asio::ip::tcp::endpoint& to) {
  if (!from.address().is_v4() || !to.address().is_v4()) return std::nullopt;
  FlowKey k{};
  const auto a = from.address().to_v4().to_bytes(), b = to.address().to_v4().to_bytes();
  std::memcpy(&k[0], a.data(), 4);
  store_be16(&k[4], from.port());
  std::memcpy(&k[6], b.data(), 4);
  store_be16(&k[10], to.port());
  return k;
}

std::optional<TcpSeq> SegmentTap::peer_isn(const boost::asio::ip::tcp::endpoint& remote,
                                           const boost::asio::ip::tcp::endpoint& local,
                                           std::chrono::milliseconds bound) const {
  const auto k = key_of(remote, local);
  if (!k) return std::nullopt;
  std::unique_lock l(mu_);
  // Two batches after the call: the one under way may have begun before the SYN was queued.
  const std::uint64_t until = batches_ + 2;
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (true) {
    if (auto it = isns_.find(*k); it != isns_.end()) return it->second;
    if (batches_ >= until) return std::nullopt;
    if (read_cv_.wait_until(l, deadline) == std::cv_status::timeout) {
      auto it = isns_.find(*k);
      return it == isns_.end() ? std::nullopt : std::optional<TcpSeq>(it->second);
    }
  }
}

void SegmentTap::detach_all() {
  std::lock_guard l(mu_);
  flows_.clear();
}

void SegmentTap::attach(const boost::asio::ip::tcp::endpoint& remote,
                        const boost::asio::ip::tcp::endpoint& local,
                        std::weak_ptr<SegmentInput> in) {
  const auto k = key_of(remote, local);
  if (!k) return;
  std::lock_guard l(mu_);
  std::erase_if(flows_, [](const auto& f) { return f.second.expired(); });
  if (flows_.size() >= kMaxFlows && !flows_.contains(*k)) return;  // the socket serves it alone
  flows_[*k] = std::move(in);
}

RxShaperFactory SegmentTap::socket_numbering() const {
  const std::string what = fmt::format(
      "real-segment mode: the TCP segments arriving on {} (AF_PACKET), in arrival order, and the "
      "socket's stream numbered by their sequence numbers",
      ifname_);
  return [what](const RxShaperContext& c) -> std::unique_ptr<RxSegmentShaper> {
    return std::make_unique<SocketNumbering>(c.stream_start, what);
  };
}

SegmentTap::Stats SegmentTap::stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

// One frame off the wire: hostile until proven otherwise. Every length is checked against the
// frame before it is used; a segment whose checksum fails is left to TCP (which drops it), never
// placed.
SegmentTap::Frame SegmentTap::parse_frame(ByteSpan frame, bool csum_trusted, Segment& out) {
  const std::uint8_t* p = frame.data();
  const std::size_t n = frame.size();
  if (n < kEthHeader || load_be16(p + 12) != kEtherTypeIpv4) return Frame::Other;
  const std::uint8_t* ip = p + kEthHeader;
  const std::size_t m = n - kEthHeader;
  // RFC 791 §3.1: version 4, IHL in 32-bit words, total length covering header and data
  // (Ethernet may pad the frame beyond it).
  if (m < 20 || (ip[0] >> 4) != 4) return Frame::Malformed;
  const std::size_t ihl = std::size_t{ip[0] & 0x0fu} * 4;
  const std::size_t total = load_be16(ip + 2);
  if (ihl < 20 || total < ihl || total > m) return Frame::Malformed;
  // RFC 791 §3.1: the header checksum (IP drops a frame that fails it; so does the tap).
  if (!csum_trusted && internet_checksum(ByteSpan(ip, ihl)) != 0) return Frame::Malformed;
  if (ip[9] != kProtoTcp) return Frame::Other;
  if ((load_be16(ip + 6) & 0x3fff) != 0) return Frame::Other;  // a fragment: left to IP
  // RFC 9293 §3.1: data offset in 32-bit words, at least 5.
  const std::uint8_t* tcp = ip + ihl;
  const std::size_t tcp_len = total - ihl;
  if (tcp_len < 20) return Frame::Malformed;
  const std::size_t doff = static_cast<std::size_t>(tcp[12] >> 4) * 4;
  if (doff < 20 || doff > tcp_len) return Frame::Malformed;
  if (!csum_trusted && !tcp_checksum_ok(ip, tcp, tcp_len)) return Frame::Malformed;
  std::memcpy(&out.key[0], ip + 12, 4);
  std::memcpy(&out.key[4], tcp, 2);
  std::memcpy(&out.key[6], ip + 16, 4);
  std::memcpy(&out.key[10], tcp + 2, 2);
  out.seq = TcpSeq{load_be32(tcp + 4)};
  out.syn = (tcp[13] & kTcpSyn) != 0;
  out.rst = (tcp[13] & kTcpRst) != 0;
  out.payload = ByteSpan(tcp + doff, tcp_len - doff);
  return Frame::Tcp;
}

void SegmentTap::on_frame(const std::uint8_t* p, std::size_t n, bool csum_trusted,
                          const std::shared_ptr<std::atomic<std::int64_t>>& pending) {
  Segment sg;
  const Frame f = parse_frame(ByteSpan(p, n), csum_trusted, sg);
  if (f == Frame::Other) return;
  {
    std::lock_guard l(mu_);
    if (f == Frame::Malformed) {
      ++stats_.malformed;
      return;
    }
    if (sg.syn) {
      // A SYN or SYN-ACK: its sequence number is the sender's ISN (RFC 9293 §3.4).
      ++stats_.syns;
      auto [it, fresh] = isns_.insert_or_assign(sg.key, sg.seq);
      if (fresh) {
        isn_order_.push_back(sg.key);
        if (isn_order_.size() > kMaxIsns) {
          isns_.erase(isn_order_.front());
          isn_order_.pop_front();
        }
      }
      return;
    }
    // A RST ends the connection through the socket; its octets, if any, are never data.
    if (sg.payload.empty() || sg.rst) return;
    auto it = flows_.find(sg.key);
    if (it == flows_.end()) return;
    auto in = it->second.lock();
    if (!in) {
      flows_.erase(it);
      return;
    }
    if (*pending > kMaxPendingOctets) {
      ++stats_.shed;  // the socket delivers these octets
      return;
    }
    ++stats_.segments;
    // Under the lock: once detach_all() returns, nothing more is posted to the QP's engine.
    *pending += static_cast<std::int64_t>(sg.payload.size()) + kPendingSegmentOverhead;
    in->receive_segment(sg.seq, Bytes(sg.payload.begin(), sg.payload.end()), pending);
  }
}

void SegmentTap::run() {
  std::vector<std::uint8_t> buf(kFrameBuffer);
  auto pending = std::make_shared<std::atomic<std::int64_t>>(0);
  while (!stop_) {
    pollfd pfd{fd_, POLLIN, 0};
    // The stop flag is looked at every 50 ms; a quiet interface is a batch too (caught up).
    const int ready = poll(&pfd, 1, 50);
    for (int i = 0; ready > 0 && i < 256 && !stop_; ++i) {
      sockaddr_ll from{};
      iovec iov{buf.data(), buf.size()};
      alignas(cmsghdr) std::uint8_t ctrl[CMSG_SPACE(sizeof(tpacket_auxdata))];
      msghdr msg{};
      msg.msg_name = &from;
      msg.msg_namelen = sizeof from;
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = ctrl;
      msg.msg_controllen = sizeof ctrl;
      const ssize_t n = recvmsg(fd_, &msg, MSG_DONTWAIT | MSG_TRUNC);
      if (n < 0) break;  // drained (or an error: poll again)
      if (from.sll_pkttype == PACKET_OUTGOING) continue;
      bool csum_trusted = false;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_PACKET && c->cmsg_type == PACKET_AUXDATA) {
          tpacket_auxdata aux;
          std::memcpy(&aux, CMSG_DATA(c), sizeof aux);
          csum_trusted = (aux.tp_status & (TP_STATUS_CSUM_VALID | TP_STATUS_CSUMNOTREADY)) != 0;
        }
      {
        std::lock_guard l(mu_);
        ++stats_.frames;
        if (static_cast<std::size_t>(n) > buf.size()) {
          ++stats_.truncated;
          continue;
        }
      }
      on_frame(buf.data(), static_cast<std::size_t>(n), csum_trusted, pending);
    }
    {
      std::lock_guard l(mu_);
      ++batches_;
    }
    read_cv_.notify_all();
  }
}

}  // namespace iwarp::rnic
