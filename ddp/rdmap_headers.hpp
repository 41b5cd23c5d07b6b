// RDMAP message bodies that follow the DDP header (RFC 5040 §4.4, §4.8; RFC 7306 §4).
#pragma once

#include <cstdint>
#include <optional>

#include "common/bytes.hpp"
#include "common/strong_types.hpp"
#include "common/wire_error.hpp"

namespace iwarp::rdmap {

// RFC 5040 §4.4: Data Sink STag/TO, RDMA Read Message Size, Data Source STag/TO.
struct ReadRequest {
  STag sink_stag{0};
  TaggedOffset sink_to{0};
  std::uint32_t size = 0;
  STag src_stag{0};
  TaggedOffset src_to{0};
  void encode(Bytes& out) const;
  static ReadRequest decode(ByteSpan body28);
  friend bool operator==(const ReadRequest&, const ReadRequest&) = default;
};

// RFC 7306 §4.2.1 atomic operation codes.
enum class AtomicOp : std::uint8_t { FetchAdd = 0, Swap = 1, CompareSwap = 2 };
std::string_view atomic_op_name(std::uint8_t op);

// RFC 7306 §4.2.1: Rsvd(28)|AtomicOp(4), Request Identifier, Remote STag, Remote TO,
// Add or Swap Data, Add or Swap Mask, Compare Data, Compare Mask.
struct AtomicRequest {
  std::uint8_t op = 0;         // AtomicOp, raw
  std::uint32_t reserved = 0;  // upper 28 bits as received
  std::uint32_t request_id = 0;
  STag stag{0};
  TaggedOffset to{0};
  std::uint64_t add_swap_data = 0;
  std::uint64_t add_swap_mask = 0;
  std::uint64_t compare_data = 0;
  std::uint64_t compare_mask = 0;
  void encode(Bytes& out) const;
  static AtomicRequest decode(ByteSpan body52);
  friend bool operator==(const AtomicRequest&, const AtomicRequest&) = default;
};

// RFC 7306 §4.2.2: Original Request Identifier, Original Remote Data Value.
struct AtomicResponse {
  std::uint32_t request_id = 0;
  std::uint64_t original_value = 0;
  void encode(Bytes& out) const;
  static AtomicResponse decode(ByteSpan body12);
  friend bool operator==(const AtomicResponse&, const AtomicResponse&) = default;
};

// RFC 5040 §4.8 Terminate: Layer(4)|EType(4)|Error Code(8)|M|D|R|Rsvd(13), then when D is set
// the DDP Segment Length(16) and the terminated DDP header (14 or 18 octets, by its T bit), then
// when R is set the terminated RDMAP header (28 octets).
struct Terminate {
  std::uint8_t layer = 0, etype = 0, ecode = 0;
  bool m = false;  // DDP Segment Length valid
  bool d = false;  // DDP header included
  bool r = false;  // RDMAP header included
  std::uint16_t reserved = 0;
  // siw (Linux 6.1) fills the control word through little-endian bit-fields: Layer and EType
  // swap nibbles and M/D/R land in bits 0..2 of the third octet. Set when that layout was seen.
  bool siw_bitfield_quirk = false;
  std::uint16_t ddp_segment_length = 0;
  Bytes ddp_header;    // the terminated DDP header (14 or 18 octets) when d
  Bytes rdmap_header;  // the terminated RDMAP header (28 octets) when r

  // RFC layout always.
  void encode(Bytes& out) const;
  static Result<Terminate> decode(ByteSpan body);
  friend bool operator==(const Terminate&, const Terminate&) = default;
};

inline constexpr std::size_t kTerminatedRdmapHeaderSize = 28;

}  // namespace iwarp::rdmap
