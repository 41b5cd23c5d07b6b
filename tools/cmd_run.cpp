// rnic run: runs an unmodified RDMA program (rping, perftest, qperf, your own libibverbs code)
// on the emulated RNIC. It puts the drop-in libibverbs.so.1 / librdmacm.so.1 (verbs_abi/) first
// on LD_LIBRARY_PATH, turns its flags into the RNIC_* settings those libraries read, and execs
// the program, which then talks iWARP over TCP with no kernel module, no /dev/infiniband and
// no root.
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "rnic/qp_types.hpp"
#include "rnic/segment_tap.hpp"
#include "tools/app_options.hpp"
#include "tools/commands.hpp"

namespace iwarp::tools {

namespace {

struct RunOptions {
  std::string crc, markers, mpa_rev, p2p, rtr, capture_dir, log, device, timeout_ms, rnr_wait,
      poll_yield, first_fpdu_delay, llp_timeout, real_segments, beyond_holes, direct_min;
  bool print_env = false, busy_poll = false;
};

// Where the drop-in libraries are: $RNIC_DROPIN_DIR, else next to this binary in a build tree
// (verbs_abi/lib), else an installed ../lib/rnic.
std::string dropin_dir(std::string* looked) {
  std::vector<std::filesystem::path> candidates;
  if (const char* d = std::getenv("RNIC_DROPIN_DIR"); d && *d) candidates.emplace_back(d);
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "verbs_abi" / "lib");
    candidates.push_back(exe.parent_path().parent_path() / "lib" / "rnic");
  }
  for (const auto& c : candidates) {
    if (!looked->empty()) *looked += ", ";
    *looked += c.string();
    if (std::filesystem::exists(c / "libibverbs.so.1", ec) &&
        std::filesystem::exists(c / "librdmacm.so.1", ec))
      return c.string();
  }
  return {};
}

int run(const RunOptions& o, const std::vector<std::string>& command) {
  if (command.empty()) {
    std::cerr << "rnic run: no program to run (rnic run [OPTIONS] -- PROGRAM [ARGS...])\n";
    return 2;
  }
  if (o.busy_poll && !o.rnr_wait.empty() && o.rnr_wait != "0") {
    std::cerr << "rnic run: --busy-poll with --rnr-wait " << o.rnr_wait
              << ": a busy-polling thread cannot wait for itself to post a receive\n";
    return 2;
  }
  if (!o.beyond_holes.empty() && o.beyond_holes != "place" && o.real_segments.empty()) {
    std::cerr << "rnic run: --beyond-holes " << o.beyond_holes
              << " needs --real-segments (over the socket alone no segment arrives beyond a "
                 "hole)\n";
    return 2;
  }
  std::string looked;
  const std::string dir = dropin_dir(&looked);
  if (dir.empty()) {
    std::cerr << "rnic run: the drop-in libibverbs.so.1/librdmacm.so.1 are not in " << looked
              << " (build the 'dropin' target, or set RNIC_DROPIN_DIR)\n";
    return 1;
  }
  std::string path = dir;
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old && *old) path += ":" + std::string(old);
  ::setenv("LD_LIBRARY_PATH", path.c_str(), 1);
  auto set = [](const char* var, const std::string& v) {
    if (!v.empty()) ::setenv(var, v.c_str(), 1);
  };
  set("RNIC_CRC", o.crc);
  set("RNIC_MARKERS", o.markers);
  set("RNIC_MPA_REV", o.mpa_rev);
  set("RNIC_P2P", o.p2p.empty() ? "" : (o.p2p == "on" ? "1" : "0"));
  set("RNIC_RTR", o.rtr);
  set("RNIC_LOG", o.log);
  set("RNIC_DEVICE", o.device);
  set("RNIC_TIMEOUT_MS", o.timeout_ms);
  set("RNIC_RNR_WAIT_MS", o.rnr_wait);
  set("RNIC_FIRST_FPDU_DELAY_MS", o.first_fpdu_delay);
  set("RNIC_LLP_TIMEOUT_MS", o.llp_timeout);
  set("RNIC_POLL_YIELD", o.poll_yield);
  if (o.busy_poll) set("RNIC_BUSY_POLL", "1");
  set("RNIC_REAL_SEGMENTS", o.real_segments);
  set("RNIC_BEYOND_HOLES", o.beyond_holes);
  set("RNIC_DIRECT_MIN", o.direct_min);
  if (!o.capture_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.capture_dir, ec);
    if (ec) {
      std::cerr << "rnic run: --capture-dir " << o.capture_dir << ": " << ec.message() << "\n";
      return 2;
    }
    set("RNIC_CAPTURE_DIR", std::filesystem::absolute(o.capture_dir).string());
  }
  if (o.print_env) {
    for (const char* v :
         {"LD_LIBRARY_PATH", "RNIC_CRC", "RNIC_MARKERS", "RNIC_MPA_REV", "RNIC_P2P", "RNIC_RTR",
          "RNIC_LOG", "RNIC_DEVICE", "RNIC_TIMEOUT_MS", "RNIC_CONNECT_RETRY_MS", "RNIC_RNR_WAIT_MS",
          "RNIC_FIRST_FPDU_DELAY_MS", "RNIC_LLP_TIMEOUT_MS", "RNIC_POLL_YIELD", "RNIC_BUSY_POLL",
          "RNIC_REAL_SEGMENTS", "RNIC_BEYOND_HOLES", "RNIC_DIRECT_MIN", "RNIC_CAPTURE_DIR"})
      if (const char* x = std::getenv(v)) std::cerr << v << "=" << x << "\n";
  }
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::cerr << "rnic run: cannot run " << command[0] << ": " << std::strerror(errno) << "\n";
  return errno == ENOENT ? 127 : 126;
}

}  // namespace

