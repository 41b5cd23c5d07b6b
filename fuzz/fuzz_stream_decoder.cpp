// Target 1: the MPA stream decoder (mpa/stream_decoder.hpp), both directions of a connection
// (mpa/connection_decoder.hpp) and, against them, the receiver's FpduReader
// (mpa/fpdu_reader.hpp).
//
// Input: octet 0 chooses the mode and framing, octets 1-2 seed the chunking, the rest is wire.
//   octet 0 bit 0  CRC on            bit 1  markers on (toward the initiator in connection mode)
//           bit 2  connection mode   bit 3  continue after a bad CRC (inspection tools)
//           bit 5  markers toward the responder (connection mode)
//   stream mode:     the rest is one direction in Full Operation (markers counted from octet 0)
//   connection mode: u16 L, then L octets from the initiator and the rest from the responder;
//                    when a direction starts with an MPA frame its M and C flags are replaced
//                    by the bits of octet 0, so the framing is chosen like in stream mode.
//
// Checks: decoding the input fed at once and fed in random chunks gives the same events (per
// direction); FPDUs tile the stream from offset 0 with the lengths RFC 5044 §4-§5 give; an FPDU
// re-encoded by FpduEncoder at its offset is the same octets; the FpduReader (the receive path
// of a queue pair) finds the same FPDUs, CRC verdicts and first error as the decoder.
#include <cstdint>
#include <string>
#include <vector>

#include "ddp/segment.hpp"
#include "ddp/segmentation.hpp"
#include "fuzz/fuzz_support.hpp"
#include "mpa/connection_decoder.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/fpdu_reader.hpp"
#include "mpa/stream_decoder.hpp"

using namespace iwarp;
using namespace iwarp::mpa;
using iwarp::fuzz::Input;
using iwarp::fuzz::Rng;

namespace {

struct Event {
  int kind = 0;  // 0 frame, 1 FPDU, 2 error, 3 negotiated
  int dir = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t hash = 0;  // ULPDU octets, CRC status and markers; frame fields; error code
  friend bool operator==(const Event&, const Event&) = default;
};

std::string show(const std::vector<Event>& v) {
  std::string s;
  for (const auto& e : v)
    s += "  kind " + std::to_string(e.kind) + " dir " + std::to_string(e.dir) + " @" +
         std::to_string(e.offset) + " len " + std::to_string(e.length) + " h " +
         std::to_string(e.hash) + "\n";
  return s;
}

struct Fpdu1 {
  std::uint64_t offset = 0;
  std::uint32_t wire = 0;
  Bytes ulpdu;
  CrcStatus crc = CrcStatus::NotChecked;
};

class StreamRecorder final : public StreamVisitor {
 public:
  std::vector<Event> events;
  std::vector<Fpdu1> fpdus;
  std::optional<WireError> error;
  void on_mpa_frame(const MpaFrame& f, std::uint64_t offset, std::size_t length) override {
    events.push_back({0, 0, offset, length, fuzz::fnv(fuzz::kFnvBasis, f.encode())});
  }
  void on_fpdu(const Fpdu& f) override {
    FUZZ_CHECK(f.ulpdu.size() == f.ulpdu_length, "ULPDU span %zu, length field %u", f.ulpdu.size(),
               f.ulpdu_length);
    std::uint64_t h = fuzz::fnv(fuzz::kFnvBasis, f.ulpdu);
    h = fuzz::fnv_u64(h, static_cast<std::uint64_t>(f.crc) << 32 | f.markers);
    h = fuzz::fnv_u64(h, f.crc_received);
    events.push_back({1, 0, f.offset, f.wire_length, h});
    fpdus.push_back({f.offset, f.wire_length, Bytes(f.ulpdu.begin(), f.ulpdu.end()), f.crc});
  }
  void on_error(const WireError& e) override {
    FUZZ_CHECK(!error, "a second error after the stream failed: %s", e.to_string().c_str());
    error = e;
    events.push_back({2, 0, e.offset, 0, static_cast<std::uint64_t>(e.code)});
  }
};

class ConnRecorder final : public ConnectionVisitor {
 public:
  std::vector<Event> events[2];
  int negotiated = 0;
  bool errored[2] = {false, false};
  void on_mpa_frame(Direction d, const MpaFrame& f, std::uint64_t offset,
                    std::size_t length) override {
    events[int(d)].push_back({0, int(d), offset, length, fuzz::fnv(fuzz::kFnvBasis, f.encode())});
  }
  void on_negotiated(const ConnectionParams&) override { ++negotiated; }
  void on_fpdu(Direction d, const Fpdu& f) override {
    FUZZ_CHECK(!errored[int(d)], "an FPDU after the direction failed");
    std::uint64_t h = fuzz::fnv(fuzz::kFnvBasis, f.ulpdu);
    h = fuzz::fnv_u64(h, static_cast<std::uint64_t>(f.crc) << 32 | f.markers);
    events[int(d)].push_back({1, int(d), f.offset, f.wire_length, h});
  }
  void on_error(Direction d, const WireError& e) override {
    FUZZ_CHECK(!errored[int(d)], "a second error on one direction: %s", e.to_string().c_str());
    errored[int(d)] = true;
    events[int(d)].push_back({2, int(d), e.offset, 0, static_cast<std::uint64_t>(e.code)});
  }
};

// The FpduReader's view: whole FPDUs (head + placed rest), trailers, the first error.
class ReaderSink final : public FpduSink {
 public:
  explicit ReaderSink(Rng& rng) : rng_(rng) {}
  std::vector<Fpdu1> fpdus;
  std::vector<bool> bytes_known;  // false when the rest was discarded
  std::optional<WireError> error;
  Bytes cur;
  Bytes rest;
  bool discard = false;

