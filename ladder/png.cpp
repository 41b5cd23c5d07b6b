#include "ladder/png.hpp"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

extern char** environ;

namespace iwarp::ladder {

namespace {

// The converter's path on PATH, or empty.
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return {};
  std::string p = path;
  std::size_t start = 0;
  while (start <= p.size()) {
    std::size_t colon = p.find(':', start);
    if (colon == std::string::npos) colon = p.size();
    std::filesystem::path dir(p.substr(start, colon - start));
    if (dir.empty()) dir = ".";
    const auto cand = (dir / name).string();
    if (::access(cand.c_str(), X_OK) == 0 && !std::filesystem::is_directory(cand)) return cand;
    start = colon + 1;
  }
  return {};
}

}  // namespace

std::expected<void, std::string> svg_to_png(const std::string& svg_path,
                                            const std::string& png_path) {
  const std::string conv = find_on_path(kPngConverter);
  if (conv.empty())
    return std::unexpected(
        fmt::format("--png: {} not found on PATH (install Debian's librsvg2-bin: apt-get install "
                    "librsvg2-bin); the SVG {} was written",
                    kPngConverter, svg_path));
  std::vector<std::string> args = {conv, "-f", "png", "-b", "white", "-o", png_path, svg_path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int rc = ::posix_spawn(&pid, conv.c_str(), nullptr, nullptr, argv.data(), environ); rc != 0)
    return std::unexpected(fmt::format("--png: cannot run {}: {}", conv, std::strerror(rc)));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return std::unexpected(fmt::format("--png: waiting for {}: {}", conv, std::strerror(errno)));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return std::unexpected(fmt::format("--png: {} failed on {} ({})", conv, svg_path,
                                       WIFEXITED(status)
                                           ? fmt::format("exit status {}", WEXITSTATUS(status))
                                           : fmt::format("signal {}", WTERMSIG(status))));
  return {};
}

}  // namespace iwarp::ladder
