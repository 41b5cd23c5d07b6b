#include "replay/replay_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <variant>

#include "common/interval_set.hpp"
#include "ddp/segment.hpp"
#include "mpa/crc32c.hpp"
#include "mpa/fpdu.hpp"
#include "trace/tcp_reassembly.hpp"
#include "trace/trace_decoder.hpp"

namespace iwarp::replay {

std::string_view to_string(Side s) {
  return s == Side::Initiator ? "I" : "R";
}

std::uint64_t EndpointPlan::shadow_bytes() const {
  std::uint64_t n = 0;
  for (const auto& r : regions) n += r.end_to - r.begin_to;
  return n;
}

std::uint64_t ConnectionPlan::segments() const {
  return segment_steps;
}

Bytes ConnectionPlan::payload_of(const Step& st, trace::PayloadReader* reader) const {
  if (st.file_offset == trace::kNotInFile) return st.payload;
  if (!reader)
    throw trace::CaptureChanged(
        "internal error: a payload is in the capture file, but the plan has no file to read it "
        "from");
  const auto p = reader->read(st.file_offset, st.length);
  return Bytes(p.begin(), p.end());
}

StreamOctets::StreamOctets(const ConnectionPlan& cp) : cp_(cp) {
  IntervalSet<std::uint64_t> held[2];
  // Setup segments and steps, each list in capture order, merged by frame.
  auto add = [&](const Step& st) {
    if (st.kind != Step::Kind::Segment) return;
    const int d = index(st.dir);
    const std::int64_t at = st.seq - cp.stream_seq[d];
    const std::size_t n = st.file_offset != trace::kNotInFile ? st.length : st.payload.size();
    const std::int64_t end = at + static_cast<std::int64_t>(n);
    if (end <= 0) return;
    held[d].insert(
        static_cast<std::uint64_t>(std::max<std::int64_t>(at, 0)), static_cast<std::uint64_t>(end),
        [&](std::uint64_t lo, std::uint64_t hi) {
          pieces_[d].emplace(lo, Piece{hi, &st});
        },
        [](std::uint64_t, std::uint64_t) {});
  };
  auto a = cp.setup.begin();
  for (const auto& st : cp.steps) {
    if (st.kind != Step::Kind::Segment) continue;  // (a post's frame may be a later one's)
    for (; a != cp.setup.end() && a->frame < st.frame; ++a) add(*a);
    add(st);
  }
  for (; a != cp.setup.end(); ++a) add(*a);
}

Bytes StreamOctets::get(mpa::Direction d, std::uint64_t off, std::uint64_t len,
                        trace::PayloadReader* reader) const {
  Bytes out;
  const auto& pieces = pieces_[index(d)];
  for (std::uint64_t o = off; o < off + len;) {
    auto it = pieces.upper_bound(o);
    if (it == pieces.begin()) break;
    --it;
    if (o >= it->second.end) break;
    const Step& st = *it->second.step;
    const Bytes p = cp_.payload_of(st, reader);
    const std::int64_t at = st.seq - cp_.stream_seq[index(d)];
    const auto from = static_cast<std::size_t>(static_cast<std::int64_t>(o) - at);
    const auto n = static_cast<std::size_t>(std::min(it->second.end, off + len) - o);
    if (from + n > p.size()) break;  // (a step's payload is as long as the range it supplies)
    out.insert(out.end(), p.begin() + static_cast<std::ptrdiff_t>(from),
               p.begin() + static_cast<std::ptrdiff_t>(from + n));
    o += n;
  }
  return out;
}

std::uint64_t Plan::total_steps() const {
  std::uint64_t n = 0;
  for (const auto& c : connections) n += c.step_count;
  return n;
}

std::uint64_t Plan::planned_bytes() const {
  std::uint64_t n = 0;
  for (const auto& c : connections) n = std::max(n, c.planned_bytes);
  return n;
}

namespace {

using mpa::Direction;
using rdmap::Opcode;

constexpr Direction kDirs[2] = {Direction::FromInitiator, Direction::FromResponder};

// The in-order octets of a direction the learning pass keeps behind the decoder (an Atomic
// Response's octets are copied from there when it is decoded, for renumbering): more than an
// FPDU's largest wire length (a 16-bit ULPDU length, pad, CRC and markers).
constexpr std::size_t kKeptBehind = 128u << 10;

std::string dir_name(Direction d) {
  return d == Direction::FromInitiator ? "I>R" : "R>I";
}

// A segment of `len` octets at `seq` in direction d that holds nothing beyond the MPA frame: the
// connection setup, not replayed.
bool is_setup(const ConnectionPlan& cp, int d, TcpSeq seq, std::size_t len) {
  const std::int64_t end = (seq - cp.stream_seq[d]) + static_cast<std::int64_t>(len);
  return end <= static_cast<std::int64_t>(cp.mpa_length[d]);
}

// A step that injects what frame `frame` carried in direction d, at `seq`.
Step wire_step(Step::Kind kind, int d, std::uint64_t frame, std::uint64_t time_us, TcpSeq seq) {
  Step st;
  st.kind = kind;
  st.dir = kDirs[d];
  st.frame = frame;
  st.time_us = time_us;
  st.seq = seq;
  return st;
}

// The step that injects a segment, without its payload or what its FPDUs tell.
Step bare_segment_step(const ConnectionPlan& cp, int d, std::uint64_t frame, std::uint64_t time_us,
                       TcpSeq seq) {
  Step st = wire_step(Step::Kind::Segment, d, frame, time_us, seq);
  const std::int64_t off = seq - cp.stream_seq[d];
  st.offset = off < 0 ? 0 : static_cast<std::uint64_t>(off);
  return st;
}

// The step that injects a FIN (its sequence number: after the segment's payload).
Step fin_step(int d, std::uint64_t frame, std::uint64_t time_us, TcpSeq seq) {
  return wire_step(Step::Kind::Fin, d, frame, time_us, seq);
}

// ConnectionPlan::step_digest with one more segment or FIN step (FNV-1a over its fields).
std::uint64_t digest_step(std::uint64_t h, Step::Kind kind, int d, std::uint64_t frame, TcpSeq seq,
                          std::size_t len) {
  if (h == 0) h = 0xcbf29ce484222325ull;
  for (const std::uint64_t v :
       {std::uint64_t{static_cast<std::uint8_t>(kind)}, static_cast<std::uint64_t>(d), frame,
        std::uint64_t{seq.value()}, std::uint64_t{len}})
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return h;
}

// Writes the renumbering's patches (stream offset -> octet) into a payload that starts at
// stream offset `off` (negative: before the stream).
void apply_patches(const std::map<std::uint64_t, std::uint8_t>& pm, std::int64_t off,
                   MutableByteSpan payload) {
  const std::int64_t end = off + static_cast<std::int64_t>(payload.size());
  if (end <= 0) return;
  for (auto it = pm.lower_bound(off < 0 ? 0 : static_cast<std::uint64_t>(off));
       it != pm.end() && static_cast<std::int64_t>(it->first) < end; ++it)
    payload[static_cast<std::size_t>(static_cast<std::int64_t>(it->first) - off)] = it->second;
}

using Body = decltype(ddp::Segment::body);

// One FPDU of the capture, as the learning pass needs it (one per FPDU of the capture: kept
// small, what only some opcodes have is on the heap).
struct FpduInfo {
  std::uint64_t offset = 0;  // stream offset (MPA frame included)
  std::uint32_t wire_length = 0;
  mpa::CrcStatus crc = mpa::CrcStatus::NotChecked;
  bool parsed = false;
  ddp::DdpHeader hdr;
  std::uint32_t payload_length = 0;
  // The frame of the first segment step that carried any of its octets (0: none did).
  std::uint64_t first_frame = 0;
  std::unique_ptr<const Body> body;  // the RDMAP body, for the opcodes that have one
  std::unique_ptr<Bytes> wire;  // Atomic Responses: the FPDU's octets (renumber_atomic_responses)
  template <class T>
  const T& get() const {
    return std::get<T>(*body);
  }
  void set_body(const Body& b) {
    if (b.index() != 0) body = std::make_unique<const Body>(b);
  }
};

// Hands each FPDU decoded to `take`, as it is decoded (in stream order per direction).
class Collector final : public mpa::ConnectionVisitor {
 public:
  Collector(std::function<void(Direction, FpduInfo&&)> take,
            std::function<void(const mpa::ConnectionParams&)> negotiated)
      : take_(std::move(take)), negotiated_(std::move(negotiated)) {}
  std::uint64_t frame_length[2] = {0, 0};

  bool negotiated_once = false, rejected = false;

  void on_mpa_frame(Direction d, const mpa::MpaFrame& f, std::uint64_t,
                    std::size_t length) override {
    frame_length[index(d)] = length;
    if (d == Direction::FromResponder && f.reject) rejected = true;
  }
  // (Before any FPDU: the Reply fixes the framing, RFC 5044 §7.1.)
  void on_negotiated(const mpa::ConnectionParams& p) override {
    negotiated_once = true;
    negotiated_(p);
  }
  void on_fpdu(Direction d, const mpa::Fpdu& f) override {
    FpduInfo i;
    i.offset = f.offset;
    i.wire_length = f.wire_length;
    i.crc = f.crc;
    if (auto seg = ddp::parse_segment(f.ulpdu)) {
      i.parsed = true;
      i.hdr = seg->hdr;
      i.set_body(seg->body);
      i.payload_length = static_cast<std::uint32_t>(seg->payload.size());
    }
    take_(d, std::move(i));
  }
  void on_error(Direction, const WireError&) override {}

 private:
  std::function<void(Direction, FpduInfo&&)> take_;
  std::function<void(const mpa::ConnectionParams&)> negotiated_;
};

// FPDUs decoded beyond a gap, handed to `out` with their stream offsets (in stream order).
class Resync final : public mpa::StreamVisitor {
 public:
  // `wire` maps a decoded FPDU (offset, length) to its place in the block (offset, length),
  // for a block whose markers were taken out before decoding.
  using WireMap =
      std::function<std::pair<std::uint64_t, std::uint32_t>(std::uint64_t, std::uint32_t)>;
  Resync(std::function<void(FpduInfo&&)> out, std::uint64_t base, ByteSpan block, WireMap wire = {})
      : out_(std::move(out)), base_(base), block_(block), wire_(std::move(wire)) {}
  std::size_t count = 0;
  void on_mpa_frame(const mpa::MpaFrame&, std::uint64_t, std::size_t) override { stop_ = true; }
  void on_fpdu(const mpa::Fpdu& f) override {
    if (stop_) return;
    auto seg = ddp::parse_segment(f.ulpdu);
    if (!seg || f.crc == mpa::CrcStatus::Bad) {
      stop_ = true;  // not an FPDU boundary after all, or damaged: learn nothing more here
      return;
    }
    FpduInfo i;
    const auto [off, len] = wire_
                                ? wire_(f.offset, f.wire_length)
                                : std::pair<std::uint64_t, std::uint32_t>{f.offset, f.wire_length};
    i.offset = base_ + off;
    i.wire_length = len;
    i.crc = f.crc;
    i.parsed = true;
    i.hdr = seg->hdr;
    i.set_body(seg->body);
    i.payload_length = static_cast<std::uint32_t>(seg->payload.size());
    if (i.hdr.op() == rdmap::Opcode::AtomicResponse && off + len <= block_.size()) {
      const auto w = block_.subspan(off, len);
      i.wire = std::make_unique<Bytes>(w.begin(), w.end());
    }
    out_(std::move(i));
    ++count;
  }
  void on_error(const WireError&) override { stop_ = true; }

