// What `rnic replay` prints: the timeline and summary as text, or one JSON document.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "replay/replay_plan.hpp"
#include "replay/replayer.hpp"

namespace iwarp::replay {

// A permuted replay checked against the capture-order one.
struct PermutationCheck {
  Permutation permutation;
  // Per connection (same order as the replay's): the differences (empty: identical).
  std::vector<std::vector<std::string>> differences;
  bool identical() const;
};

struct ReportOptions {
  std::size_t timeline_limit = 40;  // timeline lines per connection in text; 0: none
  bool timeline_all = false;        // every timeline line
  // When set, each timeline line is followed by this sentence (rnic replay --explain).
  std::function<std::string(const TimelineEntry&)> explain;
};

// Exit status of `rnic replay` (also documented in docs/replay.md):
//   0  replayed; every Terminate and violation found is one the trace holds
//   1  the replay found violations the trace does not hold, or a permutation diverged
//   2  unusable input (unreadable file, not a capture, no iWARP connection to replay)
int exit_status(const ReplayResult& r, const std::optional<PermutationCheck>& check);

// One timeline line: frame, time since `t0_us`, endpoint, event and its detail.
std::string format_event(const TimelineEntry& t, std::uint64_t t0_us);

// Where a report goes, piece by piece (rnic replay: standard output), so that a timeline of any
// length is printed as it is read back (for_each_timeline_event), never held whole.
using ReportSink = std::function<void(std::string_view)>;

// The text report.
void write_text(const ReportSink& out, const Plan& plan, const ReplayResult& r,
                const std::optional<Permutation>& order,
                const std::optional<PermutationCheck>& check, const ReportOptions& o);
std::string format_text(const Plan& plan, const ReplayResult& r,
                        const std::optional<Permutation>& order,
                        const std::optional<PermutationCheck>& check, const ReportOptions& o);

// The JSON report. With `timeline`, each connection's kept timeline events, each with an
// "explanation" member when `explain` is set.
nlohmann::json to_json(const Plan& plan, const ReplayResult& r,
                       const std::optional<Permutation>& order,
                       const std::optional<PermutationCheck>& check, bool timeline,
                       const std::function<std::string(const TimelineEntry&)>& explain = {});
// to_json(...).dump(1) and a newline, written with each timeline's events dumped one at a time.
void write_json(const ReportSink& out, const Plan& plan, const ReplayResult& r,
                const std::optional<Permutation>& order,
                const std::optional<PermutationCheck>& check, bool timeline,
                const std::function<std::string(const TimelineEntry&)>& explain = {});

}  // namespace iwarp::replay
