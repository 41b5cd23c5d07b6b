// --ladder on the live programs (rnic xfer): what this side's receive engine reported during
// the run, kept as it happens, then drawn beside the messages of the run's own capture (the
// --pcap recording, or a temporary one) as ladder::Local events.
#pragma once

#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rnic/rx_observer.hpp"
#include "tools/app_options.hpp"
#include "verbs_shim/endpoint.hpp"

namespace iwarp::tools {

class LadderRecorder : public rnic::RxObserver {
 public:
  // Called on the engine thread: keeps the event (at most kMaxKept; the rest are counted) and
  // hands it on to `next` (the --explain printer, when there is one).
  void on_event(const rnic::RxEvent& e) override;

  // Records on `eo`'s queue pairs, in front of the observer already there.
  void attach(verbs::EndpointOptions& eo);

  // Writes the ladder of `capture` with the events kept, drawn on the column of this side
  // (the MPA initiator's when `initiator`). Errors are one line.
  std::expected<void, std::string> write(const std::string& capture, bool initiator,
                                         const std::string& svg, const std::string& title) const;

  static constexpr std::size_t kMaxKept = 100000;

 private:
  mutable std::mutex mu_;
  std::vector<rnic::RxEvent> events_;
  std::uint64_t dropped_ = 0;
  std::shared_ptr<rnic::RxObserver> next_;
};

// The --html option of the live programs (rnic ping, xfer), for run_with_views.
void add_html_option(CLI::App& app, std::string& html);

// `rnic PROGRAM ... --ladder svg --html html` (either may be empty): refuses a path it cannot
// write (one line, exit status 2), records the run to a temporary capture when `app.pcap` is
// empty, gives `run` a recorder to attach to its endpoint (in `recorder`, for the ladder),
// then writes the ladder of the run as this side (`server`: the MPA responder) saw it, and the
// HTML view of the run's capture replayed (tools/capture_views.hpp). Returns run's status (2
// when a view could not be written and the run succeeded).
int run_with_views(const std::string& program, const std::string& svg, const std::string& html,
                   bool server, AppOptions& app, std::shared_ptr<LadderRecorder>& recorder,
                   const std::function<int()>& run);

}  // namespace iwarp::tools
