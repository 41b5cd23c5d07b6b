// The learning pass of `rnic replay`: from a capture, what two emulated endpoints need to take
// both directions of each iWARP connection as their real counterparts did. Per connection it
// finds where Full Operation starts in each direction (after the MPA Request and Reply), the
// negotiated parameters, the STags each side was written at or read from with the range of
// tagged offsets used (their shadow memory), one receive buffer per Send or Immediate Data
// message sized exactly, the RDMA Reads and atomics each side issued (so its emulation can post
// the same request before the answer arrives), and the Terminates the trace holds. The result is
// a list of steps in capture order: TCP segments and FINs to inject, and work requests to post.
#pragma once

#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/bytes.hpp"
#include "common/strong_types.hpp"
#include "ddp/rdmap_headers.hpp"
#include "mpa/connection_decoder.hpp"
#include "mpa/negotiation.hpp"
#include "replay/replay_limits.hpp"
#include "trace/pcap_reader.hpp"

namespace iwarp::replay {

// The two emulated endpoints of a connection. The initiator sent the MPA Request; it receives
// the responder-to-initiator direction, the responder the other one.
enum class Side : std::uint8_t { Initiator = 0, Responder = 1 };
std::string_view to_string(Side s);  // "I", "R"
// The endpoint that receives direction `d`, and the one that sends it.
constexpr Side receiver_of(mpa::Direction d) {
  return d == mpa::Direction::FromInitiator ? Side::Responder : Side::Initiator;
}
constexpr Side sender_of(mpa::Direction d) {
  return d == mpa::Direction::FromInitiator ? Side::Initiator : Side::Responder;
}
constexpr int index(Side s) {
  return static_cast<int>(s);
}
constexpr int index(mpa::Direction d) {
  return static_cast<int>(d);
}

// Shadow memory behind one STag: [begin_to, end_to) of tagged offsets the traffic touched.
struct RegionPlan {
  STag stag{0};
  std::uint64_t begin_to = 0, end_to = 0;
  std::string why;  // "Write", "Read Response", "Read source", "atomic target", "invalidated"
};

// One receive buffer, for the Send (or Immediate Data) message with this MSN.
struct RecvPlan {
  std::uint32_t msn = 0;
  std::uint32_t size = 0;  // at most PlanLimits::max_message
  bool seen = false;       // false: the message is not in the capture (a placeholder)
  bool complete = false;   // its last segment (L) is in the capture
  bool immediate = false;
  // The initiator's peer-to-peer RTR, a zero-length Send (RFC 6581 §4): it takes a zero-length
  // receive posted for it, whose completion the replay leaves out (an RTR completes nothing).
  bool rtr = false;
};

// An RDMA Read the endpoint issued (its Read Request is in the capture).
struct ReadPlan {
  rdmap::ReadRequest request;
  std::uint32_t msn = 0;
  std::uint64_t frame = 0;  // capture frame that first carried the Read Request
  bool answered = false;    // its whole Read Response is in the capture
  bool rebuilt = false;     // the request is not in the capture: rebuilt from its response
};

// An atomic the endpoint issued (RFC 7306).
struct AtomicPlan {
  rdmap::AtomicRequest request;
  std::uint64_t frame = 0;
  bool answered = false;
  bool rebuilt = false;  // the request is not in the capture: rebuilt from its response
};

// A Terminate in the capture.
struct TerminatePlan {
  Side from = Side::Initiator;
  std::uint64_t frame = 0;
  std::uint8_t layer = 0, etype = 0, ecode = 0;
  std::string text;  // cause, as one line
};

// A protocol violation `rnic decode` finds in the capture itself.
struct TraceViolation {
  mpa::Direction dir = mpa::Direction::FromInitiator;
  std::uint64_t frame = 0;
  std::string text;
};

struct EndpointPlan {
  std::vector<RegionPlan> regions;  // by STag
  std::vector<RecvPlan> recvs;      // MSN order from 1
  std::vector<ReadPlan> reads;      // in the order issued
  std::vector<AtomicPlan> atomics;  // in the order issued
  std::uint64_t shadow_bytes() const;
};

// Tagged memory an FPDU of a segment writes: [begin_to, end_to) under `stag`.
struct TaggedRange {
  STag stag{0};
  std::uint64_t begin_to = 0, end_to = 0;
};

// One thing to do, in capture order.
struct Step {
  enum class Kind : std::uint8_t { Segment, Fin, PostRead, PostAtomic };
  Kind kind = Kind::Segment;
  mpa::Direction dir = mpa::Direction::FromInitiator;  // Segment/Fin: the direction it travels
  Side side = Side::Initiator;                         // PostRead/PostAtomic: who posts
  std::uint64_t frame = 0, time_us = 0;
  TcpSeq seq;                // Segment: first payload octet; Fin: the FIN's sequence number
  Bytes payload;             // Segment, when its payload is held (file_offset == kNotInFile)
  std::size_t item = 0;      // PostRead/PostAtomic: index into the endpoint's reads/atomics
  std::uint64_t offset = 0;  // Segment: stream offset of seq (MPA frame included); 0 when seq
                             // lies before the stream (the receiver drops those octets)
  std::vector<TaggedRange> tagged;  // Segment: Write / Read Response data its FPDUs place
  // Segment of a capture read with payloads_in_file: its payload is the `length` octets at
  // this position of the capture file, read when the step is injected (payload_of).
  std::uint64_t file_offset = trace::kNotInFile;
  std::uint32_t length = 0;
};

// A post, and the capture frame of the segment step it goes in before (a plan whose steps are
// read again: ConnectionPlan::posts).
struct PostAt {
  std::uint64_t before_frame = 0;
  Step post;
};

// Where the replay takes a connection's steps from (make_plan).
enum class StepSource : std::uint8_t {
  // Kept in the plan, one per segment (ConnectionPlan::steps and ::setup). A seeded disorder
  // needs them (each segment's tagged ranges: Step::tagged), and so does the HTML view
  // (StreamOctets); a capture that is not a regular file (a pipe) can only be read once.
  Kept,
  // Made as the replay reads the capture file again (StepStream, trace::rescan_capture), so
  // that the plan holds no step per segment and the replay's memory does not grow with the
  // capture's length. Only for a capture read with payloads_in_file from a regular file, and
  // within kRescanBudget; the other connections' steps are Kept.
  ReadAgain,
};

// Each connection whose steps are read again reads the capture file again, from its start to
// the connection's last frame. A ReadAgain plan picks the connections with the most segments
// first, as long as those reads add up to at most this many times the capture's frames, and
// keeps the others' steps: one connection is always read again; of equal ones one after the
// other, three (of four, three); of 8 that run side by side through the whole capture, 2.
inline constexpr std::uint64_t kRescanBudget = 2;

// A size the capture asks for that is past one of the limits in replay_limits.hpp.
struct LimitFinding {
  std::string limit;          // the constant's name ("kMaxReceives", ...)
  std::uint64_t allowed = 0;  // its value
  std::uint64_t needed = 0;   // what the capture asks for
  std::string text;           // one line: what in the capture, where, and what happens
};

struct ConnectionPlan {
  std::size_t flow = 0;  // index in the capture (connection cN)
  trace::IpEndpoint initiator, responder;
  mpa::MpaFrame request, reply;
  mpa::ConnectionParams params;
  // Per direction: sequence number of the first octet of the stream and of Full Operation
  // (right after the MPA frame), and the MPA frame's length.
  TcpSeq stream_seq[2], full_operation_seq[2];
  std::uint64_t mpa_length[2] = {0, 0};
  std::uint64_t stream_length[2] = {0, 0};  // octets reassembled in order
  std::uint64_t fpdus[2] = {0, 0};
  std::uint64_t setup_segments = 0;  // segments holding only MPA frames (not replayed)
  std::deque<Step> setup;            // those segments, kept for their octets (StreamOctets)
  bool fin[2] = {false, false};      // a FIN closed that direction in the capture
  bool rst = false;
  EndpointPlan ep[2];
  // StepSource::Kept: the steps. (Deques: one step per captured segment, so no copy and no
  // spare half as they grow.)
  std::deque<Step> steps;
  // StepSource::ReadAgain: `steps` and `setup` stay empty; StepStream makes the same steps from
  // the capture's segments as the replay reads the file again, from what follows.
  bool read_again = false;
  std::vector<PostAt> posts;            // in the order they go in
  std::vector<std::uint64_t> left_out;  // frames taken out (Capture::left_out)
  std::uint64_t last_frame = 0;         // of the connection's last segment
  // Octets the renumbering of Atomic Responses rewrites, per direction: stream offset -> octet
  // (a Kept plan's steps hold their payloads patched).
  std::map<std::uint64_t, std::uint8_t> patches[2];
  // Either source: how many steps and segment steps, and the earliest step's capture time;
  // a digest of the segment and FIN steps (direction, frame, sequence number, length), which
  // the steps made as the file is read again must match.
  std::uint64_t step_count = 0, segment_steps = 0, first_time_us = UINT64_MAX;
  std::uint64_t step_digest = 0;
  std::vector<TerminatePlan> terminates;
  std::vector<TraceViolation> trace_violations;
  // Why the capture holds less than the whole exchange (holes never filled, a message or an
  // FPDU cut off, no FIN), and other facts the report shows.
  std::vector<std::string> cut_short;
  std::vector<std::string> notes;
  // Limits the capture reached that did not stop the replay (kMaxStreamOffset).
  std::vector<LimitFinding> limits;
  // What the replay allocates for this connection (shadow memory, receive buffers, atomic
  // results, work request bookkeeping): at most PlanLimits::max_total.
  std::uint64_t planned_bytes = 0;
  // The capture file the steps' payloads are read from (a capture read with payloads_in_file).
  std::shared_ptr<const trace::CaptureFile> file;
  std::uint64_t segments() const;
  // A segment step's payload: held, or read from the capture file through `reader` (one made
  // for `file`; throws trace::CaptureChanged when the file changed since it was read).
  Bytes payload_of(const Step& st, trace::PayloadReader* reader) const;
};

// A ReadAgain plan's steps, made from the connection's segments as the capture file is read
// again (trace::rescan_capture hands them over in capture order): the steps a Kept plan of the
// same capture holds, in the same order, except that a segment's tagged ranges are not known
// (Step::tagged stays empty) and its payload is not in Step::payload: it is handed over beside
// the step (StepEmit). Refers to the plan, which must outlive it.
//
// StepEmit: a step, and for a segment its payload, valid during the call only: libpcap's
// frame, or a copy of it the renumbering patched (a buffer the stream reuses). Empty for the
// other steps. (The replay copies it once, into the batch it hands to the engine.)
using StepEmit = std::function<void(Step&&, ByteSpan payload)>;
class StepStream {
 public:
  explicit StepStream(const ConnectionPlan& cp) : cp_(cp) {}
  // A segment of the capture (any connection's) in direction `dir` (0: from the client, which
  // is the initiator); a segment of this connection makes its steps, each handed to `emit` in
  // order: the posts due before it, the segment, its FIN. Frames taken out make none.
  void segment(std::size_t flow, int dir, const trace::SegmentView& v, const StepEmit& emit);
  std::uint64_t made() const { return made_; }
  std::uint64_t digest() const { return digest_; }  // as ConnectionPlan::step_digest
  // The connection's last segment has been seen: the rest of the file makes no step.
  bool done() const { return done_; }

