// Subcommands of the `rnic` front door. Each registers its options on the CLI11 app and
// returns a runner; runners return the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace iwarp::tools {

using Runner = std::function<int()>;

Runner add_decode_command(CLI::App& app);
Runner add_generate_command(CLI::App& app);
Runner add_ping_command(CLI::App& app);
Runner add_demo_command(CLI::App& app);
Runner add_xfer_command(CLI::App& app);
Runner add_cmatose_command(CLI::App& app);
Runner add_replay_command(CLI::App& app);
Runner add_enlarge_demo_command(CLI::App& app);
Runner add_enlarge_bench_command(CLI::App& app);
Runner add_run_command(CLI::App& app);
Runner add_ladder_command(CLI::App& app);
Runner add_stat_command(CLI::App& app);
Runner add_soak_command(CLI::App& app);

}  // namespace iwarp::tools
