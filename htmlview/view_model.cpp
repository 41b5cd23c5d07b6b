#include "htmlview/view_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <stdexcept>
#include <tuple>
#include <variant>

#include "ddp/rdmap_opcode.hpp"
#include "ladder/layout.hpp"
#include "ladder/model.hpp"
#include "ladder/svg_writer.hpp"
#include "replay/replay_explain.hpp"
#include "replay/replay_report.hpp"
#include "replay/stream_ranges.hpp"
#include "trace/explain.hpp"
#include "trace/trace_decoder.hpp"

namespace iwarp::htmlview {

namespace {

using mpa::Direction;
using nlohmann::json;

std::string dir_name(Direction d) {
  return d == Direction::FromInitiator ? "I>R" : "R>I";
}
std::string hex32(std::uint32_t v) {
  return fmt::format("0x{:08x}", v);
}
std::string hex64(std::uint64_t v) {
  return fmt::format("0x{:x}", v);
}

// One field of a decoded header: its layer, name (as rnic decode --json names it) and value.
void field(json& fields, const char* layer, const char* name, const std::string& value) {
  fields.push_back(json::array({layer, name, value}));
}

// The header fields of one FPDU (RFC 5044 §6.1 MPA, RFC 5041 §5.1/§5.2 DDP, RFC 5040 §4.1
// RDMAP, and the bodies of RFC 5040 §4.4/§4.8 and RFC 7306 §4).
json fpdu_fields(const trace::Record& r) {
  json f = json::array();
  field(f, "MPA", "ulpdu_length", std::to_string(r.ulpdu_length));
  field(f, "MPA", "wire_length", std::to_string(r.length));
  field(f, "MPA", "markers", std::to_string(r.markers));
  field(f, "MPA", "crc", std::string(mpa::to_string(r.crc)));
  if (r.crc != mpa::CrcStatus::NotChecked) field(f, "MPA", "crc_value", hex32(r.crc_value));
  if (!r.ddp) return f;
  const auto& h = *r.ddp;
  field(f, "DDP", "tagged", h.tagged ? "1" : "0");
  field(f, "DDP", "last", h.last ? "1" : "0");
  field(f, "DDP", "dv", std::to_string(h.dv));
  if (h.tagged) {
    field(f, "DDP", "stag", hex32(h.stag.value()));
    field(f, "DDP", "to", hex64(h.to.value()));
  } else {
    field(f, "DDP", "rsvd_ulp", hex32(h.rsvd_ulp));
    field(f, "DDP", "qn", std::to_string(h.qn.value()));
    field(f, "DDP", "msn", std::to_string(h.msn.value()));
    field(f, "DDP", "mo", std::to_string(h.mo.value()));
  }
  field(f, "RDMAP", "rv", std::to_string(h.rv));
  field(f, "RDMAP", "opcode", fmt::format("0x{:x}", h.opcode));
  field(f, "RDMAP", "opcode_name", ladder::opcode_label(h.opcode));
  field(f, "RDMAP", "payload_length", std::to_string(r.payload_length));
  if (const auto* rr = std::get_if<rdmap::ReadRequest>(&r.body)) {
    field(f, "RDMAP", "sink_stag", hex32(rr->sink_stag.value()));
    field(f, "RDMAP", "sink_to", hex64(rr->sink_to.value()));
    field(f, "RDMAP", "read_size", std::to_string(rr->size));
    field(f, "RDMAP", "src_stag", hex32(rr->src_stag.value()));
    field(f, "RDMAP", "src_to", hex64(rr->src_to.value()));
  } else if (const auto* t = std::get_if<rdmap::Terminate>(&r.body)) {
    field(f, "RDMAP", "term_layer", std::to_string(t->layer));
    field(f, "RDMAP", "term_etype", std::to_string(t->etype));
    field(f, "RDMAP", "term_ecode", fmt::format("0x{:02x}", t->ecode));
  } else if (const auto* a = std::get_if<rdmap::AtomicRequest>(&r.body)) {
    field(f, "RDMAP", "atomic_op", std::string(rdmap::atomic_op_name(a->op)));
    field(f, "RDMAP", "request_id", std::to_string(a->request_id));
    field(f, "RDMAP", "stag", hex32(a->stag.value()));
    field(f, "RDMAP", "to", hex64(a->to.value()));
  } else if (const auto* ar = std::get_if<rdmap::AtomicResponse>(&r.body)) {
    field(f, "RDMAP", "request_id", std::to_string(ar->request_id));
    field(f, "RDMAP", "original_value", hex64(ar->original_value));
  }
  return f;
}

json mpa_fields(const mpa::MpaFrame& m) {
  json f = json::array();
  field(f, "MPA", "kind", m.kind == mpa::FrameKind::Request ? "request" : "reply");
  field(f, "MPA", "revision", std::to_string(m.revision));
  field(f, "MPA", "markers", m.markers ? "1" : "0");
  field(f, "MPA", "crc", m.crc ? "1" : "0");
  field(f, "MPA", "reject", m.reject ? "1" : "0");
  field(f, "MPA", "enhanced", m.enhanced ? "1" : "0");
  if (m.params) {
    field(f, "MPA", "ird", std::to_string(m.params->ird));
    field(f, "MPA", "ord", std::to_string(m.params->ord));
  }
  field(f, "MPA", "private_data_length", std::to_string(m.private_data.size()));
  return f;
}

// One event of the view while it is being filled.
struct Ev {
  const ladder::Connection* conn = nullptr;
  const ladder::Event* e = nullptr;
  json segments = json::array();
  std::uint64_t segment_count = 0;
  std::uint64_t first_offset = 0, end_offset = 0, last_frame = 0, wire = 0;
  bool started = false, closed = false;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> fpdus;  // offset, length (for bytes)
  std::optional<rdmap::ReadRequest> read;
  std::optional<rdmap::AtomicRequest> atomic;
  std::uint32_t inv_stag = 0;
  bool has_inv = false;
};

// A message's key while its segments arrive: connection, direction, tagged, STag or QN, MSN.
using OpenKey = std::tuple<std::size_t, int, bool, std::uint32_t, std::uint32_t>;

OpenKey key_of(std::size_t flow, Direction d, const ddp::DdpHeader& h) {
  return {flow, static_cast<int>(d), h.tagged, h.tagged ? h.stag.value() : h.qn.value(),
          h.tagged ? 0u : h.msn.value()};
}

bool starts(const ladder::Message& m, const ddp::DdpHeader& h) {
  if (h.opcode != m.opcode || h.tagged != m.tagged) return false;
  if (h.tagged) return h.stag.value() == m.stag && h.to.value() == m.to;
  return h.qn.value() == m.qn && h.msn.value() == m.msn && h.mo.value() == m.mo;
}

// Hands a capture's segments to the decoder until every event has its last segment.
class UntilEventsClose final : public trace::SegmentSink {
 public:
  UntilEventsClose(trace::FileDecoder& dec, const std::vector<Ev>& evs) : dec_(dec), evs_(evs) {}
  void on_segment(std::size_t index, trace::TcpFlow& flow, int dir,
                  const trace::SegmentView& s) override {
    dec_.on_segment(index, flow, dir, s);
    while (closed_ < evs_.size() && evs_[closed_].closed) ++closed_;
  }
  bool done() const override { return closed_ == evs_.size(); }

