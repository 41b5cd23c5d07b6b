// The receive side of one MPA direction as a NIC sees it: TCP segments (sequence number and
// payload) in any order, with duplicates, overlaps and retransmissions. Sans I/O.
//
// It keeps the in-order point and the holes (missing ranges with data beyond them). Octets at
// the in-order point go to the visitor as a stream (for the FpduReader). Beyond a hole it looks
// for whole FPDUs it can trust (RFC 5044 §5 and §8): with markers, from a marker's FPDUPTR;
// without, where a segment starts (FPDU alignment: a sender starts each segment with an FPDU),
// the CRC checked when it is in use, and the FPDU ending where a segment ended when it is not.
// The visitor may place such an FPDU at once; the receiver then skips its octets when the in-
// order point reaches it and tells the visitor (on_claimed_reached), which is where deferred
// completions are released. FPDUs it cannot trust or the visitor does not take are kept and go
// through the stream when their hole closes.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "common/bytes.hpp"
#include "common/strong_types.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/stream_decoder.hpp"

namespace iwarp::mpa {

// A missing range [begin, end) of stream offsets, with data beyond it.
struct Hole {
  std::uint64_t begin = 0, end = 0;
  friend bool operator==(const Hole&, const Hole&) = default;
};

// A whole FPDU found beyond a hole.
struct OooFpdu {
  std::uint64_t offset = 0;       // stream offset of its first octet (a marker there included)
  std::uint32_t wire_length = 0;  // octets in the stream: markers, length, ULPDU, pad, CRC
  std::uint16_t ulpdu_length = 0;
  ByteSpan ulpdu;  // markers removed; valid during the call
  CrcStatus crc = CrcStatus::NotChecked;
};

enum class OooVerdict : std::uint8_t {
  Placed,   // placed now; skip its octets later and call on_claimed_reached
  Wait,     // cannot be placed yet: deliver it through the stream when its hole closes
  Invalid,  // a protocol violation: deliver it through the stream (its Terminate, in order)
};

class SegmentVisitor {
 public:
  virtual ~SegmentVisitor() = default;
  // Octets at the in-order point, in stream order.
  virtual void on_stream(ByteSpan bytes) = 0;
  // A trusted FPDU beyond `hole` (the nearest hole before it).
  virtual OooVerdict on_ooo_fpdu(const OooFpdu& f, const Hole& hole) = 0;
  // The in-order point reached an FPDU placed by on_ooo_fpdu; its octets are not delivered.
  virtual void on_claimed_reached(std::uint64_t offset, std::uint32_t wire_length) = 0;
  virtual void on_hole_opened(const Hole&) {}
  // `first` when it was the hole at the in-order point (so delivery moves on).
  virtual void on_hole_closed(const Hole&, bool first) { (void)first; }
  virtual void on_duplicate(std::uint64_t offset, std::size_t length) {
    (void)offset;
    (void)length;
  }
};

class SegmentReceiver {
 public:
  // `start` is the sequence number of stream offset 0 (the first octet after the MPA frame).
  SegmentReceiver(FramingConfig cfg, TcpSeq start) : cfg_(cfg), start_(start) {}

  // One TCP segment. Octets before the in-order point are duplicates and dropped; octets
  // already held are kept as first received.
  void receive(TcpSeq seq, ByteSpan payload, SegmentVisitor& v);
  // In-order octets that went around the receiver (read straight into placed memory by the
  // live transport). Only while no hole is open.
  void advance(std::size_t n);

  std::uint64_t in_order() const { return next_; }  // stream offset of the in-order point
  TcpSeq next_seq() const { return start_ + static_cast<std::uint32_t>(next_); }
  bool has_holes() const { return !held_.empty(); }
  std::vector<Hole> holes() const;
  std::size_t held_bytes() const;
  const FramingConfig& config() const { return cfg_; }

  struct Stats {
    std::uint64_t segments = 0, in_order_segments = 0, ooo_segments = 0;
    std::uint64_t duplicate_segments = 0, duplicate_bytes = 0;
    std::uint64_t holes_opened = 0, holes_closed = 0;
    std::uint64_t ooo_fpdus_found = 0, ooo_fpdus_placed = 0, dropped_segments = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Claimed {
    std::uint32_t wire_length;
  };
  void insert(std::uint64_t off, ByteSpan data, SegmentVisitor& v);
  void deliver(SegmentVisitor& v);
  // Looks for whole FPDUs in the held block at `block` that octets from `changed` on completed.
  void discover(std::uint64_t block, std::uint64_t changed, SegmentVisitor& v);
  // Parses a whole FPDU at `off` inside the held block starting at `block`; false when it
  // is not all there or not trustworthy.
  bool parse_at(std::uint64_t block, std::uint64_t off, OooFpdu& out, Bytes& ulpdu) const;
  Hole hole_before(std::uint64_t off) const;

  FramingConfig cfg_;
  TcpSeq start_;
  std::uint64_t next_ = 0;                         // in-order point (stream offset)
  std::map<std::uint64_t, Bytes> held_;            // non-adjacent blocks beyond next_, by offset
  std::set<std::uint64_t> seg_starts_, seg_ends_;  // where received segments began / ended
  std::map<std::uint64_t, Claimed> claimed_;       // FPDUs placed beyond a hole
  std::map<std::uint64_t, std::uint32_t> known_;   // FPDUs already offered: start, wire length
  std::set<std::uint64_t> chained_;  // FPDU starts known from the FPDU before, not all there yet
  Stats stats_;
};

}  // namespace iwarp::mpa
