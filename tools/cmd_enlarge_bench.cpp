// rnic enlarge-bench: the command line of the buffer-enlargement benchmark (bench/
// enlarge_bench.hpp, docs/enlarge-bench.md). Options are checked here, with CLI11's
// validators; the benchmark gets them as one EnlargeBenchConfig.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <iostream>
#include <memory>

#include "bench/enlarge_bench.hpp"
#include "tools/app_options.hpp"
#include "tools/commands.hpp"
#include "tools/enlarge_options.hpp"
#include "tools/value_checks.hpp"

namespace iwarp::tools {

namespace {

struct BenchCli {
  std::string part = "both";
  std::vector<std::uint64_t> connections{1, 100, 1000, 10000};
  std::vector<std::uint64_t> sizes{64,       256,      1 << 10,   4 << 10,
                                   16 << 10, 64 << 10, 256 << 10, 1 << 20};
  std::vector<std::string> schemes{"enlarge", "pieces", "rendezvous"};
  bool quick = false;
  std::string csv = "enlarge-bench.csv";
  std::string png = "enlarge-bench.png";
  std::uint64_t static_limit = 2ull << 30;
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

std::string lower_trimmed(std::string s) {
  s = trimmed_text(s);
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Distinct values, first occurrence kept.
template <typename T>
std::vector<T> distinct(const std::vector<T>& v) {
  std::vector<T> out;
  for (const auto& x : v)
    if (std::ranges::find(out, x) == out.end()) out.push_back(x);
  return out;
}

int run(BenchCli& o) {
  if (o.quick) {  // explicit options win
    if (o.connections_opt->count() == 0) o.connections = {1, 100};
    if (o.sizes_opt->count() == 0) o.sizes = {64, 4 << 10, 64 << 10, 1 << 20};
    if (o.latency_opt->count() == 0) o.latency_seconds = 0.05;
    if (o.stream_opt->count() == 0) o.stream_seconds = 0.1;
  }
  auto base = enlarge_options(o.enlarge, o.app);
  if (!base) {
    std::cerr << "rnic enlarge-bench: " << base.error() << "\n";
    return 2;
  }
  bench::EnlargeBenchConfig c;
  c.memory = o.part != "speed";
  c.speed = o.part != "memory";
  c.connections = distinct(o.connections);
  std::ranges::sort(c.connections);
  c.sizes = distinct(o.sizes);
  for (const auto& s : distinct(o.schemes)) c.schemes.push_back(enlarge_mode(s));
  c.quick = o.quick;
  c.csv = o.csv;
  c.png = o.png;
  c.static_limit = o.static_limit;
  c.grow = o.grow;
  c.batch = o.batch;
  c.latency_seconds = o.latency_seconds;
  c.stream_seconds = o.stream_seconds;
  c.base = *base;
  c.timeout_ms = o.app.timeout_ms;
  return bench::run_enlarge_bench(c);
}

// A comma-separated list: each item checked (and converted) by `check`; an empty value is
// "the list is empty". CLI11 splits the list and drops empty items ("1,,2" is 1 and 2).
CLI::Option* add_list(CLI::App& sub, const std::string& flag, auto& values, const std::string& help,
                      const std::string& default_text, CLI::Validator check) {
  auto item = CLI::Validator(
      [check = std::move(check)](std::string& value) -> std::string {
        return value.empty() ? "the list is empty" : check(value);
      },
      "");
  return sub.add_option(flag, values, help)
      ->delimiter(',')
      ->allow_extra_args(false)
      ->transform(item)
      ->type_name("TEXT")
      ->default_str(default_text);
}

}  // namespace

Runner add_enlarge_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchCli>();
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
      add_list(*sub, "--connections", o->connections,
               "Idle connection counts for the memory part (comma-separated, 1-100000)",
               "1,100,1000,10000", byte_size_in(1, 100000));
  o->sizes_opt = add_list(*sub, "--sizes", o->sizes,
                          "Message sizes for the speed part (comma-separated; K, M units: "
                          "1 B - 64 MiB)",
                          "64,256,1K,4K,16K,64K,256K,1M", byte_size_in(1, 64ull << 20));
  const std::string modes = "enlarge, pieces or rendezvous";
  add_list(*sub, "--schemes", o->schemes,
           "Schemes for the speed part (raw TCP always runs as the baseline)",
           "enlarge,pieces,rendezvous",
           with_message(trimmed() & CLI::IsMember(enlarge_mode_names(), CLI::ignore_case),
                        [modes](const std::string& s) {
                          return fmt::format("'{}' is not {}", lower_trimmed(s), modes);
                        }));
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
      ->transform(byte_size(
          [](const std::string& s) { return fmt::format("'{}' is not a size (e.g. 2G)", s); }))
      ->type_name("TEXT")
      ->default_str("2G");
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
