// rnic replay: feeds both directions of every iWARP connection in a capture through two
// emulated endpoints and reports what their receive engines did (see docs/replay.md).
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <memory>
#include <new>
#include <system_error>

#include "htmlview/html_writer.hpp"
#include "htmlview/view_model.hpp"
#include "ladder/png.hpp"
#include "replay/replay_explain.hpp"
#include "replay/replay_plan.hpp"
#include "replay/replay_report.hpp"
#include "replay/replayer.hpp"
#include "tools/commands.hpp"
#include "tools/replay_ladder.hpp"
#include "trace/pcap_reader.hpp"

namespace iwarp::tools {

namespace {

// A one-line progress bar on stderr, redrawn when the percentage changes.
class ProgressBar {
 public:
  void update(std::uint64_t done, std::uint64_t total) {
    if (total == 0) return;
    const int pct = static_cast<int>(done * 100 / total);
    if (pct == last_) return;
    last_ = pct;
    constexpr int kWidth = 40;
    const int fill = pct * kWidth / 100;
    fmt::print(stderr, "\rreplaying [{}{}] {:>3}% ({}/{} steps)", std::string(fill, '#'),
               std::string(kWidth - fill, ' '), pct, done, total);
    std::fflush(stderr);
    shown_ = true;
  }
  void clear() {
    if (!shown_) return;
    fmt::print(stderr, "\r{}\r", std::string(80, ' '));
    std::fflush(stderr);
  }

 private:
  int last_ = -1;
  bool shown_ = false;
};

// Timeline events per connection `--timeline` and `--json` keep in memory; the others wait in a
// temporary file until they are printed.
constexpr std::size_t kTimelineInMemory = 256;

struct ReplayOpts {
  std::string file;
  bool json = false, timeline = false, quiet = false, progress = false, no_progress = false;
  bool explain = false;
  std::optional<std::uint64_t> permute;
  std::vector<std::uint64_t> drop;
  double reorder = 0.25, dup = 0.1, split = 0.1;
  unsigned delay = 4;
  std::string html;                // --html OUT.html
  std::string ladder, ladder_png;  // --ladder OUT.svg, --ladder-png OUT.png
};

// Whether the capture is a device (a terminal, a disk): it is read once, as before, not copied
// (it may never end).
bool is_device(const std::string& path) {
  struct stat st {};
  const int r = path == "-" ? ::fstat(0, &st) : ::stat(path.c_str(), &st);
  return r == 0 && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode));
}

// The replay's plan. A capture replayed in capture order (no seeded disorder, which needs each
// segment's tagged ranges), frames dropped or not, HTML view or not, is read as a stream, its
// steps made as the file is read again: what the plan holds does not grow with the capture's
// length. Otherwise the capture is read whole, its payloads left in the file. A pipe ("-" or a
// named one) is first copied into an unnamed temporary file, read instead.
std::expected<replay::Plan, std::string> plan_replay(const ReplayOpts& o) {
  if (!o.permute && !is_device(o.file)) return replay::make_plan_from_file(o.file, {}, o.drop);
  // The payloads stay in the file (read again as each connection is learned and replayed): the
  // learning pass's memory grows with the capture's segments, not with their octets.
  auto cap = trace::read_capture(o.file, {.payloads_in_file = true, .copy_pipe = true});
  if (!cap) return std::unexpected(cap.error());
  if (!o.drop.empty())
    if (auto d = replay::drop_frames(*cap, o.drop); !d) return std::unexpected(d.error());
  // Without a seeded disorder, the steps are made as the file is read again.
  const auto source = o.permute ? replay::StepSource::Kept : replay::StepSource::ReadAgain;
  // (The plan keeps what the replay needs, the file included.)
  return replay::make_plan(*cap, {}, source);
}

