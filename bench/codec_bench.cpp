// Google Benchmark micro-benchmarks of the codec hot paths, below the queue pair: FPDU encoding
// (RFC 5044 §4, with and without CRC and markers), the FPDU reader and the segment receiver
// parsing streams of small and large FPDUs, DDP/RDMAP header encode/decode (RFC 5041 §5,
// RFC 5040 §4), segmenting a message and the opcode table lookup. CRC32c alone is
// bench/crc_bench.cpp. Run: build/bench/codec_bench --benchmark_min_time=0.1
// (docs/instructions.md). Absolute times drift on a shared machine; compare runs of one build.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ddp/ddp_header.hpp"
#include "ddp/rdmap_headers.hpp"
#include "ddp/rdmap_opcode.hpp"
#include "ddp/segment.hpp"
#include "ddp/segmentation.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/fpdu_reader.hpp"
#include "mpa/segment_receiver.hpp"

using namespace iwarp;

namespace {

constexpr std::size_t kEmss = 1448;  // Ethernet-sized TCP segments (RFC 5044 §4.1 EMSS)

// Stops the program: a benchmark of a path that fails measures nothing.
[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "codec_bench: %s\n", what);
  std::exit(1);
}

Bytes pattern(std::size_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(i * 131 + 7);
  return b;
}

mpa::FramingConfig framing(const benchmark::State& st, int crc_arg, int markers_arg) {
  return {st.range(crc_arg) != 0, st.range(markers_arg) != 0};
}

// The ULPDU of a Send carrying `payload` octets: untagged DDP header, then the payload.
Bytes send_ulpdu(std::size_t payload, std::uint32_t msn) {
  Bytes u;
  ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{rdmap::kQnSend}, Msn{msn}, MessageOffset{0})
      .encode(u);
  const Bytes p = pattern(payload);
  u.insert(u.end(), p.begin(), p.end());
  return u;
}

// A stream of `count` FPDUs whose ULPDUs are Sends of `payload` octets, framed with `cfg`.
Bytes fpdu_stream(mpa::FramingConfig cfg, std::size_t payload, std::size_t count) {
  mpa::FpduEncoder enc(cfg);
  Bytes out;
  for (std::size_t i = 0; i < count; ++i)
    if (!enc.encode(send_ulpdu(payload, static_cast<std::uint32_t>(i + 1)), out))
      broken("FpduEncoder refused a ULPDU");
  return out;
}

// --- FPDU encode ------------------------------------------------------------------------

// Args: ULPDU payload octets, CRC, markers. One FPDU of an 18-octet DDP header plus payload.
void BM_FpduEncode(benchmark::State& st) {
  const auto payload = static_cast<std::size_t>(st.range(0));
  const Bytes hdr = send_ulpdu(0, 1), data = pattern(payload);
  const ByteSpan pieces[] = {hdr, data};
  mpa::FpduEncoder enc(framing(st, 1, 2));
  Bytes out;
  out.reserve(2 * mpa::fpdu_length(hdr.size() + payload) + 64);
  for (auto _ : st) {
    out.clear();
    auto n = enc.encode(pieces, out);
    benchmark::DoNotOptimize(n);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * (hdr.size() + payload)));
}
BENCHMARK(BM_FpduEncode)
    ->ArgNames({"payload", "crc", "markers"})
    ->ArgsProduct({{8, 1024, static_cast<std::int64_t>(mpa::mulpdu(kEmss, false) - 18)},
                   {0, 1},
                   {0, 1}});

// --- FPDU reader: placement sink --------------------------------------------------------

// Places every ULPDU's rest into one buffer and counts FPDUs; fails on any framing error.
class PlacingSink final : public mpa::FpduSink {
 public:
  explicit PlacingSink(std::size_t max_ulpdu) : place_(max_ulpdu) {}
  MutableByteSpan on_fpdu_head(const mpa::FpduHead& h) override {
    return MutableByteSpan(place_.data(), h.ulpdu_length - h.head.size());
  }
  void on_fpdu_end(const mpa::FpduTrailer& t) override {
    if (t.crc == mpa::CrcStatus::Bad) broken("bad CRC in a generated stream");
    ++fpdus;
  }
  void on_framing_error(const WireError&) override {
    broken("framing error in a generated stream");
  }
  std::uint64_t fpdus = 0;

 private:
  Bytes place_;
};

