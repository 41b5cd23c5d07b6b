#include "ladder/svg_writer.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "ddp/rdmap_opcode.hpp"

namespace iwarp::ladder {

namespace {

using mpa::Direction;

constexpr double kLabelChars = 80;   // 12 px monospace between the lifelines
constexpr double kDetailChars = 88;  // 11 px monospace between the lifelines
constexpr double kWideChars = 150;   // 11 px monospace across the page (notes)
constexpr std::size_t kMaxTicks = 40;
constexpr double kMidX = (kInitiatorX + kResponderX) / 2;
constexpr double kLocalChars = 95;  // 10.5 px between the lifelines

// Local events: holes and what they hold back stand out (orange/purple), Terminates and
// violations red, the ordinary flow (placements, CQEs, posts) quiet.
constexpr const char* kLocalAlert = "#c62828";
const char* local_colour(std::string_view category) {
  if (category == "hole-opened" || category == "placed-beyond-hole" || category == "deferred")
    return "#ef6c00";
  if (category == "hole-closed" || category == "released") return "#6a1b9a";
  if (category == "terminate-sent" || category == "terminate-received" || category == "violation" ||
      category == "deferred-error")
    return kLocalAlert;
  if (category == "cqe") return "#1565c0";
  if (category == "wqe-posted") return "#2e7d32";
  return "#757575";
}

struct Style {
  const char* cls;
  const char* colour;
};

// Colour by RDMAP message family (RFC 5040 §4.2); Terminates red and dashed.
Style style_of(std::uint8_t opcode) {
  const auto* info = rdmap::opcode_info(opcode);
  if (!info) return {"other", "#616161"};
  switch (info->family) {
    case rdmap::MessageFamily::Write:
      return {"write", "#2e7d32"};
    case rdmap::MessageFamily::ReadRequest:
    case rdmap::MessageFamily::ReadResponse:
      return {"read", "#e65100"};
    case rdmap::MessageFamily::Send:
    case rdmap::MessageFamily::ImmediateData:
      return {"send", "#1565c0"};
    case rdmap::MessageFamily::AtomicRequest:
    case rdmap::MessageFamily::AtomicResponse:
      return {"atomic", "#00838f"};
    case rdmap::MessageFamily::Terminate:
      return {"term", "#c62828"};
  }
  return {"other", "#616161"};
}
constexpr Style kMpaStyle{"mpa", "#6a1b9a"};
constexpr Style kAllStyles[] = {{"write", "#2e7d32"},  {"read", "#e65100"}, {"send", "#1565c0"},
                                {"atomic", "#00838f"}, {"term", "#c62828"}, {"other", "#616161"},
                                {"mpa", "#6a1b9a"}};

// Cuts `s` to `n` characters (UTF-8 code points), marking the cut with an ellipsis.
std::string fit(std::string s, double n) {
  const auto max = static_cast<std::size_t>(n);
  std::size_t chars = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;  // continuation octet
    if (++chars == max) {
      // s[i] starts the max-th character: keep max-1 characters if more follow.
      std::size_t end = i + 1;
      while (end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) ++end;
      if (end == s.size()) return s;
      s.resize(i);
      return s + "\u2026";
    }
  }
  return s;
}

std::string seconds(std::uint64_t us) {
  return fmt::format("+{}.{:06d}", us / 1000000, static_cast<int>(us % 1000000));
}

// RFC 5040 §7.1 Terminate Layer values.
std::string_view layer_name(unsigned layer) {
  switch (layer) {
    case 0:
      return "RDMAP";
    case 1:
      return "DDP";
    case 2:
      return "MPA";
  }
  return "?";
}

std::string message_label(const Row& r) {
  const auto& m = r.event->msg;
  const auto& last = r.last->msg;
  std::string s = opcode_label(m.opcode);
  if (m.terminate) {
    const auto& t = *m.terminate;
    s += fmt::format(" QN {} MSN {}  layer {} ({}) etype {} code 0x{:02x}", m.qn, m.msn, t.layer,
                     layer_name(t.layer), t.etype, t.ecode);
    return s;
  }
  if (m.tagged) {
    s += fmt::format("  STag 0x{:08x} TO 0x{:x}", m.stag, m.to);
    if (last.to != m.to) s += fmt::format("..0x{:x}", last.to);
  } else {
    s += fmt::format("  QN {} ", m.qn);
    s += m.msn == last.msn ? fmt::format("MSN {}", m.msn)
                           : fmt::format("MSN {}..{}", m.msn, last.msn);
    s += fmt::format(" MO {}", m.mo);
    const auto* info = rdmap::opcode_info(m.opcode);
    if (info && info->invalidate) s += fmt::format(" inv 0x{:08x}", m.stag);
  }
  // Read Requests, atomics and Immediate Data carry no ULP payload (RFC 5040 §4.4, RFC 7306).
  if (const auto* info = rdmap::opcode_info(m.opcode); !info || info->payload || m.length > 0)
    s += fmt::format("  len {}", m.length);
  if (r.single && r.repeat > 1) s = fmt::format("\u00d7{}  {}", r.repeat, s);
  return s;
}

// Whether the row's message is the initiator's Ready-To-Receive message of a peer-to-peer
// connection: its first message, zero-length (RFC 6581 §5).
bool is_rtr(const Row& r) {
  const auto& c = *r.conn;
  if (!c.params || !c.params->peer_to_peer || r.event->dir != Direction::FromInitiator ||
      r.event->msg.length != 0)
    return false;
  for (const auto& e : c.events)
    if (e.kind == Event::Kind::Message) return &e == r.event;
  return false;
}

std::string message_detail(const Row& r) {
  const auto& m = r.event->msg;
  std::vector<std::string> parts;
  if (is_rtr(r)) parts.push_back("peer-to-peer RTR message (RFC 6581 \u00a75)");
  if (m.terminate) parts.push_back(m.terminate->meaning);
  if (m.segments > 1) parts.push_back(fmt::format("{} DDP segments", m.segments));
  if (!m.terminate && !m.detail.empty()) parts.push_back(m.detail);
  if (!m.complete) parts.push_back("incomplete: no L segment in the capture");
  if (m.bad_segments > 0)
    parts.insert(parts.begin(), m.bad_segments > 1
                                    ? fmt::format("{} bad segments: {}", m.bad_segments, m.problem)
                                    : m.problem);
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : " \u00b7 ") + p;
  return s;
}

