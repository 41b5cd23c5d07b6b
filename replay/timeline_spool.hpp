// Timeline events past those a replay keeps in memory, kept in an unnamed file in $TMPDIR
// instead (common/unnamed_file.hpp): `rnic replay --timeline` and `--json` print every event of
// every connection, and held in memory until then they would grow with the capture's length
// (about 200 octets an event, an event or two per segment). Written by the engines' observer,
// under the replay's lock, through a 1 MiB buffer; read back in order once the replay is over.
#pragma once

#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/bytes.hpp"
#include "replay/replayer.hpp"

namespace iwarp::replay {

class TimelineSpool {
 public:
  // One line saying why when the file cannot be made.
  static std::expected<std::shared_ptr<TimelineSpool>, std::string> create();
  ~TimelineSpool();
  TimelineSpool(const TimelineSpool&) = delete;
  TimelineSpool& operator=(const TimelineSpool&) = delete;

  // Adds an event. A write that fails (the disk full) is kept as the spool's error, and the
  // events after it are counted but not kept: the engine thread that reports them must go on.
  void append(const TimelineEntry& t);
  // Writes out what the buffer holds. Then error() says whether every event was kept.
  void flush();
  const std::optional<std::string>& error() const { return error_; }
  std::uint64_t size() const { return count_; }  // events appended
  std::uint64_t octets() const { return written_ + buf_.size(); }

  // Calls `fn` with each event, in the order appended (after flush()). Throws
  // std::runtime_error, in one line, when the file cannot be read back or is not what was
  // written.
  void for_each(const std::function<void(TimelineEntry&&)>& fn) const;

 private:
  explicit TimelineSpool(int fd) : fd_(fd) {}
  int fd_ = -1;
  Bytes buf_;
  std::uint64_t written_ = 0, count_ = 0;
  std::optional<std::string> error_;
};

}  // namespace iwarp::replay
