// rnic enlarge-bench: what the buffer-enlargement protocol (enlarge/) costs and saves, measured
// on 127.0.0.1 (docs/enlarge-bench.md).
//
// Part "memory": registered bytes per connection for N idle connections (a client node here, a
// server node in a child process, N connections between them), for the enlarge scheme (small slots,
// a buffer enlarged only for a connection that needs it) and for the static "large buffers on every
// connection" scheme (64 receive slots of 64 KiB each, Open MPI's default for siw: 4 MiB per
// peer, plus the send slots). Then one connection sends one large message and the registered
// bytes are measured again. Static counts whose registrations do not fit --static-limit are
// computed from the largest measured count, and say so.
//
// Part "speed": ping-pong latency (median round trip of a message echoed back at the same size)
// and one-way streaming throughput for each message size and each scheme: enlarge, pieces
// (always eager, in slot-sized pieces) and rendezvous (register per message), against raw TCP
// on the same loopback with the same message pattern (length-prefixed, TCP_NODELAY). Each
// server runs in its own thread, the clients in this one; sizes are measured scheme after
// scheme, so every ratio compares numbers taken moments apart.
//
// Output: a table on stdout, every row in a CSV, and a PNG of both parts made with gnuplot.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "enlarge/node.hpp"
#include "tools/app_options.hpp"
#include "tools/commands.hpp"
#include "tools/enlarge_options.hpp"

extern char** environ;

namespace iwarp::tools {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using enlarge::Connection;
using enlarge::Node;

constexpr const char* kHost = "127.0.0.1";
constexpr std::uint64_t kFdSlack = 256;  // descriptors besides the connections' sockets

struct BenchOptions {
  std::string connections = "1,100,1000,10000";
  std::string sizes = "64,256,1K,4K,16K,64K,256K,1M";
  std::string schemes = "enlarge,pieces,rendezvous";
  std::string part = "both";
  bool quick = false;
  std::string csv = "enlarge-bench.csv";
  std::string png = "enlarge-bench.png";
  std::string static_limit = "2G";
  std::uint32_t grow = 200000;
  std::uint32_t batch = 250;
  double latency_seconds = 0.6;
  double stream_seconds = 0.8;
  EnlargeCli enlarge;
  AppOptions app;
  CLI::Option* connections_opt = nullptr;
  CLI::Option* sizes_opt = nullptr;
  CLI::Option* latency_opt = nullptr;
  CLI::Option* stream_opt = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Small helpers: sizes, lists, formatting, the process's memory and descriptors.

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// "64", "4K", "4KiB", "1M", "2G" (binary units).
std::optional<std::uint64_t> parse_size(std::string_view s) {
  std::uint64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc{} || p == s.data()) return std::nullopt;
  const std::string unit = lower(std::string(p, end));
  std::uint64_t mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  if (unit == "k" || unit == "kib") mult = 1ull << 10;
  if (unit == "m" || unit == "mib") mult = 1ull << 20;
  if (unit == "g" || unit == "gib") mult = 1ull << 30;
  if (mult == 0 || (v && mult > UINT64_MAX / v)) return std::nullopt;
  return v * mult;
}

std::expected<std::vector<std::uint64_t>, std::string> parse_list(const std::string& text,
                                                                  const std::string& flag,
                                                                  std::uint64_t lo,
                                                                  std::uint64_t hi) {
  std::vector<std::uint64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    auto v = parse_size(item);
    if (!v || *v < lo || *v > hi)
      return std::unexpected(
          fmt::format("{}: '{}' is not a number from {} to {}", flag, item, lo, hi));
    if (std::ranges::find(out, *v) == out.end()) out.push_back(*v);
  }
  if (out.empty()) return std::unexpected(flag + ": the list is empty");
  return out;
}

std::string human_bytes(double b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) {
    b /= 1024;
    ++i;
  }
  if (i == 0) return fmt::format("{:.0f} B", b);
  if (b < 10) return fmt::format("{:.2f} {}", b, units[i]);
  if (b < 100) return fmt::format("{:.1f} {}", b, units[i]);
  return fmt::format("{:.0f} {}", b, units[i]);
}

std::string size_label(std::uint64_t s) {
  if (s >= (1u << 20) && s % (1u << 20) == 0) return fmt::format("{} MiB", s >> 20);
  if (s >= 1024 && s % 1024 == 0) return fmt::format("{} KiB", s >> 10);
  return fmt::format("{} B", s);
}

// 1024 -> "1 KiB", 4194304 -> "4 MiB" (powers of two).
std::string tick_label(std::uint64_t v) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (v >= 1024 && v % 1024 == 0 && i < 4) {
    v /= 1024;
    ++i;
  }
  return fmt::format("{} {}", v, units[i]);
}

std::string short_size_label(std::uint64_t s) {
  if (s >= (1u << 20) && s % (1u << 20) == 0) return fmt::format("{}M", s >> 20);
  if (s >= 1024 && s % 1024 == 0) return fmt::format("{}K", s >> 10);
  return fmt::format("{}", s);
}

std::string thousands(std::uint64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
    s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

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

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void progress_line(const std::string& what) {
  std::cerr << "enlarge-bench: " << what << std::endl;
}

// Raises RLIMIT_NOFILE to `need`. Returns the limit there is afterwards and, when it is less
// than `need`, why.
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

// ---------------------------------------------------------------------------------------------
// CSV.

const std::vector<std::string> kCsvColumns = {"part",
                                              "scheme",
                                              "connections",
                                              "state",
                                              "size_bytes",
                                              "server_registered_bytes",
                                              "client_registered_bytes",
                                              "server_bytes_per_connection",
                                              "client_bytes_per_connection",
                                              "connect_seconds",
                                              "rss_bytes",
                                              "rss_bytes_per_connection",
                                              "open_fds",
                                              "latency_median_us",
                                              "latency_iterations",
                                              "throughput_MBps",
                                              "stream_messages",
                                              "latency_vs_tcp",
                                              "throughput_vs_tcp",
                                              "source"};

using CsvRow = std::map<std::string, std::string>;

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) {
    if (ch == '"') q += '"';
    q += ch;
  }
  return q + "\"";
}

// ---------------------------------------------------------------------------------------------
// Part "memory". The client node runs in this process and the server node in a child process
// (forked while this process has no other threads), so each process holds one socket per
// connection: 10,000 connections fit the usual open-files limits. The two talk over pipes, in
// lines: "status" -> "status ACCEPTED REGISTERED RSS RSS_AT_START FDS"; "recv SIZE" -> "got SIZE
// REGISTERED" once a SIZE-byte message arrived intact on any connection; "quit" -> "bye
// SECONDS" (teardown time). The child answers "error WHY" when something fails.

