// --html on the live programs (rnic ping, xfer, demo) and --ladder on rnic demo: after the run,
// the run's own capture (its --pcap, or a temporary one) is replayed through the stack in
// capture order and drawn as `rnic replay --html` / `rnic replay --ladder` draw a capture: the
// page and the ladder show what the emulated endpoints of that replay did with each message.
// (`rnic ping --ladder` and `rnic xfer --ladder` draw this side's live engine events instead:
// tools/live_ladder.hpp.)
#pragma once

#include <expected>
#include <string>

namespace iwarp::tools {

struct CaptureViews {
  std::string html;     // OUT.html, or empty
  std::string ladder;   // OUT.svg, or empty
  std::string heading;  // what the page and the ladder call the run
  std::string file;     // the capture as shown (a temporary one by what it was)
};

// Before the run: each requested path can be written (one line naming the option if not).
std::expected<void, std::string> check_view_paths(const CaptureViews& v);

// After the run: replays `capture` and writes the requested views. Errors are one line.
std::expected<void, std::string> write_capture_views(const std::string& capture,
                                                     const CaptureViews& v);

}  // namespace iwarp::tools