// Args: payload per FPDU, CRC, markers. A stream of 64 FPDUs fed in 1448-octet reads.
void BM_FpduReader(benchmark::State& st) {
  constexpr std::size_t kCount = 64;
  const auto payload = static_cast<std::size_t>(st.range(0));
  const auto cfg = framing(st, 1, 2);
  const Bytes stream = fpdu_stream(cfg, payload, kCount);
  PlacingSink sink(payload + 64);
  for (auto _ : st) {
    mpa::FpduReader reader(cfg);
    for (std::size_t p = 0; p < stream.size(); p += kEmss)
      reader.feed(ByteSpan(stream).subspan(p, std::min(kEmss, stream.size() - p)), sink);
    if (reader.failed()) broken("FpduReader failed on a generated stream");
  }
  if (sink.fpdus != st.iterations() * kCount) broken("FpduReader missed FPDUs");
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * kCount));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * stream.size()));
}
BENCHMARK(BM_FpduReader)
    ->ArgNames({"payload", "crc", "markers"})
    ->ArgsProduct({{8, static_cast<std::int64_t>(mpa::mulpdu(kEmss, false) - 18)}, {0, 1}, {0, 1}});

// --- segment receiver: TCP segments in, stream octets to the FPDU reader ------------------

// What the QP's receive side does with in-order octets: hands them to the FPDU reader. Out of
// order FPDUs wait for their hole to close (delivered in order later).
class FeedingVisitor final : public mpa::SegmentVisitor {
 public:
  FeedingVisitor(mpa::FpduReader& r, PlacingSink& s) : reader_(r), sink_(s) {}
  void on_stream(ByteSpan bytes) override { reader_.feed(bytes, sink_); }
  mpa::OooVerdict on_ooo_fpdu(const mpa::OooFpdu&, const mpa::Hole&) override {
    return mpa::OooVerdict::Wait;
  }
  void on_claimed_reached(std::uint64_t, std::uint32_t) override {
    broken("no FPDU was placed out of order, none can be reached");
  }

 private:
  mpa::FpduReader& reader_;
  PlacingSink& sink_;
};

// Args: payload per FPDU, out of order (each pair of TCP segments swapped). 64 FPDUs, CRC on,
// cut into 1448-octet TCP segments.
void BM_SegmentReceiver(benchmark::State& st) {
  constexpr std::size_t kCount = 64;
  const auto payload = static_cast<std::size_t>(st.range(0));
  const bool swapped = st.range(1) != 0;
  const mpa::FramingConfig cfg{true, false};
  const Bytes stream = fpdu_stream(cfg, payload, kCount);
  struct Piece {
    std::uint32_t off;
    ByteSpan data;
  };
  std::vector<Piece> pieces;
  for (std::size_t p = 0; p < stream.size(); p += kEmss)
    pieces.push_back({static_cast<std::uint32_t>(p),
                      ByteSpan(stream).subspan(p, std::min(kEmss, stream.size() - p))});
  if (swapped)
    for (std::size_t i = 0; i + 1 < pieces.size(); i += 2) std::swap(pieces[i], pieces[i + 1]);
  PlacingSink sink(payload + 64);
  const TcpSeq start{0xFFFFF000u};  // near the wrap, as sequence numbers can be
  for (auto _ : st) {
    mpa::FpduReader reader(cfg);
    mpa::SegmentReceiver rx(cfg, start);
    FeedingVisitor v(reader, sink);
    for (const auto& pc : pieces) rx.receive(start + pc.off, pc.data, v);
    if (rx.in_order() != stream.size() || reader.failed())
      broken("SegmentReceiver did not deliver the whole stream");
  }
  if (sink.fpdus != st.iterations() * kCount) broken("SegmentReceiver missed FPDUs");
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * kCount));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * stream.size()));
}
BENCHMARK(BM_SegmentReceiver)
    ->ArgNames({"payload", "swapped"})
    ->ArgsProduct({{8, static_cast<std::int64_t>(mpa::mulpdu(kEmss, false) - 18)}, {0, 1}});

// --- DDP / RDMAP headers ----------------------------------------------------------------

void BM_DdpHeaderEncode(benchmark::State& st) {
  const auto h =
      st.range(0)
          ? ddp::tagged_header(rdmap::Opcode::Write, STag{0x1234}, TaggedOffset{0x10000}, true)
          : ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{7}, MessageOffset{0});
  Bytes out;
  out.reserve(64);
  for (auto _ : st) {
    out.clear();
    h.encode(out);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()));
}
BENCHMARK(BM_DdpHeaderEncode)->ArgName("tagged")->Arg(0)->Arg(1);