struct MemRun {
  std::string scheme;
  std::uint64_t n = 0;  // connections
  std::uint64_t server_idle = 0, client_idle = 0;
  std::uint64_t server_grown = 0, client_grown = 0;
  double connect_s = 0, teardown_s = 0;
  std::uint64_t rss = 0;         // both processes after connecting
  std::uint64_t rss_growth = 0;  // both processes: after connecting minus before the nodes
  std::size_t fds = 0;           // both processes
  std::string source = "measured";
  bool computed = false;
};

Bytes grow_message(std::uint32_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i * 7 + 1);
  return b;
}

// Lines from a pipe without blocking.
struct LineReader {
  explicit LineReader(int f) : fd(f) {}
  int fd;
  std::string buf;
  bool eof = false;
  std::optional<std::string> try_line() {
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
};

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string w;
  while (ss >> w) out.push_back(w);
  return out;
}

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

// Connects `n` connections from a client node here to a server node in a child process and
// measures what each side registers, idle and after connection 1 sent one `grow`-byte message.
std::expected<MemRun, std::string> measure_memory(const enlarge::Options& opts,
                                                  const std::string& scheme, std::uint64_t n,
                                                  const BenchOptions& o) {
  const auto timeout = std::chrono::milliseconds(o.app.timeout_ms);
  MemRun r;
  r.scheme = scheme;
  r.n = n;
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
  struct ChildGuard {
    pid_t pid;
    int to, from;
    bool reaped = false;
    ~ChildGuard() {
      ::close(to);
      ::close(from);
      if (!reaped) {
        ::kill(pid, SIGKILL);
        int st = 0;
        ::waitpid(pid, &st, 0);
      }
    }
  } child{pid, down[1], up[0]};
  LineReader from{up[0]};
  const std::uint64_t rss0 = vm_rss();
  std::unique_ptr<Node> client;

  // Waits for the child's answer starting with `word`, driving the client meanwhile.
  auto answer =
      [&](const std::string& word) -> std::expected<std::vector<std::string>, std::string> {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (auto line = from.try_line()) {
        auto w = words(*line);
        if (!w.empty() && w[0] == "error")
          return std::unexpected("server process: " + line->substr(6));
        if (!w.empty() && w[0] == word) return w;
        continue;
      }
      if (from.eof) return std::unexpected(std::string("the server process ended"));
      if (Clock::now() > deadline)
        return std::unexpected(fmt::format("the server process did not answer '{}' within {} ms",
                                           word, timeout.count()));
      if (client)
        client->progress(1ms);
      else
        std::this_thread::sleep_for(1ms);
    }
  };
  auto ask = [&](const std::string& cmd,
                 const std::string& word) -> std::expected<std::vector<std::string>, std::string> {
    const std::string l = cmd + "\n";
    if (::write(child.to, l.data(), l.size()) < 0)
      return std::unexpected(std::string("the server process is gone: ") + std::strerror(errno));
    return answer(word);
  };
  auto num = [](const std::string& s) { return std::stoull(s); };

  auto port = answer("port");
  if (!port) return std::unexpected(port.error());
  auto cv = Node::create(opts);
  if (!cv) return std::unexpected(cv.error());
  client = std::move(*cv);
  const auto port_no = static_cast<std::uint16_t>(num((*port)[1]));

  std::vector<Connection*> conns;
  conns.reserve(n);
  std::vector<std::string> status;
  const auto t0 = Clock::now();
  auto last_report = t0;
  while (conns.size() < n) {
    const std::size_t first = conns.size();
    const std::uint64_t k = std::min<std::uint64_t>(o.batch, n - first);
    for (std::uint64_t i = 0; i < k; ++i) conns.push_back(client->connect_async(kHost, port_no));
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
      client->progress(1ms);
    }
    for (std::size_t i = first; i < conns.size(); ++i)
      if (conns[i]->state() != Connection::State::Established)
        return std::unexpected(
            fmt::format("connection {} of {} failed: {}", i + 1, n, conns[i]->error()));
    // The server side has accepted them all.
    for (;;) {
      auto s = ask("status", "status");
      if (!s) return std::unexpected(s.error());
      status = *s;
      if (num(status[1]) >= conns.size()) break;
      if (Clock::now() > deadline)
        return std::unexpected(fmt::format("the server accepted {} of {} connections within {} ms",
                                           status[1], conns.size(), timeout.count()));
      client->progress(1ms);
    }
    if (Clock::now() - last_report >= 1s || (conns.size() == n && n >= 1000)) {
      last_report = Clock::now();
      progress_line(fmt::format(
          "memory, {}: {}/{} connections established ({:.1f} s; VmRSS client {}, server {})",
          scheme, conns.size(), n, seconds_since(t0), human_bytes(static_cast<double>(vm_rss())),
          human_bytes(static_cast<double>(num(status[3])))));
    }
  }
  r.connect_s = seconds_since(t0);
  const std::uint64_t rss1 = vm_rss();
  r.rss = rss1 + num(status[3]);
  r.rss_growth = (rss1 > rss0 ? rss1 - rss0 : 0) +
                 (num(status[3]) > num(status[4]) ? num(status[3]) - num(status[4]) : 0);
  r.fds = open_fds() + num(status[5]);
  r.server_idle = num(status[2]);
  r.client_idle = client->registered_bytes();

  // One connection sends one large message: only it (on both sides) may grow.
  const Bytes big = grow_message(o.grow);
  if (auto p = conns[0]->post(big); !p)
    return std::unexpected(fmt::format("posting the {}-byte message: {}", o.grow, p.error()));
  auto got = ask(fmt::format("recv {}", o.grow), "got");
  if (!got) return std::unexpected(got.error());
  const auto deadline = Clock::now() + timeout;
  while (!conns[0]->tx_idle()) {
    if (Clock::now() > deadline)
      return std::unexpected(fmt::format("the {}-byte message: the sender not idle within {} ms",
                                         o.grow, timeout.count()));
    client->progress(1ms);
  }
  auto s = ask("status", "status");
  if (!s) return std::unexpected(s.error());
  r.server_grown = num((*s)[2]);
  r.client_grown = client->registered_bytes();

  const auto t1 = Clock::now();
  client.reset();
  const double client_teardown = seconds_since(t1);
  auto bye = ask("quit", "bye");
  if (!bye) return std::unexpected(bye.error());
  r.teardown_s = client_teardown + std::stod((*bye)[1]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  child.reaped = true;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return std::unexpected(fmt::format("the server process ended with status {}", st));
  if (n >= 1000)
    progress_line(
        fmt::format("memory, {}: {} connections closed in {:.1f} s", scheme, n, r.teardown_s));
  return r;
}

