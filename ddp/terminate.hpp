// Building the Terminate message (RFC 5040 §4.8) for an error: its Layer / EType / Error Code
// triple, and which headers of the offending segment it carries back to the peer.
#pragma once

#include <cstdint>

#include "common/bytes.hpp"
#include "common/wire_error.hpp"
#include "ddp/rdmap_headers.hpp"

namespace iwarp::rdmap {

// The Terminate that reports `code`, carrying the headers of the segment that failed where
// RFC 5040 §4.8 has the layer name them:
//   - the DDP header (D, with its DDP Segment Length and M) for DDP-layer errors and RDMAP
//     remote protection and remote operation errors, when `ddp_hdr` is given;
//   - none for LLP (MPA) errors, local catastrophic errors (EType 0), and version or opcode
//     errors (RFC 5041 §7.2, RFC 5040 §7.4: those headers cannot be trusted);
//   - the RDMAP header (R) as well for an RDMAP remote protection error (EType 1) when
//     `rdmap_hdr` is the 28-octet header of a Read Request.
// `segment_length` is the failed segment's ULPDU length (the DDP Segment Length field).
Terminate make_terminate(Errc code, ByteSpan ddp_hdr = {}, ByteSpan rdmap_hdr = {},
                         std::uint16_t segment_length = 0);

}  // namespace iwarp::rdmap
