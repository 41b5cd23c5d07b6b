// Protocol errors as values. Every error code maps one-to-one onto the Terminate message's
// Layer / Error Type / Error Code triple (RFC 5040 §7.4, RFC 5041 §7.2, RFC 5044 §8, RFC 6581
// §7), so whoever detects a violation already holds what the Terminate must carry.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

namespace iwarp {

// RFC 5040 §7.4.1 Terminate "Layer" nibble.
enum class TermLayer : std::uint8_t { Rdmap = 0x0, Ddp = 0x1, Llp = 0x2 };

struct TermCode {
  TermLayer layer;
  std::uint8_t etype;  // 4 bits
  std::uint8_t ecode;  // 8 bits
  friend constexpr bool operator==(TermCode, TermCode) = default;
};

enum class Errc : std::uint8_t {
  // Layer 2 (LLP = MPA), EType 0; RFC 5044 §8 codes 1-4, RFC 6581 §7 codes 5-7.
  MpaTcpLost,            // 0x01 TCP connection closed, terminated or lost
  MpaCrcError,           // 0x02 received MPA CRC does not match the computed value
  MpaMarkerError,        // 0x03 MPA Marker and ULPDU_Length mismatch (FPDU framing lost)
  MpaBadReqRep,          // 0x04 invalid MPA Request or Reply frame
  MpaLocalCatastrophic,  // 0x05 local catastrophic error
  MpaInsufficientIrd,    // 0x06 insufficient IRD resources
  MpaNoMatchingRtr,      // 0x07 no matching RTR model

  // Layer 1 (DDP). EType 0 local catastrophic; EType 1 tagged buffer; EType 2 untagged buffer.
  DdpLocalCatastrophic,        // 0/0x00
  DdpTaggedInvalidStag,        // 1/0x00
  DdpTaggedBaseBounds,         // 1/0x01
  DdpTaggedStagNotAssociated,  // 1/0x02
  DdpTaggedToWrap,             // 1/0x03
  DdpTaggedVersion,            // 1/0x04
  DdpUntaggedInvalidQn,        // 2/0x01
  DdpUntaggedNoBuffer,         // 2/0x02 invalid MSN: no buffer available
  DdpUntaggedMsnRange,         // 2/0x03 invalid MSN: MSN range is not valid
  DdpUntaggedInvalidMo,        // 2/0x04
  DdpUntaggedTooLong,          // 2/0x05 DDP message too long for available buffer
  DdpUntaggedVersion,          // 2/0x06

  // Layer 0 (RDMAP). EType 0 local catastrophic; 1 remote protection; 2 remote operation.
  RdmapLocalCatastrophic,     // 0/0x00
  RdmapInvalidStag,           // 1/0x00
  RdmapBaseBounds,            // 1/0x01
  RdmapAccessRights,          // 1/0x02
  RdmapStagNotAssociated,     // 1/0x03
  RdmapToWrap,                // 1/0x04
  RdmapProtCannotInvalidate,  // 1/0x09
  RdmapProtUnspecified,       // 1/0xff
  RdmapVersion,               // 2/0x05 invalid RDMAP version
  RdmapUnexpectedOpcode,      // 2/0x06
  RdmapCatastrophicStream,    // 2/0x07 catastrophic error, localized to RDMAP stream
  RdmapCatastrophicGlobal,    // 2/0x08
  RdmapOpCannotInvalidate,    // 2/0x09 STag cannot be invalidated
  RdmapOpUnspecified,         // 2/0xff
};

// The Terminate triple for an error code.
TermCode term_code(Errc e);
// Short name of the error code ("DDP tagged: invalid STag").
std::string_view errc_name(Errc e);
// Human description of a Terminate triple as received from a peer (any values).
std::string describe_term(std::uint8_t layer, std::uint8_t etype, std::uint8_t ecode);

// An error found on received bytes: the code (and so the Terminate triple), the RFC rule it
// breaks (a static string naming the section), what exactly was wrong, and where.
struct WireError {
  Errc code;
  const char* rule;          // e.g. "RFC 5044 §6.2: CRC must match"
  std::string detail;        // e.g. "got 0x1234abcd, computed 0x89abcdef"
  std::uint64_t offset = 0;  // stream offset of the offending frame, when known

  std::string to_string() const;
};

template <class T>
using Result = std::expected<T, WireError>;

inline std::unexpected<WireError> fail(Errc code, const char* rule, std::string detail = {}) {
  return std::unexpected<WireError>(WireError{code, rule, std::move(detail), 0});
}

}  // namespace iwarp