 private:
  trace::FileDecoder& dec_;
  const std::vector<Ev>& evs_;
  std::size_t closed_ = 0;  // events before this one are closed
};

// What one endpoint's queue pair has done so far, from the replay's timeline.
struct SideState {
  std::optional<std::string> ended;
  std::map<std::uint64_t, std::uint64_t> holes;  // begin -> end
  std::uint64_t placed = 0, completions = 0, recv_done = 0, reads_done = 0, atomics_done = 0;
  std::uint64_t reads_posted = 0, atomics_posted = 0, deferred = 0, released = 0;
  // [b, e) of the stream arrived: what is still missing of each hole stays open.
  void fill(std::uint64_t b, std::uint64_t e) {
    std::map<std::uint64_t, std::uint64_t> left;
    for (auto [hb, he] : holes) {
      if (he <= b || hb >= e) {
        left[hb] = he;
        continue;
      }
      if (hb < b) left[hb] = b;
      if (he > e) left[e] = he;
    }
    holes = std::move(left);
  }
  void apply(const rnic::RxEvent& e, std::uint64_t frame) {
    using K = rnic::RxEvent::Kind;
    switch (e.kind) {
      case K::Placed:
        ++placed;
        fill(e.offset, e.end);  // octets placed in order fill the front of a hole too
        break;
      case K::Deferred:
        ++deferred;
        break;
      case K::HoleOpened:
        holes[e.offset] = e.end;
        break;
      case K::HoleClosed:
        fill(e.offset, e.end);
        break;
      case K::Released:
        released += e.sends + e.read_responses + e.read_requests + e.writes;
        break;
      case K::Completion: {
        ++completions;
        const auto* info = e.hdr ? rdmap::opcode_info(e.hdr->opcode) : nullptr;
        // A Read or atomic this side posted (the RTR's zero-length Read, RFC 6581 §4, is no
        // posted work: its completion is not counted).
        if (info && info->family == rdmap::MessageFamily::ReadResponse) {
          if (reads_done < reads_posted) ++reads_done;
        } else if (info && info->family == rdmap::MessageFamily::AtomicResponse) {
          if (atomics_done < atomics_posted) ++atomics_done;
        } else
          ++recv_done;
        break;
      }
      case K::TerminateSent:
        if (!ended) ended = fmt::format("Terminate sent at frame {}: error", frame);
        break;
      case K::TerminateReceived:
        if (!ended) ended = fmt::format("Terminate received at frame {}: error", frame);
        break;
      default:
        break;
    }
  }
  json to_json(const replay::EndpointPlan& ep, const char* phase) const {
    json j;
    j["state"] = phase ? std::string(phase) : ended ? *ended : std::string("RTS (Full Operation)");
    const std::uint64_t posted = ep.recvs.size();
    j["receives"] = fmt::format("{} posted, {} completed, {} left", posted, recv_done,
                                posted > recv_done ? posted - recv_done : 0);
    j["reads"] = fmt::format("{} issued, {} completed, {} outstanding", reads_posted, reads_done,
                             reads_posted > reads_done ? reads_posted - reads_done : 0);
    if (atomics_posted)
      j["atomics"] = fmt::format("{} issued, {} completed", atomics_posted, atomics_done);
    json h = json::array();
    for (auto [b, e] : holes) h.push_back(fmt::format("[{}, {}) {} octets", b, e, e - b));
    j["holes"] = h;
    j["counts"] = fmt::format("{} placements, {} CQEs, {} deferred, {} released", placed,
                              completions, deferred, released);
    return j;
  }
};

const replay::RegionPlan* region_of(const replay::EndpointPlan& ep, std::uint32_t stag) {
  for (const auto& r : ep.regions)
    if (r.stag.value() == stag) return &r;
  return nullptr;
}

json region(const replay::ConnectionPlan* cp, replay::Side side, std::uint32_t stag,
            std::uint64_t to, std::uint64_t len, const std::string& role) {
  json j;
  j["side"] = std::string(replay::to_string(side));
  j["stag"] = hex32(stag);
  j["range"] = fmt::format("TO [{}, {}) {} octets", hex64(to), hex64(to + len), len);
  j["role"] = role;
  if (cp) {
    if (const auto* r = region_of(cp->ep[replay::index(side)], stag))
      j["shadow"] = fmt::format("shadow region TO [{}, {}) ({})", hex64(r->begin_to),
                                hex64(r->end_to), r->why);
    else
      j["shadow"] = "no shadow region (the replay registered none at this STag)";
  }
  return j;
}

}  // namespace

std::string hex_dump(const std::uint8_t* p, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; i += 16) {
    out += fmt::format("{:04x}  ", i);
    std::string ascii;
    for (std::size_t k = 0; k < 16; ++k) {
      if (i + k < n) {
        out += fmt::format("{:02x} ", p[i + k]);
        const auto c = p[i + k];
        ascii += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '.';
      } else {
        out += "   ";
      }
      if (k == 7) out += ' ';
    }
    out += ' ' + ascii + '\n';
  }
  return out;
}

