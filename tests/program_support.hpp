// Running arbitrary programs (the unmodified Debian RDMA tools, through `rnic run`) from the
// drop-in integration tests: spawn in their own process group with stdout and stderr in files,
// wait with a deadline (the whole group is killed when it passes), read what they printed, and a
// failure message that always says which program, its full command line, how it ended and the
// end of its output. Every wait here is bounded.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace iwarp::test {

using ProgramClock = std::chrono::steady_clock;

// How a program ended (or that it has not yet).
struct ProgramStatus {
  enum class Kind {
    NotStarted,        // posix_spawn failed
    Running,           // not reaped yet
    Exited,            // exit(code)
    Signaled,          // killed by a signal it did not catch (not sent by us)
    KilledAtDeadline,  // still running at the deadline: the test killed its process group
    StoppedByTest,     // a daemon the test stopped on purpose (Program::stop)
  };
  Kind kind = Kind::Running;
  int code = 0;    // exit status (Exited)
  int signal = 0;  // Signaled / StoppedByTest
  bool core_dumped = false;
  double seconds = 0;  // from spawn to reaping
  std::string spawn_error;

  bool exited() const { return kind == Kind::Exited; }
  bool ok() const { return kind == Kind::Exited && code == 0; }

  std::string text() const {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", seconds);
    switch (kind) {
      case Kind::NotStarted:
        return "could not be started: " + spawn_error;
      case Kind::Running:
        return "still running";
      case Kind::Exited:
        return "exited with status " + std::to_string(code) + " after " + secs + " s";
      case Kind::Signaled:
        return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")" +
               (core_dumped ? ", core dumped," : "") + " after " + secs + " s";
      case Kind::KilledAtDeadline:
        return std::string("killed at the deadline after ") + secs +
               " s (it was still running; the test killed its process group)";
      case Kind::StoppedByTest:
        return std::string("stopped by the test with SIG") + sigabbrev_np(signal) + " after " +
               secs + " s (a daemon)";
    }
    return "?";
  }
};

// The last `n` lines of `text`, each cut to `width` characters (rping -v prints 64 KiB lines).
inline std::string tail_lines(const std::string& text, std::size_t n, std::size_t width = 300) {
  std::vector<std::string_view> lines;
  std::string_view all(text);
  std::size_t start = 0;
  while (start < all.size()) {
    auto end = all.find('\n', start);
    if (end == std::string_view::npos) end = all.size();
    lines.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  std::string out;
  const std::size_t first = lines.size() > n ? lines.size() - n : 0;
  if (first > 0) out += "    [... " + std::to_string(first) + " earlier lines]\n";
  for (std::size_t i = first; i < lines.size(); ++i) {
    out += "    | ";
    if (lines[i].size() > width) {
      out += std::string(lines[i].substr(0, width)) + " [... " +
             std::to_string(lines[i].size() - width) + " more characters]";
    } else {
      out += std::string(lines[i]);
    }
    out += '\n';
  }
  if (lines.empty()) out += "    (no output)\n";
  return out;
}

// A shell-like rendering of an argument vector (for failure messages: paste and rerun).
inline std::string command_line(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_./=:,+@%") == std::string::npos;
    if (plain) {
      s += a;
    } else {
      s += '\'';
      for (char c : a) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
      s += '\'';
    }
  }
  return s;
}

