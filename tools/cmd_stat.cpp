// rnic stat PID: what the emulated RNICs of a running process hold right now (docs/stat.md):
// each queue pair's state, queues, outstanding Reads (ORD/IRD), open TCP holes and what waits
// on each, the registered memory regions, the completion queues and the counters of every
// layer. Asks the process's stat server (rnic/stat_server.hpp) over its abstract Unix socket.
#include <fmt/format.h>

#include <chrono>
#include <climits>
#include <csignal>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "rnic/stat_client.hpp"
#include "tools/commands.hpp"

namespace iwarp::tools {

namespace {

using json = nlohmann::ordered_json;

std::string size_text(std::uint64_t n) {
  if (n >= (1ull << 30) && n % (1ull << 20) == 0) return fmt::format("{} MiB", n >> 20);
  if (n >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(n) / (1 << 20));
  if (n >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(n) / (1 << 10));
  return fmt::format("{} B", n);
}

std::string join_strings(const json& a, const char* sep) {
  std::string out;
  for (const auto& v : a) {
    if (!out.empty()) out += sep;
    out += v.get<std::string>();
  }
  return out;
}

// The readable summary of one device's document.
void print_text(const json& d, std::ostream& os) {
  const auto& e = d.at("engine");
  os << fmt::format(
      "{} ({}): {} QP(s), {} MR(s) ({} registered), {} CQ(s), engine {}\n",
      d.at("device").get<std::string>(), d.at("socket").get<std::string>(),
      e.at("queue_pairs").get<std::uint64_t>(), e.at("memory_regions").get<std::uint64_t>(),
      size_text(e.at("registered_bytes").get<std::uint64_t>()), d.at("completion_queues").size(),
      e.at("running").get<bool>() ? "running" : "stopped");
  for (const auto& q : d.at("queue_pairs")) {
    std::string where;
    if (q.contains("local") && q.contains("peer"))
      where =
          fmt::format("  {} -> {}", q["local"].get<std::string>(), q["peer"].get<std::string>());
    std::string mpa;
    if (q.contains("mpa")) {
      const auto& m = q["mpa"];
      mpa = fmt::format(
          "  {}, MPA rev {}, CRC {}, markers {}/{} (sent/received), MULPDU {}",
          q.at("role").get<std::string>(), m.at("revision").get<int>(),
          m.at("crc").get<bool>() ? "on" : "off", m.at("markers_sent").get<bool>() ? "on" : "off",
          m.at("markers_received").get<bool>() ? "on" : "off", m.at("mulpdu").get<std::uint64_t>());
    }
    os << fmt::format("  QP {} {}{}{}\n", q.at("qp_num").get<std::uint32_t>(),
                      q.at("state").get<std::string>(), where, mpa);
    if (q.contains("error")) os << "    error: " << q["error"].get<std::string>() << "\n";
    const auto& sq = q.at("send_queue");
    const auto& rq = q.at("recv_queue");
    os << fmt::format(
        "    SQ {}/{}  RQ {}/{}{}  ORD {}/{}  IRD {}/{} (in use/limit)\n",
        sq.at("used").get<std::uint64_t>(), sq.at("depth").get<std::uint64_t>(),
        rq.at("used").get<std::uint64_t>(), rq.at("depth").get<std::uint64_t>(),
        rq.at("srq").get<bool>() ? " (SRQ)" : "", q.at("ord").at("in_use").get<std::uint64_t>(),
        q.at("ord").at("limit").get<std::uint64_t>(), q.at("ird").at("in_use").get<std::uint64_t>(),
        q.at("ird").at("limit").get<std::uint64_t>());
    const auto& c = q.at("counters");
    const auto& mp = c.at("mpa");
    os << fmt::format(
        "    FPDUs sent {} received {}, octets sent {} received {}, CRC errors {}, Terminates "
        "sent {} received {}\n",
        mp.at("fpdus_sent").get<std::uint64_t>(), mp.at("fpdus_received").get<std::uint64_t>(),
        mp.at("bytes_sent").get<std::uint64_t>(), mp.at("bytes_received").get<std::uint64_t>(),
        mp.at("crc_errors").get<std::uint64_t>(),
        c.at("rdmap").at("terminates_sent").get<std::uint64_t>(),
        c.at("rdmap").at("terminates_received").get<std::uint64_t>());
    os << fmt::format(
        "    TCP segments {} ({} out of order), holes opened {} closed {}, placed beyond a hole "
        "{}, deferred released {}, doorbells {}, inline batches {}\n",
        c.at("tcp").at("segments").get<std::uint64_t>(),
        c.at("tcp").at("out_of_order_segments").get<std::uint64_t>(),
        c.at("tcp").at("holes_opened").get<std::uint64_t>(),
        c.at("tcp").at("holes_closed").get<std::uint64_t>(),
        c.at("ddp").at("placed_beyond_hole").get<std::uint64_t>(),
        c.at("ddp").at("deferred_released").get<std::uint64_t>(),
        c.at("engine").at("doorbells").get<std::uint64_t>(),
        c.at("engine").at("posted_inline_batches").get<std::uint64_t>());
    for (const auto& h : q.at("holes"))
      os << fmt::format("    hole [{}, {}) ({} octets missing): {}\n",
                        h.at("begin").get<std::uint64_t>(), h.at("end").get<std::uint64_t>(),
                        h.at("missing_octets").get<std::uint64_t>(),
                        h.at("summary").get<std::string>());
  }
  for (const auto& m : d.at("memory_regions"))
    os << fmt::format(
        "  MR STag {} PD {} {} at TO {} {}{}\n", m.at("stag").get<std::string>(),
        m.at("pd").get<std::uint32_t>(), size_text(m.at("length").get<std::uint64_t>()),
        m.at("base_to").get<std::string>(),
        m.at("access").empty() ? std::string("local read only") : join_strings(m.at("access"), ","),
        m.at("valid").get<bool>() ? "" : " (invalidated)");
  for (const auto& c : d.at("completion_queues"))
    os << fmt::format("  CQ {} {}/{} (used/depth), {} completions, {} events{}\n",
                      c.at("id").get<std::string>(), c.at("used").get<std::uint64_t>(),
                      c.at("depth").get<std::uint64_t>(), c.at("completions").get<std::uint64_t>(),
                      c.at("events").get<std::uint64_t>(),
                      c.at("overflowed").get<bool>() ? ", OVERFLOWED" : "");
}

}  // namespace

Runner add_stat_command(CLI::App& app) {
  struct Opts {
    long pid = 0;
    bool json = false, compact = false;
    int timeout_ms = 2000;
    double watch = 0;
    int count = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "stat",
      "Show the live state of the emulated RNIC(s) in a running process: each queue pair's\n"
      "state, peer, MPA parameters, send/receive queue use, outstanding RDMA Reads (ORD/IRD\n"
      "in use), the TCP holes open on its stream and what waits on each (held-back\n"
      "completions, Read Requests, Terminates), registered memory regions, completion queues\n"
      "and counters per layer (TCP segments, MPA FPDUs and CRC errors, DDP placements beyond\n"
      "holes and deferred completions released, RDMAP Terminates, engine doorbells).\n"
      "Works on every process using this RNIC: rnic ping/xfer/demo, and programs started with\n"
      "`rnic run -- PROG` (rping, ib_write_bw ...). Only your own processes answer. Each\n"
      "emulated RNIC listens on the abstract Unix socket @rnic-stat-PID-N; RNIC_STAT=0 in the\n"
      "process's environment turns that off. See docs/stat.md.\n"
      "Example: rnic ping --server & rnic stat $!\n"
      "Exit status: 0 answered, 2 no such process, no emulated RNIC in it, no answer in time,\n"
      "or a bad option.");
  cmd->add_option("pid", o->pid, "Process ID of the program to look at")
      ->required()
      ->check(CLI::Range(1L, static_cast<long>(INT_MAX)));
  cmd->add_flag("--json", o->json,
                "Print the JSON document only (pretty): {\"pid\": PID, \"devices\": [...]},\n"
                "one entry per emulated RNIC (docs/stat.md lists the fields)");
  cmd->add_flag("--compact", o->compact, "With --json: the document on one line");
  cmd->add_option("--timeout", o->timeout_ms,
                  "Milliseconds to wait for the answer, in all (default 2000)")
      ->check(CLI::Range(1, 600000));
  cmd->add_option("--watch", o->watch,
                  "Ask again every SECONDS (0.1 to 3600) until interrupted or the process\n"
                  "ends (then exit status 0)")
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--count", o->count,
                  "With --watch: stop after this many answers (default: until the process ends)")
      ->check(CLI::Range(1, 1000000));
  return [o]() -> int {
    if (o->count > 0 && o->watch <= 0) {
      std::cerr << "rnic stat: --count needs --watch SECONDS\n";
      return 2;
    }
    bool answered = false;
    int answers = 0;
    for (;;) {
      auto r = rnic::query_stat(o->pid, std::chrono::milliseconds(o->timeout_ms));
      const auto gone = [](const rnic::StatError& e) {
        return e.kind == rnic::StatError::Kind::NoProcess ||
               e.kind == rnic::StatError::Kind::NoRnic;
      };
      // Under --watch the process ending is the usual way for it to stop. It may end while it
      // is being asked (the connection then closes without an answer, or with half of one):
      // asked once more, a process that is gone says so.
      if (!r && answered && o->watch > 0 && !gone(r.error())) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (auto again = rnic::query_stat(o->pid, std::chrono::milliseconds(o->timeout_ms));
            !again && gone(again.error()))
          r = std::move(again);
      }
      if (!r) {
        std::cerr << "rnic stat: " << r.error().message << "\n";
        return answered && gone(r.error()) ? 0 : 2;
      }
      answered = true;
      json all = {{"pid", o->pid}, {"devices", json::array()}};
      for (const auto& text : *r) {
        auto d = json::parse(text, nullptr, false);
        if (d.is_discarded()) {
          std::cerr << "rnic stat: process " << o->pid << " answered something that is not JSON\n";
          return 2;
        }
        all["devices"].push_back(std::move(d));
      }
      if (o->json || o->compact) {
        std::cout << all.dump(o->compact ? -1 : 2) << std::endl;
      } else {
        const auto& first = all["devices"].front();
        std::cout << fmt::format("process {} ({}): {} emulated RNIC(s)\n", o->pid,
                                 first.value("program", std::string("?")), all["devices"].size());
        try {
          for (const auto& d : all["devices"]) print_text(d, std::cout);
        } catch (const json::exception& e) {
          std::cerr << "rnic stat: process " << o->pid << " answered an unexpected document ("
                    << e.what() << "); try --json\n";
          return 2;
        }
        std::cout << std::flush;
      }
      if (o->watch <= 0 || (o->count > 0 && ++answers >= o->count)) return 0;
      std::this_thread::sleep_for(std::chrono::duration<double>(o->watch));
      if (!o->json && !o->compact) std::cout << "\n";
    }
  };
}

}  // namespace iwarp::tools
