// The plain RDMA Write baseline of rnic enlarge-bench's speed part: messages of each size
// RDMA Written from a registered buffer straight into a registered buffer of the peer, with
// no protocol and no copy (what perftest's ib_write_bw does), each pass announced by a Send
// behind the Writes. The enlarge scheme's throughput is shown against it.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <string>

#include "bench/enlarge_bench_speed.hpp"
#include "rnic/cm_options.hpp"

namespace iwarp::bench {

class WritePair {
 public:
  // Two endpoints of the verbs shim on 127.0.0.1, buffers of `max_size` registered on both.
  // `busy_poll`: both devices busy-poll and every wait polls the CQ instead of sleeping on the
  // channel (the mode of the enlarge schemes' --busy-poll, so the ratio compares like with
  // like).
  static std::expected<std::unique_ptr<WritePair>, std::string> start(
      const rnic::CmOptions& cm, std::uint64_t max_size, std::chrono::milliseconds timeout,
      bool busy_poll = false);
  ~WritePair();
  WritePair(const WritePair&) = delete;
  WritePair& operator=(const WritePair&) = delete;

  // Round trips (a Write of `size` and a Send each way; the median), then a stream of Writes of
  // `size` (up to 16 outstanding) ended by a Send, timed to its arrival: RDMAP completes a
  // Send only after the Writes before it were placed (RFC 5040 §5.5).
  std::expected<SpeedCell, std::string> run(std::uint64_t size, const SpeedBudget& b);

 private:
  struct State;
  explicit WritePair(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace iwarp::bench
