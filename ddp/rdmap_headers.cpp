#include "ddp/rdmap_headers.hpp"

#include <fmt/format.h>

#include "ddp/ddp_header.hpp"

namespace iwarp::rdmap {

void ReadRequest::encode(Bytes& out) const {
  ByteWriter w(out);
  w.be32(sink_stag.value());
  w.be64(sink_to.value());
  w.be32(size);
  w.be32(src_stag.value());
  w.be64(src_to.value());
}

ReadRequest ReadRequest::decode(ByteSpan b) {
  ByteReader r(b);
  ReadRequest q;
  q.sink_stag = STag{r.be32()};
  q.sink_to = TaggedOffset{r.be64()};
  q.size = r.be32();
  q.src_stag = STag{r.be32()};
  q.src_to = TaggedOffset{r.be64()};
  return q;
}

std::string_view atomic_op_name(std::uint8_t op) {
  switch (op) {
    case 0:
      return "FetchAdd";
    case 1:
      return "Swap";
    case 2:
      return "CompareSwap";
  }
  return "Unknown";
}

void AtomicRequest::encode(Bytes& out) const {
  ByteWriter w(out);
  w.be32((reserved << 4) | (op & 0x0F));
  w.be32(request_id);
  w.be32(stag.value());
  w.be64(to.value());
  w.be64(add_swap_data);
  w.be64(add_swap_mask);
  w.be64(compare_data);
  w.be64(compare_mask);
}

AtomicRequest AtomicRequest::decode(ByteSpan b) {
  ByteReader r(b);
  AtomicRequest a;
  std::uint32_t w0 = r.be32();
  a.op = w0 & 0x0F;
  a.reserved = w0 >> 4;
  a.request_id = r.be32();
  a.stag = STag{r.be32()};
  a.to = TaggedOffset{r.be64()};
  a.add_swap_data = r.be64();
  a.add_swap_mask = r.be64();
  a.compare_data = r.be64();
  a.compare_mask = r.be64();
  return a;
}

void AtomicResponse::encode(Bytes& out) const {
  ByteWriter w(out);
  w.be32(request_id);
  w.be64(original_value);
}

AtomicResponse AtomicResponse::decode(ByteSpan b) {
  ByteReader r(b);
  AtomicResponse a;
  a.request_id = r.be32();
  a.original_value = r.be64();
  return a;
}

void Terminate::encode(Bytes& out) const {
  ByteWriter w(out);
  w.u8(static_cast<std::uint8_t>((layer << 4) | (etype & 0x0F)));
  w.u8(ecode);
  w.be16(static_cast<std::uint16_t>((m ? 0x8000 : 0) | (d ? 0x4000 : 0) | (r ? 0x2000 : 0) |
                                    (reserved & 0x1FFF)));
  if (d) {
    w.be16(ddp_segment_length);
    w.bytes(ddp_header);
  }
  if (r) w.bytes(rdmap_header);
}

Result<Terminate> Terminate::decode(ByteSpan b) {
  static constexpr const char* kRule =
      "RFC 5040 §4.8: Terminate carries its control word and the headers its M/D/R bits announce";
  if (b.size() < kTerminateControlSize)
    return fail(Errc::RdmapCatastrophicStream, kRule,
                fmt::format("Terminate body of {} octets", b.size()));
  Terminate t;
  std::uint8_t b0 = b[0], b2 = b[2], b3 = b[3];
  t.ecode = b[1];
  // RFC layout: M/D/R are the top bits of octet 2, the rest reserved (zero when sent).
  // siw's bit-field layout puts them in the low three bits instead, with everything else zero.
  bool rfc_reserved_clear = (b2 & 0x1F) == 0 && b3 == 0;
  bool siw_layout = !rfc_reserved_clear && (b2 & 0xF8) == 0 && b3 == 0;
  if (siw_layout) {
    t.siw_bitfield_quirk = true;
    t.layer = b0 & 0x0F;
    t.etype = b0 >> 4;
    t.m = b2 & 0x01;
    t.d = b2 & 0x02;
    t.r = b2 & 0x04;
  } else {
    t.layer = b0 >> 4;
    t.etype = b0 & 0x0F;
    t.m = b2 & 0x80;
    t.d = b2 & 0x40;
    t.r = b2 & 0x20;
    t.reserved = static_cast<std::uint16_t>(((b2 & 0x1F) << 8) | b3);
  }
  ByteReader rd(b.subspan(kTerminateControlSize));
  if (t.d) {
    t.ddp_segment_length = rd.be16();
    if (!rd.ok() || rd.remaining() < 1)
      return fail(Errc::RdmapCatastrophicStream, kRule, "D set but no DDP header follows");
    std::size_t n =
        (rd.rest()[0] & ddp::kFlagTagged) ? ddp::kTaggedHeaderSize : ddp::kUntaggedHeaderSize;
    ByteSpan h = rd.bytes(n);
    if (!rd.ok())
      return fail(Errc::RdmapCatastrophicStream, kRule,
                  fmt::format("D set but only {} octets of DDP header", rd.remaining()));
    t.ddp_header.assign(h.begin(), h.end());
  }
  if (t.r) {
    ByteSpan h = rd.bytes(kTerminatedRdmapHeaderSize);
    if (!rd.ok())
      return fail(Errc::RdmapCatastrophicStream, kRule, "R set but no 28-octet RDMAP header");
    t.rdmap_header.assign(h.begin(), h.end());
  }
  if (rd.remaining() != 0)
    return fail(Errc::RdmapCatastrophicStream, kRule,
                fmt::format("{} octets after the terminated headers", rd.remaining()));
  return t;
}

}  // namespace iwarp::rdmap
