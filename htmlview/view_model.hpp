// The data behind `rnic replay --html`: per event of the ladder (an MPA frame or an RDMAP
// message), its decoded headers (MPA, DDP and RDMAP fields of each of its FPDUs), the first
// octets of its FPDUs, its explanations (trace/explain.hpp for the segment, replay_explain.hpp
// for what the replay's receive engine did), each endpoint's queue pair state at that moment as
// the replay's timeline shows it, and the memory regions it touched. Everything here comes from
// the capture: it is data, capped in size, never markup (html_writer.hpp escapes it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <string>

#include "replay/replay_plan.hpp"
#include "replay/replayer.hpp"

namespace iwarp::htmlview {

// What one view may hold; what is past a limit is left out with a note saying so.
struct ViewLimits {
  std::size_t max_events = 2000;  // ladder events (MPA frames and messages), all connections
  std::size_t max_bytes_per_event = 256;   // octets of the hex dump of an event's FPDUs
  std::size_t max_segments_per_event = 8;  // FPDUs whose headers are listed per event
  std::size_t max_replay_lines = 16;       // replay timeline lines shown per event
  std::size_t max_json_bytes = 12u << 20;  // the embedded data as a whole
};

// The timeline events per connection the replay must keep for the view (ReplayOptions::
// timeline_keep): the state shown at later events is then marked as unknown.
inline constexpr std::size_t kTimelineKeep = 50000;

struct View {
  nlohmann::json data;  // {file, notes, connections, events}
  std::string svg;      // the ladder (ladder::render_svg), each event's group marked data-ev="N"
};

// What the page calls the capture and itself (a live program's view names its run, and a
// temporary capture by what it was rather than by its path).
struct ViewLabels {
  std::string file;     // the capture as shown; empty: its path
  std::string heading;  // the page's title; empty: "rnic replay --html: FILE"
};

// Builds the view of the capture `path` from its replay. Errors (the capture cannot be decoded
// again, the ladder cannot be laid out) are one line.
// `order` says how it was replayed ("capture order", a permutation's description).
std::expected<View, std::string> build_view(const std::string& path, const replay::Plan& plan,
                                            const replay::ReplayResult& result,
                                            const std::string& order, const ViewLimits& limits = {},
                                            const ViewLabels& labels = {});

// A hex dump: offset, 16 octets in hex, and the printable ASCII ones ('.' for the others).
std::string hex_dump(const std::uint8_t* p, std::size_t n);

}  // namespace iwarp::htmlview
