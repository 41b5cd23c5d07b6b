#include "ddp/terminate.hpp"

namespace iwarp::rdmap {

namespace {
// RFC 5041 §7.2 / RFC 5040 §7.4: a segment with a bad DDP or RDMAP version, or an opcode the
// receiver does not know, has headers that cannot be interpreted: none are echoed.
bool headers_untrusted(Errc code) {
  return code == Errc::DdpTaggedVersion || code == Errc::DdpUntaggedVersion ||
         code == Errc::RdmapVersion || code == Errc::RdmapUnexpectedOpcode;
}
}  // namespace

Terminate make_terminate(Errc code, ByteSpan ddp_hdr, ByteSpan rdmap_hdr,
                         std::uint16_t segment_length) {
  const TermCode tc = term_code(code);
  Terminate t;
  t.layer = static_cast<std::uint8_t>(tc.layer);
  t.etype = tc.etype;
  t.ecode = tc.ecode;
  const bool catastrophic = tc.etype == 0;  // EType 0: local catastrophic, in every layer
  if (tc.layer == TermLayer::Llp || catastrophic || headers_untrusted(code) || ddp_hdr.empty())
    return t;
  // RFC 5040 §4.8: D and M, the DDP Segment Length and the terminated DDP header.
  t.m = t.d = true;
  t.ddp_segment_length = segment_length;
  t.ddp_header.assign(ddp_hdr.begin(), ddp_hdr.end());
  // RFC 5040 §4.8: R, the RDMAP header of a Read Request that broke remote protection.
  if (tc.layer == TermLayer::Rdmap && tc.etype == 1 &&
      rdmap_hdr.size() == kTerminatedRdmapHeaderSize) {
    t.r = true;
    t.rdmap_header.assign(rdmap_hdr.begin(), rdmap_hdr.end());
  }
  return t;
}

}  // namespace iwarp::rdmap
