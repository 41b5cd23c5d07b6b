// PLACEHOLDER: rnic enlarge-demo (being written).
#include "tools/commands.hpp"
namespace iwarp::tools {
Runner add_enlarge_demo_command(CLI::App& app) {
  app.add_subcommand("enlarge-demo", "(being written)");
  return [] { return 1; };
}
}  // namespace iwarp::tools
