// Cutting a message into DDP segments no larger than MULPDU (RFC 5041 §5: L on the last
// segment, MO or TO advancing), and the receiver's checks that a run of segments is one
// consistent message stream (RFC 5041 §7.2 error codes).
#pragma once

#include <array>
#include <vector>

#include "ddp/segment.hpp"

namespace iwarp::ddp {

// `whole` describes the message as one segment: its header (MO 0 / the first TO, the MSN),
// any RDMAP body, and the whole payload. The result views whole.payload. Each segment's ULPDU
// (header + body + payload) is at most `mulpdu` octets; a zero-length message is one segment.
// Fails when even the header does not fit.
Result<std::vector<Segment>> segment_message(const Segment& whole, std::size_t mulpdu);

// The ULPDU octets of a segment.
inline std::size_t ulpdu_size(const Segment& s) {
  return s.hdr.size() + s.info().body_size + s.payload.size();
}

// In-order checks across segments of one direction: MSN sequence per queue starting at 1,
// MO continuity inside an untagged message, STag and TO continuity inside a tagged one, no
// opcode change mid-message.
class SegmentChecker {
 public:
  Result<void> check(const Segment& s) { return check(s.hdr, s.payload.size()); }
  // The same for a segment whose payload is still arriving: `payload_length` is its full size.
  Result<void> check(const DdpHeader& h, std::size_t payload_length);

  // The MSN the next new message on `qn` must carry.
  Msn expected_msn(std::uint32_t qn) const { return queues_[qn].msn; }

 private:
  struct Untagged {
    Msn msn{1};  // RFC 5041 §5.3: MSN starts at 1 on each queue
    bool in_message = false;
    std::uint8_t opcode = 0;
    std::uint32_t mo = 0;
  };
  struct Tagged {
    bool in_message = false;
    std::uint8_t opcode = 0;
    STag stag{0};
    std::uint64_t next_to = 0;
  };
  std::array<Untagged, rdmap::kQueueCount> queues_{};
  Tagged tagged_{};
};

}  // namespace iwarp::ddp
