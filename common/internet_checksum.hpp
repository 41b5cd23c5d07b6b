// The Internet checksum of IPv4 and TCP headers (RFC 1071), shared by what writes frames
// (trace::PcapWriter) and what checks frames off the wire (rnic::SegmentTap).
#pragma once

#include <cstdint>

#include "common/bytes.hpp"

namespace iwarp {

// One's-complement sum of 16-bit big-endian words (RFC 1071 §4.1), not yet folded; an odd
// trailing octet is padded with a zero octet on the right.
constexpr std::uint64_t checksum_add_words(ByteSpan data, std::uint64_t acc) {
  std::size_t i = 0;
  for (; i + 1 < data.size(); i += 2) acc += load_be16(&data[i]);
  if (i < data.size()) acc += std::uint64_t{data[i]} << 8;
  return acc;
}

// Folds the carries back in: a 16-bit one's-complement sum.
constexpr std::uint32_t checksum_fold(std::uint64_t acc) {
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return static_cast<std::uint32_t>(acc);
}

// RFC 1071 Internet checksum over `data` starting from a partial sum. Over data that includes
// its own correct checksum field the result is 0.
constexpr std::uint16_t internet_checksum(ByteSpan data, std::uint32_t initial = 0) {
  return static_cast<std::uint16_t>(~checksum_fold(checksum_add_words(data, initial)) & 0xffff);
}

}  // namespace iwarp
