// PLACEHOLDER being written by a helper: rnic enlarge-bench.
#include "tools/commands.hpp"
namespace iwarp::tools {
Runner add_enlarge_bench_command(CLI::App& app) {
  app.add_subcommand("enlarge-bench", "(being written)");
  return [] { return 1; };
}
}  // namespace iwarp::tools
