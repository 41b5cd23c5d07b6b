// Runs the rnic binary as separate processes for the integration tests: spawn with output to a
// file, wait with a deadline (killed when it passes), read what it printed.
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

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace iwarp::test {

class Process {
 public:
  // Starts IWARP_RNIC_BIN with `args`; stdout and stderr go to a file.
  explicit Process(std::vector<std::string> args, const std::string& tag) {
    out_ = ::testing::TempDir() + "rnic_" + std::to_string(::getpid()) + "_" + tag + ".out";
    std::vector<std::string> full{IWARP_RNIC_BIN};
    full.insert(full.end(), args.begin(), args.end());
    command_ = "";
    for (auto& a : full) command_ += a + " ";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> argv;
    for (auto& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, full[0].c_str(), &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Process() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
    if (!::testing::Test::HasFailure()) std::remove(out_.c_str());
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // The exit code, or -1 when the process had to be killed at the deadline (-2: signal).
  int wait(std::chrono::seconds limit = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!exited_) {
      int st = 0;
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        code_ = WIFEXITED(st) ? WEXITSTATUS(st) : -2;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &st, 0);
        exited_ = true;
        code_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return code_;
  }
  void kill(int sig = SIGKILL) { ::kill(pid_, sig); }
  std::string output() const {
    std::ifstream in(out_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Waits until the output contains `text`.
  bool wait_for_output(const std::string& text,
                       std::chrono::seconds limit = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (output().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  const std::string& command() const { return command_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
  std::string out_, command_;
};

// A fresh path for a server's --port-file, and the port once the server wrote it.
inline std::string port_file(const std::string& tag) {
  auto p = ::testing::TempDir() + "rnic_" + std::to_string(::getpid()) + "_" + tag + ".port";
  std::remove(p.c_str());
  return p;
}
inline std::string read_port(const std::string& file,
                             std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(file);
    std::string port;
    if (in >> port) return port;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return {};
}

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, noted, closed), for
// programs that take no --port-file. Empty on failure.
inline std::string free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(s);
  return ok ? std::to_string(ntohs(a.sin_port)) : std::string();
}

}  // namespace iwarp::test
