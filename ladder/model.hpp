// The ladder's model of a capture: per iWARP connection, its MPA exchange and its RDMAP
// messages, each message with the DDP segments that carried it (grouped by the L bit,
// RFC 5041 §5.1), built from trace::decode_file()'s records (no decoding of its own).
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <vector>

#include "ladder/filter.hpp"
#include "mpa/connection_decoder.hpp"
#include "mpa/mpa_frame.hpp"
#include "mpa/negotiation.hpp"

namespace iwarp::ladder {

// A Terminate's error fields (RFC 5040 §4.8): Layer, EType, Error Code, and their meaning.
struct TerminateInfo {
  unsigned layer = 0, etype = 0, ecode = 0;
  std::string meaning;  // "DDP tagged: invalid STag"
};

// One RDMAP message: the DDP segments from its first to the one with L set.
struct Message {
  std::uint8_t opcode = 0;
  bool tagged = false;
  std::uint32_t stag = 0;  // tagged: of the first segment
  std::uint64_t to = 0;
  std::uint32_t qn = 0, msn = 0, mo = 0;  // untagged: of the first segment
  std::uint64_t length = 0;               // payload octets of all segments
  std::uint32_t segments = 0;
  bool complete = false;  // its last segment (L=1) is in the capture
  std::string detail;     // the RDMAP body as decoded (Read Request sink/src, atomics, imm)
  std::optional<TerminateInfo> terminate;
  // The first problem the decoder found in one of its segments (a bad CRC, RFC 5044 §6.2, or
  // a segment check), and how many segments had one.
  std::string problem;
  std::uint32_t bad_segments = 0;
  std::uint64_t last_time_us = 0;
  std::uint64_t next_to = 0;     // tagged: where the next segment of this message starts
  std::uint64_t last_frame = 0;  // capture frame of its last segment seen
  // Stream octets of its FPDUs in its direction, [offset, end_offset), as rnic decode counts
  // them (from the start of the stream, the MPA frame included).
  std::uint64_t offset = 0, end_offset = 0;
};

// Something an endpoint's stack did locally (no wire message of its own), drawn beside the
// message it belongs to on that endpoint's column: a WQE posted, a placement, a hole opened
// or closed, deferred completions released, a CQE, a doorbell, a Terminate (rnic replay
// --ladder fills these in from the replay's timeline; see ladder/local_events.hpp).
struct Local {
  bool at_initiator = false;            // whose column (the initiator's or the responder's)
  std::string category;                 // short class name: "hole-opened", "cqe", "wqe-posted", ...
  std::uint64_t seq = 0;                // order in which it happened (1-based; 0: not known)
  std::uint64_t at_frame = 0;           // capture frame being handled when it happened
  std::uint32_t count = 1;              // consecutive identical events drawn as one (×N)
  std::size_t of_event = SIZE_MAX;      // index of the message event it belongs to (or none)
  std::optional<std::uint64_t> offset;  // stream offset it is about (as Message::offset)
};

struct Event {
  enum class Kind : std::uint8_t { Mpa, Message, Violation, Note, Local };
  Kind kind = Kind::Note;
  mpa::Direction dir = mpa::Direction::FromInitiator;
  std::uint64_t frame = 0;    // capture frame of the first segment (or of the MPA frame)
  std::uint64_t time_us = 0;  // relative to the model's t0
  std::optional<mpa::MpaFrame> mpa;
  Message msg;
  std::string text;  // Violation / Note / Local
  Local local;       // Kind::Local
};

struct Connection {
  std::size_t index = 0;  // as `rnic decode` numbers it (cN)
  std::string initiator, responder;
  std::optional<mpa::ConnectionParams> params;
  // Per direction (Direction's value): where the MPA frame ends in the stream, i.e. where its
  // FPDUs start (RFC 5044 §7.1); 0 when the frame is not in the capture.
  std::uint64_t mpa_end[2] = {0, 0};
  std::vector<Event> events;  // in capture order (a message at its first segment)
};

struct Model {
  std::string path;
  std::uint64_t t0_us = 0;  // time of the capture's first decoded record (rnic decode's 0)
  std::size_t connections_in_file = 0;  // iWARP connections, before the filter
  std::uint64_t messages_in_file = 0;   // RDMAP messages, before the filter
  std::vector<Connection> connections;  // iWARP connections that the filter keeps
  std::vector<std::string> notes;       // what the model left out (limits)
};

// What one model may hold: events beyond this are counted in a note, not kept (narrow the
// view with --connection, --from/--to or --opcode to see them).
inline constexpr std::size_t kMaxEvents = 200000;
// Messages waiting for their L segment, per connection direction; beyond it the oldest is
// closed as incomplete.
inline constexpr std::size_t kMaxOpenMessages = 1024;

// Decodes `path` with trace::decode_file() and builds the model of what `filter` keeps.
// Errors (unreadable capture, no iWARP connection, --connection beyond the file) are one line.
std::expected<Model, std::string> build_model(const std::string& path, const Filter& filter,
                                              std::size_t max_events = kMaxEvents);

// The opcode label of a message ("RDMA Write", "Send with SE").
std::string opcode_label(std::uint8_t opcode);

}  // namespace iwarp::ladder
