// A program run as a child process (stdout, and with `quiet` stderr, to /dev/null), its peak
// resident set taken from wait4(), and a deadline: the tests that check what memory a command
// needs (rnic decode, rnic replay) share it.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace iwarp::testing_support {

// (peak resident set in octets, exit status); exit status -1 when killed at the deadline,
// -2 when it ended by a signal.
inline std::pair<std::uint64_t, int> run_child_rss(std::vector<std::string> argv_s,
                                                   std::chrono::seconds deadline,
                                                   bool quiet = false) {
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    if (quiet) ::dup2(null, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int st = 0;
  rusage ru{};
  const auto t0 = std::chrono::steady_clock::now();
  while (::wait4(pid, &st, WNOHANG, &ru) != pid) {
    if (std::chrono::steady_clock::now() - t0 > deadline) {
      ::kill(pid, SIGKILL);
      ::wait4(pid, &st, 0, &ru);
      return {0, -1};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return {static_cast<std::uint64_t>(ru.ru_maxrss) * 1024, WIFEXITED(st) ? WEXITSTATUS(st) : -2};
}

}  // namespace iwarp::testing_support
