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
//
// Cost and limits. Per segment the work is logarithmic in the number of holes: the held octets
// are counted as they come and go; the holes a segment opens or closes are found around the
// range it covers (each hole closed is visited once); held octets are stored once, as they
// arrive, and blocks merge by their extents only; and the search for FPDUs looks only at
// candidates the segment can complete, a bounded number of them within a bounded parse budget
// (finding FPDUs beyond a hole is an optimisation: what it does not find goes through the
// stream in order when the hole closes).
// What it holds is bounded per connection (Limits):
//  * memory: held octets plus kHeldEntryOverhead for every held block and every offset it
//    remembers (segment starts and ends, FPDUs found, placed or expected) count toward
//    Limits::max_held (kMaxHeldMemory, 64 MiB);
//  * holes: at most Limits::max_holes (kMaxHoles) open at once.
// A segment that would pass either limit is dropped, as TCP drops a segment its out-of-order
// queue has no room for, and counted (Stats::dropped_memory_limit, dropped_hole_limit, both
// included in dropped_segments). Nothing is lost: the octets are still missing, so the hole
// they were in stays open until a retransmission brings them. A segment at the in-order point
// is never dropped (it only ever shrinks what is held), so the stream always moves on.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "common/bytes.hpp"
#include "common/interval_set.hpp"
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

// What a connection's receiver may hold beyond its holes (see the file comment).
// 64 MiB: ten times Linux's largest default receive buffer (tcp_rmem's 6 MiB), so a real
// peer's window never reaches it, while one connection cannot take the host's memory.
inline constexpr std::size_t kMaxHeldMemory = 64 * 1024 * 1024;
// Charged per held block, per chunk of held octets and per remembered offset: a std::map or
// std::set node (three pointers, a colour, key and value: 48-80 octets with the allocator's
// header). A flood of 1-octet segments thus costs what it really takes, not 1 octet each.
inline constexpr std::size_t kHeldEntryOverhead = 64;
// Holes open at once. Linux keeps its out-of-order queue within the receive buffer and charges
// each queued segment its whole buffer (about 1-2 KiB, even for 1 octet), so with the default
// 6 MiB tcp_rmem it holds at most a few thousand separate ranges, and a SACK option reports
// only 3 or 4 of them. 4096 is above that, and keeps what is linear in the number of holes
// small: holes(), the QP's hole report, one event per hole.
inline constexpr std::size_t kMaxHoles = 4096;

class SegmentReceiver {
 public:
  struct Limits {
    std::size_t max_held = kMaxHeldMemory;  // held octets + kHeldEntryOverhead per entry
    std::size_t max_holes = kMaxHoles;
    // Look for whole FPDUs beyond holes and offer them to the visitor; false: hold every
    // octet beyond a hole for the stream (rnic's --beyond-holes hold: nothing to place).
    bool discover = true;
  };

  // `start` is the sequence number of stream offset 0 (the first octet after the MPA frame).
  SegmentReceiver(FramingConfig cfg, TcpSeq start) : cfg_(cfg), start_(start) {}
  SegmentReceiver(FramingConfig cfg, TcpSeq start, Limits limits)
      : cfg_(cfg), start_(start), limits_(limits) {}

  // One TCP segment. Octets before the in-order point are duplicates and dropped; octets
  // already held are kept as first received. A segment beyond the in-order point that would
  // pass a limit (Limits) is dropped and counted; its octets stay missing until retransmitted.
  void receive(TcpSeq seq, ByteSpan payload, SegmentVisitor& v);
  // In-order octets that went around the receiver (read straight into placed memory by the
  // live transport). Only while no hole is open.
  void advance(std::size_t n);

  std::uint64_t in_order() const { return next_; }  // stream offset of the in-order point
  TcpSeq next_seq() const { return start_ + static_cast<std::uint32_t>(next_); }
  bool has_holes() const { return !blocks_.empty(); }
  std::vector<Hole> holes() const;  // linear in the number of holes (at most max_holes)
  std::size_t hole_count() const { return blocks_.size(); }  // one before each held block
  std::size_t held_bytes() const { return held_octets_; }    // octets held beyond holes
  // What counts toward Limits::max_held: the held octets plus kHeldEntryOverhead for every
  // held block and chunk and every remembered offset.
  std::size_t held_memory() const;
  const Limits& limits() const { return limits_; }
  const FramingConfig& config() const { return cfg_; }

