#include "replay/replay_explain.hpp"

#include <fmt/format.h>

#include <array>

#include "trace/explain.hpp"

namespace iwarp::replay {

namespace {

using K = rnic::RxEvent::Kind;
using F = rdmap::MessageFamily;

const rdmap::OpcodeInfo* info_of(const rnic::RxEvent& e) {
  return e.hdr ? rdmap::opcode_info(e.hdr->opcode) : nullptr;
}

std::string range(const rnic::RxEvent& e) {
  return fmt::format("[{}, {})", e.offset, e.end);
}

std::string term_text(const rnic::RxEvent& e) {
  if (!e.term) return "a Terminate";
  const auto& t = *e.term;
  const auto layer = static_cast<std::uint8_t>(t.layer);
  return fmt::format("a Terminate [{}] (layer {} etype {} code 0x{:02x}): {}",
                     describe_term(layer, t.etype, t.ecode), layer, t.etype, t.ecode,
                     trace::explain_terminate_code(layer, t.etype, t.ecode));
}

// The segment as placed, first segment of an untagged message known by its MO.
std::string segment_text(const rnic::RxEvent& e) {
  const auto& h = *e.hdr;
  trace::SegmentPlace place{0, h.last};
  if (!h.tagged && h.mo.value() == 0) place.index = 1;
  return trace::explain_segment(h, nullptr, e.payload, place);
}

// RFC 5041 §5.4 lets a receiver place a segment before the ones ahead of it arrive; its
// message is delivered (completed) only in order, when the hole before it closes.
std::string placed_beyond_hole(const rnic::RxEvent& e) {
  const auto* info = info_of(e);
  if (!info) return fmt::format("an FPDU at stream octets {} placed beyond a TCP hole", range(e));
  const auto& h = *e.hdr;
  switch (info->family) {
    case F::Write:
      return fmt::format(
          "RDMA Write beyond a TCP hole: its {} octets are placed now at TO 0x{:x} of STag "
          "0x{:08x} (stream octets {}); a Write has no completion at the sink, and it counts as "
          "delivered when the hole closes (RFC 5041 §5.4)",
          e.payload, h.to.value(), h.stag.value(), range(e));
    case F::ReadResponse:
      return fmt::format(
          "RDMA Read Response beyond a TCP hole: its {} octets are placed now at TO 0x{:x} of "
          "STag 0x{:08x}, the Read's sink; the Read completes only once the hole closes, in "
          "stream order (RFC 5040 §5.3, RFC 5041 §5.4)",
          e.payload, h.to.value(), h.stag.value());
    case F::Send:
      return fmt::format(
          "{} beyond a TCP hole: MSN {} placed now, {} octets at MO {} of the receive WQE its "
          "MSN selects; its completion waits for the hole to close (RFC 5041 §5.4)",
          info->name, h.msn.value(), e.payload, h.mo.value());
    case F::ReadRequest:
      return fmt::format(
          "RDMA Read Request MSN {} beyond a TCP hole: its source is checked now; it joins the "
          "inbound read queue only when the hole closes, so Read Responses keep request order "
          "(RFC 5040 §6.3, RFC 5041 §5.4)",
          h.msn.value());
    default:
      return fmt::format(
          "{} beyond a TCP hole, placed now; its effect is delivered in stream order when the "
          "hole closes (RFC 5041 §5.4)",
          info->name);
  }
}

std::string completion(const rnic::RxEvent& e) {
  const auto* info = info_of(e);
  if (!info)
    return "a work request completes: its completion queue entry is written (RFC 5040 §5.3)";
  const auto& h = *e.hdr;
  switch (info->family) {
    case F::Send:
      return fmt::format(
          "receive completion: the {} with MSN {} is whole, so the receive WQE it consumed "
          "completes to the CQ, in MSN order{}{} (RFC 5040 §5.3{})",
          info->name, h.msn.value(),
          info->invalidate ? fmt::format(", after STag 0x{:08x} is invalidated", h.rsvd_ulp) : "",
          info->solicited ? ", raising a solicited event" : "", info->invalidate ? ", §5.4" : "");
    case F::ReadResponse:
      return fmt::format(
          "the RDMA Read work request completes on the requester: the last Read Response segment "
          "(TO 0x{:x} of STag 0x{:08x}) has placed all the data it asked for (RFC 5040 §4.5)",
          h.to.value(), h.stag.value());
    case F::ImmediateData:
      return fmt::format(
          "receive completion with immediate data: Immediate Data MSN {} completes the next "
          "receive WQE with its immediate value, telling that the Writes before it are placed "
          "(RFC 7306 §4.3)",
          h.msn.value());
    case F::AtomicResponse:
      return "the atomic work request completes on the requester with the original value the "
             "Atomic Response returned (RFC 7306 §4.2.2)";
    default:
      return fmt::format("{} completes (RFC 5040 §5.3)", info->name);
  }
}

std::string released(const rnic::RxEvent& e) {
  return fmt::format(
      "hole {} closed, so what waited on it is released in stream order: {} Send completion(s) "
      "to the CQ, {} RDMA Read completion(s), {} Read Request(s) to the read queue with one "
      "doorbell, {} Write segment(s) delivered (RFC 5040 §5.3, RFC 5041 §5.4)",
      range(e), e.sends, e.read_responses, e.read_requests, e.writes);
}

std::string explain_by_kind(const rnic::RxEvent& e) {
  switch (e.kind) {
    case K::Placed:
      if (e.beyond_hole) return placed_beyond_hole(e);
      if (!e.hdr) return fmt::format("an FPDU at stream octets {} placed in order", range(e));
      return "in order: " + segment_text(e);
    case K::Deferred:
      return fmt::format(
          "{} beyond a TCP hole that cannot be placed yet (no payload to place ahead, or no "
          "receive WQE known for it): it waits whole and goes through in stream order when the "
          "hole closes (RFC 5041 §5.4)",
          info_of(e) ? fmt::format("{} at stream octets {}", info_of(e)->name, range(e))
                     : fmt::format("the FPDU at stream octets {}", range(e)));
    case K::DeferredError:
      return fmt::format(
          "an invalid FPDU beyond a TCP hole (stream octets {}): it calls for {}; that Terminate "
          "waits until the hole closes, so everything before it completes first (RFC 5041 "
          "§5.4)",
          range(e), term_text(e));
    case K::HoleOpened:
      return fmt::format(
          "TCP hole opened: stream octets {} are missing while data beyond them arrived; whole "
          "FPDUs beyond it are found by their MPA framing and placed now, their completions wait "
          "for the hole to close (RFC 5044 §8, RFC 5041 §5.4)",
          range(e));
    case K::HoleClosed:
      return fmt::format(
          "TCP hole closed: the missing stream octets {} arrived, so the in-order point moves "
          "past them and what was placed beyond can now be delivered in order (RFC 5041 §5.4)",
          range(e));
    case K::Released:
      return released(e);
    case K::Completion:
      return completion(e);
    case K::Doorbell:
      return fmt::format(
          "doorbell: Read Request MSN {} joined the inbound read queue, so the responder may "
          "send its Read Responses, in the order the requests came (RFC 5040 §6.3)",
          e.hdr ? e.hdr->msn.value() : 0);
    case K::TerminateSent:
      return fmt::format(
          "this endpoint found a violation and sends {}; its queue pair goes to Terminate, then "
          "Error, and its work requests are flushed (RFC 5040 §4.8)",
          term_text(e));
    case K::TerminateReceived:
      return fmt::format(
          "the peer sent {}; this endpoint's queue pair goes to Error and its outstanding work "
          "requests complete in error (RFC 5040 §4.8)",
          term_text(e));
    case K::Violation:
      return "a framing or protocol violation found by the receive engine; the Terminate it "
             "calls for is reported with it (RFC 5040 §7.4.1)";
    case K::Duplicate:
      return fmt::format(
          "duplicate: stream octets {} had already arrived (a TCP retransmission or overlap); the "
          "octets held first win and nothing is placed twice (TCP delivers each octet once, "
          "RFC 793)",
          range(e));
  }
  return {};
}

}  // namespace

std::string explain_event(const rnic::RxEvent& e) {
  return explain_by_kind(e);
}

}  // namespace iwarp::replay
