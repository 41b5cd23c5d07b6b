// Explanations: for each decoded event, one plain sentence saying what it means in RDMA terms
// and which RFC rule applies, with the event's own values (rnic decode --explain, and the
// sentences rnic replay --explain builds on). Pure functions over decoded values, driven by
// tables indexed by RDMAP opcode and by error code; the printers only append the sentence.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "common/wire_error.hpp"
#include "ddp/ddp_header.hpp"
#include "ddp/segment.hpp"
#include "mpa/mpa_frame.hpp"
#include "trace/trace_decoder.hpp"

namespace iwarp::trace {

using SegmentBody = decltype(ddp::Segment::body);

// Where a segment sits in its message. RFC 5041 §5.2 / §5.3: L marks the last segment; the
// index is counted by whoever saw the earlier segments (0: not known).
struct SegmentPlace {
  std::uint32_t index = 0;  // 1 for the first segment of its message
  bool last = true;
};

// What a DDP segment carrying an RDMAP message means. `body` may be null (not at hand);
// `payload` is the segment's ULP payload length. An opcode no RFC defines gets
// explain_reserved_opcode().
std::string explain_segment(const ddp::DdpHeader& h, const SegmentBody* body, std::uint32_t payload,
                            SegmentPlace place);

// An opcode no RFC defines (0xC..0xF): reserved, and what a receiver does with it.
std::string explain_reserved_opcode(std::uint8_t opcode);

// The rule a Terminate's error code says was broken, with its section ("the STag named ... is
// not valid ... (RFC 5041 §7.2)"): one specific sentence per Errc.
std::string_view terminate_rule(Errc e);
// The same for a triple as received: the matching Errc's rule, else what RFC 5040 §7.4.1 says of
// it (a local catastrophic error in any layer, or a value no RFC defines).
std::string explain_terminate_code(std::uint8_t layer, std::uint8_t etype, std::uint8_t ecode);

// What an MPA Request or Reply means: the negotiation it starts or settles (markers, CRC,
// revision, IRD/ORD, peer-to-peer RTR), or a reject.
std::string explain_mpa_frame(const mpa::MpaFrame& f);

// A violation the decoder found: the rule broken and the Terminate a receiver would send.
std::string explain_error(const WireError& e);

// A work request this endpoint's consumer posted (rnic ping and demo --explain say what their
// own side does): the RDMAP opcode of the message it goes out as (0x0 Write, 0x1 Read Request,
// 0x3-0x6 the Send family, 0x8 Immediate Data, 0xA Atomic Request) and its values.
struct PostedWork {
  std::uint8_t opcode = 0;
  std::uint32_t length = 0;  // octets of data (an atomic: 8)
  std::uint32_t stag = 0;    // the peer's STag (Write sink, Read source, atomic target), or the
                             // STag a Send with Invalidate names
  std::uint64_t to = 0;      // the TO at the peer (Write, Read, atomic)
};

// What posting it does on the wire and at the peer, and the rule behind it.
std::string explain_posted(const PostedWork& w);
// What its completion on this side's send CQ means (`ok`: success; else flushed or failed).
std::string explain_work_completion(const PostedWork& w, bool ok);

// Explains the records of rnic decode one by one, in the order they come; it counts each
// message's segments (per connection, direction and message) to say which segment this is.
class RecordExplainer {
 public:
  // Messages whose last segment has not been seen yet, counted at once: a capture cannot make
  // the explainer hold more (the segments of messages beyond it are explained without index).
  static constexpr std::size_t kMaxMessagesInProgress = 4096;

  std::string explain(const Record& r);

 private:
  // (connection, direction, tagged, STag or QN, MSN): segments seen of the message in progress.
  using Key = std::tuple<std::size_t, int, bool, std::uint32_t, std::uint32_t>;
  std::map<Key, std::uint32_t> in_progress_;
};

}  // namespace iwarp::trace