 private:
  std::function<void(FpduInfo&&)> out_;
  std::uint64_t base_;
  ByteSpan block_;
  WireMap wire_;
  bool stop_ = false;
};

// a + b, or 2^64 - 1 when that does not fit.
std::uint64_t add_saturating(std::uint64_t a, std::uint64_t b) {
  return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

struct RegionAcc {
  std::uint64_t begin = UINT64_MAX, end = 0;
  bool past_end = false;  // a range ran past the end of the 64-bit TO space
  std::set<std::string> why;
  // The frame of the first FPDU that used the STag, per slot: the direction it travelled (the
  // FPDUs are learned as they are decoded, both directions interleaved), then 2 for what the
  // endpoint's check adds. The first slot that used it names it.
  std::optional<std::uint64_t> first_in[3];
  std::uint64_t first_frame() const {
    for (const auto& f : first_in)
      if (f) return *f;
    return 0;
  }
  void add(std::uint64_t to, std::uint64_t len, const std::string& w, std::uint64_t frame,
           int slot) {
    if (!first_in[slot]) first_in[slot] = frame;
    if (len > 0 && to > UINT64_MAX - (len - 1)) past_end = true;
    begin = std::min(begin, to);
    end = std::max(end, add_saturating(to, len));
    why.insert(w);
  }
};

// Why a connection is not replayed.
struct Refusal {
  std::string reason;
  std::optional<LimitFinding> limit;
};

Refusal refuse(std::string limit, std::uint64_t allowed, std::uint64_t needed, std::string what) {
  LimitFinding f{std::move(limit), allowed, needed, {}};
  f.text = fmt::format(
      "{} (limit {} = {}; see docs/replay.md): nothing is allocated for this connection and it "
      "is not replayed",
      what, f.limit, allowed);
  return Refusal{f.text, f};
}

std::string terminate_text(const rdmap::Terminate& t) {
  std::string s = fmt::format("Terminate [{}] (layer {} etype {} code 0x{:02x})",
                              describe_term(t.layer, t.etype, t.ecode), t.layer, t.etype, t.ecode);
  if (t.d) {
    if (auto h = ddp::DdpHeader::decode(t.ddp_header)) {
      if (h->tagged)
        s += fmt::format(" about a {} to STag 0x{:08x} TO 0x{:x}", rdmap::opcode_name(h->opcode),
                         h->stag.value(), h->to.value());
      else
        s += fmt::format(" about a {} QN {} MSN {}", rdmap::opcode_name(h->opcode), h->qn.value(),
                         h->msn.value());
    }
  }
  if (t.siw_bitfield_quirk) s += ", in siw's bit-field layout";
  return s;
}

// A capture's segment (or FIN, or RST) and the direction it travels.
struct SegmentRef {
  const trace::TcpSegment* seg;
  int dir;
  std::uint32_t len = 0;  // its payload's length (in memory or in the capture file; a frame's)
};
static_assert(sizeof(SegmentRef) <= 16, "one is kept per segment while a connection is learned");

// A request an endpoint issued (an RDMA Read, an atomic, or the RTR its queue pair sent), by
// its MSN on queue 1, and the answers it received (Read Response messages and Atomic
// Responses), in stream order.
struct Request {
  std::uint32_t msn;
  enum Kind : std::uint8_t { Read, Atomic, Rtr } kind;
  std::uint64_t frame;  // the first segment that carried it (FpduInfo::first_frame)
  rdmap::ReadRequest read{};
  rdmap::AtomicRequest atomic{};
};
struct Answer {
  Request::Kind kind;
  std::uint64_t frame;
  STag stag{0};
  std::uint64_t to = 0;
  std::uint64_t length = 0;
  std::uint32_t atomic_id = 0;
};

// An STag a Terminate in the trace says was not valid at `at`.
struct Exclusion {
  Side at;
  STag stag;
  std::uint64_t frame;
};

// Takes out the markers (every 512 octets of Full Operation, RFC 5044 §4.3) of a block that
// starts at Full Operation offset `fo`: `logical` gets the other octets, `where` the block
// position of each.
void strip_markers(ByteSpan block, std::uint64_t fo, Bytes& logical,
                   std::vector<std::uint32_t>& where) {
  for (std::size_t q = 0; q < block.size();) {
    if (mpa::is_marker_position(fo + q)) {
      q += mpa::kMarkerSize;
      continue;
    }
    logical.push_back(block[q]);
    where.push_back(static_cast<std::uint32_t>(q));
    ++q;
  }
}

// A segment (or FIN, or RST) of the connection as the learning pass takes it, in capture order.
struct SegmentIn {
  int dir = 0;
  std::uint64_t frame = 0, time_us = 0;
  TcpSeq seq;
  std::uint32_t len = 0;  // payload octets
  bool fin = false, rst = false;
};

// Violations of the capture kept per direction (the replay names the first one where its
// emulation finds one too).
constexpr std::size_t kKeptTraceViolations = 64;

// The learning pass over one connection, as a sequence of passes over shared state: decode
// each direction's stream as it becomes contiguous, segment by segment as the capture is read
// (add(), in capture order), learning from each FPDU as it is decoded (with the segment that
// first carried it); then (finish()) what lies beyond the gaps, markers taken out, make the
// steps, match requests to answers, renumber Atomic Responses, size the endpoints against the
// limits, and write the notes. It holds per direction what lies beyond a gap (at most max_held,
// and within `budget` with the other connections learned at the same time) and the last
// kKeptBehind octets, not the stream. A StepSource::Kept connection's steps are made in
// finish(), from the segments the caller keeps (keep()); a ReadAgain one's are counted as they
// come, none kept.
class Learner {
 public:
  // How a learner takes its segments: all kept by the caller (Kept: keep(); its steps are made,
  // or counted, from them in finish()), or counted as they come (Counting: a ReadAgain
  // connection learned as the file is read, at most kMaxSegmentsBeforeFraming held before the
  // framing is known); Speculative: counted as they come by a read that does not know yet
  // whether the connection can be replayed, which holds at most kHeldBeforeFramingSpeculative
  // octets before the framing is known and gives up (needs_redo()) where another would go on.
  enum class Mode : std::uint8_t { Kept, Counting, Speculative };

  // Each direction's stream starts where start() says, before its first segment with data (and
  // before finish()). `read_again`: StepSource::ReadAgain (with Mode::Kept: counted in finish()).
  Learner(std::size_t flow_number, const trace::IpEndpoint& client, const trace::IpEndpoint& server,
          const PlanLimits& plan_limits, trace::PayloadReader* reader, bool read_again,
          Mode mode = Mode::Kept, trace::HeldBudget* budget = nullptr)
      : reader_(reader),
        read_again_(read_again),
        budget_(budget),
        flow_index(flow_number),
        limits(plan_limits),
        mode_(mode),
        max_pending_(static_cast<std::size_t>(std::min<std::uint64_t>(
            mode == Mode::Speculative ? std::min(kHeldBeforeFramingSpeculative, limits.max_held)
                                      : limits.max_held,
            SIZE_MAX))) {
    cp.flow = flow_index;
    cp.initiator = client;
    cp.responder = server;
    cp.read_again = read_again_;
  }

  // Direction d's stream starts at `seq` (its first octet).
  void start(int d, TcpSeq seq) {
    cp.stream_seq[d] = seq;
    reassembly[d].emplace(
        seq, static_cast<std::size_t>(std::min<std::uint64_t>(limits.max_held, SIZE_MAX)), budget_);
  }
  bool started(int d) const { return reassembly[d].has_value(); }
  // Direction d's in-order point, once it has started.
  std::optional<TcpSeq> next(int d) const {
    return reassembly[d] ? std::optional<TcpSeq>(reassembly[d]->next()) : std::nullopt;
  }

  // The connection has ended (both directions, as trace::FileDecoder tells): the octets kept
  // behind the decoders go (what a segment after this carries is decoded all the same, but an
  // Atomic Response in it is not renumbered). What lies beyond gaps stays, for finish().
  void compact() {
    for (int d = 0; d < 2; ++d) {
      behind_at[d] += behind[d].size();
      Bytes().swap(behind[d]);
      forget_carried(d, behind_at[d]);
    }
  }

  // StepSource::Kept: segment `s` (of direction d) makes a step in finish(); it must outlive
  // the learner. In capture order, as add().
  void keep(const trace::TcpSegment& s, int d) {
    order.push_back({&s, d, static_cast<std::uint32_t>(s.size())});
  }
  // StepSource::Kept: the segments, all at once (in the order add() had them).
  void keep(std::vector<SegmentRef>&& all) { order = std::move(all); }

  // The connection's next segment in capture order, with its payload (valid during the call).
  void add(const SegmentIn& s, ByteSpan payload) {
    if (s.len > 0) decode_segment(s, payload);
    if (mode_ != Mode::Kept) count_step(s);
  }

  // Nothing more can be learned: a direction's MPA frame cannot decode (not iWARP). (The
  // learner may be dropped.)
  bool hopeless() const {
    for (const auto d : kDirs)
      if (dec.stream(d).state() == mpa::StreamDecoder::State::Failed &&
          col.frame_length[index(d)] == 0)
        return true;
    return false;
  }

  // A learner that counts its steps as they come gave up: more than kMaxSegmentsBeforeFraming
  // segments came before the framing was known (needs_kept(): the connection is learned again,
  // its steps kept), or (Mode::Speculative) more octets than it may hold (learned again).
  bool needs_redo() const { return pending_overflow_ || held_overflow_; }
  bool needs_kept() const { return pending_overflow_; }

  // After the connection's last segment: the plan, from the decoder's report of the flow and
  // the decoder's Violation records of it (in capture order).
  std::expected<ConnectionPlan, Refusal> finish(
      const trace::FlowReport& fr, const std::vector<const trace::Record*>& violations) {
    cp.request = *fr.request;
    cp.reply = *fr.reply;
    cp.params = *fr.params;
    if (needs_redo())
      return std::unexpected(Refusal{"internal error: a learner that gave up", std::nullopt});
    if (auto r = end_streams()) return std::unexpected(*r);
    for (const auto d : kDirs) decode_beyond_gaps(d);
    for (int d = 0; d < 2; ++d) {
      if (refusal[d]) return std::unexpected(*refusal[d]);
      for (auto& n : learned_notes[d]) cp.notes.push_back(std::move(n));
      for (auto& t : learned_terminates[d]) cp.terminates.push_back(std::move(t));
      for (auto& x : learned_exclusions[d]) exclusions.push_back(x);
    }
    map_segments_to_steps();
    leave_invalid_stags_unshadowed();
    for (int e = 0; e < 2; ++e)
      if (auto r = match_requests(e)) return std::unexpected(*r);
    renumber_atomic_responses();
    std::uint64_t planned = 0;
    for (int e = 0; e < 2; ++e)
      if (auto r = check_endpoint(e, planned)) return std::unexpected(*r);
    cp.planned_bytes = planned;
    for (int e = 0; e < 2; ++e) build_endpoint(e);
    patch_segments();
    interleave_posts();
    write_notes(fr, violations);
    return std::move(cp);
  }

 private:
  trace::PayloadReader* const reader_;  // null: every payload is held in memory
  const bool read_again_;               // StepSource::ReadAgain: no step is kept
  trace::HeldBudget* const budget_;     // shared with the connections learned beside it
  const std::size_t flow_index;
  const PlanLimits& limits;
  const Mode mode_;
  const std::size_t max_pending_;  // octets the decoder holds before the framing is known
  bool held_overflow_ = false;     // Mode::Speculative: more than max_pending_ came (needs_redo)
  ConnectionPlan cp;

  std::vector<SegmentRef> order;  // StepSource::Kept: capture order (keep())
  // StepSource::ReadAgain: segments not yet counted as steps while the MPA frames' lengths are
  // not known (at most kMaxSegmentsBeforeFraming), and the segment and FIN steps so far.
  std::deque<SegmentIn> pending_;
  bool pending_overflow_ = false;
  std::uint64_t counted_steps_ = 0;
  // Per direction: octets beyond max_stream, from which frame on.
  std::uint64_t beyond[2] = {0, 0}, beyond_frame[2] = {0, 0};
  // Per direction: the reassembly (what lies beyond a gap), and the last in-order octets
  // (`behind`, from stream offset behind_at).
  std::optional<trace::TcpReassembler> reassembly[2];
  Bytes behind[2];
  std::uint64_t behind_at[2] = {0, 0};
  // Per direction, the stream octets not yet decoded (and the last kKeptBehind in order) with
  // the frame of the first segment, in capture order, that carried them: [key, .first) came
  // first in frame .second. An FPDU is first carried by the earliest of its octets' frames.
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> first_carried[2];
  // (Octets held while the framing is not known, the Reply not yet decoded: at most max_held.)
  mpa::ConnectionDecoder dec{
      mpa::StreamDecoderOptions{.continue_after_bad_crc = true, .max_pending = max_pending_}};
  // Each FPDU is learned from as it is decoded, and not kept (but an Atomic Response's). The
  // negotiated parameters come before the first FPDU (the initiator's may be the RTR).
  Collector col{[this](Direction d, FpduInfo&& f) { take_fpdu(d, std::move(f)); },
                [this](const mpa::ConnectionParams& p) {
                  cp.params = p;
                  rtr_pending[0] = p.peer_to_peer && fpdus_decoded[0] == 0;
                }};
  std::uint64_t fpdus_decoded[2] = {0, 0};
  std::uint64_t frame_len[2] = {0, 0};  // the MPA frame's length
  // What is learned per direction, in the order a direction's FPDUs came (put together, the
  // initiator's first, when the connection is learned): the first refusal, notes, Terminates,
  // and STags a Terminate says were not valid.
  std::optional<Refusal> refusal[2];
  bool rtr_pending[2] = {false, false};  // the initiator's first FPDU may be the RTR
  std::vector<std::string> learned_notes[2];
  std::vector<TerminatePlan> learned_terminates[2];
  std::vector<Exclusion> learned_exclusions[2];
  // Per direction, the last FPDUs of tagged messages to each STag, counted to 2
  // (leave_invalid_stags_unshadowed): an entry per STag used, as `regions` has.
  std::map<std::uint32_t, std::uint8_t> last_uses[2];
  std::deque<FpduInfo> atomic_fpdus;  // the Atomic Responses (renumbering patches them)
  // StepSource::Kept: the Write and Read Response FPDUs that place data, with their tagged
  // ranges (the steps' Step::tagged), per direction in stream order.
  struct TaggedFpdu {
    std::uint64_t offset;
    std::uint32_t wire_length;
    TaggedRange range;
  };
  std::deque<TaggedFpdu> tagged_fpdus[2];
  std::deque<Step> seg_steps;  // segments and FINs, in capture order (StepSource::Kept)
  std::map<std::uint32_t, RegionAcc> regions[2];  // per endpoint, by STag
  std::map<std::uint32_t, RecvPlan> recvs[2];     // per endpoint, by MSN
  std::set<std::uint32_t> invalidated[2];  // STags a Send with Invalidate named, per receiver
  // (The key of the segment step it goes before: its frame (post_key); SIZE_MAX: none, the post
  // is left out.)
  std::vector<std::pair<std::size_t, Step>> posts;
  std::map<std::uint64_t, std::uint8_t> patches[2];  // stream offset -> new octet
  std::vector<Exclusion> exclusions;
  std::vector<std::pair<Direction, const FpduInfo*>> atomic_answers;
  std::vector<Request> requests[2];        // per endpoint, as issued
  std::vector<Answer> answers[2];          // per endpoint, as received
  std::optional<Answer> open_response[2];  // per direction: the Read Response message so far

  // Each direction's stream (the first arrival of an octet wins, as in TCP, RFC 793 §3.9),
  // decoded as it becomes contiguous, in capture order: both MPA frames, then the FPDUs (the
  // decoder holds the initiator's octets back until the Reply fixes their framing). Only the
  // first max_stream octets of a direction are learned from; what arrives beyond a gap is held
  // (at most max_held) and decoded at the end (decode_beyond_gaps).
  void decode_segment(const SegmentIn& s, ByteSpan payload) {
    const auto max_stream =
        static_cast<std::int64_t>(std::min<std::uint64_t>(limits.max_stream, INT64_MAX));
    const int d = s.dir;
    const std::int64_t off = s.seq - cp.stream_seq[d];
    const std::int64_t e = off + static_cast<std::int64_t>(s.len);
    const std::int64_t lo = std::max<std::int64_t>(off, 0);
    const std::int64_t hi = std::min(e, max_stream);
    if (e > max_stream) {
      if (beyond[d] == 0) beyond_frame[d] = s.frame;
      beyond[d] += static_cast<std::uint64_t>(e - std::max(lo, max_stream));
    }
    if (hi <= lo) return;
    const ByteSpan data =
        payload.subspan(static_cast<std::size_t>(lo - off), static_cast<std::size_t>(hi - lo));
    // (Octets already behind the decoder again are never decoded: no frame is noted for them.)
    const std::int64_t from = std::max(lo, static_cast<std::int64_t>(behind_at[d]));
    if (hi > from)
      note_carried(d, static_cast<std::uint64_t>(from), static_cast<std::uint64_t>(hi), s.frame);
    reassembly[d]->add(cp.stream_seq[d] + static_cast<std::uint32_t>(lo), data,
                       [&](ByteSpan run) { deliver(d, run); });
  }

  // After the last segment: what the streams came to, and whether both MPA frames decoded.
  std::optional<Refusal> end_streams() {
    for (int d = 0; d < 2; ++d) {
      cp.stream_length[d] = reassembly[d]->delivered();
      if (beyond[d] > 0)
        cp.limits.push_back(LimitFinding{
            "kMaxStreamOffset", limits.max_stream, limits.max_stream + beyond[d],
            fmt::format(
                "{}: segments carry {} octet(s) beyond stream offset {} (from frame {} on; limit "
                "kMaxStreamOffset): they are replayed but nothing is learned from them, so "
                "their Sends, STags and Reads are unknown to the emulation",
                dir_name(kDirs[d]), beyond[d], limits.max_stream, beyond_frame[d])});
      const auto& r = *reassembly[d];
      const auto lost = r.dropped() + r.dropped_by_budget();
      if (lost > 0)
        cp.limits.push_back(LimitFinding{
            "kMaxHeldBeyondGap", limits.max_held, limits.max_held + lost,
            fmt::format("{}: {} octet(s) of {} segment(s) arrived more than {} octets beyond a "
                        "gap not yet filled (limit kMaxHeldBeyondGap{}): they are replayed but "
                        "nothing is learned from them",
                        dir_name(kDirs[d]), lost,
                        r.dropped_segments() + r.dropped_by_budget_segments(), limits.max_held,
                        r.dropped_by_budget() > 0
                            ? ", held by all the connections learned in the same read"
                            : "")});
    }
    for (int d = 0; d < 2; ++d) {
      frame_len[d] = col.frame_length[d];
      if (frame_len[d] == 0)
        return Refusal{
            fmt::format("the MPA {} is not complete in the capture", d == 0 ? "Request" : "Reply"),
            std::nullopt};
    }
    return std::nullopt;
  }

  // StepSource::ReadAgain: segment `s` counted as the step it makes, in capture order, once
  // the MPA frames' lengths tell whether it is setup (held until then).
  void count_step(const SegmentIn& s) {
    if (pending_overflow_) return;
    const bool framed = col.frame_length[0] > 0 && col.frame_length[1] > 0;
    if (!framed || !pending_.empty()) {
      if (pending_.size() >= kMaxSegmentsBeforeFraming) {
        pending_overflow_ = true;
        pending_.clear();
        return;
      }
      pending_.push_back(s);
      if (!framed) return;
      for (; !pending_.empty(); pending_.pop_front()) count_framed_step(pending_.front());
      return;
    }
    count_framed_step(s);
  }

  void count_framed_step(const SegmentIn& s) {
    cp.last_frame = std::max(cp.last_frame, s.frame);
    const std::int64_t end = (s.seq - cp.stream_seq[s.dir]) + static_cast<std::int64_t>(s.len);
    if (s.len > 0 && end <= static_cast<std::int64_t>(col.frame_length[s.dir])) {
      ++cp.setup_segments;
    } else if (s.len > 0) {
      ++cp.segment_steps;
      cp.first_time_us = std::min(cp.first_time_us, s.time_us);
      cp.step_digest =
          digest_step(cp.step_digest, Step::Kind::Segment, s.dir, s.frame, s.seq, s.len);
      ++counted_steps_;
    }
    if (s.fin) {
      cp.fin[s.dir] = true;
      cp.first_time_us = std::min(cp.first_time_us, s.time_us);
      const TcpSeq at = s.seq + s.len;
      cp.step_digest = digest_step(cp.step_digest, Step::Kind::Fin, s.dir, s.frame, at, 0);
      ++counted_steps_;
    }
    if (s.rst) cp.rst = true;
  }

  // In-order octets of direction d: decoded, and kept behind the decoder for a while.
  void deliver(int d, ByteSpan run) {
    behind[d].insert(behind[d].end(), run.begin(), run.end());
    using State = mpa::StreamDecoder::State;
    const auto before = dec.stream(kDirs[d]).state();
    dec.feed(kDirs[d], run, col);
    // In this feed the stream failed after its MPA frame, before the framing was negotiated (and
    // not after a rejecting Reply): more than max_pending_ octets came before the Reply fixed
    // their framing, the one failure while it waits (RFC 5044 §7.1). (The frame may have come
    // in this feed too.)
    const bool overflow = before != State::Failed &&
                          dec.stream(kDirs[d]).state() == State::Failed &&
                          col.frame_length[d] > 0 && !col.negotiated_once && !col.rejected;
    if (overflow && mode_ == Mode::Speculative)
      held_overflow_ = true;
    else if (overflow)
      cp.limits.push_back(LimitFinding{
          "kMaxHeldBeyondGap", limits.max_held, limits.max_held + 1,
          fmt::format("{}: more than {} octets arrived before the MPA Reply fixed their framing "
                      "(limit kMaxHeldBeyondGap): nothing more is learned from this direction",
                      dir_name(kDirs[d]), limits.max_held)});
    // (Octets the decoder holds until the Reply fixes their framing stay behind too.)
    if (behind[d].size() > 2 * kKeptBehind &&
        dec.stream(kDirs[d]).state() != mpa::StreamDecoder::State::AwaitFraming) {
      const std::size_t drop = behind[d].size() - kKeptBehind;
      behind[d].erase(behind[d].begin(), behind[d].begin() + static_cast<std::ptrdiff_t>(drop));
      behind_at[d] += drop;
      // (An FPDU not decoded yet lies within the last kKeptBehind octets: more than its wire
      // length. What comes before is never asked for.)
      forget_carried(d, behind_at[d]);
    }
  }

  // Notes that stream octets [lo, hi) of direction d came in frame `frame`, where no earlier
  // segment brought them. (Bounded as the reassembly's held pieces are: one entry costs as much
  // as kHeldPieceOverhead octets of max_held. Past that an FPDU's first segment may be a later
  // one; only a capture with a gap that never fills, cut in tiny segments, gets there.)
  void note_carried(int d, std::uint64_t lo, std::uint64_t hi, std::uint64_t frame) {
    auto& m = first_carried[d];
    if (m.size() >= limits.max_held / trace::kHeldPieceOverhead) return;
    auto it = m.upper_bound(lo);
    if (it != m.begin() && std::prev(it)->second.first > lo) --it;
    for (std::uint64_t at = lo; at < hi;) {
      if (it == m.end() || it->first >= hi) {
        m.emplace_hint(it, at, std::pair{hi, frame});
        return;
      }
      if (it->first > at) m.emplace_hint(it, at, std::pair{it->first, frame});
      at = std::max(at, it->second.first);
      ++it;
    }
  }

  // Forgets where the octets before stream offset `below` of direction d came from.
  void forget_carried(int d, std::uint64_t below) {
    auto& m = first_carried[d];
    m.erase(m.begin(), std::find_if(m.begin(), m.end(),
                                    [&](const auto& e) { return e.second.first > below; }));
  }

  // An FPDU of direction d as it is decoded (in stream order: those in order as the stream
  // becomes contiguous, then those beyond the gaps): which segment first carried it, what it
  // tells, and (StepSource::Kept) the tagged data it places.
  void take_fpdu(Direction d, FpduInfo&& f) {
    const int k = index(d);
    ++fpdus_decoded[k];
    // The earliest frame of its octets (keyed by frame: frames grow in capture order).
    {
      const std::uint64_t a = f.offset, b = f.offset + f.wire_length;
      auto& m = first_carried[k];
      auto it = m.upper_bound(a);
      if (it != m.begin()) --it;
      for (; it != m.end() && it->first < b; ++it)
        if (it->second.first > a && (f.first_frame == 0 || it->second.second < f.first_frame))
          f.first_frame = it->second.second;
    }
    if (!f.parsed) return;
    // An Atomic Response's octets, from behind the decoder (renumbering patches them; one
    // decoded beyond a gap has its octets from the block already).
    if (f.hdr.op() == Opcode::AtomicResponse && !f.wire && f.offset >= behind_at[k] &&
        f.offset + f.wire_length <= behind_at[k] + behind[k].size()) {
      const auto w = ByteSpan(behind[k]).subspan(f.offset - behind_at[k], f.wire_length);
      f.wire = std::make_unique<Bytes>(w.begin(), w.end());
    }
    const auto op = f.hdr.op();
    if (!read_again_ && f.hdr.tagged && f.payload_length > 0 &&
        (op == Opcode::Write || op == Opcode::ReadResponse))
      tagged_fpdus[k].push_back(TaggedFpdu{
          f.offset, f.wire_length,
          TaggedRange{f.hdr.stag, f.hdr.to.value(), f.hdr.to.value() + f.payload_length}});
    if (f.hdr.tagged && f.hdr.last) {
      auto& n = last_uses[k][f.hdr.stag.value()];
      n = static_cast<std::uint8_t>(std::min(n + 1, 2));
    }
    learn_from_fpdu(d, std::move(f));
  }

  // Beyond a gap: a sender starts each segment with an FPDU (RFC 5044 §8), so decoding can
  // start again where a block of held octets starts; it stops at the first thing that does not
  // decode.
  void decode_beyond_gaps(Direction d) {
    const auto framing = d == Direction::FromInitiator ? cp.params.framing_to_responder()
                                                       : cp.params.framing_to_initiator();
    // The held pieces, joined into blocks where they touch (each piece freed as it is joined).
    auto blocks = reassembly[index(d)]->take_held();
    reassembly[index(d)].reset();
    for (auto it = blocks.begin(); it != blocks.end();) {
      const auto next = std::next(it);
      if (next != blocks.end() && it->first + it->second.size() == next->first) {
        it->second.insert(it->second.end(), next->second.begin(), next->second.end());
        blocks.erase(next);
      } else {
        it = next;
      }
    }
    for (const auto& [off, bytes] : blocks) {
      if (off == 0 || off < frame_len[index(d)]) continue;
      const std::size_t learned = framing.markers ? decode_marked_block(d, off, bytes)
                                                  : decode_block(d, framing, off, bytes);
      if (learned > 0)
        cp.notes.push_back(fmt::format("{}: {} FPDU(s) learned beyond the gap at stream offset {}",
                                       dir_name(d), learned, off));
    }
    Bytes().swap(behind[index(d)]);
    cp.mpa_length[index(d)] = frame_len[index(d)];
    cp.full_operation_seq[index(d)] =
        cp.stream_seq[index(d)] + static_cast<std::uint32_t>(frame_len[index(d)]);
    cp.fpdus[index(d)] = fpdus_decoded[index(d)];
  }

  std::size_t decode_block(Direction d, mpa::FramingConfig framing, std::uint64_t off,
                           ByteSpan bytes) {
    mpa::StreamDecoder sd(framing, mpa::StreamDecoderOptions{});
    Resync rs([&](FpduInfo&& f) { take_fpdu(d, std::move(f)); }, off, bytes);
    sd.feed(bytes, rs);
    return rs.count;
  }

  // Markers sit every 512 octets of Full Operation: take them out, decode the rest (the CRC,
  // which covers the markers, is not checked here), and map each FPDU back.
  std::size_t decode_marked_block(Direction d, std::uint64_t off, ByteSpan bytes) {
    const std::uint64_t fo = off - frame_len[index(d)];
    Bytes logical;
    std::vector<std::uint32_t> where;  // block position of each logical octet
    strip_markers(bytes, fo, logical, where);
    auto wire = [&](std::uint64_t lo, std::uint32_t ll) {
      std::uint64_t start = where[lo];
      // A marker right before an FPDU belongs to it (RFC 5044 §5).
      if (start >= mpa::kMarkerSize && mpa::is_marker_position(fo + start - mpa::kMarkerSize))
        start -= mpa::kMarkerSize;
      const std::uint64_t end = where[lo + ll - 1] + 1u;
      return std::pair<std::uint64_t, std::uint32_t>{start,
                                                     static_cast<std::uint32_t>(end - start)};
    };
    mpa::StreamDecoder sd(mpa::FramingConfig{false, false}, mpa::StreamDecoderOptions{});
    Resync rs([&](FpduInfo&& f) { take_fpdu(d, std::move(f)); }, off, bytes, wire);
    sd.feed(logical, rs);
    return rs.count;
  }

  // Segment steps, in capture order, with their stream offsets. (With read_again_ the steps are
  // counted, not kept.)
  void map_segments_to_steps() {
    if (mode_ != Mode::Kept) {  // (counted as they came: count_step)
      cp.step_count = counted_steps_;
      return;
    }
    std::size_t kept = 0;  // segment and FIN steps so far
    for (const auto& r : order) {
      const auto& s = *r.seg;
      const std::size_t len = r.len;
      cp.last_frame = std::max(cp.last_frame, s.frame);
      if (len > 0 && is_setup(cp, r.dir, s.seq, len)) {
        ++cp.setup_segments;
        if (!read_again_) cp.setup.push_back(raw_step(r));
      } else if (len > 0) {
        if (!read_again_) seg_steps.push_back(tagged_step(r));
        ++cp.segment_steps;
        cp.first_time_us = std::min(cp.first_time_us, s.time_us);
        cp.step_digest =
            digest_step(cp.step_digest, Step::Kind::Segment, r.dir, s.frame, s.seq, len);
        ++kept;
      }
      if (s.fin) {
        cp.fin[r.dir] = true;
        cp.first_time_us = std::min(cp.first_time_us, s.time_us);
        const TcpSeq at = s.seq + static_cast<std::uint32_t>(len);
        cp.step_digest = digest_step(cp.step_digest, Step::Kind::Fin, r.dir, s.frame, at, 0);
        ++kept;
        if (!read_again_) seg_steps.push_back(fin_step(r.dir, s.frame, s.time_us, at));
      }
      if (s.rst) cp.rst = true;
    }
    cp.step_count = kept;
  }

  // The step that injects segment `r`, without what its FPDUs tell.
  Step raw_step(const SegmentRef& r) const {
    const auto& s = *r.seg;
    Step st = bare_segment_step(cp, r.dir, s.frame, s.time_us, s.seq);
    // A payload in the capture file stays there: the replay reads it when it injects the step.
    if (s.in_file()) {
      st.file_offset = s.file_offset;
      st.length = s.length;
    } else {
      st.payload = s.payload;
    }
    return st;
  }

  // The step that injects segment `r`, with the tagged data its FPDUs place.
  Step tagged_step(const SegmentRef& r) {
    Step st = raw_step(r);
    const std::int64_t off = r.seg->seq - cp.stream_seq[r.dir];
    if (off + static_cast<std::int64_t>(r.len) <= 0) return st;
    const auto a = static_cast<std::uint64_t>(std::max<std::int64_t>(off, 0));
    const auto b = static_cast<std::uint64_t>(off) + r.len;
    const auto& tf = tagged_fpdus[r.dir];
    auto it = std::partition_point(
        tf.begin(), tf.end(), [&](const TaggedFpdu& x) { return x.offset + x.wire_length <= a; });
    for (; it != tf.end() && it->offset < b; ++it) st.tagged.push_back(it->range);
    return st;
  }

  // What an FPDU of direction d tells: the STags used and their ranges, the receives, the
  // requests and answers, the Terminates. After a refusal, nothing more of that direction.
  void learn_from_fpdu(Direction d, FpduInfo&& f) {
    const int k = index(d);
    const bool first_fpdu = rtr_pending[k];
    rtr_pending[k] = false;
    if (refusal[k]) return;
    switch (f.hdr.op()) {
      case Opcode::Write:
      case Opcode::ReadResponse:
        on_tagged_data(d, f);
        break;
      case Opcode::ReadRequest:
        refusal[k] = on_read_request(d, f, first_fpdu);
        break;
      case Opcode::AtomicRequest:
        on_atomic_request(d, f);
        break;
      case Opcode::AtomicResponse: {
        // (Kept: renumbering patches its octets.)
        atomic_fpdus.push_back(std::move(f));
        const FpduInfo& kept = atomic_fpdus.back();
        atomic_answers.push_back({d, &kept});
        Answer a{Request::Atomic, kept.first_frame};
        a.atomic_id = kept.get<rdmap::AtomicResponse>().request_id;
        answers[index(receiver_of(d))].push_back(a);
        break;
      }
      case Opcode::Send:
      case Opcode::SendSe:
      case Opcode::SendInvalidate:
      case Opcode::SendSeInvalidate:
      case Opcode::ImmediateData:
      case Opcode::ImmediateDataSe:
        refusal[k] = on_untagged_message(d, f, first_fpdu);
        break;
      case Opcode::Terminate:
        on_terminate(d, f);
        break;
    }
  }

  // A Write or Read Response: the receiver's region, and the Read Response message so far.
  void on_tagged_data(Direction d, const FpduInfo& f) {
    const auto& h = f.hdr;
    if (f.payload_length > 0)
      regions[index(receiver_of(d))][h.stag.value()].add(
          h.to.value(), f.payload_length, h.op() == Opcode::Write ? "Write" : "Read Response",
          f.first_frame, index(d));
    if (h.op() != Opcode::ReadResponse) return;
    auto& m = open_response[index(d)];
    if (!m) {
      m = Answer{Request::Read, f.first_frame};
      m->stag = h.stag;
      m->to = h.to.value();
    }
    m->length = add_saturating(m->length, f.payload_length);
    if (h.last) {
      answers[index(receiver_of(d))].push_back(*m);
      m.reset();
    }
  }

  std::optional<Refusal> on_read_request(Direction d, const FpduInfo& f, bool first_fpdu) {
    const Side tx = sender_of(d), rx = receiver_of(d);
    const auto& h = f.hdr;
    const auto& rr = f.get<rdmap::ReadRequest>();
    Request q{h.msn.value(), Request::Read, f.first_frame};
    if (first_fpdu && cp.params.rtr == mpa::RtrType::Read && rr.size == 0) {
      q.kind = Request::Rtr;  // sent by the queue pair itself (send_rtr)
    } else if (rr.size > limits.max_message) {
      return refuse("kMaxMessageSize", limits.max_message, rr.size,
                    fmt::format("{}'s RDMA Read (MSN {}, frame {}) is {} octets long",
                                to_string(tx), h.msn.value(), f.first_frame, rr.size));
    } else if (rr.size > 0) {
      regions[index(tx)][rr.sink_stag.value()].add(rr.sink_to.value(), rr.size, "Read sink",
                                                   f.first_frame, index(d));
      regions[index(rx)][rr.src_stag.value()].add(rr.src_to.value(), rr.size, "Read source",
                                                  f.first_frame, index(d));
    }
    q.read = rr;
    requests[index(tx)].push_back(q);
    return std::nullopt;
  }

  void on_atomic_request(Direction d, const FpduInfo& f) {
    const auto& a = f.get<rdmap::AtomicRequest>();
    regions[index(receiver_of(d))][a.stag.value()].add(a.to.value(), 8, "atomic target",
                                                       f.first_frame, index(d));
    Request q{f.hdr.msn.value(), Request::Atomic, f.first_frame};
    q.atomic = a;
    requests[index(sender_of(d))].push_back(q);
  }

  // A Send or Immediate Data FPDU: the receive buffer its message needs.
  std::optional<Refusal> on_untagged_message(Direction d, const FpduInfo& f, bool first_fpdu) {
    const Side rx = receiver_of(d);
    const auto& h = f.hdr;
    const std::uint64_t max_message = std::min<std::uint64_t>(limits.max_message, UINT32_MAX);
    const bool imm = h.op() == Opcode::ImmediateData || h.op() == Opcode::ImmediateDataSe;
    // The message's size so far: MO + length in 64 bits (past 2^32 it is no size an MO can
    // address, and past the limit no receive buffer is allocated for it).
    const std::uint64_t size = std::uint64_t{h.mo.value()} + f.payload_length;
    if (size > max_message)
      return refuse(
          "kMaxMessageSize", max_message, size,
          fmt::format("{} message MSN {} to {} reaches {} octets (MO {} + {} octets, frame "
                      "{}){}",
                      imm ? "an Immediate Data" : "a Send", h.msn.value(), to_string(rx), size,
                      h.mo.value(), f.payload_length, f.first_frame,
                      size > UINT32_MAX ? ", past the 2^32 octets MO can address" : ""));
    auto& r = recvs[index(rx)][h.msn.value()];
    r.msn = h.msn.value();
    r.seen = true;
    r.immediate = imm;
    r.size = std::max(r.size, static_cast<std::uint32_t>(size));
    if (h.last) r.complete = true;
    // RFC 6581 §4: a zero-length Send first from the initiator is the P2P RTR. It takes a
    // zero-length receive (see the replayer), and completes nothing.
    if (first_fpdu && cp.params.rtr == mpa::RtrType::Send && !imm && f.payload_length == 0 &&
        h.msn.value() == 1 && h.mo.value() == 0 && h.last) {
      r.rtr = true;
      learned_notes[index(d)].push_back(
          "the initiator's RTR (a zero-length Send, MSN 1; RFC 6581 §4) takes a zero-length "
          "receive posted for it at R; its completion is left out");
      return std::nullopt;
    }
    // (Every opcode of this case has an entry in the table; an unknown one never parses.)
    if (const auto* info = rdmap::opcode_info(h.opcode); info && info->invalidate)
      invalidated[index(rx)].insert(h.rsvd_ulp);
    return std::nullopt;
  }

  void on_terminate(Direction d, const FpduInfo& f) {
    const Side tx = sender_of(d);
    const auto& t = f.get<rdmap::Terminate>();
    learned_terminates[index(d)].push_back(
        TerminatePlan{tx, f.first_frame, t.layer, t.etype, t.ecode, terminate_text(t)});
    // The trace says an STag was invalid at the Terminate's sender: leave it unshadowed, so
    // that the emulation finds the same violation.
    const bool invalid_stag =
        (t.layer == 1 && t.etype == 1 && (t.ecode == 0x00 || t.ecode == 0x02)) ||
        (t.layer == 0 && t.etype == 1 && (t.ecode == 0x00 || t.ecode == 0x03));
    if (!invalid_stag || !t.d) return;
    auto eh = ddp::DdpHeader::decode(t.ddp_header);
    if (!eh) return;
    std::optional<STag> bad;
    if (eh->tagged) {
      bad = eh->stag;
    } else if (t.r && t.rdmap_header.size() == rdmap::kTerminatedRdmapHeaderSize) {
      bad = rdmap::ReadRequest::decode(t.rdmap_header).src_stag;
    }
    if (bad) learned_exclusions[index(d)].push_back({tx, *bad, f.first_frame});
  }

  void leave_invalid_stags_unshadowed() {
    for (const auto& x : exclusions) {
      // Only when the trace sent that side no message to the STag but the culprit, and no
      // Send with Invalidate explains it (the emulation then finds the violation by itself).
      if (invalidated[index(x.at)].contains(x.stag.value())) continue;
      const Direction toward =
          x.at == Side::Initiator ? Direction::FromResponder : Direction::FromInitiator;
      // (The last FPDUs of tagged messages to it, counted to 2.)
      const auto& counted = last_uses[index(toward)];
      const auto u = counted.find(x.stag.value());
      const int uses = u != counted.end() ? u->second : 0;
      if (uses <= 1 && regions[index(x.at)].erase(x.stag.value()))
        cp.notes.push_back(
            fmt::format("STag 0x{:08x} is not shadowed at {}: the trace's Terminate from {} "
                        "(frame {}) says it was not valid there",
                        x.stag.value(), to_string(x.at), to_string(x.at), x.frame));
    }
  }

  // Endpoint e's requests in MSN order, paired in order with the answers it received. A
  // request the capture lost (a gap in its MSNs, or fewer requests than answers) is rebuilt
  // from its answer, so that the answer finds it outstanding. Each is posted before the first
  // segment that carried it (a rebuilt one before its answer), never after a later one.
  std::optional<Refusal> match_requests(int e) {
    const auto side = static_cast<Side>(e);
    auto reqs = requests[e];
    std::stable_sort(reqs.begin(), reqs.end(),
                     [](const Request& a, const Request& b) { return a.msn < b.msn; });
    const auto& ans = answers[e];
    // The requests are walked by MSN from 1: the highest MSN bounds the walk.
    const std::uint64_t slots =
        std::max<std::uint64_t>(reqs.empty() ? 0 : reqs.back().msn, ans.size());
    if (slots > limits.max_requests)
      return refuse("kMaxRequests", limits.max_requests, slots,
                    fmt::format("{} issued RDMA Reads or atomics up to MSN {} (or received {} "
                                "answers)",
                                to_string(side), slots, ans.size()));
    for (const auto& a : ans)
      if (a.kind == Request::Read && a.length > limits.max_message)
        return refuse("kMaxMessageSize", limits.max_message, a.length,
                      fmt::format("{} received a Read Response of {} octets (frame {} on)",
                                  to_string(side), a.length, a.frame));
    std::size_t qi = 0, rebuilt = 0;
    std::vector<std::pair<std::size_t, Step>> queued;  // (segment step it goes before, the post)
    for (std::uint64_t m = 1, k = 0; m <= slots; ++m, ++k) {
      const Answer* a = k < ans.size() ? &ans[k] : nullptr;
      const Request* q = qi < reqs.size() && reqs[qi].msn == m ? &reqs[qi++] : nullptr;
      if (q) {
        if (a && (a->kind == Request::Atomic) != (q->kind == Request::Atomic)) {
          cp.notes.push_back(fmt::format(
              "{}: the answers to its requests do not pair with them from MSN {} on (a request "
              "and its answer both missing?)",
              to_string(side), m));
          a = nullptr;
          k = ans.size();
        }
        if (q->kind == Request::Rtr) continue;
        queued.emplace_back(post_key(q->frame), post_request(e, *q, a != nullptr));
      } else if (a) {
        ++rebuilt;
        queued.emplace_back(post_key(a->frame), post_rebuilt_request(e, *a, m));
      }
    }
    for (std::size_t i = queued.size(); i-- > 1;)
      queued[i - 1].first = std::min(queued[i - 1].first, queued[i].first);
    for (auto& o : queued) posts.emplace_back(o.first, std::move(o.second));
    if (rebuilt)
      cp.notes.push_back(
          fmt::format("{}: {} request(s) not in the capture rebuilt from the answers it received",
                      to_string(side), rebuilt));
    return std::nullopt;
  }

  // Where a post goes: before the segment step of frame `frame`, the first that carried its
  // request (or answer); SIZE_MAX, after every step (left out), when none did.
  static std::size_t post_key(std::uint64_t frame) { return frame == 0 ? SIZE_MAX : frame; }

  // The post of a request in the capture (a Read or an atomic).
  Step post_request(int e, const Request& q, bool answered) {
    auto& ep = cp.ep[e];
    Step st;
    st.side = static_cast<Side>(e);
    if (q.kind == Request::Read) {
      ep.reads.push_back(ReadPlan{q.read, q.msn, q.frame, answered, false});
      st.kind = Step::Kind::PostRead;
      st.item = ep.reads.size() - 1;
    } else {
      ep.atomics.push_back(AtomicPlan{q.atomic, q.frame, answered, false});
      st.kind = Step::Kind::PostAtomic;
      st.item = ep.atomics.size() - 1;
    }
    st.frame = q.frame;
    return st;
  }

  // The post of a request the capture lost, rebuilt from its answer (MSN m).
  Step post_rebuilt_request(int e, const Answer& a, std::uint64_t m) {
    auto& ep = cp.ep[e];
    Step st;
    st.side = static_cast<Side>(e);
    if (a.kind == Request::Read) {
      rdmap::ReadRequest rr{a.stag, TaggedOffset{a.to}, static_cast<std::uint32_t>(a.length),
                            STag{0}, TaggedOffset{0}};
      ep.reads.push_back(ReadPlan{rr, static_cast<std::uint32_t>(m), a.frame, true, true});
      st.kind = Step::Kind::PostRead;
      st.item = ep.reads.size() - 1;
    } else {
      rdmap::AtomicRequest ar;
      ar.op = static_cast<std::uint8_t>(rdmap::AtomicOp::FetchAdd);
      ar.request_id = a.atomic_id;
      ep.atomics.push_back(AtomicPlan{ar, a.frame, true, true});
      st.kind = Step::Kind::PostAtomic;
      st.item = ep.atomics.size() - 1;
    }
    st.frame = a.frame;
    return st;
  }

  // The emulated requester numbers its atomics 1, 2, ... (as our RNIC does): each captured
  // response gets the number of the request it answers (found by the captured identifier,
  // else by order), its CRC recomputed when it was good.
  void renumber_atomic_responses() {
    std::size_t nth[2] = {0, 0};
    std::size_t renumbered = 0;
    for (const auto& [d, fp] : atomic_answers) {
      const auto& f = *fp;
      const Side rx = receiver_of(d);
      const auto& mine = cp.ep[index(rx)].atomics;
      const auto captured = f.get<rdmap::AtomicResponse>().request_id;
      std::size_t k = nth[index(rx)];
      for (std::size_t i = 0; i < mine.size(); ++i)
        if (mine[i].request.request_id == captured) k = i;
      nth[index(rx)] = k + 1;
      const auto id = static_cast<std::uint32_t>(k + 1);
      if (captured == id) continue;
      if (patch_request_id(d, f, id)) ++renumbered;
    }
    if (renumbered)
      cp.notes.push_back(fmt::format(
          "{} Atomic Response(s) renumbered to the emulated requester's request identifiers "
          "(1, 2, ...; CRC recomputed where in use)",
          renumbered));
  }

  // Writes `id` into the Atomic Response FPDU `f` (and its CRC, when that was good) as patches
  // for the segments; false when the capture lacks some of it (its octets were not kept).
  bool patch_request_id(Direction d, const FpduInfo& f, std::uint32_t id) {
    const auto& p = cp.params;
    const bool markers =
        d == Direction::FromInitiator ? p.markers_to_responder : p.markers_to_initiator;
    const std::uint64_t fo = f.offset - frame_len[index(d)];
    if (!f.wire || f.wire->size() != f.wire_length || f.wire_length < mpa::kCrcSize) return false;
    Bytes copy = *f.wire;
    MutableByteSpan fpdu(copy);
    const std::size_t crc_at = f.wire_length - mpa::kCrcSize;
    const bool crc_was_good = p.crc && load_le32(&fpdu[crc_at]) == mpa::crc32c(fpdu.first(crc_at));
    std::uint8_t idb[4];
    store_be32(idb, id);
    for (std::size_t i = 0; i < 4; ++i) {
      // The request identifier follows the untagged DDP header (RFC 7306 §5.2).
      const std::uint64_t k = mpa::kUlpduLengthSize + ddp::kUntaggedHeaderSize + i;
      const std::uint64_t at = markers ? mpa::wire_position_of(fo, k) - fo : k;
      fpdu[at] = idb[i];
      patches[index(d)][f.offset + at] = idb[i];
    }
    if (crc_was_good) {
      std::uint8_t cb[4];
      store_le32(cb, mpa::crc32c(fpdu.first(crc_at)));
      for (std::size_t i = 0; i < 4; ++i) patches[index(d)][f.offset + crc_at + i] = cb[i];
    }
    return true;
  }

  // Endpoint e's regions (an invalidated STag needs a region to invalidate) and receives,
  // checked against their limits before anything is allocated for them; what the replayer will
  // allocate is added to `planned` (as it allocates: regions in 8-octet words from the
  // 8-aligned TO below the range, one word more) and bounded per connection.
  std::optional<Refusal> check_endpoint(int e, std::uint64_t& planned) {
    const auto side = to_string(static_cast<Side>(e));
    for (auto s : invalidated[e])
      if (!regions[e].contains(s)) regions[e][s].add(0, 8, "invalidated", 0, 2);
    if (regions[e].size() > limits.max_stags)
      return refuse("kMaxStags", limits.max_stags, regions[e].size(),
                    fmt::format("{} would shadow {} STags", side, regions[e].size()));
    for (const auto& [stag, acc] : regions[e]) {
      const std::uint64_t span = acc.past_end ? UINT64_MAX : acc.end - acc.begin;
      if (acc.past_end)
        return refuse("kMaxStagSpan", limits.max_region, span,
                      fmt::format("STag 0x{:08x} at {} is used from TO 0x{:x} to past the end of "
                                  "the 64-bit TO space (first used at frame {})",
                                  stag, side, acc.begin, acc.first_frame()));
      if (span > limits.max_region)
        return refuse("kMaxStagSpan", limits.max_region, span,
                      fmt::format("STag 0x{:08x} at {} spans {} octets of tagged offsets [0x{:x}, "
                                  "0x{:x}) (first used at frame {})",
                                  stag, side, span, acc.begin, acc.end, acc.first_frame()));
      planned += words(acc.end - (acc.begin & ~std::uint64_t{7})) + kStagOverhead;
    }
    // One receive per MSN from 1 to the highest seen; a message missing from the capture gets
    // a placeholder as large as the largest seen (it cannot arrive anyway).
    std::uint64_t receives = 0, largest = 0, seen_bytes = 0;
    if (!recvs[e].empty()) {
      receives = recvs[e].rbegin()->first;
      if (receives > limits.max_receives)
        return refuse(
            "kMaxReceives", limits.max_receives, receives,
            fmt::format("{} would need {} receive buffers (a Send or Immediate Data message with "
                        "MSN {}; one buffer is posted per MSN from 1)",
                        side, receives, receives));
      for (const auto& [msn, r] : recvs[e]) {
        largest = std::max<std::uint64_t>(largest, r.size);
        if (msn != 0) seen_bytes += r.size;
      }
    }
    const std::uint64_t seen = recvs[e].size() - recvs[e].count(0);
    const std::uint64_t buffers = seen_bytes + (receives - seen) * largest;
    const std::uint64_t posts_planned = cp.ep[e].reads.size() + cp.ep[e].atomics.size();
    // (Each term is bounded by the limits above, so the sum cannot wrap.)
    planned += (buffers > 0 ? words(buffers) : 0) + receives * kReceiveOverhead +
               posts_planned * kRequestOverhead + words(8 * cp.ep[e].atomics.size());
    if (planned > limits.max_total)
      return refuse(
          "kMaxConnectionMemory", limits.max_total, planned,
          fmt::format("the replay would allocate {} octets or more for this connection (at {}: "
                      "{} receive buffer(s) of {} octets in all, {} STag(s) shadowed)",
                      planned, side, receives, buffers, regions[e].size()));
    return std::nullopt;
  }

  // Octets the replayer allocates for n octets of shadow memory or buffers: 8-octet words,
  // one more.
  static std::uint64_t words(std::uint64_t n) { return (n / 8 + 1) * 8 + 8; }

  // Endpoint e's plan: its regions, and one receive per MSN from 1 (a placeholder as large as
  // the largest seen for each message not in the capture).
  void build_endpoint(int e) {
    auto& ep = cp.ep[e];
    for (const auto& [stag, acc] : regions[e]) {
      RegionPlan r;
      r.stag = STag{stag};
      r.begin_to = acc.begin;
      r.end_to = acc.end;
      for (const auto& w : acc.why) r.why += (r.why.empty() ? "" : ", ") + w;
      ep.regions.push_back(std::move(r));
    }
    if (recvs[e].empty()) return;
    std::uint32_t largest = 0;
    for (const auto& [msn, r] : recvs[e]) largest = std::max(largest, r.size);
    const std::uint32_t last = recvs[e].rbegin()->first;
    ep.recvs.reserve(last);
    for (std::uint64_t m = 1; m <= last; ++m) {
      auto it = recvs[e].find(static_cast<std::uint32_t>(m));
      if (it != recvs[e].end()) {
        ep.recvs.push_back(it->second);
      } else {
        RecvPlan r;
        r.msn = static_cast<std::uint32_t>(m);
        r.size = largest;
        ep.recvs.push_back(r);
      }
    }
  }

  // Applies the renumbering patches to every segment that carries a patched octet (one whose
  // payload is in the capture file gets its own copy, patched).
  void patch_segments() {
    if (read_again_) {
      for (int d = 0; d < 2; ++d) cp.patches[d] = std::move(patches[d]);
      return;
    }
    for (auto& st : seg_steps) {
      if (st.kind != Step::Kind::Segment) continue;
      const auto& pm = patches[index(st.dir)];
      if (pm.empty()) continue;
      const std::int64_t off = st.seq - cp.stream_seq[index(st.dir)];
      if (st.file_offset != trace::kNotInFile) {
        const std::int64_t end = off + static_cast<std::int64_t>(st.length);
        const auto first = pm.lower_bound(off < 0 ? 0 : static_cast<std::uint64_t>(off));
        if (end <= 0 || first == pm.end() || static_cast<std::int64_t>(first->first) >= end)
          continue;
        const auto from = reader_->read(st.file_offset, st.length);
        st.payload.assign(from.begin(), from.end());
        st.file_offset = trace::kNotInFile;
        st.length = 0;
      }
      apply_patches(pm, off, st.payload);
    }
  }

  // Steps: the posts go in before their segments.
  void interleave_posts() {
    std::stable_sort(posts.begin(), posts.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    if (read_again_) {
      // (A post keyed SIZE_MAX goes before no segment: it is left out, as from seg_steps.)
      for (auto& [key, st] : posts)
        if (key != SIZE_MAX) cp.posts.push_back(PostAt{key, std::move(st)});
      cp.step_count += cp.posts.size();
      return;
    }
    std::size_t pi = 0;
    // (Each segment step leaves its deque as it is moved: the two are not held whole at once.
    // The posts are keyed by frame: the one of the segment step they go before.)
    while (!seg_steps.empty()) {
      for (; pi < posts.size() && posts[pi].first <= seg_steps.front().frame; ++pi) {
        posts[pi].second.time_us = seg_steps.front().time_us;
        cp.steps.push_back(std::move(posts[pi].second));
      }
      cp.steps.push_back(std::move(seg_steps.front()));
      seg_steps.pop_front();
    }
    cp.step_count = cp.steps.size();
  }

  // What the trace itself holds: violations, notes about how it ends.
  void write_notes(const trace::FlowReport& fr,
                   const std::vector<const trace::Record*>& violations) {
    std::size_t kept[2] = {0, 0};
    for (const auto* r : violations)
      if (kept[index(r->dir)]++ < kKeptTraceViolations)
        cp.trace_violations.push_back(TraceViolation{r->dir, r->frame, r->text});
    for (const auto& n : fr.notes) cp.cut_short.push_back(n);
    for (int e = 0; e < 2; ++e) note_what_is_missing(static_cast<Side>(e));
    if (!cp.fin[0] && !cp.fin[1] && !cp.rst)
      cp.cut_short.push_back("the capture ends before the connection closed (no FIN, no RST)");
    if (cp.rst) cp.notes.push_back("the connection was reset (RST)");
    for (const auto d : kDirs)
      if (cp.fpdus[index(d)] == 0)
        cp.notes.push_back(fmt::format("{}: no FPDU after the MPA frame", dir_name(d)));
  }

  // The messages, Read Responses and Atomic Responses to `side` the capture does not hold.
  void note_what_is_missing(Side side) {
    const auto& ep = cp.ep[index(side)];
    const auto& rv = ep.recvs;
    for (std::size_t i = 0; i < rv.size(); ++i) {
      if (!rv[i].seen) {
        // A run of missing messages is one line (there may be a million of them).
        std::size_t j = i;
        while (j + 1 < rv.size() && !rv[j + 1].seen) ++j;
        cp.cut_short.push_back(
            j == i ? fmt::format("{} never received message MSN {} (not in the capture)",
                                 to_string(side), rv[i].msn)
                   : fmt::format("{} never received messages MSN {} to {} (not in the capture)",
                                 to_string(side), rv[i].msn, rv[j].msn));
        i = j;
      } else if (!rv[i].complete) {
        cp.cut_short.push_back(
            fmt::format("the last segment of the message MSN {} to {} is not in the capture",
                        rv[i].msn, to_string(side)));
      }
    }
    for (const auto& r : ep.reads)
      if (!r.answered)
        cp.cut_short.push_back(fmt::format(
            "the Read Response to {}'s RDMA Read (MSN {}, frame {}) is not (wholly) in the capture",
            to_string(side), r.msn, r.frame));
    for (const auto& a : ep.atomics)
      if (!a.answered)
        cp.cut_short.push_back(
            fmt::format("the Atomic Response to {}'s atomic (frame {}) is not in the capture",
                        to_string(side), a.frame));
  }
};

// A connection of a capture read whole (its segments in `flow`): the learner fed its segments
// in capture order.
std::expected<ConnectionPlan, Refusal> learn(std::size_t flow_index, const trace::TcpFlow& flow,
                                             const trace::FlowReport& fr,
                                             const std::vector<const trace::Record*>& violations,
                                             const PlanLimits& limits, trace::PayloadReader* reader,
                                             bool read_again) {
  Learner learner(flow_index, flow.client, flow.server, limits, reader, read_again);
  for (int d = 0; d < 2; ++d) learner.start(d, trace::stream_start(flow, d));
  // (Sorted, not merged: a test may renumber a frame.)
  std::vector<SegmentRef> order;
  for (int d = 0; d < 2; ++d)
    for (const auto& s : flow.dir[d])
      if (s.size() > 0 || s.fin || s.rst)
        order.push_back({&s, d, static_cast<std::uint32_t>(s.size())});
  std::stable_sort(order.begin(), order.end(), [](const SegmentRef& a, const SegmentRef& b) {
    return a.seg->frame < b.seg->frame;
  });
  for (const auto& r : order) {
    const trace::TcpSegment& s = *r.seg;
    ByteSpan payload;
    if (r.len > 0 && s.in_file()) {
      if (!reader)
        throw trace::CaptureChanged(
            "internal error: a payload is in the capture file, but the plan has no file to read "
            "it from");
      payload = reader->payload(s);
    } else if (r.len > 0) {
      payload = s.payload;
    }
    learner.add(SegmentIn{r.dir, s.frame, s.time_us, s.seq, r.len, s.fin, s.rst}, payload);
  }
  learner.keep(std::move(order));
  return learner.finish(fr, violations);
}

// Why the decoder's report of a flow says it cannot be replayed; nullopt when it can. `no_syn`:
// the capture lacks the flow's SYN, and both directions have segments.
std::optional<std::string> not_replayable(const trace::FlowReport& fr, bool no_syn) {
  if (!fr.iwarp) {
    std::string v = fr.verdict;
    if (v.starts_with("no iWARP: ")) v = v.substr(10);
    if (no_syn)
      return fmt::format(
          "no MPA exchange in the capture: it starts after the connection was opened (no SYN), "
          "so the framing cannot be known ({})",
          v);
    return "not iWARP: " + v;
  }
  if (!fr.reply) return "the MPA exchange is cut short: the MPA Reply is not in the capture";
  if (fr.reply->reject)
    return "rejected by the responder (MPA Reply R=1): no Full Operation to replay";
  if (!fr.params) return "the MPA frames did not establish the connection";
  return std::nullopt;
}

}  // namespace

void StepStream::segment(std::size_t flow, int dir, const trace::SegmentView& v,
                         const StepEmit& emit) {
  if (flow != cp_.flow || done_) return;
  if (v.frame >= cp_.last_frame) done_ = true;
  if (std::binary_search(cp_.left_out.begin(), cp_.left_out.end(), v.frame)) return;
  const std::size_t len = v.payload.size();
  const bool injected = len > 0 && !is_setup(cp_, dir, v.seq, len);
  if (!injected && !v.fin) return;
  // The posts keyed by this segment's frame (or an earlier one's) go in before it, at its time.
  for (; next_post_ < cp_.posts.size() && cp_.posts[next_post_].before_frame <= v.frame;
       ++next_post_) {
    Step post = cp_.posts[next_post_].post;
    post.time_us = v.time_us;
    ++made_;
    emit(std::move(post), {});
  }
  if (injected) {
    Step st = bare_segment_step(cp_, dir, v.frame, v.time_us, v.seq);
    // (Copied only when the renumbering patches one of its octets.)
    ByteSpan payload = v.payload;
    const auto& pm = cp_.patches[dir];
    const std::int64_t off = v.seq - cp_.stream_seq[dir];
    const std::int64_t end = off + static_cast<std::int64_t>(len);
    if (const auto it = pm.lower_bound(off < 0 ? 0 : static_cast<std::uint64_t>(off));
        end > 0 && it != pm.end() && static_cast<std::int64_t>(it->first) < end) {
      patched_.assign(v.payload.begin(), v.payload.end());
      apply_patches(pm, off, patched_);
      payload = patched_;
    }
    digest_ = digest_step(digest_, Step::Kind::Segment, dir, v.frame, v.seq, len);
    ++made_;
    emit(std::move(st), payload);
  }
  if (v.fin) {
    const TcpSeq at = v.seq + static_cast<std::uint32_t>(len);
    digest_ = digest_step(digest_, Step::Kind::Fin, dir, v.frame, at, 0);
    ++made_;
    emit(fin_step(dir, v.frame, v.time_us, at), {});
  }
}

namespace {

// Hands the segments of a capture read again to a connection's StepStream, and stops the read
// after the connection's last one.
class StepSink final : public trace::SegmentSink {
 public:
  StepSink(StepStream& stream, const StepEmit& emit) : stream_(stream), emit_(emit) {}
  void on_segment(std::size_t flow, trace::TcpFlow&, int dir,
                  const trace::SegmentView& v) override {
    stream_.segment(flow, dir, v, emit_);
  }
  bool done() const override { return stream_.done(); }

 private:
  StepStream& stream_;
  const StepEmit& emit_;
};

}  // namespace

void read_steps_again(const ConnectionPlan& cp, const StepEmit& emit) {
  if (!cp.read_again || !cp.file)
    throw trace::CaptureChanged(
        "internal error: a plan that keeps its steps, or has no capture file, is read again");
  StepStream stream(cp);
  StepSink sink(stream, emit);
  if (auto again = trace::rescan_capture(*cp.file, sink); !again)
    throw trace::CaptureChanged(again.error());
  if (stream.made() != cp.step_count || stream.digest() != cp.step_digest)
    throw trace::CaptureChanged(fmt::format(
        "{}: the file changed while it was being read (connection c{} read again makes {} "
        "step(s), {} when it was learned{})",
        cp.file->path(), cp.flow, stream.made(), cp.step_count,
        stream.made() == cp.step_count ? ", from other segments" : ""));
}

namespace {

// What make_plan_from_file() notes per flow as it reads the file: a few words per flow, none per
// segment.
struct FlowFacts {
  std::uint64_t segments[2] = {0, 0};  // kept segments (data, SYN, FIN or RST) per direction
  std::uint64_t last_frame = 0;
  std::optional<TcpSeq> low[2];  // per direction: the lowest sequence number carrying data
  // Per direction: where the stream was taken to start at its first segment with data (after
  // the SYN when it was seen by then, else that segment), as decode_file() takes it.
  std::optional<TcpSeq> assumed[2];
  bool relevant = false;  // a segment with data, FIN or RST has been seen
};

// Where direction d of a flow starts: trace::stream_start() of the flow read whole.
TcpSeq start_of(const trace::TcpFlow& flow, const FlowFacts& f, int d) {
  if (d == 0 && flow.saw_syn) return flow.client_isn + 1;
  if (d == 1 && flow.saw_syn_ack) return flow.server_isn + 1;
  return f.low[d].value_or(TcpSeq{0});
}

// Whether the streams were taken to start where the whole flow shows they do.
bool starts_hold(const trace::TcpFlow& flow, const FlowFacts& f) {
  for (int d = 0; d < 2; ++d)
    if (f.assumed[d] && *f.assumed[d] != start_of(flow, f, d)) return false;
  return true;
}

// A read of the file that learns (make_plan_from_file). The first read notes every flow's facts,
// decodes every flow (trace::FileDecoder: the flows' reports and the capture's violations) and
// learns, speculatively, the flows whose first segment with data (or FIN or RST) is a client
// segment starting with the MPA Request key, each direction taken to start as the decoder takes
// it, the steps counted as they come. A further read learns chosen flows from their start (the
// whole flow's stream starts; a decoder of its own for the flows whose starts differ), steps
// counted as they come or their segments kept. Either way at most kLearnedPerRead connections
// are open (not yet ended in both directions) at a time: a flow that begins while as many are
// is left to a further read (Slot::deferred). Per flow it holds its facts, a learner until the
// flow turns out not to be iWARP (once it has ended, without the octets it kept behind its
// decoders: Learner::compact), and the first kKeptTraceViolations violations per direction.
class LearnSink final : public trace::SegmentSink {
 public:
  struct Slot {
    std::unique_ptr<Learner> learner;
    bool learn = false;               // a further read learns it
    bool read_again = true;           // StepSource::ReadAgain, else Kept
    bool keep_segments = false;       // a further read keeps its segments (Learner::Mode::Kept)
    bool decode = false;              // a further read decodes it (its stream starts differ)
    bool redo = false;                // its learner gave up (Learner::needs_redo)
    bool deferred = false;            // it began while kLearnedPerRead learners were open
    bool seen = false;                // this read has seen a segment of it (data, FIN or RST)
    bool open = false;                // its learner is open (counted in live_)
    bool rst[2] = {false, false};     // per direction: RST seen
    std::optional<TcpSeq> fin[2];     // per direction: its FIN's sequence number
    std::optional<Refusal> hopeless;  // its learner found it cannot be learned (and went)
    std::unique_ptr<std::deque<trace::TcpSegment>> kept;  // (a deque: keep() refers to them)
    std::vector<trace::Record> violations;
    std::size_t violations_of[2] = {0, 0};
  };

  // The first read (`facts` filled as it goes), or (`first` given) a further one. The learners
  // share `budget` (what they hold beyond gaps, in all), which must outlive them.
  LearnSink(std::deque<FlowFacts>& facts, const PlanLimits& limits, trace::HeldBudget& budget,
            trace::PayloadReader* reader, trace::FileDecoder* decoder,
            const trace::Capture* first = nullptr)
      : facts_(facts),
        limits_(limits),
        budget_(budget),
        reader_(reader),
        decoder_(decoder),
        first_(first) {
    if (first_) slots.resize(facts_.size());
  }
  std::deque<Slot> slots;  // by flow index

  // The decoder (which refers to this sink's records) is gone: no more segments go to it.
  void detach_decoder() { decoder_ = nullptr; }

  // The decoder's records: the violations kept, per flow.
  void record(trace::Record&& r) {
    if (r.kind != trace::Record::Kind::Violation) return;
    while (slots.size() <= r.flow) slots.emplace_back();
    auto& sl = slots[r.flow];
    if (sl.violations_of[index(r.dir)]++ < kKeptTraceViolations)
      sl.violations.push_back(std::move(r));
  }

  void on_segment(std::size_t i, trace::TcpFlow& flow, int dir,
                  const trace::SegmentView& v) override {
    const auto len = static_cast<std::uint32_t>(v.payload.size());
    if (first_) {
      if (i >= slots.size()) return;  // (not in the first read: the replay finds the change)
      auto& sl = slots[i];
      if (decoder_ && sl.decode) decoder_->on_segment(i, flow, dir, v);
      if (!sl.learn || sl.hopeless || sl.redo || sl.deferred || (len == 0 && !v.fin && !v.rst))
        return;
      if (!sl.seen) {
        sl.seen = true;
        if (live_ >= kLearnedPerRead) {
          sl.deferred = true;
          return;
        }
        const auto& f = first_->flows[i];
        sl.learner = make(i, flow, sl.read_again,
                          sl.keep_segments ? Learner::Mode::Kept : Learner::Mode::Counting);
        for (int d = 0; d < 2; ++d) sl.learner->start(d, start_of(f, facts_[i], d));
        open(sl);
      }
      if (sl.learner) take(sl, dir, v, len);
      return;
    }
    while (facts_.size() <= i) facts_.emplace_back();
    while (slots.size() <= i) slots.emplace_back();
    auto& f = facts_[i];
    ++f.segments[dir];
    f.last_frame = std::max(f.last_frame, v.frame);
    bool keyed = false;
    if (len > 0) {
      // (As trace::stream_start() takes it from a flow read whole: the same comparisons in the
      // same order.)
      if (!f.low[dir] || v.seq < *f.low[dir]) f.low[dir] = v.seq;
      const auto key = mpa::kRequestKey;
      keyed = dir == 0 && v.payload.size() >= key.size() &&
              std::equal(key.begin(), key.end(), v.payload.begin());
      if (!f.assumed[dir]) {
        const bool syn = dir == 0 ? flow.saw_syn : flow.saw_syn_ack;
        f.assumed[dir] = syn ? (dir == 0 ? flow.client_isn : flow.server_isn) + 1 : v.seq;
      }
    }
    if (decoder_) decoder_->on_segment(i, flow, dir, v);
    if (len == 0 && !v.fin && !v.rst) return;
    const bool first_relevant = !f.relevant;
    f.relevant = true;
    auto& sl = slots[i];
    if (first_relevant && keyed) {
      if (live_ >= kLearnedPerRead) {
        sl.deferred = true;
        return;
      }
      sl.learner = make(i, flow, true, Learner::Mode::Speculative);
      open(sl);
    }
    if (!sl.learner) return;
    if (!sl.learner->started(dir) && len > 0) sl.learner->start(dir, *f.assumed[dir]);
    take(sl, dir, v, len);
  }

 private:
  std::unique_ptr<Learner> make(std::size_t i, const trace::TcpFlow& flow, bool read_again,
                                Learner::Mode mode) {
    return std::make_unique<Learner>(i, flow.client, flow.server, limits_, reader_, read_again,
                                     mode, &budget_);
  }

  void open(Slot& sl) {
    sl.open = true;
    ++live_;
  }
  void close(Slot& sl) {
    if (!sl.open) return;
    sl.open = false;
    --live_;
  }

  // Direction d of a learned flow is over: it sent RST, or FIN with every octet before it
  // delivered (as trace::FileDecoder ends a connection, RFC 793 §3.5).
  static bool ended(const Slot& sl, int d) {
    if (sl.rst[d]) return true;
    if (!sl.fin[d]) return false;
    const auto next = sl.learner->next(d);
    return !next || *next - *sl.fin[d] >= 0;
  }

  // The next segment of a learned flow; the learner goes when it has nothing more to learn, and
  // is compacted once the flow has ended.
  void take(Slot& sl, int dir, const trace::SegmentView& v, std::uint32_t len) {
    if (sl.keep_segments) {
      // (Its payload stays in the file where it is one run of the file's octets.)
      if (!sl.kept) sl.kept = std::make_unique<std::deque<trace::TcpSegment>>();
      sl.kept->push_back(trace::kept_segment(v));
      sl.learner->keep(sl.kept->back(), dir);
    }
    sl.learner->add(SegmentIn{dir, v.frame, v.time_us, v.seq, len, v.fin, v.rst}, v.payload);
    if (sl.learner->hopeless()) {
      sl.hopeless = Refusal{"a direction does not start with its MPA frame", std::nullopt};
    } else if (sl.learner->needs_redo()) {
      sl.redo = true;
      sl.keep_segments = sl.learner->needs_kept();
    } else {
      if (v.rst) sl.rst[dir] = true;
      if (v.fin && !sl.fin[dir]) sl.fin[dir] = v.seq + len;
      if (sl.open && ended(sl, 0) && ended(sl, 1)) {
        sl.learner->compact();
        close(sl);
      }
      return;
    }
    close(sl);
    sl.learner.reset();
    sl.kept.reset();
  }

  std::deque<FlowFacts>& facts_;
  const PlanLimits& limits_;
  trace::HeldBudget& budget_;
  trace::PayloadReader* reader_;
  trace::FileDecoder* decoder_;
  const trace::Capture* first_;
  std::uint64_t live_ = 0;  // learners open
};

// A segment the scanner takes as its direction's SYN (trace::TcpFlow::saw_syn, saw_syn_ack): the
// client's SYN without ACK, the server's SYN with it.
bool opening_syn(int dir, bool syn, bool has_ack) {
  return syn && (dir == 0 ? !has_ack : has_ack);
}

// `rnic replay --drop` as the file is read (make_plan_from_file): hands every segment but those
// of the frames taken out to `next`, and leaves each flow's SYN facts as drop_frames() leaves
// them in a capture read whole: a direction's SYN counts only where a segment that carries it
// is kept (the scanner then takes the first kept one as the SYN: trace::TcpFlow). Notes which of
// the frames it met.
class DropSink final : public trace::SegmentSink {
 public:
  DropSink(const std::vector<std::uint64_t>& frames, trace::SegmentSink& next)
      : frames_(frames), next_(next), found_(frames.size(), false) {}
  void on_segment(std::size_t i, trace::TcpFlow& flow, int dir,
                  const trace::SegmentView& v) override {
    const bool syn = opening_syn(dir, v.syn, v.has_ack);
    if (syn && kept_syn_.size() <= i) kept_syn_.resize(i + 1, 0);
    const auto it = std::lower_bound(frames_.begin(), frames_.end(), v.frame);
    if (it != frames_.end() && *it == v.frame) {
      found_[static_cast<std::size_t>(it - frames_.begin())] = true;
      // (A SYN taken out before one of its direction was kept: the flow has not seen one, and
      // the scanner takes the next as the first.)
      if (syn && !(kept_syn_[i] & (1u << dir)))
        (dir == 0 ? flow.saw_syn : flow.saw_syn_ack) = false;
      return;
    }
    if (syn) kept_syn_[i] |= static_cast<std::uint8_t>(1u << dir);
    next_.on_segment(i, flow, dir, v);
  }
  bool done() const override { return next_.done(); }
  // The first of the frames the read did not meet (no segment with data, SYN, FIN or RST).
  std::optional<std::uint64_t> missing() const {
    for (std::size_t k = 0; k < frames_.size(); ++k)
      if (!found_[k]) return frames_[k];
    return std::nullopt;
  }

 private:
  const std::vector<std::uint64_t>& frames_;  // ascending, no repeats
  trace::SegmentSink& next_;
  std::vector<bool> found_;
  std::vector<std::uint8_t> kept_syn_;  // per flow: bit d, a SYN of direction d kept
};

// make_plan()'s error for a plan that replays no connection: one line naming the file and why
// each connection is not replayed.
std::optional<std::string> plan_error(const Plan& plan) {
  if (!plan.connections.empty()) return std::nullopt;
  std::string why;
  for (const auto& s : plan.skipped)
    why += fmt::format("{}c{} {} -> {}: {}", why.empty() ? "" : "; ", s.flow, s.client.to_string(),
                       s.server.to_string(), s.reason);
  if (why.empty()) why = "it holds no TCP connection";
  return fmt::format("{}: no iWARP connection to replay ({})", plan.path, why);
}

// The connections past kRescanBudget (make_plan's choice): of `candidates` (flow indexes), those
// whose steps are read again, the ones with the most segments first while their reads (each up
// to its last frame) add up to at most kRescanBudget times the capture's frames.
std::vector<bool> read_again_within_budget(std::vector<std::size_t> candidates,
                                           const std::vector<std::uint64_t>& segments,
                                           const std::vector<std::uint64_t>& last_frame,
                                           std::uint64_t frames) {
  std::vector<bool> again(segments.size(), false);
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](std::size_t a, std::size_t b) { return segments[a] > segments[b]; });
  const std::uint64_t reads = kRescanBudget * frames;
  std::uint64_t used = 0;
  for (const auto i : candidates)
    if (last_frame[i] <= reads - used) {
      again[i] = true;
      used += last_frame[i];
    }
  return again;
}

}  // namespace

std::expected<Plan, std::string> make_plan_from_file(const std::string& path,
                                                     const PlanLimits& limits,
                                                     std::vector<std::uint64_t> drop) {
  // (Frames taken out: every read hands the learners and decoders the others only.)
  std::sort(drop.begin(), drop.end());
  drop.erase(std::unique(drop.begin(), drop.end()), drop.end());
  auto read = [&](auto&& scan, trace::SegmentSink& sink) {
    if (drop.empty()) return scan(sink);
    DropSink dropped(drop, sink);
    return scan(dropped);
  };
  // 1. One read: every flow's facts, every flow decoded, iWARP ones learned (see LearnSink).
  std::deque<FlowFacts> facts;
  // (What all the learners hold beyond gaps, at most max_held; it outlives them.)
  trace::HeldBudget budget;
  budget.limit = static_cast<std::size_t>(std::min<std::uint64_t>(limits.max_held, SIZE_MAX));
  trace::DecodeReport rep;
  trace::StreamOptions so;
  so.window = static_cast<std::size_t>(std::min<std::uint64_t>(limits.max_held, SIZE_MAX));
  so.total_window = so.window;
  std::unique_ptr<LearnSink> learned;
  const trace::RecordSink on_record = [&](trace::Record&& r) { learned->record(std::move(r)); };
  trace::FileDecoder decoder(rep, on_record, so, {}, /*violations_only=*/true);
  learned = std::make_unique<LearnSink>(facts, limits, budget, nullptr, &decoder);
  // (A pipe is copied into an unnamed temporary file first, which is read instead.)
  std::optional<std::uint64_t> not_met;
  auto cap = drop.empty() ? trace::scan_capture_file(path, *learned, /*copy_pipe=*/true) : [&] {
    DropSink dropped(drop, *learned);
    auto c = trace::scan_capture_file(path, dropped, true);
    not_met = dropped.missing();
    return c;
  }();
  if (!cap) return std::unexpected(cap.error());
  // (As drop_frames() says it.)
  if (not_met)
    return std::unexpected(
        fmt::format("{}: frame {} is no TCP segment with data, SYN, FIN or RST (the capture has "
                    "{} frames)",
                    cap->path, *not_met, cap->frames));
  if (!cap->file)
    return std::unexpected(
        fmt::format("{}: neither a regular file nor a pipe (it cannot be read again)", path));
  decoder.finish(*cap);
  const std::size_t flows = cap->flows.size();
  facts.resize(flows);
  learned->slots.resize(flows);
  trace::PayloadReader reader(cap->file);
  std::uint64_t reads = 1;
  // A further read (`more`, its slots set by `choose`): its decoder takes each stream from where
  // the whole flow starts it.
  auto read_more = [&](trace::DecodeReport& rep2, std::unique_ptr<LearnSink>& more,
                       const std::function<void(LearnSink&)>& choose) {
    ++reads;
    const trace::RecordSink on_record2 = [&](trace::Record&& r) { more->record(std::move(r)); };
    trace::FileDecoder decoder2(
        rep2, on_record2, so,
        [&](std::size_t i, int d) -> std::optional<TcpSeq> {
          if (i >= facts.size() || !facts[i].low[d]) return std::nullopt;
          return start_of(cap->flows[i], facts[i], d);
        },
        /*violations_only=*/true);
    more = std::make_unique<LearnSink>(facts, limits, budget, &reader, &decoder2, &*cap);
    choose(*more);
    bool positions = false, decode = false;
    for (const auto& sl : more->slots) {
      positions |= sl.learn && sl.keep_segments;
      decode |= sl.decode;
    }
    auto again = read(
        [&](trace::SegmentSink& sink) {
          return trace::rescan_capture(*cap->file, sink, positions);
        },
        *more);
    if (!again) throw trace::CaptureChanged(again.error() + " (reading the file again)");
    if (again->flows.size() != flows || again->frames != cap->frames)
      throw trace::CaptureChanged(fmt::format("{}: the file read again holds other flows", path));
    if (decode) decoder2.finish(*again);
    more->detach_decoder();
  };
  // 2. A flow whose streams start elsewhere than the first read took them to (a direction
  // without its SYN whose lowest sequence number came later) is decoded again, in a read of its
  // own, so that every report is known before the budget of reads is chosen; what the first read
  // learned of it goes.
  std::vector<bool> restart(flows, false);
  for (std::size_t i = 0; i < flows; ++i) restart[i] = !starts_hold(cap->flows[i], facts[i]);
  if (std::find(restart.begin(), restart.end(), true) != restart.end()) {
    trace::DecodeReport rep2;
    std::unique_ptr<LearnSink> more;
    read_more(rep2, more, [&](LearnSink& m) {
      for (std::size_t i = 0; i < flows; ++i) m.slots[i].decode = restart[i];
    });
    for (std::size_t i = 0; i < flows; ++i)
      if (restart[i]) {
        rep.flows[i] = std::move(rep2.flows[i]);
        auto& sl = learned->slots[i];
        sl.violations = std::move(more->slots[i].violations);
        sl.learner.reset();  // (what it holds goes back to the budget)
        sl.hopeless.reset();
      }
  }
  // 3. Which connections are read again for the replay: make_plan's choice (kRescanBudget), from
  // the same reports and counts.
  std::vector<bool> replayable(flows);
  {
    std::vector<std::size_t> candidates;
    std::vector<std::uint64_t> segments(flows), last_frame(flows);
    for (std::size_t i = 0; i < flows; ++i) {
      replayable[i] = !not_replayable(rep.flows[i], false);
      segments[i] = facts[i].segments[0] + facts[i].segments[1];
      last_frame[i] = facts[i].last_frame;
      if (replayable[i]) candidates.push_back(i);
    }
    const auto again = read_again_within_budget(candidates, segments, last_frame, cap->frames);
    for (std::size_t i = 0; i < flows; ++i) learned->slots[i].read_again = again[i];
  }
  // 4. Each flow's plan or why it has none, as make_plan() makes them: the first read's learners
  // end now (what they hold goes); the replayable flows it did not learn (their streams start
  // elsewhere, they began while kLearnedPerRead learners were open, a Request whose key was cut
  // across segments, steps that must be kept, a learner that gave up) are learned in further
  // reads, each learner ended after its read.
  // (By flow, only the flows that have one: a ConnectionPlan is large, and flows may be many.)
  std::map<std::size_t, ConnectionPlan> plans;
  std::map<std::size_t, SkippedFlow> skipped;
  auto conclude = [&](std::size_t i, LearnSink::Slot& sl) {
    const auto& flow = cap->flows[i];
    const auto& f = facts[i];
    SkippedFlow sk{i, flow.client, flow.server, {}, std::nullopt};
    if (auto why =
            not_replayable(rep.flows[i], !flow.saw_syn && f.segments[0] > 0 && f.segments[1] > 0)) {
      sk.reason = std::move(*why);
    } else if (sl.hopeless) {
      sk.reason = sl.hopeless->reason;
      sk.limit = sl.hopeless->limit;
    } else if (!sl.learner) {
      sk.reason = "internal error: the connection was not learned";
    } else {
      for (int d = 0; d < 2; ++d)
        if (!sl.learner->started(d)) sl.learner->start(d, start_of(flow, f, d));
      std::vector<const trace::Record*> violations;
      for (const auto& r : sl.violations) violations.push_back(&r);
      auto cp = sl.learner->finish(rep.flows[i], violations);
      if (cp) {
        cp->file = cap->file;
        // (The replay's read of the file leaves them out too: StepStream.)
        if (cp->read_again) cp->left_out = drop;
        plans.emplace(i, std::move(*cp));
      } else {
        sk.reason = cp.error().reason;
        sk.limit = cp.error().limit;
      }
    }
    if (!plans.contains(i)) skipped.emplace(i, std::move(sk));
    sl.learner.reset();
    sl.kept.reset();
  };
  std::vector<std::size_t> redo;
  for (std::size_t i = 0; i < flows; ++i) {
    auto& sl = learned->slots[i];
    const bool learned_ok = sl.hopeless || (sl.learner && sl.read_again);
    if (replayable[i] && !learned_ok) {
      sl.learner.reset();  // (what it holds goes back to the budget)
      sl.hopeless.reset();
      redo.push_back(i);
    } else {
      conclude(i, sl);
    }
  }
  // (Each read learns at least the first flow it is given: the loop ends.)
  while (!redo.empty()) {
    trace::DecodeReport rep2;
    std::unique_ptr<LearnSink> more;
    read_more(rep2, more, [&](LearnSink& m) {
      for (const auto i : redo) {
        const auto& first = learned->slots[i];
        auto& sl = m.slots[i];
        sl.learn = true;
        sl.read_again = first.read_again;
        sl.keep_segments = !first.read_again || first.keep_segments;
      }
    });
    std::vector<std::size_t> left;
    for (const auto i : redo) {
      auto& sl = more->slots[i];
      auto& first = learned->slots[i];
      if (sl.deferred || sl.redo) {  // (past kMaxSegmentsBeforeFraming: its segments kept)
        if (sl.redo) first.keep_segments = true;
        left.push_back(i);
        continue;
      }
      sl.violations = std::move(first.violations);
      conclude(i, sl);
    }
    redo = std::move(left);
  }
  Plan plan;
  plan.path = cap->path;
  plan.frames = cap->frames;
  plan.problems = cap->problems;
  plan.limits = limits;
  plan.learning_reads = reads;
  for (auto& [i, cp] : plans) plan.connections.push_back(std::move(cp));
  for (auto& [i, sk] : skipped) plan.skipped.push_back(std::move(sk));
  if (auto e = plan_error(plan)) return std::unexpected(*e);
  return plan;
}

std::expected<std::size_t, std::string> drop_frames(trace::Capture& cap,
                                                    const std::vector<std::uint64_t>& frames) {
  const std::set<std::uint64_t> want(frames.begin(), frames.end());
  std::set<std::uint64_t> found;
  std::size_t n = 0;
  for (auto& f : cap.flows) {
    for (auto& dir : f.dir)
      std::erase_if(dir, [&](const trace::TcpSegment& s) {
        if (!want.contains(s.frame)) return false;
        found.insert(s.frame);
        ++n;
        return true;
      });
    // Without its SYN a direction's stream starts where its data does; with a SYN sent again,
    // the first one left is the SYN (as the scanner takes it: the first one it meets).
    const bool had_syn = f.saw_syn;
    for (int d = 0; d < 2; ++d) {
      bool& saw = d == 0 ? f.saw_syn : f.saw_syn_ack;
      if (!saw) continue;
      const auto it = std::find_if(
          f.dir[d].begin(), f.dir[d].end(),
          [&](const trace::TcpSegment& s) { return opening_syn(d, s.syn, s.has_ack); });
      saw = it != f.dir[d].end();
      if (saw) (d == 0 ? f.client_isn : f.server_isn) = it->seq;
    }
    // (The problem the scanner notes for a flow without the client's SYN: trace::scan_capture.)
    if (had_syn && !f.saw_syn)
      f.problems.insert(f.problems.begin(),
                        fmt::format("capture starts mid-connection: no SYN for {} -> {} (first "
                                    "frame {})",
                                    f.client.to_string(), f.server.to_string(), f.first_frame));
  }
  for (auto fr : want)
    if (!found.contains(fr))
      return std::unexpected(fmt::format(
          "{}: frame {} is no TCP segment with data, SYN, FIN or RST (the capture has {} frames)",
          cap.path, fr, cap.frames));
  std::set<std::uint64_t> out(cap.left_out.begin(), cap.left_out.end());
  out.insert(want.begin(), want.end());
  cap.left_out.assign(out.begin(), out.end());
  return n;
}

std::expected<Plan, std::string> make_plan(const trace::Capture& cap, const PlanLimits& limits,
                                           StepSource source) {
  // The learning pass needs the decoder's violations only (TraceViolation), not every record.
  // (Holding what lies beyond a gap up to the learning pass's own bound.)
  const auto rep = trace::decode_capture(
      cap,
      {.keep_records = false,
       .keep_violations = true,
       .window = static_cast<std::size_t>(std::min<std::uint64_t>(limits.max_held, SIZE_MAX))});
  Plan plan;
  plan.path = cap.path;
  plan.frames = cap.frames;
  plan.problems = cap.problems;
  plan.limits = limits;
  std::optional<trace::PayloadReader> reader;
  if (cap.file) reader.emplace(cap.file);
  // Which connections' steps are made as the file is read again (a regular file's only): the
  // ones with the most segments first, within kRescanBudget (each reads the file again up to
  // its last frame).
  std::vector<bool> read_again(cap.flows.size(), false);
  if (source == StepSource::ReadAgain && cap.file) {
    std::vector<std::size_t> candidates;
    std::vector<std::uint64_t> segments(cap.flows.size()), last_frame(cap.flows.size());
    for (std::size_t i = 0; i < cap.flows.size() && i < rep.flows.size(); ++i) {
      for (const auto& dir : cap.flows[i].dir) {
        segments[i] += dir.size();
        for (const auto& s : dir) last_frame[i] = std::max(last_frame[i], s.frame);
      }
      // (A connection a limit then refuses has used its share: that is not known yet.)
      if (!not_replayable(rep.flows[i], false)) candidates.push_back(i);
    }
    read_again = read_again_within_budget(candidates, segments, last_frame, cap.frames);
  }
  for (std::size_t i = 0; i < cap.flows.size(); ++i) {
    const auto& flow = cap.flows[i];
    const auto& fr = rep.flows[i];
    SkippedFlow sk{i, flow.client, flow.server, {}, std::nullopt};
    if (auto why =
            not_replayable(fr, !flow.saw_syn && !flow.dir[0].empty() && !flow.dir[1].empty())) {
      sk.reason = std::move(*why);
    } else {
      std::vector<const trace::Record*> violations;
      for (const auto& r : rep.records)
        if (r.flow == i && r.kind == trace::Record::Kind::Violation) violations.push_back(&r);
      auto cp = learn(i, flow, fr, violations, limits, reader ? &*reader : nullptr, read_again[i]);
      if (cp) {
        cp->file = cap.file;
        if (read_again[i]) cp->left_out = cap.left_out;
        plan.connections.push_back(std::move(*cp));
        continue;
      }
      sk.reason = cp.error().reason;
      sk.limit = cp.error().limit;
    }
    plan.skipped.push_back(std::move(sk));
  }
  if (auto e = plan_error(plan)) return std::unexpected(*e);
  return plan;
}

}  // namespace iwarp::replay
