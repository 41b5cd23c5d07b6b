#include "ladder/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "ddp/rdmap_opcode.hpp"
#include "trace/trace_decoder.hpp"

namespace iwarp::ladder {

namespace {

using mpa::Direction;

// A message whose L segment has not come yet (RFC 5041 §5.1: L marks a message's last
// segment). Untagged segments name their message by QN and MSN (§5.3); tagged ones by STag,
// each continuing at the TO where the one before ended (§5.2).
struct Open {
  bool tagged = false;
  std::uint8_t opcode = 0;
  std::uint32_t stag = 0, qn = 0, msn = 0;
  std::uint64_t next_to = 0;
  std::size_t event = SIZE_MAX;  // index in Connection::events; SIZE_MAX: filtered out
};

struct ConnState {
  Connection conn;
  std::vector<Open> open[2];
};

// "… [DDP tagged: invalid STag] layer 1 etype 1 code 0x00 M D …" as ddp::describe() writes a
// Terminate's body (the decoder's record keeps the body only in this form).
std::optional<TerminateInfo> parse_terminate(const std::string& summary) {
  const auto open = summary.find('[');
  const auto close = summary.find("] layer ", open == std::string::npos ? 0 : open);
  if (open == std::string::npos || close == std::string::npos) return std::nullopt;
  TerminateInfo t;
  t.meaning = summary.substr(open + 1, close - open - 1);
  unsigned v[3] = {0, 0, 0};
  const char* keys[3] = {"layer ", "etype ", "code 0x"};
  std::size_t at = close;
  for (int i = 0; i < 3; ++i) {
    at = summary.find(keys[i], at);
    if (at == std::string::npos) return std::nullopt;
    at += std::string_view(keys[i]).size();
    const char* b = summary.data() + at;
    auto res = std::from_chars(b, summary.data() + summary.size(), v[i], i == 2 ? 16 : 10);
    if (res.ec != std::errc()) return std::nullopt;
  }
  t.layer = v[0];
  t.etype = v[1];
  t.ecode = v[2];
  return t;
}

// The part of ddp::describe()'s line that shows the RDMAP body: what follows the DDP fields
// and flags, without the trailing " len N".
std::string body_detail(const trace::Record& r) {
  const auto& h = *r.ddp;
  std::string prefix = std::string(rdmap::opcode_name(h.opcode));
  if (h.tagged)
    prefix += fmt::format(" STag 0x{:08x} TO 0x{:x}", h.stag.value(), h.to.value());
  else
    prefix += fmt::format(" QN {} MSN {} MO {}", h.qn.value(), h.msn.value(), h.mo.value());
  if (h.last) prefix += " L";
  const auto* info = rdmap::opcode_info(h.opcode);
  if (info && info->invalidate) prefix += fmt::format(" inv-STag 0x{:08x}", h.rsvd_ulp);
  std::string s = r.summary;
  if (const auto len = s.rfind(" len "); len != std::string::npos) s.resize(len);
  if (!s.starts_with(prefix)) return {};
  s.erase(0, prefix.size());
  while (!s.empty() && s.front() == ' ') s.erase(0, 1);
  return s;
}

class Builder {
 public:
  Builder(const Filter& f, std::size_t max_events) : filter_(f), max_events_(max_events) {}

  void add(trace::Record&& r) {
    if (!have_t0_) {
      t0_ = r.time_us;
      have_t0_ = true;
    }
    if (filter_.connection && r.flow != *filter_.connection) return;
    auto& st = conns_[r.flow];
    st.conn.index = r.flow;
    const std::uint64_t rel = r.time_us - std::min(r.time_us, t0_);
    switch (r.kind) {
      case trace::Record::Kind::MpaFrame:
        st.conn.mpa_end[static_cast<int>(r.dir)] = r.offset + r.length;
        if (filter_.mpa && filter_.keeps_time(rel)) {
          Event e = base(Event::Kind::Mpa, r, rel);
          e.mpa = r.mpa;
          push(st, std::move(e));
        }
        return;
      case trace::Record::Kind::Fpdu:
        if (r.ddp) return segment(st, r, rel);
        [[fallthrough]];  // no DDP header: shown with the violation that follows
      case trace::Record::Kind::Violation:
      case trace::Record::Kind::Note:
        if (r.kind == trace::Record::Kind::Fpdu) return;
        if (filter_.mpa && filter_.keeps_time(rel)) {
          Event e = base(
              r.kind == trace::Record::Kind::Violation ? Event::Kind::Violation : Event::Kind::Note,
              r, rel);
          e.text = r.text;
          push(st, std::move(e));
        }
        return;
    }
  }

