#include "trace/trace_decoder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <iterator>
#include <memory>
#include <optional>

#include "common/log.hpp"
#include "ddp/segmentation.hpp"
#include "trace/tcp_reassembly.hpp"

namespace iwarp::trace {

namespace {

using mpa::Direction;

class FlowDecoder final : public mpa::ConnectionVisitor {
 public:
  FlowDecoder(std::size_t index, FlowReport& flow, const RecordSink* records)
      : index_(index), flow_(flow), records_(records) {}

  void set_position(std::uint64_t frame, std::uint64_t time_us) {
    frame_ = frame;
    time_us_ = time_us;
  }

  void feed(Direction d, ByteSpan data) { decoder_.feed(d, data, *this); }

  // Only Violation and Note records are handed over: an FPDU's is not made (its summary).
  void violations_only() { violations_only_ = true; }

  const mpa::ConnectionDecoder& decoder() const { return decoder_; }

  void note(Direction d, std::string text) {
    Record r = base(Record::Kind::Note, d, 0, 0);
    r.text = text;
    flow_.notes.push_back(std::move(text));
    push(std::move(r));
  }

 private:
  Record base(Record::Kind k, Direction d, std::uint64_t offset, std::uint32_t length) const {
    Record r;
    r.kind = k;
    r.flow = index_;
    r.frame = frame_;
    r.time_us = time_us_;
    r.dir = d;
    r.offset = offset;
    r.length = length;
    return r;
  }
  void push(Record r) {
    if (records_ && *records_) (*records_)(std::move(r));
  }
  void violation(Direction d, const WireError& e, std::uint64_t offset) {
    log::layer("trace").info("connection {} {} frame {}: {}", index_, mpa::to_string(d), frame_,
                             e.to_string());
    ++flow_.violations;
    Record r = base(Record::Kind::Violation, d, offset, 0);
    r.error = e;
    r.text = e.to_string();
    push(std::move(r));
  }

  void on_mpa_frame(Direction d, const mpa::MpaFrame& f, std::uint64_t offset,
                    std::size_t length) override {
    (d == Direction::FromInitiator ? flow_.request : flow_.reply) = f;
    Record r = base(Record::Kind::MpaFrame, d, offset, static_cast<std::uint32_t>(length));
    r.mpa = f;
    r.summary = mpa::describe(f);
    if (!violations_only_) push(std::move(r));
  }

  void on_negotiated(const mpa::ConnectionParams& p) override { flow_.params = p; }

  void on_fpdu(Direction d, const mpa::Fpdu& f) override {
    ++flow_.fpdus;
    flow_.markers += f.markers;
    switch (f.crc) {
      case mpa::CrcStatus::Good:
        ++flow_.crc_good;
        break;
      case mpa::CrcStatus::Bad:
        ++flow_.crc_bad;
        break;
      case mpa::CrcStatus::NotChecked:
        ++flow_.crc_absent;
        break;
    }
    Record r = base(Record::Kind::Fpdu, d, f.offset, f.wire_length);
    r.ulpdu_length = f.ulpdu_length;
    r.crc = f.crc;
    r.crc_value = f.crc_received;
    r.markers = f.markers;
    if (f.crc == mpa::CrcStatus::Bad) {
      ++flow_.violations;
      r.error = WireError{
          Errc::MpaCrcError, "RFC 5044 §6.2: the CRC must match the FPDU",
          fmt::format("received 0x{:08x}, computed 0x{:08x}", f.crc_received, f.crc_computed),
          f.offset};
    }
    auto seg = ddp::parse_segment(f.ulpdu);
    if (!seg) {
      // The header may still have parsed: count the opcode as tshark would.
      if (auto h = ddp::DdpHeader::decode(f.ulpdu)) {
        r.ddp = *h;
        ++flow_.opcode_counts[std::string(rdmap::opcode_name(h->opcode))];
      }
      WireError e = seg.error();
      e.offset = f.offset;
      r.summary = r.ddp ? std::string(rdmap::opcode_name(r.ddp->opcode)) : "DDP segment";
      if (!violations_only_) push(std::move(r));
      violation(d, e, f.offset);
      return;
    }
    ++flow_.opcode_counts[std::string(rdmap::opcode_name(seg->hdr.opcode))];
    auto check = checkers_[static_cast<int>(d)].check(*seg);
    if (!violations_only_) {
      r.ddp = seg->hdr;
      r.payload_length = static_cast<std::uint32_t>(seg->payload.size());
      r.summary = ddp::describe(*seg);
      r.body = seg->body;
      if (auto* t = std::get_if<rdmap::Terminate>(&seg->body))
        r.siw_terminate_quirk = t->siw_bitfield_quirk;
      push(std::move(r));
    }
    if (!check) {
      WireError e = check.error();
      e.offset = f.offset;
      violation(d, e, f.offset);
    }
  }