// ---------------------------------------------------------------------------------------------
// Part "speed": a client in this thread, a server in its own thread, per scheme.
//
// Message pattern (every scheme and TCP alike): the first byte says what the server does with
// a message. 'E': echo it back at the same size; 'D': data, nothing; 'L': the last of a stream,
// answer with an 8-byte acknowledgement; 'Q': the run is over.

class BenchClient {
 public:
  virtual ~BenchClient() = default;
  virtual std::expected<void, std::string> send(const Bytes& m) = 0;
  virtual std::expected<Bytes, std::string> recv() = 0;
  // Sends 'Q', waits for the server thread. Returns the server's error, if any.
  virtual std::string finish() = 0;
};

// Node scheme ---------------------------------------------------------------------------------

struct ServerShared {
  std::atomic<bool> stop{false};
  std::string error;  // read after join
};

void node_server(enlarge::Options opts, std::chrono::milliseconds timeout,
                 std::promise<std::expected<std::uint16_t, std::string>> port_out,
                 ServerShared& shared) {
  auto nv = Node::create(std::move(opts));
  if (!nv) return port_out.set_value(std::unexpected(nv.error()));
  auto node = std::move(*nv);
  auto port = node->listen(kHost, 0);
  port_out.set_value(port);
  if (!port) return;
  auto acc = node->accept(timeout);
  if (!acc) {
    shared.error = "accepting: " + acc.error();
    return;
  }
  Connection* c = *acc;
  while (!shared.stop.load()) {
    auto m = node->recv(*c, 200ms);
    if (!m) {
      if (c->state() != Connection::State::Established) {
        shared.error = "server: " + m.error();
        return;
      }
      continue;
    }
    const std::uint8_t kind = m->data.empty() ? 0 : m->data[0];
    std::expected<std::uint32_t, std::string> p = 0;
    if (kind == 'E') {
      std::vector<Bytes> iov;
      iov.push_back(std::move(m->data));
      p = c->post(std::move(iov));
    } else if (kind == 'L') {
      p = c->post(Bytes(8, 'A'));
    } else if (kind == 'Q') {
      (void)node->flush(*c, timeout);
      return;
    }
    if (!p) {
      shared.error = "server: posting: " + p.error();
      return;
    }
  }
}

class NodeClient final : public BenchClient {
 public:
  static std::expected<std::unique_ptr<NodeClient>, std::string> start(
      const enlarge::Options& opts, std::chrono::milliseconds timeout) {
    auto self = std::unique_ptr<NodeClient>(new NodeClient(timeout));
    std::promise<std::expected<std::uint16_t, std::string>> port_p;
    auto port_f = port_p.get_future();
    self->thread_ =
        std::thread(node_server, opts, timeout, std::move(port_p), std::ref(self->shared_));
    auto port = port_f.get();
    if (!port) return std::unexpected("server: " + port.error());
    auto nv = Node::create(opts);
    if (!nv) return std::unexpected(nv.error());
    self->node_ = std::move(*nv);
    auto c = self->node_->connect(kHost, *port, timeout);
    if (!c) return std::unexpected(c.error());
    self->conn_ = *c;
    return self;
  }
  ~NodeClient() override {
    shared_.stop = true;
    if (thread_.joinable()) thread_.join();
  }
  std::expected<void, std::string> send(const Bytes& m) override {
    auto p = conn_->post(m);
    if (!p) return std::unexpected(p.error());
    // A window of queued messages (about 1 MiB: 2-256 messages), like a socket's send buffer:
    // the stream is timed by what was sent, not by what was queued.
    const std::size_t window =
        std::clamp<std::size_t>((1u << 20) / std::max<std::size_t>(1, m.size()), 2, 256);
    const auto deadline = Clock::now() + timeout_;
    while (conn_->tx_queued() > window) {
      if (conn_->state() != Connection::State::Established) return std::unexpected(conn_->error());
      if (Clock::now() > deadline)
        return std::unexpected(fmt::format("{} messages still queued after {} ms",
                                           conn_->tx_queued(), timeout_.count()));
      node_->progress(1ms);
    }
    return {};
  }
  std::expected<Bytes, std::string> recv() override {
    auto r = node_->recv(*conn_, timeout_);
    if (!r) return std::unexpected(r.error());
    return std::move(r->data);
  }
  std::string finish() override {
    Bytes q(1, 'Q');
    if (conn_->post(q)) (void)node_->flush(*conn_, timeout_);
    const auto deadline = Clock::now() + timeout_;
    // The server ends on 'Q'; if it does not, stop it.
    while (!shared_.stop.load() && Clock::now() < deadline) {
      node_->progress(5ms);
      if (conn_->state() != Connection::State::Established) break;
    }
    shared_.stop = true;
    if (thread_.joinable()) thread_.join();
    node_.reset();
    return shared_.error;
  }

