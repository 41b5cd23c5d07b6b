// FPDU framing (RFC 5044 §4): ULPDU_Length(16) | ULPDU | PAD to 4 octets | CRC(32),
// with optional Markers (RFC 5044 §5) interleaved every 512 octets of the TCP stream
// (their arithmetic: mpa/markers.hpp).
#pragma once

#include <cstdint>
#include <span>

#include "common/bytes.hpp"
#include "common/wire_error.hpp"
#include "mpa/markers.hpp"

namespace iwarp::mpa {

inline constexpr std::size_t kUlpduLengthSize = 2;
inline constexpr std::size_t kCrcSize = 4;
inline constexpr std::size_t kMaxUlpduLength = 0xFFFF;

// RFC 5044 §4.1: PAD makes ULPDU_Length + ULPDU a multiple of 4 octets.
constexpr std::size_t pad_length(std::size_t ulpdu_length) {
  return (4 - (ulpdu_length + kUlpduLengthSize) % 4) % 4;
}

// Octets of an FPDU without markers: length field, ULPDU, pad and CRC.
constexpr std::size_t fpdu_length(std::size_t ulpdu_length) {
  return kUlpduLengthSize + ulpdu_length + pad_length(ulpdu_length) + kCrcSize;
}

// RFC 5044 §4.1 (MULPDU): the largest ULPDU that fits one TCP segment of EMSS octets.
// Without markers: EMSS - (6 + EMSS mod 4). With markers, room for every marker the FPDU can
// span: EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4).
constexpr std::size_t mulpdu(std::size_t emss, bool markers) {
  std::size_t overhead = kUlpduLengthSize + kCrcSize + emss % 4;
  if (markers) overhead += kMarkerSize * markers_in(0, emss);
  return emss > overhead ? emss - overhead : 0;
}

// Framing of one direction of a stream, fixed by the MPA negotiation.
struct FramingConfig {
  bool crc = false;      // RFC 5044 §7.1 C flag: CRC generated and checked
  bool markers = false;  // RFC 5044 §7.1 M flag of the *receiver*: markers on this direction
  friend bool operator==(FramingConfig, FramingConfig) = default;
};

// Builds FPDUs for one direction. Keeps the stream position for marker placement.
class FpduEncoder {
 public:
  explicit FpduEncoder(FramingConfig cfg, std::uint64_t position = 0) : cfg_(cfg), pos_(position) {}

  // Appends one FPDU whose ULPDU is the concatenation of `pieces` (for example a DDP header
  // and its payload). Returns the FPDU's wire length, or an error if the ULPDU is too long.
  Result<std::size_t> encode(std::span<const ByteSpan> pieces, Bytes& out);
  Result<std::size_t> encode(ByteSpan ulpdu, Bytes& out) {
    ByteSpan one[] = {ulpdu};
    return encode(one, out);
  }

  std::uint64_t position() const { return pos_; }
  const FramingConfig& config() const { return cfg_; }

 private:
  FramingConfig cfg_;
  std::uint64_t pos_;
  Bytes scratch_;
};

}  // namespace iwarp::mpa