  void on_error(Direction d, const WireError& e) override { violation(d, e, e.offset); }

  std::size_t index_;
  FlowReport& flow_;
  const RecordSink* records_;
  bool violations_only_ = false;
  mpa::ConnectionDecoder decoder_{mpa::StreamDecoderOptions{.continue_after_bad_crc = true}};
  ddp::SegmentChecker checkers_[2];
  std::uint64_t frame_ = 0, time_us_ = 0;
};

bool starts_with_key(ByteSpan b, std::string_view key) {
  return b.size() >= key.size() && std::equal(key.begin(), key.end(), b.begin());
}

// One connection being decoded: both directions reassembled (each within `window` octets of
// its in-order point), the client's first octets sniffed for the MPA Request key, and the
// streams fed to the MPA/DDP decoders as they become contiguous. Segments come in capture
// order.
class FlowState {
 public:
  FlowState(std::size_t index, FlowReport& fr, const RecordSink* records, std::size_t window,
            HeldBudget* budget = nullptr)
      : index_(index), fr_(fr), dec_(index, fr, records), window_(window), budget_(budget) {}

  // Where each direction's stream starts, when the caller knows (else: see add()).
  void set_start(int d, TcpSeq start) { reasm_[d].emplace(start, window_, budget_); }

  // Hands over Violation and Note records only (FlowDecoder::violations_only()).
  void violations_only() { dec_.violations_only(); }

  // Direction d's in-order point, once it has had data.
  std::optional<TcpSeq> next(int d) const {
    return reasm_[d] ? std::optional<TcpSeq>(reasm_[d]->next()) : std::nullopt;
  }

  // A segment with payload of direction d. Without a start set, a direction starts after its
  // SYN when the flow saw one, else at the first octet of its first segment with data.
  void add(const TcpFlow& flow, int d, std::uint64_t frame, std::uint64_t time_us, TcpSeq seq,
           ByteSpan payload) {
    if (!reasm_[d]) {
      const bool syn = d == 0 ? flow.saw_syn : flow.saw_syn_ack;
      set_start(d, syn ? (d == 0 ? flow.client_isn : flow.server_isn) + 1 : seq);
    }
    any_data_ = true;
    last_frame_ = frame;
    last_time_ = time_us;
    dec_.set_position(frame, time_us);
    auto& r = *reasm_[d];
    const auto dropped = r.dropped(), by_budget = r.dropped_by_budget();
    r.add(seq, payload, [&](ByteSpan data) { deliver(d, frame, data); });
    if (r.dropped() != dropped && first_drop_[d] == 0) first_drop_[d] = frame;
    if (r.dropped_by_budget() != by_budget && first_budget_drop_[d] == 0)
      first_budget_drop_[d] = frame;
  }

  // What reassembly holds, with the per-piece overhead (TcpReassembler::held_cost()).
  std::size_t held_cost() const {
    std::size_t n = head_.size();
    for (const auto& r : reasm_)
      if (r) n += r->held_cost();
    return n;
  }

