#include "ladder/local_events.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace iwarp::ladder {

namespace {

bool matches(const Message& m, const MessageKey& k) {
  if (m.tagged != k.tagged) return false;
  if (k.tagged) return m.stag == k.stag && k.to >= m.to && (k.to < m.next_to || k.to == m.to);
  return m.qn == k.qn && m.msn == k.msn;
}

// The messages of each direction, in capture order (which is also stream order: the decoder
// takes a direction's FPDUs as its stream reaches them), for binary searches.
struct Index {
  const std::vector<Event>& ev;
  std::vector<std::size_t> msgs[2];

  explicit Index(const std::vector<Event>& events) : ev(events) {
    for (std::size_t i = 0; i < ev.size(); ++i)
      if (ev[i].kind == Event::Kind::Message) msgs[static_cast<int>(ev[i].dir)].push_back(i);
  }

  // How far back from a frame a search looks (messages of one direction).
  static constexpr std::size_t kSpanScan = 64, kKeyScan = 4096;

  // The index of the event `x` belongs to, or SIZE_MAX.
  std::size_t message_of(const LocalInput& x, std::optional<std::uint64_t> offset) const {
    const auto& m = msgs[static_cast<int>(x.message_dir)];
    if (offset) {
      auto it = std::upper_bound(m.begin(), m.end(), *offset, [&](std::uint64_t v, std::size_t i) {
        return v < ev[i].msg.offset;
      });
      if (it != m.begin() && *offset < ev[*std::prev(it)].msg.end_offset) return *std::prev(it);
    }
    // The messages that started at or before the frame, latest first.
    const auto upto =
        std::upper_bound(m.begin(), m.end(), x.frame,
                         [&](std::uint64_t v, std::size_t i) { return v < ev[i].frame; });
    const std::size_t n = static_cast<std::size_t>(upto - m.begin());
    std::size_t found = SIZE_MAX;
    for (std::size_t k = 0; k < n && k < kSpanScan; ++k) {
      const auto i = m[n - 1 - k];
      if (ev[i].msg.last_frame < x.frame) continue;
      if (!x.key) return i;  // the latest message the frame carries
      if (matches(ev[i].msg, *x.key)) return i;
      if (found == SIZE_MAX) found = i;
    }
    if (found != SIZE_MAX || !x.key) return found;
    // A frame the decoder did not end a segment in (TCP data out of order: the decoder takes
    // it when the stream reaches it): the latest message before it with the key.
    for (std::size_t k = 0; k < n && k < kKeyScan; ++k)
      if (matches(ev[m[n - 1 - k]].msg, *x.key)) return m[n - 1 - k];
    return SIZE_MAX;
  }

  // The last event at or before `frame` (0 when none); frame 0 (before any message, such as
  // the receive WQEs posted at the start): the last MPA frame before the first message.
  std::size_t anchor_by_frame(std::uint64_t frame) const {
    std::size_t a = 0;
    if (frame == 0) {
      for (std::size_t i = 0; i < ev.size() && ev[i].kind != Event::Kind::Message; ++i)
        if (ev[i].kind == Event::Kind::Mpa) a = i;
      return a;
    }
    const auto it = std::upper_bound(ev.begin(), ev.end(), frame,
                                     [](std::uint64_t v, const Event& e) { return v < e.frame; });
    return it == ev.begin() ? 0 : static_cast<std::size_t>(it - ev.begin()) - 1;
  }
};

}  // namespace

bool merges(const std::string& category) {
  return category == "placed" || category == "duplicate" || category == "placed-beyond-hole";
}

std::size_t attach_local_events(Model& m, std::size_t index, const std::vector<LocalInput>& in,
                                std::size_t max_events) {
  auto conn = std::find_if(m.connections.begin(), m.connections.end(),
                           [&](const Connection& c) { return c.index == index; });
  if (conn == m.connections.end() || conn->events.empty()) return 0;
  std::size_t total = 0;
  for (const auto& c : m.connections) total += c.events.size();

  auto& ev = conn->events;
  const Index messages(ev);
  // Per original event, the local events drawn after it.
  std::vector<std::vector<Event>> after(ev.size());
  std::size_t added = 0, dropped = 0;
  for (const auto& x : in) {
    std::optional<std::uint64_t> offset;
    if (x.stream_offset) offset = *x.stream_offset + conn->mpa_end[static_cast<int>(x.message_dir)];
    const std::size_t msg = messages.message_of(x, offset);
    const std::size_t at = msg != SIZE_MAX ? msg : messages.anchor_by_frame(x.frame);
    auto& list = after[at];
    if (!list.empty() && merges(x.category) && list.back().local.category == x.category &&
        list.back().text == x.text && list.back().local.at_initiator == x.at_initiator) {
      ++list.back().local.count;
      ++added;
      continue;
    }
    if (total >= max_events) {
      ++dropped;
      continue;
    }
    ++total;
    ++added;
    Event e;
    e.kind = Event::Kind::Local;
    e.dir = x.message_dir;
    e.frame = ev[at].frame;
    e.time_us = ev[at].time_us;
    e.text = x.text;
    e.local = Local{.at_initiator = x.at_initiator,
                    .category = x.category,
                    .seq = x.seq,
                    .at_frame = x.frame,
                    .of_event = msg,  // re-indexed below
                    .offset = offset};
    list.push_back(std::move(e));
  }
  std::vector<Event> out;
  out.reserve(ev.size() + added);
  for (std::size_t i = 0; i < ev.size(); ++i) {
    const std::size_t here = out.size();
    out.push_back(std::move(ev[i]));
    for (auto& l : after[i]) {
      if (l.local.of_event != SIZE_MAX) l.local.of_event = here;
      out.push_back(std::move(l));
    }
  }
  ev = std::move(out);
  if (dropped > 0)
    m.notes.push_back(
        fmt::format("{} local event(s) of c{} not drawn: a ladder holds at most {} events", dropped,
                    index, max_events));
  return added;
}

}  // namespace iwarp::ladder
