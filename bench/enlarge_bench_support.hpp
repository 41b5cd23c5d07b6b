// Small pieces every part of rnic enlarge-bench uses: the clock, progress lines, the loopback
// address and thousands separators.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace iwarp::bench {

using Clock = std::chrono::steady_clock;

inline constexpr const char* kHost = "127.0.0.1";

double seconds_since(Clock::time_point t0);

// "enlarge-bench: WHAT" on stderr.
void progress_line(const std::string& what);

// 200000 -> "200,000".
std::string thousands(std::uint64_t v);

}  // namespace iwarp::bench
