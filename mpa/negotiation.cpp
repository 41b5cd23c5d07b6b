#include "mpa/negotiation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

namespace iwarp::mpa {

std::string_view to_string(CrcPolicy p) {
  switch (p) {
    case CrcPolicy::Required:
      return "required";
    case CrcPolicy::Optional:
      return "optional";
    case CrcPolicy::Off:
      return "off";
  }
  return "?";
}

std::string_view to_string(MarkerPolicy p) {
  switch (p) {
    case MarkerPolicy::Required:
      return "required";
    case MarkerPolicy::Optional:
      return "optional";
    case MarkerPolicy::Off:
      return "off";
  }
  return "?";
}

std::string_view to_string(Outcome::Kind k) {
  switch (k) {
    case Outcome::Kind::Established:
      return "established";
    case Outcome::Kind::Rejected:
      return "rejected";
    case Outcome::Kind::Terminated:
      return "terminated";
  }
  return "?";
}

namespace {

std::uint16_t clamp14(std::uint16_t v) {
  return std::min<std::uint16_t>(v, kMaxIrdOrd);
}

WireError error(Errc c, const char* rule, std::string detail) {
  return WireError{c, rule, std::move(detail), 0};
}

// RFC 6581 §5: the responder picks exactly one RTR type among those offered; like siw we prefer
// a zero-length Write, then Read, then Send (Send needs a pre-posted receive).
RtrType pick_rtr(RtrMask offered) {
  for (auto t : {RtrType::Write, RtrType::Read, RtrType::Send})
    if (offered & static_cast<RtrMask>(t)) return t;
  return RtrType::None;
}

}  // namespace

MpaFrame make_request(const Policy& p, ByteSpan private_data) {
  MpaFrame f;
  f.kind = FrameKind::Request;
  f.markers = p.markers == MarkerPolicy::Required;
  f.crc = p.crc == CrcPolicy::Required;
  f.revision = p.revision >= 2 ? 2 : 1;
  if (f.revision == 2) {
    f.enhanced = true;
    EnhancedParams e;
    e.ird = clamp14(p.ird);
    e.ord = clamp14(p.ord);
    e.peer_to_peer = p.peer_to_peer;
    e.rtr = p.peer_to_peer ? p.rtr : 0;
    f.params = e;
  }
  f.private_data.assign(private_data.begin(), private_data.end());
  return f;
}

MpaFrame make_reject(const MpaFrame& request, ByteSpan private_data) {
  MpaFrame r;
  r.kind = FrameKind::Reply;
  r.reject = true;
  r.revision = request.revision;
  r.enhanced = request.enhanced;
  if (request.enhanced && request.params) r.params = EnhancedParams{};
  r.private_data.assign(private_data.begin(), private_data.end());
  return r;
}

ConnectionParams params_from_frames(const MpaFrame& req, const MpaFrame& rep) {
  ConnectionParams c;
  c.revision = rep.revision;
  c.enhanced = req.enhanced && rep.enhanced;
  c.crc = req.crc || rep.crc;
  // RFC 5044 §7.1: M set in a frame means its sender wants to receive markers.
  c.markers_to_initiator = req.markers;
  c.markers_to_responder = rep.markers;
  if (c.enhanced && req.params && rep.params) {
    c.initiator_ird = req.params->ird;
    c.responder_ird = rep.params->ird;
    c.responder_ord = rep.params->ord;
    c.initiator_ord = std::min(req.params->ord, rep.params->ird);
    c.peer_to_peer = req.params->peer_to_peer && rep.params->peer_to_peer;
    if (c.peer_to_peer) c.rtr = pick_rtr(rep.params->rtr);
  }
  return c;
}

ResponderDecision respond(const Policy& p, const MpaFrame& req, ByteSpan private_data) {
  ResponderDecision d;
  MpaFrame& rep = d.reply;
  rep.kind = FrameKind::Reply;
  // RFC 6581 §4: reply with the lower of the two revisions.
  rep.revision = std::min<std::uint8_t>(req.revision, p.revision >= 2 ? 2 : 1);
  rep.enhanced = rep.revision == 2 && req.enhanced;
  rep.private_data.assign(private_data.begin(), private_data.end());

  auto reject = [&](Errc c, const char* rule, std::string detail) {
    rep.reject = true;
    if (rep.enhanced) rep.params = EnhancedParams{};
    rep.markers = false;
    rep.crc = false;
    d.outcome.kind = Outcome::Kind::Rejected;
    d.outcome.error = error(c, rule, std::move(detail));
    return d;
  };

  // CRC (RFC 5044 §7.1): used if either side asks. A side whose policy is Off cannot comply.
  bool crc = req.crc || p.crc == CrcPolicy::Required;
  if (req.crc && p.crc == CrcPolicy::Off)
    return reject(Errc::MpaBadReqRep, "RFC 5044 §7.1: CRC must be used when either side sets C",
                  "initiator requires CRC, responder policy forbids it");
  rep.crc = crc;

  // Markers: the initiator asks to receive them; we must be able to send them.
  if (req.markers && p.markers == MarkerPolicy::Off)
    return reject(Errc::MpaBadReqRep, "RFC 5044 §7.1: markers must be sent when the peer sets M",
                  "initiator asks for markers, responder cannot send them");
  rep.markers = p.markers == MarkerPolicy::Required;

  if (rep.enhanced) {
    if (!req.params)
      return reject(Errc::MpaBadReqRep, "RFC 6581 §5: enhanced Request carries IRD/ORD",
                    "missing IRD/ORD prefix");
    EnhancedParams e;
    // RFC 6581 §6: our ORD may not exceed the initiator's IRD; our IRD should cover its ORD.
    e.ord = std::min(clamp14(p.ord), req.params->ird);
    e.ird = clamp14(p.ird);
    if (req.params->ord > e.ird && p.strict_ird_ord)
      return reject(Errc::MpaInsufficientIrd, "RFC 6581 §6: responder IRD must cover initiator ORD",
                    fmt::format("initiator ORD {} > responder IRD {}", req.params->ord, e.ird));
    // RFC 6581 §9.2: a responder MUST echo A and select exactly one RTR type among those
    // offered. A zero-length RDMA Read needs an outbound slot at the initiator (ORD >= 1) and
    // an inbound one here (IRD >= 1), so Read is only a candidate when both exist.
    if (req.params->peer_to_peer) {
      RtrMask usable = req.params->rtr & p.rtr;
      if (req.params->ord == 0 || e.ird == 0)
        usable &= static_cast<RtrMask>(~static_cast<RtrMask>(RtrType::Read));
      RtrType t = pick_rtr(usable);
      if (t == RtrType::None)
        return reject(Errc::MpaNoMatchingRtr,
                      "RFC 6581 §9.2: responder selects one RTR type the initiator offered",
                      fmt::format("offered {}, supported {}, no usable type in common",
                                  rtr_mask_name(req.params->rtr), rtr_mask_name(p.rtr)));
      e.peer_to_peer = true;
      e.rtr = static_cast<RtrMask>(t);
    }
    rep.params = e;
  }

  d.outcome.kind = Outcome::Kind::Established;
  d.outcome.params = params_from_frames(req, rep);
  return d;
}

Outcome finish_initiator(const Policy& p, const MpaFrame& req, const MpaFrame& rep) {
  Outcome o;
  auto terminate = [&](Errc c, const char* rule, std::string detail) {
    o.kind = Outcome::Kind::Terminated;
    o.error = error(c, rule, std::move(detail));
    return o;
  };
  if (rep.reject) {
    o.kind = Outcome::Kind::Rejected;
    return o;
  }
  if (rep.revision > req.revision)
    return terminate(Errc::MpaBadReqRep,
                     "RFC 6581 §4: the Reply's Rev must not exceed the Request's",
                     fmt::format("Request Rev {}, Reply Rev {}", req.revision, rep.revision));
  if (req.enhanced && rep.revision == 2 && !rep.enhanced)
    return terminate(Errc::MpaBadReqRep,
                     "RFC 6581 §5: a Rev 2 Reply to an enhanced Request sets the enhanced flag",
                     "enhanced flag clear in Reply");
  if (rep.enhanced && !rep.params)
    return terminate(Errc::MpaBadReqRep, "RFC 6581 §5: enhanced Reply carries IRD/ORD",
                     "missing IRD/ORD prefix");
  if (!req.crc && rep.crc && p.crc == CrcPolicy::Off)
    return terminate(Errc::MpaBadReqRep, "RFC 5044 §7.1: CRC must be used when either side sets C",
                     "responder requires CRC, initiator policy forbids it");
  if (rep.markers && p.markers == MarkerPolicy::Off)
    return terminate(Errc::MpaBadReqRep, "RFC 5044 §7.1: markers must be sent when the peer sets M",
                     "responder asks for markers, initiator cannot send them");
  o.params = params_from_frames(req, rep);
  if (o.params.enhanced) {
    const auto& rp = *rep.params;
    // RFC 6581 §6: the responder's ORD must fit our IRD.
    if (rp.ord > req.params->ird)
      return terminate(Errc::MpaInsufficientIrd,
                       "RFC 6581 §6: responder ORD must not exceed initiator IRD",
                       fmt::format("responder ORD {} > initiator IRD {}", rp.ord, req.params->ird));
    if (req.params->ord > rp.ird && p.strict_ird_ord)
      return terminate(Errc::MpaInsufficientIrd,
                       "RFC 6581 §6: responder IRD must cover initiator ORD",
                       fmt::format("initiator ORD {} > responder IRD {}", req.params->ord, rp.ird));
  }
  if (p.peer_to_peer) {
    if (!o.params.enhanced || !o.params.peer_to_peer)
      return terminate(Errc::MpaNoMatchingRtr,
                       "RFC 6581 §9.2: a peer-to-peer initiator needs the responder to echo A",
                       o.params.enhanced ? "responder did not set A" : "responder replied Rev 1");
    const auto offered = req.params->rtr;
    const auto chosen = rep.params->rtr;
    if (std::popcount(static_cast<unsigned>(chosen)) != 1 || !(offered & chosen))
      return terminate(
          Errc::MpaNoMatchingRtr, "RFC 6581 §9.2: the Reply selects exactly one offered RTR type",
          fmt::format("offered {}, selected {}", rtr_mask_name(offered), rtr_mask_name(chosen)));
    if (chosen == static_cast<RtrMask>(RtrType::Read) &&
        (req.params->ord == 0 || rep.params->ird == 0))
      return terminate(
          Errc::MpaNoMatchingRtr,
          "RFC 6581 §9.2: a Read RTR needs initiator ORD and responder IRD of 1 or more",
          fmt::format("initiator ORD {}, responder IRD {}", req.params->ord, rep.params->ird));
  }
  o.kind = Outcome::Kind::Established;
  return o;
}

Negotiation negotiate(const Policy& initiator, const Policy& responder) {
  Negotiation n;
  n.request = make_request(initiator);
  auto d = respond(responder, n.request);
  n.reply = d.reply;
  n.responder = d.outcome;
  n.initiator = finish_initiator(initiator, n.request, n.reply);
  // The responder only knows the exchange failed when the initiator terminates.
  if (n.responder.kind == Outcome::Kind::Established &&
      n.initiator.kind == Outcome::Kind::Terminated) {
    n.responder.kind = Outcome::Kind::Terminated;
    n.responder.error = n.initiator.error;
  }
  return n;
}

std::string describe(const ConnectionParams& p) {
  std::string s =
      fmt::format("rev {} crc {} markers i->r {} r->i {}", p.revision, p.crc ? "on" : "off",
                  p.markers_to_responder ? "on" : "off", p.markers_to_initiator ? "on" : "off");
  if (p.enhanced)
    s += fmt::format(" initiator IRD/ORD {}/{} responder IRD/ORD {}/{}", p.initiator_ird,
                     p.initiator_ord, p.responder_ird, p.responder_ord);
  if (p.peer_to_peer) s += fmt::format(" p2p rtr {}", rtr_name(p.rtr));
  return s;
}

}  // namespace iwarp::mpa
