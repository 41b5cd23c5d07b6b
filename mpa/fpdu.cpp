#include "mpa/fpdu.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "mpa/crc32c.hpp"

namespace iwarp::mpa {

Result<std::size_t> FpduEncoder::encode(std::span<const ByteSpan> pieces, Bytes& out) {
  std::size_t ulpdu_len = 0;
  for (auto p : pieces) ulpdu_len += p.size();
  if (ulpdu_len > kMaxUlpduLength)
    return fail(Errc::MpaLocalCatastrophic, "RFC 5044 §4.1: ULPDU_Length is a 16-bit field",
                fmt::format("ULPDU of {} octets", ulpdu_len));

  const std::size_t begin = out.size();
  std::uint8_t len_field[kUlpduLengthSize];
  store_be16(len_field, static_cast<std::uint16_t>(ulpdu_len));
  static constexpr std::uint8_t kZeros[4] = {0, 0, 0, 0};
  const std::size_t pad = pad_length(ulpdu_len);

  if (!cfg_.markers) {
    out.reserve(begin + fpdu_length(ulpdu_len));
    out.insert(out.end(), len_field, len_field + kUlpduLengthSize);
    for (auto p : pieces) out.insert(out.end(), p.begin(), p.end());
    out.insert(out.end(), kZeros, kZeros + pad);
  } else {
    const auto ml = marked_length(pos_, fpdu_length(ulpdu_len));
    if (ml.wire > 0xFFFF)
      return fail(Errc::MpaLocalCatastrophic,
                  "RFC 5044 §5: FPDUPTR is 16 bits, so an FPDU with markers must stay below 64 KiB",
                  fmt::format("ULPDU of {} octets", ulpdu_len));
    out.reserve(begin + ml.wire);
    const std::uint64_t start = pos_;
    // RFC 5044 §5: Reserved 0, FPDUPTR = octets back to this FPDU's first octet.
    auto put_marker = [&] {
      std::uint8_t m[kMarkerSize] = {0, 0, 0, 0};
      store_be16(m + 2, static_cast<std::uint16_t>(pos_ - start));
      out.insert(out.end(), m, m + kMarkerSize);
      pos_ += kMarkerSize;
    };
    auto emit = [&](ByteSpan chunk) {
      while (!chunk.empty()) {
        if (is_marker_position(pos_)) put_marker();
        std::size_t run = std::min<std::size_t>(chunk.size(), octets_to_next_marker(pos_));
        out.insert(out.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(run));
        pos_ += run;
        chunk = chunk.subspan(run);
      }
    };
    emit(ByteSpan(len_field, kUlpduLengthSize));
    for (auto p : pieces) emit(p);
    emit(ByteSpan(kZeros, pad));
    // A marker due exactly where the CRC starts sits between PAD and CRC and is covered by it.
    if (is_marker_position(pos_)) put_marker();
    pos_ -= out.size() - begin;  // re-added below together with the CRC
  }

  // RFC 5044 §6.2: the CRC covers ULPDU_Length, ULPDU, PAD and any markers; when CRC is not
  // in use the field is still present and sent as zero.
  std::uint8_t crc_field[kCrcSize] = {0, 0, 0, 0};
  if (cfg_.crc) store_le32(crc_field, crc32c(ByteSpan(out).subspan(begin)));
  out.insert(out.end(), crc_field, crc_field + kCrcSize);
  const std::size_t wire = out.size() - begin;
  pos_ += wire;
  return wire;
}

}  // namespace iwarp::mpa
