// rnic enlarge-demo: the buffer-enlargement protocol between two processes. Both sides send
// a seeded random stream of messages (sizes 0 - 1 MiB, split into random iovecs) to each
// other at once on the first of --connections connections and check every message they
// receive, byte for byte and in order, against the same seeded stream; the other connections
// stay idle, to show that only the connection that needed it grew. --timeline draws each
// protocol step as it happens.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "common/byte_units.hpp"
#include "common/log.hpp"
#include "enlarge/node.hpp"
#include "tools/app_options.hpp"
#include "tools/commands.hpp"
#include "tools/enlarge_options.hpp"

namespace iwarp::tools {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct DemoOptions {
  bool server = false;
  std::string client;
  std::string bind = "127.0.0.1";
  int port = 7185;
  std::string port_file;
  int messages = 200;
  std::uint64_t seed = 1;
  std::size_t max_size = 1 << 20;
  int connections = 3;
  std::string direction = "both";
  bool timeline = false;
  bool quiet = false;
  int pause_ms = 0;
  EnlargeCli enlarge;
  AppOptions app;
};

// Message i of the stream a side sends: its size (log-uniform 0..max, 1 in 20 exactly max),
// its bytes and its iovec split all follow from (seed, direction, i).
std::vector<Bytes> stream_message(std::uint64_t seed, bool from_client, int i,
                                  std::size_t max_size) {
  std::mt19937_64 g(seed * 0x9e3779b97f4a7c15ULL + (from_client ? 0 : 0x5bd1e995) +
                    static_cast<std::uint64_t>(i) * 0x100000001b3ULL);
  const double bits = std::log2(static_cast<double>(max_size) + 1);
  std::size_t size = std::uniform_int_distribution<int>(0, 19)(g) == 0
                         ? max_size
                         : static_cast<std::size_t>(
                               std::exp2(std::uniform_real_distribution<double>(0, bits)(g)) - 1);
  size = std::min(size, max_size);
  std::vector<Bytes> iov;
  std::size_t at = 0;
  while (at < size || iov.empty()) {
    const std::size_t n = std::min<std::size_t>(
        size - at, std::size_t{1} << std::uniform_int_distribution<int>(4, 20)(g));
    Bytes e(n);
    for (auto& b : e) b = static_cast<std::uint8_t>(g() >> 56);
    iov.push_back(std::move(e));
    at += n;
    if (size == 0) break;
  }
  return iov;
}

Bytes flatten(const std::vector<Bytes>& iov) {
  Bytes all;
  for (const auto& e : iov) all.insert(all.end(), e.begin(), e.end());
  return all;
}

// The run's parameters, sent by the client as its first message (big-endian): connections
// (4), messages (4), seed (8), largest size (8), direction (1: 0 both, 1 to-server,
// 2 to-client).
Bytes encode_run(const DemoOptions& o) {
  Bytes b(25);
  store_be32(b.data(), static_cast<std::uint32_t>(o.connections));
  store_be32(b.data() + 4, static_cast<std::uint32_t>(o.messages));
  store_be64(b.data() + 8, o.seed);
  store_be64(b.data() + 16, o.max_size);
  b[24] = o.direction == "both" ? 0 : o.direction == "to-server" ? 1 : 2;
  return b;
}

std::string decode_run(const Bytes& b, DemoOptions& o) {
  if (b.size() != 25) return fmt::format("{} octets instead of 25", b.size());
  const std::uint32_t conns = load_be32(b.data()), msgs = load_be32(b.data() + 4);
  const std::uint64_t max = load_be64(b.data() + 16);
  if (conns < 1 || conns > 10000 || msgs > 10000000 || max > (1u << 30) || b[24] > 2)
    return fmt::format("out of range ({} connections, {} messages, {} bytes, direction {})", conns,
                       msgs, max, b[24]);
  o.connections = static_cast<int>(conns);
  o.messages = static_cast<int>(msgs);
  o.seed = load_be64(b.data() + 8);
  o.max_size = max;
  o.direction = b[24] == 0 ? "both" : b[24] == 1 ? "to-server" : "to-client";
  return "";
}

// One timeline line: this side on the left, the peer on the right.
void draw(const std::string& me, Clock::time_point t0, const std::string& e) {
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const std::string peer = me == "client" ? "server" : "client";
  if (e.starts_with("tx ")) {
    std::cout << fmt::format("{:9.3f} ms  {} ──{:─^60}──▶ {}\n", ms, me, " " + e.substr(3) + " ",
                             peer);
  } else if (e.starts_with("rx ")) {
    std::cout << fmt::format("{:9.3f} ms  {} ◀──{:─^60}── {}\n", ms, me, " " + e.substr(3) + " ",
                             peer);
  } else {
    std::cout << fmt::format("{:9.3f} ms  {} ** {}\n", ms, me, e);
  }
}

// The server's connections: the first brings the run's parameters (how many connections,
// messages, seed, sizes, direction), so the server needs no options. Returns the exit code on
// failure.
std::expected<std::vector<enlarge::Connection*>, int> serve_connections(enlarge::Node& n,
                                                                        DemoOptions& o) {
  auto fail = [](const std::string& why) {
    std::cerr << "rnic enlarge-demo: " << why << "\n";
    return std::unexpected(1);
  };
  auto port = n.listen(o.bind, static_cast<std::uint16_t>(o.port));
  if (!port) return fail(port.error());
  if (!o.port_file.empty()) {
    std::ofstream(o.port_file + ".tmp") << *port << "\n";
    std::filesystem::rename(o.port_file + ".tmp", o.port_file);
  }
  if (!o.quiet) std::cerr << fmt::format("server: listening on {}:{}\n", o.bind, *port);
  std::vector<enlarge::Connection*> conns;
  auto first = n.accept(std::chrono::milliseconds(o.app.timeout_ms * 6));
  if (!first) return fail("server: " + first.error());
  conns.push_back(*first);
  auto params = n.recv(**first, std::chrono::milliseconds(o.app.timeout_ms));
  if (!params) return fail("server: no run parameters from the client: " + params.error());
  if (auto why = decode_run(params->data, o); !why.empty())
    return fail("server: the client's run parameters: " + why);
  for (int i = 1; i < o.connections; ++i) {
    auto c = n.accept(std::chrono::milliseconds(o.app.timeout_ms));
    if (!c) return fail("server: " + c.error());
    conns.push_back(*c);
  }
  if (!o.quiet)
    std::cerr << fmt::format(
        "server: {} connection(s); the client asks for {} message(s) {}, "
        "seed {}, up to {} bytes\n",
        o.connections, o.messages, o.direction, o.seed, o.max_size);
  return conns;
}

// The client's connections; the first carries the run's parameters to the server.
std::expected<std::vector<enlarge::Connection*>, int> open_connections(enlarge::Node& n,
                                                                       const DemoOptions& o) {
  std::vector<enlarge::Connection*> conns;
  for (int i = 0; i < o.connections; ++i) {
    auto c = n.connect(o.client, static_cast<std::uint16_t>(o.port),
                       std::chrono::milliseconds(o.app.timeout_ms));
    if (!c) {
      std::cerr << "rnic enlarge-demo: client: " << c.error() << "\n";
      return std::unexpected(1);
    }
    conns.push_back(*c);
  }
  if (auto r = conns[0]->post(encode_run(o)); !r) {
    std::cerr << "rnic enlarge-demo: client: " << r.error() << "\n";
    return std::unexpected(1);
  }
  return conns;
}

// What one side's stream did.
struct StreamCounts {
  int sent = 0, received = 0;
  std::uint64_t bytes_in = 0, bytes_out = 0;
};

// Both streams on connection `c` until this side sent and received all of them, checking each
// message received against the seeded stream. Returns 0 or the exit code.
int run_streams(enlarge::Node& n, enlarge::Connection& c, const DemoOptions& o,
                const std::string& me, StreamCounts& k) {
  const bool i_send = o.direction == "both" || (o.direction == "to-server") != o.server;
  const bool i_receive = o.direction == "both" || (o.direction == "to-server") == o.server;
  const int to_send = i_send ? o.messages : 0;
  const int to_receive = i_receive ? o.messages : 0;
  int& sent = k.sent;
  int& received = k.received;
  int last_report = -1;
  const auto deadline_step = std::chrono::milliseconds(o.app.timeout_ms);
  auto last_progress = Clock::now();
  int paused_at = 0;
  auto pause_until = Clock::now();
  while (sent < to_send || received < to_receive || !c.tx_idle()) {
    // Keep a few messages queued: enough to overlap, bounded memory.
    // --pause: every 20 messages, let the sending side go idle for a while (--idle-shrink).
    if (o.pause_ms > 0 && sent > 0 && sent % 20 == 0 && paused_at != sent && c.tx_idle()) {
      paused_at = sent;
      pause_until = Clock::now() + std::chrono::milliseconds(o.pause_ms);
    }
    while (sent < to_send && c.tx_queued() < 4 && Clock::now() >= pause_until &&
           !(o.pause_ms > 0 && sent > 0 && sent % 20 == 0 && paused_at != sent)) {
      auto iov = stream_message(o.seed, !o.server, sent, o.max_size);
      for (const auto& e : iov) k.bytes_out += e.size();
      if (auto r = c.post(std::move(iov)); !r) {
        std::cerr << fmt::format("rnic enlarge-demo: {}: message {}: {}\n", me, sent, r.error());
        return 1;
      }
      sent++;
      last_progress = Clock::now();
    }
    while (received < to_receive) {
      auto m = c.try_recv();
      if (!m) break;
      const Bytes want = flatten(stream_message(o.seed, o.server, received, o.max_size));
      if (m->data != want) {
        std::size_t at = 0;
        while (at < want.size() && at < m->data.size() && want[at] == m->data[at]) ++at;
        std::cerr << fmt::format(
            "rnic enlarge-demo: {}: message {} from the {} differs: {} bytes expected, {} "
            "received, first difference at byte {}\n",
            me, received, o.server ? "client" : "server", want.size(), m->data.size(), at);
        return 1;
      }
      k.bytes_in += m->data.size();
      received++;
      last_progress = Clock::now();
    }
    if (c.state() != enlarge::Connection::State::Established) {
      std::cerr << fmt::format(
          "rnic enlarge-demo: {}: connection lost after {} sent, {} received: {}\n", me, sent,
          received, c.error());
      return 1;
    }
    if (Clock::now() - last_progress > deadline_step) {
      std::cerr << fmt::format(
          "rnic enlarge-demo: {}: no progress for {} ms ({} of {} sent, {} "
          "of {} received)\n",
          me, o.app.timeout_ms, sent, to_send, received, to_receive);
      return 1;
    }
    const int pct = (sent + received) * 10 / std::max(1, to_send + to_receive);
    if (!o.quiet && !o.timeline && pct != last_report) {
      std::cerr << fmt::format("{}: {}/{} sent, {}/{} received\n", me, sent, to_send, received,
                               to_receive);
      last_report = pct;
    }
    n.progress(10ms);
  }
  return 0;
}

// The server says it has everything; the client waits for that before it closes. Returns what
// every connection holds at the end of the run (a closed connection gives it all back).
std::expected<std::vector<std::uint64_t>, int> finish_run(
    enlarge::Node& n, const std::vector<enlarge::Connection*>& conns, const DemoOptions& o) {
  enlarge::Connection& c = *conns[0];
  const auto deadline_step = std::chrono::milliseconds(o.app.timeout_ms);
  std::vector<std::uint64_t> final_registered;
  auto snapshot = [&] {
    final_registered.clear();
    for (auto* k : conns) final_registered.push_back(k->registered_bytes());
  };
  if (o.server) {
    snapshot();  // before the client hears from us and closes
    (void)c.post(as_bytes(std::string("all received")));
    (void)n.flush(c, deadline_step);
    const auto until = Clock::now() + deadline_step;
    while (c.state() == enlarge::Connection::State::Established && Clock::now() < until)
      n.progress(20ms);
  } else {
    auto bye = n.recv(c, deadline_step);
    if (!bye) {
      std::cerr << "rnic enlarge-demo: client: no final word from the server: " << bye.error()
                << "\n";
      return std::unexpected(1);
    }
    snapshot();
  }
  return final_registered;
}

std::string human(std::uint64_t n) {
  return format_bytes(n, ByteFormat::OneDecimal);
}

void print_summary(const std::string& me, const std::vector<enlarge::Connection*>& conns,
                   const StreamCounts& k, double secs,
                   const std::vector<std::uint64_t>& idle_before,
                   const std::vector<std::uint64_t>& final_registered) {
  const auto& s = conns[0]->stats();
  std::cout << fmt::format(
      "{}: {} messages ({}) sent, {} ({}) received and verified in order, {:.2f} s\n", me, k.sent,
      human(k.bytes_out), k.received, human(k.bytes_in), secs);
  std::cout << fmt::format(
      "{}: sending side: {} pieces, {} RDMA Writes ({}), {} enlargement(s) asked, {} granted, "
      "{} refused, {} release(s)\n",
      me, s.pieces_sent, s.bulk_writes, human(s.bulk_bytes), s.enlarge_requests, s.enlargements,
      s.refusals, s.releases_sent);
  std::cout << fmt::format(
      "{}: receiving side: {} buffer(s) provisioned, {} freed, {} refused; small buffer freed "
      "{} time(s); registered now {} (peak {})\n",
      me, s.buffers_provisioned, s.buffers_freed, s.refusals_sent, s.small_freed,
      human(final_registered[0]), human(s.peak_registered));
  for (std::size_t i = 0; i < conns.size(); ++i)
    std::cout << fmt::format("{}: connection {}: registered {} -> {}{}\n", me, i + 1,
                             human(idle_before[i]), human(final_registered[i]),
                             i == 0 ? " (carried the stream)" : " (idle)");
}

int run(DemoOptions& o) {
  auto opts = enlarge_options(o.enlarge, o.app);
  if (!opts) {
    std::cerr << "rnic enlarge-demo: " << opts.error() << "\n";
    return 2;
  }
  const std::string me = o.server ? "server" : "client";
  auto node = enlarge::Node::create(*opts);
  if (!node) {
    std::cerr << "rnic enlarge-demo: " << node.error() << "\n";
    return 2;
  }
  auto& n = **node;
  auto conns = o.server ? serve_connections(n, o) : open_connections(n, o);
  if (!conns) return conns.error();
  enlarge::Connection& c = *conns->front();
  const auto t0 = Clock::now();
  if (o.timeline) c.on_event = [&](const std::string& e) { draw(me, t0, e); };
  std::vector<std::uint64_t> idle_before;
  for (auto* k : *conns) idle_before.push_back(k->registered_bytes());

  StreamCounts counts;
  if (int rc = run_streams(n, c, o, me, counts); rc != 0) return rc;
  auto final_registered = finish_run(n, *conns, o);
  if (!final_registered) return final_registered.error();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!o.quiet) print_summary(me, *conns, counts, secs, idle_before, *final_registered);
  return 0;
}

}  // namespace