  MutableByteSpan on_fpdu_head(const FpduHead& h) override {
    FUZZ_CHECK(!error, "an FPDU head after the reader failed");
    FUZZ_CHECK(h.head.size() == std::min<std::size_t>(h.ulpdu_length, kFpduHeadSize),
               "head of %zu octets for ULPDU_Length %u", h.head.size(), h.ulpdu_length);
    cur.assign(h.head.begin(), h.head.end());
    head_offset_ = h.offset;
    const std::size_t need = h.ulpdu_length - h.head.size();
    discard = rng_.below(8) == 0;
    rest.assign(need, 0xEE);
    if (discard || need == 0) return {};
    return MutableByteSpan(rest);
  }
  void on_fpdu_end(const FpduTrailer& t) override {
    FUZZ_CHECK(t.offset == head_offset_, "trailer @%llu for the FPDU @%llu",
               (unsigned long long)t.offset, (unsigned long long)head_offset_);
    Fpdu1 f;
    f.offset = t.offset;
    f.wire = t.wire_length;
    f.crc = t.crc;
    f.ulpdu = cur;
    f.ulpdu.insert(f.ulpdu.end(), rest.begin(), rest.end());
    fpdus.push_back(std::move(f));
    bytes_known.push_back(!discard);
  }
  void on_framing_error(const WireError& e) override {
    FUZZ_CHECK(!error, "a second reader error: %s", e.to_string().c_str());
    error = e;
  }