 private:
  const ConnectionPlan& cp_;
  std::size_t next_post_ = 0;
  std::uint64_t made_ = 0, digest_ = 0;
  bool done_ = false;
  Bytes patched_;  // a payload the renumbering patches
};

// Reads the capture file of ReadAgain connection `cp` again (trace::rescan_capture) and hands
// each of its steps to `emit`, in order (StepStream). Throws trace::CaptureChanged, in one line
// naming the file, when the file changed since it was read or reads again into other steps
// than the plan learned (their number, or their segments: ConnectionPlan::step_digest).
void read_steps_again(const ConnectionPlan& cp, const StepEmit& emit);

// A connection's stream octets as the capture's segments carried them, each from the first
// segment (in capture order) that carried it, as the replay injected them: an index of which
// segment step supplies each range, built once (the HTML view asks for many ranges). Refers to
// the plan, which must outlive it.
class StreamOctets {
 public:
  explicit StreamOctets(const ConnectionPlan& cp);
  // Direction d's octets [off, off + len), up to the first octet no segment holds.
  Bytes get(mpa::Direction d, std::uint64_t off, std::uint64_t len,
            trace::PayloadReader* reader) const;

 private:
  struct Piece {
    std::uint64_t end;  // [key, end) of the stream comes from `step`
    const Step* step;
  };
  const ConnectionPlan& cp_;
  std::map<std::uint64_t, Piece> pieces_[2];  // per direction, disjoint, by stream offset
};

// A TCP connection that is not replayed, and why.
struct SkippedFlow {
  std::size_t flow = 0;
  trace::IpEndpoint client, server;
  std::string reason;
  std::optional<LimitFinding> limit;  // when a limit refused it (reason is its text)
};

struct Plan {
  std::string path;
  std::uint64_t frames = 0;
  std::vector<std::string> problems;  // capture problems (truncated frames, a damaged tail)
  std::vector<ConnectionPlan> connections;
  std::vector<SkippedFlow> skipped;
  PlanLimits limits;  // what make_plan() checked against
  // make_plan_from_file(): the reads of the file it made to learn the plan (1 for most captures).
  std::uint64_t learning_reads = 0;
  std::uint64_t total_steps() const;
  std::uint64_t planned_bytes() const;  // the largest connection's (they run one at a time)
};

// Leaves capture frames out, as if the network had lost them (`rnic replay --drop`). Returns
// how many TCP segments went, or one line naming a frame that is no TCP segment with data, SYN,
// FIN or RST (pure ACKs are not kept, so there is nothing to drop). A direction keeps its SYN
// only where a segment that carries it is left, the first one left (its ISN); a flow whose
// client SYN went gets the scanner's "capture starts mid-connection" problem.
std::expected<std::size_t, std::string> drop_frames(trace::Capture& cap,
                                                    const std::vector<std::uint64_t>& frames);

// Learns the plan. Fails (one line naming the file) when no connection can be replayed: no
// iWARP connection, none with its MPA exchange in the capture, or every one past a limit (see
// replay_limits.hpp: nothing is allocated for a connection past a limit). A capture read with
// payloads_in_file is read again from its file, segment by segment, and the plan's steps keep
// where their payloads lie, not the payloads (throws trace::CaptureChanged when the file
// changed since it was read); with StepSource::ReadAgain it keeps no steps at all (see there).
std::expected<Plan, std::string> make_plan(const trace::Capture& cap, const PlanLimits& limits = {},
                                           StepSource source = StepSource::Kept);

// make_plan(read_capture(path, {.payloads_in_file = true}), limits, StepSource::ReadAgain)
// without holding the capture (`rnic replay` in capture order); with `drop`, of that capture after
// drop_frames(cap, drop), each read handing on the other frames only. A pipe ("-" or a named one)
// is first copied into an unnamed temporary file (trace::copy_to_unnamed_file), read instead. One
// read of the file notes a few words per flow (where each direction starts, how many segments, the
// last frame), decodes every flow (trace::FileDecoder) and learns each connection whose first
// segment is the client's MPA Request, as its segments come, at most kLearnedPerRead of them open
// at once. Further reads, only when needed: one decodes again the flows whose streams start
// elsewhere than the first read took them to (a direction without its SYN whose lowest sequence
// number came later), so that the budget of reads is chosen from the same reports as make_plan();
// then reads learn the replayable connections the first did not (restarted, begun while
// kLearnedPerRead were open, the Request's key cut across segments), those whose steps are kept
// (past kRescanBudget: their segments' places in the file, a record each) and those whose learner
// gave up (kHeldBeforeFramingSpeculative, kMaxSegmentsBeforeFraming). Then the replay reads the
// file again for each connection whose steps are read again. Each learner holds what make_plan()'s
// does; what all of them hold beyond gaps is at most limits.max_held, and the decoder's at most
// that again; so what it holds does not grow with the capture's length (but with the connections
// past the budget). Its decoder ends a connection once both directions have (as `rnic decode`
// does): data a capture shows after that is counted in a note and not checked for violations, where
// make_plan()'s decoder checks it (the learner learns from it either way). Fails as make_plan() and
// drop_frames() do, and in one line when the path is neither a regular file nor a pipe (a device:
// it cannot be read again) or the pipe cannot be copied; throws trace::CaptureChanged when the file
// changed between the reads.
std::expected<Plan, std::string> make_plan_from_file(const std::string& path,
                                                     const PlanLimits& limits = {},
                                                     std::vector<std::uint64_t> drop = {});

}  // namespace iwarp::replay