Runner add_enlarge_demo_command(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  auto* sub = app.add_subcommand(
      "enlarge-demo",
      "The buffer-enlargement protocol between two processes: small pre-registered buffers\n"
      "per connection, enlarged for the one connection that needs it. Both sides send a seeded\n"
      "random stream (sizes 0 - 1 MiB, random iovecs) and verify what they receive.\n"
      "Run one side with --server and the other with --client ADDR; the client's --messages,\n"
      "--seed, --max-size, --direction and --connections apply to both.");
  add_peer_options(*sub, o->server, o->client, o->bind, o->port, "Listen for the client",
                   "TCP port (server: 0 picks one)");
  sub->add_option("--port-file", o->port_file, "Server: write the port it listens on here");
  sub->add_option("--messages,-n", o->messages, "Messages each way (client)")
      ->check(CLI::Range(0, 10000000))
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the random streams (client)")->capture_default_str();
  sub->add_option("--max-size", o->max_size, "Largest message (bytes; client)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 30))
      ->capture_default_str();
  sub->add_option(
         "--connections", o->connections,
         "Connections to open (client); the stream runs on the first, the others stay idle")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  sub->add_option("--direction", o->direction, "both, to-server or to-client (client)")
      ->check(CLI::IsMember({"both", "to-server", "to-client"}))
      ->capture_default_str();
  sub->add_option("--pause", o->pause_ms,
                  "Every 20 messages, stop sending for this many ms (watch --idle-shrink)")
      ->check(CLI::Range(0, 60000))
      ->capture_default_str();
  sub->add_flag("--timeline", o->timeline,
                "Draw every protocol step of the first connection (Pieces included)");
  sub->add_flag("--quiet,-q", o->quiet, "Print only errors");
  add_enlarge_options(*sub, o->enlarge);
  add_app_options(*sub, o->app);
  return [o]() -> int {
    if (!o->server && o->client.empty()) {
      std::cerr << "rnic enlarge-demo: give --server or --client ADDR (see rnic enlarge-demo "
                   "--help)\n";
      return 2;
    }
    try {
      return run(*o);
    } catch (const std::exception& e) {
      std::cerr << "rnic enlarge-demo: " << e.what() << "\n";
      return 1;
    }
  };
}

}  // namespace iwarp::tools
