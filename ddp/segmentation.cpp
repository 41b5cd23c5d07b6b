#include "ddp/segmentation.hpp"

#include <fmt/format.h>

namespace iwarp::ddp {

Result<std::vector<Segment>> segment_message(const Segment& whole, std::size_t mulpdu) {
  const std::size_t overhead = whole.hdr.size() + whole.info().body_size;
  if (overhead > mulpdu ||
      (whole.info().single_segment && overhead + whole.payload.size() > mulpdu))
    return fail(Errc::DdpLocalCatastrophic, "RFC 5041 §5: every DDP segment must fit the MULPDU",
                fmt::format("{} header octets, {} payload octets, MULPDU {}", overhead,
                            whole.payload.size(), mulpdu));
  const std::size_t room = mulpdu - overhead;
  std::vector<Segment> out;
  out.reserve(whole.payload.empty() ? 1 : (whole.payload.size() + room - 1) / room);
  std::size_t off = 0;
  do {
    std::size_t n = std::min(room, whole.payload.size() - off);
    Segment s = whole;
    s.payload = whole.payload.subspan(off, n);
    s.hdr.last = off + n == whole.payload.size() ? whole.hdr.last : false;
    if (s.hdr.tagged)
      s.hdr.to = TaggedOffset{whole.hdr.to.value() + off};
    else
      s.hdr.mo = MessageOffset{whole.hdr.mo.value() + static_cast<std::uint32_t>(off)};
    out.push_back(std::move(s));
    off += n;
  } while (off < whole.payload.size());
  return out;
}

Result<void> SegmentChecker::check(const DdpHeader& h, std::size_t len) {
  if (h.tagged) {
    auto& t = tagged_;
    if (t.in_message) {
      if (h.opcode != t.opcode)
        return fail(Errc::RdmapUnexpectedOpcode,
                    "RFC 5040 §5: segments of one message carry one opcode",
                    fmt::format("{} inside an unfinished {}", rdmap::opcode_name(h.opcode),
                                rdmap::opcode_name(t.opcode)));
      if (h.stag != t.stag)
        return fail(Errc::DdpTaggedInvalidStag,
                    "RFC 5041 §5.2: all segments of a tagged message carry the same STag",
                    fmt::format("STag 0x{:08x}, message began with 0x{:08x}", h.stag.value(),
                                t.stag.value()));
      if (h.to.value() != t.next_to)
        return fail(Errc::DdpTaggedBaseBounds,
                    "RFC 5041 §5.2: each segment's TO follows the previous segment's data",
                    fmt::format("TO 0x{:x}, expected 0x{:x}", h.to.value(), t.next_to));
    }
    t.in_message = !h.last;
    t.opcode = h.opcode;
    t.stag = h.stag;
    t.next_to = h.to.value() + len;
    return {};
  }
  if (h.qn.value() >= queues_.size())
    return fail(Errc::DdpUntaggedInvalidQn, "RFC 5040 §5.1: RDMAP uses queues 0 to 3",
                fmt::format("QN {}", h.qn.value()));
  auto& q = queues_[h.qn.value()];
  if (h.msn != q.msn)
    return fail(
        Errc::DdpUntaggedMsnRange,
        "RFC 5041 §5.3: messages on a queue carry consecutive MSNs starting at 1",
        fmt::format("QN {} MSN {}, expected {}", h.qn.value(), h.msn.value(), q.msn.value()));
  if (q.in_message && h.opcode != q.opcode)
    return fail(Errc::RdmapUnexpectedOpcode,
                "RFC 5040 §5: segments of one message carry one opcode",
                fmt::format("{} inside an unfinished {}", rdmap::opcode_name(h.opcode),
                            rdmap::opcode_name(q.opcode)));
  const std::uint32_t expected_mo = q.in_message ? q.mo : 0;
  if (h.mo.value() != expected_mo)
    return fail(Errc::DdpUntaggedInvalidMo,
                "RFC 5041 §5.3: MO is the offset of the segment's data in its message",
                fmt::format("QN {} MSN {} MO {}, expected {}", h.qn.value(), h.msn.value(),
                            h.mo.value(), expected_mo));
  // RFC 5041 §5.3: MO is 32 bits, so a message ends below 2^32 (and a completion's byte
  // count is 32 bits): a segment that would carry it past that wraps nothing, it fails.
  if (std::uint64_t{expected_mo} + len > 0xFFFFFFFFull)
    return fail(Errc::DdpUntaggedTooLong, "RFC 5041 §5.3: an untagged message ends below MO 2^32",
                fmt::format("QN {} MSN {} MO {} + {} octets passes 4 GiB", h.qn.value(),
                            h.msn.value(), expected_mo, len));
  q.opcode = h.opcode;
  q.mo = expected_mo + static_cast<std::uint32_t>(len);
  q.in_message = !h.last;
  if (h.last) q.msn = q.msn.next();
  return {};
}

}  // namespace iwarp::ddp