// One program run in its own process group, stdin from /dev/null, stdout and stderr in two files
// under the test temporary directory (kept when the test failed, removed otherwise). Two files,
// not one: stdout is block-buffered into a file, so a stderr line written in between would land
// in the middle of a stdout line (rping's server ends with a stderr line while its 64 KiB ping
// lines are still buffered).
class Program {
 public:
  Program(std::string name, std::vector<std::string> argv)
      : name_(std::move(name)), argv_(std::move(argv)) {
    static std::atomic<int> sequence{0};
    std::string tag;
    for (char c : name_) tag += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    const auto base = ::testing::TempDir() + "dropin_" + std::to_string(::getpid()) + "_" +
                      std::to_string(sequence++) + "_" + tag;
    out_ = base + ".out";
    err_ = base + ".err";
    start_ = ProgramClock::now();

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // Own process group (pgid = pid), so a deadline kills whatever the program forked too
    // (qperf's server forks a child per test). Default dispositions and an empty mask, whatever
    // the test runner had.
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    std::vector<char*> args;
    for (auto& a : argv_) args.push_back(a.data());
    args.push_back(nullptr);
    // The test process's own RNIC_* settings are not passed on: every setting a test wants
    // is a flag of `rnic run` (RNIC_DROPIN_DIR would even point the wrapper at other libraries).
    std::vector<char*> env;
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "RNIC_", 5) != 0) env.push_back(*e);
    env.push_back(nullptr);
    const int rc = argv_.empty()
                       ? EINVAL
                       : posix_spawnp(&pid_, argv_[0].c_str(), &fa, &attr, args.data(), env.data());
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      pid_ = -1;
      status_.kind = ProgramStatus::Kind::NotStarted;
      status_.spawn_error = std::strerror(rc);
    }
  }

  ~Program() {
    if (status_.kind == ProgramStatus::Kind::Running) {
      ::kill(-pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
    if (!::testing::Test::HasFailure()) {
      std::remove(out_.c_str());
      std::remove(err_.c_str());
    }
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  const std::vector<std::string>& argv() const { return argv_; }
  const std::string& stdout_file() const { return out_; }
  const std::string& stderr_file() const { return err_; }
  const ProgramStatus& status() const { return status_; }

  // True while the program has not exited (reaps it when it has).
  bool running() {
    if (status_.kind != ProgramStatus::Kind::Running) return false;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      record(st);
      return false;
    }
    return true;
  }

  // Waits at most `limit` for the program to end; at the deadline its whole process group is
  // killed and the status says so.
  const ProgramStatus& wait(std::chrono::milliseconds limit) {
    const auto deadline = ProgramClock::now() + limit;
    while (running()) {
      if (ProgramClock::now() >= deadline) {
        const double ran = std::chrono::duration<double>(ProgramClock::now() - start_).count();
        capture_hang_evidence();
        kill_group(SIGKILL);
        status_.kind = ProgramStatus::Kind::KilledAtDeadline;
        status_.seconds = ran;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_;
  }

  // Ends a daemon on purpose: SIGTERM to the group, SIGKILL after `grace`. If it had already
  // ended by itself, its own status stays (so a crashed daemon is still seen as one).
  const ProgramStatus& stop(std::chrono::milliseconds grace = std::chrono::seconds(5)) {
    if (!running()) return status_;
    ::kill(-pid_, SIGTERM);
    const auto deadline = ProgramClock::now() + grace;
    int st = 0;
    while (ProgramClock::now() < deadline) {
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        record(st);
        if (status_.kind == ProgramStatus::Kind::Signaled && status_.signal == SIGTERM)
          status_.kind = ProgramStatus::Kind::StoppedByTest;
        ::kill(-pid_, SIGKILL);  // whatever else of its group is left
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill_group(SIGKILL);
    status_.kind = ProgramStatus::Kind::StoppedByTest;
    status_.signal = SIGKILL;
    return status_;
  }

  std::string stdout_text() const { return read_file(out_); }
  std::string stderr_text() const { return read_file(err_); }
  // Everything it printed: stdout, then stderr.
  std::string output() const {
    auto out = stdout_text();
    if (!out.empty() && out.back() != '\n') out += '\n';
    return out + stderr_text();
  }

  // Everything a failure message needs: program, command line, how it ended, last lines.
  std::string describe(std::size_t lines = 40) const {
    std::string s = "\n== " + name_ + ": " + status_.text() +
                    "\n   command: " + command_line(argv_) + "\n   stdout (" + out_ + "), last " +
                    std::to_string(lines) + " lines:\n" + tail_lines(stdout_text(), lines) +
                    "   stderr (" + err_ + "), last " + std::to_string(lines) + " lines:\n" +
                    tail_lines(stderr_text(), lines);
    if (!hang_evidence_.empty())
      s += "   gdb backtrace taken before the kill (DROPIN_GDB_ON_HANG):\n" +
           tail_lines(hang_evidence_, 200);
    return s;
  }

 private:
  static std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  void record(int st) {
    status_.seconds = std::chrono::duration<double>(ProgramClock::now() - start_).count();
    if (WIFEXITED(st)) {
      status_.kind = ProgramStatus::Kind::Exited;
      status_.code = WEXITSTATUS(st);
    } else {
      status_.kind = ProgramStatus::Kind::Signaled;
      status_.signal = WTERMSIG(st);
      status_.core_dumped = WCOREDUMP(st);
    }
  }
  void kill_group(int sig) {
    ::kill(-pid_, sig);
    int st;
    ::waitpid(pid_, &st, 0);
    status_.seconds = std::chrono::duration<double>(ProgramClock::now() - start_).count();
  }
  // With DROPIN_GDB_ON_HANG set, every thread's backtrace of a program about to be killed at
  // its deadline (evidence for a hang in the library, not needed for the verdict).
  void capture_hang_evidence() {
    if (!std::getenv("DROPIN_GDB_ON_HANG")) return;
    Program gdb("gdb",
                {"gdb", "-p", std::to_string(pid_), "-batch", "-nx", "-ex", "thread apply all bt"});
    gdb.wait(std::chrono::seconds(60));
    hang_evidence_ = gdb.output();
  }

  std::string name_;
  std::vector<std::string> argv_;
  std::string out_, err_;
  std::string hang_evidence_;
  pid_t pid_ = -1;
  ProgramClock::time_point start_;
  ProgramStatus status_;
};

// gtest verdicts with the full description attached.
inline ::testing::AssertionResult exited_ok(const Program& p) {
  if (p.status().ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << p.name() << " did not exit 0:" << p.describe();
}
// A clean failure: ended by itself with a non-zero status, not by a signal or our deadline.
inline ::testing::AssertionResult exited_with_failure(const Program& p) {
  if (p.status().exited() && p.status().code != 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << p.name() << " should have failed cleanly (non-zero exit status):" << p.describe();
}

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, read back, closed); never
// the same one twice in this process. 0 on failure.
inline int free_tcp_port() {
  static std::mutex mu;
  static std::set<int> handed_out;
  std::lock_guard lock(mu);
  for (int attempt = 0; attempt < 50; ++attempt) {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return 0;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                    ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0;
    ::close(s);
    if (!ok) return 0;
    const int port = ntohs(a.sin_port);
    if (handed_out.insert(port).second) return port;
  }
  return 0;
}

// Whether some socket of this host is in LISTEN state on TCP `port` (any address, IPv4 or IPv6),
// read from /proc/net/tcp{,6}. Looking instead of connecting: a probe connection would be a
// client to servers that serve exactly one (rping -s, perftest) or log a failed request (qperf).
inline bool tcp_port_listening(int port) {
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state;
      if (!(f >> slot >> local >> remote >> state)) continue;
      const auto colon = local.rfind(':');
      if (colon == std::string::npos || state != "0A") continue;  // 0A = TCP_LISTEN
      if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) return true;
    }
  }
  return false;
}

// Waits (bounded) until `server` listens on TCP `port`; fails early if it exits first.
inline ::testing::AssertionResult wait_listening(
    Program& server, int port, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = ProgramClock::now() + limit;
  while (ProgramClock::now() < deadline) {
    if (tcp_port_listening(port)) return ::testing::AssertionSuccess();
    if (!server.running())
      return ::testing::AssertionFailure() << server.name() << " ended before listening on port "
                                           << port << ":" << server.describe();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ::testing::AssertionFailure()
         << server.name() << " was not listening on TCP port " << port << " after "
         << std::chrono::duration<double>(limit).count() << " s:" << server.describe();
}

// Waits (bounded) until `p`'s output contains `text`; fails early if it exits without it.
inline ::testing::AssertionResult wait_for_output(
    Program& p, const std::string& text,
    std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = ProgramClock::now() + limit;
  for (;;) {
    const bool alive = p.running();
    if (p.output().find(text) != std::string::npos) return ::testing::AssertionSuccess();
    if (!alive)
      return ::testing::AssertionFailure()
             << p.name() << " ended without printing \"" << text << "\":" << p.describe();
    if (ProgramClock::now() >= deadline)
      return ::testing::AssertionFailure()
             << p.name() << " had not printed \"" << text << "\" after "
             << std::chrono::duration<double>(limit).count() << " s:" << p.describe();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The lines of `text`.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// A fresh empty directory under the test temporary directory.
inline std::string fresh_directory(const std::string& tag) {
  static std::atomic<int> sequence{0};
  auto dir = ::testing::TempDir() + "dropin_" + std::to_string(::getpid()) + "_" +
             std::to_string(sequence++) + "_" + tag;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  return dir;
}

}  // namespace iwarp::test
