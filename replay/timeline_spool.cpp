#include "replay/timeline_spool.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "common/unnamed_file.hpp"

namespace iwarp::replay {

namespace {

constexpr std::size_t kBuffer = 1u << 20;

// An event's record: its fixed fields as this process holds them (the file is read back by the
// process that wrote it; padding zeroed), then its text.
struct Fixed {
  std::uint64_t frame, time_us, offset, end, text_length;
  std::uint32_t qp_num, sends, read_responses, read_requests, writes, payload;
  std::uint8_t side, kind, beyond_hole, has_hdr, has_term;
  ddp::DdpHeader hdr;
  TermCode term;
};
static_assert(std::is_trivially_copyable_v<ddp::DdpHeader> &&
              std::is_trivially_copyable_v<TermCode> && std::is_trivially_copyable_v<Fixed>);

// A text longer than this is no event's (the receive engine's lines are short): a record that
// says so was damaged.
constexpr std::uint64_t kMaxText = 16u << 20;

std::string tmp_error(const char* what, int e) {
  return fmt::format(
      "the timeline is kept in a temporary file in {} until it is printed; {}: {} (set TMPDIR "
      "to a directory with room, or leave out --timeline/--json)",
      temp_dir(), what, std::strerror(e));
}

}  // namespace

TimelineSpool::~TimelineSpool() {
  if (fd_ >= 0) ::close(fd_);
}

void TimelineSpool::begin_run() {
  run_ = Run{octets(), 0};
}

TimelineSpool::Run TimelineSpool::end_run() {
  run_.octets = octets() - run_.offset;
  return run_;
}

void TimelineSpool::append(const TimelineEntry& t) {
  ++run_.count;
  if (error_) return;
  Fixed f;
  std::memset(static_cast<void*>(&f), 0, sizeof f);
  f.frame = t.frame;
  f.time_us = t.time_us;
  f.offset = t.event.offset;
  f.end = t.event.end;
  f.text_length = t.event.text.size();
  f.qp_num = t.event.qp_num;
  f.sends = t.event.sends;
  f.read_responses = t.event.read_responses;
  f.read_requests = t.event.read_requests;
  f.writes = t.event.writes;
  f.payload = t.event.payload;
  f.side = static_cast<std::uint8_t>(t.side);
  f.kind = static_cast<std::uint8_t>(t.event.kind);
  f.beyond_hole = t.event.beyond_hole;
  f.has_hdr = t.event.hdr.has_value();
  f.has_term = t.event.term.has_value();
  if (const auto& h = t.event.hdr) {
    // (Field by field: a copy of the whole header would bring its padding along, unwritten.)
    f.hdr.tagged = h->tagged;
    f.hdr.last = h->last;
    f.hdr.ddp_rsvd = h->ddp_rsvd;
    f.hdr.dv = h->dv;
    f.hdr.rv = h->rv;
    f.hdr.rdmap_rsvd = h->rdmap_rsvd;
    f.hdr.opcode = h->opcode;
    f.hdr.stag = h->stag;
    f.hdr.to = h->to;
    f.hdr.rsvd_ulp = h->rsvd_ulp;
    f.hdr.qn = h->qn;
    f.hdr.msn = h->msn;
    f.hdr.mo = h->mo;
  }
  if (t.event.term) f.term = *t.event.term;
  // The buffer holds at most kBuffer octets (or one record longer than that): written out
  // before a record that would take it further.
  const std::size_t record = sizeof f + t.event.text.size();
  if (!buf_.empty() && buf_.size() + record > kBuffer) write_out();
  if (error_) return;
  if (buf_.capacity() < kBuffer) buf_.reserve(kBuffer);
  const auto* p = reinterpret_cast<const std::uint8_t*>(&f);
  buf_.insert(buf_.end(), p, p + sizeof f);
  buf_.insert(buf_.end(), t.event.text.begin(), t.event.text.end());
}

void TimelineSpool::write_out() {
  if (fd_ < 0) {
    auto fd = open_unnamed_file();
    if (!fd) {
      error_ = fmt::format(
          "the timeline is kept in a temporary file until it is printed; making it in {}: {} "
          "(set TMPDIR to a directory with room, or leave out --timeline/--json)",
          fd.error().dir, std::strerror(fd.error().error));
      buf_ = Bytes();
      return;
    }
    fd_ = *fd;
  }
  std::size_t at = 0;
  while (at < buf_.size()) {
    const ssize_t w =
        ::pwrite(fd_, buf_.data() + at, buf_.size() - at, static_cast<off_t>(written_ + at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      error_ = tmp_error("writing it", w < 0 ? errno : ENOSPC);
      buf_ = Bytes();
      return;
    }
    at += static_cast<std::size_t>(w);
  }
  written_ += at;
  buf_.clear();  // (its capacity stays: the next megabyte goes in the same place)
}

void TimelineSpool::read(std::uint64_t at, std::size_t n, std::uint8_t* out) const {
  if (at + n > octets())
    throw std::runtime_error("the timeline's temporary file: it ends before the events written");
  while (n > 0 && at < written_) {
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(n, written_ - at));
    const ssize_t r = ::pread(fd_, out, want, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw std::runtime_error(fmt::format("the timeline's temporary file: reading it back: {}",
                                           r < 0 ? std::strerror(errno) : "it is shorter"));
    at += static_cast<std::uint64_t>(r);
    out += r;
    n -= static_cast<std::size_t>(r);
  }
  if (n > 0) std::memcpy(out, buf_.data() + (at - written_), n);
}

void TimelineSpool::for_each(const Run& run, const std::function<void(TimelineEntry&&)>& fn) const {
  if (error_) throw std::runtime_error(*error_);
  // Read in chunks of up to kBuffer; a record that crosses a chunk's end starts the next one.
  Bytes chunk;
  std::size_t used = 0;                               // of `chunk`
  std::uint64_t at = run.offset;                      // spool octet of chunk[chunk.size()]
  const std::uint64_t end = run.offset + run.octets;  // (the run's own: no read past it)
  auto need = [&](std::uint64_t n) {
    if (chunk.size() - used >= n) return;
    if (n > end - at + (chunk.size() - used))
      throw std::runtime_error("the timeline's temporary file: it ends before the events written");
    chunk.erase(chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(used));
    used = 0;
    const auto more = static_cast<std::size_t>(
        std::min<std::uint64_t>(std::max<std::uint64_t>(kBuffer, n - chunk.size()), end - at));
    const std::size_t have = chunk.size();
    chunk.resize(have + more);
    read(at, more, chunk.data() + have);
    at += more;
  };
  for (std::uint64_t k = 0; k < run.count; ++k) {
    need(sizeof(Fixed));
    Fixed f;
    std::memcpy(&f, chunk.data() + used, sizeof f);
    used += sizeof f;
    if (f.text_length > kMaxText)
      throw std::runtime_error("the timeline's temporary file: an event's record is damaged");
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
    t.event.text.assign(reinterpret_cast<const char*>(chunk.data() + used),
                        static_cast<std::size_t>(f.text_length));
    used += static_cast<std::size_t>(f.text_length);
    fn(std::move(t));
  }
}

}  // namespace iwarp::replay
