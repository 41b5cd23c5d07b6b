// What a benchmark process measures about itself (resident memory, open descriptors), raising
// its open-files limit, and reading a child process's answers from a pipe line by line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace iwarp::bench {

// VmRSS of this process in bytes (/proc/self/status); 0 when unknown.
std::uint64_t vm_rss();

// Descriptors this process has open (/proc/self/fd).
std::size_t open_fds();

// Raises RLIMIT_NOFILE to `need`. Returns the limit there is afterwards and, when it is less
// than `need`, why.
std::pair<std::uint64_t, std::string> raise_nofile(std::uint64_t need);

// Lines from a pipe without blocking.
struct LineReader {
  explicit LineReader(int f) : fd(f) {}
  int fd;
  std::string buf;
  bool eof = false;
  // The next whole line, or nothing when none has arrived yet (or the pipe ended: `eof`).
  std::optional<std::string> try_line();
};

// The words of a line, split at whitespace.
std::vector<std::string> words(const std::string& line);

}  // namespace iwarp::bench