std::string mpa_label(const mpa::MpaFrame& f) {
  std::string s = fmt::format("MPA {} rev {}  M={} C={}",
                              f.kind == mpa::FrameKind::Request ? "Request" : "Reply", f.revision,
                              f.markers ? 1 : 0, f.crc ? 1 : 0);
  if (f.kind == mpa::FrameKind::Reply) s += fmt::format(" R={}", f.reject ? 1 : 0);
  if (f.params) s += fmt::format("  IRD {} ORD {}", f.params->ird, f.params->ord);
  if (f.params && f.params->peer_to_peer)
    s += fmt::format("  P2P RTR {}", mpa::rtr_mask_name(f.params->rtr));
  if (f.reject) s += "  REJECTED";
  return s;
}

std::string negotiated(const mpa::ConnectionParams& p) {
  std::string s =
      fmt::format("negotiated: rev {}, CRC {}, markers {}/{} (to responder/initiator)", p.revision,
                  p.crc ? "on" : "off", p.markers_to_responder ? "on" : "off",
                  p.markers_to_initiator ? "on" : "off");
  if (p.enhanced)
    s += fmt::format(", IRD/ORD initiator {}/{} responder {}/{}", p.initiator_ird, p.initiator_ord,
                     p.responder_ird, p.responder_ord);
  if (p.peer_to_peer) s += fmt::format(", P2P RTR {}", mpa::rtr_name(p.rtr));
  return s;
}

class Writer {
 public:
  Writer(const Model& m, const Page& p) : m_(m), p_(p) {}

