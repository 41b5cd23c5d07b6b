#include "rnic/stat_client.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "rnic/stat_server.hpp"

namespace iwarp::rnic {

namespace {

using Clock = std::chrono::steady_clock;

// An answer larger than this is not one (a device lists at most 4096 regions and QPs).
constexpr std::size_t kMaxAnswer = 64u << 20;

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<std::int64_t>(left.count(), 0));
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::vector<std::string> stat_sockets(long pid) {
  // Each line ends with the path; an abstract one is shown with '@' for its leading NUL. The
  // accepted connections of a listener carry its name too: each name once.
  const std::string prefix =
      stat_socket_name(pid, 0).substr(0, stat_socket_name(pid, 0).size() - 1);
  std::vector<std::pair<int, std::string>> found;
  std::ifstream in("/proc/net/unix");
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.rfind(" @");
    if (at == std::string::npos) continue;
    const std::string name = line.substr(at + 2);
    if (!name.starts_with(prefix)) continue;
    const std::string index = name.substr(prefix.size());
    if (index.empty() || index.size() > 6 || !std::ranges::all_of(index, ::isdigit)) continue;
    const int i = std::stoi(index);
    if (std::ranges::find(found, i, &std::pair<int, std::string>::first) == found.end())
      found.emplace_back(i, name);
  }
  std::ranges::sort(found);
  std::vector<std::string> out;
  for (auto& [i, n] : found) out.push_back(std::move(n));
  return out;
}

std::expected<std::string, StatError> query_stat_socket(const std::string& name,
                                                        std::chrono::milliseconds bound,
                                                        long expected_pid) {
  const auto deadline = Clock::now() + bound;
  auto fail = [&](StatError::Kind k, std::string m) {
    return std::unexpected(StatError{k, std::move(m)});
  };
  Fd s{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  if (s.fd < 0)
    return fail(StatError::Kind::NoAnswer, fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof a.sun_path) return fail(StatError::Kind::NoRnic, "name too long");
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  // A full backlog (the server takes 4 clients at once) says EAGAIN: try again until the bound.
  while (::connect(s.fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    if (errno == EINTR) continue;
    if (errno == EAGAIN && ms_left(deadline) > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (errno == ECONNREFUSED || errno == ENOENT)
      return fail(StatError::Kind::NoRnic, fmt::format("@{}: nothing listens", name));
    if (errno == EAGAIN)
      return fail(StatError::Kind::Timeout,
                  fmt::format("@{}: busy, no answer within {} ms", name, bound.count()));
    return fail(StatError::Kind::NoAnswer, fmt::format("@{}: {}", name, std::strerror(errno)));
  }
  // An abstract name has no owner or permissions: any local process may take one, even before
  // the process it names exists. The kernel says who listens (the process that called
  // listen(), SO_PEERCRED); an answer from anyone else is refused.
  if (expected_pid > 0) {
    ucred cred{};
    socklen_t clen = sizeof cred;
    if (::getsockopt(s.fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0)
      return fail(StatError::Kind::NoAnswer,
                  fmt::format("@{}: who listens? {}", name, std::strerror(errno)));
    if (cred.pid != expected_pid)
      return fail(StatError::Kind::BadAnswer,
                  fmt::format("@{}: held by process {}, not {}: another program took the name; "
                              "its answer is not read",
                              name, cred.pid, expected_pid));
  }
  const std::string request = "stat\n";
  std::size_t sent = 0;
  std::string answer;
  char buf[65536];
  for (;;) {
    pollfd p{s.fd, static_cast<short>(POLLIN | (sent < request.size() ? POLLOUT : 0)), 0};
    const int left = ms_left(deadline);
    const int r = left > 0 ? ::poll(&p, 1, left) : 0;
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return fail(StatError::Kind::Timeout,
                  fmt::format("@{}: no answer within {} ms", name, bound.count()));
    if (sent < request.size() && (p.revents & POLLOUT)) {
      const ssize_t n = ::send(s.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::read(s.fd, buf, sizeof buf);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) break;  // the end of the answer (or a reset)
      answer.append(buf, static_cast<std::size_t>(n));
      if (answer.size() > kMaxAnswer)
        return fail(StatError::Kind::BadAnswer,
                    fmt::format("@{}: answer over {} octets", name, kMaxAnswer));
    }
  }
  if (answer.empty())
    return fail(StatError::Kind::NoAnswer,
                fmt::format("@{}: closed without an answer (a process of another user, or "
                            "more than {} queries at once)",
                            name, kStatMaxClients));
  if (answer.back() != '\n')
    return fail(StatError::Kind::BadAnswer, fmt::format("@{}: the answer was cut short", name));
  answer.pop_back();
  return answer;
}

std::expected<std::vector<std::string>, StatError> query_stat(long pid,
                                                              std::chrono::milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH))
    return std::unexpected(
        StatError{StatError::Kind::NoProcess, fmt::format("no process {}", pid)});
  auto names = stat_sockets(pid);
  // Without /proc/net/unix (a restricted /proc): the first few indexes.
  if (names.empty() && !std::ifstream("/proc/net/unix"))
    for (int i = 0; i < 8; ++i) names.push_back(stat_socket_name(pid, i));
  const StatError none{
      StatError::Kind::NoRnic,
      fmt::format("no emulated RNIC in process {} (is it running under rnic run?)", pid)};
  std::vector<std::string> docs;
  for (const auto& n : names) {
    auto d = query_stat_socket(n, std::chrono::milliseconds(std::max(ms_left(deadline), 1)), pid);
    if (d) {
      docs.push_back(std::move(*d));
      continue;
    }
    if (d.error().kind == StatError::Kind::NoRnic) continue;  // a device gone meanwhile
    d.error().message = fmt::format("process {}: {}", pid, d.error().message);
    return std::unexpected(d.error());
  }
  if (docs.empty()) return std::unexpected(none);
  return docs;
}

}  // namespace iwarp::rnic
