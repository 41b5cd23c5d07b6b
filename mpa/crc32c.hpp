// CRC32c (Castagnoli) as MPA uses it: RFC 5044 §6.2 refers to RFC 3385's iSCSI CRC.
// Preset 0xFFFFFFFF, reflected, final complement; check value of "123456789" is 0xE3069283.
// On the wire the 32-bit value is sent least significant octet first (as siw's
// put_unaligned_le32 does and Wireshark expects).
#pragma once

#include <cstdint>

#include "common/bytes.hpp"

namespace iwarp::mpa {

// Below this many bytes the inline SSE4.2 loop beats ISA-L's dispatcher (see bench/crc_bench).
inline constexpr std::size_t kCrcSmallThreshold = 256;

// Raw (un-complemented) running state, so that pieces can be chained.
std::uint32_t crc32c_update_isal(std::uint32_t state, ByteSpan data);
std::uint32_t crc32c_update_sse42(std::uint32_t state, ByteSpan data);
// Chooses by size; falls back to ISA-L where the CPU lacks SSE4.2.
std::uint32_t crc32c_update(std::uint32_t state, ByteSpan data);
bool crc32c_has_sse42();

class Crc32c {
 public:
  void update(ByteSpan data) { state_ = crc32c_update(state_, data); }
  std::uint32_t value() const { return ~state_; }

 private:
  std::uint32_t state_ = 0xFFFFFFFFu;
};

inline std::uint32_t crc32c(ByteSpan data) {
  Crc32c c;
  c.update(data);
  return c.value();
}

}  // namespace iwarp::mpa
