#include "trace/trace_decoder.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common/log.hpp"
#include "ddp/segmentation.hpp"
#include "trace/tcp_reassembly.hpp"

namespace iwarp::trace {

namespace {

using mpa::Direction;

class FlowDecoder final : public mpa::ConnectionVisitor {
 public:
  FlowDecoder(std::size_t index, FlowReport& flow, std::vector<Record>* records)
      : index_(index), flow_(flow), records_(records) {}

  void set_position(std::uint64_t frame, std::uint64_t time_us) {
    frame_ = frame;
    time_us_ = time_us;
  }

  void feed(Direction d, ByteSpan data) { decoder_.feed(d, data, *this); }

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
    if (records_) records_->push_back(std::move(r));
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
    push(std::move(r));
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
      push(std::move(r));
      violation(d, e, f.offset);
      return;
    }
    r.ddp = seg->hdr;
    r.payload_length = static_cast<std::uint32_t>(seg->payload.size());
    r.summary = ddp::describe(*seg);
    if (auto* t = std::get_if<rdmap::Terminate>(&seg->body))
      r.siw_terminate_quirk = t->siw_bitfield_quirk;
    ++flow_.opcode_counts[std::string(rdmap::opcode_name(seg->hdr.opcode))];
    auto check = checkers_[static_cast<int>(d)].check(*seg);
    push(std::move(r));
    if (!check) {
      WireError e = check.error();
      e.offset = f.offset;
      violation(d, e, f.offset);
    }
  }

  void on_error(Direction d, const WireError& e) override { violation(d, e, e.offset); }

  std::size_t index_;
  FlowReport& flow_;
  std::vector<Record>* records_;
  mpa::ConnectionDecoder decoder_{mpa::StreamDecoderOptions{.continue_after_bad_crc = true}};
  ddp::SegmentChecker checkers_[2];
  std::uint64_t frame_ = 0, time_us_ = 0;
};

bool starts_with_key(ByteSpan b, std::string_view key) {
  return b.size() >= key.size() && std::equal(key.begin(), key.end(), b.begin());
}

void decode_flow(std::size_t index, const TcpFlow& flow, FlowReport& fr,
                 std::vector<Record>* records) {
  fr.initiator = flow.client;
  fr.responder = flow.server;
  fr.notes = flow.problems;

  TcpReassembler reasm[2] = {TcpReassembler(stream_start(flow, 0)),
                             TcpReassembler(stream_start(flow, 1))};
  // Merge both directions in capture order.
  struct Ref {
    const TcpSegment* seg;
    int dir;
  };
  std::vector<Ref> order;
  for (int d = 0; d < 2; ++d)
    for (const auto& s : flow.dir[d])
      if (!s.payload.empty()) order.push_back({&s, d});
  std::stable_sort(order.begin(), order.end(),
                   [](const Ref& a, const Ref& b) { return a.seg->frame < b.seg->frame; });
  if (order.empty()) {
    fr.verdict = "no iWARP: no data exchanged";
    return;
  }

  FlowDecoder dec(index, fr, records);
  enum class Sniff { Unknown, Iwarp, NotIwarp } sniff = Sniff::Unknown;
  Bytes head;  // the client's first octets, until the MPA key can be checked
  std::string why_not;

  for (const auto& ref : order) {
    const int d = ref.dir;
    dec.set_position(ref.seg->frame, ref.seg->time_us);
    reasm[d].add(ref.seg->seq, ref.seg->payload, [&](ByteSpan data) {
      if (sniff == Sniff::NotIwarp) return;
      if (sniff == Sniff::Unknown) {
        if (d == 1) {
          sniff = Sniff::NotIwarp;
          why_not = fmt::format("the server spoke first (frame {})", ref.seg->frame);
          return;
        }
        head.insert(head.end(), data.begin(), data.end());
        if (head.size() < mpa::kKeySize) return;
        if (!starts_with_key(head, mpa::kRequestKey)) {
          sniff = Sniff::NotIwarp;
          why_not = fmt::format("the client's stream does not start with \"{}\"", mpa::kRequestKey);
          return;
        }
        sniff = Sniff::Iwarp;
        dec.feed(mpa::Direction::FromInitiator, head);
        return;
      }
      dec.feed(static_cast<Direction>(d), data);
    });
  }

  if (sniff != Sniff::Iwarp) {
    if (why_not.empty()) why_not = "fewer than 16 octets from the client";
    if (!flow.saw_syn && sniff == Sniff::NotIwarp)
      why_not += "; the capture starts mid-connection, so an MPA exchange may have been missed";
    fr.verdict = "no iWARP: " + why_not;
    log::layer("trace").debug("connection {}: {}", index, fr.verdict);
    return;
  }
  fr.iwarp = true;
  fr.verdict = "iWARP";

  // How each direction ended.
  const auto last = order.back().seg;
  dec.set_position(last->frame, last->time_us);
  for (int d = 0; d < 2; ++d) {
    auto dir = static_cast<Direction>(d);
    const auto& s = dec.decoder().stream(dir);
    if (reasm[d].held_bytes() > 0)
      dec.note(dir, fmt::format("{}: the octets at stream offset {} never arrived ({} later "
                                "octets held beyond the gap)",
                                mpa::to_string(dir), reasm[d].delivered(), reasm[d].held_bytes()));
    if (s.pending() > 0 && s.state() != mpa::StreamDecoder::State::Failed)
      dec.note(dir,
               fmt::format(
                   "{}: capture ends inside a {} ({} octets of it captured)", mpa::to_string(dir),
                   s.state() == mpa::StreamDecoder::State::ExpectFrame ? "MPA frame" : "FPDU",
                   s.pending()));
  }
  if (!fr.reply)
    dec.note(Direction::FromResponder, "MPA Reply not in the capture: exchange cut short");
  else if (fr.reply->reject)
    dec.note(Direction::FromResponder, "connection rejected by the responder (MPA Reply R=1)");
  log::layer("trace").debug("connection {} {} -> {}: iWARP, {} FPDUs, {} violations", index,
                            flow.client.to_string(), flow.server.to_string(), fr.fpdus,
                            fr.violations);
}

}  // namespace

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
  for (std::size_t i = 0; i < cap.flows.size(); ++i)
    decode_flow(i, cap.flows[i], rep.flows[i], opts.keep_records ? &rep.records : nullptr);
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
