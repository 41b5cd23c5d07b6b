#include "tools/live_ladder.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "ladder/layout.hpp"
#include "ladder/local_events.hpp"
#include "ladder/svg_writer.hpp"
#include "tools/capture_views.hpp"
#include "tools/replay_ladder.hpp"
#include "trace/trace_decoder.hpp"

namespace iwarp::tools {

void LadderRecorder::on_event(const rnic::RxEvent& e) {
  {
    std::lock_guard l(mu_);
    if (events_.size() < kMaxKept)
      events_.push_back(e);
    else
      ++dropped_;
  }
  if (next_) next_->on_event(e);
}

void LadderRecorder::attach(verbs::EndpointOptions& eo) {
  next_ = eo.cm.rx_observer;
  // The endpoint keeps its observer alive through a shared_ptr; this recorder outlives the
  // endpoint (the program writes the ladder after the run), so it is handed out unowned.
  eo.cm.rx_observer = std::shared_ptr<rnic::RxObserver>(std::shared_ptr<void>(), this);
}

std::expected<void, std::string> LadderRecorder::write(const std::string& capture, bool initiator,
                                                       const std::string& svg,
                                                       const std::string& title) const {
  using mpa::Direction;
  const Direction toward = initiator ? Direction::FromResponder : Direction::FromInitiator;
  // Where each stream offset of the direction this side received went on the wire: the
  // engine counts offsets from the end of the MPA frame (RFC 5044 §7: FPDUs follow it), the
  // decoder from the start of the stream.
  struct Unit {
    std::uint64_t begin, end, frame;
  };
  std::vector<Unit> units;
  std::uint64_t base = 0;
  std::optional<std::size_t> flow;
  auto rep = trace::decode_file(capture, [&](trace::Record&& r) {
    if (r.dir != toward) return;
    if (!flow) flow = r.flow;
    if (r.flow != *flow) return;
    if (r.kind == trace::Record::Kind::MpaFrame) base = r.offset + r.length;
    if (r.kind == trace::Record::Kind::Fpdu)
      units.push_back({r.offset, r.offset + r.length, r.frame});
  });
  if (!rep) return std::unexpected(rep.error());
  auto model = ladder::build_model(capture, ladder::Filter{});
  if (!model) return std::unexpected(model.error());
  model->path = title;
  std::sort(units.begin(), units.end(),
            [](const Unit& a, const Unit& b) { return a.begin < b.begin; });
  auto frame_of = [&](std::uint64_t offset) -> std::uint64_t {
    const auto x = offset + base;
    auto it = std::upper_bound(units.begin(), units.end(), x,
                               [](std::uint64_t v, const Unit& u) { return v < u.begin; });
    if (it == units.begin()) return 0;
    --it;
    return x < it->end ? it->frame : 0;
  };
  std::vector<ladder::LocalInput> in;
  {
    std::lock_guard l(mu_);
    std::uint64_t seq = 0, last_frame = 0;
    for (const auto& e : events_) {
      replay::TimelineEntry t;
      t.side = initiator ? replay::Side::Initiator : replay::Side::Responder;
      t.event = e;
      // Events about a segment carry its stream offset; a completion or doorbell follows the
      // segment that caused it.
      const bool has_offset = e.kind != rnic::RxEvent::Kind::Completion &&
                              e.kind != rnic::RxEvent::Kind::Doorbell &&
                              e.kind != rnic::RxEvent::Kind::TerminateReceived;
      if (has_offset) {
        if (const auto f = frame_of(e.offset); f != 0) last_frame = f;
      }
      t.frame = last_frame;
      auto x = replay_local_input(t, ++seq);
      in.push_back(std::move(x));
    }
    if (dropped_ > 0)
      model->notes.push_back(
          fmt::format("{} later engine event(s) not kept (at most {})", dropped_, kMaxKept));
  }
  if (flow) ladder::attach_local_events(*model, *flow, in);
  auto page = ladder::layout(*model, {.collapse = true, .max_rows = 0, .page = 1});
  if (!page) return std::unexpected(page.error());
  std::ofstream f(svg, std::ios::binary | std::ios::trunc);
  if (!f) return std::unexpected(fmt::format("--ladder {}: cannot open for writing", svg));
  f << ladder::render_svg(*model, *page);
  if (!f.flush()) return std::unexpected(fmt::format("--ladder {}: write failed", svg));
  return {};
}

void add_html_option(CLI::App& app, std::string& html) {
  app.add_option("--html", html,
                 "Write the HTML view of the run (one self-contained page, as rnic replay --html\n"
                 "makes): after the run, this side's capture (--pcap, or a temporary one) is\n"
                 "replayed through the stack and each message can be clicked for its headers,\n"
                 "bytes, meaning and the queue pairs' state (docs/html-view.md)")
      ->type_name("OUT.html");
}

int run_with_views(const std::string& program, const std::string& svg, const std::string& html,
                   bool server, AppOptions& app, std::shared_ptr<LadderRecorder>& recorder,
                   const std::function<int()>& run) {
  const std::string side = server ? "--server" : "--client";
  const bool temp = app.pcap.empty();
  CaptureViews views{
      .html = html,
      .ladder = {},
      .heading = fmt::format("rnic {} {}: this run's capture, replayed", program, side),
      .file = temp ? fmt::format("this run of rnic {} {} (its capture not kept: "
                                 "--pcap FILE keeps it)",
                                 program, side)
                   : app.pcap};
  // Paths that cannot be written are said before the run (an existing file is left as it is).
  if (auto c = check_view_paths({.html = html, .ladder = svg, .heading = {}, .file = {}}); !c) {
    std::cerr << "rnic " << program << ": " << c.error() << "\n";
    return 2;
  }
  if (temp)
    app.pcap = (std::filesystem::temp_directory_path() /
                fmt::format("rnic-{}-views-{}.pcap", program, ::getpid()))
                   .string();
  // The temporary capture goes however the run ends (a program may throw its failure).
  struct Remove {
    std::string path;
    ~Remove() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove(path, ec);
    }
  } cleanup{temp ? app.pcap : std::string()};
  if (!svg.empty()) recorder = std::make_shared<LadderRecorder>();
  // The views are written however the run ends, a failure thrown included (then rethrown).
  int rc = 1;
  std::exception_ptr failure;
  try {
    rc = run();
  } catch (...) {
    failure = std::current_exception();
  }
  int status = rc;
  std::error_code ec;
  if (!std::filesystem::exists(app.pcap, ec)) {
    std::cerr << "rnic " << program << ": no " << (svg.empty() ? "page" : "ladder")
              << " written: the run made no connection (nothing was captured)\n";
    if (failure) std::rethrow_exception(failure);
    return status ? status : 2;
  }
  if (!svg.empty()) {
    auto w = recorder->write(app.pcap, !server, svg,
                             fmt::format("rnic {} {} (this side's engine events)", program, side));
    if (!w) {
      std::cerr << "rnic " << program << ": " << w.error() << "\n";
      if (status == 0) status = 2;
    }
  }
  if (!html.empty()) {
    if (auto w = write_capture_views(app.pcap, views); !w) {
      std::cerr << "rnic " << program << ": " << w.error() << "\n";
      if (status == 0) status = 2;
    }
  }
  if (failure) std::rethrow_exception(failure);
  return status;
}

}  // namespace iwarp::tools
