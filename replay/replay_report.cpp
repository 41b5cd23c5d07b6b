#include "replay/replay_report.hpp"

#include <fmt/format.h>

#include <map>
#include <random>
#include <stdexcept>

namespace iwarp::replay {

namespace {

using nlohmann::json;

std::string order_text(const std::optional<Permutation>& order) {
  return order ? "seeded disorder " + order->describe() : "capture order";
}

std::string params_text(const mpa::ConnectionParams& p) {
  return mpa::describe(p);
}

// "10 RDMA_READ SUCCESS, 1 RECV WR_FLUSH_ERR"
std::string cqe_summary(const std::vector<rnic::Wc>& cqes) {
  std::map<std::string, std::uint64_t> by;
  for (const auto& w : cqes)
    ++by[fmt::format("{} {}", rnic::to_string(w.opcode), rnic::to_string(w.status))];
  std::string s;
  for (const auto& [k, n] : by) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n, k);
  return s.empty() ? "none" : s;
}

json wc_json(const rnic::Wc& w) {
  json j{{"wr_id", w.wr_id},
         {"status", rnic::to_string(w.status)},
         {"opcode", rnic::to_string(w.opcode)},
         {"byte_len", w.byte_len}};
  if (w.wc_flags & rnic::kWcWithImm) j["imm_data"] = w.imm_data;
  if (w.wc_flags & rnic::kWcWithInv) j["invalidated_rkey"] = w.invalidated_rkey.value();
  if (w.vendor_err) j["vendor_err"] = w.vendor_err;
  j["wc_flags"] = w.wc_flags;
  return j;
}

json counts_json(const Counts& c) {
  return json{{"placed_in_order", c.placed_in_order},
              {"placed_beyond_hole", c.placed_beyond_hole},
              {"deferred", c.deferred},
              {"deferred_errors", c.deferred_errors},
              {"holes_opened", c.holes_opened},
              {"holes_closed", c.holes_closed},
              {"releases", c.releases},
              {"released_sends", c.released_sends},
              {"released_read_responses", c.released_read_responses},
              {"released_read_requests", c.released_read_requests},
              {"released_writes", c.released_writes},
              {"completions", c.completions},
              {"doorbells", c.doorbells},
              {"terminates_sent", c.terminates_sent},
              {"terminates_received", c.terminates_received},
              {"violations", c.violations},
              {"duplicates", c.duplicates}};
}

json finding_json(const Finding& f) {
  return json{{"endpoint", to_string(f.side)},
              {"frame", f.frame},
              {"text", f.text},
              {"expected", f.expected},
              {"why", f.why}};
}

json limit_json(const LimitFinding& f) {
  return json{{"limit", f.limit}, {"allowed", f.allowed}, {"needed", f.needed}, {"text", f.text}};
}

std::string hex64(std::uint64_t v) {
  return fmt::format("0x{:016x}", v);
}

std::string counts_text(const Counts& c) {
  return fmt::format(
      "placed {} FPDU(s) in order and {} beyond a hole; {} deferred; holes opened {} and "
      "closed {}; {} release(s) at a hole's closing (Send completions {}, Read completions {}, "
      "Read Requests {}, Write segments {}); {} completion(s); {} doorbell(s); {} duplicate(s); "
      "Terminates sent {} and received {}; violations {}",
      c.placed_in_order, c.placed_beyond_hole, c.deferred + c.deferred_errors, c.holes_opened,
      c.holes_closed, c.releases, c.released_sends, c.released_read_responses,
      c.released_read_requests, c.released_writes, c.completions, c.doorbells, c.duplicates,
      c.terminates_sent, c.terminates_received, c.violations);
}

std::uint64_t t0_of(const Plan& plan) {
  std::uint64_t t0 = UINT64_MAX;
  for (const auto& c : plan.connections) t0 = std::min(t0, c.first_time_us);
  return t0 == UINT64_MAX ? 0 : t0;
}

}  // namespace

bool PermutationCheck::identical() const {
  for (const auto& d : differences)
    if (!d.empty()) return false;
  return true;
}

