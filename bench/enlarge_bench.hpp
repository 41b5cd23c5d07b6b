// rnic enlarge-bench: what the buffer-enlargement protocol (enlarge/) costs and saves, measured
// on 127.0.0.1 (docs/enlarge-bench.md).
//
// Part "memory" (enlarge_bench_memory.hpp): registered bytes per connection for N idle
// connections, the enlarge scheme against static 64 x 64 KiB buffers on every connection, and
// again after one connection sent one large message. Part "speed" (enlarge_bench_speed.hpp):
// ping-pong latency and one-way throughput per message size for enlarge, pieces and rendezvous,
// each against raw TCP on the same loopback (tcp_baseline.hpp). Output: a table on stdout,
// every row in a CSV and a PNG of both parts made with gnuplot (enlarge_bench_output.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enlarge/options.hpp"

namespace iwarp::bench {

// What to run, with every option already checked (the rnic CLI does that).
struct EnlargeBenchConfig {
  bool memory = true, speed = true;                    // the parts to run
  std::vector<std::uint64_t> connections;              // idle connection counts (memory)
  std::vector<std::uint64_t> sizes;                    // message sizes, in the order given (speed)
  std::vector<enlarge::Mode> schemes;                  // speed part; raw TCP always runs
  bool quick = false;                                  // a few iterations per measurement
  std::string csv, png;                                // "": none
  std::uint64_t static_limit = 2ull << 30;             // measure the static scheme up to this
  std::uint32_t grow = 200000;                         // the one large message's size
  std::uint32_t batch = 250;                           // connections started at a time
  double latency_seconds = 0.6, stream_seconds = 0.8;  // per size and scheme
  enlarge::Options base;   // the enlarge, pieces and rendezvous schemes' options
  int timeout_ms = 10000;  // each step's limit
};

// Runs the benchmark, printing tables to stdout and progress to stderr. Returns 0, or 1 after
// printing "rnic enlarge-bench: WHY" to stderr.
int run_enlarge_bench(const EnlargeBenchConfig& config);

}  // namespace iwarp::bench