  // The verdict and how each direction ended, with their records (the capture's problems of
  // the flow are not added: see add_problems()).
  void finish(const TcpFlow& flow) {
    fr_.initiator = flow.client;
    fr_.responder = flow.server;
    if (!any_data_) {
      fr_.verdict = "no iWARP: no data exchanged";
      return;
    }
    for (int d = 0; d < 2; ++d) {
      if (!reasm_[d] || reasm_[d]->dropped() == 0) continue;
      fr_.notes.push_back(fmt::format(
          "{}: {} octet(s) of {} segment(s) arrived more than the reassembly window ({} octets) "
          "beyond the in-order point and were dropped, as if not captured (first at frame {})",
          mpa::to_string(static_cast<Direction>(d)), reasm_[d]->dropped(),
          reasm_[d]->dropped_segments(), window_, first_drop_[d]));
    }
    for (int d = 0; d < 2; ++d) {
      if (!reasm_[d] || reasm_[d]->dropped_by_budget() == 0) continue;
      fr_.notes.push_back(fmt::format(
          "{}: {} octet(s) of {} segment(s) arrived while the connections together held the "
          "total reassembly limit ({} octets) and were dropped, as if not captured (first at "
          "frame {})",
          mpa::to_string(static_cast<Direction>(d)), reasm_[d]->dropped_by_budget(),
          reasm_[d]->dropped_by_budget_segments(), budget_ ? budget_->limit : 0,
          first_budget_drop_[d]));
    }
    if (sniff_ != Sniff::Iwarp) {
      if (why_not_.empty()) why_not_ = "fewer than 16 octets from the client";
      if (!flow.saw_syn && sniff_ == Sniff::NotIwarp)
        why_not_ += "; the capture starts mid-connection, so an MPA exchange may have been missed";
      fr_.verdict = "no iWARP: " + why_not_;
      log::layer("trace").debug("connection {}: {}", index_, fr_.verdict);
      return;
    }
    fr_.iwarp = true;
    fr_.verdict = "iWARP";

    // How each direction ended.
    dec_.set_position(last_frame_, last_time_);
    for (int d = 0; d < 2; ++d) {
      auto dir = static_cast<Direction>(d);
      const auto& s = dec_.decoder().stream(dir);
      if (reasm_[d] && reasm_[d]->held_bytes() > 0)
        dec_.note(
            dir, fmt::format("{}: the octets at stream offset {} never arrived ({} later "
                             "octets held beyond the gap)",
                             mpa::to_string(dir), reasm_[d]->delivered(), reasm_[d]->held_bytes()));
      if (s.pending() > 0 && s.state() != mpa::StreamDecoder::State::Failed)
        dec_.note(
            dir, fmt::format(
                     "{}: capture ends inside a {} ({} octets of it captured)", mpa::to_string(dir),
                     s.state() == mpa::StreamDecoder::State::ExpectFrame ? "MPA frame" : "FPDU",
                     s.pending()));
    }
    if (!fr_.reply)
      dec_.note(Direction::FromResponder, "MPA Reply not in the capture: exchange cut short");
    else if (fr_.reply->reject)
      dec_.note(Direction::FromResponder, "connection rejected by the responder (MPA Reply R=1)");
    log::layer("trace").debug("connection {} {} -> {}: iWARP, {} FPDUs, {} violations", index_,
                              flow.client.to_string(), flow.server.to_string(), fr_.fpdus,
                              fr_.violations);
  }

 private:
  void deliver(int d, std::uint64_t frame, ByteSpan data) {
    if (sniff_ == Sniff::NotIwarp) return;
    if (sniff_ == Sniff::Unknown) {
      if (d == 1) {
        sniff_ = Sniff::NotIwarp;
        why_not_ = fmt::format("the server spoke first (frame {})", frame);
        return;
      }
      head_.insert(head_.end(), data.begin(), data.end());
      if (head_.size() < mpa::kKeySize) return;
      if (!starts_with_key(head_, mpa::kRequestKey)) {
        sniff_ = Sniff::NotIwarp;
        why_not_ = fmt::format("the client's stream does not start with \"{}\"", mpa::kRequestKey);
        head_ = Bytes();
        return;
      }
      sniff_ = Sniff::Iwarp;
      dec_.feed(mpa::Direction::FromInitiator, head_);
      head_ = Bytes();
      return;
    }
    dec_.feed(static_cast<Direction>(d), data);
  }

