// A program run as a child process (stdout, and with `quiet` stderr, to /dev/null), its peak
// resident set, and a deadline: the tests that check what memory a command needs (rnic decode,
// rnic replay) share it. The peak comes from GNU time (/usr/bin/time -f %M, a small process
// that forks the program): wait4()'s ru_maxrss of a child forked from the test process counts
// the test process's own resident set too (Linux keeps the larger of the address space the
// child was forked with and the one it exec'd), so after other tests in the same process it
// read 39 MiB for a command that needs 10. Without /usr/bin/time, or when its figure cannot be
// read, wait4()'s is used (never less than the program's peak: a bound checked against it
// holds). The program runs in a process group of its own (the deadline kills both).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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
  static int serial = 0;
  const std::string rss_file =
      (std::filesystem::temp_directory_path() /
       ("child-rss-" + std::to_string(::getpid()) + "-" + std::to_string(++serial) + ".txt"))
          .string();
  ::unlink(rss_file.c_str());
  const bool timed = ::access("/usr/bin/time", X_OK) == 0;
  if (timed) argv_s.insert(argv_s.begin(), {"/usr/bin/time", "-q", "-f", "%M", "-o", rss_file});
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // the deadline kills the program and its time(1) together
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
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::wait4(pid, &st, 0, &ru);
      ::unlink(rss_file.c_str());
      return {0, -1};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::uint64_t kib = static_cast<std::uint64_t>(ru.ru_maxrss);
  if (timed) {
    // time(1) writes the program's peak in KiB as the file's last line; it exits with the
    // program's status, or 128 + the signal that ended it.
    std::uint64_t peak = 0;
    if (FILE* f = std::fopen(rss_file.c_str(), "r")) {
      char line[128];
      while (std::fgets(line, sizeof line, f)) peak = std::strtoull(line, nullptr, 10);
      std::fclose(f);
    }
    if (peak > 0) kib = peak;
    ::unlink(rss_file.c_str());
    if (WIFEXITED(st) && WEXITSTATUS(st) > 128) return {kib * 1024, -2};
  }
  return {kib * 1024, WIFEXITED(st) ? WEXITSTATUS(st) : -2};
}

}  // namespace iwarp::testing_support
