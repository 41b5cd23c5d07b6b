// MPA connection setup (RFC 5044 §7.1, RFC 6581): the whole negotiation table checked against an
// oracle written here from the RFC rules (it calls nothing from the library to compute what it
// expects), general invariants over every combination, hand-made Replies the table cannot
// produce, and siw's real frames from pcap_traces/siw.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mpa/mpa_frame.hpp"
#include "mpa/negotiation.hpp"

namespace iwarp::mpa {
namespace {

using Kind = Outcome::Kind;

constexpr RtrMask kSend = static_cast<RtrMask>(RtrType::Send);
constexpr RtrMask kWrite = static_cast<RtrMask>(RtrType::Write);
constexpr RtrMask kRead = static_cast<RtrMask>(RtrType::Read);

Bytes key_bytes(std::string_view key) {
  return Bytes(key.begin(), key.end());
}

Bytes raw_frame(std::string_view key, std::uint8_t flags, std::uint8_t rev, const Bytes& pd) {
  Bytes b = key_bytes(key);
  b.push_back(flags);
  b.push_back(rev);
  b.push_back(static_cast<std::uint8_t>(pd.size() >> 8));
  b.push_back(static_cast<std::uint8_t>(pd.size() & 0xff));
  b.insert(b.end(), pd.begin(), pd.end());
  return b;
}

MpaFrame decoded(const Bytes& b, FrameKind k) {
  auto r = decode_frame(b, k);
  EXPECT_TRUE(r.has_value()) << r.error().to_string();
  return r.value_or(MpaFrame{});
}

bool contains(const char* s, std::string_view what) {
  return s != nullptr && std::string_view(s).find(what) != std::string_view::npos;
}

std::string kind_name(Kind k) {
  switch (k) {
    case Kind::Established:
      return "Established";
    case Kind::Rejected:
      return "Rejected";
    case Kind::Terminated:
      return "Terminated";
  }
  return "?";
}

std::string err_name(const std::optional<Errc>& e) {
  return e ? std::string(errc_name(*e)) : std::string("none");
}

std::string mask_name(RtrMask m) {
  std::string s;
  if (m & kWrite) s += "W";
  if (m & kRead) s += "R";
  if (m & kSend) s += "S";
  return s.empty() ? "-" : s;
}

std::string policy_name(const Policy& p) {
  auto crc = p.crc == CrcPolicy::Required ? "req" : p.crc == CrcPolicy::Optional ? "opt" : "off";
  auto mk = p.markers == MarkerPolicy::Required   ? "req"
            : p.markers == MarkerPolicy::Optional ? "opt"
                                                  : "off";
  return fmt::format("rev{} crc={} mk={} p2p={} rtr={} strict={} ird={} ord={}", p.revision, crc,
                     mk, int(p.peer_to_peer), mask_name(p.rtr), int(p.strict_ird_ord), p.ird,
                     p.ord);
}

// ---- the oracle ------------------------------------------------------------------------------

// Which rule an error is about, so that precedence between two rules that share an error code
// (CRC and markers are both 0x04) is visible.
enum class Reason { None, Crc, Markers, Ird, Rtr };

struct Expected {
  Kind responder = Kind::Established;
  Kind initiator = Kind::Established;
  std::optional<Errc> error;
  Reason reason = Reason::None;