  std::size_t index_;
  FlowReport& fr_;
  FlowDecoder dec_;
  std::size_t window_;
  HeldBudget* budget_;
  std::optional<TcpReassembler> reasm_[2];
  std::uint64_t first_drop_[2] = {0, 0}, first_budget_drop_[2] = {0, 0};
  enum class Sniff { Unknown, Iwarp, NotIwarp } sniff_ = Sniff::Unknown;
  Bytes head_;  // the client's first octets, until the MPA key can be checked
  std::string why_not_;
  bool any_data_ = false;
  std::uint64_t last_frame_ = 0, last_time_ = 0;
};

// The capture's problems of a flow lead its notes.
void add_problems(FlowReport& fr, const TcpFlow& flow) {
  fr.notes.insert(fr.notes.begin(), flow.problems.begin(), flow.problems.end());
}

void decode_flow(std::size_t index, const TcpFlow& flow, FlowReport& fr, const RecordSink* records,
                 PayloadReader* file, std::size_t window) {
  FlowState st(index, fr, records, window);
  for (int d = 0; d < 2; ++d) st.set_start(d, stream_start(flow, d));
  // Merge both directions in capture order.
  struct Ref {
    const TcpSegment* seg;
    int dir;
  };
  std::vector<Ref> order;
  for (int d = 0; d < 2; ++d)
    for (const auto& s : flow.dir[d])
      if (s.size() > 0) order.push_back({&s, d});
  std::stable_sort(order.begin(), order.end(),
                   [](const Ref& a, const Ref& b) { return a.seg->frame < b.seg->frame; });
  for (const auto& ref : order)
    st.add(flow, ref.dir, ref.seg->frame, ref.seg->time_us, ref.seg->seq,
           file ? file->payload(*ref.seg) : ByteSpan(ref.seg->payload));
  st.finish(flow);
  add_problems(fr, flow);
}

// scan_capture's sink for decode_file: each flow's state, fed as the segments are read, and
// finished (its closing records emitted, its reassembly freed) as soon as both directions are
// over (see ended()), so that what is held at a time is that of the open connections only: at
// most 2 x window each, and the total limit across them.
class StreamingDecoder final : public SegmentSink {
 public:
  StreamingDecoder(DecodeReport& rep, const RecordSink& records, const StreamOptions& opts,
                   StartOf start_of = {}, bool violations_only = false)
      : rep_(rep),
        records_(records),
        window_(opts.window),
        start_of_(std::move(start_of)),
        violations_only_(violations_only),
        flows_(rep.flows) {
    budget_.limit = opts.total_window;
  }

  void on_segment(std::size_t index, TcpFlow& flow, int dir, const SegmentView& s) override {
    while (slots_.size() <= index) {
      flows_.emplace_back();
      slots_.emplace_back();
    }
    auto& slot = slots_[index];
    if (slot.finished) {
      late(slot, dir, s);
      return;
    }
    if (s.rst) slot.rst[dir] = true;
    if (s.fin && !slot.fin[dir])
      slot.fin[dir] = s.seq + static_cast<std::uint32_t>(s.payload.size());
    if (!s.payload.empty()) {
      auto& st = slot.state;
      if (!st) st = make_state(index);
      held_ -= st->held_cost();
      st->add(flow, dir, s.frame, s.time_us, s.seq, s.payload);
      held_ += st->held_cost();
      rep_.max_held = std::max<std::uint64_t>(rep_.max_held, held_);
    }
    if (ended(slot, flow, 0) && ended(slot, flow, 1)) close(index, flow);
  }

