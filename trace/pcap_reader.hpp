// Reads TCP conversations out of a capture file (libpcap): Ethernet, Linux cooked capture
// (SLL and SLL2), raw IP and BSD loopback link types, IPv4 and IPv6. Pairs the two
// directions of each connection and keeps every segment with its sequence number, in capture
// order, for reassembly or for replay as segments.
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <memory>
#include <stdexcept>
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

// Where a payload lies in the capture file: not known (it is held in memory).
inline constexpr std::uint64_t kNotInFile = UINT64_MAX;

struct TcpSegment {
  std::uint64_t frame = 0;    // 1-based frame number in the file
  std::uint64_t time_us = 0;  // capture timestamp, microseconds since the epoch
  TcpSeq seq;                 // sequence number of the first payload octet (or of the SYN/FIN)
  TcpSeq ack;
  bool syn = false, fin = false, rst = false, has_ack = false;
  // read_capture(path, {.payloads_in_file = true}): the payload stays in the file, `length`
  // octets at file position `file_offset` (read back with PayloadReader), and `payload` is
  // empty. kNotInFile: the payload is in `payload`. (In this order, 64 octets: one is kept per
  // segment while a capture is read.)
  std::uint32_t length = 0;
  Bytes payload;  // held in memory (read_capture's default)
  std::uint64_t file_offset = kNotInFile;
  bool in_file() const { return file_offset != kNotInFile; }
  std::size_t size() const { return in_file() ? length : payload.size(); }  // payload octets
};
static_assert(sizeof(TcpSegment) <= 64, "one is kept per segment while a capture is read");

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
  // read_capture(path, {.payloads_in_file = true}): the file the segments' payloads are read
  // back from.
  std::shared_ptr<const class CaptureFile> file;
  // Frames taken out after the capture was read (`rnic replay --drop`), in ascending order: a
  // second read of the file (rescan_capture) leaves them out too.
  std::vector<std::uint64_t> left_out;
};

struct ReadOptions {
  // Keep each payload's place in the file instead of the payload (rnic replay: its memory
  // then does not grow with the octets the capture carries). A payload that is not one run
  // of the file's octets is held in memory all the same.
  bool payloads_in_file = false;
  // With payloads_in_file: a pipe ("-" or a named pipe) is first copied into an unnamed
  // temporary file (copy_to_unnamed_file), which is then read as the capture file; without it
  // a pipe is read once, its payloads held.
  bool copy_pipe = false;
};

// Reads all TCP flows. Fatal problems (cannot open, unsupported link type, not a capture) are
// one-line errors naming the file; per-frame problems land in the flow's `problems`.
std::expected<Capture, std::string> read_capture(const std::string& path,
                                                 const ReadOptions& opts = {});

// The capture file a Capture read with payloads_in_file refers to: opened once (libpcap reads
// it through a duplicate descriptor; a file renamed over its path later is not read), its size
// and modification and status change times noted, so that a file changed since it was read is
// refused rather than read as other octets.
class CaptureFile {
 public:
  // Takes `fd`, open on `path`, when it is a regular file; null (and no error) otherwise, the
  // caller keeping fd (a pipe cannot be read twice).
  static std::expected<std::shared_ptr<const CaptureFile>, std::string> adopt(
      int fd, const std::string& path);
  ~CaptureFile();
  CaptureFile(const CaptureFile&) = delete;
  CaptureFile& operator=(const CaptureFile&) = delete;
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  // Empty when the file is still the one opened; else one line saying what changed.
  std::string changed() const;

 private:
  CaptureFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
  std::uint64_t size_ = 0;
  std::int64_t mtime_ns_ = 0, ctime_ns_ = 0;
};

// Reads payloads back from a CaptureFile through a read-ahead window that grows to kReadAhead
// octets while what it reads ahead is used, so that a pass over a connection's segments in capture
// order costs about one pread per window, not one per segment. Not thread-safe: one per pass.
class PayloadReader {
 public:
  static constexpr std::size_t kReadAhead = 1u << 20;
  static constexpr std::size_t kFirstAhead = 64u << 10;
  static constexpr std::uint64_t kNear = 4096;
  explicit PayloadReader(std::shared_ptr<const CaptureFile> file) : file_(std::move(file)) {}
  // The segment's payload: `s.payload` when held, else its octets in the file (valid until
  // the next call). Throws CaptureChanged when the file is shorter or changed since it was read.
  ByteSpan payload(const TcpSegment& s);
  ByteSpan read(std::uint64_t offset, std::uint32_t length);
  std::uint64_t octets_read() const { return read_total_; }  // from the file, in all
  std::uint64_t octets_served() const { return served_total_; }
  std::uint64_t refills() const { return refills_; }  // preads (one per window, mostly)

