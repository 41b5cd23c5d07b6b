#include "rnic/segment_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "rnic/hole_clock.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic {

std::string describe_segment_path(const QueuePair& qp, std::string_view source, BeyondHoles arm,
                                  std::string_view prefix, const std::string& hole_times) {
  const auto s = qp.segment_stats();
  const auto q = qp.stats();
  const auto t = qp.hole_timing();
  const auto sum = summarize(t.samples);
  std::uint64_t beyond = 0;
  for (const auto& x : t.samples) beyond += x.octets;
  const std::uint64_t delivered = std::max<std::uint64_t>(q.bytes_received, 1);
  std::string written;
  if (!hole_times.empty()) {
    std::ofstream f(hole_times, std::ios::binary | std::ios::trunc);
    f << "octets_beyond,ns\n";
    for (const auto& x : t.samples) f << x.octets << ',' << x.ns << '\n';
    written = f ? fmt::format("; {} timings written to {}", t.samples.size(), hole_times)
                : fmt::format("; could not write {}: {}", hole_times, std::strerror(errno));
  }
  return fmt::format(
      "{}segment path ({}): {} segments received, {} out of order, {} duplicate octets; {} "
      "holes opened, {} closed; {} FPDUs placed beyond a hole, {} delivered when their hole "
      "closed\n"
      "{}beyond holes: {}; {} segments dropped; reassembly: peak {} octets held, {} octets "
      "copied in ({:.3f} per octet received); hole closed -> octets beyond it delivered: {} "
      "holes ({} octets beyond), p50 {:.1f} us, p99 {:.1f} us, max {:.1f} us{}{}",
      prefix, source, s.segments, s.ooo_segments, s.duplicate_bytes, s.holes_opened, s.holes_closed,
      q.ooo_placed, q.released, prefix, to_string(arm), s.dropped_segments, s.peak_held_bytes,
      s.held_copied_bytes,
      static_cast<double>(s.held_copied_bytes) / static_cast<double>(delivered), sum.count, beyond,
      static_cast<double>(sum.p50_ns) / 1e3, static_cast<double>(sum.p99_ns) / 1e3,
      static_cast<double>(sum.max_ns) / 1e3,
      t.untracked + t.not_kept ? fmt::format(" ({} holes not timed)", t.untracked + t.not_kept)
                               : "",
      written);
}

}  // namespace iwarp::rnic
