// Local events of a run (what each endpoint's stack did: WQEs posted, placements, holes,
// released completions, CQEs, doorbells, Terminates) attached to a capture's ladder model, each
// beside the RDMAP message it belongs to, on the column of the endpoint that did it. Generic:
// the caller (rnic replay --ladder) says which message by capture frame and DDP header fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ladder/model.hpp"

namespace iwarp::ladder {

// Which message an event is about, from the DDP header of its segment (RFC 5041 §5.2/5.3):
// tagged by STag and a TO inside the message, untagged by QN and MSN.
struct MessageKey {
  bool tagged = false;
  std::uint32_t stag = 0;
  std::uint64_t to = 0;
  std::uint32_t qn = 0, msn = 0;
};

struct LocalInput {
  bool at_initiator = false;      // the endpoint that did it
  mpa::Direction message_dir{};   // direction of the message it belongs to
  std::uint64_t frame = 0;        // a capture frame carrying (part of) that message
  std::optional<MessageKey> key;  // picks among messages sharing the frame
  // The stream offset it is about, counted as the receive engine does (from the end of the
  // MPA frame): when given, the message holding that octet, whatever the frame.
  std::optional<std::uint64_t> stream_offset;
  std::string category, text;  // see Local
  std::uint64_t seq = 0;
};

// Categories whose consecutive events on one message are drawn once with ×N.
bool merges(const std::string& category);

// Adds `in` (in the order they happened) to connection `index` of `m` (cN): each after the
// message of `message_dir` holding `stream_offset`, or else whose segments span `frame`
// (matching `key` when given), or else the last one before `frame` matching `key`, after the
// local events already there; one whose message is not in the model goes after the last event
// at or before its frame (frame 0: after the MPA exchange). Beyond `max_events` events in the model
// they are counted in a note. Returns how many were added (merged ones included).
std::size_t attach_local_events(Model& m, std::size_t index, const std::vector<LocalInput>& in,
                                std::size_t max_events = kMaxEvents);

}  // namespace iwarp::ladder