  std::string run() {
    const double height = p_.height + 18.0 * static_cast<double>(m_.notes.size());
    out_ += fmt::format(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" "
        "height=\"{1}\" viewBox=\"0 0 {0} {1}\" font-family=\"DejaVu Sans Mono, monospace\">\n",
        kWidth, height);
    defs();
    out_ += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", kWidth, height);
    title();
    sections();
    for (const auto& r : p_.rows)
      if (r.kind == Row::Kind::Header)
        header(r);
      else
        event_row(r);
    for (const auto& b : p_.brackets) bracket(b);
    double y = p_.height - kBottom + 14;
    for (const auto& n : m_.notes) {
      text(kTimeX, y, fit(n, kWideChars), "font-size=\"11\" fill=\"#b71c1c\"");
      y += 18;
    }
    out_ += "</svg>\n";
    return std::move(out_);
  }

 private:
  void defs() {
    out_ += "<defs>\n";
    for (const auto& s : kAllStyles)
      out_ += fmt::format(
          "<marker id=\"ah-{}\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"9\" "
          "markerHeight=\"9\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"{}\"/>"
          "</marker>\n",
          s.cls, s.colour);
    out_ += "</defs>\n";
  }

  void text(double x, double y, const std::string& s, std::string_view attrs) {
    out_ +=
        fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" {}>{}</text>\n", x, y, attrs, xml_escape(s));
  }

  void title() {
    text(kTimeX, 22,
         fit(fmt::format("rnic ladder: {}   (page {} of {})", m_.path, p_.number, p_.count), 130),
         "font-size=\"14\" font-weight=\"bold\" fill=\"#212121\"");
    text(kTimeX, 40,
         fmt::format("{} RDMAP message(s) on this page; time in seconds from the first decoded "
                     "record (as rnic decode)",
                     p_.messages),
         "font-size=\"11\" fill=\"#616161\"");
    // Legend.
    double x = kTimeX;
    const std::pair<Style, const char*> legend[] = {
        {kAllStyles[0], "RDMA Write"}, {kAllStyles[1], "RDMA Read"}, {kAllStyles[2], "Send / Imm"},
        {kAllStyles[3], "Atomic"},     {kAllStyles[4], "Terminate"}, {kAllStyles[6], "MPA"}};
    for (const auto& [s, name] : legend) {
      const bool term = std::string_view(s.cls) == "term";
      out_ += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"53\" x2=\"{:.1f}\" y2=\"53\" stroke=\"{}\" "
          "stroke-width=\"2\"{}/>\n",
          x, x + 22, s.colour, term ? " stroke-dasharray=\"6 3\"" : "");
      text(x + 27, 57, name, fmt::format("font-size=\"11\" fill=\"{}\"", s.colour));
      x += 27 + 7.0 * std::string_view(name).size() + 18;
    }
    // Local events (rnic replay --ladder): their marks' colours.
    const bool locals = std::any_of(p_.rows.begin(), p_.rows.end(), [](const Row& r) {
      return r.event && r.event->kind == Event::Kind::Local;
    });
    if (!locals) return;
    x += 12;
    const std::pair<const char*, const char*> marks[] = {{"hole-opened", "hole, beyond it"},
                                                         {"released", "closed, released"},
                                                         {"cqe", "CQE"},
                                                         {"wqe-posted", "WQE"},
                                                         {"placed", "other"}};
    for (const auto& [cat, name] : marks) {
      const char* colour = local_colour(cat);
      out_ += fmt::format(
          "<rect x=\"{:.1f}\" y=\"49\" width=\"8\" height=\"8\" fill=\"{}\" "
          "transform=\"rotate(45 {:.1f} 53)\"/>\n",
          x, colour, x + 4);
      text(x + 14, 57, name, fmt::format("font-size=\"11\" fill=\"{}\"", colour));
      x += 14 + 6.5 * std::string_view(name).size() + 16;
    }
    text(x, 57, "#N: order done", "font-size=\"11\" fill=\"#616161\"");
  }

  // Lifelines: from each connection header to the next header (or the page's end).
  void sections() {
    for (std::size_t i = 0; i < p_.rows.size(); ++i) {
      if (p_.rows[i].kind != Row::Kind::Header) continue;
      double end = p_.height - kBottom;
      for (std::size_t j = i + 1; j < p_.rows.size(); ++j)
        if (p_.rows[j].kind == Row::Kind::Header) {
          end = p_.rows[j].y;
          break;
        }
      const double top = p_.rows[i].y + kHeaderHeight - 8;
      for (double x : {kInitiatorX, kResponderX})
        out_ += fmt::format(
            "<line class=\"lifeline\" x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" "
            "stroke=\"#9e9e9e\" stroke-width=\"1.5\"/>\n",
            x, top, end - 4);
    }
  }

  void header(const Row& r) {
    const auto& c = *r.conn;
    const double y = r.y;
    out_ += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#bdbdbd\"/>\n",
        kTimeX, y + 4, kWidth - kTimeX, y + 4);
    text(kTimeX, y + 22,
         fmt::format("connection c{}: {} -> {}{}", c.index, c.initiator, c.responder,
                     r.continued ? "  (continued)" : ""),
         "font-size=\"13\" font-weight=\"bold\" fill=\"#212121\"");
    text(kTimeX, y + 40, c.params ? negotiated(*c.params) : "MPA exchange not completed",
         "font-size=\"11\" fill=\"#424242\"");
    const std::pair<double, std::string> ends[] = {{kInitiatorX, c.initiator},
                                                   {kResponderX, c.responder}};
    for (std::size_t k = 0; k < 2; ++k) {
      const auto& [x, addr] = ends[k];
      out_ += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"240\" height=\"36\" rx=\"4\" fill=\"#eceff1\" "
          "stroke=\"#607d8b\"/>\n",
          x - 120, y + 50);
      text(x, y + 65, addr, "font-size=\"12\" text-anchor=\"middle\" fill=\"#212121\"");
      text(x, y + 80, k == 0 ? "MPA initiator" : "MPA responder",
           "font-size=\"10\" text-anchor=\"middle\" fill=\"#546e7a\"");
    }
    text(kTimeX, y + 80, "time (s)  frame", "font-size=\"10\" fill=\"#757575\"");
  }

  void margin(const Row& r, double arrow_y) {
    const auto& e = *r.event;
    std::string t = seconds(e.time_us);
    if (r.last != r.event) t += fmt::format("..{}", seconds(r.last->time_us).substr(1));
    text(kTimeX, arrow_y + 4, t, "font-size=\"11\" fill=\"#424242\"");
    text(kTimeX, arrow_y + 17,
         r.last != r.event ? fmt::format("frames {}..{}", e.frame, r.last->frame)
                           : fmt::format("frame {}", e.frame),
         "font-size=\"10\" fill=\"#9e9e9e\"");
  }

  void arrow(Direction d, double y, const Style& s, bool dashed, bool faint) {
    const double from = d == Direction::FromInitiator ? kInitiatorX : kResponderX;
    const double to = d == Direction::FromInitiator ? kResponderX - 2 : kInitiatorX + 2;
    out_ += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"{}\"{}{} marker-end=\"url(#ah-{})\"/>\n",
        from, y, to, y, s.colour, dashed ? 2.5 : 2, dashed ? " stroke-dasharray=\"8 5\"" : "",
        faint ? " stroke-opacity=\"0.5\"" : "", s.cls);
  }

  void event_row(const Row& r) {
    const auto& e = *r.event;
    const double arrow_y = r.y + 22;
    switch (e.kind) {
      case Event::Kind::Mpa: {
        const auto& f = *e.mpa;
        out_ += fmt::format("<g class=\"mpa\" data-frame=\"{}\">\n<title>{}</title>\n", e.frame,
                            xml_escape(mpa::describe(f)));
        margin(r, arrow_y);
        text(kMidX, r.y + 16, fit(mpa_label(f), kLabelChars),
             fmt::format("font-size=\"12\" text-anchor=\"middle\" fill=\"{}\"", kMpaStyle.colour));
        arrow(e.dir, arrow_y, kMpaStyle, false, false);
        std::string below = fmt::format("private data {} octet(s){}", f.private_data.size(),
                                        f.enhanced ? ", enhanced (RFC 6581)" : "");
        if (f.kind == mpa::FrameKind::Reply && r.conn->params) {
          const auto& p = *r.conn->params;
          below = fmt::format("negotiated: rev {}, CRC {}, markers {}/{}", p.revision,
                              p.crc ? "on" : "off", p.markers_to_responder ? "on" : "off",
                              p.markers_to_initiator ? "on" : "off");
          if (p.enhanced)
            below += fmt::format(", IRD/ORD {}/{} <-> {}/{}", p.initiator_ird, p.initiator_ord,
                                 p.responder_ird, p.responder_ord);
        }
        text(kMidX, r.y + 37, fit(below, kDetailChars),
             "font-size=\"11\" text-anchor=\"middle\" fill=\"#6a1b9a\"");
        out_ += "</g>\n";
        return;
      }
      case Event::Kind::Message: {
        const auto& m = e.msg;
        const Style s = style_of(m.opcode);
        const bool term = m.terminate.has_value() ||
                          m.opcode == static_cast<std::uint8_t>(rdmap::Opcode::Terminate);
        out_ += fmt::format(
            "<g class=\"msg {}{}{}{}\" data-opcode=\"{}\" data-repeat=\"{}\" data-segments=\"{}\" "
            "data-frame=\"{}\" data-last-frame=\"{}\" data-offset=\"{}\" data-end=\"{}\" "
            "data-to=\"{}\">\n",
            s.cls, term ? " terminate" : "", m.complete ? "" : " incomplete",
            m.bad_segments ? " error" : "", xml_escape(opcode_label(m.opcode)), r.repeat,
            m.segments, e.frame, m.last_frame, m.offset, m.end_offset,
            e.dir == Direction::FromInitiator ? "responder" : "initiator");
        const auto detail = message_detail(r);
        out_ +=
            fmt::format("<title>{}</title>\n",
                        xml_escape(message_label(r) + (detail.empty() ? "" : " \u00b7 " + detail)));
        margin(r, arrow_y);
        text(kMidX, r.y + 16, fit(message_label(r), kLabelChars),
             fmt::format("font-size=\"12\" text-anchor=\"middle\" fill=\"{}\"{}", s.colour,
                         term ? " font-weight=\"bold\"" : ""));
        arrow(e.dir, arrow_y, s, term, !m.complete);
        ticks(e.dir, arrow_y, m.segments, s.colour);
        if (const auto d = message_detail(r); !d.empty())
          text(kMidX, r.y + 38, fit(d, kDetailChars),
               fmt::format("font-size=\"11\" text-anchor=\"middle\" fill=\"{}\"{}",
                           term || m.bad_segments ? "#c62828" : "#616161",
                           m.bad_segments ? " font-weight=\"bold\"" : ""));
        if (r.single && r.repeat > 1)
          text(kResponderX + 24, arrow_y + 5, fmt::format("\u00d7{}", r.repeat),
               fmt::format("font-size=\"15\" font-weight=\"bold\" fill=\"{}\"", s.colour));
        out_ += "</g>\n";
        return;
      }
      case Event::Kind::Violation:
      case Event::Kind::Note: {
        const bool v = e.kind == Event::Kind::Violation;
        out_ += fmt::format("<g class=\"{}\">\n", v ? "violation" : "note");
        text(kTimeX, r.y + 16, seconds(e.time_us), "font-size=\"11\" fill=\"#424242\"");
        // A box across the lifelines so that the text is not crossed by them.
        out_ += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"18\" fill=\"{}\" "
            "stroke=\"{}\"/>\n",
            kInitiatorX - 126, r.y + 3, kWidth - kTimeX - (kInitiatorX - 126),
            v ? "#ffebee" : "#f5f5f5", v ? "#ef9a9a" : "#e0e0e0");
        text(kInitiatorX - 120, r.y + 16,
             fit(fmt::format("{} {}", v ? "VIOLATION:" : "note:", e.text), kWideChars - 30),
             v ? "font-size=\"11\" font-weight=\"bold\" fill=\"#c62828\""
               : "font-size=\"11\" font-style=\"italic\" fill=\"#757575\"");
        out_ += "</g>\n";
        return;
      }
      case Event::Kind::Local:
        return local_row(r);
    }
  }

  // A local event: a small mark on its endpoint's lifeline and its text beside it, inside the
  // lane between the lifelines, under the message it belongs to.
  void local_row(const Row& r) {
    const auto& e = *r.event;
    const auto& l = e.local;
    const char* colour = local_colour(l.category);
    const std::string of = l.of_event != SIZE_MAX ? fmt::format(" data-of-frame=\"{}\"",
                                                                r.conn->events[l.of_event].frame)
                                                  : std::string();
    const std::string off =
        l.offset ? fmt::format(" data-offset=\"{}\"", *l.offset) : std::string();
    out_ += fmt::format(
        "<g class=\"local {}\" data-side=\"{}\" data-frame=\"{}\" data-count=\"{}\" "
        "data-seq=\"{}\"{}{}>\n<title>{}</title>\n",
        xml_escape(l.category), l.at_initiator ? "initiator" : "responder", l.at_frame,
        l.count * r.repeat, l.seq, of, off, xml_escape(e.text));
    const double x = l.at_initiator ? kInitiatorX : kResponderX;
    const double y = r.y + 8;
    out_ += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"8\" height=\"8\" fill=\"{}\" "
        "transform=\"rotate(45 {:.1f} {:.1f})\"/>\n",
        x - 4, y - 4, colour, x, y);
    std::string t = l.seq ? fmt::format("#{} {}", l.seq, e.text) : e.text;
    if (l.count > 1) t += fmt::format("  \u00d7{}", l.count);
    text(l.at_initiator ? x + 10 : x - 10, y + 4, fit(t, kLocalChars),
         fmt::format("font-size=\"10.5\" fill=\"{}\"{}{}", colour,
                     l.at_initiator ? "" : " text-anchor=\"end\"",
                     std::string_view(colour) == kLocalAlert ? " font-weight=\"bold\"" : ""));
    out_ += "</g>\n";
  }

  // One small tick per DDP segment along the message's arrow (capped).
  void ticks(Direction d, double y, std::uint32_t segments, const char* colour) {
    if (segments < 2) return;
    const std::size_t n = std::min<std::size_t>(segments, kMaxTicks);
    const double a = kInitiatorX + 30, b = kResponderX - 30;
    for (std::size_t i = 0; i < n; ++i) {
      double x = a + (b - a) * (static_cast<double>(i) + 0.5) / static_cast<double>(n);
      if (d == Direction::FromResponder) x = a + b - x;
      out_ += fmt::format(
          "<line class=\"seg\" x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" "
          "stroke=\"{3}\" stroke-width=\"1.5\"/>\n",
          x, y - 2, y + 6, colour);
    }
  }

  void bracket(const Bracket& b) {
    const double x = kResponderX + 22;
    out_ += fmt::format(
        "<g class=\"repeat\" data-repeat=\"{3}\"><path d=\"M{0:.1f},{1:.1f} h8 V{2:.1f} h-8\" "
        "fill=\"none\" stroke=\"#424242\" stroke-width=\"1.5\"/>\n",
        x, b.y0 + 6, b.y1 - 6, b.repeat);
    const double mid = (b.y0 + b.y1) / 2;
    text(x + 16, mid, fmt::format("\u00d7{}", b.repeat),
         "font-size=\"16\" font-weight=\"bold\" fill=\"#212121\"");
    text(x + 16, mid + 16, fmt::format("this exchange of {} messages", b.messages),
         "font-size=\"10\" fill=\"#616161\"");
    text(x + 16, mid + 29, fmt::format("ran {} times in a row", b.repeat),
         "font-size=\"10\" fill=\"#616161\"");
    out_ += "</g>\n";
  }

  const Model& m_;
  const Page& p_;
  std::string out_;
};

}  // namespace

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t')
          out += '?';
        else
          out += c;
    }
  }
  return out;
}

std::string render_svg(const Model& m, const Page& page) {
  return Writer(m, page).run();
}

}  // namespace iwarp::ladder
