// Feeding a queue pair's receive side with TCP segments directly, without a socket: what
// `rnic replay` and the fuzz target use to present a capture's segments, in any order, and to
// see what the segment path made of them. QueuePair implements it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/bytes.hpp"
#include "common/strong_types.hpp"
#include "mpa/segment_receiver.hpp"

namespace iwarp::rnic {

// Per TCP hole: what arrived beyond it and was placed, and whose completions, doorbells and
// Terminates wait for the hole to close (qp_ooo.cpp).
struct HoleInfo {
  mpa::Hole hole;
  std::uint32_t sends = 0;                 // Send messages completed beyond it: CQEs held back
  std::vector<std::uint64_t> send_wr_ids;  // the receive WQEs they completed, in order
  std::uint32_t read_responses = 0;        // Read Responses completed beyond it: Read WRs held back
  std::uint32_t read_requests = 0;         // Read Requests queued beyond it: doorbell held back
  std::uint32_t writes = 0;                // Write segments placed beyond it
  std::uint32_t placed_fpdus = 0;          // all FPDUs placed beyond it
  std::uint32_t deferred_errors = 0;       // invalid FPDUs whose Terminate waits for it
};

// What the segment path does with data that arrives beyond a TCP hole (`--beyond-holes`; the
// three arms of the placement benchmark, docs/beyond-holes.md):
//  * Place: whole FPDUs found beyond it are placed at once, their completions deferred until
//    it closes (qp_ooo.cpp; seed 004); the default.
//  * Hold: they are kept in the segment receiver and placed in order when it closes (one more
//    copy of every octet beyond a hole, and the memory to hold them).
//  * Discard: every segment beyond the in-order point is dropped, as by a NIC that does no
//    reassembly; the octets come again (a retransmission, or in the real-segment mode the
//    socket's in-order stream).
enum class BeyondHoles : std::uint8_t { Place, Hold, Discard };
inline const char* to_string(BeyondHoles b) {
  switch (b) {
    case BeyondHoles::Hold:
      return "hold";
    case BeyondHoles::Discard:
      return "discard";
    default:
      return "place";
  }
}

// What a queued segment costs besides its octets (handler, allocation, bookkeeping), so that a
// flood of tiny segments meets the same bound as a few large ones.
inline constexpr std::int64_t kPendingSegmentOverhead = 256;

class SegmentInput {
 public:
  virtual ~SegmentInput() = default;
  // One received TCP segment (any thread): it joins the segment path like one read from a
  // socket, in any order. With `pending` (a live segment tap, which must bound what it has
  // queued), the payload's size plus kPendingSegmentOverhead is taken off it once the segment
  // has been handled or dropped, and the segment is taken only within RxOptions::tap_window of
  // the in-order point.
  virtual void receive_segment(TcpSeq seq, Bytes payload,
                               std::shared_ptr<std::atomic<std::int64_t>> pending = {}) = 0;
  // What receive_segment's handler does (no tap), done at once: on the engine thread only (in
  // a handler the caller posted; elsewhere std::logic_error), on octets the caller keeps valid
  // until it returns. `rnic replay` hands a batch of segments over in one handler this way,
  // their octets in one buffer the handler shares, instead of a handler and a buffer each.
  virtual void receive_segment_on_engine(TcpSeq seq, ByteSpan payload) = 0;
  // The peer's FIN (any thread): as if the socket reached end of stream, once every octet
  // before `seq` has arrived.
  virtual void receive_fin(TcpSeq seq) = 0;
  // The holes open now and what waits on each (any thread; asked of the engine, which gets at
  // most 5 s to answer: a busy engine gives an empty report).
  virtual std::vector<HoleInfo> hole_report() const = 0;
  virtual mpa::SegmentReceiver::Stats segment_stats() const = 0;
};

}  // namespace iwarp::rnic
