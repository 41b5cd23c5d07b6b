// The real-segment receive mode (issue 17): the TCP segments of live connections as they arrive
// on a network interface, in arrival order, holes and all, fed to each QP's segment path while the
// kernel's TCP keeps the connection reliable and the socket still supplies the in-order stream.
//
// A hardware RNIC sees the segments before TCP reassembles them; over kernel TCP the emulated
// one normally sees only the reassembled stream. An AF_PACKET socket on the receiving interface
// gets each frame before the kernel's TCP does (packet taps run ahead of IP input), so a segment
// beyond a TCP hole reaches the segment path at once and is placed (RFC 5044 §8: segments start
// with an FPDU), its completion deferred until the hole closes (qp_ooo.cpp); when the kernel later
// delivers the same octets through the socket, the segment path counts them as duplicates
// (mpa::SegmentReceiver keeps the octets it already holds). Octets the tap missed (its buffer
// overran, a frame it could not parse) still arrive through the socket: the tap can only make
// placement earlier, never lose data.
//
// Trust: the tap hands over what passes the IPv4 header checksum and the TCP checksum and is not
// a RST; the QP takes it only within its receive window's reach (RxOptions::tap_window). It does
// not repeat the kernel's other checks (the ACK field, timestamps): a third party that can
// inject segments with the connection's addresses and ports, within the window, could have its
// octets placed even where the kernel drops them. Use the mode on links you control (the
// project's namespaces), as the documentation says.
//
// Both sources number octets with the connection's real TCP sequence numbers: the tap reads them
// off each segment; the socket's stream is numbered from the peer's ISN (seen here in its SYN or
// SYN-ACK, so the tap must be open before the connection is made) plus one plus the MPA frame the
// peer sent. A connection whose SYN the tap did not see is received from the socket only (said in
// the log). IPv4 over Ethernet only.
//
// Lifetime: the tap owns one reader thread; its destructor stops it (bounded by the 50 ms poll
// timeout). It holds each attached QP weakly: a QP that is gone gets nothing.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <expected>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <boost/asio/ip/tcp.hpp>

#include "common/strong_types.hpp"
#include "rnic/rx_segment_shaper.hpp"
#include "rnic/segment_input.hpp"

namespace iwarp::rnic {

class SegmentTap {
 public:
  struct Stats {
    std::uint64_t frames = 0;     // frames read from the interface
    std::uint64_t syns = 0;       // SYN / SYN-ACK segments (ISNs learned)
    std::uint64_t segments = 0;   // data segments handed to an attached QP
    std::uint64_t malformed = 0;  // IPv4/TCP frames whose headers do not fit the frame
    std::uint64_t truncated = 0;  // frames longer than the read buffer (the socket covers them)
    std::uint64_t shed = 0;       // data frames not handed over: too much queued for the engine
  };
  // Source address, source port, destination address, destination port (IPv4, network order).
  using FlowKey = std::array<std::uint8_t, 12>;
  // What a frame off the wire holds, once every length in it was checked against the frame.
  struct Segment {
    FlowKey key{};
    TcpSeq seq;
    bool syn = false;
    bool rst = false;
    ByteSpan payload;  // points into the frame
  };
  enum class Frame : std::uint8_t { Other, Malformed, Tcp };
  // Parses an Ethernet frame: Other (not IPv4/TCP, or an IP fragment), Malformed (a header that
  // does not fit the frame, or, unless `csum_trusted`, a TCP checksum that fails) or Tcp (`out`
  // filled).
  static Frame parse_frame(ByteSpan frame, bool csum_trusted, Segment& out);

  // At most this many connections attached, and ISNs remembered (the oldest go first).
  static constexpr std::size_t kMaxFlows = 4096;
  static constexpr std::size_t kMaxIsns = 4096;

  // Opens an AF_PACKET socket on `ifname` (needs CAP_NET_RAW) and starts the reader. The error
  // is one line starting with the interface's name.
  static std::expected<std::unique_ptr<SegmentTap>, std::string> open(const std::string& ifname);
  // Whether `ifname` could be opened, without keeping anything open ("" when it could).
  static std::string check(const std::string& ifname);
  ~SegmentTap();
  SegmentTap(const SegmentTap&) = delete;
  SegmentTap& operator=(const SegmentTap&) = delete;

  // The initial sequence number the peer at `remote` chose for its connection to `local`, if
  // its SYN (or SYN-ACK) was seen on the interface. The SYN is queued on the tap's socket before
  // the kernel's TCP sees it, but the reader may not have read it yet: this waits, at most
  // `bound`, until it has.
  std::optional<TcpSeq> peer_isn(
      const boost::asio::ip::tcp::endpoint& remote, const boost::asio::ip::tcp::endpoint& local,
      std::chrono::milliseconds bound = std::chrono::milliseconds(200)) const;
  // From now on the payload of every segment from `remote` to `local` goes to `in`.
  void attach(const boost::asio::ip::tcp::endpoint& remote,
              const boost::asio::ip::tcp::endpoint& local, std::weak_ptr<SegmentInput> in);
  // Nothing more goes to any QP once this returns (the device they post to is about to go).
  void detach_all();
  // The receive side's shaper in this mode: it numbers the socket's octets from the connection's
  // real stream start (RxShaperContext::stream_start) and emits them in order at once.
  RxShaperFactory socket_numbering() const;
  Stats stats() const;
  const std::string& ifname() const { return ifname_; }

 private:
  SegmentTap(int fd, std::string ifname);
  static std::optional<FlowKey> key_of(const boost::asio::ip::tcp::endpoint& from,
                                       const boost::asio::ip::tcp::endpoint& to);
  void run();
  void on_frame(const std::uint8_t* p, std::size_t n, bool csum_trusted,
                const std::shared_ptr<std::atomic<std::int64_t>>& pending);

  int fd_ = -1;
  std::string ifname_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable read_cv_;  // the reader finished a batch
  std::uint64_t batches_ = 0;
  std::map<FlowKey, TcpSeq> isns_;
  std::deque<FlowKey> isn_order_;
  std::map<FlowKey, std::weak_ptr<SegmentInput>> flows_;
  Stats stats_;
  std::thread reader_;  // last: started once everything above exists
};

}  // namespace iwarp::rnic