int exit_status(const ReplayResult& r, const std::optional<PermutationCheck>& check) {
  if (r.unexpected > 0) return 1;
  if (check && !check->identical()) return 1;
  return 0;
}

std::string format_event(const TimelineEntry& t, std::uint64_t t0_us) {
  const double secs = static_cast<double>(t.time_us - std::min(t.time_us, t0_us)) / 1e6;
  const auto& e = t.event;
  std::string where;
  switch (e.kind) {
    case rnic::RxEvent::Kind::Completion:
    case rnic::RxEvent::Kind::Doorbell:
      break;
    default:
      where =
          e.end > e.offset ? fmt::format("@{}..{}", e.offset, e.end) : fmt::format("@{}", e.offset);
      break;
  }
  std::string what = std::string(event_name(e.kind));
  if (e.beyond_hole && e.kind != rnic::RxEvent::Kind::Deferred &&
      e.kind != rnic::RxEvent::Kind::DeferredError)
    what += " beyond-hole";
  std::string detail = e.text;
  if (e.kind == rnic::RxEvent::Kind::Released && detail.empty())
    detail = fmt::format(
        "{} Send completion(s), {} Read completion(s), {} Read Request(s), {} "
        "Write segment(s)",
        e.sends, e.read_responses, e.read_requests, e.writes);
  return fmt::format("{:>7} {:>10.6f} {}  {:<26} {:<14} {}", t.frame, secs, to_string(t.side), what,
                     where, detail);
}

std::string format_text(const Plan& plan, const ReplayResult& r,
                        const std::optional<Permutation>& order,
                        const std::optional<PermutationCheck>& check, const ReportOptions& o) {
  std::string s;
  write_text([&](std::string_view piece) { s += piece; }, plan, r, order, check, o);
  return s;
}

