// MPA Request and Reply frames (RFC 5044 §7.1) with the RFC 6581 enhanced-mode private data
// prefix (IRD/ORD and the peer-to-peer control flags).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/bytes.hpp"
#include "common/wire_error.hpp"

namespace iwarp::mpa {

inline constexpr std::string_view kRequestKey = "MPA ID Req Frame";
inline constexpr std::string_view kReplyKey = "MPA ID Rep Frame";
inline constexpr std::size_t kKeySize = 16;
inline constexpr std::size_t kFrameHeaderSize = 20;  // key, flags, rev, PD_Length
inline constexpr std::size_t kMaxPrivateData = 512;  // RFC 5044 §7.1 PD_Length
inline constexpr std::size_t kEnhancedPrefixSize = 4;
inline constexpr std::uint16_t kMaxIrdOrd = 0x3FFF;  // RFC 6581 §5: 14-bit IRD and ORD

// Flag bits of the octet after the key (RFC 5044 §7.1, RFC 6581 §5).
inline constexpr std::uint8_t kFlagMarkers = 0x80;
inline constexpr std::uint8_t kFlagCrc = 0x40;
inline constexpr std::uint8_t kFlagReject = 0x20;
inline constexpr std::uint8_t kFlagEnhanced = 0x10;  // RFC 6581: "Res" bit 3 -> enhanced mode
inline constexpr std::uint8_t kFlagReservedMask = 0x0F;

enum class FrameKind : std::uint8_t { Request, Reply };

// RFC 6581 §5 RTR message types: zero-length Send (B), RDMA Write (C) or RDMA Read (D).
enum class RtrType : std::uint8_t { None = 0, Send = 1, Write = 2, Read = 4 };
using RtrMask = std::uint8_t;  // OR of RtrType values
inline constexpr RtrMask kAllRtr = 1 | 2 | 4;
std::string_view rtr_name(RtrType t);
std::string rtr_mask_name(RtrMask m);  // "write|read", "none"

// The 4-octet RFC 6581 §5 prefix: A | B | IRD(14) , C | D | ORD(14).
struct EnhancedParams {
  bool peer_to_peer = false;  // A
  std::uint16_t ird = 0;
  RtrMask rtr = 0;  // B/C/D as RtrType bits
  std::uint16_t ord = 0;
  friend bool operator==(const EnhancedParams&, const EnhancedParams&) = default;
};

struct MpaFrame {
  FrameKind kind = FrameKind::Request;
  bool markers = false;       // M: the sender of this frame wants to receive markers
  bool crc = false;           // C
  bool reject = false;        // R (Reply only)
  bool enhanced = false;      // RFC 6581 enhanced connection establishment
  std::uint8_t reserved = 0;  // the four reserved flag bits as received
  std::uint8_t revision = 1;
  std::optional<EnhancedParams> params;  // present when enhanced and PD holds the prefix
  Bytes private_data;                    // the ULP's private data (after any prefix)

  // Serialises the frame. The enhanced prefix is written when `params` is set.
  Bytes encode() const;
  std::size_t wire_size() const;
  friend bool operator==(const MpaFrame&, const MpaFrame&) = default;
};

// Length of the whole frame from its header; nullopt while fewer than 20 octets are given.
std::optional<std::size_t> frame_size_from_header(ByteSpan header);

// Parses a complete frame (header + private data) of the expected kind.
Result<MpaFrame> decode_frame(ByteSpan frame, FrameKind expected);

// The frame's fields as one line, e.g. "MPA Request rev 2 M=0 C=1 R=0 H=1 IRD 1 ORD 1 pd 0".
std::string describe(const MpaFrame& f);

}  // namespace iwarp::mpa
