// The four MPA framings (CRC and markers on or off) that parameterized tests run over, their
// names for test instances, a seeded uniform pick, and streams of FPDUs framed as a sender
// would with what the sender knows of them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "common/bytes.hpp"
#include "mpa/fpdu.hpp"

namespace iwarp::test {

using Rng = std::mt19937_64;

constexpr mpa::FramingConfig kNone{.crc = false, .markers = false};
constexpr mpa::FramingConfig kCrc{.crc = true, .markers = false};
constexpr mpa::FramingConfig kMarkers{.crc = false, .markers = true};
constexpr mpa::FramingConfig kBoth{.crc = true, .markers = true};

inline std::string framing_name(mpa::FramingConfig cfg) {
  if (cfg.crc && cfg.markers) return "CrcAndMarkers";
  if (cfg.crc) return "CrcOnly";
  if (cfg.markers) return "MarkersOnly";
  return "Neither";
}

inline std::string param_name(const ::testing::TestParamInfo<mpa::FramingConfig>& p) {
  return framing_name(p.param);
}

inline std::size_t uniform(Rng& rng, std::size_t lo, std::size_t hi) {
  return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
}

// The FPDUs of an original stream, as the sender framed them.
struct TrueFpdu {
  std::uint64_t offset = 0;
  std::uint32_t wire = 0;
  Bytes ulpdu;
  std::uint64_t end() const { return offset + wire; }
};

struct Stream {
  mpa::FramingConfig cfg;
  Bytes bytes;
  std::vector<TrueFpdu> fpdus;

  // The FPDU that starts at stream octet `off`, if one does.
  const TrueFpdu* at(std::uint64_t off) const {
    auto it = std::lower_bound(fpdus.begin(), fpdus.end(), off,
                               [](const TrueFpdu& f, std::uint64_t o) { return f.offset < o; });
    return it != fpdus.end() && it->offset == off ? &*it : nullptr;
  }
  // The FPDU holding stream octet `off`.
  const TrueFpdu& containing(std::uint64_t off) const {
    auto it = std::upper_bound(fpdus.begin(), fpdus.end(), off,
                               [](std::uint64_t o, const TrueFpdu& f) { return o < f.offset; });
    return *std::prev(it);
  }
  bool is_boundary(std::uint64_t off) const {
    return off == bytes.size() || containing(off).offset == off;
  }
};

// Frames `ulpdus` one after another as a sender with `cfg` would.
inline Stream encode_stream(mpa::FramingConfig cfg, const std::vector<Bytes>& ulpdus) {
  Stream s{cfg, {}, {}};
  mpa::FpduEncoder enc(cfg, 0);
  for (const auto& u : ulpdus) {
    const std::uint64_t off = s.bytes.size();
    auto w = enc.encode(u, s.bytes);
    EXPECT_TRUE(w.has_value());
    if (!w) break;
    s.fpdus.push_back({off, static_cast<std::uint32_t>(*w), u});
  }
  return s;
}

}  // namespace iwarp::test