int run_replay(const ReplayOpts& o) {
  // A path that cannot be written is said before the replay runs.
  if (!o.html.empty()) {
    if (auto w = htmlview::check_writable(o.html); !w) {
      fmt::print(stderr, "rnic replay: --html {}\n", w.error());
      return 2;
    }
  }
  // The ladder's file is opened first: a bad path is refused before the replay runs.
  std::ofstream ladder_out;
  if (!o.ladder.empty()) {
    ladder_out.open(o.ladder, std::ios::binary | std::ios::trunc);
    if (!ladder_out) {
      fmt::print(stderr, "rnic replay: --ladder {}: cannot open for writing\n", o.ladder);
      return 2;
    }
  }
  if (!o.ladder_png.empty() && !std::ofstream(o.ladder_png, std::ios::binary | std::ios::trunc)) {
    fmt::print(stderr, "rnic replay: --ladder-png {}: cannot open for writing\n", o.ladder_png);
    return 2;
  }
  std::expected<replay::Plan, std::string> plan;
  try {
    plan = plan_replay(o);
  } catch (const trace::CaptureChanged& e) {
    fmt::print(stderr, "rnic replay: {}\n", e.what());
    return 2;
  }
  if (!plan) {
    fmt::print(stderr, "rnic replay: {}\n", plan.error());
    return 2;
  }
  std::optional<replay::Permutation> perm;
  if (o.permute) {
    replay::Permutation p;
    p.wire.seed = *o.permute;
    p.wire.reorder = o.reorder;
    p.wire.dup = o.dup;
    p.wire.delay = o.delay;
    p.split = o.split;
    perm = p;
  }
  // The bar is for large captures on a terminal (or when asked for).
  const std::uint64_t steps = plan->total_steps();
  const bool bar = !o.no_progress && (o.progress || (::isatty(2) && steps >= 500));
  ProgressBar pb;
  const std::uint64_t passes = perm ? 2 : 1;
  auto progress_for = [&](std::uint64_t pass) {
    return [&, pass](std::uint64_t done, std::uint64_t total) {
      pb.update(pass * total + done, passes * total);
    };
  };

  replay::ReplayResult result;
  std::optional<replay::PermutationCheck> check;
  try {
    replay::ReplayOptions ro;
    if (bar) ro.progress = progress_for(0);
    // Only what the report prints is kept of each timeline; a report that prints all of it
    // keeps what is past the first events in a temporary file (replay::TimelineSpool).
    if (o.json || o.timeline) {
      ro.timeline_keep = o.quiet ? 0 : kTimelineInMemory;
      ro.spool_timeline = !o.quiet;
    } else {
      ro.timeline_keep = o.quiet ? 0 : 40;
    }
    // The HTML view shows each event's timeline and the state it leads to.
    if (!o.html.empty()) ro.timeline_keep = std::max(ro.timeline_keep, htmlview::kTimelineKeep);
    // The ladder draws the events, up to what a ladder model holds.
    if (!o.ladder.empty()) ro.timeline_keep = std::max(ro.timeline_keep, ladder::kMaxEvents);
    if (perm) {
      ro.keep_memory = true;
      // (The capture-order replay is compared, CQEs and memory, not printed: no timeline.)
      auto base_ro = ro;
      base_ro.timeline_keep = 0;
      base_ro.spool_timeline = false;
      auto base = replay::replay(*plan, base_ro);
      ro.permutation = perm;
      if (bar) ro.progress = progress_for(1);
      result = replay::replay(*plan, ro);
      replay::PermutationCheck c;
      c.permutation = *perm;
      for (std::size_t i = 0; i < result.connections.size(); ++i)
        c.differences.push_back(replay::compare(base.connections[i], result.connections[i]));
      check = std::move(c);
    } else {
      result = replay::replay(*plan, ro);
    }
  } catch (const std::bad_alloc&) {
    pb.clear();
    throw;  // one line, at the top
  } catch (const trace::CaptureChanged& e) {
    pb.clear();
    fmt::print(stderr, "rnic replay: {}\n", e.what());  // (it names the file)
    return 2;
  } catch (const std::exception& e) {
    pb.clear();
    fmt::print(stderr, "rnic replay: {}: {}\n", o.file, e.what());
    return 2;
  }
  pb.clear();

  // The views read the capture again: a pipe from the copy the plan reads its payloads from
  // (the open file, through /proc), shown by the name it was given.
  std::string again = o.file;
  if (struct stat st{}; !plan->connections.empty() && plan->connections.front().file &&
                        (o.file == "-" || ::stat(o.file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)))
    again = fmt::format("/proc/self/fd/{}", plan->connections.front().file->fd());
  if (!o.html.empty()) {
    auto view = htmlview::build_view(
        again, *plan, result,
        perm ? "a seeded disorder: " + perm->describe() : std::string("capture order"), {},
        {.file = o.file, .heading = {}});
    if (!view) {
      fmt::print(stderr, "rnic replay: --html: {}\n", view.error());
      return 2;
    }
    if (auto w = htmlview::write_file(o.html, htmlview::render_html(*view)); !w) {
      fmt::print(stderr, "rnic replay: --html {}\n", w.error());
      return 2;
    }
  }

  // (The report is written as it is made: a timeline read back from its temporary file is not
  // held whole.)
  // A report that cannot be written whole (a full disk; a closed pipe where SIGPIPE is ignored,
  // else the signal ends the program as before) is an error, not a report cut short that exits
  // 0.
  const replay::ReportSink out = [](std::string_view piece) {
    if (std::fwrite(piece.data(), 1, piece.size(), stdout) != piece.size())
      throw std::system_error(errno, std::generic_category(), "writing the report");
  };
  std::function<std::string(const replay::TimelineEntry&)> explain;
  if (o.explain)
    explain = [](const replay::TimelineEntry& t) { return replay::explain_event(t.event); };
  try {
    if (o.json) {
      replay::write_json(out, *plan, result, perm, check, !o.quiet, explain);
    } else {
      replay::ReportOptions ro;
      ro.timeline_all = o.timeline;
      ro.timeline_limit = o.quiet ? 0 : 40;
      ro.explain = explain;
      replay::write_text(out, *plan, result, perm, check, ro);
    }
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
      throw std::system_error(errno, std::generic_category(), "writing the report");
  } catch (const std::runtime_error& e) {
    fmt::print(stderr, "rnic replay: {}: {}\n", o.file, e.what());
    return 2;
  }
  if (!o.ladder.empty()) {
    auto svg = replay_ladder_svg(
        again, *plan, result,
        fmt::format("{} as rnic replay{} ran it", o.file,
                    perm ? fmt::format(" --permute {}", *o.permute) : std::string()));
    if (!svg) {
      fmt::print(stderr, "rnic replay: --ladder: {}\n", svg.error());
      return 2;
    }
    ladder_out << *svg;
    if (!ladder_out.flush()) {
      fmt::print(stderr, "rnic replay: --ladder {}: write failed\n", o.ladder);
      return 2;
    }
    ladder_out.close();
    if (!o.ladder_png.empty())
      if (auto png = ladder::svg_to_png(o.ladder, o.ladder_png); !png) {
        fmt::print(stderr, "rnic replay: {}\n", png.error());  // as rnic ladder --png
        return 2;
      }
  }
  return replay::exit_status(result, check);
}

}  // namespace

