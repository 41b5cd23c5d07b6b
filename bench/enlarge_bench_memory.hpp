// Part "memory" of rnic enlarge-bench: registered bytes per connection for N idle connections
// between a client node in this process and a server node in a child process, idle and after
// connection 1 alone sent one large message.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <string>

#include "enlarge/options.hpp"

namespace iwarp::bench {

// One scheme at one connection count. A computed run was not measured but scaled from the
// largest measured count (the static scheme beyond --static-limit).
struct MemRun {
  std::string scheme;
  std::uint64_t n = 0;  // connections
  std::uint64_t server_idle = 0, client_idle = 0;
  std::uint64_t server_grown = 0, client_grown = 0;
  double connect_s = 0, teardown_s = 0;
  std::uint64_t rss = 0;         // both processes after connecting
  std::uint64_t rss_growth = 0;  // both processes: after connecting minus before the nodes
  std::size_t fds = 0;           // both processes
  std::string source = "measured";
  bool computed = false;
};

struct MemoryLimits {
  std::chrono::milliseconds timeout;  // each step
  std::uint64_t batch;                // connections started at a time
  std::uint32_t grow;                 // the one large message's size
};

// Connects `n` connections from a client node here to a server node in a child process and
// measures what each side registers, idle and after connection 1 sent one `grow`-byte message.
std::expected<MemRun, std::string> measure_memory(const enlarge::Options& opts,
                                                  const std::string& scheme, std::uint64_t n,
                                                  const MemoryLimits& limits);

}  // namespace iwarp::bench