namespace {
// CLI11's Range accepts "0x100" and "1e3" for a string option; the libraries read decimal
// digits only, so say so here rather than at the program's first verbs call.
CLI::Validator decimal_in(int lo, int hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
          return "expected decimal milliseconds";
        const int n = std::stoi(v);
        if (n < lo || n > hi) return fmt::format("expected {} to {}", lo, hi);
        return {};
      },
      fmt::format("INT in [{} - {}]", lo, hi));
}
}  // namespace

Runner add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* sub = app.add_subcommand(
      "run",
      "Run an unmodified RDMA program (rping, ucmatose, perftest's ib_* with -R, qperf -cm1,\n"
      "ibv_devinfo, your own libibverbs/librdmacm code) on the emulated RNIC, through the\n"
      "drop-in libibverbs.so.1 and librdmacm.so.1: no kernel module, no root.\n"
      "  rnic run -- rping -s -a 127.0.0.1 -v -C 10\n"
      "  rnic run -- rping -c -a 127.0.0.1 -v -C 10\n"
      "  rnic run --capture-dir caps -- ib_write_bw -R -F -d rnic0 127.0.0.1\n"
      "Each flag sets an environment variable the libraries read, which can also be set by\n"
      "hand (with LD_LIBRARY_PATH pointing at the libraries):\n"
      "  RNIC_CRC, RNIC_MARKERS, RNIC_MPA_REV, RNIC_P2P (1/0), RNIC_RTR, RNIC_TIMEOUT_MS,\n"
      "  RNIC_CONNECT_RETRY_MS (no flag), RNIC_RNR_WAIT_MS,\n"
      "  RNIC_FIRST_FPDU_DELAY_MS, RNIC_LLP_TIMEOUT_MS, RNIC_POLL_YIELD, RNIC_BUSY_POLL,\n"
      "  RNIC_REAL_SEGMENTS, RNIC_BEYOND_HOLES, RNIC_DIRECT_MIN, RNIC_CAPTURE_DIR, RNIC_LOG,\n"
      "  RNIC_DEVICE;\n"
      "  RNIC_DROPIN_DIR says where the libraries are;\n"
      "  RNIC_STAT=0 stops the process answering `rnic stat PID` (its live queue pairs,\n"
      "  regions and counters; docs/stat.md).\n"
      "Not supported (a one-line message says so): UD/UC/XRC QPs, address handles, multicast,\n"
      "memory windows, on-demand paging, rsockets, perftest without -R (iWARP connects through\n"
      "the CM).");
  sub->add_option("--crc", o->crc,
                  "CRC32c policy: required (ask for it), optional (follow the peer; default), off")
      ->check(CLI::IsMember({"required", "optional", "off"}));
  sub->add_option("--markers", o->markers, "MPA markers policy: required, optional, off (default)")
      ->check(CLI::IsMember({"required", "optional", "off"}));
  sub->add_option("--mpa-rev", o->mpa_rev, "Highest MPA revision to speak: 1 or 2 (default 2)")
      ->check(CLI::IsMember({"1", "2"}));
  sub->add_option("--p2p", o->p2p,
                  "RFC 6581 peer-to-peer mode (the initiator sends an RTR first): on (default "
                  "with MPA revision 2) or off")
      ->check(CLI::IsMember({"on", "off"}));
  sub->add_option("--rtr", o->rtr,
                  "The RTR message offered in peer-to-peer mode: write, read, send")
      ->check(CLI::IsMember({"write", "read", "send"}));
  sub->add_option("--timeout", o->timeout_ms,
                  "Milliseconds the MPA exchange waits for the peer (default 5000)")
      ->check(decimal_in(100, 3600000));
  sub->add_option("--first-fpdu-delay", o->first_fpdu_delay,
                  "Milliseconds the initiator holds its first FPDU after the MPA Reply (default\n"
                  "0; Linux siw 6.1 can stall on one that comes within ~2 ms)")
      ->check(decimal_in(0, 10000));
  sub->add_option("--llp-timeout", o->llp_timeout,
                  "Milliseconds a connection may go without an acknowledgement from the peer\n"
                  "before it is lost and its work requests flushed (default 60000; 0: the\n"
                  "kernel's defaults, which wait for ever on a zero window; else 1000 to 3600000)")
      ->check(llp_timeout_check());
  sub->add_option("--rnr-wait", o->rnr_wait,
                  "Milliseconds a Send that finds no posted receive waits for one before it is a\n"
                  "protocol error (default 0: at once, as RFC 5041 has it; at most 5000). iWARP\n"
                  "has no RNR NAK; InfiniBand benchmarks such as qperf's rc_bw and rc_bi_bw count\n"
                  "on one. The wait holds the emulated RNIC's engine: every connection of the\n"
                  "program pauses meanwhile")
      ->check(decimal_in(0, 5000));
  sub->add_option("--poll-yield", o->poll_yield,
                  "A thread polling an empty CQ this many times in a row yields the CPU, so a\n"
                  "busy-polling program (perftest) leaves the engine thread room on a machine\n"
                  "with few cores (default 16; 0: never)")
      ->check(decimal_in(0, 1000000));
  sub->add_flag("--busy-poll", o->busy_poll,
                "A thread that polls an empty CQ does the emulated RNIC's receive work itself\n"
                "(reads, placements, completions) while the engine thread steps aside: no\n"
                "thread hop and no wake-up between the socket and the program (perftest's\n"
                "latency tests). The engine thread takes over 250 us after the last poll.\n"
                "Not with --rnr-wait (the polling thread cannot wait for itself)");
  sub->add_option("--real-segments", o->real_segments,
                  "Receive the real TCP segments as they arrive on interface IFACE, in arrival\n"
                  "order (an AF_PACKET socket: root or CAP_NET_RAW; IPv4 over Ethernet), besides\n"
                  "each socket's in-order stream: a segment beyond a real TCP hole is placed at\n"
                  "once and its completion deferred until the hole closes. Each QP prints its\n"
                  "segment path (holes, placement, timings) on stderr when the program destroys\n"
                  "it. See docs/impaired-link.md")
      ->type_name("IFACE")
      ->check([](const std::string& ifname) { return rnic::SegmentTap::check(ifname); });
  sub->add_option("--beyond-holes", o->beyond_holes,
                  "What the segment path does with data beyond a TCP hole (--real-segments):\n"
                  "place (default: at once, completions deferred until the hole closes), hold\n"
                  "(kept, placed in order when it closes) or discard (dropped: the socket's\n"
                  "stream brings it again). See docs/beyond-holes.md")
      ->check(CLI::IsMember({"place", "hold", "discard"}));
  sub->add_option("--direct-min", o->direct_min,
                  "Payload runs of at least this many octets are read from the socket straight\n"
                  "into their target (no staging copy), shorter ones through the staging buffer\n"
                  "with the FPDUs around them (default 4096; off: never). See docs/direct-reads.md")
      ->type_name("OCTETS|off")
      ->check([](const std::string& v) -> std::string {
        // As the libraries read RNIC_DIRECT_MIN (verbs_abi/settings.cpp): decimal digits only.
        if (v == "off") return {};
        std::size_t n = 0;
        const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec != std::errc{} || p != v.data() + v.size() || n < rnic::kMinDirectReadMin ||
            n > rnic::kMaxDirectReadMin)
          return fmt::format("expected octets from {} to {}, or off", rnic::kMinDirectReadMin,
                             rnic::kMaxDirectReadMin);
        return {};
      });
  sub->add_option("--capture-dir", o->capture_dir,
                  "Record every connection of the program as a pcap in this directory\n"
                  "(PROGRAM-PID.pcap, PROGRAM-PID-2.pcap, ...), for Wireshark, rnic decode and\n"
                  "rnic replay");
  sub->add_option("--log", o->log,
                  "Log levels of the emulated RNIC: LEVEL or LAYER=LEVEL,... (layers: mpa, ddp,\n"
                  "rnic, cm, tool; default error)")
      ->check([](const std::string& v) { return log::configure(v); });
  sub->add_option("--device", o->device, "The device's name (default rnic0)");
  sub->add_flag("--print-env", o->print_env, "Print the environment set for the program");
  auto command = std::make_shared<std::vector<std::string>>();
  sub->add_option("command", *command, "The program and its arguments (after --)")->required();
  sub->positionals_at_end();
  return [o, command] { return run(*o, *command); };
}

}  // namespace iwarp::tools