  struct Stats {
    std::uint64_t segments = 0, in_order_segments = 0, ooo_segments = 0;
    std::uint64_t duplicate_segments = 0, duplicate_bytes = 0;
    std::uint64_t holes_opened = 0, holes_closed = 0;
    std::uint64_t ooo_fpdus_found = 0, ooo_fpdus_placed = 0;
    // Segments dropped at a limit (the sum of the two after it); each waits for its
    // retransmission, as one a TCP receiver has no room for.
    std::uint64_t dropped_segments = 0;
    std::uint64_t dropped_memory_limit = 0;  // held_memory() would pass Limits::max_held
    std::uint64_t dropped_hole_limit = 0;    // it would open a hole past Limits::max_holes
    // Segments whose search for FPDUs beyond a hole stopped at its budget (kDiscoverBudget in
    // segment_receiver.cpp); what it did not find goes through the stream when the hole closes.
    std::uint64_t discovery_cut = 0;
    // Reassembly storage: octets copied into it (each is copied again when it is delivered,
    // unless an FPDU placed beyond its hole claimed it) and the most it held at once.
    std::uint64_t held_copied_bytes = 0;
    std::uint64_t peak_held_bytes = 0;
    // Loop steps taken in receive(): holes and blocks visited, runs delivered, FPDU starts and
    // chains looked at. Per segment it stays bounded (by the holes and blocks a segment
    // reaches, which it closes or merges, and by the discovery limits): a count, not a time,
    // so tests can hold the receiver to its logarithmic cost.
    std::uint64_t steps = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Claimed {
    std::uint32_t wire_length;
  };
  // Held octets are kept as they arrived, one chunk per range a segment added (never copied
  // again: blocks merge by their extents only); the blocks are the maximal runs of them.
  using Chunks = std::map<std::uint64_t, Bytes>;

  // Stores the octets of [off, off + data.size()) not held yet and merges the blocks it
  // touches (octets already held win).
  void insert(std::uint64_t off, ByteSpan data, SegmentVisitor& v);
  void add_chunk(std::uint64_t off, ByteSpan data);
  void deliver(SegmentVisitor& v);
  // Looks for whole FPDUs in the held block [block, bend) that the new octets
  // [changed, changed_end) completed. False when it stopped at its budget.
  bool discover(std::uint64_t block, std::uint64_t bend, std::uint64_t changed,
                std::uint64_t changed_end, SegmentVisitor& v);
  // Candidate FPDU starts for discover(), each with where it comes from (kFromMarker,
  // kFromChain bits in segment_receiver.cpp; 0 for a segment start).
  using Candidates = std::map<std::uint64_t, std::uint8_t>;
  // Starts the markers in [lo, bend) point back to (RFC 5044 §5), within the block.
  void add_marker_candidates(Candidates& cand, std::uint64_t block, std::uint64_t lo,
                             std::uint64_t bend, std::uint64_t changed_end);
  // The segment and chained starts nearest the new octets.
  void add_start_candidates(Candidates& cand, std::uint64_t lo, std::uint64_t bend,
                            std::uint64_t changed, std::uint64_t changed_end);
  // Drops the starts the new octets cannot have changed (and rewalks past kMaxRewalks).
  void drop_unchanged_candidates(Candidates& cand, std::uint64_t bend, std::uint64_t changed);
  // True when [s, s + w) overlaps an FPDU already found: a start inside a known FPDU is an
  // image of one in its payload, not a boundary.
  bool overlaps_known(std::uint64_t s, std::uint64_t w) const;
  // Follows the chain of FPDUs from start `c` and offers the trusted ones to the visitor.
  // False when it stopped at the budget.
  bool follow_chain(std::uint64_t c, std::uint8_t from, std::uint64_t bend, Bytes& ulpdu,
                    SegmentVisitor& v);
  // Offers chain[proven_from..] to the visitor (those not found before).
  void offer(std::vector<std::pair<OooFpdu, Bytes>>& chain, std::size_t proven_from,
             SegmentVisitor& v);
  // Parses a whole FPDU at `off` inside the held block ending at `bend`; false when it is not
  // all there or not trustworthy. Counts the octets it looked at in budget_used_.
  bool parse_at(std::uint64_t bend, std::uint64_t off, OooFpdu& out, Bytes& ulpdu);
  // Where the FPDU starting at `off` ends by its length field (nullopt: not held up to it).
  std::optional<std::uint64_t> fpdu_end_at(std::uint64_t off, std::uint64_t bend) const;
  Hole hole_before(std::uint64_t off) const;
  std::size_t entries() const;

  FramingConfig cfg_;
  TcpSeq start_;
  Limits limits_;
  std::uint64_t next_ = 0;  // in-order point (stream offset)
  // Non-adjacent runs of held octets beyond next_ (begin -> end): one hole before each.
  IntervalSet<std::uint64_t> blocks_;
  Chunks chunks_;                                  // the held octets, by offset
  std::size_t held_octets_ = 0;                    // sum of the chunks' sizes
  std::set<std::uint64_t> seg_starts_, seg_ends_;  // where received segments began / ended
  std::map<std::uint64_t, Claimed> claimed_;       // FPDUs placed beyond a hole
  std::map<std::uint64_t, std::uint32_t> known_;   // FPDUs already offered: start, wire length
  std::set<std::uint64_t> chained_;  // FPDU starts known from the FPDU before, not all there yet
  std::size_t budget_used_ = 0;      // octets parse_at looked at for the current segment
  Stats stats_;
};

}  // namespace iwarp::mpa
