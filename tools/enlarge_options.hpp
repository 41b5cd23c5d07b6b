// The command-line options of the buffer-enlargement programs (rnic enlarge-demo,
// rnic enlarge-bench): slot size and counts, threshold, enlarged sizes, policies, budget.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "enlarge/options.hpp"
#include "tools/app_options.hpp"

namespace iwarp::tools {

struct EnlargeCli {
  enlarge::Options opts;
  std::string mode = "enlarge";
  int idle_shrink_ms = 0;
  int refusal_backoff_ms = 50;
  std::uint64_t budget = 0;   // 0: none
  bool malloc_as_is = false;  // leave the process's malloc alone (Options::tune_malloc off)
  int busy_poll_us = 0;       // Options::busy_poll
};

// The names of enlarge::Mode on the command line: enlarge, pieces, rendezvous.
std::vector<std::string> enlarge_mode_names();

// The mode one of those names stands for.
enlarge::Mode enlarge_mode(const std::string& name);

// Registers --slot-size, --recv-slots, --send-slots, --threshold, --min-enlarged,
// --max-enlarged, --free-small, --idle-shrink, --refusal-backoff, --mode, --budget,
// --malloc-as-is, --busy-poll.
void add_enlarge_options(CLI::App& app, EnlargeCli& o);

// The options with the CLI's values applied and the MPA options from `app` (--crc, --markers,
// --wire, --pcap, ...). Returns the reason when they do not fit together.
std::expected<enlarge::Options, std::string> enlarge_options(const EnlargeCli& o,
                                                             const AppOptions& app);

}  // namespace iwarp::tools