std::expected<View, std::string> build_view(const std::string& path, const replay::Plan& plan,
                                            const replay::ReplayResult& result,
                                            const std::string& order, const ViewLimits& limits,
                                            const ViewLabels& labels) {
  auto model = ladder::build_model(path, ladder::Filter{}, limits.max_events);
  if (!model) return std::unexpected(model.error());
  const std::string shown = labels.file.empty() ? path : labels.file;
  model->path = shown;
  ladder::LayoutOptions lo;
  lo.collapse = false;  // one drawn group per event, so that each can be clicked
  lo.max_rows = 0;
  auto page = ladder::layout(*model, lo);
  if (!page) return std::unexpected(page.error());

  // The events in the order the SVG draws their groups.
  std::vector<Ev> evs;
  for (const auto& row : page->rows) {
    if (row.kind != ladder::Row::Kind::Event || !row.event) continue;
    if (row.event->kind != ladder::Event::Kind::Mpa &&
        row.event->kind != ladder::Event::Kind::Message)
      continue;
    Ev ev;
    ev.conn = row.conn;
    ev.e = row.event;
    evs.push_back(std::move(ev));
  }

  // Mark each drawn group with its event's number, checking that the SVG has them in that order.
  View v;
  {
    std::string svg = ladder::render_svg(*model, *page);
    if (auto p = svg.find("<svg"); p != std::string::npos) svg.erase(0, p);  // no XML prolog
    std::string out;
    std::size_t pos = 0, n = 0;
    while (true) {
      const auto a = svg.find("<g class=\"m", pos);
      if (a == std::string::npos) break;
      const bool is_group =
          svg.compare(a, 14, "<g class=\"mpa\"") == 0 || svg.compare(a, 14, "<g class=\"msg ") == 0;
      out.append(svg, pos, a + 3 - pos);  // "<g "
      pos = a + 3;
      if (!is_group) continue;
      if (n >= evs.size())
        return std::unexpected(
            fmt::format("{}: the ladder drew more events than it laid out", path));
      out += fmt::format("data-ev=\"{}\" tabindex=\"0\" ", n);
      ++n;
    }
    out.append(svg, pos);
    if (n != evs.size())
      return std::unexpected(
          fmt::format("{}: the ladder drew {} events of {} laid out", path, n, evs.size()));
    v.svg = std::move(out);
  }

  // Where each event starts: (connection, direction, frame) -> events, in order.
  std::map<std::tuple<std::size_t, int, std::uint64_t>, std::vector<std::size_t>> start_at;
  for (std::size_t i = 0; i < evs.size(); ++i)
    start_at[{evs[i].conn->index, static_cast<int>(evs[i].e->dir), evs[i].e->frame}].push_back(i);
  std::map<OpenKey, std::size_t> open;
  trace::RecordExplainer explainer;
  auto on_record = [&](trace::Record&& r) {
    const std::string why = explainer.explain(r);
    if (r.kind != trace::Record::Kind::MpaFrame && r.kind != trace::Record::Kind::Fpdu) return;
    std::optional<std::size_t> hit;
    if (auto it = start_at.find({r.flow, static_cast<int>(r.dir), r.frame}); it != start_at.end()) {
      for (auto i : it->second) {
        auto& ev = evs[i];
        if (ev.started) continue;
        const bool mpa = ev.e->kind == ladder::Event::Kind::Mpa;
        if (mpa != (r.kind == trace::Record::Kind::MpaFrame)) continue;
        if (!mpa && (!r.ddp || !starts(ev.e->msg, *r.ddp))) continue;
        hit = i;
        ev.started = true;
        ev.first_offset = r.offset;
        if (!mpa && !r.ddp->last) open[key_of(r.flow, r.dir, *r.ddp)] = i;
        if (mpa || r.ddp->last) ev.closed = true;
        break;
      }
    }
    if (!hit && r.kind == trace::Record::Kind::Fpdu && r.ddp) {
      const auto k = key_of(r.flow, r.dir, *r.ddp);
      if (auto it = open.find(k); it != open.end()) {
        hit = it->second;
        if (r.ddp->last) {
          evs[*hit].closed = true;
          open.erase(it);
        }
      }
    }
    if (!hit) return;
    auto& ev = evs[*hit];
    ev.end_offset = std::max(ev.end_offset, r.offset + r.length);
    ev.last_frame = std::max(ev.last_frame, r.frame);
    ev.wire += r.length;
    ++ev.segment_count;
    ev.fpdus.emplace_back(r.offset, r.length);
    if (ev.fpdus.size() > limits.max_segments_per_event + 1) ev.fpdus.pop_back();
    if (const auto* rr = std::get_if<rdmap::ReadRequest>(&r.body)) ev.read = *rr;
    if (const auto* a = std::get_if<rdmap::AtomicRequest>(&r.body)) ev.atomic = *a;
    if (r.ddp && !r.ddp->tagged &&
        (r.ddp->op() == rdmap::Opcode::SendInvalidate ||
         r.ddp->op() == rdmap::Opcode::SendSeInvalidate)) {
      ev.has_inv = true;
      ev.inv_stag = r.ddp->rsvd_ulp;
    }
    if (ev.segments.size() >= limits.max_segments_per_event) return;
    json s;
    s["frame"] = r.frame;
    s["offset"] = r.offset;
    s["summary"] = r.kind == trace::Record::Kind::MpaFrame ? mpa::describe(*r.mpa) : r.summary;
    s["fields"] = r.kind == trace::Record::Kind::MpaFrame ? mpa_fields(*r.mpa) : fpdu_fields(r);
    s["explain"] = why;
    if (r.error) s["problem"] = r.text;
    ev.segments.push_back(std::move(s));
  };
  // The capture is decoded until every event's last segment has gone by (or to its end, for an
  // event whose last segment is not in it): no later record belongs to an event.
  {
    trace::DecodeReport rep;
    trace::FileDecoder dec(rep, on_record);
    UntilEventsClose sink(dec, evs);
    auto cap = trace::scan_capture(path, sink);
    if (!cap) return std::unexpected(cap.error());
    dec.finish(*cap);
  }

  // The replay's connection of each capture connection.
  auto plan_of = [&](std::size_t flow) -> const replay::ConnectionPlan* {
    for (const auto& c : plan.connections)
      if (c.flow == flow) return &c;
    return nullptr;
  };
  auto result_of = [&](std::size_t flow) -> const replay::ConnectionResult* {
    for (const auto& c : result.connections)
      if (c.flow == flow) return &c;
    return nullptr;
  };

  // Each endpoint's state after each event's last frame: one walk of each connection's timeline.
  std::vector<json> states(evs.size());
  std::map<std::size_t, std::vector<std::size_t>> by_conn;
  for (std::size_t i = 0; i < evs.size(); ++i) by_conn[evs[i].conn->index].push_back(i);
  for (auto& [flow, list] : by_conn) {
    const auto* cp = plan_of(flow);
    const auto* cr = result_of(flow);
    if (!cp || !cr) continue;
    std::ranges::stable_sort(list, {}, [&](std::size_t i) { return evs[i].last_frame; });
    SideState st[2];
    std::size_t t = 0, s = 0;
    // The Reads and atomics each side posts, in the order they go in: a kept plan's steps
    // interleave them with the segments (each before the first segment of its request's frame),
    // a plan read again keeps them apart (ConnectionPlan::posts).
    std::vector<const replay::Step*> posts;
    if (cp->read_again)
      for (const auto& p : cp->posts) posts.push_back(&p.post);
    else
      for (const auto& step : cp->steps)
        if (step.kind == replay::Step::Kind::PostRead ||
            step.kind == replay::Step::Kind::PostAtomic)
          posts.push_back(&step);
    const std::uint64_t kept_until =
        cr->timeline.size() < cr->timeline_events && !cr->timeline.empty()
            ? cr->timeline.back().frame
            : UINT64_MAX;
    for (auto i : list) {
      const auto upto = evs[i].last_frame;
      for (; s < posts.size() && posts[s]->frame <= upto; ++s) {
        if (posts[s]->kind == replay::Step::Kind::PostRead)
          ++st[replay::index(posts[s]->side)].reads_posted;
        else
          ++st[replay::index(posts[s]->side)].atomics_posted;
      }
      for (; t < cr->timeline.size() && cr->timeline[t].frame <= upto; ++t)
        st[replay::index(cr->timeline[t].side)].apply(cr->timeline[t].event, cr->timeline[t].frame);
      json j = json::array();
      // Before the MPA Reply both sides are still connecting; an accepting Reply moves them to
      // Full Operation, a rejecting one ends the connection (RFC 5044 §7.1).
      const auto* f = evs[i].e->kind == ladder::Event::Kind::Mpa ? &*evs[i].e->mpa : nullptr;
      const char* phase = !f ? nullptr
                          : f->kind == mpa::FrameKind::Request
                              ? "connecting (MPA exchange, RFC 5044 §7.1)"
                          : f->reject ? "rejected by the MPA Reply (R=1, RFC 5044 §7.1)"
                                      : nullptr;
      for (auto side : {replay::Side::Initiator, replay::Side::Responder}) {
        json one = st[replay::index(side)].to_json(cp->ep[replay::index(side)], phase);
        one["side"] = side == replay::Side::Initiator ? "initiator (I)" : "responder (R)";
        if (upto > kept_until)
          one["note"] = fmt::format(
              "the replay kept the first {} of {} timeline events of this connection: what "
              "happened after frame {} is not counted here",
              cr->timeline.size(), cr->timeline_events, kept_until);
        j.push_back(std::move(one));
      }
      states[i] = std::move(j);
    }
  }

  // The data.
  json& d = v.data;
  d["file"] = shown;
  if (!labels.heading.empty()) d["heading"] = labels.heading;
  d["order"] = order;
  d["notes"] = model->notes;
  for (const auto& p : plan.problems) d["notes"].push_back(p);
  json conns = json::array();
  for (const auto& c : model->connections) {
    json j;
    j["index"] = c.index;
    j["initiator"] = c.initiator;
    j["responder"] = c.responder;
    conns.push_back(std::move(j));
  }
  d["connections"] = conns;
  // Each event's octets: its first FPDUs (or its MPA frame), as the capture's segments carried
  // them, up to max_bytes_per_event; asked for all events at once (one more read of the capture
  // for the connections whose steps are read again, none per event).
  std::vector<replay::StreamRange> ranges;
  std::vector<std::size_t> first_range(evs.size() + 1, 0);
  for (std::size_t i = 0; i < evs.size(); ++i) {
    first_range[i] = ranges.size();
    if (!plan_of(evs[i].conn->index)) continue;
    std::uint64_t left = limits.max_bytes_per_event;
    for (auto [off, len] : evs[i].fpdus) {
      const auto want = static_cast<std::uint32_t>(std::min<std::uint64_t>(len, left));
      if (want == 0) break;
      ranges.push_back({evs[i].conn->index, evs[i].e->dir, off, want});
      left -= want;
    }
  }
  first_range[evs.size()] = ranges.size();
  std::vector<Bytes> octets;
  std::string unreadable;
  try {
    octets = replay::stream_ranges(plan, ranges);
  } catch (const trace::CaptureChanged& x) {
    unreadable = x.what();
  } catch (const std::length_error& x) {
    unreadable = x.what();
  }

  // What the replay's receive engine did with each event's octets: the timeline events of the
  // receiving side, per connection and side ordered by the stream offset they concern
  // (counted from the stream's first octet, as the decoder counts), with their places in the
  // timeline.
  using ByOffset = std::vector<std::pair<std::uint64_t, std::size_t>>;
  std::map<std::size_t, std::array<ByOffset, 2>> timeline_at;
  auto timeline_of = [&](const replay::ConnectionPlan* cp,
                         const replay::ConnectionResult& cr) -> const std::array<ByOffset, 2>& {
    auto [it, fresh] = timeline_at.try_emplace(cr.flow);
    if (!fresh) return it->second;
    for (std::size_t k = 0; k < cr.timeline.size(); ++k) {
      const auto& t = cr.timeline[k];
      // The timeline's offsets count from Full Operation (after the MPA frame), the
      // decoder's from the stream's first octet. The side receives the other's direction.
      const auto in =
          t.side == replay::Side::Responder ? Direction::FromInitiator : Direction::FromResponder;
      const std::uint64_t mpa_len = cp ? cp->mpa_length[static_cast<int>(in)] : 0;
      it->second[replay::index(t.side)].emplace_back(t.event.offset + mpa_len, k);
    }
    for (auto& side : it->second) std::ranges::sort(side);
    return it->second;
  };

  json events = json::array();
  for (std::size_t i = 0; i < evs.size(); ++i) {
    const auto& ev = evs[i];
    const auto& e = *ev.e;
    const auto* cp = plan_of(ev.conn->index);
    const auto* cr = result_of(ev.conn->index);
    const auto receiver = replay::receiver_of(e.dir);
    const auto sender = replay::sender_of(e.dir);
    json j;
    j["id"] = i;
    j["conn"] = ev.conn->index;
    j["dir"] = dir_name(e.dir);
    j["frame"] = e.frame;
    j["last_frame"] = ev.last_frame;
    j["time"] = fmt::format("{}.{:06}", e.time_us / 1000000, e.time_us % 1000000);
    if (e.kind == ladder::Event::Kind::Mpa) {
      j["title"] =
          fmt::format("MPA {}", e.mpa->kind == mpa::FrameKind::Request ? "Request" : "Reply");
      j["explain"] = json::array({trace::explain_mpa_frame(*e.mpa)});
    } else {
      const auto& m = e.msg;
      j["title"] = ladder::opcode_label(m.opcode);
      j["summary"] = fmt::format("{} segment(s), {} payload octets{}{}", m.segments, m.length,
                                 m.complete ? "" : ", its last segment is not in the capture",
                                 m.problem.empty() ? "" : ", " + m.problem);
      json ex = json::array();
      for (const auto& s : ev.segments) ex.push_back(s["explain"]);
      j["explain"] = ex;
    }
    j["segments"] = ev.segments;
    if (ev.segment_count > ev.segments.size())
      j["segments_more"] = ev.segment_count - ev.segments.size();

    // Its octets: the first FPDUs (or the MPA frame), as the capture's segments carried them.
    if (cp) {
      std::vector<std::uint8_t> bytes;
      for (std::size_t k = first_range[i]; k < first_range[i + 1] && k < octets.size(); ++k) {
        bytes.insert(bytes.end(), octets[k].begin(), octets[k].end());
        if (octets[k].size() < ranges[k].length) break;  // the rest is not in the capture
      }
      if (!bytes.empty()) {
        j["hex"] = hex_dump(bytes.data(), bytes.size());
        if (ev.wire > bytes.size()) j["hex_more"] = ev.wire - bytes.size();
      } else {
        j["hex_missing"] = unreadable.empty() ? "its octets are not in the capture" : unreadable;
      }
    }

    // What the replay's receive engine did with it: timeline events of the receiving side
    // about its octets of the stream.
    if (cr && e.kind == ladder::Event::Kind::Message) {
      json lines = json::array();
      std::uint64_t more = 0;
      // Those about its octets, in timeline order.
      const auto& at = timeline_of(cp, *cr)[replay::index(receiver)];
      std::vector<std::size_t> about;
      for (auto it = std::ranges::lower_bound(at, std::pair{ev.first_offset, std::size_t{0}});
           it != at.end() && it->first < ev.end_offset; ++it)
        about.push_back(it->second);
      std::ranges::sort(about);
      for (const auto k : about) {
        if (lines.size() >= limits.max_replay_lines) {
          ++more;
          continue;
        }
        const auto& t = cr->timeline[k];
        lines.push_back(json{{"text", replay::format_event(t, model->t0_us)},
                             {"why", replay::explain_event(t.event)}});
      }
      j["replay"] = lines;
      if (more) j["replay_more"] = more;
    }
    j["state"] = states[i];

    // The memory regions it touched (RFC 5040 §4.4 Read, §4.3 Write, RFC 7306 §4.2 atomics).
    json mem = json::array();
    if (e.kind == ladder::Event::Kind::Message) {
      const auto& m = e.msg;
      const auto* info = rdmap::opcode_info(m.opcode);
      if (m.tagged)
        mem.push_back(region(cp, receiver, m.stag, m.to, m.length,
                             info && info->family == rdmap::MessageFamily::ReadResponse
                                 ? "Read Response data placed (the Read's sink)"
                                 : "written by the RDMA Write"));
      if (ev.read) {
        mem.push_back(region(cp, receiver, ev.read->src_stag.value(), ev.read->src_to.value(),
                             ev.read->size, "read from (the Read's data source)"));
        mem.push_back(region(cp, sender, ev.read->sink_stag.value(), ev.read->sink_to.value(),
                             ev.read->size, "written by the Read Response (the Read's sink)"));
      }
      if (ev.atomic)
        mem.push_back(region(cp, receiver, ev.atomic->stag.value(), ev.atomic->to.value(), 8,
                             "the atomic's 64-bit target"));
      if (ev.has_inv) {
        json inv;
        inv["side"] = std::string(replay::to_string(receiver));
        inv["stag"] = hex32(ev.inv_stag);
        inv["role"] = "invalidated by the Send with Invalidate (RFC 5040 §4.5)";
        mem.push_back(std::move(inv));
      }
      if (!m.tagged && info &&
          (info->family == rdmap::MessageFamily::Send ||
           info->family == rdmap::MessageFamily::ImmediateData)) {
        json rb;
        rb["side"] = std::string(replay::to_string(receiver));
        rb["stag"] = "-";
        rb["range"] =
            fmt::format("receive buffer of MSN {} (QN {}), {} octets", m.msn, m.qn, m.length);
        rb["role"] = "untagged: placed in the posted receive buffer (RFC 5041 §4.3)";
        mem.push_back(std::move(rb));
      }
    }
    j["memory"] = mem;
    events.push_back(std::move(j));
  }

  // The whole stays under the size limit: the details of the last events go first, 50 at a
  // time. Its size is the rest's and each event's, dumped once each (the events array's commas
  // between them).
  auto size_of = [](const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace).size();
  };
  d["events"] = json::array();
  std::size_t size = size_of(d) + (events.empty() ? 0 : events.size() - 1);
  std::vector<std::size_t> sizes(events.size());
  for (std::size_t i = 0; i < events.size(); ++i) size += sizes[i] = size_of(events[i]);
  if (size > limits.max_json_bytes) {
    std::size_t cut = 0;
    std::size_t i = events.size();
    while (i > 0 && size > limits.max_json_bytes) {
      for (std::size_t k = 0; k < 50 && i > 0; ++k) {
        auto& ev = events[--i];
        for (const char* key : {"segments", "hex", "replay", "state", "memory", "explain"})
          ev.erase(key);
        ev["cut"] = true;
        size -= sizes[i];
        size += sizes[i] = size_of(ev);
        ++cut;
      }
    }
    d["events"] = std::move(events);
    d["notes"].push_back(fmt::format(
        "the view's data is limited to {} octets: the details of the last {} events are left "
        "out (replay a smaller capture, or cut it with rnic ladder --from/--to first)",
        limits.max_json_bytes, cut));
  } else {
    d["events"] = std::move(events);
  }
  return v;
}

}  // namespace iwarp::htmlview