void write_text(const ReportSink& out, const Plan& plan, const ReplayResult& r,
                const std::optional<Permutation>& order,
                const std::optional<PermutationCheck>& check, const ReportOptions& o) {
  auto line = [&](std::string l) {
    l += '\n';
    out(l);
  };
  line(fmt::format("{}: {} frames, {} iWARP connection(s) replayed in {}", plan.path, plan.frames,
                   plan.connections.size(), order_text(order)));
  for (const auto& p : plan.problems) line("capture problem: " + p);
  const std::uint64_t t0 = t0_of(plan);
  for (std::size_t i = 0; i < plan.connections.size() && i < r.connections.size(); ++i) {
    const auto& cp = plan.connections[i];
    const auto& cr = r.connections[i];
    line(fmt::format("connection c{}: {} (I) -> {} (R)", cp.flow, cp.initiator.to_string(),
                     cp.responder.to_string()));
    line("  negotiated: " + params_text(cp.params));
    for (int e = 0; e < 2; ++e) {
      const auto& ep = cp.ep[e];
      line(
          fmt::format("  learned for {}: {} STag(s) shadowed ({} octets), {} receive buffer(s), "
                      "{} RDMA Read(s) and {} atomic(s) to post",
                      to_string(static_cast<Side>(e)), ep.regions.size(), ep.shadow_bytes(),
                      ep.recvs.size(), ep.reads.size(), ep.atomics.size()));
    }
    line(fmt::format("  planned memory: {} octets (limit kMaxConnectionMemory = {})",
                     cp.planned_bytes, plan.limits.max_total));
    for (const auto& n : cp.notes) line("  note: " + n);
    for (const auto& f : cp.limits) line("  limit reached: " + f.text);
    if (o.timeline_limit > 0 || o.timeline_all) {
      const std::uint64_t n = o.timeline_all
                                  ? kept_timeline_events(cr)
                                  : std::min<std::uint64_t>(o.timeline_limit, cr.timeline.size());
      line(fmt::format("  timeline ({} event(s){}):", cr.timeline_events,
                       n < cr.timeline_events
                           ? fmt::format(", the first {} shown; --timeline for all", n)
                           : ""));
      line(fmt::format("  {:>7} {:>10} {}  {:<26} {:<14} {}", "frame", "time", "E", "event",
                       "where", "detail"));
      std::uint64_t k = 0;
      for_each_timeline_event(cr, [&](const TimelineEntry& t) {
        if (k++ >= n) return;
        line("  " + format_event(t, t0));
        if (o.explain) line("            why: " + o.explain(t));
      });
    }
    line(fmt::format("  {} step(s), {} segment(s) injected", cr.steps, cr.segments_injected));
    if (order) {
      const auto& d0 = cr.disorder[0];
      const auto& d1 = cr.disorder[1];
      line(
          fmt::format("  disorder: {} segment(s) held back, {} duplicated, {} overlapping "
                      "retransmission(s), {} re-cut into two",
                      d0.held + d1.held, d0.duplicated + d1.duplicated,
                      d0.overlapped + d1.overlapped, cr.split));
    }
    line("  summary: " + counts_text(cr.counts));
    for (int e = 0; e < 2; ++e) {
      const auto& ep = cr.ep[e];
      line(fmt::format("  {}: send CQ: {}; receive CQ: {}", to_string(static_cast<Side>(e)),
                       cqe_summary(ep.send_cqes), cqe_summary(ep.recv_cqes)));
      std::uint64_t written = 0;
      for (const auto& m : ep.memory) written += m.nonzero;
      line(
          fmt::format("     shadow memory {} octets ({} non-zero), hash {}; queue pair {}{}; "
                      "it sent {} octets",
                      ep.shadow_bytes, written, hex64(ep.memory_hash), ep.state,
                      ep.closed ? " (" + *ep.closed + ")" : "", ep.transmitted));
      for (const auto& p : ep.problems) line("     problem: " + p);
    }
    for (const auto& f : cr.terminates_received)
      line(fmt::format("  Terminate received by {} at frame {}: {} ({})", to_string(f.side),
                       f.frame, f.text, f.why));
    for (const auto& f : cr.terminates_sent)
      line(fmt::format("  Terminate sent by {} at frame {}: {} ({})", to_string(f.side), f.frame,
                       f.text, f.why));
    for (const auto& f : cr.violations)
      if (!f.expected)
        line(fmt::format("  VIOLATION not in the trace, found by {} at frame {}: {}",
                         to_string(f.side), f.frame, f.text));
    for (const auto& n : cr.not_reproduced) line("  not reproduced: " + n);
    if (cr.cut_short.empty()) {
      line("  the exchange is complete in the capture");
    } else {
      line("  exchange cut short:");
      for (const auto& c : cr.cut_short) line("    " + c);
    }
    if (check && i < check->differences.size()) {
      if (check->differences[i].empty())
        line("  against capture order: identical CQEs and shadow memory");
      else
        for (const auto& d : check->differences[i]) line("  DIFFERS from capture order: " + d);
    }
  }
  for (const auto& sk : plan.skipped)
    line(fmt::format("connection c{}: {} -> {}: not replayed: {}", sk.flow, sk.client.to_string(),
                     sk.server.to_string(), sk.reason));
  line("total: " + counts_text(r.totals));
  const int status = exit_status(r, check);
  if (status == 0)
    line("result: replayed cleanly: every Terminate and violation is one the trace holds");
  else if (r.unexpected)
    line(fmt::format("result: {} Terminate(s)/violation(s) the trace does not hold", r.unexpected));
  else
    line("result: the permuted replay differs from the capture-order replay");
}

// One timeline event in the JSON report.
json event_json(const TimelineEntry& t, std::uint64_t t0,
                const std::function<std::string(const TimelineEntry&)>& explain) {
  json j{{"frame", t.frame},
         {"time", static_cast<double>(t.time_us - std::min(t.time_us, t0)) / 1e6},
         {"endpoint", to_string(t.side)},
         {"event", event_name(t.event.kind)},
         {"offset", t.event.offset},
         {"end", t.event.end},
         {"beyond_hole", t.event.beyond_hole},
         {"sends", t.event.sends},
         {"read_responses", t.event.read_responses},
         {"read_requests", t.event.read_requests},
         {"writes", t.event.writes},
         {"text", t.event.text}};
  if (explain) j["explanation"] = explain(t);
  return j;
}

