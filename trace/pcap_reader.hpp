// Reads TCP conversations out of a capture file (libpcap): Ethernet, Linux cooked capture
// (SLL and SLL2), raw IP and BSD loopback link types, IPv4 and IPv6. Pairs the two
// directions of each connection and keeps every segment with its sequence number, in capture
// order, for reassembly or for replay as segments.
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <string>
#include <vector>

#include "common/bytes.hpp"
#include "common/strong_types.hpp"

namespace iwarp::trace {

struct IpEndpoint {
  bool v6 = false;
  std::array<std::uint8_t, 16> addr{};  // IPv4 uses the first 4 octets
  std::uint16_t port = 0;
  std::string to_string() const;  // "10.0.2.15:7174" or "[::1]:7174"
  friend bool operator==(const IpEndpoint&, const IpEndpoint&) = default;
};

struct TcpSegment {
  std::uint64_t frame = 0;    // 1-based frame number in the file
  std::uint64_t time_us = 0;  // capture timestamp, microseconds since the epoch
  TcpSeq seq;                 // sequence number of the first payload octet (or of the SYN/FIN)
  TcpSeq ack;
  bool syn = false, fin = false, rst = false, has_ack = false;
  Bytes payload;
};

// One TCP connection. Direction 0 is from `client` (the side that sent the SYN when the
// capture has it, else the sender of the first segment seen), direction 1 from `server`.
struct TcpFlow {
  IpEndpoint client, server;
  bool saw_syn = false;           // SYN from the client in the capture
  bool saw_syn_ack = false;       // SYN-ACK from the server in the capture
  TcpSeq client_isn, server_isn;  // valid when the matching SYN was seen
  // [0] client->server, [1] server->client. Only segments with payload or SYN/FIN/RST are
  // kept (pure ACKs are dropped to save memory); a segment whose payload was cut by the
  // snaplen or by IP fragmentation keeps no payload and leaves a note in `problems`.
  std::array<std::vector<TcpSegment>, 2> dir;
  std::uint64_t first_frame = 0;
  // Problems found while reading this flow, each one line ("frame 12: truncated by snaplen
  // 96 (caplen 96 of 1514 octets); TCP payload incomplete"). A flow with problems may still
  // be partly decodable.
  std::vector<std::string> problems;
};

// Where direction `dir` of `f` starts its stream: the octet after the SYN's sequence number
// (RFC 793 §3.3) when the capture has the SYN, else the lowest sequence number seen carrying
// data (a capture that began mid-connection).
TcpSeq stream_start(const TcpFlow& f, int dir);

struct Capture {
  std::string path;
  int link_type = 0;
  std::string link_name;
  std::uint64_t frames = 0;
  std::uint64_t non_tcp_frames = 0;
  std::vector<TcpFlow> flows;  // in order of first appearance
  // Problems that belong to no flow (a frame cut or malformed before its TCP ports, an IP
  // fragment whose first fragment is missing, a damaged file tail), each one line.
  std::vector<std::string> problems;
};

// Reads all TCP flows. Fatal problems (cannot open, unsupported link type, not a capture) are
// one-line errors naming the file; per-frame problems land in the flow's `problems`.
std::expected<Capture, std::string> read_capture(const std::string& path);

// A segment as scan_capture() hands it over: `payload` points into the frame libpcap holds and
// is valid only during the call.
struct SegmentView {
  std::uint64_t frame = 0, time_us = 0;
  TcpSeq seq, ack;
  bool syn = false, fin = false, rst = false, has_ack = false;
  ByteSpan payload;
};

// Takes the segments of a capture as it is read.
class SegmentSink {
 public:
  virtual ~SegmentSink() = default;
  // A segment that read_capture() would keep (payload, SYN, FIN or RST) of flow `index` (its
  // place in Capture::flows), travelling in direction `dir` (0: from the client). `flow` is
  // the flow as known so far (its problems and the SYN-ACK may still come).
  virtual void on_segment(std::size_t index, TcpFlow& flow, int dir, const SegmentView& s) = 0;
};

// Reads the capture frame by frame (one frame in memory at a time, pcap_next_ex) and hands
// every kept segment to `sink`; the returned Capture has the flows' endpoints, SYN facts and
// problems but no segments (TcpFlow::dir stays empty). Errors as read_capture().
std::expected<Capture, std::string> scan_capture(const std::string& path, SegmentSink& sink);

}  // namespace iwarp::trace