  void finish(const Capture& cap) {
    flows_.resize(cap.flows.size());
    slots_.resize(cap.flows.size());
    for (std::size_t i = 0; i < cap.flows.size(); ++i) {
      if (!slots_[i].finished) close(i, cap.flows[i]);
      add_problems(flows_[i], cap.flows[i]);
      const auto& slot = slots_[i];
      if (slot.late_octets == 0) continue;
      Record r;
      r.kind = Record::Kind::Note;
      r.flow = i;
      r.frame = slot.late_frame;
      r.time_us = slot.late_time;
      r.dir = static_cast<Direction>(slot.late_dir);
      r.text = fmt::format(
          "{} octet(s) of data arrived after both directions had ended (RST, or FIN with every "
          "octet before it) (first at frame {}); not decoded",
          slot.late_octets, slot.late_frame);
      flows_[i].notes.push_back(r.text);
      if (records_) records_(std::move(r));
    }
    slots_.clear();
  }

 private:
  struct Slot {
    std::unique_ptr<FlowState> state;  // until finished
    bool rst[2] = {false, false};      // per direction: RST seen
    std::optional<TcpSeq> fin[2];      // per direction: the sequence number of its FIN
    bool finished = false;
    // After finishing: each direction's in-order point, and the data that came later.
    std::optional<TcpSeq> next[2];
    std::uint64_t late_octets = 0, late_frame = 0, late_time = 0;
    int late_dir = 0;
  };

  // Direction d is over: it sent RST (the connection is aborted, RFC 793 §3.4: what the
  // capture still shows of it reaches no one), or it sent FIN and every octet before the FIN
  // has been delivered (RFC 793 §3.5: nothing follows a FIN but retransmissions; a capture
  // may show the last segments after the FIN, so a gap before it keeps the direction open).
  static bool ended(const Slot& slot, const TcpFlow& flow, int d) {
    if (slot.rst[d]) return true;
    if (!slot.fin[d]) return false;
    if (slot.state)
      if (const auto next = slot.state->next(d)) return *next - *slot.fin[d] >= 0;
    // No data yet in that direction: over if the FIN is its first sequence number after the
    // SYN (or when there is no SYN to tell).
    const bool syn = d == 0 ? flow.saw_syn : flow.saw_syn_ack;
    return !syn || *slot.fin[d] == (d == 0 ? flow.client_isn : flow.server_isn) + 1;
  }

  void close(std::size_t index, const TcpFlow& flow) {
    auto& slot = slots_[index];
    auto& st = slot.state;
    if (!st) st = make_state(index);
    held_ -= st->held_cost();
    st->finish(flow);
    for (int d = 0; d < 2; ++d) slot.next[d] = st->next(d);
    st.reset();
    slot.finished = true;
  }

  // A flow's decoding state, its directions' starts set where the caller knows them.
  std::unique_ptr<FlowState> make_state(std::size_t index) {
    auto st = std::make_unique<FlowState>(index, flows_[index], &records_, window_, &budget_);
    if (violations_only_) st->violations_only();
    if (start_of_)
      for (int d = 0; d < 2; ++d)
        if (const auto at = start_of_(index, d)) st->set_start(d, *at);
    return st;
  }

  // Data of a finished flow: octets up to its in-order point are retransmissions (ignored, as
  // reassembly would); beyond it they are counted for a note.
  static void late(Slot& slot, int dir, const SegmentView& s) {
    if (s.payload.empty()) return;
    std::uint64_t n = s.payload.size();
    if (slot.next[dir]) {
      const std::int64_t end = static_cast<std::int64_t>(s.seq - *slot.next[dir]) +
                               static_cast<std::int64_t>(s.payload.size());
      if (end <= 0) return;
      n = std::min<std::uint64_t>(n, static_cast<std::uint64_t>(end));
    }
    if (slot.late_octets == 0) {
      slot.late_frame = s.frame;
      slot.late_time = s.time_us;
      slot.late_dir = dir;
    }
    slot.late_octets += n;
  }

