#include "tools/capture_views.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <new>

#include "common/log.hpp"
#include "htmlview/html_writer.hpp"
#include "htmlview/view_model.hpp"
#include "ladder/model.hpp"
#include "replay/replay_plan.hpp"
#include "replay/replayer.hpp"
#include "tools/replay_ladder.hpp"
#include "trace/pcap_reader.hpp"

namespace iwarp::tools {

std::expected<void, std::string> check_view_paths(const CaptureViews& v) {
  if (!v.html.empty())
    if (auto w = htmlview::check_writable(v.html); !w)
      return std::unexpected("--html " + w.error());
  if (!v.ladder.empty())
    if (auto w = htmlview::check_writable(v.ladder); !w)
      return std::unexpected("--ladder " + w.error());
  return {};
}

std::expected<void, std::string> write_capture_views(const std::string& capture,
                                                     const CaptureViews& v) {
  if (v.html.empty() && v.ladder.empty()) return {};
  // (The run's capture is read as `rnic replay` reads a file: nothing held per segment, so a
  // long run's views take no more memory than a short one's beyond the views' own limits.)
  std::expected<replay::Plan, std::string> plan;
  try {
    plan = replay::make_plan_from_file(capture);
  } catch (const trace::CaptureChanged& e) {
    return std::unexpected(e.what());
  }
  if (!plan) return std::unexpected(plan.error());
  // The replay's emulated RNICs would repeat, as warnings, what the live run already said
  // (its Terminates): they speak only of errors here.
  struct Quiet {
    spdlog::logger& l = log::layer("rnic");
    spdlog::level::level_enum before = l.level();
    Quiet() { l.set_level(std::max(before, spdlog::level::err)); }
    ~Quiet() { l.set_level(before); }
  } quiet;
  replay::ReplayResult result;
  try {
    replay::ReplayOptions ro;
    ro.timeline_keep = 0;
    if (!v.html.empty()) ro.timeline_keep = std::max(ro.timeline_keep, htmlview::kTimelineKeep);
    if (!v.ladder.empty()) ro.timeline_keep = std::max(ro.timeline_keep, ladder::kMaxEvents);
    result = replay::replay(*plan, ro);
  } catch (const std::bad_alloc&) {
    throw;  // one line, at the top
  } catch (const std::exception& e) {
    return std::unexpected(fmt::format("replaying the run's capture: {}", e.what()));
  }
  if (!v.html.empty()) {
    auto view = htmlview::build_view(capture, *plan, result, "capture order", {},
                                     {.file = v.file, .heading = v.heading});
    if (!view) return std::unexpected("--html: " + view.error());
    if (auto w = htmlview::write_file(v.html, htmlview::render_html(*view)); !w)
      return std::unexpected("--html " + w.error());
  }
  if (!v.ladder.empty()) {
    auto svg = replay_ladder_svg(capture, *plan, result, v.heading);
    if (!svg) return std::unexpected("--ladder: " + svg.error());
    std::ofstream f(v.ladder, std::ios::binary | std::ios::trunc);
    if (!(f << *svg) || !f.flush())
      return std::unexpected(fmt::format("--ladder {}: write failed", v.ladder));
  }
  return {};
}

}  // namespace iwarp::tools
