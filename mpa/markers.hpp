// MPA marker arithmetic (RFC 5044 §4.3, §5), in one place. Positions are stream octets counted
// from the first octet of Full Operation: a Marker is placed immediately before the first FPDU
// and then every 512 octets. A Marker immediately before an FPDU's ULPDU_Length belongs to that
// FPDU, so an FPDU "starts" at such a Marker and its FPDUPTR is 0; FPDUPTR of any Marker is the
// distance back from the Marker to the first octet of its FPDU.
#pragma once

#include <cstddef>
#include <cstdint>

namespace iwarp::mpa {

inline constexpr std::size_t kMarkerSize = 4;
inline constexpr std::size_t kMarkerInterval = 512;

constexpr bool is_marker_position(std::uint64_t pos) {
  return pos % kMarkerInterval == 0;
}

// Octets from `pos` up to the next marker position (kMarkerInterval when `pos` is one).
constexpr std::uint64_t octets_to_next_marker(std::uint64_t pos) {
  return kMarkerInterval - pos % kMarkerInterval;
}

// The first marker position at or after `pos`.
constexpr std::uint64_t first_marker_at_or_after(std::uint64_t pos) {
  return (pos + kMarkerInterval - 1) / kMarkerInterval * kMarkerInterval;
}

// How many marker positions lie in [begin, end).
constexpr std::uint64_t markers_in(std::uint64_t begin, std::uint64_t end) {
  return (end + kMarkerInterval - 1) / kMarkerInterval -
         (begin + kMarkerInterval - 1) / kMarkerInterval;
}

// The stream position right after `n` FPDU octets (length field .. CRC) that start at `pos`,
// markers skipped: a marker at `pos` is taken before the first octet, one due right after the
// last octet is not (it belongs to what follows). With n == 0 it is `pos`.
constexpr std::uint64_t logical_to_wire(std::uint64_t pos, std::uint64_t n) {
  if (n == 0) return pos;
  if (is_marker_position(pos)) pos += kMarkerSize;
  const std::uint64_t room = octets_to_next_marker(pos);
  if (n <= room) return pos + n;
  n -= room;
  pos += room;  // at a marker: each interval from here holds kMarkerInterval - kMarkerSize octets
  constexpr std::uint64_t per = kMarkerInterval - kMarkerSize;
  const std::uint64_t full = (n - 1) / per;
  return pos + full * kMarkerInterval + kMarkerSize + (n - full * per);
}

// The stream position of FPDU octet `k` (0: the first octet of ULPDU_Length) of an FPDU that
// starts at `start` (a marker there belongs to the FPDU and comes before octet 0).
constexpr std::uint64_t wire_position_of(std::uint64_t start, std::uint64_t k) {
  return logical_to_wire(start, k + 1) - 1;
}

// Wire octets taken by `logical` FPDU octets (length field .. CRC) that start at `pos`,
// and how many markers they carry. A marker due right after the CRC belongs to the next FPDU.
struct MarkedLength {
  std::size_t wire = 0;
  std::size_t markers = 0;
};
constexpr MarkedLength marked_length(std::uint64_t pos, std::size_t logical) {
  const auto wire = static_cast<std::size_t>(logical_to_wire(pos, logical) - pos);
  return MarkedLength{wire, (wire - logical) / kMarkerSize};
}

}  // namespace iwarp::mpa
