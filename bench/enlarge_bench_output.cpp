#include "bench/enlarge_bench_output.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/enlarge_bench_support.hpp"
#include "common/byte_units.hpp"

extern char** environ;

namespace iwarp::bench {

namespace {

// The CSV's columns, in order (docs/enlarge-bench.md); a row leaves the ones it lacks empty.
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
                                              "throughput_vs_write",
                                              "source"};

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) {
    if (ch == '"') q += '"';
    q += ch;
  }
  return q + "\"";
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

std::string gp_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) {
    if (ch == '\'') q += '\'';
    q += ch;
  }
  return q + "'";
}

}  // namespace

std::string write_csv(const std::string& path, const std::vector<CsvRow>& rows) {
  std::ofstream out(path);
  for (std::size_t i = 0; i < kCsvColumns.size(); ++i) out << (i ? "," : "") << kCsvColumns[i];
  out << "\n";
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < kCsvColumns.size(); ++i) {
      auto it = row.find(kCsvColumns[i]);
      out << (i ? "," : "") << (it == row.end() ? "" : csv_field(it->second));
    }
    out << "\n";
  }
  out.close();
  if (!out) return "cannot write " + path;
  return "";
}

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

namespace {

struct Series {
  std::string block, title, style;
};

// A gnuplot script being written: its data blocks, then the series drawn from them per panel.
struct Plot {
  std::string script;
  std::vector<Series> per_conn, total, lat, tput;

  // Adds the data block $name; false (and nothing added) without points.
  bool block(const std::string& name, const std::vector<std::pair<double, double>>& pts) {
    if (pts.empty()) return false;
    script += "$" + name + " << EOD\n";
    for (auto [x, y] : pts) script += fmt::format("{} {}\n", x, y);
    script += "EOD\n";
    return true;
  }
  void draw(const std::vector<Series>& series) {
    script += "plot ";
    for (std::size_t i = 0; i < series.size(); ++i)
      script += fmt::format("{}${} using 1:2 with {} title \"{}\"", i ? ", \\\n     " : "",
                            series[i].block, series[i].style, series[i].title);
    script += "\n";
  }
};

// One scheme's registered bytes (server side) per connection and in total, idle or grown,
// measured or computed.
void add_memory_series(Plot& plot, const std::vector<MemRun>& mem, const std::string& scheme,
                       bool computed, bool grown, const std::string& title,
                       const std::string& style) {
  std::vector<std::pair<double, double>> pc, tot;
  // A computed series starts at the largest measured count it was computed from.
  const MemRun* from = nullptr;
  if (computed &&
      std::ranges::none_of(mem, [&](const MemRun& m) { return m.scheme == scheme && m.computed; }))
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
  if (plot.block(name + "_pc", pc)) plot.per_conn.push_back({name + "_pc", title, style});
  if (plot.block(name + "_tot", tot)) plot.total.push_back({name + "_tot", title, style});
}

void add_memory_data(Plot& plot, const std::vector<MemRun>& mem, std::uint32_t grow) {
  add_memory_series(plot, mem, "enlarge", false, false, "enlarge, idle (measured)",
                    "lp lw 2 pt 7 lc rgb '#1b7837'");
  add_memory_series(plot, mem, "enlarge", false, true,
                    fmt::format("enlarge, after one connection sent {} B (mean)", thousands(grow)),
                    "lp lw 2 pt 9 lc rgb '#5aae61'");
  add_memory_series(plot, mem, "static", false, false, "static 64 x 64 KiB, idle (measured)",
                    "lp lw 2 pt 5 lc rgb '#b2182b'");
  add_memory_series(plot, mem, "static", true, false,
                    "static 64 x 64 KiB, idle (computed: N x measured)",
                    "lp lw 2 dt 2 pt 4 lc rgb '#b2182b'");
}

void add_speed_data(Plot& plot, const std::vector<SpeedCell>& speed,
                    const std::vector<std::string>& speed_schemes) {
  std::map<std::string, std::string> colour = {
      {"tcp", "#000000"}, {"enlarge", "#1b7837"}, {"pieces", "#2166ac"}, {"rendezvous", "#e08214"}};
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
    if (plot.block("lat_" + scheme, l)) plot.lat.push_back({"lat_" + scheme, title, style});
    if (plot.block("tput_" + scheme, t)) plot.tput.push_back({"tput_" + scheme, title, style});
  }
}

