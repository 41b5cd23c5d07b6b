// rnic enlarge-bench's runs, in order: the memory part (enlarge_bench_memory.hpp) with the
// static scheme computed where measuring it would register more than --static-limit, then the
// speed part (enlarge_bench_speed.hpp, tcp_baseline.hpp), each printed as a table and added to
// the CSV, then the CSV and the PNG (enlarge_bench_output.hpp).
#include "bench/enlarge_bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "bench/enlarge_bench_memory.hpp"
#include "bench/enlarge_bench_output.hpp"
#include "bench/enlarge_bench_speed.hpp"
#include "bench/enlarge_bench_support.hpp"
#include "bench/enlarge_bench_write.hpp"
#include "bench/process_probes.hpp"
#include "bench/tcp_baseline.hpp"
#include "common/byte_units.hpp"
#include "enlarge/allocator.hpp"

namespace iwarp::bench {

namespace {

constexpr std::uint64_t kFdSlack = 256;  // descriptors besides the connections' sockets

int fail(const std::string& why) {
  std::cerr << "rnic enlarge-bench: " << why << "\n";
  return 1;
}

std::string human_bytes(double b) {
  return format_bytes(b, ByteFormat::Significant);
}

void print_header(const enlarge::Options& base) {
  double load = -1;
  std::ifstream("/proc/loadavg") >> load;
  // The nodes set the process's malloc (enlarge/allocator.hpp): the benchmark says how.
  const std::string malloc_line = base.tune_malloc ? enlarge::keep_large_blocks_in_heap().text
                                                   : "malloc: left as it is (--malloc-as-is)";
  std::cout << fmt::format(
                   "rnic enlarge-bench on 127.0.0.1: {} CPUs, load average {:.2f} at the start\n"
                   "(other work on the host slows every scheme; each ratio compares numbers "
                   "taken moments apart)\n{}\n\n",
                   std::thread::hardware_concurrency(), load, malloc_line)
            << std::flush;
}

// The two schemes of the memory part: enlarge with the configured options, and static 64
// receive slots of 64 KiB on every connection (Open MPI's default for siw: 4 MiB per peer).
struct MemorySchemes {
  enlarge::Options en, st;
  std::uint64_t static_per_conn = 0;  // registered bytes of one side of a static connection
  std::uint64_t cap = 0;              // the most connections the open-files limit allows
  std::vector<std::string> notes;
};

MemorySchemes memory_schemes(const EnlargeBenchConfig& c) {
  MemorySchemes m;
  m.en = c.base;
  m.en.mode = enlarge::Mode::Enlarge;
  m.st = c.base;
  m.st.slot_size = 65536;
  m.st.recv_slots = 64;
  m.st.mode = enlarge::Mode::Pieces;
  m.st.free_small = false;
  m.static_per_conn = std::uint64_t{m.st.slot_size} * (m.st.recv_slots + m.st.send_slots);
  return m;
}

// One socket per connection in each process (client here, server in a child process): raises
// the open-files limit for the largest count, or caps the counts to what it allows.
std::expected<void, std::string> fit_open_files(const EnlargeBenchConfig& c, MemorySchemes& m) {
  const std::uint64_t want = c.connections.back();
  auto [nofile, why_nofile] = raise_nofile(want + kFdSlack);
  m.cap = want;
  if (why_nofile.empty()) return {};
  m.cap = nofile > kFdSlack ? nofile - kFdSlack : 0;
  m.notes.push_back(
      fmt::format("{}: connection counts above {} were capped to {} (one socket "
                  "per connection in each process)",
                  why_nofile, m.cap, m.cap));
  progress_line(m.notes.back());
  if (m.cap == 0) return std::unexpected(why_nofile);
  return {};
}

// Measures the enlarge scheme at every count and the static scheme at the counts whose
// registrations fit --static-limit (at least one, to compute the others from).
std::expected<std::vector<MemRun>, std::string> measure_memory_runs(
    const EnlargeBenchConfig& c, const MemorySchemes& m, std::vector<std::uint64_t>& static_done) {
  const MemoryLimits limits{std::chrono::milliseconds(c.timeout_ms), c.batch, c.grow};
  std::vector<MemRun> mem;
  std::vector<std::uint64_t> static_measure;
  for (auto n : c.connections)
    if (2 * std::min(n, m.cap) * m.static_per_conn <= c.static_limit)
      static_measure.push_back(std::min(n, m.cap));
  if (static_measure.empty()) static_measure.push_back(1);  // a reference to compute from

  for (auto asked : c.connections) {
    const std::uint64_t n = std::min(asked, m.cap);
    progress_line(fmt::format("memory: {} connection(s), enlarge{}", n,
                              n != asked ? fmt::format(" (capped from {})", asked) : ""));
    auto r = measure_memory(m.en, "enlarge", n, limits);
    if (!r) return std::unexpected("memory: " + r.error());
    if (n != asked) r->source = fmt::format("measured at {} (capped from {})", n, asked);
    mem.push_back(*r);
  }
  for (auto n : static_measure) {
    if (std::ranges::find(static_done, n) != static_done.end()) continue;
    static_done.push_back(n);
    progress_line(fmt::format("memory: {} connection(s), static 64 x 64 KiB", n));
    auto r = measure_memory(m.st, "static", n, limits);
    if (!r) return std::unexpected("memory, static: " + r.error());
    mem.push_back(*r);
  }
  return mem;
}

// The static scheme at the counts not measured: the largest measured count scaled.
void add_computed_static_runs(const EnlargeBenchConfig& c, const MemorySchemes& m,
                              const std::vector<std::uint64_t>& static_done,
                              std::vector<MemRun>& mem) {
  const MemRun* static_ref = nullptr;
  for (const auto& r : mem)
    if (r.scheme == "static" && (!static_ref || r.n > static_ref->n)) static_ref = &r;
  const MemRun ref = *static_ref;
  for (auto asked : c.connections) {
    if (std::ranges::find(static_done, std::min(asked, m.cap)) != static_done.end() &&
        asked <= m.cap)
      continue;
    MemRun r;
    r.scheme = "static";
    r.n = asked;
    r.computed = true;
    const double f = static_cast<double>(asked) / static_cast<double>(ref.n);
    r.server_idle = static_cast<std::uint64_t>(static_cast<double>(ref.server_idle) * f);
    r.client_idle = static_cast<std::uint64_t>(static_cast<double>(ref.client_idle) * f);
    r.server_grown = r.server_idle + (ref.server_grown - ref.server_idle);
    r.client_grown = r.client_idle + (ref.client_grown - ref.client_idle);
    r.source = fmt::format(
        "computed: {} x {} B per connection measured at {} connection(s) "
        "({} for both sides exceeds --static-limit {})",
        asked, ref.server_idle / ref.n, ref.n,
        human_bytes(2.0 * static_cast<double>(asked * m.static_per_conn)),
        human_bytes(static_cast<double>(c.static_limit)));
    mem.push_back(r);
  }
}

// Both CSV rows of one run: idle and after the large message.
void add_memory_rows(const MemRun& m, std::uint32_t grow, std::vector<CsvRow>& csv) {
  const double n = static_cast<double>(m.n);
  CsvRow row;
  row["part"] = "memory";
  row["scheme"] = m.scheme;
  row["connections"] = std::to_string(m.n);
  row["source"] = m.source;
  if (!m.computed) {
    row["connect_seconds"] = fmt::format("{:.3f}", m.connect_s);
    row["rss_bytes"] = std::to_string(m.rss);
    row["rss_bytes_per_connection"] = std::to_string(m.rss_growth / m.n);
    row["open_fds"] = std::to_string(m.fds);
  }
  for (bool grown : {false, true}) {
    CsvRow r2 = row;
    r2["state"] = grown ? fmt::format("after-one-{}B-message", grow) : "idle";
    const auto sb = grown ? m.server_grown : m.server_idle;
    const auto cb = grown ? m.client_grown : m.client_idle;
    r2["server_registered_bytes"] = std::to_string(sb);
    r2["client_registered_bytes"] = std::to_string(cb);
    r2["server_bytes_per_connection"] = fmt::format("{:.1f}", static_cast<double>(sb) / n);
    r2["client_bytes_per_connection"] = fmt::format("{:.1f}", static_cast<double>(cb) / n);
    csv.push_back(r2);
  }
}

void print_memory_table(const EnlargeBenchConfig& c, const MemorySchemes& s,
                        const std::vector<MemRun>& mem, std::vector<CsvRow>& csv) {
  std::cout << fmt::format(
      "Registered memory per connection: enlarge (slots {} x {} B receive + {} send) against "
      "static 64 x 64 KiB\n(Open MPI's default for siw: 4 MiB per peer; here plus {} send "
      "slots of 64 KiB). Each side of a connection registers this much; server side shown,\n"
      "client side in the CSV. 'grown' = after connection 1 alone sent one {}-byte message.\n"
      "RSS/conn: how much the resident memory of both processes grew per connection (the "
      "emulator's own memory,\nnot registered memory). 'computed' rows were not measured.\n\n",
      s.en.recv_slots, s.en.slot_size, s.en.send_slots, s.st.send_slots, thousands(c.grow));
  std::cout << fmt::format("{:>11}  {:<8} {:>12} {:>12} {:>12} {:>12} {:>9} {:>10}  {}\n",
                           "connections", "scheme", "idle/conn", "idle total", "grown/conn",
                           "grown total", "connect", "RSS/conn", "source");
  for (const auto& m : mem) {
    const double n = static_cast<double>(m.n);
    const std::uint64_t rss_pc = m.computed ? 0 : m.rss_growth / m.n;
    std::cout << fmt::format("{:>11}  {:<8} {:>12} {:>12} {:>12} {:>12} {:>9} {:>10}  {}\n",
                             thousands(m.n), m.scheme,
                             human_bytes(static_cast<double>(m.server_idle) / n),
                             human_bytes(static_cast<double>(m.server_idle)),
                             human_bytes(static_cast<double>(m.server_grown) / n),
                             human_bytes(static_cast<double>(m.server_grown)),
                             m.computed ? "-" : fmt::format("{:.2f} s", m.connect_s),
                             m.computed ? "-" : human_bytes(static_cast<double>(rss_pc)), m.source);
    add_memory_rows(m, c.grow, csv);
  }
}

// One line per count: how much less the enlarge scheme registers.
void print_memory_summary(const EnlargeBenchConfig& c, const MemorySchemes& s,
                          const std::vector<MemRun>& mem) {
  std::cout << "\n";
  for (auto asked : c.connections) {
    const MemRun *e = nullptr, *st = nullptr;
    for (const auto& m : mem) {
      if (m.scheme == "enlarge" && m.n == std::min(asked, s.cap)) e = &m;
      if (m.scheme == "static" && m.n == asked) st = &m;
    }
    if (!e || !st) continue;
    const double epc = static_cast<double>(e->server_idle) / static_cast<double>(e->n);
    const double spc = static_cast<double>(st->server_idle) / static_cast<double>(st->n);
    std::cout << fmt::format(
        "{:>6} idle connections: enlarge {}/connection, static {}/connection{}: {:.0f} x less; "
        "all connections {} against {}\n",
        thousands(asked), human_bytes(epc), human_bytes(spc), st->computed ? " (computed)" : "",
        spc / epc, human_bytes(static_cast<double>(e->server_idle)),
        human_bytes(static_cast<double>(st->server_idle)));
  }
  for (const auto& n : s.notes) std::cout << "note: " << n << "\n";
  std::cout << std::endl;
}

std::expected<std::vector<MemRun>, std::string> run_memory_part(const EnlargeBenchConfig& c,
                                                                std::vector<CsvRow>& csv) {
  MemorySchemes s = memory_schemes(c);
  if (auto fit = fit_open_files(c, s); !fit) return std::unexpected(fit.error());
  std::vector<std::uint64_t> static_done;
  auto mem = measure_memory_runs(c, s, static_done);
  if (!mem) return mem;
  add_computed_static_runs(c, s, static_done, *mem);
  std::ranges::stable_sort(*mem, [](const MemRun& a, const MemRun& b) {
    return a.n != b.n ? a.n < b.n : a.scheme < b.scheme;
  });
  print_memory_table(c, s, *mem, csv);
  print_memory_summary(c, s, *mem);
  return mem;
}

using Clients = std::vector<std::pair<std::string, std::unique_ptr<BenchClient>>>;

// Raw TCP first (the baseline every ratio is against), then each scheme.
std::expected<Clients, std::string> start_clients(const EnlargeBenchConfig& c) {
  const auto timeout = std::chrono::milliseconds(c.timeout_ms);
  std::string names;
  for (auto mode : c.schemes) names += (names.empty() ? "" : ",") + std::string(to_string(mode));
  progress_line("speed: connecting raw TCP and " + names);
  Clients clients;
  auto tcp = TcpClient::start(timeout);
  if (!tcp) return std::unexpected(tcp.error());
  clients.emplace_back("tcp", std::move(*tcp));
  for (auto mode : c.schemes) {
    enlarge::Options so = c.base;
    so.mode = mode;
    if (so.mode != enlarge::Mode::Enlarge) so.free_small = false;
    auto client = start_node_client(so, timeout);
    if (!client)
      return std::unexpected(fmt::format("speed, {}: {}", to_string(mode), client.error()));
    clients.emplace_back(to_string(mode), std::move(*client));
  }
  return clients;
}

// Every size on every client, scheme after scheme, so each ratio compares numbers taken
// moments apart.
std::expected<std::vector<SpeedCell>, std::string> measure_speed(const EnlargeBenchConfig& c,
                                                                 Clients& clients,
                                                                 WritePair& write) {
  SpeedBudget b;
  b.latency_s = c.latency_seconds;
  b.stream_s = c.stream_seconds;
  if (c.quick) {
    b.warmup = 2;
    b.min_iterations = 3;
    b.min_messages = 4;
  }
  std::vector<SpeedCell> cells;
  const auto t0 = Clock::now();
  for (auto size : c.sizes) {
    double tcp_lat = 0, tcp_mbps = 0, write_mbps = 0;
    for (auto& [name, client] : clients) {
      auto cell = run_cell(*client, name, size, b);
      if (cell && name == "tcp") {
        // Plain RDMA Write right after raw TCP: the second baseline.
        auto w = write.run(size, b);
        if (!w) return std::unexpected("speed: " + w.error());
        w->latency_ratio = cell->latency_us > 0 ? w->latency_us / cell->latency_us : 0;
        w->throughput_ratio = cell->mbps > 0 ? w->mbps / cell->mbps : 0;
        w->write_ratio = 1;
        write_mbps = w->mbps;
        progress_line(fmt::format("speed: {:>7} write      latency {:>9.1f} us, {:>8.1f} MB/s",
                                  format_bytes(size, ByteFormat::Exact), w->latency_us, w->mbps));
        cells.push_back(*cell);
        cells.back().latency_ratio = cells.back().throughput_ratio = 1;
        cells.back().write_ratio = write_mbps > 0 ? cell->mbps / write_mbps : 0;
        cells.push_back(*w);
        tcp_lat = cell->latency_us;
        tcp_mbps = cell->mbps;
        continue;
      }
      if (!cell) {
        std::string why = cell.error();
        const std::string server = client->finish();
        if (!server.empty()) why += " (" + server + ")";
        return std::unexpected("speed: " + why);
      }
      if (name == "tcp") {
        tcp_lat = cell->latency_us;
        tcp_mbps = cell->mbps;
      }
      cell->latency_ratio = tcp_lat > 0 ? cell->latency_us / tcp_lat : 0;
      cell->throughput_ratio = tcp_mbps > 0 ? cell->mbps / tcp_mbps : 0;
      cell->write_ratio = write_mbps > 0 ? cell->mbps / write_mbps : 0;
      progress_line(fmt::format(
          "speed: {:>7} {:<10} latency {:>9.1f} us ({} round trips), {:>8.1f} MB/s ({} "
          "messages) [{:.0f} s]",
          format_bytes(size, ByteFormat::Exact), name, cell->latency_us, cell->latency_iterations,
          cell->mbps, cell->stream_messages, seconds_since(t0)));
      cells.push_back(*cell);
    }
  }
  for (auto& [name, client] : clients)
    if (auto why = client->finish(); !why.empty())
      return std::unexpected(fmt::format("speed, {}: {}", name, why));
  return cells;
}

void print_speed_table(const EnlargeBenchConfig& c, const std::vector<SpeedCell>& cells,
                       std::vector<CsvRow>& csv) {
  std::cout << fmt::format(
      "Latency (median ping-pong round trip: the client sends, the server echoes the same size) "
      "and\nthroughput (one way, payload MB/s = 10^6 B/s) per message size; ratios against raw "
      "TCP on 127.0.0.1\nmeasured in this run (length-prefixed messages, TCP_NODELAY): "
      "latency x TCP > 1 is slower,\nthroughput x TCP < 1 is slower. Enlarge/pieces/rendezvous: "
      "slots of {} B, messages above {} B\nare enlarged (enlarge), sent in pieces (pieces) or "
      "through a buffer registered for them (rendezvous).\n\n",
      c.base.slot_size, c.base.threshold ? c.base.threshold : c.base.slot_size - 16);
  if (c.base.busy_poll.count() > 0)
    std::cout << fmt::format(
        "Busy polling (--busy-poll {}): the enlarge, pieces and rendezvous nodes and both "
        "ends of plain\nWrite poll their completion queues and run the receive path on their "
        "own threads; raw TCP blocks.\n\n",
        c.base.busy_poll.count());
  std::cout << fmt::format("{:>9}  {:<10} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "size", "scheme",
                           "latency us", "MB/s", "lat x TCP", "tput x TCP", "tput x Write");
  std::uint64_t prev = 0;
  for (const auto& cell : cells) {
    if (prev && cell.size != prev) std::cout << "\n";
    prev = cell.size;
    std::cout << fmt::format("{:>9}  {:<10} {:>12.1f} {:>12.1f} {:>12.2f} {:>12.3f} {:>12.3f}\n",
                             format_bytes(cell.size, ByteFormat::Exact), cell.scheme,
                             cell.latency_us, cell.mbps, cell.latency_ratio, cell.throughput_ratio,
                             cell.write_ratio);
    CsvRow row;
    row["part"] = "speed";
    row["scheme"] = cell.scheme;
    row["connections"] = "1";
    row["size_bytes"] = std::to_string(cell.size);
    row["latency_median_us"] = fmt::format("{:.2f}", cell.latency_us);
    row["latency_iterations"] = std::to_string(cell.latency_iterations);
    row["throughput_MBps"] = fmt::format("{:.3f}", cell.mbps);
    row["stream_messages"] = std::to_string(cell.stream_messages);
    row["latency_vs_tcp"] = fmt::format("{:.4f}", cell.latency_ratio);
    row["throughput_vs_tcp"] = fmt::format("{:.4f}", cell.throughput_ratio);
    row["throughput_vs_write"] = fmt::format("{:.4f}", cell.write_ratio);
    row["source"] = "measured";
    csv.push_back(row);
  }
  std::cout << std::endl;
}

struct SpeedPart {
  std::vector<SpeedCell> cells;
  std::vector<std::string> schemes;  // "tcp" first
};

std::expected<SpeedPart, std::string> run_speed_part(const EnlargeBenchConfig& c,
                                                     std::vector<CsvRow>& csv) {
  auto clients = start_clients(c);
  if (!clients) return std::unexpected(clients.error());
  auto write =
      WritePair::start(c.base.cm, std::ranges::max(c.sizes),
                       std::chrono::milliseconds(c.timeout_ms), c.base.busy_poll.count() > 0);
  if (!write) return std::unexpected("speed: " + write.error());
  SpeedPart part;
  for (auto& [name, client] : *clients) {
    part.schemes.push_back(name);
    if (name == "tcp") part.schemes.push_back("write");
  }
  auto cells = measure_speed(c, *clients, **write);
  if (!cells) return std::unexpected(cells.error());
  clients->clear();
  part.cells = std::move(*cells);
  print_speed_table(c, part.cells, csv);
  return part;
}

// The CSV and the PNG, each when asked for. Returns "" or what went wrong.
std::string write_outputs(const EnlargeBenchConfig& c, const std::vector<CsvRow>& csv,
                          const std::vector<MemRun>& mem, const SpeedPart& speed,
                          const std::optional<std::string>& gnuplot) {
  if (!c.csv.empty()) {
    if (auto why = write_csv(c.csv, csv); !why.empty()) return why;
    std::cout << "CSV: " << c.csv << "\n";
  }
  if (c.png.empty()) return "";
  if (!gnuplot) {
    std::cout << "PNG: not made: gnuplot is not installed (apt-get install gnuplot-nox)\n";
    return "";
  }
  const std::string script = plot_script(c.png, mem, speed.cells, speed.schemes,
                                         c.speed ? c.sizes : std::vector<std::uint64_t>{}, c.grow);
  if (script.empty()) return "";
  if (auto why = run_gnuplot(*gnuplot, script); !why.empty()) return why;
  std::cout << "PNG: " << c.png << "\n";
  return "";
}

}  // namespace

int run_enlarge_bench(const EnlargeBenchConfig& config) {
  ::signal(SIGPIPE, SIG_IGN);  // a peer that is gone is an error, not a signal
  std::optional<std::string> gnuplot;
  if (!config.png.empty()) gnuplot = find_in_path("gnuplot");
  print_header(config.base);
  std::vector<CsvRow> csv;
  std::vector<MemRun> mem;
  if (config.memory) {
    auto m = run_memory_part(config, csv);
    if (!m) return fail(m.error());
    mem = std::move(*m);
  }
  SpeedPart speed;
  if (config.speed) {
    auto s = run_speed_part(config, csv);
    if (!s) return fail(s.error());
    speed = std::move(*s);
  }
  if (auto why = write_outputs(config, csv, mem, speed, gnuplot); !why.empty()) return fail(why);
  return 0;
}

}  // namespace iwarp::bench
