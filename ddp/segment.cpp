#include "ddp/segment.hpp"

#include <fmt/format.h>

namespace iwarp::ddp {

using rdmap::Opcode;

Result<Segment> parse_segment(ByteSpan ulpdu) {
  auto h = DdpHeader::decode(ulpdu);
  if (!h) return std::unexpected(h.error());
  Segment s;
  s.hdr = *h;
  const auto* info = rdmap::opcode_info(h->opcode);
  // RFC 5040 §4.2 / §7.4: an opcode RDMAP does not define is an unexpected opcode.
  if (!info)
    return fail(Errc::RdmapUnexpectedOpcode, "RFC 5040 §4.2 / RFC 7306 §4: opcode must be defined",
                fmt::format("opcode 0x{:x}", h->opcode));
  if (info->tagged != h->tagged)
    return fail(Errc::RdmapUnexpectedOpcode,
                "RFC 5040 §4.2: each opcode has one DDP buffer model (tagged or untagged)",
                fmt::format("{} with T={}", info->name, int(h->tagged)));
  // RFC 5041 §7.2 / RFC 5040 §5.1: the queue number must be the one RDMAP uses for the opcode.
  if (!h->tagged && h->qn.value() != info->qn)
    return fail(Errc::DdpUntaggedInvalidQn, "RFC 5040 §5.1: each untagged message has its queue",
                fmt::format("{} on QN {}, expected QN {}", info->name, h->qn.value(), info->qn));
  ByteSpan rest = ulpdu.subspan(h->size());
  if (info->single_segment) {
    if (!h->last)
      return fail(Errc::RdmapCatastrophicStream,
                  "RFC 5040 §4.4 / §4.8 / RFC 7306 §4: this message is a single DDP segment (L=1)",
                  fmt::format("{} with L=0", info->name));
    if (h->mo.value() != 0)
      return fail(Errc::DdpUntaggedInvalidMo,
                  "RFC 5040 §4.4 / §4.8 / RFC 7306 §4: a single-segment message has MO 0",
                  fmt::format("{} with MO {}", info->name, h->mo.value()));
  }
  if (rest.size() < info->body_size || (!info->payload && rest.size() != info->body_size))
    return fail(Errc::RdmapCatastrophicStream,
                "RFC 5040 §4.4 / RFC 7306 §4: the RDMAP header has a fixed size for this opcode",
                fmt::format("{} needs {} octets after the DDP header, has {}", info->name,
                            info->body_size, rest.size()));
  ByteSpan body = rest.first(info->body_size);
  switch (info->opcode) {
    case Opcode::ReadRequest:
      s.body = rdmap::ReadRequest::decode(body);
      break;
    case Opcode::AtomicRequest: {
      auto a = rdmap::AtomicRequest::decode(body);
      if (a.op > static_cast<std::uint8_t>(rdmap::AtomicOp::CompareSwap))
        return fail(Errc::RdmapUnexpectedOpcode, "RFC 7306 §4.2.1: AtomicOp must be 0, 1 or 2",
                    fmt::format("AtomicOp {}", a.op));
      s.body = a;
      break;
    }
    case Opcode::AtomicResponse:
      s.body = rdmap::AtomicResponse::decode(body);
      break;
    case Opcode::ImmediateData:
    case Opcode::ImmediateDataSe:
      s.body = load_be64(body.data());
      break;
    case Opcode::Terminate: {
      auto t = rdmap::Terminate::decode(rest);
      if (!t) return std::unexpected(t.error());
      s.body = std::move(*t);
      return s;
    }
    default:
      break;
  }
  s.payload = rest.subspan(info->body_size);
  // RFC 5041 §7.2 tagged: the segment must not run past the end of the 64-bit TO space.
  if (h->tagged && !s.payload.empty() && h->to.value() > ~std::uint64_t{0} - (s.payload.size() - 1))
    return fail(Errc::DdpTaggedToWrap, "RFC 5041 §5.2: TO + segment length must not wrap 2^64",
                fmt::format("TO 0x{:x} + {} octets", h->to.value(), s.payload.size()));
  return s;
}

void encode_segment(const Segment& s, Bytes& out) {
  s.hdr.encode(out);
  std::visit(
      [&](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, std::uint64_t>) {
          ByteWriter(out).be64(b);
        } else if constexpr (!std::is_same_v<T, std::monostate>) {
          b.encode(out);
        }
      },
      s.body);
  out.insert(out.end(), s.payload.begin(), s.payload.end());
}

std::string describe(const Segment& s) {
  const auto& h = s.hdr;
  std::string d = std::string(rdmap::opcode_name(h.opcode));
  if (h.tagged)
    d += fmt::format(" STag 0x{:08x} TO 0x{:x}", h.stag.value(), h.to.value());
  else
    d += fmt::format(" QN {} MSN {} MO {}", h.qn.value(), h.msn.value(), h.mo.value());
  if (h.last) d += " L";
  // An opcode outside RFC 5040's table (e.g. 0xF, how the engine marks a peer-to-peer RTR
  // Send) is named Unknown and has no fields to show.
  const auto* info = rdmap::opcode_info(h.opcode);
  if (info && info->invalidate) d += fmt::format(" inv-STag 0x{:08x}", h.rsvd_ulp);
  std::visit(
      [&](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, rdmap::ReadRequest>) {
          d += fmt::format(" sink 0x{:08x}@0x{:x} size {} src 0x{:08x}@0x{:x}", b.sink_stag.value(),
                           b.sink_to.value(), b.size, b.src_stag.value(), b.src_to.value());
        } else if constexpr (std::is_same_v<T, rdmap::Terminate>) {
          d += fmt::format(" [{}] layer {} etype {} code 0x{:02x}{}{}{}{}",
                           describe_term(b.layer, b.etype, b.ecode), b.layer, b.etype, b.ecode,
                           b.m ? " M" : "", b.d ? " D" : "", b.r ? " R" : "",
                           b.siw_bitfield_quirk ? " (siw bit-field layout)" : "");
        } else if constexpr (std::is_same_v<T, rdmap::AtomicRequest>) {
          d += fmt::format(" {} id {} STag 0x{:08x} TO 0x{:x} data 0x{:x} cmp 0x{:x}",
                           rdmap::atomic_op_name(b.op), b.request_id, b.stag.value(), b.to.value(),
                           b.add_swap_data, b.compare_data);
        } else if constexpr (std::is_same_v<T, rdmap::AtomicResponse>) {
          d += fmt::format(" id {} value 0x{:x}", b.request_id, b.original_value);
        } else if constexpr (std::is_same_v<T, std::uint64_t>) {
          d += fmt::format(" imm 0x{:016x}", b);
        }
      },
      s.body);
  d += fmt::format(" len {}", s.payload.size());
  return d;
}

}  // namespace iwarp::ddp