void draw_memory_panels(Plot& plot) {
  std::string ytics;
  for (std::uint64_t v = 1024; v <= (1ull << 40); v *= 4)
    ytics += fmt::format("{}\"{}\" {}", ytics.empty() ? "" : ", ",
                         format_bytes(v, ByteFormat::Exact), v);
  std::string& s = plot.script;
  s += "set logscale xy\nset format x '%g'\nset ytics (" + ytics + ")\nset mytics 4\n";
  s += "set key center right\n";
  s += "set xlabel 'connections (idle)'\n";
  s += "set ylabel 'registered bytes per connection (server side)'\n";
  s += "set title 'Registered memory per connection'\n";
  plot.draw(plot.per_conn);
  s += "set ylabel 'registered bytes, all connections (server side)'\n";
  s += "set title 'Registered memory in total'\nset key bottom right\n";
  plot.draw(plot.total);
}

void draw_speed_panels(Plot& plot, const std::vector<std::uint64_t>& sizes) {
  std::string xtics;
  for (auto sz : sizes)
    xtics += fmt::format("{}\"{}\" {}", xtics.empty() ? "" : ", ",
                         format_bytes(sz, ByteFormat::ExactShort), sz);
  std::string& s = plot.script;
  s += "set logscale xy\nset xtics (" + xtics + ")\nset ytics auto\nset format y '%g'\n";
  s += "set mytics 10\nset key top left\n";
  if (!sizes.empty())
    s += fmt::format("set xrange [{}:{}]\n", static_cast<double>(std::ranges::min(sizes)) / 1.6,
                     static_cast<double>(std::ranges::max(sizes)) * 1.6);
  s += "set xlabel 'message size (bytes)'\n";
  s += "set ylabel 'round-trip latency, median (us)'\nset format y '%.0f'\n";
  s += "set title 'Ping-pong latency (lower is better)'\n";
  plot.draw(plot.lat);
  s += "set ylabel 'throughput (MB/s, one way)'\nset format y '%g'\n";
  s += "set title 'Streaming throughput (higher is better)'\n";
  s += "set key top left\n";
  plot.draw(plot.tput);
}

}  // namespace

std::string plot_script(const std::string& png, const std::vector<MemRun>& mem,
                        const std::vector<SpeedCell>& speed,
                        const std::vector<std::string>& speed_schemes,
                        const std::vector<std::uint64_t>& sizes, std::uint32_t grow) {
  Plot plot;
  plot.script += "set terminal pngcairo size 1600,1150 font 'Sans,11'\n";
  plot.script += "set output " + gp_quote(png) + "\n";
  plot.script += "set key top left box opaque\nset grid\nset border lw 1\n";
  add_memory_data(plot, mem, grow);
  add_speed_data(plot, speed, speed_schemes);
  const bool have_mem = !plot.per_conn.empty(), have_speed = !plot.lat.empty();
  const int panels = (have_mem ? 2 : 0) + (have_speed ? 2 : 0);
  if (panels == 0) return "";
  plot.script += fmt::format(
      "set multiplot layout {},2 title \"rnic enlarge-bench on 127.0.0.1\" font ',14'\n",
      panels / 2);
  if (have_mem) draw_memory_panels(plot);
  if (have_speed) draw_speed_panels(plot, sizes);
  plot.script += "unset multiplot\n";
  return plot.script;
}

}  // namespace iwarp::bench
