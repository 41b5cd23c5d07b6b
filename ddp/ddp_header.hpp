// DDP segment headers (RFC 5041 §5) with the RDMAP control octet (RFC 5040 §4.1).
//   Tagged   (14 octets): T=1|L|Rsvd(4)|DV(2) , RV(2)|Rsvd(2)|Opcode(4) , STag(32) , TO(64)
//   Untagged (18 octets): T=0|L|Rsvd(4)|DV(2) , RV(2)|Rsvd(2)|Opcode(4) , RsvdULP(32) ,
//                         QN(32) , MSN(32) , MO(32)
#pragma once

#include <cstdint>

#include "common/bytes.hpp"
#include "common/strong_types.hpp"
#include "common/wire_error.hpp"
#include "ddp/rdmap_opcode.hpp"

namespace iwarp::ddp {

inline constexpr std::size_t kTaggedHeaderSize = 14;
inline constexpr std::size_t kUntaggedHeaderSize = 18;
inline constexpr std::uint8_t kDdpVersion = 1;    // RFC 5041 §5.1 DV
inline constexpr std::uint8_t kRdmapVersion = 1;  // RFC 5040 §4.1 RV

inline constexpr std::uint8_t kFlagTagged = 0x80;
inline constexpr std::uint8_t kFlagLast = 0x40;
inline constexpr std::uint8_t kDdpRsvdMask = 0x3C;
inline constexpr std::uint8_t kDvMask = 0x03;
inline constexpr std::uint8_t kRvMask = 0xC0;
inline constexpr std::uint8_t kRdmapRsvdMask = 0x30;
inline constexpr std::uint8_t kOpcodeMask = 0x0F;

struct DdpHeader {
  bool tagged = false;
  bool last = true;
  std::uint8_t ddp_rsvd = 0;  // 4 reserved bits, zero when sent (RFC 5041 §5.1)
  std::uint8_t dv = kDdpVersion;
  std::uint8_t rv = kRdmapVersion;
  std::uint8_t rdmap_rsvd = 0;  // 2 reserved bits (RFC 5040 §4.1)
  std::uint8_t opcode = 0;      // raw 4 bits; see rdmap::opcode_info()

  // Tagged buffer model.
  STag stag{0};
  TaggedOffset to{0};
  // Untagged buffer model. RsvdULP carries the STag to invalidate for Send with Invalidate.
  std::uint32_t rsvd_ulp = 0;
  QueueNumber qn{0};
  Msn msn{0};
  MessageOffset mo{0};

  std::size_t size() const { return tagged ? kTaggedHeaderSize : kUntaggedHeaderSize; }
  rdmap::Opcode op() const { return static_cast<rdmap::Opcode>(opcode); }

  void encode(Bytes& out) const;
  // Parses the header only: lengths and the two version fields (RFC 5041 §7.2 / RFC 5040
  // §7.4 codes). Semantic checks are in parse_segment().
  static Result<DdpHeader> decode(ByteSpan ulpdu);

  friend bool operator==(const DdpHeader&, const DdpHeader&) = default;
};

// Convenience constructors.
DdpHeader tagged_header(rdmap::Opcode op, STag stag, TaggedOffset to, bool last = true);
DdpHeader untagged_header(rdmap::Opcode op, QueueNumber qn, Msn msn, MessageOffset mo,
                          bool last = true, std::uint32_t rsvd_ulp = 0);

}  // namespace iwarp::ddp
