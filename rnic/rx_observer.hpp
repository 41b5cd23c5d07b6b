// What a queue pair's receive engine reports as it works, for the replay timeline, tests and
// teaching: placements (in order or beyond a TCP hole), holes opening and closing, deferred
// completions released when a hole closes, doorbells, Terminates and protocol violations.
// Called on the engine thread; keep handlers short.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/wire_error.hpp"
#include "ddp/ddp_header.hpp"

namespace iwarp::rnic {

struct RxEvent {
  enum class Kind : std::uint8_t {
    Placed,         // an FPDU's payload went to memory (beyond_hole says where it was)
    Deferred,       // an FPDU beyond a hole that cannot be placed yet: it waits for the hole
    DeferredError,  // an invalid FPDU beyond a hole: its Terminate waits for the hole
    HoleOpened,     // [begin, end) of the stream is missing, data beyond it arrived
    HoleClosed,     // that range arrived
    Released,       // a hole closed: deferred completions and doorbells went out
    Completion,     // a receive-side completion (Send / Immediate) or a Read/atomic WR done
    Doorbell,       // the read queue's doorbell rang for Read Requests (Responses may go)
    TerminateSent,  // we found a violation and sent a Terminate
    TerminateReceived,
    Violation,  // a framing or protocol error (also reported through TerminateSent)
    Duplicate,  // a segment (or part) that had already arrived
  };
  Kind kind = Kind::Placed;
  std::uint32_t qp_num = 0;
  std::uint64_t offset = 0;  // stream offset (Full Operation octet 0) the event is about
  std::uint64_t end = 0;     // HoleOpened/HoleClosed: end of the range; Placed: end of FPDU
  bool beyond_hole = false;  // Placed/Completion: happened while a hole lay before it
  // Released: what the closing hole let go: the Send CQEs, Read WR completions and Read
  // Requests held back, in stream order (RFC 5040 §5.3 / RFC 5041 §5.4).
  std::uint32_t sends = 0, read_responses = 0, read_requests = 0, writes = 0;
  std::string text;  // one line: opcode, STag/TO or MSN/MO, length; or the error
  // For explanations (rnic replay --explain): the DDP header of the segment the event is about
  // (Placed, Deferred, Completion, Doorbell), and the Terminate's Layer / EType / Error Code
  // (TerminateSent, TerminateReceived, DeferredError).
  std::optional<ddp::DdpHeader> hdr{};
  std::optional<TermCode> term{};
  std::uint32_t payload = 0;  // Placed: the segment's ULP payload octets
};

class RxObserver {
 public:
  virtual ~RxObserver() = default;
  virtual void on_event(const RxEvent& e) = 0;
};

}  // namespace iwarp::rnic
