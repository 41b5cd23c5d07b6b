// The client node runs in this process and the server node in a child process (forked while
// this process has no other threads), so each process holds one socket per connection: 10,000
// connections fit the usual open-files limits. The two talk over pipes, in lines: "status" ->
// "status ACCEPTED REGISTERED RSS RSS_AT_START FDS"; "recv SIZE" -> "got SIZE REGISTERED" once
// a SIZE-byte message arrived intact on any connection; "quit" -> "bye SECONDS" (teardown
// time). The child answers "error WHY" when something fails.
#include "bench/enlarge_bench_memory.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "bench/enlarge_bench_support.hpp"
#include "bench/process_probes.hpp"
#include "common/byte_units.hpp"
#include "enlarge/node.hpp"

namespace iwarp::bench {

namespace {

using namespace std::chrono_literals;
using enlarge::Connection;
using enlarge::Node;

using Answer = std::expected<std::vector<std::string>, std::string>;

Bytes grow_message(std::uint32_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i * 7 + 1);
  return b;
}

// The child's side: one server node, driven by the parent's lines on `in_fd`.
[[noreturn]] void memory_server_child(const enlarge::Options& opts, int in_fd, int out_fd) {
  auto say = [&](const std::string& s) {
    const std::string l = s + "\n";
    if (::write(out_fd, l.data(), l.size()) < 0) ::_exit(1);
  };
  const std::uint64_t rss0 = vm_rss();
  {
    auto nv = Node::create(opts);
    if (!nv) {
      say("error " + nv.error());
      ::_exit(1);
    }
    auto node = std::move(*nv);
    auto port = node->listen(kHost, 0);
    if (!port) {
      say("error " + port.error());
      ::_exit(1);
    }
    say(fmt::format("port {}", *port));
    LineReader in{in_fd};
    std::uint64_t accepted = 0;
    std::optional<std::size_t> want;
    Bytes expect;
    for (;;) {
      node->progress(1ms);
      while (node->accept(0ms)) ++accepted;
      if (want) {
        for (std::size_t i = 0; i < node->size() && want; ++i)
          if (auto m = node->at(i).try_recv()) {
            if (m->data != expect) {
              say(fmt::format("error connection {} received {} bytes that are not the message",
                              i + 1, m->data.size()));
              ::_exit(1);
            }
            say(fmt::format("got {} {}", m->data.size(), node->registered_bytes()));
            want.reset();
          }
      }
      auto line = in.try_line();
      if (in.eof && !line) ::_exit(1);  // the parent is gone
      if (!line) continue;
      auto w = words(*line);
      if (w.empty()) continue;
      if (w[0] == "status") {
        say(fmt::format("status {} {} {} {} {}", accepted, node->registered_bytes(), vm_rss(), rss0,
                        open_fds()));
      } else if (w[0] == "recv" && w.size() == 2) {
        want = std::stoull(w[1]);
        expect = grow_message(static_cast<std::uint32_t>(*want));
      } else if (w[0] == "quit") {
        break;
      }
    }
    const auto t1 = Clock::now();
    node.reset();
    say(fmt::format("bye {:.3f}", seconds_since(t1)));
  }
  ::_exit(0);
}

// The parent's side of the child process: its pipes, and its answers, awaited while the client
// node here keeps making progress. Killed and reaped on destruction unless it ended by itself.
class ServerProcess {
 public:
  static std::expected<std::unique_ptr<ServerProcess>, std::string> spawn(
      const enlarge::Options& opts, std::chrono::milliseconds timeout) {
    int down[2], up[2];  // parent -> child, child -> parent
    if (::pipe2(down, O_CLOEXEC) != 0 || ::pipe2(up, O_CLOEXEC) != 0)
      return std::unexpected(std::string("pipe: ") + std::strerror(errno));
    std::cout.flush();
    std::cerr.flush();
    ::malloc_trim(0);  // what earlier runs freed is neither inherited nor hides this run's growth
    const pid_t pid = ::fork();
    if (pid < 0) return std::unexpected(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      ::close(down[1]);
      ::close(up[0]);
      memory_server_child(opts, down[0], up[1]);
    }
    ::close(down[0]);
    ::close(up[1]);
    return std::unique_ptr<ServerProcess>(new ServerProcess(pid, down[1], up[0], timeout));
  }
  ~ServerProcess() {
    ::close(to_);
    ::close(from_.fd);
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Waits for the child's answer starting with `word`, driving `client` (if any) meanwhile.
  Answer answer(const std::string& word, Node* client) {
    const auto deadline = Clock::now() + timeout_;
    for (;;) {
      if (auto line = from_.try_line()) {
        auto w = words(*line);
        if (!w.empty() && w[0] == "error")
          return std::unexpected("server process: " + line->substr(6));
        if (!w.empty() && w[0] == word) return w;
        continue;
      }
      if (from_.eof) return std::unexpected(std::string("the server process ended"));
      if (Clock::now() > deadline)
        return std::unexpected(fmt::format("the server process did not answer '{}' within {} ms",
                                           word, timeout_.count()));
      if (client)
        client->progress(1ms);
      else
        std::this_thread::sleep_for(1ms);
    }
  }
  Answer ask(const std::string& cmd, const std::string& word, Node* client) {
    const std::string l = cmd + "\n";
    if (::write(to_, l.data(), l.size()) < 0)
      return std::unexpected(std::string("the server process is gone: ") + std::strerror(errno));
    return answer(word, client);
  }
  // After "quit": the child's exit status.
  std::expected<void, std::string> reap() {
    int st = 0;
    ::waitpid(pid_, &st, 0);
    reaped_ = true;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      return std::unexpected(fmt::format("the server process ended with status {}", st));
    return {};
  }

 private:
  ServerProcess(pid_t pid, int to, int from, std::chrono::milliseconds timeout)
      : pid_(pid), to_(to), from_(from), timeout_(timeout) {}
  pid_t pid_;
  int to_;
  LineReader from_;
  std::chrono::milliseconds timeout_;
  bool reaped_ = false;
};

std::uint64_t num(const std::string& s) {
  return std::stoull(s);
}

// Opens `n` connections from `client` to the server process, `limits.batch` at a time, each
// batch established on both sides before the next. Returns the server's last status line.
Answer connect_all(Node& client, ServerProcess& server, std::uint16_t port, std::uint64_t n,
                   const std::string& scheme, const MemoryLimits& limits,
                   std::vector<Connection*>& conns) {
  const auto timeout = limits.timeout;
  std::vector<std::string> status;
  const auto t0 = Clock::now();
  auto last_report = t0;
  while (conns.size() < n) {
    const std::size_t first = conns.size();
    const std::uint64_t k = std::min<std::uint64_t>(limits.batch, n - first);
    for (std::uint64_t i = 0; i < k; ++i) conns.push_back(client.connect_async(kHost, port));
    const auto deadline = Clock::now() + timeout;
    for (std::size_t pending = first; pending < conns.size();) {
      if (conns[pending]->state() != Connection::State::Connecting) {
        ++pending;
        continue;
      }
      if (Clock::now() > deadline)
        return std::unexpected(
            fmt::format("connection {} of {}: not established within {} ms "
                        "(--timeout)",
                        pending + 1, n, timeout.count()));
      client.progress(1ms);
    }
    for (std::size_t i = first; i < conns.size(); ++i)
      if (conns[i]->state() != Connection::State::Established)
        return std::unexpected(
            fmt::format("connection {} of {} failed: {}", i + 1, n, conns[i]->error()));
    // The server side has accepted them all.
    for (;;) {
      auto s = server.ask("status", "status", &client);
      if (!s) return std::unexpected(s.error());
      status = *s;
      if (num(status[1]) >= conns.size()) break;
      if (Clock::now() > deadline)
        return std::unexpected(fmt::format("the server accepted {} of {} connections within {} ms",
                                           status[1], conns.size(), timeout.count()));
      client.progress(1ms);
    }
    if (Clock::now() - last_report >= 1s || (conns.size() == n && n >= 1000)) {
      last_report = Clock::now();
      progress_line(fmt::format(
          "memory, {}: {}/{} connections established ({:.1f} s; VmRSS client {}, server {})",
          scheme, conns.size(), n, seconds_since(t0),
          format_bytes(vm_rss(), ByteFormat::Significant),
          format_bytes(num(status[3]), ByteFormat::Significant)));
    }
  }
  return status;
}

// Connection 1 sends one `grow`-byte message: only it (on both sides) may grow. Sets the
// registered bytes afterwards.
std::expected<void, std::string> send_one_large_message(Node& client, Connection& sender,
                                                        ServerProcess& server,
                                                        const MemoryLimits& limits, MemRun& r) {
  const Bytes big = grow_message(limits.grow);
  if (auto p = sender.post(big); !p)
    return std::unexpected(fmt::format("posting the {}-byte message: {}", limits.grow, p.error()));
  auto got = server.ask(fmt::format("recv {}", limits.grow), "got", &client);
  if (!got) return std::unexpected(got.error());
  const auto deadline = Clock::now() + limits.timeout;
  while (!sender.tx_idle()) {
    if (Clock::now() > deadline)
      return std::unexpected(fmt::format("the {}-byte message: the sender not idle within {} ms",
                                         limits.grow, limits.timeout.count()));
    client.progress(1ms);
  }
  auto s = server.ask("status", "status", &client);
  if (!s) return std::unexpected(s.error());
  r.server_grown = num((*s)[2]);
  r.client_grown = client.registered_bytes();
  return {};
}

}  // namespace

std::expected<MemRun, std::string> measure_memory(const enlarge::Options& opts,
                                                  const std::string& scheme, std::uint64_t n,
                                                  const MemoryLimits& limits) {
  MemRun r;
  r.scheme = scheme;
  r.n = n;
  auto spawned = ServerProcess::spawn(opts, limits.timeout);
  if (!spawned) return std::unexpected(spawned.error());
  ServerProcess& server = **spawned;
  const std::uint64_t rss0 = vm_rss();

  auto port = server.answer("port", nullptr);
  if (!port) return std::unexpected(port.error());
  auto cv = Node::create(opts);
  if (!cv) return std::unexpected(cv.error());
  std::unique_ptr<Node> client = std::move(*cv);
  const auto port_no = static_cast<std::uint16_t>(num((*port)[1]));

  std::vector<Connection*> conns;
  conns.reserve(n);
  const auto t0 = Clock::now();
  auto status = connect_all(*client, server, port_no, n, scheme, limits, conns);
  if (!status) return std::unexpected(status.error());
  r.connect_s = seconds_since(t0);
  const std::uint64_t rss1 = vm_rss();
  const std::uint64_t server_rss = num((*status)[3]), server_rss0 = num((*status)[4]);
  r.rss = rss1 + server_rss;
  r.rss_growth =
      (rss1 > rss0 ? rss1 - rss0 : 0) + (server_rss > server_rss0 ? server_rss - server_rss0 : 0);
  r.fds = open_fds() + num((*status)[5]);
  r.server_idle = num((*status)[2]);
  r.client_idle = client->registered_bytes();

  if (auto g = send_one_large_message(*client, *conns[0], server, limits, r); !g)
    return std::unexpected(g.error());

  const auto t1 = Clock::now();
  client.reset();
  const double client_teardown = seconds_since(t1);
  auto bye = server.ask("quit", "bye", nullptr);
  if (!bye) return std::unexpected(bye.error());
  r.teardown_s = client_teardown + std::stod((*bye)[1]);
  if (auto e = server.reap(); !e) return std::unexpected(e.error());
  if (n >= 1000)
    progress_line(
        fmt::format("memory, {}: {} connections closed in {:.1f} s", scheme, n, r.teardown_s));
  return r;
}

}  // namespace iwarp::bench