void BM_DdpHeaderDecode(benchmark::State& st) {
  Bytes wire;
  (st.range(0)
       ? ddp::tagged_header(rdmap::Opcode::Write, STag{0x1234}, TaggedOffset{0x10000})
       : ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{7}, MessageOffset{0}))
      .encode(wire);
  for (auto _ : st) {
    auto h = ddp::DdpHeader::decode(wire);
    if (!h) broken("DdpHeader::decode failed");
    benchmark::DoNotOptimize(h);
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()));
}
BENCHMARK(BM_DdpHeaderDecode)->ArgName("tagged")->Arg(0)->Arg(1);

// A whole ULPDU through parse_segment (header, RDMAP body, every per-segment check): 0 a Send
// with 8 octets, 1 an RDMA Write segment of MULPDU, 2 a Read Request (RFC 5040 §4.4).
Bytes segment_ulpdu(std::int64_t kind) {
  ddp::Segment s;
  const Bytes data = pattern(mpa::mulpdu(kEmss, false) - ddp::kTaggedHeaderSize);
  switch (kind) {
    case 0:
      s.hdr = ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{1}, MessageOffset{0});
      s.payload = ByteSpan(data).first(8);
      break;
    case 1:
      s.hdr = ddp::tagged_header(rdmap::Opcode::Write, STag{0x1234}, TaggedOffset{0x10000});
      s.payload = data;
      break;
    default:
      s.hdr = ddp::untagged_header(rdmap::Opcode::ReadRequest, QueueNumber{rdmap::kQnReadReq},
                                   Msn{1}, MessageOffset{0});
      s.body = rdmap::ReadRequest{STag{0x11}, TaggedOffset{0x2000}, 1024, STag{0x22},
                                  TaggedOffset{0x3000}};
      break;
  }
  Bytes out;
  ddp::encode_segment(s, out);
  return out;
}

void BM_ParseSegment(benchmark::State& st) {
  const Bytes u = segment_ulpdu(st.range(0));
  for (auto _ : st) {
    auto s = ddp::parse_segment(u);
    if (!s) broken("parse_segment failed");
    benchmark::DoNotOptimize(s);
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * u.size()));
}
BENCHMARK(BM_ParseSegment)->ArgName("send8_write_readreq")->Arg(0)->Arg(1)->Arg(2);

void BM_EncodeSegment(benchmark::State& st) {
  const Bytes u = segment_ulpdu(st.range(0));
  auto s = ddp::parse_segment(u);
  if (!s) broken("parse_segment failed");
  Bytes out;
  out.reserve(u.size() + 64);
  for (auto _ : st) {
    out.clear();
    ddp::encode_segment(*s, out);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * u.size()));
}
BENCHMARK(BM_EncodeSegment)->ArgName("send8_write_readreq")->Arg(0)->Arg(1)->Arg(2);

// The receiver's cross-segment checks (RFC 5041 §7.2) on the segments of 64 KiB RDMA Writes.
void BM_SegmentChecker(benchmark::State& st) {
  const Bytes data = pattern(64 * 1024);
  ddp::Segment whole;
  whole.hdr = ddp::tagged_header(rdmap::Opcode::Write, STag{0x1234}, TaggedOffset{0});
  whole.payload = data;
  auto segs = ddp::segment_message(whole, mpa::mulpdu(kEmss, false));
  if (!segs) broken("segment_message failed");
  ddp::SegmentChecker checker;
  for (auto _ : st)
    for (const auto& s : *segs)
      if (!checker.check(s)) broken("SegmentChecker refused a consistent Write");
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * segs->size()));
}
BENCHMARK(BM_SegmentChecker);

// Cutting a 64 KiB message into MULPDU-sized segments (RFC 5041 §5).
void BM_SegmentMessage(benchmark::State& st) {
  const Bytes data = pattern(64 * 1024);
  ddp::Segment whole;
  whole.hdr = ddp::tagged_header(rdmap::Opcode::Write, STag{0x1234}, TaggedOffset{0});
  whole.payload = data;
  for (auto _ : st) {
    auto segs = ddp::segment_message(whole, mpa::mulpdu(kEmss, false));
    if (!segs) broken("segment_message failed");
    benchmark::DoNotOptimize(segs);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * data.size()));
}
BENCHMARK(BM_SegmentMessage);

// The opcode table every received segment is dispatched through (RFC 5040 §4.2, RFC 7306).
void BM_OpcodeInfo(benchmark::State& st) {
  std::uint8_t op = 0;
  for (auto _ : st) {
    const auto* info = rdmap::opcode_info(op);
    benchmark::DoNotOptimize(info);
    op = static_cast<std::uint8_t>((op + 1) & 0xF);  // 12 opcodes and 4 undefined ones
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()));
}
BENCHMARK(BM_OpcodeInfo);

}  // namespace

BENCHMARK_MAIN();
