// rnic enlarge-bench's files: every row of both parts in a CSV, and a PNG of both parts drawn
// by gnuplot (when it is installed).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/enlarge_bench_memory.hpp"
#include "bench/enlarge_bench_speed.hpp"

namespace iwarp::bench {

// One CSV row: column name -> value; columns it lacks stay empty.
using CsvRow = std::map<std::string, std::string>;

// Writes the header and `rows` to `path`. Returns "" or what went wrong.
std::string write_csv(const std::string& path, const std::vector<CsvRow>& rows);

// The full path of `prog` in $PATH, if it is there and executable.
std::optional<std::string> find_in_path(const std::string& prog);

// The gnuplot script drawing both parts into `png`; "" when there is nothing to draw.
std::string plot_script(const std::string& png, const std::vector<MemRun>& mem,
                        const std::vector<SpeedCell>& speed,
                        const std::vector<std::string>& speed_schemes,
                        const std::vector<std::uint64_t>& sizes, std::uint32_t grow);

// Runs gnuplot on `script`; returns "" or what went wrong.
std::string run_gnuplot(const std::string& gnuplot, const std::string& script);

}  // namespace iwarp::bench