  DecodeReport& rep_;
  const RecordSink& records_;
  std::size_t window_;
  StartOf start_of_;
  bool violations_only_;
  HeldBudget budget_;              // shared by every flow's reassemblers
  std::deque<FlowReport>& flows_;  // rep_.flows, by flow index (a FlowState refers to one)
  std::deque<Slot> slots_;         // by flow index
  std::size_t held_ = 0;           // held cost, all flows
};

}  // namespace

FileDecoder::FileDecoder(DecodeReport& rep, const RecordSink& on_record, const StreamOptions& opts,
                         StartOf start_of, bool violations_only)
    : on_record_(on_record) {
  auto dec = std::make_unique<StreamingDecoder>(rep, on_record_, opts, std::move(start_of),
                                                violations_only);
  finish_ = [d = dec.get()](const Capture& cap) { d->finish(cap); };
  impl_ = std::move(dec);
}

FileDecoder::~FileDecoder() = default;

void FileDecoder::on_segment(std::size_t index, TcpFlow& flow, int dir, const SegmentView& s) {
  impl_->on_segment(index, flow, dir, s);
}

void FileDecoder::finish(const Capture& cap) {
  finish_(cap);
}

std::uint64_t DecodeReport::violations() const {
  std::uint64_t n = 0;
  for (const auto& f : flows) n += f.violations;
  return n;
}

std::uint64_t DecodeReport::iwarp_flows() const {
  return static_cast<std::uint64_t>(
      std::count_if(flows.begin(), flows.end(), [](const FlowReport& f) { return f.iwarp; }));
}

DecodeReport decode_capture(const Capture& cap, const DecodeOptions& opts) {
  DecodeReport rep;
  rep.path = cap.path;
  rep.link_name = cap.link_name;
  rep.frames = cap.frames;
  rep.problems = cap.problems;
  rep.flows.resize(cap.flows.size());
  RecordSink keep;
  if (opts.keep_records) keep = [&](Record&& r) { rep.records.push_back(std::move(r)); };
  if (opts.keep_violations && !opts.keep_records)
    keep = [&](Record&& r) {
      if (r.kind == Record::Kind::Violation) rep.records.push_back(std::move(r));
    };
  std::optional<PayloadReader> file;
  if (cap.file) file.emplace(cap.file);
  for (std::size_t i = 0; i < cap.flows.size(); ++i)
    decode_flow(i, cap.flows[i], rep.flows[i], &keep, file ? &*file : nullptr, opts.window);
  return rep;
}

std::expected<DecodeReport, std::string> decode_file(const std::string& path,
                                                     const RecordSink& on_record,
                                                     const StreamOptions& opts) {
  DecodeReport rep;
  StreamingDecoder dec(rep, on_record, opts);
  auto cap = scan_capture(path, dec);
  if (!cap) return std::unexpected(cap.error());
  dec.finish(*cap);
  rep.path = cap->path;
  rep.link_name = cap->link_name;
  rep.frames = cap->frames;
  rep.problems = cap->problems;
  return rep;
}

std::string format_record(const Record& r, std::uint64_t t0_us) {
  const double t = static_cast<double>(r.time_us - std::min(r.time_us, t0_us)) / 1e6;
  const char* dir = r.dir == Direction::FromInitiator ? "I>R" : "R>I";
  std::string head =
      fmt::format("{:>6} {:>10.6f} c{} {} @{:<8}", r.frame, t, r.flow, dir, r.offset);
  switch (r.kind) {
    case Record::Kind::MpaFrame:
      return fmt::format("{} {} ({} octets)", head, r.summary, r.length);
    case Record::Kind::Fpdu: {
      std::string s = fmt::format("{} FPDU {} | ulpdu {} wire {} crc {}", head, r.summary,
                                  r.ulpdu_length, r.length, mpa::to_string(r.crc));
      if (r.crc != mpa::CrcStatus::NotChecked) s += fmt::format(" 0x{:08x}", r.crc_value);
      if (r.markers) s += fmt::format(" markers {}", r.markers);
      return s;
    }
    case Record::Kind::Violation:
      return fmt::format("{} VIOLATION {}", head, r.text);
    case Record::Kind::Note:
      return fmt::format("{} NOTE {}", head, r.text);
  }
  return head;
}

}  // namespace iwarp::trace
