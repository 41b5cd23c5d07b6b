// The four MPA framings (CRC and markers on or off) that parameterized tests run over, their
// names for test instances, and a seeded uniform pick.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <string>

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

}  // namespace iwarp::test
