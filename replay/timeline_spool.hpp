// Timeline events past those a replay keeps in memory, kept in a temporary file instead
// (common/unnamed_file.hpp): `rnic replay --timeline` and `--json` print every event of every
// connection, and held in memory until then they would grow with the capture's length (about
// 200 octets an event, an event or two per segment). One spool serves a whole replay: the
// connections replay one after the other, each adding its events as one run (Run), written by
// the engines' observer, under the connection's lock, through a buffer of 1 MiB. The file is
// made only once the buffer is full (a replay that spools less opens none), and read back in
// order once the replays are over.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/bytes.hpp"
#include "replay/replayer.hpp"

namespace iwarp::replay {

class TimelineSpool {
 public:
  TimelineSpool() = default;
  ~TimelineSpool();
  TimelineSpool(const TimelineSpool&) = delete;
  TimelineSpool& operator=(const TimelineSpool&) = delete;

  // A connection's events: `count` records in `octets` octets from octet `offset` of the spool.
  struct Run {
    std::uint64_t offset = 0, count = 0, octets = 0;
  };
  // Starts a connection's run; append() adds to it; end_run() returns it.
  void begin_run();
  // Adds an event. A file that cannot be made or written (the disk full) is kept as the
  // spool's error, and the events after it are counted but not kept: the engine thread that
  // reports them must go on.
  void append(const TimelineEntry& t);
  Run end_run();
  const std::optional<std::string>& error() const { return error_; }
  std::uint64_t octets() const { return written_ + buf_.size(); }  // kept so far
  bool has_file() const { return fd_ >= 0; }

  // Calls `fn` with each event of `run`, in the order appended. Throws std::runtime_error, in
  // one line, when the file cannot be read back or is not what was written.
  void for_each(const Run& run, const std::function<void(TimelineEntry&&)>& fn) const;

 private:
  void write_out();  // the buffer to the file (made first if need be)
  // Copies octets [at, at + n) of the spool (the file's, then the buffer's) to `out`.
  void read(std::uint64_t at, std::size_t n, std::uint8_t* out) const;
  int fd_ = -1;
  Bytes buf_;                  // octets from written_ on
  std::uint64_t written_ = 0;  // octets in the file
  Run run_;
  std::optional<std::string> error_;
};

}  // namespace iwarp::replay
