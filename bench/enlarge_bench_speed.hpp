// Part "speed" of rnic enlarge-bench: ping-pong latency and one-way streaming throughput of one
// message size over one client (bench_client.hpp), and the client of the enlarge schemes.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <string>

#include "bench/bench_client.hpp"
#include "enlarge/options.hpp"

namespace iwarp::bench {

// One size on one scheme.
struct SpeedCell {
  std::string scheme;
  std::uint64_t size = 0;
  double latency_us = 0;  // median round trip
  std::size_t latency_iterations = 0;
  double mbps = 0;  // payload bytes, 10^6 per second
  std::uint64_t stream_messages = 0;
  double latency_ratio = 0, throughput_ratio = 0;  // against TCP at this size
  double write_ratio = 0;  // throughput against plain RDMA Write at this size
};

// How long each measurement runs: at least the minimum count, then until the time is up.
struct SpeedBudget {
  double latency_s = 0.6, stream_s = 0.8;
  std::size_t warmup = 3, min_iterations = 5, max_iterations = 5000;
  std::uint64_t min_messages = 8, max_bytes = 1ull << 30;
};

// Warm-up round trips (checked byte for byte), then timed round trips (the median), then a
// timed one-way stream ended by an acknowledgement.
std::expected<SpeedCell, std::string> run_cell(BenchClient& c, const std::string& scheme,
                                               std::uint64_t size, const SpeedBudget& b);

// A client node with one connection to a server node in a thread of this process.
std::expected<std::unique_ptr<BenchClient>, std::string> start_node_client(
    const enlarge::Options& opts, std::chrono::milliseconds timeout);

}  // namespace iwarp::bench
