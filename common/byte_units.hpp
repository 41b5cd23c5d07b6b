// Byte counts for people, in binary units (B, KiB, MiB, GiB, TiB): the one formatter the tools
// and benchmarks print sizes with.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace iwarp {

enum class ByteFormat {
  Significant,  // three significant digits: 512 B, 1.50 KiB, 15.0 KiB, 150 KiB (tables)
  OneDecimal,   // one decimal: 512 B, 8.0 KiB, 1.5 MiB (counters)
  Exact,        // the largest unit that divides the count: 64 B, 4 KiB, 1536 B, 1 MiB (sizes)
  ExactShort,   // Exact with one-letter units and no space: 64, 4K, 1M (axis ticks)
};

inline std::string format_bytes(double bytes, ByteFormat f) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  static constexpr const char* kShortUnits[] = {"", "K", "M", "G", "T"};
  constexpr int kLargest = 4;
  int unit = 0;
  if (f == ByteFormat::Exact || f == ByteFormat::ExactShort) {
    auto v = static_cast<std::uint64_t>(bytes);
    while (v >= 1024 && v % 1024 == 0 && unit < kLargest) {
      v /= 1024;
      ++unit;
    }
    if (f == ByteFormat::ExactShort) return fmt::format("{}{}", v, kShortUnits[unit]);
    return fmt::format("{} {}", v, kUnits[unit]);
  }
  while (bytes >= 1024 && unit < kLargest) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.0f} B", bytes);
  if (f == ByteFormat::OneDecimal) return fmt::format("{:.1f} {}", bytes, kUnits[unit]);
  if (bytes < 10) return fmt::format("{:.2f} {}", bytes, kUnits[unit]);
  if (bytes < 100) return fmt::format("{:.1f} {}", bytes, kUnits[unit]);
  return fmt::format("{:.0f} {}", bytes, kUnits[unit]);
}

inline std::string format_bytes(std::uint64_t bytes, ByteFormat f) {
  return format_bytes(static_cast<double>(bytes), f);
}

}  // namespace iwarp
