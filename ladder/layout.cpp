#include "ladder/layout.hpp"

#include <fmt/format.h>

namespace iwarp::ladder {

namespace {

// A unit that pages never split: a connection header, one row, or a collapsed run.
struct Unit {
  const Connection* conn = nullptr;
  bool header = false;
  std::size_t first = 0, period = 1;  // events[first, first + period) drawn
  std::uint32_t repeat = 1;
};

double row_height(const Event& e) {
  if (e.kind == Event::Kind::Local) return kLocalRowHeight;
  return e.kind == Event::Kind::Mpa || e.kind == Event::Kind::Message ? kArrowRowHeight
                                                                      : kTextRowHeight;
}

// How many times events[i, i+p) repeats back to back from i.
std::uint32_t repeats(const std::vector<Event>& ev, std::size_t i, std::size_t p) {
  std::uint32_t n = 1;
  while (i + (n + 1) * p <= ev.size()) {
    bool same = true;
    for (std::size_t k = 0; k < p && same; ++k) same = same_step(ev[i + k], ev[i + n * p + k]);
    if (!same) break;
    ++n;
  }
  return n;
}

std::vector<Unit> units_of(const Connection& c, bool collapse) {
  std::vector<Unit> out;
  out.push_back({.conn = &c, .header = true});
  const auto& ev = c.events;
  std::size_t i = 0;
  while (i < ev.size()) {
    Unit u{.conn = &c, .first = i};
    if (collapse) {
      // The period covering the most events; the shortest among equals.
      std::size_t best_cover = 1;
      for (std::size_t p = 1; p <= kMaxPeriod && i + 2 * p <= ev.size(); ++p) {
        const auto n = repeats(ev, i, p);
        if (n >= 2 && n * p > best_cover) {
          best_cover = n * p;
          u.period = p;
          u.repeat = n;
        }
      }
    }
    out.push_back(u);
    i += u.period * u.repeat;
  }
  return out;
}

std::size_t unit_rows(const Unit& u) {
  return u.header ? 0 : u.period;
}

}  // namespace

namespace {

// Text without its digits: local events of repeated exchanges differ only in MSNs, offsets
// and order numbers.
std::string shape(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c < '0' || c > '9') out += c;
  return out;
}

}  // namespace

bool same_step(const Event& a, const Event& b) {
  if (a.kind == Event::Kind::Local && b.kind == Event::Kind::Local)
    return a.local.at_initiator == b.local.at_initiator && a.local.category == b.local.category &&
           a.local.count == b.local.count && shape(a.text) == shape(b.text);
  if (a.kind != Event::Kind::Message || b.kind != Event::Kind::Message) return false;
  const auto &x = a.msg, &y = b.msg;
  if (a.dir != b.dir || x.opcode != y.opcode || x.tagged != y.tagged || x.length != y.length ||
      x.segments != y.segments || x.complete != y.complete || x.detail != y.detail ||
      x.terminate.has_value() || y.terminate.has_value() || x.bad_segments > 0 ||
      y.bad_segments > 0)
    return false;
  // Tagged: the same buffer (STag); a run may walk through it (the label shows the TO range).
  return x.tagged ? x.stag == y.stag : x.qn == y.qn && x.mo == y.mo;
}

std::expected<Page, std::string> layout(const Model& m, const LayoutOptions& opts) {
  // Split the units into pages of at most max_rows rows (a unit larger than that gets a page
  // of its own).
  std::vector<std::vector<Unit>> pages(1);
  std::size_t rows = 0;
  for (const auto& c : m.connections) {
    for (const auto& u : units_of(c, opts.collapse)) {
      const auto n = unit_rows(u);
      if (opts.max_rows > 0 && rows > 0 && rows + n > opts.max_rows) {
        pages.emplace_back();
        rows = 0;
      }
      pages.back().push_back(u);
      rows += n;
    }
  }
  // A page ending with a header: move the header to the next page.
  for (std::size_t p = 0; p + 1 < pages.size(); ++p)
    if (!pages[p].empty() && pages[p].back().header) {
      pages[p + 1].insert(pages[p + 1].begin(), pages[p].back());
      pages[p].pop_back();
    }
  if (opts.page == 0 || opts.page > pages.size())
    return std::unexpected(
        fmt::format("--page {}: {} has {} page(s) of at most {} rows (see --max-events)", opts.page,
                    m.path, pages.size(), opts.max_rows));

  Page page;
  page.number = opts.page;
  page.count = pages.size();
  double y = kTop;
  const auto& units = pages[opts.page - 1];
  for (std::size_t k = 0; k < units.size(); ++k) {
    const auto& u = units[k];
    if (k == 0 && !u.header) {
      // The connection began on an earlier page: repeat its header.
      page.rows.push_back({.kind = Row::Kind::Header,
                           .conn = u.conn,
                           .continued = true,
                           .y = y,
                           .height = kHeaderHeight});
      y += kHeaderHeight;
    }
    if (u.header) {
      page.rows.push_back(
          {.kind = Row::Kind::Header, .conn = u.conn, .y = y, .height = kHeaderHeight});
      y += kHeaderHeight;
      continue;
    }
    const double y0 = y;
    for (std::size_t i = 0; i < u.period; ++i) {
      const auto& ev = u.conn->events;
      const Event& e = ev[u.first + i];
      const Event& last = ev[u.first + (u.repeat - 1) * u.period + i];
      Row r{.kind = Row::Kind::Event,
            .conn = u.conn,
            .event = &e,
            .last = &last,
            .repeat = u.repeat,
            .single = u.period == 1,
            .y = y,
            .height = row_height(e)};
      if (e.kind == Event::Kind::Message) page.messages += u.repeat;
      page.rows.push_back(r);
      y += r.height;
    }
    if (u.period > 1 && u.repeat > 1)
      page.brackets.push_back({.y0 = y0, .y1 = y, .repeat = u.repeat, .messages = u.period});
  }
  page.height = y + kBottom;
  return page;
}

}  // namespace iwarp::ladder
