// rnic/segment_report.hpp - one connection's segment path in words (docs/beyond-holes.md): what
// `rnic xfer`, `rnic ping` and `rnic cmatose` print at their end, and what the drop-in libraries
// print when a QP of a program run with --real-segments goes.
#pragma once

#include <string>
#include <string_view>

#include "rnic/segment_input.hpp"

namespace iwarp::rnic {

class QueuePair;

// Two lines, each starting with `prefix` (no newline at the end): the segments received, the
// holes and the FPDUs placed beyond them; then `arm`, the reassembly storage and the times from
// a hole closing to the octets beyond it delivered (p50/p99/max). `source` says where the
// segments came from. With `hole_times` set, every timing is also written there as CSV
// (octets_beyond,ns) and the second line says so (or why it could not be written). Asks the
// engine for the figures (QueuePair::segment_stats/hole_timing), so not on the engine thread.
std::string describe_segment_path(const QueuePair& qp, std::string_view source, BeyondHoles arm,
                                  std::string_view prefix, const std::string& hole_times = {});

}  // namespace iwarp::rnic