  Model finish(const trace::DecodeReport& rep, const std::string& path) {
    Model m;
    m.path = path;
    m.t0_us = t0_;
    m.messages_in_file = messages_;
    for (const auto& f : rep.flows) m.connections_in_file += f.iwarp ? 1 : 0;
    for (auto& [index, st] : conns_) {
      if (index >= rep.flows.size() || !rep.flows[index].iwarp) continue;
      const auto& f = rep.flows[index];
      st.conn.initiator = f.initiator.to_string();
      st.conn.responder = f.responder.to_string();
      st.conn.params = f.params;
      if (!st.conn.events.empty()) m.connections.push_back(std::move(st.conn));
    }
    if (dropped_ > 0)
      m.notes.push_back(fmt::format(
          "{} more event(s) not drawn: a ladder holds at most {} (narrow it with --connection, "
          "--from/--to or --opcode)",
          dropped_, max_events_));
    return m;
  }

 private:
  Event base(Event::Kind k, const trace::Record& r, std::uint64_t rel) const {
    Event e;
    e.kind = k;
    e.dir = r.dir;
    e.frame = r.frame;
    e.time_us = rel;
    return e;
  }

  // Returns the event's index, SIZE_MAX when the limit dropped it.
  std::size_t push(ConnState& st, Event&& e) {
    if (events_ >= max_events_) {
      ++dropped_;
      return SIZE_MAX;
    }
    ++events_;
    st.conn.events.push_back(std::move(e));
    return st.conn.events.size() - 1;
  }

  void segment(ConnState& st, const trace::Record& r, std::uint64_t rel) {
    const auto& h = *r.ddp;
    auto& open = st.open[static_cast<int>(r.dir)];
    auto it = std::find_if(open.begin(), open.end(), [&](const Open& o) {
      if (o.tagged != h.tagged || o.opcode != h.opcode) return false;
      return h.tagged ? o.stag == h.stag.value() && o.next_to == h.to.value()
                      : o.qn == h.qn.value() && o.msn == h.msn.value();
    });
    if (it == open.end()) {
      ++messages_;
      Open o{.tagged = h.tagged,
             .opcode = h.opcode,
             .stag = h.stag.value(),
             .qn = h.qn.value(),
             .msn = h.msn.value(),
             .next_to = h.to.value()};
      if (filter_.keeps_opcode(h.opcode) && filter_.keeps_time(rel)) {
        Event e = base(Event::Kind::Message, r, rel);
        auto& m = e.msg;
        m.opcode = h.opcode;
        m.tagged = h.tagged;
        m.stag = h.tagged ? h.stag.value() : h.rsvd_ulp;  // untagged: the STag to invalidate
        m.to = h.to.value();
        m.qn = h.qn.value();
        m.msn = h.msn.value();
        m.mo = h.mo.value();
        m.offset = r.offset;
        m.detail = body_detail(r);
        if (h.opcode == static_cast<std::uint8_t>(rdmap::Opcode::Terminate))
          m.terminate = parse_terminate(r.summary);
        o.event = push(st, std::move(e));
      }
      if (open.size() >= kMaxOpenMessages) open.erase(open.begin());
      open.push_back(o);
      it = open.end() - 1;
    }
    if (it->event != SIZE_MAX) {
      auto& m = st.conn.events[it->event].msg;
      ++m.segments;
      m.length += r.payload_length;
      m.last_time_us = rel;
      m.last_frame = r.frame;
      m.end_offset = r.offset + r.length;
      m.complete = h.last;
      if (r.error) {
        if (m.bad_segments++ == 0) m.problem = r.error->to_string();
      }
    }
    it->next_to = h.to.value() + r.payload_length;
    if (h.last) open.erase(it);
  }

  const Filter& filter_;
  std::size_t max_events_;
  std::map<std::size_t, ConnState> conns_;
  std::uint64_t t0_ = 0;
  bool have_t0_ = false;
  std::size_t events_ = 0, dropped_ = 0;
  std::uint64_t messages_ = 0;
};

}  // namespace

std::string opcode_label(std::uint8_t opcode) {
  return std::string(rdmap::opcode_name(opcode));
}

std::expected<Model, std::string> build_model(const std::string& path, const Filter& filter,
                                              std::size_t max_events) {
  Builder b(filter, max_events);
  auto rep = trace::decode_file(path, [&](trace::Record&& r) { b.add(std::move(r)); });
  if (!rep) return std::unexpected(rep.error());
  if (rep->iwarp_flows() == 0)
    return std::unexpected(
        fmt::format("{}: no iWARP connection in this capture ({} TCP "
                    "connection(s); see rnic decode --summary)",
                    path, rep->flows.size()));
  if (filter.connection &&
      (*filter.connection >= rep->flows.size() || !rep->flows[*filter.connection].iwarp)) {
    std::string list;
    for (std::size_t i = 0; i < rep->flows.size(); ++i)
      if (rep->flows[i].iwarp) list += fmt::format("{}c{}", list.empty() ? "" : " ", i);
    return std::unexpected(
        fmt::format("--connection {}: {} has no iWARP connection c{} (it has: {})",
                    *filter.connection, path, *filter.connection, list));
  }
  return b.finish(*rep, path);
}

}  // namespace iwarp::ladder
