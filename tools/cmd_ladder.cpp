// rnic ladder: a ladder (message sequence) diagram of every iWARP connection in a capture.
#include <fmt/format.h>

#include <fstream>
#include <memory>

#include "ladder/filter.hpp"
#include "ladder/layout.hpp"
#include "ladder/model.hpp"
#include "ladder/png.hpp"
#include "ladder/svg_writer.hpp"
#include "tools/commands.hpp"

namespace iwarp::tools {

Runner add_ladder_command(CLI::App& app) {
  struct Opts {
    std::string file, out, png, opcodes;
    std::optional<std::size_t> connection;
    std::optional<double> from, to;
    std::size_t max_events = 150, page = 1;
    bool no_collapse = false;
  };
  auto o = std::make_shared<Opts>();
  // Seconds since the first decoded record: 0 or more.
  const CLI::Validator seconds(
      [](std::string& s) -> std::string {
        try {
          std::size_t used = 0;
          const double v = std::stod(s, &used);
          if (used == s.size() && v >= 0 && v < 1e9) return {};
        } catch (const std::exception&) {
        }
        return "'" + s + "' is not a number of seconds (0 or more)";
      },
      "SECONDS");
  auto* cmd = app.add_subcommand(
      "ladder",
      "Draw a ladder (message sequence) diagram of each iWARP connection in a capture, as SVG\n"
      "(and PNG with --png). Per connection: the MPA initiator's and responder's address:port\n"
      "as two columns, time going down; the MPA Request and Reply with what they negotiated\n"
      "(revision, markers, CRC, IRD/ORD); every RDMAP message as ONE arrow labelled with its\n"
      "opcode and key fields (STag/TO/length when tagged, QN/MSN/MO when untagged), a tick per\n"
      "DDP segment it took; Terminates red and dashed with their layer, type and code;\n"
      "violations and notes of the decoder in red/grey; time since the first decoded record\n"
      "and the frame number in the left margin (as in `rnic decode`). Runs of identical\n"
      "exchanges are drawn once with xN; what remains is split into pages of --max-events\n"
      "rows. Example: rnic ladder pcap_traces/siw/rping_lo.pcap -o rping.svg --png rping.png\n"
      "Exit status: 0 written, 2 bad input or option.");
  cmd->add_option("file", o->file, "Capture file (pcap or pcapng), as `rnic decode` reads")
      ->required();
  cmd->add_option("-o,--output", o->out, "SVG file to write")->required();
  cmd->add_option("--png", o->png,
                  "Also write this PNG, converted from the SVG by rsvg-convert\n"
                  "(Debian package librsvg2-bin)");
  cmd->add_option("--connection", o->connection,
                  "Draw only connection N (numbered as `rnic decode` prints them:\nc0, c1, ...)");
  cmd->add_option("--opcode", o->opcodes,
                  "Draw only these RDMAP messages, a comma-separated list of:\n" +
                      ladder::opcode_names_help(true) +
                      "\n(\"mpa\" keeps the MPA frames and notes; rnic decode's names such as\n"
                      "\"RDMA Read Response\" work too)");
  cmd->add_option("--from", o->from,
                  "Draw only what starts at or after this many seconds\n"
                  "(0 = the first decoded record, as rnic decode's time column)")
      ->check(seconds);
  cmd->add_option("--to", o->to, "Draw only what starts at or before this many seconds")
      ->check(seconds);
  cmd->add_option("--max-events", o->max_events,
                  "Rows per page (one row per MPA frame, message or collapsed\n"
                  "run; default 150; 0: everything on one page)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--page", o->page, "Which page to draw (1-based; the SVG says 'page K of N')")
      ->check(CLI::Range(1, 1000000));
  cmd->add_flag("--no-collapse", o->no_collapse,
                "Draw every message, even in runs of identical exchanges");
  return [o]() {
    auto fail = [](const std::string& why) {
      fmt::print(stderr, "rnic ladder: {}\n", why);
      return 2;
    };
    ladder::Filter filter;
    filter.connection = o->connection;
    filter.from_s = o->from;
    filter.to_s = o->to;
    if (o->from && o->to && *o->to < *o->from)
      return fail(fmt::format("--to {} is before --from {}", *o->to, *o->from));
    if (!o->opcodes.empty())
      if (auto r = ladder::parse_opcodes(o->opcodes, filter); !r)
        return fail("--opcode: " + r.error());
    auto model = ladder::build_model(o->file, filter);
    if (!model) return fail(model.error());
    if (model->connections.empty())
      return fail(fmt::format("{}: nothing to draw: no event matches the filter", o->file));
    auto page = ladder::layout(
        *model, {.collapse = !o->no_collapse, .max_rows = o->max_events, .page = o->page});
    if (!page) return fail(page.error());
    {
      std::ofstream f(o->out, std::ios::binary | std::ios::trunc);
      if (!f) return fail(fmt::format("-o {}: cannot open for writing", o->out));
      f << ladder::render_svg(*model, *page);
      if (!f.flush()) return fail(fmt::format("-o {}: write failed", o->out));
    }
    std::string what =
        fmt::format("page {} of {}, {} RDMAP message(s) of {} in the file", page->number,
                    page->count, page->messages, model->messages_in_file);
    if (!o->png.empty()) {
      if (auto r = ladder::svg_to_png(o->out, o->png); !r) return fail(r.error());
      fmt::print("rnic ladder: wrote {} and {} ({})\n", o->out, o->png, what);
    } else {
      fmt::print("rnic ladder: wrote {} ({})\n", o->out, what);
    }
    if (page->count > page->number)
      fmt::print("rnic ladder: more follows: --page {} (of {})\n", page->number + 1, page->count);
    return 0;
  };
}

}  // namespace iwarp::tools