  std::uint8_t revision = 1;
  bool enhanced = false;
  // The Request on the wire.
  bool req_crc = false, req_markers = false;
  std::optional<EnhancedParams> req_params;
  // The Reply on the wire.
  bool rep_reject = false, rep_crc = false, rep_markers = false;
  std::optional<EnhancedParams> rep_params;
  // The agreed parameters when established.
  ConnectionParams params;
};

Expected oracle(const Policy& ini, const Policy& rsp) {
  Expected e;
  // The Request: C=1 only for Required (RFC 5044 §7.1); M=1 = "I want to receive markers".
  e.req_crc = ini.crc == CrcPolicy::Required;
  e.req_markers = ini.markers == MarkerPolicy::Required;
  if (ini.revision == 2)  // RFC 6581: Rev 2 + H, PD starts with A|B|IRD, C|D|ORD
    e.req_params = EnhancedParams{.peer_to_peer = ini.peer_to_peer,
                                  .ird = ini.ird,
                                  .rtr = ini.peer_to_peer ? ini.rtr : RtrMask{0},
                                  .ord = ini.ord};
  // RFC 6581 §4: the lower revision; enhanced iff both speak 2.
  e.revision = std::min(ini.revision, rsp.revision);
  e.enhanced = e.revision == 2;

  auto reject = [&](Errc c, Reason r) {
    e.responder = Kind::Rejected;
    e.initiator = Kind::Rejected;
    e.error = c;
    e.reason = r;
    e.rep_reject = true;
    e.rep_crc = false;
    e.rep_markers = false;
    if (e.enhanced) e.rep_params = EnhancedParams{};
    return e;
  };

  // ---- responder: CRC, markers, IRD/ORD (strict), P2P ----
  if (e.req_crc && rsp.crc == CrcPolicy::Off) return reject(Errc::MpaBadReqRep, Reason::Crc);
  if (e.req_markers && rsp.markers == MarkerPolicy::Off)
    return reject(Errc::MpaBadReqRep, Reason::Markers);
  bool p2p = false;
  RtrType rtr = RtrType::None;
  if (e.enhanced) {
    if (rsp.strict_ird_ord && ini.ord > rsp.ird)
      return reject(Errc::MpaInsufficientIrd, Reason::Ird);
    // RFC 6581 §9.2: the responder echoes A whenever the initiator sets it, and picks one type;
    // a zero-length Read needs initiator ORD >= 1 and responder IRD >= 1.
    if (ini.peer_to_peer) {
      RtrMask common = ini.rtr & rsp.rtr;
      if (ini.ord == 0 || rsp.ird == 0) common &= static_cast<RtrMask>(~kRead);
      if (common == 0) return reject(Errc::MpaNoMatchingRtr, Reason::Rtr);
      rtr = (common & kWrite) ? RtrType::Write : (common & kRead) ? RtrType::Read : RtrType::Send;
      p2p = true;
    }
  }
  e.rep_crc = e.req_crc || rsp.crc == CrcPolicy::Required;
  e.rep_markers = rsp.markers == MarkerPolicy::Required;
  const std::uint16_t rsp_ord = std::min(rsp.ord, ini.ird);
  if (e.enhanced)
    e.rep_params = EnhancedParams{
        .peer_to_peer = p2p, .ird = rsp.ird, .rtr = static_cast<RtrMask>(rtr), .ord = rsp_ord};

  auto terminate = [&](Errc c, Reason r) {
    e.responder = Kind::Terminated;
    e.initiator = Kind::Terminated;
    e.error = c;
    e.reason = r;
    return e;
  };

  // ---- initiator: (reject, revision, enhanced flag: never hit here), CRC, markers, IRD/ORD,
  // P2P ----
  if (e.rep_crc && !e.req_crc && ini.crc == CrcPolicy::Off)
    return terminate(Errc::MpaBadReqRep, Reason::Crc);
  if (e.rep_markers && ini.markers == MarkerPolicy::Off)
    return terminate(Errc::MpaBadReqRep, Reason::Markers);
  if (e.enhanced) {
    if (rsp_ord > ini.ird) return terminate(Errc::MpaInsufficientIrd, Reason::Ird);
    if (ini.strict_ird_ord && ini.ord > rsp.ird)
      return terminate(Errc::MpaInsufficientIrd, Reason::Ird);
  }
  if (ini.peer_to_peer && !(e.enhanced && p2p))
    return terminate(Errc::MpaNoMatchingRtr, Reason::Rtr);

  ConnectionParams& c = e.params;
  c.revision = e.revision;
  c.enhanced = e.enhanced;
  c.crc = e.req_crc || e.rep_crc;
  c.markers_to_responder = e.rep_markers;  // the responder asked to receive markers
  c.markers_to_initiator = e.req_markers;  // the initiator asked to receive markers
  if (e.enhanced) {
    c.initiator_ird = ini.ird;
    c.initiator_ord = std::min(ini.ord, rsp.ird);
    c.responder_ird = rsp.ird;
    c.responder_ord = rsp_ord;
    c.peer_to_peer = p2p;
    c.rtr = rtr;
  }
  return e;
}

// ---- the policy space ------------------------------------------------------------------------

std::vector<Policy> all_policies() {
  std::vector<Policy> out;
  const std::array<std::pair<std::uint16_t, std::uint16_t>, 4> irdord = {
      {{1, 1}, {16, 16}, {0, 4}, {4, 0}}};
  const std::array<RtrMask, 5> masks = {kWrite, kRead, kSend, kWrite | kRead, kAllRtr};
  for (std::uint8_t rev : {std::uint8_t{1}, std::uint8_t{2}})
    for (CrcPolicy crc : {CrcPolicy::Required, CrcPolicy::Optional, CrcPolicy::Off})
      for (MarkerPolicy mk : {MarkerPolicy::Required, MarkerPolicy::Optional, MarkerPolicy::Off})
        for (bool p2p : {false, true})
          for (std::size_t mi = 0; mi < (p2p ? masks.size() : 1); ++mi)
            for (bool strict : {false, true})
              for (auto [ird, ord] : irdord) {
                Policy p;
                p.revision = rev;
                p.crc = crc;
                p.markers = mk;
                p.peer_to_peer = p2p;
                // Without P2P the mask is not used; Write|Read (siw's default) so that a leak of
                // it into the Request would show.
                p.rtr = p2p ? masks[mi] : (kWrite | kRead);
                p.strict_ird_ord = strict;
                p.ird = ird;
                p.ord = ord;
                out.push_back(p);
              }
  return out;
}

// Compares one combination; appends a line per disagreement.
void check_combination(const Policy& ini, const Policy& rsp, std::vector<std::string>& bad,
                       std::map<std::string, int>& stats) {
  const Expected e = oracle(ini, rsp);
  const Negotiation n = negotiate(ini, rsp);
  auto mismatch = [&](std::string_view what, const std::string& want, const std::string& got) {
    bad.push_back(fmt::format("initiator [{}] responder [{}]: {}: expected {}, got {}",
                              policy_name(ini), policy_name(rsp), what, want, got));
  };
  auto params_str = [](const std::optional<EnhancedParams>& p) {
    return p ? fmt::format("A={} IRD={} ORD={} rtr={}", int(p->peer_to_peer), p->ird, p->ord,
                           mask_name(p->rtr))
             : std::string("none");
  };
  const std::size_t before = bad.size();

  // ---- the oracle ----
  // The Request.
  const MpaFrame& q = n.request;
  if (q.kind != FrameKind::Request || q.revision != ini.revision ||
      q.enhanced != (ini.revision == 2) || q.crc != e.req_crc || q.markers != e.req_markers ||
      q.reject || q.reserved != 0 || q.params != e.req_params || !q.private_data.empty())
    mismatch("request",
             fmt::format("rev {} C={} M={} {}", ini.revision, int(e.req_crc), int(e.req_markers),
                         params_str(e.req_params)),
             describe(q) + " " + params_str(q.params));
  // The Reply.
  const MpaFrame& r = n.reply;
  if (r.kind != FrameKind::Reply || r.revision != e.revision || r.enhanced != e.enhanced ||
      r.reject != e.rep_reject || r.crc != e.rep_crc || r.markers != e.rep_markers ||
      r.reserved != 0 || r.params != e.rep_params || !r.private_data.empty())
    mismatch("reply",
             fmt::format("rev {} R={} C={} M={} {}", e.revision, int(e.rep_reject), int(e.rep_crc),
                         int(e.rep_markers), params_str(e.rep_params)),
             describe(r) + " " + params_str(r.params));
  // Outcomes.
  auto check_side = [&](std::string_view side, const Outcome& o, Kind want_kind,
                        std::optional<Errc> want_err) {
    if (o.kind != want_kind)
      mismatch(fmt::format("{} outcome", side), kind_name(want_kind), kind_name(o.kind));
    std::optional<Errc> got_err;
    if (o.error) got_err = o.error->code;
    if (got_err != want_err)
      mismatch(fmt::format("{} error", side), err_name(want_err), err_name(got_err));
    if (o.error && !contains(o.error->rule, "RFC"))
      mismatch(fmt::format("{} rule", side), "an RFC rule", o.error->rule ? o.error->rule : "null");
    if (o.error && e.reason == Reason::Crc && !contains(o.error->rule, "CRC"))
      mismatch(fmt::format("{} rule", side), "the CRC rule", o.error->rule);
    if (o.error && e.reason == Reason::Markers && !contains(o.error->rule, "marker"))
      mismatch(fmt::format("{} rule", side), "the marker rule", o.error->rule);
  };
  check_side("responder", n.responder, e.responder, e.error);
  // The initiator of a rejected connection did not decide anything: no error of its own.
  check_side("initiator", n.initiator, e.initiator,
             e.initiator == Kind::Rejected ? std::nullopt : e.error);
  if (e.initiator == Kind::Established) {
    if (n.initiator.params != e.params)
      mismatch("initiator params", describe(e.params), describe(n.initiator.params));
    if (n.responder.params != e.params)
      mismatch("responder params", describe(e.params), describe(n.responder.params));
  }

  // ---- invariants that hold whatever the policies ----
  const bool est = n.initiator.kind == Kind::Established;
  if (est != (n.responder.kind == Kind::Established))
    mismatch("invariant: established on both sides or neither", kind_name(n.initiator.kind),
             kind_name(n.responder.kind));
  if (est) {
    const ConnectionParams& p = n.initiator.params;
    if (n.responder.params != p)
      mismatch("invariant: both sides' params equal", describe(p), describe(n.responder.params));
    if (p.crc != (q.crc || r.crc))
      mismatch("invariant: crc == Request C || Reply C", fmt::format("{}", q.crc || r.crc),
               fmt::format("{}", p.crc));
    if (p.markers_to_responder != r.markers)
      mismatch("invariant: markers_to_responder == Reply M", fmt::format("{}", r.markers),
               fmt::format("{}", p.markers_to_responder));
    if (p.markers_to_initiator != q.markers)
      mismatch("invariant: markers_to_initiator == Request M", fmt::format("{}", q.markers),
               fmt::format("{}", p.markers_to_initiator));
    if (p.revision != r.revision || p.revision != std::min(ini.revision, rsp.revision))
      mismatch("invariant: revision", fmt::format("{}", r.revision), fmt::format("{}", p.revision));
    if (p.enhanced != (p.revision == 2))
      mismatch("invariant: enhanced iff rev 2", fmt::format("{}", p.revision == 2),
               fmt::format("{}", p.enhanced));
    if (p.framing_to_responder() != FramingConfig{p.crc, p.markers_to_responder} ||
        p.framing_to_initiator() != FramingConfig{p.crc, p.markers_to_initiator})
      mismatch("invariant: framing configs", "crc/markers of params", "something else");
    if (ini.crc == CrcPolicy::Required || rsp.crc == CrcPolicy::Required) {
      if (!p.crc) mismatch("invariant: a Required side gets CRC", "on", "off");
    }
    if ((ini.crc == CrcPolicy::Off || rsp.crc == CrcPolicy::Off) && p.crc)
      mismatch("invariant: an Off side never runs CRC", "off", "on");
    if ((p.markers_to_responder && ini.markers == MarkerPolicy::Off) ||
        (p.markers_to_initiator && rsp.markers == MarkerPolicy::Off))
      mismatch("invariant: an Off side never sends markers", "no markers from it", describe(p));
    if (p.enhanced) {
      if (p.initiator_ord > p.responder_ird || p.responder_ord > p.initiator_ird)
        mismatch("invariant: ORD <= peer IRD", "ORD within IRD", describe(p));
      if (p.initiator_ord > ini.ord || p.responder_ord > rsp.ord)
        mismatch("invariant: ORD never raised", "ORD <= policy ORD", describe(p));
    }
    if (p.peer_to_peer != (ini.peer_to_peer && p.enhanced))
      mismatch("invariant: p2p iff the initiator asks and rev 2", "", describe(p));
    if (p.rtr == RtrType::Read && (p.initiator_ord == 0 || p.responder_ird == 0))
      mismatch("invariant: a Read RTR has an ORD and an IRD slot", "", describe(p));
    if (p.peer_to_peer) {
      auto m = static_cast<RtrMask>(p.rtr);
      if (std::popcount(static_cast<unsigned>(m)) != 1 || !(m & ini.rtr & rsp.rtr))
        mismatch("invariant: exactly one common RTR", mask_name(ini.rtr & rsp.rtr), mask_name(m));
    } else if (p.rtr != RtrType::None) {
      mismatch("invariant: no RTR without p2p", "none", std::string(rtr_name(p.rtr)));
    }
    if (ini.peer_to_peer && !p.peer_to_peer)
      mismatch("invariant: a P2P initiator never establishes without P2P", "", describe(p));
  }
  if (r.reject != (n.responder.kind == Kind::Rejected) ||
      r.reject != (n.initiator.kind == Kind::Rejected))
    mismatch("invariant: R=1 iff both sides see Rejected", fmt::format("R={}", int(r.reject)),
             kind_name(n.responder.kind) + "/" + kind_name(n.initiator.kind));
  if (n.initiator.kind == Kind::Terminated) {
    if (n.responder.kind != Kind::Terminated || !n.responder.error || !n.initiator.error ||
        n.responder.error->code != n.initiator.error->code)
      mismatch(
          "invariant: responder sees the initiator's Terminate",
          err_name(n.initiator.error ? std::optional(n.initiator.error->code) : std::nullopt),
          kind_name(n.responder.kind) + " " +
              err_name(n.responder.error ? std::optional(n.responder.error->code) : std::nullopt));
  }
  if (n.responder.kind == Kind::Rejected && !n.responder.error)
    mismatch("invariant: a responder that rejects says why", "an error", "none");
  if (n.initiator.kind == Kind::Terminated && !n.initiator.error)
    mismatch("invariant: an initiator that terminates says why", "an error", "none");

  // ---- the same exchange over the wire: frames survive encode/decode, and each side reaches
  // the same verdict on decoded frames ----
  auto qd = decode_frame(q.encode(), FrameKind::Request);
  auto rd = decode_frame(r.encode(), FrameKind::Reply);
  if (!qd || *qd != q)
    mismatch("invariant: Request round trip", describe(q),
             qd ? describe(*qd) : qd.error().to_string());
  if (!rd || *rd != r)
    mismatch("invariant: Reply round trip", describe(r),
             rd ? describe(*rd) : rd.error().to_string());
  if (qd && rd) {
    auto d = respond(rsp, *qd);
    if (d.reply != r)
      mismatch("invariant: respond() on the decoded Request", describe(r), describe(d.reply));
    Outcome o = finish_initiator(ini, *qd, *rd);
    if (o.kind != n.initiator.kind ||
        (o.kind == Kind::Established && o.params != n.initiator.params))
      mismatch("invariant: finish_initiator() on decoded frames", kind_name(n.initiator.kind),
               kind_name(o.kind));
    if (est && params_from_frames(*qd, *rd) != n.initiator.params)
      mismatch("invariant: params_from_frames() on decoded frames", describe(n.initiator.params),
               describe(params_from_frames(*qd, *rd)));
  }

  std::string cat = kind_name(e.initiator);
  if (e.error) {
    const char* code = *e.error == Errc::MpaBadReqRep         ? "0x04"
                       : *e.error == Errc::MpaInsufficientIrd ? "0x06"
                       : *e.error == Errc::MpaNoMatchingRtr   ? "0x07"
                                                              : "other";
    const char* why = e.reason == Reason::Crc       ? "crc"
                      : e.reason == Reason::Markers ? "markers"
                      : e.reason == Reason::Ird     ? "ird"
                                                    : "rtr";
    cat += fmt::format(" {} {}", code, why);
  }
  ++stats[cat];
  if (bad.size() != before) ++stats["(mismatching combinations)"];
}

TEST(NegotiationTable, EveryPolicyCombinationAgainstTheRfcOracle) {
  const auto policies = all_policies();
  // 2 revisions x 3 CRC x 3 marker x (1 + 5 RTR masks) x 2 strict x 4 IRD/ORD per side.
  ASSERT_EQ(policies.size(), 2u * 3 * 3 * (1 + 5) * 2 * 4);
  ASSERT_EQ(policies.size(), 864u);

  std::vector<std::string> bad;
  std::map<std::string, int> stats;
  std::size_t combinations = 0;
  for (const Policy& ini : policies)
    for (const Policy& rsp : policies) {
      check_combination(ini, rsp, bad, stats);
      ++combinations;
    }
  EXPECT_EQ(combinations, 746496u);
  EXPECT_EQ(combinations, policies.size() * policies.size());

  std::string summary;
  for (const auto& [k, v] : stats) summary += fmt::format("  {:>7}  {}\n", v, k);
  std::printf("negotiation table: %zu combinations\n%s", combinations, summary.c_str());

  // Every kind of verdict must occur, or the table is not testing what it claims to.
  for (const char* cat : {"Established", "Rejected 0x04 crc", "Rejected 0x04 markers",
                          "Rejected 0x06 ird", "Rejected 0x07 rtr", "Terminated 0x04 crc",
                          "Terminated 0x04 markers", "Terminated 0x06 ird", "Terminated 0x07 rtr"})
    EXPECT_GT(stats[cat], 0) << cat << "\n" << summary;
  int total = 0;
  for (const auto& [k, v] : stats)
    if (k != "(mismatching combinations)") total += v;
  EXPECT_EQ(static_cast<std::size_t>(total), combinations);

  EXPECT_TRUE(bad.empty()) << bad.size() << " disagreements; "
                           << stats["(mismatching combinations)"] << " combinations; first:\n"
                           <<
      [&] {
        std::string s;
        for (std::size_t i = 0; i < std::min<std::size_t>(bad.size(), 40); ++i) s += bad[i] + "\n";
        return s;
      }();
}

// ---- the oracle on a few cases worked out by hand (so the oracle itself is checked) ----------

TEST(NegotiationOracle, HandWorkedCases) {
  Policy siw;  // stock siw: rev 2, CRC optional, no markers, IRD/ORD 1
  siw.ird = 1;
  siw.ord = 1;
  Policy host = siw;
  host.crc = CrcPolicy::Required;
  auto e = oracle(siw, host);
  EXPECT_EQ(e.initiator, Kind::Established);
  EXPECT_TRUE(e.params.crc);
  EXPECT_EQ(e.params.initiator_ord, 1);

  Policy strict_off = siw;
  strict_off.crc = CrcPolicy::Off;
  e = oracle(host, strict_off);  // initiator demands CRC of an Off responder
  EXPECT_EQ(e.responder, Kind::Rejected);
  EXPECT_EQ(e.error, Errc::MpaBadReqRep);
  e = oracle(strict_off, host);  // responder demands CRC of an Off initiator
  EXPECT_EQ(e.initiator, Kind::Terminated);
  EXPECT_EQ(e.error, Errc::MpaBadReqRep);

  Policy p2p = siw;
  p2p.peer_to_peer = true;
  p2p.rtr = kSend;
  Policy p2p_rw = p2p;
  p2p_rw.rtr = kWrite | kRead;
  EXPECT_EQ(oracle(p2p, p2p_rw).error, Errc::MpaNoMatchingRtr);
  EXPECT_EQ(oracle(p2p, p2p_rw).responder, Kind::Rejected);
  EXPECT_EQ(oracle(p2p_rw, p2p_rw).params.rtr, RtrType::Write);
  // RFC 6581 §9.2: a responder without P2P of its own still echoes A and picks a type.
  EXPECT_EQ(oracle(p2p_rw, siw).initiator, Kind::Established);
  EXPECT_EQ(oracle(p2p_rw, siw).params.rtr, RtrType::Write);
  Policy no_rtr = siw;
  no_rtr.rtr = 0;
  EXPECT_EQ(oracle(p2p_rw, no_rtr).responder, Kind::Rejected);
  EXPECT_EQ(oracle(p2p_rw, no_rtr).error, Errc::MpaNoMatchingRtr);
  Policy v1 = siw;
  v1.revision = 1;
  EXPECT_EQ(oracle(p2p_rw, v1).initiator, Kind::Terminated);
  EXPECT_EQ(oracle(p2p_rw, v1).error, Errc::MpaNoMatchingRtr);
  // A zero-length Read RTR needs a Read slot on both sides.
  Policy read_only = p2p;
  read_only.rtr = kRead;
  Policy no_ird = siw;
  no_ird.ird = 0;
  EXPECT_EQ(oracle(read_only, no_ird).error, Errc::MpaNoMatchingRtr);
  EXPECT_EQ(oracle(read_only, siw).params.rtr, RtrType::Read);

  Policy big = siw;
  big.ord = 16;
  big.ird = 16;
  e = oracle(big, siw);  // initiator wants 16 Reads outstanding; responder can take 1
  EXPECT_EQ(e.initiator, Kind::Established);
  EXPECT_EQ(e.params.initiator_ord, 1);
  EXPECT_EQ(e.params.responder_ord, 1);
  Policy strict = siw;
  strict.strict_ird_ord = true;
  EXPECT_EQ(oracle(big, strict).responder, Kind::Rejected);
  EXPECT_EQ(oracle(big, strict).error, Errc::MpaInsufficientIrd);
  big.strict_ird_ord = true;
  EXPECT_EQ(oracle(big, siw).initiator, Kind::Terminated);
  EXPECT_EQ(oracle(big, siw).error, Errc::MpaInsufficientIrd);
}

// ---- precedence, spelled out -----------------------------------------------------------------

TEST(NegotiationPrecedence, ResponderChecksCrcBeforeMarkersBeforeIrdBeforeRtr) {
  Policy ini;
  ini.crc = CrcPolicy::Required;
  ini.markers = MarkerPolicy::Required;
  ini.ord = 16;
  ini.peer_to_peer = true;
  ini.rtr = kSend;
  Policy rsp;
  rsp.crc = CrcPolicy::Off;
  rsp.markers = MarkerPolicy::Off;
  rsp.ird = 1;
  rsp.strict_ird_ord = true;
  rsp.peer_to_peer = true;
  rsp.rtr = kWrite;

  auto n = negotiate(ini, rsp);
  ASSERT_EQ(n.responder.kind, Kind::Rejected);
  EXPECT_TRUE(contains(n.responder.error->rule, "CRC")) << n.responder.error->rule;
  rsp.crc = CrcPolicy::Optional;
  n = negotiate(ini, rsp);
  ASSERT_EQ(n.responder.kind, Kind::Rejected);
  EXPECT_EQ(n.responder.error->code, Errc::MpaBadReqRep);
  EXPECT_TRUE(contains(n.responder.error->rule, "marker")) << n.responder.error->rule;
  rsp.markers = MarkerPolicy::Optional;
  n = negotiate(ini, rsp);
  ASSERT_EQ(n.responder.kind, Kind::Rejected);
  EXPECT_EQ(n.responder.error->code, Errc::MpaInsufficientIrd);
  rsp.strict_ird_ord = false;
  n = negotiate(ini, rsp);
  ASSERT_EQ(n.responder.kind, Kind::Rejected);
  EXPECT_EQ(n.responder.error->code, Errc::MpaNoMatchingRtr);
  rsp.rtr = kAllRtr;
  n = negotiate(ini, rsp);
  EXPECT_EQ(n.responder.kind, Kind::Established);
  EXPECT_EQ(n.initiator.kind, Kind::Established);
  EXPECT_EQ(n.initiator.params.rtr, RtrType::Send);
  EXPECT_TRUE(n.initiator.params.markers_to_initiator);
  EXPECT_FALSE(n.initiator.params.markers_to_responder);
}

TEST(NegotiationPrecedence, InitiatorChecksCrcBeforeMarkersBeforeIrdBeforeRtr) {
  Policy ini;
  ini.crc = CrcPolicy::Off;
  ini.markers = MarkerPolicy::Off;
  ini.ord = 16;
  ini.strict_ird_ord = true;
  ini.peer_to_peer = true;
  Policy rsp;
  rsp.crc = CrcPolicy::Required;
  rsp.markers = MarkerPolicy::Required;
  rsp.ird = 1;
  rsp.peer_to_peer = false;

  auto n = negotiate(ini, rsp);
  ASSERT_EQ(n.initiator.kind, Kind::Terminated);
  EXPECT_EQ(n.initiator.error->code, Errc::MpaBadReqRep);
  EXPECT_TRUE(contains(n.initiator.error->rule, "CRC")) << n.initiator.error->rule;
  ini.crc = CrcPolicy::Optional;
  n = negotiate(ini, rsp);
  ASSERT_EQ(n.initiator.kind, Kind::Terminated);
  EXPECT_EQ(n.initiator.error->code, Errc::MpaBadReqRep);
  EXPECT_TRUE(contains(n.initiator.error->rule, "marker")) << n.initiator.error->rule;
  ini.markers = MarkerPolicy::Optional;
  n = negotiate(ini, rsp);
  ASSERT_EQ(n.initiator.kind, Kind::Terminated);
  EXPECT_EQ(n.initiator.error->code, Errc::MpaInsufficientIrd);
  ini.strict_ird_ord = false;
  rsp.revision = 1;  // a Rev 1 Reply cannot carry A
  n = negotiate(ini, rsp);
  ASSERT_EQ(n.initiator.kind, Kind::Terminated);
  EXPECT_EQ(n.initiator.error->code, Errc::MpaNoMatchingRtr);
  EXPECT_EQ(n.responder.kind, Kind::Terminated);
  EXPECT_EQ(n.responder.error->code, Errc::MpaNoMatchingRtr);
  rsp.revision = 2;
  n = negotiate(ini, rsp);
  EXPECT_EQ(n.initiator.kind, Kind::Established);
  EXPECT_TRUE(n.initiator.params.crc);
  EXPECT_TRUE(n.initiator.params.markers_to_responder);
  EXPECT_EQ(n.initiator.params.initiator_ord, 1);
  EXPECT_EQ(n.initiator.params.rtr, RtrType::Write);
}

// ---- Replies the table cannot produce: the initiator's checks one by one ----------------------

class NegotiationInitiator : public ::testing::Test {
 protected:
  NegotiationInitiator() {
    ini.ird = 8;
    ini.ord = 8;
    req = make_request(ini);
    rep.kind = FrameKind::Reply;
    rep.revision = 2;
    rep.enhanced = true;
    rep.params = EnhancedParams{.peer_to_peer = false, .ird = 8, .rtr = 0, .ord = 8};
  }
  void expect_terminated(Errc code) {
    Outcome o = finish_initiator(ini, req, rep);
    EXPECT_EQ(o.kind, Kind::Terminated);
    ASSERT_TRUE(o.error.has_value());
    EXPECT_EQ(o.error->code, code) << o.error->to_string();
    EXPECT_TRUE(contains(o.error->rule, "RFC")) << o.error->rule;
  }
  Policy ini;
  MpaFrame req, rep;
};

TEST_F(NegotiationInitiator, BaselineIsEstablished) {
  Outcome o = finish_initiator(ini, req, rep);
  ASSERT_EQ(o.kind, Kind::Established);
  EXPECT_EQ(o.params.initiator_ord, 8);
  EXPECT_EQ(o.params.responder_ord, 8);
}

TEST_F(NegotiationInitiator, RejectingReplyIsRejected) {
  rep.reject = true;
  rep.params.reset();  // a rejecting Reply may carry no prefix at all
  rep.revision = 3;    // and nothing else in it is looked at
  Outcome o = finish_initiator(ini, req, rep);
  EXPECT_EQ(o.kind, Kind::Rejected);
  EXPECT_FALSE(o.error.has_value());
}

TEST_F(NegotiationInitiator, ReplyRevisionAboveRequest) {
  ini.revision = 1;
  req = make_request(ini);
  ASSERT_EQ(req.revision, 1);
  expect_terminated(Errc::MpaBadReqRep);
}

TEST_F(NegotiationInitiator, Rev2ReplyWithoutEnhancedFlag) {
  rep.enhanced = false;
  rep.params.reset();
  expect_terminated(Errc::MpaBadReqRep);
}

TEST_F(NegotiationInitiator, EnhancedReplyWithoutPrefix) {
  rep.params.reset();
  expect_terminated(Errc::MpaBadReqRep);
}

TEST_F(NegotiationInitiator, Rev1ReplyToRev2RequestIsAccepted) {
  rep.revision = 1;
  rep.enhanced = false;
  rep.params.reset();
  Outcome o = finish_initiator(ini, req, rep);
  ASSERT_EQ(o.kind, Kind::Established);
  EXPECT_EQ(o.params.revision, 1);
  EXPECT_FALSE(o.params.enhanced);
}

TEST_F(NegotiationInitiator, ResponderOrdAboveInitiatorIrd) {
  rep.params->ord = 9;  // initiator IRD is 8
  expect_terminated(Errc::MpaInsufficientIrd);
  rep.params->ord = 8;
  EXPECT_EQ(finish_initiator(ini, req, rep).kind, Kind::Established);
}

TEST_F(NegotiationInitiator, StrictInitiatorOrdAboveResponderIrd) {
  rep.params->ird = 7;  // initiator ORD is 8
  Outcome o = finish_initiator(ini, req, rep);
  ASSERT_EQ(o.kind, Kind::Established);  // relaxed: ORD is lowered
  EXPECT_EQ(o.params.initiator_ord, 7);
  ini.strict_ird_ord = true;
  expect_terminated(Errc::MpaInsufficientIrd);
}

TEST_F(NegotiationInitiator, P2PReplySelectingNothingTwoOrAnUnofferedRtr) {
  ini.peer_to_peer = true;
  ini.rtr = kWrite | kRead;
  req = make_request(ini);
  rep.params->peer_to_peer = true;
  for (RtrMask chosen : {RtrMask{0}, RtrMask(kWrite | kRead), kSend, RtrMask(kSend | kWrite)}) {
    SCOPED_TRACE(mask_name(chosen));
    rep.params->rtr = chosen;
    expect_terminated(Errc::MpaNoMatchingRtr);
  }
  for (RtrMask chosen : {kWrite, kRead}) {
    rep.params->rtr = chosen;
    Outcome o = finish_initiator(ini, req, rep);
    ASSERT_EQ(o.kind, Kind::Established) << mask_name(chosen);
    EXPECT_EQ(static_cast<RtrMask>(o.params.rtr), chosen);
  }
  rep.params->peer_to_peer = false;  // responder left A clear
  rep.params->rtr = kWrite;
  expect_terminated(Errc::MpaNoMatchingRtr);
}

TEST(NegotiationResponder, EnhancedRequestWithoutPrefixIsRejected) {
  MpaFrame req;
  req.kind = FrameKind::Request;
  req.revision = 2;
  req.enhanced = true;
  auto d = respond(Policy{}, req);
  EXPECT_EQ(d.outcome.kind, Kind::Rejected);
  ASSERT_TRUE(d.outcome.error.has_value());
  EXPECT_EQ(d.outcome.error->code, Errc::MpaBadReqRep);
  EXPECT_TRUE(d.reply.reject);
  EXPECT_TRUE(decode_frame(d.reply.encode(), FrameKind::Reply).has_value());
}

TEST(NegotiationResponder, IrdOrdAreClampedTo14Bits) {
  Policy p;
  p.ird = 0xFFFF;
  p.ord = 0x4000;
  MpaFrame req = make_request(p);
  ASSERT_TRUE(req.params.has_value());
  EXPECT_EQ(req.params->ird, kMaxIrdOrd);
  EXPECT_EQ(req.params->ord, kMaxIrdOrd);
  auto d = respond(p, req);
  ASSERT_EQ(d.outcome.kind, Kind::Established);
  EXPECT_EQ(d.reply.params->ird, kMaxIrdOrd);
  EXPECT_EQ(d.reply.params->ord, kMaxIrdOrd);
  EXPECT_EQ(finish_initiator(p, req, d.reply).kind, Kind::Established);
}

TEST(NegotiationResponder, ReplyCarriesUlpPrivateDataAfterThePrefix) {
  Policy p;
  const Bytes ulp = {'h', 'i'};
  auto d = respond(p, make_request(p, ulp), ulp);
  Bytes b = d.reply.encode();
  ASSERT_EQ(b.size(), kFrameHeaderSize + 4 + 2);
  EXPECT_EQ(b[19], 6);
  EXPECT_EQ(b[24], 'h');
  EXPECT_EQ(b[25], 'i');
}

// ---- siw's real frames ----------------------------------------------------------------------

Policy siw_policy() {
  Policy p;  // stock siw: mpa_version 2, CRC not required (and not strict), never markers
  p.revision = 2;
  p.crc = CrcPolicy::Optional;
  p.markers = MarkerPolicy::Off;
  p.ird = 1;
  p.ord = 1;
  return p;
}

const Bytes kSiwRequest = raw_frame(kRequestKey, 0x10, 2, {0x00, 0x01, 0x00, 0x01});
const Bytes kHostCrcReply = raw_frame(kReplyKey, 0x50, 2, {0x00, 0x01, 0x00, 0x01});

TEST(NegotiationSiw, ClientCaptureRequestAndCrcReply) {
  // hostpeer_eth0_siw_client.pcap: siw requests C=0, the host responder answers C=1, and CRC is
  // then on in both directions.
  EXPECT_EQ(make_request(siw_policy()).encode(), kSiwRequest);
  Policy host = siw_policy();
  host.crc = CrcPolicy::Required;
  auto d = respond(host, decoded(kSiwRequest, FrameKind::Request));
  EXPECT_EQ(d.reply.encode(), kHostCrcReply);

  ConnectionParams p = params_from_frames(decoded(kSiwRequest, FrameKind::Request),
                                          decoded(kHostCrcReply, FrameKind::Reply));
  EXPECT_EQ(p.revision, 2);
  EXPECT_TRUE(p.enhanced);
  EXPECT_TRUE(p.crc);
  EXPECT_EQ(p.framing_to_responder(), (FramingConfig{true, false}));
  EXPECT_EQ(p.framing_to_initiator(), (FramingConfig{true, false}));
  EXPECT_EQ(p.initiator_ird, 1);
  EXPECT_EQ(p.initiator_ord, 1);
  EXPECT_EQ(p.responder_ird, 1);
  EXPECT_EQ(p.responder_ord, 1);
  EXPECT_FALSE(p.peer_to_peer);
  EXPECT_EQ(p.rtr, RtrType::None);
  EXPECT_EQ(describe(p),
            "rev 2 crc on markers i->r off r->i off initiator IRD/ORD 1/1 "
            "responder IRD/ORD 1/1");

  Outcome o = finish_initiator(siw_policy(), decoded(kSiwRequest, FrameKind::Request),
                               decoded(kHostCrcReply, FrameKind::Reply));
  EXPECT_EQ(o.kind, Kind::Established);
  EXPECT_EQ(o.params, p);
  EXPECT_EQ(d.outcome.params, p);
}

TEST(NegotiationSiw, ServerCaptureHostRequestsCrc) {
  // hostpeer_eth0_siw_server.pcap: the host initiator asks C=1; siw accepts and echoes C=1.
  const Bytes req = raw_frame(kRequestKey, 0x50, 2, {0x00, 0x01, 0x00, 0x01});
  const Bytes rep = raw_frame(kReplyKey, 0x50, 2, {0x00, 0x01, 0x00, 0x01});
  Policy host = siw_policy();
  host.crc = CrcPolicy::Required;
  EXPECT_EQ(make_request(host).encode(), req);
  auto d = respond(siw_policy(), decoded(req, FrameKind::Request));
  EXPECT_EQ(d.reply.encode(), rep);
  EXPECT_TRUE(
      params_from_frames(decoded(req, FrameKind::Request), decoded(rep, FrameKind::Reply)).crc);
}

TEST(NegotiationSiw, P2PCapture) {
  // siw_p2p.pcap: request pd 80 01 c0 01 (A, IRD 1, Write+Read RTR, ORD 1), reply 80 01 80 01.
  const Bytes req = raw_frame(kRequestKey, 0x10, 2, {0x80, 0x01, 0xc0, 0x01});
  const Bytes rep = raw_frame(kReplyKey, 0x10, 2, {0x80, 0x01, 0x80, 0x01});
  Policy p = siw_policy();
  p.peer_to_peer = true;
  p.rtr = kWrite | kRead;
  EXPECT_EQ(make_request(p).encode(), req);
  auto d = respond(p, decoded(req, FrameKind::Request));
  EXPECT_EQ(d.reply.encode(), rep);
  ConnectionParams c =
      params_from_frames(decoded(req, FrameKind::Request), decoded(rep, FrameKind::Reply));
  EXPECT_TRUE(c.peer_to_peer);
  EXPECT_EQ(c.rtr, RtrType::Write);
  EXPECT_FALSE(c.crc);
  EXPECT_EQ(
      finish_initiator(p, decoded(req, FrameKind::Request), decoded(rep, FrameKind::Reply)).kind,
      Kind::Established);
}

TEST(NegotiationSiw, MpaV1Capture) {
  // siw_mpa_v1.pcap: both frames flags 0x00, Rev 1, no private data.
  const Bytes req = raw_frame(kRequestKey, 0x00, 1, {});
  const Bytes rep = raw_frame(kReplyKey, 0x00, 1, {});
  Policy p = siw_policy();
  p.revision = 1;
  EXPECT_EQ(make_request(p).encode(), req);
  EXPECT_EQ(respond(p, decoded(req, FrameKind::Request)).reply.encode(), rep);
  // A Rev 2 siw answering a Rev 1 Request also answers Rev 1.
  EXPECT_EQ(respond(siw_policy(), decoded(req, FrameKind::Request)).reply.encode(), rep);
  ConnectionParams c =
      params_from_frames(decoded(req, FrameKind::Request), decoded(rep, FrameKind::Reply));
  EXPECT_EQ(c, (ConnectionParams{.revision = 1}));
}

TEST(NegotiationSiw, OffResponderRejectsSiwCrcRequest) {
  // A CRC-strict-off responder (siw's mpa_crc_strict with CRC disabled) facing a C=1 Request.
  const Bytes req = raw_frame(kRequestKey, 0x50, 2, {0x00, 0x01, 0x00, 0x01});
  Policy off = siw_policy();
  off.crc = CrcPolicy::Off;
  auto d = respond(off, decoded(req, FrameKind::Request));
  EXPECT_EQ(d.outcome.kind, Kind::Rejected);
  EXPECT_EQ(d.outcome.error->code, Errc::MpaBadReqRep);
  EXPECT_EQ(d.reply.encode(), raw_frame(kReplyKey, 0x30, 2, {0, 0, 0, 0}));
}

TEST(NegotiationSiw, MakeRejectOnSiwRequest) {
  const MpaFrame req = decoded(kSiwRequest, FrameKind::Request);
  MpaFrame r = make_reject(req);
  EXPECT_EQ(r.encode(), raw_frame(kReplyKey, 0x30, 2, {0x00, 0x00, 0x00, 0x00}));
  const Bytes why = {'b', 'u', 's', 'y'};
  r = make_reject(req, why);
  const Bytes want = raw_frame(kReplyKey, 0x30, 2, {0x00, 0x00, 0x00, 0x00, 'b', 'u', 's', 'y'});
  EXPECT_EQ(r.encode(), want);
  MpaFrame back = decoded(want, FrameKind::Reply);
  EXPECT_EQ(back, r);
  EXPECT_EQ(back.private_data, why);  // the ULP sees its reason, not the prefix
  Outcome o = finish_initiator(siw_policy(), req, back);
  EXPECT_EQ(o.kind, Kind::Rejected);
  EXPECT_FALSE(o.error.has_value());

  // Rev 1 Request: a Rev 1 rejecting Reply without any prefix.
  const MpaFrame v1 = decoded(raw_frame(kRequestKey, 0x00, 1, {}), FrameKind::Request);
  EXPECT_EQ(make_reject(v1, why).encode(), raw_frame(kReplyKey, 0x20, 1, why));
  // The CRC/marker wishes of the Request are not echoed in a reject.
  const MpaFrame cm =
      decoded(raw_frame(kRequestKey, 0xd0, 2, {0x80, 0x10, 0x80, 0x10}), FrameKind::Request);
  EXPECT_EQ(make_reject(cm).encode(), raw_frame(kReplyKey, 0x30, 2, {0, 0, 0, 0}));
}

}  // namespace
}  // namespace iwarp::mpa