 private:
  Rng& rng_;
  std::uint64_t head_offset_ = 0;
};

std::vector<std::size_t> chunks(std::size_t total, Rng& rng) {
  std::vector<std::size_t> out;
  std::size_t left = total;
  while (left > 0) {
    std::size_t n;
    switch (rng.below(4)) {
      case 0:
        n = 1;
        break;
      case 1:
        n = 1 + rng.below(8);
        break;
      case 2:
        n = 1 + rng.below(600);
        break;
      default:
        n = left;
    }
    n = std::min(n, left);
    out.push_back(n);
    left -= n;
  }
  return out;
}

void check_tiling(const std::vector<Fpdu1>& fpdus, FramingConfig cfg) {
  std::uint64_t at = 0;
  for (const auto& f : fpdus) {
    FUZZ_CHECK(f.offset == at, "FPDU @%llu where the previous one ended @%llu",
               (unsigned long long)f.offset, (unsigned long long)at);
    const std::size_t logical = fpdu_length(f.ulpdu.size());
    const std::size_t wire = cfg.markers ? marked_length(at, logical).wire : logical;
    FUZZ_CHECK(f.wire == wire, "FPDU @%llu: wire length %u, RFC 5044 gives %zu",
               (unsigned long long)at, f.wire, wire);
    at += f.wire;
  }
}

// Every FPDU re-encoded at its offset is the same octets (when its pad is zero and its CRC
// field is what the encoder writes).
void check_reencoding(const std::vector<Fpdu1>& fpdus, FramingConfig cfg, ByteSpan wire) {
  for (const auto& f : fpdus) {
    FpduEncoder enc(cfg, f.offset);
    Bytes out;
    auto r = enc.encode(f.ulpdu, out);
    if (!r) {
      // Only an FPDU that markers push past 64 KiB cannot be encoded.
      FUZZ_CHECK(cfg.markers, "a decoded FPDU cannot be encoded: %s",
                 r.error().to_string().c_str());
      continue;
    }
    FUZZ_CHECK(out.size() == f.wire, "re-encoded %zu octets, decoded %u", out.size(), f.wire);
    // What the encoder writes: the wire image with zero pad octets and, without CRC, a zero
    // CRC field. Logical octet j of the FPDU is wire octet j + markers before it.
    Bytes expect(wire.begin() + static_cast<std::ptrdiff_t>(f.offset),
                 wire.begin() + static_cast<std::ptrdiff_t>(f.offset + f.wire));
    const std::size_t pad = pad_length(f.ulpdu.size());
    bool pad_was_zero = true;
    for (std::size_t j = kUlpduLengthSize + f.ulpdu.size();
         j < kUlpduLengthSize + f.ulpdu.size() + pad; ++j) {
      const std::size_t w =
          cfg.markers ? j + kMarkerSize * marked_length(f.offset, j + 1).markers : j;
      pad_was_zero &= expect[w] == 0;
      expect[w] = 0;
    }
    std::size_t compare = expect.size();
    if (!cfg.crc)
      std::fill(expect.end() - kCrcSize, expect.end(), 0);
    else if (f.crc != CrcStatus::Good || !pad_was_zero)
      compare -= kCrcSize;  // the encoder's CRC covers zero pad: only the rest must agree
    FUZZ_CHECK(
        std::equal(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(compare), expect.begin()),
        "FPDU @%llu (wire %u, markers %d) re-encoded differs from the wire",
        (unsigned long long)f.offset, f.wire, int(cfg.markers));
  }
}

// Each ULPDU as a DDP segment (ddp/segment.hpp): one that parses encodes back to the same
// octets (Terminates aside: they are always written in the RFC layout, and siw's is read
// too), and the cross-segment checks take any sequence.
void check_ddp_segments(const std::vector<Fpdu1>& fpdus) {
  ddp::SegmentChecker checker;
  for (const auto& f : fpdus) {
    auto seg = ddp::parse_segment(f.ulpdu);
    if (!seg) continue;
    (void)ddp::describe(*seg);
    (void)checker.check(*seg);
    if (seg->hdr.op() == rdmap::Opcode::Terminate) continue;
    Bytes again;
    ddp::encode_segment(*seg, again);
    FUZZ_CHECK(again == f.ulpdu, "DDP segment @%llu (%s) encodes to other octets",
               (unsigned long long)f.offset, ddp::describe(*seg).c_str());
  }
}

// The receive path's FpduReader on the same octets, fed in other chunks and sometimes straight
// into its placement window, finds the same FPDUs, CRC verdicts and first error as the decoder.
void check_reader_agrees(FramingConfig cfg, Rng& rng, ByteSpan wire, const StreamRecorder& a,
                         const StreamDecoder& whole) {
  FpduReader reader(cfg);
  ReaderSink sink(rng);
  std::size_t pos = 0;
  for (auto n : chunks(wire.size(), rng)) {
    ByteSpan in = wire.subspan(pos, n);
    pos += n;
    while (!in.empty() && !reader.failed()) {
      // Sometimes as the live transport does: straight into the placement window.
      auto win = reader.direct_window();
      if (!win.empty() && rng.below(2) == 0) {
        const std::size_t k = std::min(win.size(), in.size());
        std::memcpy(win.data(), in.data(), k);
        reader.commit_direct(k, sink);
        in = in.subspan(k);
        continue;
      }
      reader.feed(in, sink);
      break;
    }
  }
  // Only whole FPDUs with a good (or unchecked) CRC count on both sides.
  std::vector<Fpdu1> rgood;
  for (std::size_t i = 0; i < sink.fpdus.size(); ++i)
    if (sink.fpdus[i].crc != CrcStatus::Bad) rgood.push_back(sink.fpdus[i]);
  const bool stream_failed = a.error.has_value();
  const bool reader_failed = sink.error.has_value();
  if (stream_failed) {
    FUZZ_CHECK(reader_failed, "the decoder failed (%s) where the FpduReader did not",
               a.error->to_string().c_str());
    FUZZ_CHECK(a.error->code == sink.error->code, "decoder: %s\nreader: %s",
               a.error->to_string().c_str(), sink.error->to_string().c_str());
    FUZZ_CHECK(rgood.size() == a.fpdus.size(), "decoder %zu FPDUs before its error, reader %zu",
               a.fpdus.size(), rgood.size());
  } else if (reader_failed) {
    // The reader sees a bad marker as soon as it arrives; the decoder only once the whole
    // FPDU is in, so it must still be waiting for it.
    FUZZ_CHECK(whole.pending() > 0, "the reader failed (%s) on a stream the decoder took whole",
               sink.error->to_string().c_str());
    FUZZ_CHECK(rgood.size() == a.fpdus.size(), "decoder %zu FPDUs, reader %zu before its error",
               a.fpdus.size(), rgood.size());
  } else {
    FUZZ_CHECK(rgood.size() == a.fpdus.size(), "decoder %zu FPDUs, reader %zu", a.fpdus.size(),
               rgood.size());
    FUZZ_CHECK(reader.position() == wire.size(), "reader at %llu of %zu",
               (unsigned long long)reader.position(), wire.size());
  }
  for (std::size_t i = 0; i < std::min(rgood.size(), a.fpdus.size()); ++i) {
    const auto& x = a.fpdus[i];
    const auto& y = rgood[i];
    FUZZ_CHECK(x.offset == y.offset && x.wire == y.wire && x.crc == y.crc,
               "FPDU %zu: decoder @%llu wire %u crc %d, reader @%llu wire %u crc %d", i,
               (unsigned long long)x.offset, x.wire, int(x.crc), (unsigned long long)y.offset,
               y.wire, int(y.crc));
    FUZZ_CHECK(x.ulpdu.size() == y.ulpdu.size(), "FPDU %zu: ULPDU %zu vs %zu octets", i,
               x.ulpdu.size(), y.ulpdu.size());
    if (sink.bytes_known[i])
      FUZZ_CHECK(x.ulpdu == y.ulpdu, "FPDU %zu @%llu: decoder and reader ULPDUs differ", i,
                 (unsigned long long)x.offset);
  }
}

void stream_mode(std::uint8_t mode, Rng& rng, ByteSpan wire) {
  const FramingConfig cfg{(mode & 1) != 0, (mode & 2) != 0};
  StreamDecoderOptions opts;
  opts.continue_after_bad_crc = (mode & 8) != 0;

  // Fed at once.
  StreamDecoder whole(cfg, opts);
  StreamRecorder a;
  whole.feed(wire, a);
  // Fed in chunks.
  StreamDecoder chunked(cfg, opts);
  StreamRecorder b;
  const auto cuts = chunks(wire.size(), rng);
  std::size_t at = 0;
  for (auto n : cuts) {
    chunked.feed(wire.subspan(at, n), b);
    at += n;
  }
  FUZZ_CHECK(a.events == b.events, "whole and chunked feeds differ:\nwhole:\n%schunked:\n%s",
             show(a.events).c_str(), show(b.events).c_str());
  FUZZ_CHECK(whole.consumed() == chunked.consumed(), "consumed %llu vs %llu",
             (unsigned long long)whole.consumed(), (unsigned long long)chunked.consumed());
  check_tiling(a.fpdus, cfg);
  if (!a.error) {
    const std::uint64_t end = a.fpdus.empty() ? 0 : a.fpdus.back().offset + a.fpdus.back().wire;
    FUZZ_CHECK(whole.consumed() == end, "consumed %llu, FPDUs end at %llu",
               (unsigned long long)whole.consumed(), (unsigned long long)end);
    FUZZ_CHECK(whole.consumed() + whole.pending() == wire.size(),
               "consumed %llu + pending %zu != %zu fed", (unsigned long long)whole.consumed(),
               whole.pending(), wire.size());
  }
  check_reencoding(a.fpdus, cfg, wire);
  check_ddp_segments(a.fpdus);
  if (!opts.continue_after_bad_crc) check_reader_agrees(cfg, rng, wire, a, whole);
}

void connection_mode(std::uint8_t mode, Rng& rng, Input& in) {
  const std::size_t split = in.u16();
  Bytes dir[2];
  ByteSpan a = in.take(split);
  dir[0].assign(a.begin(), a.end());
  ByteSpan b = in.rest();
  dir[1].assign(b.begin(), b.end());
  // The framing from octet 0: C in both frames, M per direction.
  auto set_flags = [](Bytes& d, bool m, bool c) {
    if (d.size() <= kKeySize) return;
    d[kKeySize] = static_cast<std::uint8_t>((d[kKeySize] & ~(kFlagMarkers | kFlagCrc)) |
                                            (m ? kFlagMarkers : 0) | (c ? kFlagCrc : 0));
  };
  set_flags(dir[0], mode & 2, mode & 1);
  set_flags(dir[1], mode & 0x20, mode & 1);

  StreamDecoderOptions opts;
  opts.continue_after_bad_crc = (mode & 8) != 0;
  ConnectionDecoder whole(opts);
  ConnRecorder x;
  whole.feed(Direction::FromInitiator, dir[0], x);
  whole.feed(Direction::FromResponder, dir[1], x);

  ConnectionDecoder chunked(opts);
  ConnRecorder y;
  std::size_t at[2] = {0, 0};
  while (at[0] < dir[0].size() || at[1] < dir[1].size()) {
    int d = static_cast<int>(rng.below(2));
    if (at[d] == dir[d].size()) d ^= 1;
    std::size_t n =
        std::min<std::size_t>(1 + rng.below(rng.below(2) ? 8 : 700), dir[d].size() - at[d]);
    chunked.feed(static_cast<Direction>(d), ByteSpan(dir[d]).subspan(at[d], n), y);
    at[d] += n;
  }
  for (int d = 0; d < 2; ++d)
    FUZZ_CHECK(x.events[d] == y.events[d],
               "direction %d: whole and interleaved feeds differ:\nwhole:\n%sinterleaved:\n%s", d,
               show(x.events[d]).c_str(), show(y.events[d]).c_str());
  FUZZ_CHECK(x.negotiated == y.negotiated && x.negotiated <= 1, "negotiated %d vs %d times",
             x.negotiated, y.negotiated);
  FUZZ_CHECK(whole.params() == chunked.params(), "different parameters");
  if (whole.params()) {
    // The framing each way is what the frames say (RFC 5044 §7.1).
    const auto& p = *whole.params();
    FUZZ_CHECK(p.crc == (whole.request()->crc || whole.reply()->crc), "C");
    FUZZ_CHECK(p.markers_to_initiator == whole.request()->markers, "M toward the initiator");
    FUZZ_CHECK(p.markers_to_responder == whole.reply()->markers, "M toward the responder");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  Input in(data, size);
  const std::uint8_t mode = in.u8();
  Rng rng(in.u16() * 0x10001ull + 1);
  if (mode & 4)
    connection_mode(mode, rng, in);
  else
    stream_mode(mode, rng, in.rest());
  return 0;
}
