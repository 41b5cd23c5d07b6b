#include "bench/process_probes.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace iwarp::bench {

std::uint64_t vm_rss() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

std::size_t open_fds() {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

std::pair<std::uint64_t, std::string> raise_nofile(std::uint64_t need) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return {0, std::strerror(errno)};
  if (rl.rlim_cur >= need) return {rl.rlim_cur, ""};
  rlimit want = rl;
  want.rlim_cur = need;
  if (want.rlim_max < need) want.rlim_max = need;  // root may raise the hard limit
  if (::setrlimit(RLIMIT_NOFILE, &want) == 0) return {need, ""};
  const std::string why = fmt::format("cannot raise the open-files limit to {} ({}; hard limit {})",
                                      need, std::strerror(errno), rl.rlim_max);
  want = rl;
  want.rlim_cur = rl.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &want) == 0) return {rl.rlim_max, why};
  return {rl.rlim_cur, why};
}

std::optional<std::string> LineReader::try_line() {
  for (;;) {
    if (auto nl = buf.find('\n'); nl != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      return line;
    }
    if (eof) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return std::nullopt;
    char tmp[4096];
    const ssize_t k = ::read(fd, tmp, sizeof tmp);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      eof = true;
      return std::nullopt;
    }
    buf.append(tmp, static_cast<std::size_t>(k));
  }
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string w;
  while (ss >> w) out.push_back(w);
  return out;
}

}  // namespace iwarp::bench
