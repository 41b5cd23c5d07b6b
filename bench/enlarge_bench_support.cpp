#include "bench/enlarge_bench_support.hpp"

#include <iostream>

namespace iwarp::bench {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void progress_line(const std::string& what) {
  std::cerr << "enlarge-bench: " << what << std::endl;
}

std::string thousands(std::uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

}  // namespace iwarp::bench