json to_json(const Plan& plan, const ReplayResult& r, const std::optional<Permutation>& order,
             const std::optional<PermutationCheck>& check, bool timeline,
             const std::function<std::string(const TimelineEntry&)>& explain) {
  const std::uint64_t t0 = t0_of(plan);
  json doc{{"file", plan.path},
           {"frames", plan.frames},
           {"order", order_text(order)},
           {"problems", plan.problems}};
  json conns = json::array();
  for (std::size_t i = 0; i < plan.connections.size() && i < r.connections.size(); ++i) {
    const auto& cp = plan.connections[i];
    const auto& cr = r.connections[i];
    json c{{"connection", cp.flow},
           {"initiator", cp.initiator.to_string()},
           {"responder", cp.responder.to_string()},
           {"negotiated", params_text(cp.params)},
           {"notes", cp.notes},
           {"planned_bytes", cp.planned_bytes},
           {"steps", cr.steps},
           {"segments_injected", cr.segments_injected},
           {"counts", counts_json(cr.counts)},
           {"cut_short", cr.cut_short},
           {"complete", cr.cut_short.empty()},
           {"not_reproduced", cr.not_reproduced},
           {"unexpected", cr.unexpected()}};
    json eps = json::object();
    for (int e = 0; e < 2; ++e) {
      const auto& pe = cp.ep[e];
      const auto& re = cr.ep[e];
      json regions = json::array();
      for (const auto& rp : pe.regions)
        regions.push_back(json{{"stag", rp.stag.value()},
                               {"begin_to", rp.begin_to},
                               {"end_to", rp.end_to},
                               {"why", rp.why}});
      json memory = json::array();
      for (const auto& m : re.memory)
        memory.push_back(json{{"kind", m.kind},
                              {"stag", m.stag.value()},
                              {"base_to", m.base_to},
                              {"hash", hex64(m.hash)},
                              {"nonzero", m.nonzero}});
      json sq = json::array(), rq = json::array();
      for (const auto& w : re.send_cqes) sq.push_back(wc_json(w));
      for (const auto& w : re.recv_cqes) rq.push_back(wc_json(w));
      json holes = json::array();
      for (const auto& h : re.holes_open)
        holes.push_back(json{{"begin", h.hole.begin},
                             {"end", h.hole.end},
                             {"placed_fpdus", h.placed_fpdus},
                             {"sends", h.sends},
                             {"read_responses", h.read_responses},
                             {"read_requests", h.read_requests}});
      json ej{{"learned",
               {{"regions", regions},
                {"receive_buffers", pe.recvs.size()},
                {"reads", pe.reads.size()},
                {"atomics", pe.atomics.size()}}},
              {"send_cqes", sq},
              {"recv_cqes", rq},
              {"memory", memory},
              {"memory_hash", hex64(re.memory_hash)},
              {"shadow_bytes", re.shadow_bytes},
              {"holes_open", holes},
              {"segments",
               {{"segments", re.segments.segments},
                {"in_order", re.segments.in_order_segments},
                {"out_of_order", re.segments.ooo_segments},
                {"duplicates", re.segments.duplicate_segments},
                {"holes_opened", re.segments.holes_opened},
                {"holes_closed", re.segments.holes_closed},
                {"ooo_fpdus_placed", re.segments.ooo_fpdus_placed}}},
              {"state", re.state},
              {"transmitted", re.transmitted},
              {"problems", re.problems}};
      if (re.closed) ej["closed"] = *re.closed;
      eps[std::string(to_string(static_cast<Side>(e)))] = std::move(ej);
    }
    c["endpoints"] = std::move(eps);
    json lims = json::array();
    for (const auto& f : cp.limits) lims.push_back(limit_json(f));
    c["limits"] = std::move(lims);
    json ts = json::array(), tr = json::array(), vs = json::array();
    for (const auto& f : cr.terminates_sent) ts.push_back(finding_json(f));
    for (const auto& f : cr.terminates_received) tr.push_back(finding_json(f));
    for (const auto& f : cr.violations) vs.push_back(finding_json(f));
    c["terminates_sent"] = std::move(ts);
    c["terminates_received"] = std::move(tr);
    c["violations"] = std::move(vs);
    json trace_terms = json::array();
    for (const auto& t : cp.terminates)
      trace_terms.push_back(json{{"from", to_string(t.from)},
                                 {"frame", t.frame},
                                 {"layer", t.layer},
                                 {"etype", t.etype},
                                 {"ecode", t.ecode},
                                 {"text", t.text}});
    c["trace_terminates"] = std::move(trace_terms);
    if (check && i < check->differences.size())
      c["permutation_differences"] = check->differences[i];
    if (timeline) {
      json tl = json::array();
      for_each_timeline_event(
          cr, [&](const TimelineEntry& t) { tl.push_back(event_json(t, t0, explain)); });
      c["timeline"] = std::move(tl);
    }
    conns.push_back(std::move(c));
  }
  doc["connections"] = std::move(conns);
  json skipped = json::array();
  for (const auto& sk : plan.skipped) {
    json j{{"connection", sk.flow},
           {"client", sk.client.to_string()},
           {"server", sk.server.to_string()},
           {"reason", sk.reason}};
    if (sk.limit) j["limit"] = limit_json(*sk.limit);
    skipped.push_back(std::move(j));
  }
  doc["skipped"] = std::move(skipped);
  const auto& l = plan.limits;
  doc["limits"] = json{{"kMaxMessageSize", l.max_message}, {"kMaxStagSpan", l.max_region},
                       {"kMaxStags", l.max_stags},         {"kMaxReceives", l.max_receives},
                       {"kMaxRequests", l.max_requests},   {"kMaxConnectionMemory", l.max_total},
                       {"kMaxStreamOffset", l.max_stream}};
  doc["totals"] = counts_json(r.totals);
  doc["unexpected"] = r.unexpected;
  if (check) {
    doc["permutation_check"] =
        json{{"permutation", check->permutation.describe()}, {"identical", check->identical()}};
  }
  doc["exit_status"] = exit_status(r, check);
  return doc;
}

