#include "mpa/crc32c.hpp"

#include <isa-l.h>
#include <nmmintrin.h>

#include <cstring>

namespace iwarp::mpa {

std::uint32_t crc32c_update_isal(std::uint32_t state, ByteSpan data) {
  if (data.empty()) return state;
  // ISA-L's crc32_iscsi keeps the same raw state as the CRC32 instruction: no pre/post inversion.
  return crc32_iscsi(const_cast<unsigned char*>(data.data()), static_cast<int>(data.size()), state);
}

__attribute__((target("sse4.2"))) std::uint32_t crc32c_update_sse42(std::uint32_t state,
                                                                    ByteSpan data) {
  const std::uint8_t* p = data.data();
  std::size_t n = data.size();
  std::uint64_t s = state;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    s = _mm_crc32_u64(s, v);
    p += 8;
    n -= 8;
  }
  auto s32 = static_cast<std::uint32_t>(s);
  while (n--) s32 = _mm_crc32_u8(s32, *p++);
  return s32;
}

bool crc32c_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}

std::uint32_t crc32c_update(std::uint32_t state, ByteSpan data) {
  if (data.size() < kCrcSmallThreshold && crc32c_has_sse42())
    return crc32c_update_sse42(state, data);
  return crc32c_update_isal(state, data);
}

}  // namespace iwarp::mpa
