#include "replay/timeline_spool.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "common/unnamed_file.hpp"

namespace iwarp::replay {

namespace {

constexpr std::size_t kBuffer = 1u << 20;

// An event's record: its fixed fields as this process holds them (the file is read back by the
// process that wrote it), then its text.
struct Fixed {
  std::uint64_t frame, time_us, offset, end;
  std::uint32_t qp_num, sends, read_responses, read_requests, writes, payload, text_length;
  std::uint8_t side, kind, beyond_hole, has_hdr, has_term;
  ddp::DdpHeader hdr;
  TermCode term;
};
static_assert(std::is_trivially_copyable_v<ddp::DdpHeader> &&
              std::is_trivially_copyable_v<TermCode> && std::is_trivially_copyable_v<Fixed>);

// The longest text an event carries (a line of the receive engine's); longer is cut.
constexpr std::uint32_t kMaxText = 64u << 10;

}  // namespace

std::expected<std::shared_ptr<TimelineSpool>, std::string> TimelineSpool::create() {
  auto fd = open_unnamed_file();
  if (!fd)
    return std::unexpected(fmt::format(
        "the timeline is kept in a temporary file until it is printed; making it in {}: {} (set "
        "TMPDIR to a directory with room)",
        fd.error().dir, std::strerror(fd.error().error)));
  return std::shared_ptr<TimelineSpool>(new TimelineSpool(*fd));
}

TimelineSpool::~TimelineSpool() {
  if (fd_ >= 0) ::close(fd_);
}

void TimelineSpool::append(const TimelineEntry& t) {
  ++count_;
  if (error_) return;
  Fixed f{};
  f.frame = t.frame;
  f.time_us = t.time_us;
  f.offset = t.event.offset;
  f.end = t.event.end;
  f.qp_num = t.event.qp_num;
  f.sends = t.event.sends;
  f.read_responses = t.event.read_responses;
  f.read_requests = t.event.read_requests;
  f.writes = t.event.writes;
  f.payload = t.event.payload;
  f.text_length = static_cast<std::uint32_t>(std::min<std::size_t>(t.event.text.size(), kMaxText));
  f.side = static_cast<std::uint8_t>(t.side);
  f.kind = static_cast<std::uint8_t>(t.event.kind);
  f.beyond_hole = t.event.beyond_hole;
  f.has_hdr = t.event.hdr.has_value();
  f.has_term = t.event.term.has_value();
  if (t.event.hdr) f.hdr = *t.event.hdr;
  if (t.event.term) f.term = *t.event.term;
  const auto* p = reinterpret_cast<const std::uint8_t*>(&f);
  buf_.insert(buf_.end(), p, p + sizeof f);
  buf_.insert(buf_.end(), t.event.text.begin(), t.event.text.begin() + f.text_length);
  if (buf_.size() >= kBuffer) flush();
}

void TimelineSpool::flush() {
  std::size_t at = 0;
  while (!error_ && at < buf_.size()) {
    const ssize_t w =
        ::pwrite(fd_, buf_.data() + at, buf_.size() - at, static_cast<off_t>(written_ + at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      error_ = fmt::format(
          "the timeline is kept in a temporary file in {} until it is printed; writing it: {} "
          "(set TMPDIR to a directory with room, or leave out --timeline/--json)",
          temp_dir(), std::strerror(w < 0 ? errno : ENOSPC));
    else
      at += static_cast<std::size_t>(w);
  }
  written_ += at;
  buf_.clear();
}

void TimelineSpool::for_each(const std::function<void(TimelineEntry&&)>& fn) const {
  Bytes chunk;
  std::size_t have = 0;  // octets of `chunk` not yet used, from `used`
  std::size_t used = 0;
  std::uint64_t at = 0;  // file offset of the next read
  std::uint64_t seen = 0;
  auto fail = [&](const std::string& why) {
    throw std::runtime_error(fmt::format("the timeline's temporary file: {}", why));
  };
  // At least `n` octets from `used` on, reading more of the file as needed.
  auto need = [&](std::size_t n) {
    if (have >= n) return;
    chunk.erase(chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(used));
    used = 0;
    while (have < n) {
      if (at >= written_) fail("it ends before the events written");
      const std::size_t want = static_cast<std::size_t>(
          std::min<std::uint64_t>(std::max(kBuffer, n - have), written_ - at));
      chunk.resize(have + want);
      const ssize_t r = ::pread(fd_, chunk.data() + have, want, static_cast<off_t>(at));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) fail(r < 0 ? std::strerror(errno) : "it is shorter than what was written");
      have += static_cast<std::size_t>(r);
      at += static_cast<std::uint64_t>(r);
      chunk.resize(have);
    }
  };
  const std::uint64_t kept = error_ ? 0 : count_;
  for (; seen < kept; ++seen) {
    need(sizeof(Fixed));
    Fixed f;
    std::memcpy(&f, chunk.data() + used, sizeof f);
    used += sizeof f;
    have -= sizeof f;
    if (f.text_length > kMaxText) fail("an event's record is damaged");
    need(f.text_length);
    TimelineEntry t;
    t.frame = f.frame;
    t.time_us = f.time_us;
    t.side = static_cast<Side>(f.side);
    t.event.kind = static_cast<rnic::RxEvent::Kind>(f.kind);
    t.event.qp_num = f.qp_num;
    t.event.offset = f.offset;
    t.event.end = f.end;
    t.event.beyond_hole = f.beyond_hole != 0;
    t.event.sends = f.sends;
    t.event.read_responses = f.read_responses;
    t.event.read_requests = f.read_requests;
    t.event.writes = f.writes;
    t.event.payload = f.payload;
    if (f.has_hdr) t.event.hdr = f.hdr;
    if (f.has_term) t.event.term = f.term;
    t.event.text.assign(reinterpret_cast<const char*>(chunk.data() + used), f.text_length);
    used += f.text_length;
    have -= f.text_length;
    fn(std::move(t));
  }
}

}  // namespace iwarp::replay
