// Target 2: MPA Request/Reply frames (mpa/mpa_frame.hpp) and the negotiation decision
// (mpa/negotiation.hpp).
//
// Input: two policies (initiator, responder; 6 octets each), then octets taken as one frame
// (both as a Request and as a Reply).
//
// Checks: a frame that decodes encodes back to the same octets and its header gives its size;
// the stream decoder reads it the same way; the responder's Reply to any decodable Request
// round-trips and never breaks RFC 5044 §7.1 / RFC 6581 §5-§6 (Rev, C, M, IRD/ORD, one RTR
// type); both sides' verdicts of a negotiation agree; the initiator's verdict on any decodable
// Reply is consistent with its policy.
#include <bit>
#include <cstdint>

#include "fuzz/fuzz_support.hpp"
#include "mpa/mpa_frame.hpp"
#include "mpa/negotiation.hpp"
#include "mpa/stream_decoder.hpp"

using namespace iwarp;
using namespace iwarp::mpa;
using iwarp::fuzz::Input;

namespace {

Policy policy(Input& in) {
  Policy p;
  const std::uint8_t a = in.u8();
  p.revision = static_cast<std::uint8_t>(1 + (a & 1));
  p.crc = static_cast<CrcPolicy>((a >> 1) % 3);
  p.markers = static_cast<MarkerPolicy>((a >> 3) % 3);
  p.peer_to_peer = a & 0x20;
  p.strict_ird_ord = a & 0x40;
  const std::uint8_t r = in.u8();
  p.rtr = static_cast<RtrMask>(r & kAllRtr);
  // IRD/ORD beyond 14 bits too: frames cap them.
  p.ird = in.u16();
  p.ord = in.u16();
  if (!(a & 0x80)) {
    p.ird &= 0x3F;
    p.ord &= 0x3F;
  }
  return p;
}

struct FrameSeen final : StreamVisitor {
  std::optional<MpaFrame> frame;
  std::size_t length = 0;
  std::optional<WireError> error;
  void on_mpa_frame(const MpaFrame& f, std::uint64_t, std::size_t len) override {
    frame = f;
    length = len;
  }
  void on_fpdu(const Fpdu&) override {}
  void on_error(const WireError& e) override { error = e; }
};

void roundtrip(const MpaFrame& f) {
  const Bytes wire = f.encode();
  FUZZ_CHECK(wire.size() == f.wire_size(), "encode %zu octets, wire_size %zu", wire.size(),
             f.wire_size());
  auto back = decode_frame(wire, f.kind);
  FUZZ_CHECK(back.has_value(), "a frame we built does not decode: %s (%s)",
             back.error().to_string().c_str(), describe(f).c_str());
  FUZZ_CHECK(*back == f, "decode(encode(f)) != f: %s vs %s", describe(*back).c_str(),
             describe(f).c_str());
}

void check_frame_bytes(ByteSpan bytes, FrameKind kind) {
  auto f = decode_frame(bytes, kind);
  const auto size = frame_size_from_header(bytes);
  if (f) {
    FUZZ_CHECK(size && *size == bytes.size(), "header gives %zu, frame has %zu", size ? *size : 0,
               bytes.size());
    const Bytes again = f->encode();
    FUZZ_CHECK(
        again.size() == bytes.size() && std::equal(again.begin(), again.end(), bytes.begin()),
        "decoded frame encodes to other octets: %s", describe(*f).c_str());
    FUZZ_CHECK(f->kind == kind, "kind");
    FUZZ_CHECK(f->revision == 1 || f->revision == 2, "Rev %u accepted", f->revision);
    FUZZ_CHECK(!(f->reject && kind == FrameKind::Request), "R in a Request accepted");
    FUZZ_CHECK(f->private_data.size() <= kMaxPrivateData, "PD %zu", f->private_data.size());
    FUZZ_CHECK(!f->params || f->enhanced, "IRD/ORD without the enhanced flag");
    if (f->params)
      FUZZ_CHECK(f->params->ird <= kMaxIrdOrd && f->params->ord <= kMaxIrdOrd, "IRD/ORD > 14 bit");
    (void)describe(*f);
  }
  // The stream decoder takes the same frame the same way (fed in two pieces).
  StreamDecoder dec(kind);
  FrameSeen seen;
  const std::size_t cut = bytes.empty() ? 0 : bytes[bytes.size() / 2] % (bytes.size() + 1);
  dec.feed(bytes.first(cut), seen);
  dec.feed(bytes.subspan(cut), seen);
  if (f) {
    FUZZ_CHECK(seen.frame && *seen.frame == *f && seen.length == bytes.size(),
               "stream decoder saw another frame (or none)");
  } else if (seen.frame) {
    // The decoder took a shorter frame: the input is a whole frame and more.
    FUZZ_CHECK(seen.length < bytes.size(), "decoder took a frame decode_frame refused");
    auto g = decode_frame(bytes.first(seen.length), kind);
    FUZZ_CHECK(g && *g == *seen.frame, "decoder's frame does not decode alone");
  }
}

// RFC 5044 §7.1 / RFC 6581 §5-§6 on what a responder answered to `req`.
void check_reply(const Policy& p, const MpaFrame& req, const ResponderDecision& d) {
  const MpaFrame& rep = d.reply;
  roundtrip(rep);
  FUZZ_CHECK(rep.kind == FrameKind::Reply, "reply kind");
  FUZZ_CHECK(rep.revision <= req.revision && rep.revision <= std::max<int>(p.revision, 1),
             "Reply Rev %u to Rev %u", rep.revision, req.revision);
  if (d.outcome.kind == Outcome::Kind::Rejected) {
    FUZZ_CHECK(rep.reject, "rejected without R");
    FUZZ_CHECK(d.outcome.error.has_value(), "rejected without a reason");
    return;
  }
  FUZZ_CHECK(d.outcome.kind == Outcome::Kind::Established, "responder outcome %d",
             int(d.outcome.kind));
  FUZZ_CHECK(!rep.reject, "established with R");
  const auto& c = d.outcome.params;
  FUZZ_CHECK(c == params_from_frames(req, rep), "params differ from the frames'");
  FUZZ_CHECK(c.crc == (req.crc || rep.crc), "C");
  if (req.crc) FUZZ_CHECK(p.crc != CrcPolicy::Off, "CRC accepted against policy Off");
  if (p.crc == CrcPolicy::Required) FUZZ_CHECK(c.crc, "CRC required but off");
  if (req.markers) FUZZ_CHECK(p.markers != MarkerPolicy::Off, "markers accepted against Off");
  if (rep.enhanced) {
    FUZZ_CHECK(req.enhanced && req.params && rep.params, "enhanced Reply to a plain Request");
    FUZZ_CHECK(rep.params->ord <= req.params->ird, "responder ORD %u > initiator IRD %u",
               rep.params->ord, req.params->ird);
    if (p.strict_ird_ord)
      FUZZ_CHECK(req.params->ord <= rep.params->ird, "strict: initiator ORD > responder IRD");
    if (req.params->peer_to_peer) {
      FUZZ_CHECK(rep.params->peer_to_peer, "A not echoed");
      FUZZ_CHECK(std::popcount(unsigned(rep.params->rtr)) == 1, "RTR mask 0x%x", rep.params->rtr);
      FUZZ_CHECK((rep.params->rtr & req.params->rtr & p.rtr) == rep.params->rtr,
                 "RTR not offered or not supported");
      if (rep.params->rtr == static_cast<RtrMask>(RtrType::Read))
        FUZZ_CHECK(req.params->ord > 0 && rep.params->ird > 0, "Read RTR without ORD/IRD");
    }
  }
}

void check_initiator(const Policy& p, const MpaFrame& req, const MpaFrame& rep, const Outcome& o) {
  if (rep.reject) {
    FUZZ_CHECK(o.kind == Outcome::Kind::Rejected, "R=1 not seen as rejected");
    return;
  }
  if (o.kind != Outcome::Kind::Established) {
    FUZZ_CHECK(o.kind == Outcome::Kind::Terminated && o.error, "terminated without a reason");
    return;
  }
  const auto& c = o.params;
  FUZZ_CHECK(rep.revision <= req.revision, "Rev %u accepted for Rev %u", rep.revision,
             req.revision);
  if (rep.crc && !req.crc) FUZZ_CHECK(p.crc != CrcPolicy::Off, "CRC against policy Off");
  if (rep.markers) FUZZ_CHECK(p.markers != MarkerPolicy::Off, "markers against policy Off");
  FUZZ_CHECK(c.crc == (req.crc || rep.crc), "C");
  if (c.enhanced && req.params && rep.params) {
    FUZZ_CHECK(rep.params->ord <= req.params->ird, "responder ORD > our IRD accepted");
    FUZZ_CHECK(c.initiator_ord <= rep.params->ird, "our ORD %u > responder IRD %u", c.initiator_ord,
               rep.params->ird);
  }
  if (p.peer_to_peer) {
    FUZZ_CHECK(c.peer_to_peer && c.rtr != RtrType::None, "P2P without an RTR");
    FUZZ_CHECK(req.params && (req.params->rtr & static_cast<RtrMask>(c.rtr)), "RTR not offered");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  Input in(data, size);
  const Policy pi = policy(in);
  const Policy pr = policy(in);
  const ByteSpan frame = in.rest();

  // Both policies against each other.
  const Negotiation n = negotiate(pi, pr);
  roundtrip(n.request);
  const ResponderDecision d = respond(pr, n.request);
  FUZZ_CHECK(d.reply == n.reply, "negotiate() and respond() answer differently");
  check_reply(pr, n.request, d);
  check_initiator(pi, n.request, n.reply, n.initiator);
  if (n.initiator.kind == Outcome::Kind::Established) {
    FUZZ_CHECK(n.responder.kind == Outcome::Kind::Established, "initiator up, responder %d",
               int(n.responder.kind));
    FUZZ_CHECK(n.initiator.params == n.responder.params, "sides disagree on the parameters");
    const auto& c = n.initiator.params;
    FUZZ_CHECK(c.revision == std::min(pi.revision, pr.revision), "Rev %u", c.revision);
    FUZZ_CHECK(c.crc == (pi.crc == CrcPolicy::Required || pr.crc == CrcPolicy::Required),
               "C %d for policies %d/%d", int(c.crc), int(pi.crc), int(pr.crc));
    FUZZ_CHECK(c.markers_to_initiator == (pi.markers == MarkerPolicy::Required), "M to I");
    FUZZ_CHECK(c.markers_to_responder == (pr.markers == MarkerPolicy::Required), "M to R");
    if (c.enhanced) {
      FUZZ_CHECK(c.initiator_ord <= c.responder_ird, "I ORD %u > R IRD %u", c.initiator_ord,
                 c.responder_ird);
      FUZZ_CHECK(c.responder_ord <= c.initiator_ird, "R ORD %u > I IRD %u", c.responder_ord,
                 c.initiator_ird);
    }
  } else if (n.responder.kind == Outcome::Kind::Rejected) {
    FUZZ_CHECK(n.initiator.kind == Outcome::Kind::Rejected, "responder rejected, initiator %d",
               int(n.initiator.kind));
  }

  // The octets as a Request, as a Reply.
  check_frame_bytes(frame, FrameKind::Request);
  check_frame_bytes(frame, FrameKind::Reply);
  if (auto req = decode_frame(frame, FrameKind::Request)) {
    const auto dr = respond(pr, *req, frame.first(std::min<std::size_t>(frame.size(), 8)));
    check_reply(pr, *req, dr);
    (void)make_reject(*req, frame.first(std::min<std::size_t>(frame.size(), 3)));
  }
  if (auto rep = decode_frame(frame, FrameKind::Reply)) {
    const MpaFrame req = make_request(pi);
    check_initiator(pi, req, *rep, finish_initiator(pi, req, *rep));
    (void)describe(params_from_frames(req, *rep));
  }
  return 0;
}
