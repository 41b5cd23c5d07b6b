#include "mpa/mpa_frame.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace iwarp::mpa {

std::string rtr_mask_name(RtrMask m) {
  std::string s;
  for (auto t : {RtrType::Send, RtrType::Write, RtrType::Read})
    if (m & static_cast<RtrMask>(t)) s += (s.empty() ? "" : "|") + std::string(rtr_name(t));
  return s.empty() ? "none" : s;
}

std::string_view rtr_name(RtrType t) {
  switch (t) {
    case RtrType::None:
      return "none";
    case RtrType::Send:
      return "send";
    case RtrType::Write:
      return "write";
    case RtrType::Read:
      return "read";
  }
  return "?";
}

std::size_t MpaFrame::wire_size() const {
  return kFrameHeaderSize + (params ? kEnhancedPrefixSize : 0) + private_data.size();
}

Bytes MpaFrame::encode() const {
  Bytes out;
  out.reserve(wire_size());
  ByteWriter w(out);
  auto key = kind == FrameKind::Request ? kRequestKey : kReplyKey;
  w.bytes(ByteSpan(reinterpret_cast<const std::uint8_t*>(key.data()), key.size()));
  std::uint8_t flags = (markers ? kFlagMarkers : 0) | (crc ? kFlagCrc : 0) |
                       (reject ? kFlagReject : 0) | (enhanced ? kFlagEnhanced : 0) |
                       (reserved & kFlagReservedMask);
  w.u8(flags);
  w.u8(revision);
  std::size_t pd_len = (params ? kEnhancedPrefixSize : 0) + private_data.size();
  w.be16(static_cast<std::uint16_t>(pd_len));
  if (params) {
    // IRD/ORD are 14-bit fields: larger values are capped, never wrapped.
    std::uint16_t a = (params->peer_to_peer ? 0x8000 : 0) |
                      ((params->rtr & static_cast<RtrMask>(RtrType::Send)) ? 0x4000 : 0) |
                      std::min(params->ird, kMaxIrdOrd);
    std::uint16_t b = ((params->rtr & static_cast<RtrMask>(RtrType::Write)) ? 0x8000 : 0) |
                      ((params->rtr & static_cast<RtrMask>(RtrType::Read)) ? 0x4000 : 0) |
                      std::min(params->ord, kMaxIrdOrd);
    w.be16(a);
    w.be16(b);
  }
  w.bytes(private_data);
  return out;
}

std::optional<std::size_t> frame_size_from_header(ByteSpan header) {
  if (header.size() < kFrameHeaderSize) return std::nullopt;
  return kFrameHeaderSize + load_be16(header.data() + 18);
}

Result<MpaFrame> decode_frame(ByteSpan frame, FrameKind expected) {
  static constexpr const char* kRuleKey = "RFC 5044 §7.1: frame must start with the MPA key";
  if (frame.size() < kFrameHeaderSize)
    return fail(Errc::MpaBadReqRep, "RFC 5044 §7.1: an MPA frame has a 20-octet header",
                fmt::format("only {} octets", frame.size()));
  auto key = expected == FrameKind::Request ? kRequestKey : kReplyKey;
  if (!std::equal(key.begin(), key.end(), frame.begin())) {
    auto other = expected == FrameKind::Request ? kReplyKey : kRequestKey;
    bool swapped = std::equal(other.begin(), other.end(), frame.begin());
    return fail(Errc::MpaBadReqRep, kRuleKey,
                swapped ? fmt::format("expected \"{}\", got \"{}\"", key, other)
                        : fmt::format("expected \"{}\", got {}", key, hex(frame.first(kKeySize))));
  }
  ByteReader r(frame.subspan(kKeySize));
  MpaFrame f;
  f.kind = expected;
  std::uint8_t flags = r.u8();
  f.markers = flags & kFlagMarkers;
  f.crc = flags & kFlagCrc;
  f.reject = flags & kFlagReject;
  f.enhanced = flags & kFlagEnhanced;
  f.reserved = flags & kFlagReservedMask;
  f.revision = r.u8();
  std::uint16_t pd_len = r.be16();
  if (f.revision != 1 && f.revision != 2)
    return fail(Errc::MpaBadReqRep, "RFC 5044 §7.1 / RFC 6581 §4: Rev must be 1 or 2",
                fmt::format("Rev {}", f.revision));
  if (pd_len > kMaxPrivateData)
    return fail(Errc::MpaBadReqRep, "RFC 5044 §7.1: PD_Length must not exceed 512",
                fmt::format("PD_Length {}", pd_len));
  if (frame.size() != kFrameHeaderSize + pd_len)
    return fail(Errc::MpaBadReqRep, "RFC 5044 §7.1: PD_Length gives the private data length",
                fmt::format("PD_Length {} but {} octets follow the header", pd_len,
                            frame.size() - kFrameHeaderSize));
  if (f.reject && expected == FrameKind::Request)
    return fail(Errc::MpaBadReqRep, "RFC 5044 §7.1: R is only meaningful in an MPA Reply",
                "R=1 in an MPA Request");
  if (f.enhanced && f.revision < 2)
    return fail(Errc::MpaBadReqRep, "RFC 6581 §5: the enhanced flag requires Rev 2",
                fmt::format("enhanced flag with Rev {}", f.revision));
  ByteSpan pd = r.bytes(pd_len);
  if (f.enhanced && f.revision == 2) {
    if (pd.size() < kEnhancedPrefixSize) {
      // A rejecting Reply may carry no prefix at all.
      if (!(f.reject && pd.empty()))
        return fail(Errc::MpaBadReqRep,
                    "RFC 6581 §5: enhanced private data starts with 4 octets of IRD/ORD",
                    fmt::format("PD_Length {}", pd_len));
    } else {
      std::uint16_t a = load_be16(pd.data());
      std::uint16_t b = load_be16(pd.data() + 2);
      EnhancedParams p;
      p.peer_to_peer = a & 0x8000;
      p.ird = a & kMaxIrdOrd;
      p.ord = b & kMaxIrdOrd;
      p.rtr = static_cast<RtrMask>(((a & 0x4000) ? static_cast<RtrMask>(RtrType::Send) : 0) |
                                   ((b & 0x8000) ? static_cast<RtrMask>(RtrType::Write) : 0) |
                                   ((b & 0x4000) ? static_cast<RtrMask>(RtrType::Read) : 0));
      f.params = p;
      pd = pd.subspan(kEnhancedPrefixSize);
    }
  }
  f.private_data.assign(pd.begin(), pd.end());
  return f;
}

std::string describe(const MpaFrame& f) {
  std::string s = fmt::format("MPA {} rev {} M={} C={} R={} H={}",
                              f.kind == FrameKind::Request ? "Request" : "Reply", f.revision,
                              int(f.markers), int(f.crc), int(f.reject), int(f.enhanced));
  if (f.params) {
    s += fmt::format(" IRD {} ORD {}", f.params->ird, f.params->ord);
    if (f.params->peer_to_peer) s += " P2P rtr=" + rtr_mask_name(f.params->rtr);
  }
  s += fmt::format(" pd {}", f.private_data.size());
  return s;
}

}  // namespace iwarp::mpa
