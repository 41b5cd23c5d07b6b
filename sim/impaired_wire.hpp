// A simulated impaired wire under a live connection (a simulation: the kernel's TCP has
// already put the octets in order). The received stream is cut again into TCP segments the way
// an RFC 5044 §8 sender cuts it (each segment starts with an FPDU and holds whole FPDUs up to
// the MSS; a larger FPDU spans several), and the segments are presented in a seeded disorder:
// some are held back and arrive later, as a retransmission would, some arrive twice, some
// arrive again as an overlapping retransmission. The same disorder drives replay permutations.
#pragma once

#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "common/bytes.hpp"
#include "common/strong_types.hpp"
#include "mpa/fpdu_reader.hpp"
#include "rnic/rx_segment_shaper.hpp"

namespace iwarp::sim {

struct WireImpairment {
  double reorder = 0;  // probability that a segment is held back
  double dup = 0;      // probability that a segment arrives twice (or an overlapping retransmit)
  unsigned delay = 4;  // a held segment arrives after 1..delay later segments
  std::uint64_t seed = 1;
  std::size_t mss = 0;           // segment size; 0: the connection's EMSS
  std::string describe() const;  // "reorder=0.3,dup=0.05,delay=4,seed=7"
};

// Parses "reorder=P,dup=P,delay=N,seed=S,mss=N" (any subset, any order).
std::expected<WireImpairment, std::string> parse_wire_impairment(std::string_view spec);

struct WireSegment {
  TcpSeq seq;
  Bytes payload;
};
using SegmentOut = std::function<void(WireSegment)>;

// Sans-I/O: takes segments in order and emits them in a seeded disorder. Every octet comes out
// at least once.
class SegmentDisorder {
 public:
  explicit SegmentDisorder(const WireImpairment& w) : w_(w), rng_(w.seed) {}
  void push(WireSegment s, const SegmentOut& out);
  // Emits everything held (the retransmissions that end a burst).
  void flush(const SegmentOut& out);
  bool holding() const { return !held_.empty(); }

  struct Stats {
    std::uint64_t segments = 0, held = 0, duplicated = 0, overlapped = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  bool chance(double p);
  struct Held {
    WireSegment seg;
    unsigned due;  // released after this many more segments
  };
  WireImpairment w_;
  std::mt19937_64 rng_;
  std::deque<Held> held_;
  Stats stats_;
};

// Sans-I/O: cuts one direction's MPA stream (Full Operation) into FPDU-aligned segments of at
// most `mss` octets, numbered from `start`.
class StreamCutter {
 public:
  StreamCutter(mpa::FramingConfig cfg, std::size_t mss, TcpSeq start);
  void push(ByteSpan data, const SegmentOut& out);
  // Emits the octets still waiting for the rest of their FPDU (the stream paused).
  void flush(const SegmentOut& out);

 private:
  class Bounds;
  void emit_ready(const SegmentOut& out, bool all);
  mpa::FramingConfig cfg_;
  std::size_t mss_;
  TcpSeq next_;
  std::uint64_t pos_ = 0;                // stream offset of pending_[0]
  Bytes pending_;                        // octets not yet cut
  std::deque<std::uint64_t> fpdu_ends_;  // known FPDU ends (stream offsets) within pending_
  std::optional<mpa::FpduReader> scan_;
  std::shared_ptr<Bounds> bounds_;
};

// Both together, for a live connection.
class ImpairedWire {
 public:
  ImpairedWire(const WireImpairment& w, mpa::FramingConfig cfg, std::size_t mss,
               TcpSeq start = TcpSeq{0})
      : cutter_(cfg, w.mss ? w.mss : mss, start), disorder_(w) {}
  void push(ByteSpan data, const SegmentOut& out);
  void flush(const SegmentOut& out);
  bool holding() const { return disorder_.holding(); }
  const SegmentDisorder::Stats& stats() const { return disorder_.stats(); }

 private:
  StreamCutter cutter_;
  SegmentDisorder disorder_;
};

// Makes the shaper a live connection's QP receives through (CmOptions::rx_shaper): an
// ImpairedWire with `w`, cut at the connection's EMSS unless w.mss says otherwise.
rnic::RxShaperFactory impaired_wire_shaper(const WireImpairment& w);

}  // namespace iwarp::sim
