#include "tools/replay_ladder.hpp"

#include <fmt/format.h>

#include "ladder/layout.hpp"
#include "ladder/svg_writer.hpp"

namespace iwarp::tools {

namespace {

using mpa::Direction;
using replay::Side;
using K = rnic::RxEvent::Kind;

// Short text and category of a timeline event, as drawn beside its message.
std::pair<std::string, std::string> describe(const rnic::RxEvent& e) {
  switch (e.kind) {
    case K::Placed:
      if (e.beyond_hole)  // RFC 5041 §5.4: placed now, completed when the hole closes
        return {"placed-beyond-hole",
                fmt::format("placed beyond hole: {} octets, its completion waits", e.payload)};
      return {"placed", "placed in order"};
    case K::Deferred:
      return {"deferred", "beyond a hole, cannot be placed yet: waits for the hole"};
    case K::DeferredError:
      return {"deferred-error", "invalid beyond a hole: its Terminate waits for the hole"};
    case K::HoleOpened:
      return {"hole-opened",
              fmt::format("hole opened: stream octets [{}, {}) missing", e.offset, e.end)};
    case K::HoleClosed:
      return {"hole-closed", fmt::format("hole [{}, {}) closed", e.offset, e.end)};
    case K::Released: {
      std::string s;
      auto add = [&](std::uint32_t n, std::string_view what) {
        if (n == 0) return;
        s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n, what);
      };
      add(e.sends, "Send CQE(s)");
      add(e.read_responses, "Read completion(s)");
      add(e.read_requests, "Read Request(s) to the read queue");
      add(e.writes, "Write segment(s)");
      const auto n = e.sends + e.read_responses + e.read_requests + e.writes;
      return {"released", fmt::format("hole closed: {} deferred completion(s) released{}{}", n,
                                      s.empty() ? "" : ": ", s)};
    }
    case K::Completion:
      return {"cqe", "CQE: " + e.text};
    case K::Doorbell:
      return {"doorbell", "doorbell: " + e.text};
    case K::TerminateSent:
      return {"terminate-sent", "Terminate sent: " + e.text};
    case K::TerminateReceived:
      return {"terminate-received", e.text};
    case K::Violation:
      return {"violation", "violation: " + e.text};
    case K::Duplicate:
      return {"duplicate", "duplicate octets dropped"};
  }
  return {"other", e.text};
}

}  // namespace

std::vector<ladder::LocalInput> replay_local_events(const replay::ConnectionPlan& plan,
                                                    const replay::ConnectionResult& r) {
  std::vector<ladder::LocalInput> out;
  std::uint64_t seq = 0;
  for (Side side : {Side::Initiator, Side::Responder}) {
    const bool ini = side == Side::Initiator;
    const Direction sent = ini ? Direction::FromInitiator : Direction::FromResponder;
    const auto& ep = plan.ep[static_cast<int>(side)];
    if (!ep.recvs.empty())
      out.push_back({.at_initiator = ini,
                     .message_dir = sent,
                     .frame = 0,
                     .key = {},
                     .stream_offset = {},
                     .category = "wqe-posted",
                     .text = fmt::format("{} receive WQE(s) posted, one per Send the capture holds",
                                         ep.recvs.size())});
    // The replay posts a Read (or atomic) where the capture shows its request (RFC 5040 §4.4).
    for (const auto& rd : ep.reads)
      out.push_back({.at_initiator = ini,
                     .message_dir = sent,
                     .frame = rd.frame,
                     .key = ladder::MessageKey{.tagged = false, .qn = 1, .msn = rd.msn},
                     .stream_offset = {},
                     .category = "wqe-posted",
                     .text = fmt::format("WQE posted: RDMA Read MSN {}{}", rd.msn,
                                         rd.rebuilt ? " (rebuilt from its response)" : "")});
    for (const auto& at : ep.atomics)
      out.push_back({.at_initiator = ini,
                     .message_dir = sent,
                     .frame = at.frame,
                     .key = {},
                     .stream_offset = {},
                     .category = "wqe-posted",
                     .text = "WQE posted: atomic"});
  }
  for (const auto& t : r.timeline) out.push_back(replay_local_input(t, ++seq));
  return out;
}

ladder::LocalInput replay_local_input(const replay::TimelineEntry& t, std::uint64_t seq) {
  const bool ini = t.side == Side::Initiator;
  auto [category, text] = describe(t.event);
  ladder::LocalInput x{.at_initiator = ini,
                       // The endpoint reports what it received.
                       .message_dir = ini ? Direction::FromResponder : Direction::FromInitiator,
                       .frame = t.frame,
                       .key = {},
                       .stream_offset = {},
                       .category = std::move(category),
                       .text = std::move(text),
                       .seq = seq};
  // The octet the event is about, where the engine says: a placement's or duplicate's FPDU, a
  // hole's data beyond it (HoleOpened: its end) or the data closing it (RFC 5041 §5.4).
  switch (t.event.kind) {
    case K::Placed:
    case K::Deferred:
    case K::DeferredError:
    case K::HoleClosed:
    case K::Released:
    case K::Duplicate:
      x.stream_offset = t.event.offset;
      break;
    case K::HoleOpened:
      x.stream_offset = t.event.end;
      break;
    default:
      break;
  }
  if (const auto& h = t.event.hdr)
    x.key = ladder::MessageKey{.tagged = h->tagged,
                               .stag = h->stag.value(),
                               .to = h->to.value(),
                               .qn = h->qn.value(),
                               .msn = h->msn.value()};
  return x;
}

std::expected<std::string, std::string> replay_ladder_svg(const std::string& capture,
                                                          const replay::Plan& plan,
                                                          const replay::ReplayResult& result,
                                                          const std::string& title) {
  auto model = ladder::build_model(capture, ladder::Filter{});
  if (!model) return std::unexpected(model.error());
  model->path = title;
  for (std::size_t i = 0; i < result.connections.size() && i < plan.connections.size(); ++i) {
    const auto& r = result.connections[i];
    ladder::attach_local_events(*model, r.flow, replay_local_events(plan.connections[i], r));
    if (r.timeline_events > r.timeline.size())
      model->notes.push_back(
          fmt::format("c{}: {} later engine event(s) not drawn (a ladder holds at most {})", r.flow,
                      r.timeline_events - r.timeline.size(), ladder::kMaxEvents));
  }
  // One page: the replay's ladder is read from top to bottom, repeated exchanges collapsed.
  auto page = ladder::layout(*model, {.collapse = true, .max_rows = 0, .page = 1});
  if (!page) return std::unexpected(page.error());
  return ladder::render_svg(*model, *page);
}

}  // namespace iwarp::tools