 private:
  explicit NodeClient(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  std::chrono::milliseconds timeout_;
  ServerShared shared_;
  std::thread thread_;
  std::unique_ptr<Node> node_;
  Connection* conn_ = nullptr;
};

// Raw TCP baseline ----------------------------------------------------------------------------

bool write_all(int fd, const std::uint8_t* hdr, std::size_t hlen, const std::uint8_t* data,
               std::size_t len) {
  iovec v[2] = {{const_cast<std::uint8_t*>(hdr), hlen}, {const_cast<std::uint8_t*>(data), len}};
  int idx = 0;
  while (idx < 2) {
    msghdr mh{};
    mh.msg_iov = v + idx;
    mh.msg_iovlen = static_cast<std::size_t>(2 - idx);
    const ssize_t n = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    auto left = static_cast<std::size_t>(n);
    while (idx < 2 && left >= v[idx].iov_len) {
      left -= v[idx].iov_len;
      ++idx;
    }
    if (idx < 2) {
      v[idx].iov_base = static_cast<std::uint8_t*>(v[idx].iov_base) + left;
      v[idx].iov_len -= left;
    }
  }
  return true;
}

bool read_all(int fd, std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool send_msg(int fd, const Bytes& m) {
  std::uint8_t hdr[4];
  const auto n = static_cast<std::uint32_t>(m.size());
  hdr[0] = static_cast<std::uint8_t>(n >> 24);
  hdr[1] = static_cast<std::uint8_t>(n >> 16);
  hdr[2] = static_cast<std::uint8_t>(n >> 8);
  hdr[3] = static_cast<std::uint8_t>(n);
  return write_all(fd, hdr, 4, m.data(), m.size());
}

bool recv_msg(int fd, Bytes& m) {
  std::uint8_t hdr[4];
  if (!read_all(fd, hdr, 4)) return false;
  const std::uint32_t n = std::uint32_t{hdr[0]} << 24 | std::uint32_t{hdr[1]} << 16 |
                          std::uint32_t{hdr[2]} << 8 | hdr[3];
  m.resize(n);
  return read_all(fd, m.data(), n);
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_recv_timeout(int fd, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

void tcp_server(int listener, std::chrono::milliseconds timeout, ServerShared& shared) {
  set_recv_timeout(listener, timeout);
  const int fd = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  if (fd < 0) {
    shared.error = fmt::format("TCP server: accept: {}", std::strerror(errno));
    return;
  }
  set_nodelay(fd);
  Bytes m, ack(8, 'A');
  for (;;) {
    if (!recv_msg(fd, m)) {
      if (!shared.stop.load())
        shared.error = fmt::format("TCP server: the client's message: {}",
                                   errno ? std::strerror(errno) : "connection closed");
      break;
    }
    const std::uint8_t kind = m.empty() ? 0 : m[0];
    bool ok = true;
    if (kind == 'E') ok = send_msg(fd, m);
    if (kind == 'L') ok = send_msg(fd, ack);
    if (kind == 'Q') break;
    if (!ok) {
      shared.error = fmt::format("TCP server: sending: {}", std::strerror(errno));
      break;
    }
  }
  ::close(fd);
}

class TcpClient final : public BenchClient {
 public:
  static std::expected<std::unique_ptr<TcpClient>, std::string> start(
      std::chrono::milliseconds timeout) {
    auto self = std::unique_ptr<TcpClient>(new TcpClient());
    const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(lfd, 1) != 0 || ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      const std::string why = std::strerror(errno);
      if (lfd >= 0) ::close(lfd);
      return std::unexpected("TCP baseline: cannot listen on 127.0.0.1: " + why);
    }
    self->thread_ = std::thread(tcp_server, lfd, timeout, std::ref(self->shared_));
    self->fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (self->fd_ < 0 || ::connect(self->fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      return std::unexpected(fmt::format("TCP baseline: cannot connect to 127.0.0.1:{}: {}",
                                         ntohs(a.sin_port), std::strerror(errno)));
    set_nodelay(self->fd_);
    set_recv_timeout(self->fd_, timeout);
    return self;
  }
  ~TcpClient() override {
    shared_.stop = true;
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  std::expected<void, std::string> send(const Bytes& m) override {
    if (!send_msg(fd_, m)) return std::unexpected(std::string("TCP send: ") + std::strerror(errno));
    return {};
  }
  std::expected<Bytes, std::string> recv() override {
    Bytes m;
    if (!recv_msg(fd_, m))
      return std::unexpected(std::string("TCP receive: ") +
                             (errno ? std::strerror(errno) : "connection closed"));
    return m;
  }
  std::string finish() override {
    Bytes q(1, 'Q');
    send_msg(fd_, q);
    shared_.stop = true;
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
    fd_ = -1;
    return shared_.error;
  }

 private:
  TcpClient() = default;
  int fd_ = -1;
  ServerShared shared_;
  std::thread thread_;
};

// One size on one scheme ----------------------------------------------------------------------

struct SpeedCell {
  std::string scheme;
  std::uint64_t size = 0;
  double latency_us = 0;  // median round trip
  std::size_t latency_iterations = 0;
  double mbps = 0;  // payload bytes, 10^6 per second
  std::uint64_t stream_messages = 0;
  double latency_ratio = 0, throughput_ratio = 0;  // against TCP at this size
};

struct SpeedBudget {
  double latency_s = 0.6, stream_s = 0.8;
  std::size_t warmup = 3, min_iterations = 5, max_iterations = 5000;
  std::uint64_t min_messages = 8, max_bytes = 1ull << 30;
};

std::expected<SpeedCell, std::string> run_cell(BenchClient& c, const std::string& scheme,
                                               std::uint64_t size, const SpeedBudget& b) {
  SpeedCell cell;
  cell.scheme = scheme;
  cell.size = size;
  Bytes msg(size);
  for (std::size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<std::uint8_t>(i * 31 + 7);
  msg[0] = 'E';
  auto fail = [&](const std::string& what, const std::string& why) {
    return std::unexpected(
        fmt::format("{}, {} messages, {}: {}", scheme, size_label(size), what, why));
  };
  auto round_trip = [&](bool check) -> std::expected<void, std::string> {
    if (auto s = c.send(msg); !s) return std::unexpected(s.error());
    auto r = c.recv();
    if (!r) return std::unexpected(r.error());
    if (r->size() != size)
      return std::unexpected(fmt::format("the echo has {} bytes, not {}", r->size(), size));
    if (check && *r != msg)
      return std::unexpected(std::string("the echo differs from the message"));
    return {};
  };
  // Warm-up (the enlarge scheme asks for its buffer here), checking the echo byte for byte.
  for (std::size_t i = 0; i < b.warmup; ++i)
    if (auto r = round_trip(true); !r) return fail("warm-up", r.error());
  std::vector<double> us;
  const auto lat_start = Clock::now();
  while (us.size() < b.max_iterations &&
         (us.size() < b.min_iterations || seconds_since(lat_start) < b.latency_s)) {
    const auto t0 = Clock::now();
    if (auto r = round_trip(false); !r) return fail("latency", r.error());
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::ranges::sort(us);
  cell.latency_us = us[us.size() / 2];
  cell.latency_iterations = us.size();

  msg[0] = 'D';
  std::uint64_t sent = 0;
  const auto t0 = Clock::now();
  for (;;) {
    const bool enough = sent + 1 >= b.min_messages &&
                        (seconds_since(t0) >= b.stream_s || (sent + 1) * size >= b.max_bytes);
    if (enough) msg[0] = 'L';
    if (auto s = c.send(msg); !s) return fail("stream", s.error());
    ++sent;
    if (enough) break;
  }
  auto ack = c.recv();
  if (!ack) return fail("stream acknowledgement", ack.error());
  if (ack->size() != 8)
    return fail("stream", fmt::format("a {}-byte acknowledgement", ack->size()));
  const double secs = seconds_since(t0);
  cell.stream_messages = sent;
  cell.mbps = static_cast<double>(sent * size) / secs / 1e6;
  return cell;
}

// ---------------------------------------------------------------------------------------------
// The plot.

std::optional<std::string> find_in_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const auto p = std::filesystem::path(dir) / prog;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return std::nullopt;
}

std::string gp_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) {
    if (ch == '\'') q += '\'';
    q += ch;
  }
  return q + "'";
}

// Runs gnuplot on `script`; returns "" or what went wrong.
std::string run_gnuplot(const std::string& gnuplot, const std::string& script) {
  const std::string base =
      (std::filesystem::temp_directory_path() / fmt::format("rnic-enlarge-bench-{}", ::getpid()))
          .string();
  const std::string gp = base + ".gp", log = base + ".log";
  {
    std::ofstream out(gp);
    out << script;
    if (!out) return "cannot write the gnuplot script " + gp;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::string a0 = gnuplot, a1 = gp;
  char* argv[] = {a0.data(), a1.data(), nullptr};
  pid_t pid = -1;
  const int e = posix_spawn(&pid, gnuplot.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (e != 0) return fmt::format("cannot run {}: {}", gnuplot, std::strerror(e));
  int st = 0;
  ::waitpid(pid, &st, 0);
  std::ifstream in(log);
  std::string first, line;
  while (std::getline(in, line))
    if (first.empty() && !trim(line).empty()) first = trim(line);
  std::remove(log.c_str());
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return fmt::format("gnuplot failed (script {}): {}", gp, first.empty() ? "no message" : first);
  std::remove(gp.c_str());
  return "";
}

std::string plot_script(const std::string& png, const std::vector<MemRun>& mem,
                        const std::vector<SpeedCell>& speed,
                        const std::vector<std::string>& speed_schemes,
                        const std::vector<std::uint64_t>& sizes, std::uint32_t grow) {
  std::string s;
  s += "set terminal pngcairo size 1600,1150 font 'Sans,11'\n";
  s += "set output " + gp_quote(png) + "\n";
  s += "set key top left box opaque\nset grid\nset border lw 1\n";
  // Data blocks.
  auto block = [&](const std::string& name, const std::vector<std::pair<double, double>>& pts) {
    if (pts.empty()) return false;
    s += "$" + name + " << EOD\n";
    for (auto [x, y] : pts) s += fmt::format("{} {}\n", x, y);
    s += "EOD\n";
    return true;
  };
  struct Series {
    std::string block, title, style;
  };
  std::vector<Series> per_conn, total;
  auto mem_series = [&](const std::string& scheme, bool computed, bool grown,
                        const std::string& title, const std::string& style) {
    std::vector<std::pair<double, double>> pc, tot;
    // A computed series starts at the largest measured count it was computed from.
    const MemRun* from = nullptr;
    if (computed && std::ranges::none_of(
                        mem, [&](const MemRun& m) { return m.scheme == scheme && m.computed; }))
      return;
    if (computed)
      for (const auto& m : mem)
        if (m.scheme == scheme && !m.computed && (!from || m.n > from->n)) from = &m;
    for (const auto& m : mem)
      if (m.scheme == scheme && (m.computed == computed || &m == from)) {
        const double t = static_cast<double>(grown ? m.server_grown : m.server_idle);
        pc.emplace_back(static_cast<double>(m.n), t / static_cast<double>(m.n));
        tot.emplace_back(static_cast<double>(m.n), t);
      }
    const std::string name = fmt::format("mem_{}_{}_{}", scheme, computed ? "computed" : "measured",
                                         grown ? "grown" : "idle");
    if (block(name + "_pc", pc)) per_conn.push_back({name + "_pc", title, style});
    if (block(name + "_tot", tot)) total.push_back({name + "_tot", title, style});
  };
  mem_series("enlarge", false, false, "enlarge, idle (measured)", "lp lw 2 pt 7 lc rgb '#1b7837'");
  mem_series("enlarge", false, true,
             fmt::format("enlarge, after one connection sent {} B (mean)", thousands(grow)),
             "lp lw 2 pt 9 lc rgb '#5aae61'");
  mem_series("static", false, false, "static 64 x 64 KiB, idle (measured)",
             "lp lw 2 pt 5 lc rgb '#b2182b'");
  mem_series("static", true, false, "static 64 x 64 KiB, idle (computed: N x measured)",
             "lp lw 2 dt 2 pt 4 lc rgb '#b2182b'");

  std::map<std::string, std::string> colour = {
      {"tcp", "#000000"}, {"enlarge", "#1b7837"}, {"pieces", "#2166ac"}, {"rendezvous", "#e08214"}};
  std::vector<Series> lat, tput;
  for (const auto& scheme : speed_schemes) {
    std::vector<std::pair<double, double>> l, t;
    for (const auto& c : speed)
      if (c.scheme == scheme) {
        l.emplace_back(static_cast<double>(c.size), c.latency_us);
        t.emplace_back(static_cast<double>(c.size), c.mbps);
      }
    const std::string style =
        fmt::format("lp lw 2 pt 7 lc rgb '{}'{}", colour.count(scheme) ? colour[scheme] : "#777777",
                    scheme == "tcp" ? " dt 2" : "");
    const std::string title = scheme == "tcp" ? "raw TCP (baseline)" : scheme;
    if (block("lat_" + scheme, l)) lat.push_back({"lat_" + scheme, title, style});
    if (block("tput_" + scheme, t)) tput.push_back({"tput_" + scheme, title, style});
  }
  std::string xtics;
  for (auto sz : sizes)
    xtics += fmt::format("{}\"{}\" {}", xtics.empty() ? "" : ", ", short_size_label(sz), sz);

  const bool have_mem = !per_conn.empty(), have_speed = !lat.empty();
  const int panels = (have_mem ? 2 : 0) + (have_speed ? 2 : 0);
  if (panels == 0) return "";
  s += fmt::format(
      "set multiplot layout {},2 title \"rnic enlarge-bench on 127.0.0.1\" font ',14'\n",
      panels / 2);
  auto plot = [&](const std::vector<Series>& series) {
    s += "plot ";
    for (std::size_t i = 0; i < series.size(); ++i)
      s += fmt::format("{}${} using 1:2 with {} title \"{}\"", i ? ", \\\n     " : "",
                       series[i].block, series[i].style, series[i].title);
    s += "\n";
  };
  std::string ytics;
  for (std::uint64_t v = 1024; v <= (1ull << 40); v *= 4)
    ytics += fmt::format("{}\"{}\" {}", ytics.empty() ? "" : ", ", tick_label(v), v);
  if (have_mem) {
    s += "set logscale xy\nset format x '%g'\nset ytics (" + ytics + ")\nset mytics 4\n";
    s += "set key center right\n";
    s += "set xlabel 'connections (idle)'\n";
    s += "set ylabel 'registered bytes per connection (server side)'\n";
    s += "set title 'Registered memory per connection'\n";
    plot(per_conn);
    s += "set ylabel 'registered bytes, all connections (server side)'\n";
    s += "set title 'Registered memory in total'\nset key bottom right\n";
    plot(total);
  }
  if (have_speed) {
    s += "set logscale xy\nset xtics (" + xtics + ")\nset ytics auto\nset format y '%g'\n";
    s += "set mytics 10\nset key top left\n";
    if (!sizes.empty())
      s += fmt::format("set xrange [{}:{}]\n", static_cast<double>(std::ranges::min(sizes)) / 1.6,
                       static_cast<double>(std::ranges::max(sizes)) * 1.6);
    s += "set xlabel 'message size (bytes)'\n";
    s += "set ylabel 'round-trip latency, median (us)'\nset format y '%.0f'\n";
    s += "set title 'Ping-pong latency (lower is better)'\n";
    plot(lat);
    s += "set ylabel 'throughput (MB/s, one way)'\nset format y '%g'\n";
    s += "set title 'Streaming throughput (higher is better)'\n";
    s += "set key top left\n";
    plot(tput);
  }
  s += "unset multiplot\n";
  return s;
}

// ---------------------------------------------------------------------------------------------

int run(BenchOptions& o) {
  auto usage = [](const std::string& why) {
    std::cerr << "rnic enlarge-bench: " << why << "\n";
    return 2;
  };
  auto fail = [](const std::string& why) {
    std::cerr << "rnic enlarge-bench: " << why << "\n";
    return 1;
  };
  ::signal(SIGPIPE, SIG_IGN);  // a peer that is gone is an error, not a signal
  if (o.quick) {
    if (o.connections_opt->count() == 0) o.connections = "1,100";
    if (o.sizes_opt->count() == 0) o.sizes = "64,4K,64K,1M";
    if (o.latency_opt->count() == 0) o.latency_seconds = 0.05;
    if (o.stream_opt->count() == 0) o.stream_seconds = 0.1;
  }
  const bool do_mem = o.part != "speed", do_speed = o.part != "memory";
  auto counts = parse_list(o.connections, "--connections", 1, 100000);
  if (!counts) return usage(counts.error());
  auto sizes = parse_list(o.sizes, "--sizes", 1, 64ull << 20);
  if (!sizes) return usage(sizes.error());
  auto limit = parse_size(trim(o.static_limit));
  if (!limit) return usage("--static-limit: '" + o.static_limit + "' is not a size (e.g. 2G)");
  std::vector<std::string> schemes;
  {
    std::stringstream ss(o.schemes);
    std::string item;
    while (std::getline(ss, item, ',')) {
      item = lower(trim(item));
      if (item != "enlarge" && item != "pieces" && item != "rendezvous")
        return usage("--schemes: '" + item + "' is not enlarge, pieces or rendezvous");
      if (std::ranges::find(schemes, item) == schemes.end()) schemes.push_back(item);
    }
    if (schemes.empty()) return usage("--schemes: the list is empty");
  }
  auto base = enlarge_options(o.enlarge, o.app);
  if (!base) return usage(base.error());
  const auto timeout = std::chrono::milliseconds(o.app.timeout_ms);
  std::ranges::sort(*counts);

  std::optional<std::string> gnuplot;
  if (!o.png.empty()) gnuplot = find_in_path("gnuplot");

  std::vector<CsvRow> csv;
  std::vector<MemRun> mem;
  std::vector<std::string> notes;
  {
    double load = -1;
    std::ifstream("/proc/loadavg") >> load;
    std::cout << fmt::format(
                     "rnic enlarge-bench on 127.0.0.1: {} CPUs, load average {:.2f} at the start\n"
                     "(other work on the host slows every scheme; each ratio compares numbers "
                     "taken moments apart)\n\n",
                     std::thread::hardware_concurrency(), load)
              << std::flush;
  }

  // ------------------------------------------------------------------- memory
  if (do_mem) {
    enlarge::Options en = *base;
    en.mode = enlarge::Mode::Enlarge;
    enlarge::Options st = *base;
    st.slot_size = 65536;
    st.recv_slots = 64;
    st.mode = enlarge::Mode::Pieces;
    st.free_small = false;
    const std::uint64_t static_per_conn =
        std::uint64_t{st.slot_size} * (st.recv_slots + st.send_slots);

    const std::uint64_t want = counts->back();
    // One socket per connection in each process (client here, server in a child process).
    auto [nofile, why_nofile] = raise_nofile(want + kFdSlack);
    std::uint64_t cap = want;
    if (!why_nofile.empty()) {
      cap = nofile > kFdSlack ? nofile - kFdSlack : 0;
      notes.push_back(
          fmt::format("{}: connection counts above {} were capped to {} (one socket "
                      "per connection in each process)",
                      why_nofile, cap, cap));
      progress_line(notes.back());
      if (cap == 0) return fail(why_nofile);
    }
    const MemRun* static_ref = nullptr;
    std::vector<std::uint64_t> static_measure;
    for (auto n : *counts)
      if (2 * std::min(n, cap) * static_per_conn <= *limit)
        static_measure.push_back(std::min(n, cap));
    if (static_measure.empty()) static_measure.push_back(1);  // a reference to compute from

    for (auto asked : *counts) {
      const std::uint64_t n = std::min(asked, cap);
      progress_line(fmt::format("memory: {} connection(s), enlarge{}", n,
                                n != asked ? fmt::format(" (capped from {})", asked) : ""));
      auto r = measure_memory(en, "enlarge", n, o);
      if (!r) return fail("memory: " + r.error());
      if (n != asked) r->source = fmt::format("measured at {} (capped from {})", n, asked);
      mem.push_back(*r);
    }
    std::vector<std::uint64_t> static_done;
    for (auto n : static_measure) {
      if (std::ranges::find(static_done, n) != static_done.end()) continue;
      static_done.push_back(n);
      progress_line(fmt::format("memory: {} connection(s), static 64 x 64 KiB", n));
      auto r = measure_memory(st, "static", n, o);
      if (!r) return fail("memory, static: " + r.error());
      mem.push_back(*r);
    }
    for (const auto& m : mem)
      if (m.scheme == "static" && (!static_ref || m.n > static_ref->n)) static_ref = &m;
    const MemRun ref = *static_ref;
    for (auto asked : *counts) {
      if (std::ranges::find(static_done, std::min(asked, cap)) != static_done.end() && asked <= cap)
        continue;
      MemRun c;
      c.scheme = "static";
      c.n = asked;
      c.computed = true;
      const double f = static_cast<double>(asked) / static_cast<double>(ref.n);
      c.server_idle = static_cast<std::uint64_t>(static_cast<double>(ref.server_idle) * f);
      c.client_idle = static_cast<std::uint64_t>(static_cast<double>(ref.client_idle) * f);
      c.server_grown = c.server_idle + (ref.server_grown - ref.server_idle);
      c.client_grown = c.client_idle + (ref.client_grown - ref.client_idle);
      c.source = fmt::format(
          "computed: {} x {} B per connection measured at {} connection(s) "
          "({} for both sides exceeds --static-limit {})",
          asked, ref.server_idle / ref.n, ref.n,
          human_bytes(2.0 * static_cast<double>(asked * static_per_conn)),
          human_bytes(static_cast<double>(*limit)));
      mem.push_back(c);
    }
    std::ranges::stable_sort(mem, [](const MemRun& a, const MemRun& b) {
      return a.n != b.n ? a.n < b.n : a.scheme < b.scheme;
    });

    std::cout << fmt::format(
        "Registered memory per connection: enlarge (slots {} x {} B receive + {} send) against "
        "static 64 x 64 KiB\n(Open MPI's default for siw: 4 MiB per peer; here plus {} send "
        "slots of 64 KiB). Each side of a connection registers this much; server side shown,\n"
        "client side in the CSV. 'grown' = after connection 1 alone sent one {}-byte message.\n"
        "RSS/conn: how much the resident memory of both processes grew per connection (the "
        "emulator's own memory,\nnot registered memory). 'computed' rows were not measured.\n\n",
        en.recv_slots, en.slot_size, en.send_slots, st.send_slots, thousands(o.grow));
    std::cout << fmt::format("{:>11}  {:<8} {:>12} {:>12} {:>12} {:>12} {:>9} {:>10}  {}\n",
                             "connections", "scheme", "idle/conn", "idle total", "grown/conn",
                             "grown total", "connect", "RSS/conn", "source");
    for (const auto& m : mem) {
      const double n = static_cast<double>(m.n);
      const std::uint64_t rss_pc = m.computed ? 0 : m.rss_growth / m.n;
      std::cout << fmt::format(
          "{:>11}  {:<8} {:>12} {:>12} {:>12} {:>12} {:>9} {:>10}  {}\n", thousands(m.n), m.scheme,
          human_bytes(static_cast<double>(m.server_idle) / n),
          human_bytes(static_cast<double>(m.server_idle)),
          human_bytes(static_cast<double>(m.server_grown) / n),
          human_bytes(static_cast<double>(m.server_grown)),
          m.computed ? "-" : fmt::format("{:.2f} s", m.connect_s),
          m.computed ? "-" : human_bytes(static_cast<double>(rss_pc)), m.source);
      CsvRow row;
      row["part"] = "memory";
      row["scheme"] = m.scheme;
      row["connections"] = std::to_string(m.n);
      row["source"] = m.source;
      if (!m.computed) {
        row["connect_seconds"] = fmt::format("{:.3f}", m.connect_s);
        row["rss_bytes"] = std::to_string(m.rss);
        row["rss_bytes_per_connection"] = std::to_string(rss_pc);
        row["open_fds"] = std::to_string(m.fds);
      }
      for (bool grown : {false, true}) {
        CsvRow r2 = row;
        r2["state"] = grown ? fmt::format("after-one-{}B-message", o.grow) : "idle";
        const auto sb = grown ? m.server_grown : m.server_idle;
        const auto cb = grown ? m.client_grown : m.client_idle;
        r2["server_registered_bytes"] = std::to_string(sb);
        r2["client_registered_bytes"] = std::to_string(cb);
        r2["server_bytes_per_connection"] = fmt::format("{:.1f}", static_cast<double>(sb) / n);
        r2["client_bytes_per_connection"] = fmt::format("{:.1f}", static_cast<double>(cb) / n);
        csv.push_back(r2);
      }
    }
    // One line per count: how much less the enlarge scheme registers.
    std::cout << "\n";
    for (auto asked : *counts) {
      const MemRun *e = nullptr, *s = nullptr;
      for (const auto& m : mem) {
        if (m.scheme == "enlarge" && m.n == std::min(asked, cap)) e = &m;
        if (m.scheme == "static" && m.n == asked) s = &m;
      }
      if (!e || !s) continue;
      const double epc = static_cast<double>(e->server_idle) / static_cast<double>(e->n);
      const double spc = static_cast<double>(s->server_idle) / static_cast<double>(s->n);
      std::cout << fmt::format(
          "{:>6} idle connections: enlarge {}/connection, static {}/connection{}: {:.0f} x less; "
          "all connections {} against {}\n",
          thousands(asked), human_bytes(epc), human_bytes(spc), s->computed ? " (computed)" : "",
          spc / epc, human_bytes(static_cast<double>(e->server_idle)),
          human_bytes(static_cast<double>(s->server_idle)));
    }
    for (const auto& n : notes) std::cout << "note: " << n << "\n";
    std::cout << std::endl;
  }

  // ------------------------------------------------------------------- speed
  std::vector<SpeedCell> cells;
  std::vector<std::string> speed_schemes;
  if (do_speed) {
    SpeedBudget b;
    b.latency_s = o.latency_seconds;
    b.stream_s = o.stream_seconds;
    if (o.quick) {
      b.warmup = 2;
      b.min_iterations = 3;
      b.min_messages = 4;
    }
    std::vector<std::pair<std::string, std::unique_ptr<BenchClient>>> clients;
    progress_line("speed: connecting raw TCP and " + o.schemes);
    auto tcp = TcpClient::start(timeout);
    if (!tcp) return fail(tcp.error());
    clients.emplace_back("tcp", std::move(*tcp));
    static const std::map<std::string, enlarge::Mode> modes = {
        {"enlarge", enlarge::Mode::Enlarge},
        {"pieces", enlarge::Mode::Pieces},
        {"rendezvous", enlarge::Mode::Rendezvous}};
    for (const auto& s : schemes) {
      enlarge::Options so = *base;
      so.mode = modes.at(s);
      if (so.mode != enlarge::Mode::Enlarge) so.free_small = false;
      auto c = NodeClient::start(so, timeout);
      if (!c) return fail(fmt::format("speed, {}: {}", s, c.error()));
      clients.emplace_back(s, std::move(*c));
    }
    for (auto& [name, c] : clients) speed_schemes.push_back(name);
    const auto t0 = Clock::now();
    for (auto size : *sizes) {
      double tcp_lat = 0, tcp_mbps = 0;
      for (auto& [name, c] : clients) {
        auto cell = run_cell(*c, name, size, b);
        if (!cell) {
          std::string why = cell.error();
          const std::string server = c->finish();
          if (!server.empty()) why += " (" + server + ")";
          return fail("speed: " + why);
        }
        if (name == "tcp") {
          tcp_lat = cell->latency_us;
          tcp_mbps = cell->mbps;
        }
        cell->latency_ratio = tcp_lat > 0 ? cell->latency_us / tcp_lat : 0;
        cell->throughput_ratio = tcp_mbps > 0 ? cell->mbps / tcp_mbps : 0;
        progress_line(fmt::format(
            "speed: {:>7} {:<10} latency {:>9.1f} us ({} round trips), {:>8.1f} MB/s ({} "
            "messages) [{:.0f} s]",
            size_label(size), name, cell->latency_us, cell->latency_iterations, cell->mbps,
            cell->stream_messages, seconds_since(t0)));
        cells.push_back(*cell);
      }
    }
    for (auto& [name, c] : clients)
      if (auto why = c->finish(); !why.empty())
        return fail(fmt::format("speed, {}: {}", name, why));
    clients.clear();

    std::cout << fmt::format(
        "Latency (median ping-pong round trip: the client sends, the server echoes the same size) "
        "and\nthroughput (one way, payload MB/s = 10^6 B/s) per message size; ratios against raw "
        "TCP on 127.0.0.1\nmeasured in this run (length-prefixed messages, TCP_NODELAY): "
        "latency x TCP > 1 is slower,\nthroughput x TCP < 1 is slower. Enlarge/pieces/rendezvous: "
        "slots of {} B, messages above {} B\nare enlarged (enlarge), sent in pieces (pieces) or "
        "through a buffer registered for them (rendezvous).\n\n",
        base->slot_size, base->threshold ? base->threshold : base->slot_size - 16);
    std::cout << fmt::format("{:>9}  {:<10} {:>12} {:>12} {:>12} {:>12}\n", "size", "scheme",
                             "latency us", "MB/s", "lat x TCP", "tput x TCP");
    std::uint64_t prev = 0;
    for (const auto& c : cells) {
      if (prev && c.size != prev) std::cout << "\n";
      prev = c.size;
      std::cout << fmt::format("{:>9}  {:<10} {:>12.1f} {:>12.1f} {:>12.2f} {:>12.3f}\n",
                               size_label(c.size), c.scheme, c.latency_us, c.mbps, c.latency_ratio,
                               c.throughput_ratio);
      CsvRow row;
      row["part"] = "speed";
      row["scheme"] = c.scheme;
      row["connections"] = "1";
      row["size_bytes"] = std::to_string(c.size);
      row["latency_median_us"] = fmt::format("{:.2f}", c.latency_us);
      row["latency_iterations"] = std::to_string(c.latency_iterations);
      row["throughput_MBps"] = fmt::format("{:.3f}", c.mbps);
      row["stream_messages"] = std::to_string(c.stream_messages);
      row["latency_vs_tcp"] = fmt::format("{:.4f}", c.latency_ratio);
      row["throughput_vs_tcp"] = fmt::format("{:.4f}", c.throughput_ratio);
      row["source"] = "measured";
      csv.push_back(row);
    }
    std::cout << std::endl;
  }

  // ------------------------------------------------------------------- outputs
  if (!o.csv.empty()) {
    std::ofstream out(o.csv);
    for (std::size_t i = 0; i < kCsvColumns.size(); ++i) out << (i ? "," : "") << kCsvColumns[i];
    out << "\n";
    for (const auto& row : csv) {
      for (std::size_t i = 0; i < kCsvColumns.size(); ++i) {
        auto it = row.find(kCsvColumns[i]);
        out << (i ? "," : "") << (it == row.end() ? "" : csv_field(it->second));
      }
      out << "\n";
    }
    out.close();
    if (!out) return fail("cannot write " + o.csv);
    std::cout << "CSV: " << o.csv << "\n";
  }
  if (!o.png.empty()) {
    if (!gnuplot) {
      std::cout << "PNG: not made: gnuplot is not installed (apt-get install gnuplot-nox)\n";
    } else {
      const std::string script = plot_script(o.png, mem, cells, speed_schemes,
                                             sizes ? *sizes : std::vector<std::uint64_t>{}, o.grow);
      if (!script.empty()) {
        if (auto why = run_gnuplot(*gnuplot, script); !why.empty()) return fail(why);
        std::cout << "PNG: " << o.png << "\n";
      }
    }
  }
  return 0;
}

}  // namespace

Runner add_enlarge_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* sub = app.add_subcommand(
      "enlarge-bench",
      "Benchmark of the buffer-enlargement protocol on 127.0.0.1:\n"
      "(a) registered memory per connection for N idle connections, enlarge against static\n"
      "    64 x 64 KiB buffers on every connection, and after one connection sent a large\n"
      "    message; (b) latency and throughput per message size for enlarge, pieces (always\n"
      "    eager, in pieces) and rendezvous (register per message), each as a ratio against\n"
      "    raw TCP measured in the same run. Prints tables, writes a CSV and a PNG (gnuplot).\n"
      "    The buffer-enlargement options below set up the enlarge, pieces and rendezvous\n"
      "    schemes; the static scheme always has 64 receive slots of 64 KiB. The default run\n"
      "    takes about a minute on two cores; --quick takes seconds. Progress goes to stderr.");
  sub->add_option("--part", o->part, "What to run: memory, speed or both")
      ->check(CLI::IsMember({"memory", "speed", "both"}))
      ->capture_default_str();
  o->connections_opt =
      sub->add_option("--connections", o->connections,
                      "Idle connection counts for the memory part (comma-separated, 1-100000)")
          ->capture_default_str();
  o->sizes_opt = sub->add_option("--sizes", o->sizes,
                                 "Message sizes for the speed part (comma-separated; K, M units: "
                                 "1 B - 64 MiB)")
                     ->capture_default_str();
  sub->add_option("--schemes", o->schemes,
                  "Schemes for the speed part (raw TCP always runs as the baseline)")
      ->capture_default_str();
  sub->add_flag("--quick", o->quick,
                "A short run for tests: connections 1,100; sizes 64,4K,64K,1M; short time per "
                "measurement (explicit options win)");
  sub->add_option("--csv", o->csv, "Write every row of both parts to this CSV ('' : none)")
      ->capture_default_str();
  sub->add_option("--png", o->png,
                  "Plot both parts into this PNG with gnuplot ('' : none; without gnuplot the "
                  "run says so and still succeeds)")
      ->capture_default_str();
  sub->add_option("--static-limit", o->static_limit,
                  "Measure the static scheme only where both sides register at most this much "
                  "(e.g. 2G); larger counts are computed from the largest measured count, and "
                  "labelled so")
      ->capture_default_str();
  sub->add_option("--grow", o->grow,
                  "Bytes of the one message a single connection sends after the idle measurement")
      ->check(CLI::Range(1u, 64u << 20))
      ->capture_default_str();
  sub->add_option("--batch", o->batch, "Connections started at a time while connecting")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  o->latency_opt =
      sub->add_option("--latency-seconds", o->latency_seconds,
                      "Time spent on round trips per size and scheme (at least 5 round trips)")
          ->check(CLI::Range(0.0, 60.0))
          ->capture_default_str();
  o->stream_opt = sub->add_option("--stream-seconds", o->stream_seconds,
                                  "Time spent streaming per size and scheme (at least 8 messages)")
                      ->check(CLI::Range(0.0, 60.0))
                      ->capture_default_str();
  add_enlarge_options(*sub, o->enlarge);
  if (auto* mode = sub->get_option_no_throw("--mode")) sub->remove_option(mode);
  add_app_options(*sub, o->app);
  return [o] { return run(*o); };
}

}  // namespace iwarp::tools
