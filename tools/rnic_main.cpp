// rnic: the userspace software RNIC's front door.
#include "common/log.hpp"

#include <CLI/CLI.hpp>
#include <iostream>
#include <map>

#include "tools/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "rnic - a userspace software iWARP RNIC (MPA/DDP/RDMAP over TCP).\n"
      "Run two emulated RNICs (rnic ping, rnic demo, rnic xfer), decode iWARP captures,\n"
      "replay them through the stack (rnic replay), draw them as ladder diagrams (rnic ladder),\n"
      "show a running process's queue pairs and counters (rnic stat PID) and generate sample\n"
      "traces."};
  app.require_subcommand(1);
  app.fallthrough();  // --log-level also after the subcommand
  app.set_version_flag("--version", "rnic 0.1.0");
  std::string log_level;  // empty: RNIC_LOG, else warn
  app.add_option("--log-level", log_level,
                 "Log level for every layer (trace, debug, info, warn, error, off), or per layer:\n"
                 "  rnic=debug,cm=info (layers: mpa, ddp, rnic, cm, trace, tool); RNIC_LOG sets "
                 "the default")
      ->check([](const std::string& s) { return iwarp::log::configure(s); });

  std::map<CLI::App*, iwarp::tools::Runner> runners;
  auto add = [&](auto fn) {
    auto r = fn(app);
    runners[app.get_subcommands({}).back()] = r;
  };
  add(iwarp::tools::add_decode_command);
  add(iwarp::tools::add_generate_command);
  add(iwarp::tools::add_ping_command);
  add(iwarp::tools::add_xfer_command);
  add(iwarp::tools::add_demo_command);
  add(iwarp::tools::add_cmatose_command);
  add(iwarp::tools::add_replay_command);
  add(iwarp::tools::add_enlarge_demo_command);
  add(iwarp::tools::add_enlarge_bench_command);
  add(iwarp::tools::add_run_command);
  add(iwarp::tools::add_ladder_command);
  add(iwarp::tools::add_stat_command);
  add(iwarp::tools::add_soak_command);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // These subcommands' usage errors are one line, "rnic NAME: --FLAG: why".
    for (auto* sub : app.get_subcommands())
      if (e.get_exit_code() != 0 &&
          (sub->get_name() == "enlarge-bench" || sub->get_name() == "ladder" ||
           sub->get_name() == "stat" || sub->get_name() == "soak")) {
        std::cerr << "rnic " << sub->get_name() << ": " << e.what() << "\n";
        return 2;
      }
    return app.exit(e) == 0 ? 0 : 2;  // --help is 0; a bad flag is 2, like bad input
  }
  if (!log_level.empty()) iwarp::log::configure(log_level);
  for (auto* sub : app.get_subcommands())
    if (auto it = runners.find(sub); it != runners.end()) return it->second();
  return 2;
}
