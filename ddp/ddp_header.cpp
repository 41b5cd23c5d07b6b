#include "ddp/ddp_header.hpp"

#include <fmt/format.h>

namespace iwarp::ddp {

// One resize for the whole header, then stores: it is framed for every FPDU sent, and four
// (tagged) or six (untagged) appends of their own cost an 8-octet Send about 3 % of its
// instructions.
void DdpHeader::encode(Bytes& out) const {
  const std::size_t at = out.size();
  out.resize(at + size());
  std::uint8_t* p = out.data() + at;
  p[0] = static_cast<std::uint8_t>((tagged ? kFlagTagged : 0) | (last ? kFlagLast : 0) |
                                   ((ddp_rsvd << 2) & kDdpRsvdMask) | (dv & kDvMask));
  p[1] = static_cast<std::uint8_t>(((rv << 6) & kRvMask) | ((rdmap_rsvd << 4) & kRdmapRsvdMask) |
                                   (opcode & kOpcodeMask));
  if (tagged) {
    store_be32(p + 2, stag.value());
    store_be64(p + 6, to.value());
  } else {
    store_be32(p + 2, rsvd_ulp);
    store_be32(p + 6, qn.value());
    store_be32(p + 10, msn.value());
    store_be32(p + 14, mo.value());
  }
}

Result<DdpHeader> DdpHeader::decode(ByteSpan ulpdu) {
  if (ulpdu.size() < 2)
    return fail(Errc::MpaMarkerError, "RFC 5041 §5.1: a DDP segment starts with 2 control octets",
                fmt::format("ULPDU of {} octets", ulpdu.size()));
  DdpHeader h;
  std::uint8_t c0 = ulpdu[0], c1 = ulpdu[1];
  h.tagged = c0 & kFlagTagged;
  h.last = c0 & kFlagLast;
  h.ddp_rsvd = (c0 & kDdpRsvdMask) >> 2;
  h.dv = c0 & kDvMask;
  h.rv = (c1 & kRvMask) >> 6;
  h.rdmap_rsvd = (c1 & kRdmapRsvdMask) >> 4;
  h.opcode = c1 & kOpcodeMask;
  if (ulpdu.size() < h.size())
    return fail(Errc::MpaMarkerError,
                h.tagged ? "RFC 5041 §5.2: a tagged DDP segment has a 14-octet header"
                         : "RFC 5041 §5.3: an untagged DDP segment has an 18-octet header",
                fmt::format("ULPDU of {} octets", ulpdu.size()));
  // RFC 5041 §7.2: an unsupported DDP version is reported per buffer model.
  if (h.dv != kDdpVersion)
    return fail(h.tagged ? Errc::DdpTaggedVersion : Errc::DdpUntaggedVersion,
                "RFC 5041 §5.1: DDP Version (DV) must be 1", fmt::format("DV {}", h.dv));
  if (h.rv != kRdmapVersion)
    return fail(Errc::RdmapVersion, "RFC 5040 §4.1: RDMAP Version (RV) must be 1",
                fmt::format("RV {}", h.rv));
  ByteReader r(ulpdu.subspan(2));
  if (h.tagged) {
    h.stag = STag{r.be32()};
    h.to = TaggedOffset{r.be64()};
  } else {
    h.rsvd_ulp = r.be32();
    h.qn = QueueNumber{r.be32()};
    h.msn = Msn{r.be32()};
    h.mo = MessageOffset{r.be32()};
  }
  return h;
}

DdpHeader tagged_header(rdmap::Opcode op, STag stag, TaggedOffset to, bool last) {
  DdpHeader h;
  h.tagged = true;
  h.last = last;
  h.opcode = static_cast<std::uint8_t>(op);
  h.stag = stag;
  h.to = to;
  return h;
}

DdpHeader untagged_header(rdmap::Opcode op, QueueNumber qn, Msn msn, MessageOffset mo, bool last,
                          std::uint32_t rsvd_ulp) {
  DdpHeader h;
  h.tagged = false;
  h.last = last;
  h.opcode = static_cast<std::uint8_t>(op);
  h.qn = qn;
  h.msn = msn;
  h.mo = mo;
  h.rsvd_ulp = rsvd_ulp;
  return h;
}

}  // namespace iwarp::ddp