void write_json(const ReportSink& out, const Plan& plan, const ReplayResult& r,
                const std::optional<Permutation>& order,
                const std::optional<PermutationCheck>& check, bool timeline,
                const std::function<std::string(const TimelineEntry&)>& explain) {
  json doc = to_json(plan, r, order, check, false);
  if (!timeline) {
    out(doc.dump(1));
    out("\n");
    return;
  }
  // Each connection's timeline stands in the document as a string a capture cannot foresee (a
  // random number between control characters), replaced as it is written by the events, each
  // dumped as dump(1) would at that depth.
  auto& conns = doc["connections"];
  std::vector<std::string> marks;
  const std::uint64_t nonce =
      (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  for (std::size_t i = 0; i < conns.size(); ++i) {
    conns[i]["timeline"] = fmt::format("\x01timeline {} {:016x}\x01", i, nonce);
    marks.push_back(json(conns[i]["timeline"]).dump());
  }
  const std::string text = doc.dump(1);
  const std::uint64_t t0 = t0_of(plan);
  std::size_t at = 0;
  for (std::size_t i = 0; i < marks.size(); ++i) {
    const auto m = text.find(marks[i], at);
    if (m == std::string::npos)
      throw std::logic_error("the JSON report lost a timeline's place");  // (cannot happen)
    out(std::string_view(text).substr(at, m - at));
    at = m + marks[i].size();
    // The member's indent: the spaces that begin its line.
    const auto bol = text.rfind('\n', m) + 1;
    const auto indent = text.find_first_not_of(' ', bol) - bol;
    const std::string pad(indent + 1, ' ');
    std::uint64_t n = 0;
    for_each_timeline_event(r.connections[i], [&](const TimelineEntry& t) {
      std::string e = event_json(t, t0, explain).dump(1);
      std::string piece = n++ ? ",\n" : "[\n";
      piece += pad;
      for (const char c : e) {
        piece += c;
        if (c == '\n') piece += pad;
      }
      out(piece);
    });
    out(n ? "\n" + std::string(indent, ' ') + "]" : std::string("[]"));
  }
  out(std::string_view(text).substr(at));
  out("\n");
}

}  // namespace iwarp::replay