Runner add_replay_command(CLI::App& app) {
  auto o = std::make_shared<ReplayOpts>();
  auto* cmd = app.add_subcommand(
      "replay",
      "Replay a capture through two emulated RNICs: both directions of every iWARP connection\n"
      "are fed, segment by segment in capture order, into a queue pair that receives each\n"
      "direction (the initiator's emulation takes responder->initiator, and back). STags, the\n"
      "tagged offsets each was used at, Send sizes, RDMA Reads and atomics are learned from the\n"
      "traffic: every STag gets zero-filled shadow memory (so it holds exactly what the capture\n"
      "wrote), every Send a receive buffer of its size, and each side's Reads and atomics are\n"
      "posted where the capture shows their requests. Prints the timeline (placements, holes\n"
      "opening and closing, deferred completions released, doorbells, Terminates, violations)\n"
      "and a summary per connection: CQEs, shadow memory hash, what the capture cut short.\n"
      "Exit status: 0 replayed, every Terminate and violation one the trace holds (a Terminate\n"
      "in the trace is reported with its cause; a capture cut short is reported as such);\n"
      "1 the replay found violations the trace does not hold, or a --permute replay differed\n"
      "from the capture-order one; 2 unusable input (unreadable file, not a capture, no iWARP\n"
      "connection with its MPA exchange), or a temporary file or the report that could not be\n"
      "written. A capture file is read as it comes, nothing held per\n"
      "segment: once to learn the connections (more for some captures), then again as the replay\n"
      "goes, to make its steps. A pipe (FILE '-' is standard input) is first copied into an\n"
      "unnamed file in $TMPDIR (default /tmp). --permute, and connections past the budget of\n"
      "reads (of many side by side), take memory per segment. Details: docs/replay.md.");
  cmd->add_option("file", o->file, "Capture file (pcap or pcapng)")->required();
  cmd->add_flag("--json", o->json,
                "Print one JSON document (connections, CQEs, the whole timeline: events past the\n"
                "first 256 of a connection wait in an unnamed file in $TMPDIR until printed)");
  auto* tl = cmd->add_flag("--timeline", o->timeline,
                           "Print the whole timeline (by default the first 40 events of each\n"
                           "connection; past the first 256 they wait in an unnamed file in\n"
                           "$TMPDIR until printed)");
  auto* quiet =
      cmd->add_flag("--quiet", o->quiet, "Print no timeline, only the summaries")->excludes(tl);
  cmd->add_flag("--explain", o->explain,
                "After each timeline event, one indented sentence starting \"why:\" saying what\n"
                "it means in RDMA terms and the RFC rule behind it: where a segment's data went,\n"
                "why data beyond a TCP hole is placed now but completes only when the hole\n"
                "closes, what a Terminate reports. With --json each timeline event gets an\n"
                "\"explanation\" member. Try it with --permute 3 to see holes")
      ->excludes(quiet);
  auto* permute_opt = cmd->add_option(
      "--permute", o->permute,
      "Replay in a seeded disorder instead: in each direction some segments are held back and\n"
      "arrive later (as retransmissions), some arrive twice or again overlapping, some are\n"
      "re-cut into two overlapping pieces. Causality is kept: what a side was sent arrives\n"
      "before it sends again, and no segment overtakes an earlier one writing the same tagged\n"
      "octets. The capture-order replay runs too, and the two must end with identical CQEs and\n"
      "shadow memory (else exit status 1)");
  cmd->add_option("--reorder", o->reorder,
                  "With --permute: probability that a segment is held back (default 0.25)")
      ->check(CLI::Range(0.0, 1.0))
      ->needs(permute_opt);
  cmd->add_option("--dup", o->dup,
                  "With --permute: probability of a duplicate or overlapping retransmission "
                  "(default 0.1)")
      ->check(CLI::Range(0.0, 1.0))
      ->needs(permute_opt);
  cmd->add_option("--delay", o->delay,
                  "With --permute: a held segment arrives after 1..N later ones (default 4)")
      ->check(CLI::Range(1u, 1000u))
      ->needs(permute_opt);
  cmd->add_option("--split", o->split,
                  "With --permute: probability that a segment is re-cut into two overlapping "
                  "pieces (default 0.1)")
      ->check(CLI::Range(0.0, 1.0))
      ->needs(permute_opt);
  cmd->add_option("--drop", o->drop,
                  "Leave capture frame N out, as if the network had lost it (repeatable, or a\n"
                  "comma-separated list): the replay then shows the hole it leaves")
      ->delimiter(',');
  cmd->add_option("--html", o->html,
                  "Also write OUT.html: one self-contained page (open it from disk, no server or\n"
                  "network) with the ladder of each connection; clicking an arrow shows that\n"
                  "event's decoded MPA/DDP/RDMAP headers, its first octets, what it means, both\n"
                  "queue pairs' state after it (receives left, Reads outstanding, holes open) and\n"
                  "the memory regions it touched. Details: docs/html-view.md")
      ->type_name("OUT.html");
  auto* ladder_opt = cmd->add_option(
      "--ladder", o->ladder,
      "Also write the ladder (message sequence) diagram of what the replay did, as SVG: the\n"
      "capture's messages as arrows (as rnic ladder draws them) and, beside each, on the column\n"
      "of the endpoint that did it, the local events the emulated stack took: WQEs posted,\n"
      "placements (beyond a TCP hole with --permute), holes opened and closed, deferred\n"
      "completions released, CQEs, doorbells, Terminates; each numbered in the order it\n"
      "happened (see docs/ladder.md)");
  cmd->add_option("--ladder-png", o->ladder_png,
                  "With --ladder: also convert it to this PNG (needs rsvg-convert, Debian's "
                  "librsvg2-bin)")
      ->needs(ladder_opt);
  auto* pg = cmd->add_flag("--progress", o->progress,
                           "Show a progress bar on stderr even when it is not a terminal");
  cmd->add_flag("--no-progress", o->no_progress, "Never show the progress bar")->excludes(pg);

  return [o]() {
    // The plan refuses what is past the limits in replay/replay_limits.hpp before allocating
    // it; should memory still run out, this says so in one line rather than abort.
    try {
      return run_replay(*o);
    } catch (const std::bad_alloc&) {
      fmt::print(stderr,
                 "rnic replay: {}: out of memory: the capture asks for more memory than this "
                 "machine gives (the replay's limits: docs/replay.md)\n",
                 o->file);
      return 2;
    } catch (const std::exception& e) {
      fmt::print(stderr, "rnic replay: {}: {}\n", o->file, e.what());
      return 2;
    }
  };
}

}  // namespace iwarp::tools
