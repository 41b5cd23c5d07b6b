#include "trace/explain.hpp"

#include <fmt/format.h>

#include <array>
#include <variant>

namespace iwarp::trace {

namespace {

// The facts one sentence is built from.
struct Facts {
  const ddp::DdpHeader& h;
  const SegmentBody* body;
  std::uint32_t payload;
  SegmentPlace place;

  template <class T>
  const T* get() const {
    return body ? std::get_if<T>(body) : nullptr;
  }
};

std::string stag(STag s) {
  return fmt::format("0x{:08x}", s.value());
}

// "the only segment of its message" / "segment 2, more follow" / "last segment (3 of 3)".
std::string place_text(const Facts& f) {
  const auto& p = f.place;
  if (p.index == 0) return p.last ? "last segment" : "segment (more follow)";
  if (p.index == 1 && p.last) return "single segment";
  if (p.last) return fmt::format("last segment ({} of {})", p.index, p.index);
  if (p.index == 1) return "first segment (more follow)";
  return fmt::format("segment {} (more follow)", p.index);
}

// RFC 5041 §5.3: untagged data lands at MO in the receive buffer its MSN selects.
std::string untagged_where(const Facts& f) {
  return fmt::format("{} octets at MO {} of the receive WQE that MSN {} on queue {} consumes",
                     f.payload, f.h.mo.value(), f.h.msn.value(), f.h.qn.value());
}

std::string write_text(const Facts& f) {
  return fmt::format(
      "RDMA Write {}: {} octets placed at TO 0x{:x} of STag {}, a buffer the data sink "
      "advertised to the writer; {} (RFC 5040 §4.3, tagged placement RFC 5041 §5.2)",
      place_text(f), f.payload, f.h.to.value(), stag(f.h.stag),
      f.h.last ? "the Write is complete at the sink, which gets no completion for it"
               : "the next segment continues at the TO right after this one");
}

std::string read_request_text(const Facts& f) {
  if (const auto* r = f.get<rdmap::ReadRequest>())
    return fmt::format(
        "RDMA Read Request MSN {} on queue 1: asks the peer for {} octets from its STag {} at "
        "TO 0x{:x}, to be returned into STag {} at TO 0x{:x}; the responder queues it on its "
        "inbound read queue (at most IRD outstanding) and answers with Read Responses "
        "(RFC 5040 §4.4, §6.3)",
        f.h.msn.value(), r->size, stag(r->src_stag), r->src_to.value(), stag(r->sink_stag),
        r->sink_to.value());
  return fmt::format(
      "RDMA Read Request MSN {} on queue 1: asks the peer for data from one of its STags, to be "
      "returned into one of the requester's; the responder queues it on its inbound read queue "
      "(at most IRD outstanding) and answers with Read Responses (RFC 5040 §4.4, §6.3)",
      f.h.msn.value());
}

std::string read_response_text(const Facts& f) {
  return fmt::format(
      "RDMA Read Response {}: {} octets placed at TO 0x{:x} of STag {}, the Read's data sink; "
      "{} (RFC 5040 §4.5)",
      place_text(f), f.payload, f.h.to.value(), stag(f.h.stag),
      f.h.last ? "with this last segment the oldest outstanding RDMA Read completes"
               : "the Read completes when the last segment (L set) arrives");
}

std::string send_completion(const Facts& f) {
  return f.h.last ? "the message is complete: its receive WQE completes to the CQ"
                  : "its receive completion waits for the last segment (L set)";
}

std::string send_text(const Facts& f) {
  return fmt::format("Send MSN {} {}: {}; {} (RFC 5040 §4.6, RFC 5041 §5.3)", f.h.msn.value(),
                     place_text(f), untagged_where(f), send_completion(f));
}

std::string send_inv_text(const Facts& f) {
  return fmt::format(
      "Send with Invalidate MSN {} {}: {}; {}, and STag 0x{:08x} (in RsvdULP) is invalidated "
      "first, so the peer can no longer access that buffer (RFC 5040 §4.6, §5.4)",
      f.h.msn.value(), place_text(f), untagged_where(f), send_completion(f), f.h.rsvd_ulp);
}

std::string send_se_text(const Facts& f) {
  return fmt::format(
      "Send with Solicited Event MSN {} {}: {}; {}, and the SE bit makes that completion wake a "
      "consumer waiting for solicited events (RFC 5040 §4.6)",
      f.h.msn.value(), place_text(f), untagged_where(f), send_completion(f));
}

std::string send_se_inv_text(const Facts& f) {
  return fmt::format(
      "Send with Solicited Event and Invalidate MSN {} {}: {}; {}, STag 0x{:08x} is "
      "invalidated first and the completion wakes a consumer waiting for solicited events "
      "(RFC 5040 §4.6, §5.4)",
      f.h.msn.value(), place_text(f), untagged_where(f), send_completion(f), f.h.rsvd_ulp);
}

std::string terminate_text(const Facts& f) {
  if (const auto* t = f.get<rdmap::Terminate>())
    return fmt::format(
        "Terminate MSN {} on queue 2: the sender found an error and ends the stream, "
        "reporting [{}] (layer {} etype {} code 0x{:02x}): {}; {}the receiver moves its queue "
        "pair to Terminate and then Error, flushing outstanding work (RFC 5040 §4.8)",
        f.h.msn.value(), describe_term(t->layer, t->etype, t->ecode), t->layer, t->etype, t->ecode,
        explain_terminate_code(t->layer, t->etype, t->ecode),
        t->d ? "it echoes the DDP header of the segment that failed; " : "");
  return fmt::format(
      "Terminate MSN {} on queue 2: the sender found an error and ends the stream; the receiver "
      "moves its queue pair to Terminate and then Error, flushing outstanding work "
      "(RFC 5040 §4.8)",
      f.h.msn.value());
}

std::string immediate_value(const Facts& f) {
  const auto* v = f.get<std::uint64_t>();
  return v ? fmt::format(" 0x{:016x}", *v) : std::string();
}

std::string immediate_text(const Facts& f) {
  return fmt::format(
      "Immediate Data MSN {}: carries the 8 octets{} and no payload; it consumes the next "
      "receive WQE and completes it with that value, and after an RDMA Write it tells the "
      "receiver the Write is placed (RFC 7306 §4.3)",
      f.h.msn.value(), immediate_value(f));
}

std::string immediate_se_text(const Facts& f) {
  return fmt::format(
      "Immediate Data with Solicited Event MSN {}: carries the 8 octets{} and no payload; it "
      "consumes the next receive WQE and completes it with that value, waking a consumer "
      "waiting for solicited events (RFC 7306 §4.3)",
      f.h.msn.value(), immediate_value(f));
}

std::string atomic_request_text(const Facts& f) {
  if (const auto* a = f.get<rdmap::AtomicRequest>()) {
    const auto op = static_cast<rdmap::AtomicOp>(a->op);
    std::string what;
    switch (op) {
      case rdmap::AtomicOp::FetchAdd:
        what = fmt::format("add 0x{:x} to", a->add_swap_data);
        break;
      case rdmap::AtomicOp::Swap:
        what = fmt::format("swap 0x{:x} into", a->add_swap_data);
        break;
      case rdmap::AtomicOp::CompareSwap:
        what =
            fmt::format("if it equals 0x{:x}, swap 0x{:x} into", a->compare_data, a->add_swap_data);
        break;
      default:
        what = fmt::format("(undefined atomic operation {}) on", a->op);
        break;
    }
    return fmt::format(
        "Atomic Request {} id {} MSN {} on queue 1: {} the 8 octets at TO 0x{:x} of STag {}, "
        "atomically; the responder returns the original value in an Atomic Response and "
        "counts the request against IRD like a Read (RFC 7306 §4.2.1)",
        rdmap::atomic_op_name(a->op), a->request_id, f.h.msn.value(), what, a->to.value(),
        stag(a->stag));
  }
  return fmt::format(
      "Atomic Request MSN {} on queue 1: an atomic operation on 8 octets of the responder's "
      "memory; it returns the original value in an Atomic Response and counts the request "
      "against IRD like a Read (RFC 7306 §4.2.1)",
      f.h.msn.value());
}

std::string atomic_response_text(const Facts& f) {
  if (const auto* a = f.get<rdmap::AtomicResponse>())
    return fmt::format(
        "Atomic Response MSN {} on queue 3 for request id {}: the target held 0x{:x} before the "
        "operation; this completes the requester's oldest atomic work request, with that value "
        "in its result buffer (RFC 7306 §4.2.2)",
        f.h.msn.value(), a->request_id, a->original_value);
  return fmt::format(
      "Atomic Response MSN {} on queue 3: returns the value the target held before the "
      "operation and completes the requester's oldest atomic work request (RFC 7306 §4.2.2)",
      f.h.msn.value());
}

// A work request this side posted, going out as one RDMAP message (rnic ping/demo --explain).
std::string write_posted(const PostedWork& w) {
  return fmt::format(
      "RDMA Write posted: {} octets go out as tagged DDP segments to TO 0x{:x} of the peer's "
      "STag 0x{:08x}, which the peer must have advertised with remote write access; its RNIC "
      "places them directly, with no receive WQE and no completion on its side, and answers an "
      "STag it does not grant with a Terminate (RFC 5040 §4.3, RFC 5041 §5.2, §7.2)",
      w.length, w.to, w.stag);
}

std::string read_posted(const PostedWork& w) {
  return fmt::format(
      "RDMA Read posted: an RDMA Read Request on queue 1 asks the peer for {} octets from its "
      "STag 0x{:08x} at TO 0x{:x}; it counts against this side's ORD until the last Read "
      "Response has placed the data here, which completes it (RFC 5040 §4.4, §6.3)",
      w.length, w.stag, w.to);
}

std::string send_posted(const PostedWork& w) {
  const auto* info = rdmap::opcode_info(w.opcode);
  return fmt::format(
      "{} posted: {} octets go out as an untagged message on queue 0 with this side's next MSN; "
      "at the peer it consumes the next receive WQE, which must be posted before it arrives, "
      "else the peer ends the stream with a Terminate{}{} (RFC 5040 §4.6{}, RFC 5041 §5.3, §7.2)",
      info->name, w.length,
      info->invalidate
          ? fmt::format("; the peer invalidates its STag 0x{:08x} before completing that receive",
                        w.stag)
          : "",
      info->solicited ? "; the SE bit wakes a consumer waiting for solicited events" : "",
      info->invalidate ? ", §5.4" : "");
}

std::string immediate_posted(const PostedWork& w) {
  return fmt::format(
      "{} posted: an untagged message on queue 0 with no payload carries the immediate value; at "
      "the peer it consumes the next receive WQE and completes it with that value{} (RFC 7306 "
      "§4.3)",
      rdmap::opcode_name(w.opcode),
      rdmap::opcode_info(w.opcode)->solicited
          ? ", and the SE bit wakes a consumer waiting for solicited events"
          : "");
}

std::string atomic_posted(const PostedWork& w) {
  return fmt::format(
      "atomic posted: an Atomic Request on queue 1 operates on the 8 octets at TO 0x{:x} of the "
      "peer's STag 0x{:08x}; it counts against ORD like a Read and completes when the Atomic "
      "Response returns the value the target held before (RFC 7306 §4.2.1, §4.2.2)",
      w.to, w.stag);
}

// RFC 5040 §5 (siw does the same): a Send or Write completes once the LLP (TCP) has taken it.
std::string handed_to_tcp(const PostedWork& w) {
  return fmt::format(
      "the {} work request completes on this side once TCP has taken all of it: an iWARP Send "
      "or Write completes when the LLP accepts it, not when the peer places it, so an error the "
      "peer finds later comes back as a Terminate (RFC 5040 §5)",
      rdmap::opcode_name(w.opcode));
}

std::string read_completed(const PostedWork&) {
  return "the RDMA Read work request completes: the last Read Response segment has placed all "
         "the data it asked for (RFC 5040 §4.5)";
}

std::string atomic_completed(const PostedWork&) {
  return "the atomic work request completes with the original value the Atomic Response "
         "returned (RFC 7306 §4.2.2)";
}

using Sentence = std::string (*)(const Facts&);
using WorkSentence = std::string (*)(const PostedWork&);

// Per RDMAP opcode: what a segment of it means to its receiver, and (for the messages a
// consumer's work request goes out as) what posting it does and what its local completion says.
struct OpcodeSentences {
  Sentence segment;
  WorkSentence posted = nullptr;     // null: the RNIC sends it itself, nobody posts it
  WorkSentence completed = nullptr;  // on the poster's send CQ
};

// Indexed by RDMAP opcode (RFC 5040 §4.2, RFC 7306 §4): one row per opcode.
constexpr std::array<OpcodeSentences, rdmap::kMaxOpcode + 1> kOpcodeSentences{{
    {write_text, write_posted, handed_to_tcp},               // 0x0 RDMA Write
    {read_request_text, read_posted, read_completed},        // 0x1 RDMA Read Request
    {read_response_text},                                    // 0x2 RDMA Read Response
    {send_text, send_posted, handed_to_tcp},                 // 0x3 Send
    {send_inv_text, send_posted, handed_to_tcp},             // 0x4 Send with Invalidate
    {send_se_text, send_posted, handed_to_tcp},              // 0x5 Send with SE
    {send_se_inv_text, send_posted, handed_to_tcp},          // 0x6 Send with SE and Invalidate
    {terminate_text},                                        // 0x7 Terminate
    {immediate_text, immediate_posted, handed_to_tcp},       // 0x8 Immediate Data
    {immediate_se_text, immediate_posted, handed_to_tcp},    // 0x9 Immediate Data with SE
    {atomic_request_text, atomic_posted, atomic_completed},  // 0xA Atomic Request
    {atomic_response_text},                                  // 0xB Atomic Response
}};

// Indexed by Errc (common/wire_error.hpp): the rule each Terminate code reports as broken.
constexpr std::array<std::string_view, 33> kRules{{
    // MPA (layer 2): RFC 5044 §8 codes 1-4, RFC 6581 §7 codes 5-7.
    "the TCP connection under the MPA stream was closed, reset or lost, so the stream cannot go "
    "on (RFC 5044 §8)",
    "an FPDU's CRC did not match the CRC computed over it: the stream is corrupt and is not used "
    "further (RFC 5044 §6.2, §8)",
    "a marker or an FPDU's ULPDU_Length did not agree with where the FPDU lies: FPDU framing is "
    "lost (RFC 5044 §5, §8)",
    "the MPA Request or Reply was malformed or asked for what the other side cannot do (key, "
    "revision, CRC or marker flags) (RFC 5044 §7.1, §8)",
    "the MPA layer hit a local catastrophic error, not caused by this segment (RFC 6581 §7)",
    "the IRD offered does not cover the peer's ORD, so its Read Requests could overrun the read "
    "queue (RFC 6581 §6, §7)",
    "the peer-to-peer RTR types offered and accepted have none in common (RFC 6581 §9.2, §7)",
    // DDP (layer 1): RFC 5041 §7.2.
    "the DDP layer hit a local catastrophic error, not caused by this segment (RFC 5041 §7.2)",
    "a tagged segment named an STag that is not valid at the data sink: unknown, invalidated, "
    "with a wrong key, or without the access it needs (RFC 5041 §7.2)",
    "a tagged segment's TO and length fall outside the buffer its STag registers "
    "(RFC 5041 §7.2)",
    "a tagged segment's STag belongs to another protection domain than this stream's "
    "(RFC 5041 §7.2)",
    "a tagged segment's TO plus its length wraps past 2^64 (RFC 5041 §5.2, §7.2)",
    "a tagged segment carried a DDP version other than 1, so its headers cannot be trusted "
    "(RFC 5041 §5.1, §7.2)",
    "an untagged segment named a queue number RDMAP does not use for its opcode "
    "(RFC 5040 §5.1, RFC 5041 §7.2)",
    "an untagged message arrived with no receive buffer posted for its MSN (RFC 5041 §7.2)",
    "an untagged segment's MSN is not in the range expected on its queue (RFC 5041 §5.3, §7.2)",
    "an untagged segment's MO does not continue its message (RFC 5041 §5.3, §7.2)",
    "an untagged message is longer than the receive buffer it is placed into (RFC 5041 §7.2)",
    "an untagged segment carried a DDP version other than 1, so its headers cannot be trusted "
    "(RFC 5041 §5.1, §7.2)",
    // RDMAP (layer 0): RFC 5040 §7.4.
    "the RDMAP layer hit a local catastrophic error, not caused by this message "
    "(RFC 5040 §7.4.1)",
    "a Read Request (or atomic) named a source STag that is not valid at the responder "
    "(RFC 5040 §7.4.1)",
    "a Read Request's (or atomic's) source range falls outside the buffer its STag registers "
    "(RFC 5040 §7.4.1)",
    "the STag does not grant the remote access the operation needs (remote read for a Read, "
    "remote atomic for an atomic) (RFC 5040 §7.4.1)",
    "the source STag belongs to another protection domain than this stream's (RFC 5040 §7.4.1)",
    "the source TO plus the length to read wraps past 2^64 (RFC 5040 §7.4.1)",
    "a Send with Invalidate named an STag the stream may not invalidate, a protection error "
    "(RFC 5040 §7.4.1)",
    "a remote protection error none of the specific codes names (RFC 5040 §7.4.1)",
    "a segment carried an RDMAP version other than 1, so its headers cannot be trusted "
    "(RFC 5040 §4.1, §7.4.1)",
    "a segment carried an opcode the receiver does not know or does not expect now (a reserved "
    "value, or a response with no request outstanding) (RFC 5040 §7.4.1)",
    "the RDMAP stream broke beyond recovery: a malformed message, or more Read Requests than IRD "
    "allows (RFC 5040 §6.3, §7.4.1)",
    "a catastrophic error that affects the whole RNIC, not one stream (RFC 5040 §7.4.1)",
    "a Send with Invalidate named an STag that cannot be invalidated (RFC 5040 §5.4, §7.4.1)",
    "a remote operation error none of the specific codes names (RFC 5040 §7.4.1)",
}};

static_assert(static_cast<std::size_t>(Errc::RdmapOpUnspecified) + 1 == kRules.size());

std::string yes_no(bool b) {
  return b ? "on" : "off";
}

}  // namespace

std::string explain_reserved_opcode(std::uint8_t opcode) {
  return fmt::format(
      "opcode 0x{:x} is reserved: no RDMAP message (RFC 5040 §4.2, RFC 7306 §4) uses it, so the "
      "receiver does not interpret the segment and ends the stream with a Terminate, RDMAP "
      "remote operation error 'unexpected opcode' (layer 0 etype 2 code 0x06), echoing no "
      "header (RFC 5040 §7.4.1)",
      opcode);
}

std::string explain_segment(const ddp::DdpHeader& h, const SegmentBody* body, std::uint32_t payload,
                            SegmentPlace place) {
  if (h.opcode > rdmap::kMaxOpcode) return explain_reserved_opcode(h.opcode);
  const auto* info = rdmap::opcode_info(h.opcode);
  // A tagged opcode in an untagged segment (or the reverse) breaks RFC 5040 §4.2's table.
  if (info->tagged != h.tagged)
    return fmt::format(
        "{} in {} DDP segment: RFC 5040 §4.2 sends it {}, so the receiver cannot place it and "
        "ends the stream with a Terminate (RFC 5040 §7.4.1)",
        info->name, h.tagged ? "a tagged" : "an untagged", info->tagged ? "tagged" : "untagged");
  return kOpcodeSentences[h.opcode].segment(Facts{h, body, payload, place});
}

std::string explain_posted(const PostedWork& w) {
  const auto* row = w.opcode <= rdmap::kMaxOpcode ? &kOpcodeSentences[w.opcode] : nullptr;
  if (!row || !row->posted)
    return fmt::format(
        "opcode 0x{:x} is no work request a consumer posts: the RNIC sends it itself "
        "(RFC 5040 §4.2)",
        w.opcode);
  return row->posted(w);
}

std::string explain_work_completion(const PostedWork& w, bool ok) {
  // RFC 5040 §4.8: once a Terminate is sent or received the queue pair is in Error, and what
  // was still outstanding completes in error (flushed).
  if (!ok)
    return fmt::format(
        "the {} work request completes in error: the queue pair is in Error (after a Terminate "
        "or a lost connection), so it and every work request still outstanding are flushed "
        "(RFC 5040 §4.8)",
        rdmap::opcode_name(w.opcode));
  const auto* row = w.opcode <= rdmap::kMaxOpcode ? &kOpcodeSentences[w.opcode] : nullptr;
  if (!row || !row->completed) return explain_posted(w);
  return row->completed(w);
}

std::string_view terminate_rule(Errc e) {
  return kRules[static_cast<std::size_t>(e)];
}

std::string explain_terminate_code(std::uint8_t layer, std::uint8_t etype, std::uint8_t ecode) {
  for (std::size_t i = 0; i < kRules.size(); ++i) {
    const auto t = term_code(static_cast<Errc>(i));
    if (static_cast<std::uint8_t>(t.layer) == layer && t.etype == etype && t.ecode == ecode)
      return std::string(kRules[i]);
  }
  // RFC 5040 §7.4.1: EType 0 (local catastrophic) may carry any error code.
  if (etype == 0 && layer <= 2)
    return fmt::format(
        "a local catastrophic error in the {} layer (error code 0x{:02x}), not caused by the "
        "segment (RFC 5040 §7.4.1)",
        layer == 0   ? "RDMAP"
        : layer == 1 ? "DDP"
                     : "MPA",
        ecode);
  return fmt::format(
      "layer {} etype {} code 0x{:02x} is no combination RFC 5040 §7.4.1, RFC 5041 §7.2 or "
      "RFC 5044 §8 defines; the stream ends all the same",
      layer, etype, ecode);
}

std::string explain_mpa_frame(const mpa::MpaFrame& f) {
  std::string s;
  if (f.kind == mpa::FrameKind::Request) {
    s = fmt::format(
        "MPA Request rev {}: the initiator starts the MPA exchange on the new TCP connection; "
        "markers toward it {} (M={}), CRC {} by it (C={}; CRC is used in both directions if "
        "either side sets C)",
        f.revision, f.markers ? "requested" : "not requested", f.markers ? 1 : 0,
        f.crc ? "asked for" : "not asked for", f.crc ? 1 : 0);
    if (f.params) {
      s += fmt::format("; enhanced mode offers IRD {} and ORD {} (RFC 6581 §5)", f.params->ird,
                       f.params->ord);
      if (f.params->peer_to_peer)
        s += fmt::format(", peer-to-peer with RTR {} offered (RFC 6581 §9.2)",
                         mpa::rtr_mask_name(f.params->rtr));
    }
    s += "; the responder answers with an MPA Reply (RFC 5044 §7.1)";
    return s;
  }
  if (f.reject)
    return fmt::format(
        "MPA Reply rev {} with R=1: the responder rejects the connection; no FPDU follows and "
        "the TCP connection is closed (RFC 5044 §7.1)",
        f.revision);
  s = fmt::format(
      "MPA Reply rev {}: the responder accepts; markers toward it {} (M={}), CRC {} (C={}; used "
      "in both directions when either frame sets C); from here on both directions carry FPDUs "
      "(RFC 5044 §7.1)",
      f.revision, yes_no(f.markers), f.markers ? 1 : 0, f.crc ? "on" : "as the Request asked",
      f.crc ? 1 : 0);
  if (f.params) {
    s += fmt::format(
        "; its IRD {} and ORD {}: its ORD may not exceed the initiator's IRD (RFC 6581 §6)",
        f.params->ird, f.params->ord);
    if (f.params->peer_to_peer)
      s += fmt::format(", and the initiator's first FPDU is the {} RTR it selected (RFC 6581 §9.2)",
                       mpa::rtr_mask_name(f.params->rtr));
  }
  return s;
}

std::string explain_error(const WireError& e) {
  const auto t = term_code(e.code);
  return fmt::format(
      "violation: {}; a receiver would send a Terminate with layer {} etype {} code 0x{:02x} and "
      "stop the stream",
      terminate_rule(e.code), static_cast<int>(t.layer), t.etype, t.ecode);
}

std::string RecordExplainer::explain(const Record& r) {
  switch (r.kind) {
    case Record::Kind::MpaFrame:
      return r.mpa ? explain_mpa_frame(*r.mpa) : std::string();
    case Record::Kind::Violation:
      return r.error ? explain_error(*r.error) : std::string();
    case Record::Kind::Note:
      return "a note of the decoder on what the capture shows or lacks, not an iWARP message: "
             "nothing is placed or completed by it";
    case Record::Kind::Fpdu:
      break;
  }
  if (!r.ddp)
    return "an FPDU whose DDP header does not parse (RFC 5041 §5.1): the receiver ends the "
           "stream with a Terminate";
  const auto& h = *r.ddp;
  SegmentPlace place{0, h.last};
  // Only a segment that parsed is counted: one that did not is reported as a violation next.
  if (!r.summary.empty() && h.opcode <= rdmap::kMaxOpcode &&
      r.summary != rdmap::opcode_name(h.opcode)) {
    const Key k{r.flow, static_cast<int>(r.dir), h.tagged, h.tagged ? h.stag.value() : h.qn.value(),
                h.tagged ? h.opcode : h.msn.value()};
    auto it = in_progress_.find(k);
    if (it == in_progress_.end() && in_progress_.size() < kMaxMessagesInProgress)
      it = in_progress_.emplace(k, 0).first;
    // Beyond the limit a new message's segments are not counted (their index is unknown).
    if (it != in_progress_.end()) {
      place.index = ++it->second;
      if (h.last) in_progress_.erase(it);
    }
  }
  std::string s = explain_segment(h, &r.body, r.payload_length, place);
  if (r.markers) s += fmt::format("; {} marker(s) removed from it (RFC 5044 §5)", r.markers);
  // An FPDU that breaks a rule itself (its CRC) carries the error on its own record.
  if (r.error) s += "; " + explain_error(*r.error);
  return s;
}

}  // namespace iwarp::trace