 private:
  std::shared_ptr<const CaptureFile> file_;
  Bytes window_;
  std::uint64_t window_at_ = 0;
  std::size_t ahead_ = 0;   // octets the last refill read ahead (0: just what was asked)
  std::size_t served_ = 0;  // octets served from the window since it was filled
  std::size_t asked_ = 0;   // of which the refill was for
  std::uint64_t read_total_ = 0, served_total_ = 0, refills_ = 0;
};

// A capture file that changed (or became unreadable) between the passes that read it.
class CaptureChanged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A segment as scan_capture() hands it over: `payload` points into the frame libpcap holds and
// is valid only during the call.
struct SegmentView {
  std::uint64_t frame = 0, time_us = 0;
  TcpSeq seq, ack;
  bool syn = false, fin = false, rst = false, has_ack = false;
  ByteSpan payload;
  std::uint64_t file_offset = kNotInFile;  // where `payload` lies in the file, when known
};

// The segment a view shows, to keep: its payload's place in the file when `in_file` and the
// view knows it (SegmentView::file_offset), else a copy of its payload.
TcpSegment kept_segment(const SegmentView& v, bool in_file = true);

// Takes the segments of a capture as it is read.
class SegmentSink {
 public:
  virtual ~SegmentSink() = default;
  // A segment that read_capture() would keep (payload, SYN, FIN or RST) of flow `index` (its
  // place in Capture::flows), travelling in direction `dir` (0: from the client). `flow` is
  // the flow as known so far (its problems and the SYN-ACK may still come).
  virtual void on_segment(std::size_t index, TcpFlow& flow, int dir, const SegmentView& s) = 0;
  // True once the sink needs no more segments: the scan stops before the next frame.
  virtual bool done() const { return false; }
};

// Reads the capture frame by frame (one frame in memory at a time, pcap_next_ex) and hands
// every kept segment to `sink`; the returned Capture has the flows' endpoints, SYN facts and
// problems but no segments (TcpFlow::dir stays empty). Errors as read_capture().
std::expected<Capture, std::string> scan_capture(const std::string& path, SegmentSink& sink);

// Copies what `fd` gives until its end (a pipe's octets) into a new unnamed file in $TMPDIR
// (/tmp when it is unset or empty), which goes when its last descriptor closes, even if the
// program is killed: O_TMPFILE, or where the file system has none, a file made with mkstemp()
// and unlinked at once. Returns a descriptor of it (O_RDWR, position 0). Fails in one line
// naming `path` (the pipe, as the user gave it) and the directory when the file cannot be made
// or written (no room left) or `fd` cannot be read; the partial file goes then. Its size is the
// pipe's: on a tmpfs it is memory, on a disk it is disk.
std::expected<int, std::string> copy_to_unnamed_file(int fd, const std::string& path);

// scan_capture() of a file opened once and kept, as read_capture() with payloads_in_file does:
// each segment says where its payload lies in the file (SegmentView::file_offset, when it is one
// run of the file's octets), and the Capture's `file` is set when the path is a regular file
// (null for a pipe or "-", which can be read only once), so that rescan_capture() can read it
// again. With `copy_pipe`, a pipe or "-" is first copied into an unnamed temporary file
// (copy_to_unnamed_file), which is read instead and is the Capture's `file` (named `path` in
// every message). Errors as read_capture().
std::expected<Capture, std::string> scan_capture_file(const std::string& path, SegmentSink& sink,
                                                      bool copy_pipe = false);

// scan_capture() again over a capture read with payloads_in_file, from the file it was read
// from (the same open file: a file renamed over its path is not read): the same flows, in the
// same order, with the same segments (`rnic replay` makes its steps as it reads the file a
// second time). Throws CaptureChanged when the file changed since it was first read (checked
// before and after) or cannot be read again. Reads through a file position of its own (the
// open file opened again through /proc/self/fd; without /proc, a duplicate of the descriptor,
// whose position it shares: then one rescan at a time per file). With `positions`, each segment
// says where its payload lies in the file, as scan_capture_file().
std::expected<Capture, std::string> rescan_capture(const CaptureFile& file, SegmentSink& sink,
                                                   bool positions = false);

}  // namespace iwarp::trace
