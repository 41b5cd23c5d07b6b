// rnic replay --ladder: the capture's ladder with, beside each message, what the replay's
// emulated endpoints did with it (the replay timeline as ladder::Local events) and the WQEs
// the replay posted.
#pragma once

#include <string>
#include <vector>

#include "ladder/local_events.hpp"
#include "replay/replay_plan.hpp"
#include "replay/replayer.hpp"

namespace iwarp::tools {

// The local events of one replayed connection, in the order they happened: its WQE posts
// (receive buffers, Reads, atomics, where the replay posts them) and its timeline.
std::vector<ladder::LocalInput> replay_local_events(const replay::ConnectionPlan& plan,
                                                    const replay::ConnectionResult& r);

// One timeline event as a local event (its category and short text), numbered `seq`.
ladder::LocalInput replay_local_input(const replay::TimelineEntry& t, std::uint64_t seq);

// The ladder of `capture` (one page) with the replay's local events, as SVG text. Errors (the
// capture cannot be drawn) are one line.
std::expected<std::string, std::string> replay_ladder_svg(const std::string& capture,
                                                          const replay::Plan& plan,
                                                          const replay::ReplayResult& result,
                                                          const std::string& title);

}  // namespace iwarp::tools
