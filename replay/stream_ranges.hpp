// A few ranges of many connections' streams, as the capture's segments carried them, for a view
// that shows the first octets of many messages (`rnic replay --html`). Each octet comes from the
// first segment (in capture order) that carried it, as the replay injected it (StreamOctets'
// rule): a connection whose steps are kept takes them from its steps (StreamOctets); the
// connections whose steps are read again take them from one more read of the capture file for
// all of them together, which holds the ranges asked for and nothing per segment.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/bytes.hpp"
#include "replay/replay_plan.hpp"

namespace iwarp::replay {

// Octets [offset, offset + length) of direction `dir` of the plan's connection `flow`
// (ConnectionPlan::flow), stream offsets counted as the decoder counts them (MPA frame included).
struct StreamRange {
  std::size_t flow = 0;
  mpa::Direction dir = mpa::Direction::FromInitiator;
  std::uint64_t offset = 0;
  std::uint32_t length = 0;
};

// What a read may hold of the ranges asked for together: more is refused before any read.
inline constexpr std::uint64_t kMaxRangeOctets = 64u << 20;

// Per range, in the order asked, its octets up to the first one no segment carries (empty for a
// connection the plan does not have). The read of the file stops once every range is filled or
// the last of their connections' segments has gone by. Throws trace::CaptureChanged (one line
// naming the file) when the file changed since the plan was learned, and std::length_error when
// the ranges add up to more than kMaxRangeOctets.
std::vector<Bytes> stream_ranges(const Plan& plan, std::span<const StreamRange> ranges);

}  // namespace iwarp::replay
