// One DDP segment as carried in an FPDU's ULPDU: the DDP header, the RDMAP body its opcode
// defines, and the payload. parse_segment() applies every check that needs only the segment
// itself; checks across segments are in SegmentChecker (segmentation.hpp).
#pragma once

#include <optional>
#include <variant>

#include "ddp/ddp_header.hpp"
#include "ddp/rdmap_headers.hpp"

namespace iwarp::ddp {

struct Segment {
  DdpHeader hdr;
  // The RDMAP body for opcodes that have one.
  std::variant<std::monostate, rdmap::ReadRequest, rdmap::Terminate, rdmap::AtomicRequest,
               rdmap::AtomicResponse, std::uint64_t /* immediate data */>
      body;
  ByteSpan payload;  // ULP data (Write, Read Response, Send family); views the ULPDU

  const rdmap::OpcodeInfo& info() const { return *rdmap::opcode_info(hdr.opcode); }
};

Result<Segment> parse_segment(ByteSpan ulpdu);

// Serialises a segment: header, body, payload.
void encode_segment(const Segment& s, Bytes& out);

// One line: "Send QN 0 MSN 3 MO 0 L len 16" / "RDMA Write STag 0x1234 TO 0x0 L len 64".
std::string describe(const Segment& s);

}  // namespace iwarp::ddp
