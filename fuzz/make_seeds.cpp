// Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from captures and from
// streams built with our own encoders:
//
//   fuzz_make_seeds OUT_DIR CAPTURE...
//
// From each capture: the MPA frames (mpa_frame), the first octets of each direction's Full
// Operation cut at an FPDU boundary (stream_decoder, qp_receive), both directions from the
// start (stream_decoder, connection mode), the capture's own TCP segments of each direction
// with their real disorder (segment_receiver), and the capture itself when small, or its first
// frames (pcap). Built by our encoders: FPDU streams that hit every receive path of the
// fuzz_qp_receive harness's memory layout (its STags), valid-mode segment-receiver inputs, and
// one of each enlargement message. Seeds are kept small (a few KiB each).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ddp/segment.hpp"
#include "ddp/terminate.hpp"
#include "enlarge/wire_format.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/negotiation.hpp"
#include "trace/pcap_reader.hpp"
#include "trace/tcp_reassembly.hpp"
#include "trace/trace_decoder.hpp"

using namespace iwarp;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kFullOpSeed = 1024;  // octets of Full Operation per seed (at most)
constexpr std::size_t kConnSeed = 800;     // octets per direction in connection-mode seeds
constexpr std::size_t kPcapWhole = 12000;  // captures up to this size are copied whole
constexpr std::size_t kPcapCut = 8000;     // larger ones: their first frames, this many octets

fs::path g_out;
std::set<std::string> g_written;

void put(const std::string& target, const std::string& name, ByteSpan data) {
  const fs::path dir = g_out / target;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  g_written.insert(target + "/" + name);
}

void be16(Bytes& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}
void be32(Bytes& b, std::uint32_t v) {
  be16(b, static_cast<std::uint16_t>(v >> 16));
  be16(b, static_cast<std::uint16_t>(v));
}

Bytes reassemble(const trace::TcpFlow& f, int dir) {
  Bytes out;
  trace::TcpReassembler r(trace::stream_start(f, dir));
  for (const auto& s : f.dir[dir])
    if (!s.payload.empty())
      r.add(s.seq, s.payload, [&](ByteSpan b) { out.insert(out.end(), b.begin(), b.end()); });
  return out;
}

// A classic pcap cut to its first `frames` records (nullopt for pcapng or damaged files).
std::optional<Bytes> first_frames(const Bytes& file, std::size_t most) {
  if (file.size() < 24) return std::nullopt;
  const std::uint32_t magic = load_le32(file.data());
  bool le;
  if (magic == 0xa1b2c3d4 || magic == 0xa1b23c4d)
    le = true;
  else if (magic == 0xd4c3b2a1 || magic == 0x4d3cb2a1)
    le = false;
  else
    return std::nullopt;
  std::size_t at = 24;
  while (at + 16 <= file.size()) {
    const std::uint32_t incl =
        le ? load_le32(file.data() + at + 8) : load_be32(file.data() + at + 8);
    if (at + 16 + incl > file.size() || (at > 24 && at + 16 + incl > most)) break;
    at += 16 + incl;
  }
  return Bytes(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(at));
}

void from_capture(const fs::path& path) {
  std::ifstream is(path, std::ios::binary);
  const Bytes file((std::istreambuf_iterator<char>(is)), std::istreambuf_iterator<char>());
  const std::string stem = path.stem().string();
  // pcap: small captures whole, large ones cut (of the generated ones, two: they differ only
  // in framing); three flagged for a replay too.
  const bool generated = path.parent_path().filename() == "generated";
  std::optional<Bytes> seed;
  if (file.size() <= kPcapWhole)
    seed = file;
  else if (!generated || stem == "mpa1_crc_markers" || stem == "mpa2_p2p_read_crc")
    seed = first_frames(file, kPcapCut);
  if (seed) {
    put("pcap", stem + (seed->size() < file.size() ? "-first.pcap" : ".pcap"), *seed);
    if (stem == "rping_lo" || stem == "siw_p2p" || stem == "mpa1_crc_markers") {
      Bytes r = *seed;
      r[8] |= 1;  // thiszone bit 0 (little-endian file): the harness replays it
      put("pcap", stem + "-replay.pcap", r);
    }
  }

  auto cap = trace::read_capture(path.string());
  if (!cap) {
    fmt::print(stderr, "{}\n", cap.error());
    return;
  }
  const auto rep = trace::decode_capture(*cap);
  int used = 0;
  for (std::size_t fi = 0; fi < rep.flows.size() && used < 1; ++fi) {
    const auto& fr = rep.flows[fi];
    if (!fr.iwarp || !fr.request) continue;
    ++used;
    const auto& flow = cap->flows[fi];
    const std::string base = fmt::format("{}-c{}", stem, fi);
    Bytes stream[2] = {reassemble(flow, 0), reassemble(flow, 1)};
    // MPA frames and where Full Operation starts in each direction; FPDU ends per direction.
    std::uint64_t fo[2] = {0, 0};
    bool have_frame[2] = {false, false};
    std::vector<std::uint64_t> ends[2];
    for (const auto& r : rep.records) {
      if (r.flow != fi) continue;
      const int d = static_cast<int>(r.dir);
      if (r.kind == trace::Record::Kind::MpaFrame && !have_frame[d]) {
        have_frame[d] = true;
        fo[d] = r.offset + r.length;
        const ByteSpan frame = ByteSpan(stream[d]).subspan(
            std::min<std::size_t>(r.offset, stream[d].size()),
            std::min<std::size_t>(
                r.length, stream[d].size() - std::min<std::size_t>(r.offset, stream[d].size())));
        // Policies: both "Optional CRC, rev 2", then the frame.
        Bytes m = {0x03, 0x07, 0x00, 0x10, 0x00, 0x10, 0x03, 0x07, 0x00, 0x10, 0x00, 0x10};
        m.insert(m.end(), frame.begin(), frame.end());
        put("mpa_frame", fmt::format("{}-{}", base, d ? "reply" : "request"), m);
      } else if (r.kind == trace::Record::Kind::Fpdu) {
        ends[d].push_back(r.offset + r.length);
      }
    }
    const bool crc = fr.params && fr.params->crc;
    for (int d = 0; d < 2; ++d) {
      if (!have_frame[d] || fo[d] >= stream[d].size()) continue;
      const bool markers =
          fr.params && (d == 0 ? fr.params->markers_to_responder : fr.params->markers_to_initiator);
      std::uint64_t end = fo[d];
      for (auto e : ends[d])
        if (e <= fo[d] + kFullOpSeed) end = std::max(end, e);
      if (end == fo[d]) end = std::min<std::uint64_t>(stream[d].size(), fo[d] + kFullOpSeed);
      const ByteSpan fullop = ByteSpan(stream[d]).subspan(fo[d], end - fo[d]);
      const std::string name = fmt::format("{}-{}", base, d ? "r2i" : "i2r");
      // stream_decoder, stream mode.
      Bytes s = {static_cast<std::uint8_t>((crc ? 1 : 0) | (markers ? 2 : 0)), 0x12, 0x34};
      s.insert(s.end(), fullop.begin(), fullop.end());
      put("stream_decoder", name, s);
      // qp_receive: we receive direction d (the initiator receives responder->initiator).
      const bool initiator = d == 1;
      const bool p2p = fr.params && fr.params->peer_to_peer;
      Bytes q = {static_cast<std::uint8_t>((crc ? 1 : 0) | (markers ? 2 : 0) | (initiator ? 4 : 0) |
                                           (p2p ? 8 : 0)),
                 static_cast<std::uint8_t>(1 | (4 << 2)),
                 0x00,
                 0x01,
                 0xff,
                 0xff,
                 0x44,
                 0x00};
      q.insert(q.end(), fullop.begin(), fullop.end());
      put("qp_receive", name, q);
      // segment_receiver, raw mode: the capture's own segments of this direction (real
      // disorder and retransmissions), offsets from the start of Full Operation.
      const TcpSeq fo_seq = trace::stream_start(flow, d) + static_cast<std::uint32_t>(fo[d]);
      Bytes g = {static_cast<std::uint8_t>((crc ? 1 : 0) | (markers ? 2 : 0) | (3 << 3))};
      be32(g, fo_seq.value());
      be16(g, 0x5eed);
      std::size_t kept = 0;
      for (const auto& seg : flow.dir[d]) {
        if (seg.payload.empty()) continue;
        const std::int64_t off = seg.seq - fo_seq;
        if (off < -256 || off + 256 > 0xFFFF || off >= static_cast<std::int64_t>(kFullOpSeed * 2))
          continue;
        const std::size_t len = std::min<std::size_t>(seg.payload.size(), 0x7FF);
        be16(g, static_cast<std::uint16_t>(off + 256));
        be16(g, static_cast<std::uint16_t>(len));
        g.insert(g.end(), seg.payload.begin(),
                 seg.payload.begin() + static_cast<std::ptrdiff_t>(len));
        if (++kept == 16 || g.size() > 3000) break;
      }
      if (kept) put("segment_receiver", name, g);
    }
    // stream_decoder, connection mode: both directions from their first octet.
    Bytes c = {static_cast<std::uint8_t>(4 | (crc ? 1 : 0)), 0x43, 0x21};
    const std::size_t l0 = std::min(stream[0].size(), kConnSeed);
    const std::size_t l1 = std::min(stream[1].size(), kConnSeed);
    be16(c, static_cast<std::uint16_t>(l0));
    c.insert(c.end(), stream[0].begin(), stream[0].begin() + static_cast<std::ptrdiff_t>(l0));
    c.insert(c.end(), stream[1].begin(), stream[1].begin() + static_cast<std::ptrdiff_t>(l1));
    put("stream_decoder", base + "-conn", c);
  }
}

// --- streams for fuzz_qp_receive, built with our encoders against its memory layout ---

ddp::Segment write_seg(std::uint32_t stag, std::uint64_t to, ByteSpan payload, bool last = true) {
  ddp::Segment s;
  s.hdr = ddp::tagged_header(rdmap::Opcode::Write, STag{stag}, TaggedOffset{to}, last);
  s.payload = payload;
  return s;
}
ddp::Segment send_seg(rdmap::Opcode op, std::uint32_t msn, std::uint32_t mo, ByteSpan payload,
                      bool last = true, std::uint32_t inv = 0) {
  ddp::Segment s;
  s.hdr = ddp::untagged_header(op, QueueNumber{0}, Msn{msn}, MessageOffset{mo}, last, inv);
  s.payload = payload;
  return s;
}

struct QpSeed {
  std::string name;
  std::uint8_t h0, h1;
  std::vector<ddp::Segment> segs;
  std::uint16_t dereg_after = 0xffff;
};

void qp_seeds() {
  static const Bytes p64(64, 0xAB), p300(300, 0xCD), p1000(1000, 0x5A), p200(200, 0x77);
  std::vector<QpSeed> seeds;
  {
    QpSeed s{"writes", 0, 1, {}};
    s.segs.push_back(write_seg(0x101, 0x10000, p64));
    s.segs.push_back(write_seg(0x101, 0x10000 + 4000, p64));  // past the end
    s.segs.push_back(write_seg(0x202, 0x20000, p64));         // read-only
    s.segs.push_back(write_seg(0x606, 0x60000, p64));         // other PD
    seeds.push_back(s);
  }
  {
    QpSeed s{"multi-segment-write", 0, 3, {}};
    s.segs.push_back(write_seg(0x101, 0x10000, p1000, false));
    s.segs.push_back(write_seg(0x101, 0x10000 + 1000, p1000, true));
    seeds.push_back(s);
  }
  {
    QpSeed s{"sends", 0, 1 | (3 << 2) | 0x20, {}};
    s.segs.push_back(send_seg(rdmap::Opcode::Send, 1, 0, p64));
    s.segs.push_back(send_seg(rdmap::Opcode::Send, 2, 0, p200, false));
    s.segs.push_back(send_seg(rdmap::Opcode::Send, 2, 200, p64, true));
    s.segs.push_back(send_seg(rdmap::Opcode::SendSe, 3, 0, p300));  // too long
    seeds.push_back(s);
  }
  {
    QpSeed s{"send-invalidate-then-write", 0, 1 | (2 << 2), {}};
    s.segs.push_back(send_seg(rdmap::Opcode::SendInvalidate, 1, 0, p64, true, 0x101));
    s.segs.push_back(write_seg(0x101, 0x10000, p64));
    seeds.push_back(s);
  }
  {
    QpSeed s{"read-request-atomic", 0x0, 1, {}};
    ddp::Segment rr;
    rr.hdr =
        ddp::untagged_header(rdmap::Opcode::ReadRequest, QueueNumber{1}, Msn{1}, MessageOffset{0});
    rr.body = rdmap::ReadRequest{STag{0xbb01}, TaggedOffset{0x7000}, 128, STag{0x202},
                                 TaggedOffset{0x20000 + 16}};
    s.segs.push_back(rr);
    ddp::Segment at;
    at.hdr = ddp::untagged_header(rdmap::Opcode::AtomicRequest, QueueNumber{1}, Msn{2},
                                  MessageOffset{0});
    rdmap::AtomicRequest a;
    a.stag = STag{0x303};
    a.to = TaggedOffset{0x30000 + 8};
    a.add_swap_data = 5;
    at.body = a;
    s.segs.push_back(at);
    seeds.push_back(s);
  }
  {
    QpSeed s{"read-response", 0x40, 1, {}};
    ddp::Segment r;
    r.hdr = ddp::tagged_header(rdmap::Opcode::ReadResponse, STag{0x505}, TaggedOffset{0x50000 + 64},
                               false);
    r.payload = ByteSpan(p200);
    s.segs.push_back(r);
    ddp::Segment r2 = r;
    r2.hdr = ddp::tagged_header(rdmap::Opcode::ReadResponse, STag{0x505},
                                TaggedOffset{0x50000 + 64 + 200}, true);
    r2.payload = ByteSpan(p64).first(56);
    s.segs.push_back(r2);
    seeds.push_back(s);
  }
  {
    QpSeed s{"atomic-response", 0x80, 1, {}};
    ddp::Segment r;
    r.hdr = ddp::untagged_header(rdmap::Opcode::AtomicResponse, QueueNumber{3}, Msn{1},
                                 MessageOffset{0});
    r.body = rdmap::AtomicResponse{1, 41};
    s.segs.push_back(r);
    seeds.push_back(s);
  }
  {
    QpSeed s{"dereg-midway", 0x00, 3 | 0x80, {}};
    s.segs.push_back(write_seg(0x808, 0x80000, p300));
    s.segs.push_back(write_seg(0x808, 0x80000 + 300, p300));
    s.dereg_after = 3;
    seeds.push_back(s);
  }
  {
    QpSeed s{"terminate", 0, 1, {}};
    ddp::Segment t;
    t.hdr =
        ddp::untagged_header(rdmap::Opcode::Terminate, QueueNumber{2}, Msn{1}, MessageOffset{0});
    // DDP layer, tagged buffer, invalid STag (RFC 5041 §7.2), with no headers echoed.
    t.body = rdmap::make_terminate(Errc::DdpTaggedInvalidStag);
    s.segs.push_back(t);
    seeds.push_back(s);
  }
  {
    QpSeed s{"immediate", 0, 1 | (1 << 2), {}};
    ddp::Segment w = write_seg(0x101, 0x10020, p64);
    s.segs.push_back(w);
    ddp::Segment imm;
    imm.hdr = ddp::untagged_header(rdmap::Opcode::ImmediateData, QueueNumber{0}, Msn{1},
                                   MessageOffset{0});
    imm.body = std::uint64_t{0x1234};
    s.segs.push_back(imm);
    seeds.push_back(s);
  }
  for (const auto& s : seeds) {
    for (int framing = 0; framing < 4; ++framing) {
      mpa::FpduEncoder enc({(framing & 1) != 0, (framing & 2) != 0});
      Bytes wire;
      for (const auto& seg : s.segs) {
        Bytes ulpdu;
        ddp::encode_segment(seg, ulpdu);
        if (!enc.encode(ulpdu, wire)) return;
      }
      Bytes in = {static_cast<std::uint8_t>(s.h0 | framing),
                  s.h1,
                  0x00,
                  static_cast<std::uint8_t>(framing),
                  static_cast<std::uint8_t>(s.dereg_after >> 8),
                  static_cast<std::uint8_t>(s.dereg_after),
                  0x44,
                  0x10};
      in.insert(in.end(), wire.begin(), wire.end());
      put("qp_receive", fmt::format("gen-{}-f{}", s.name, framing), in);
    }
  }
}

void other_seeds() {
  // segment_receiver, valid mode: each framing, each cut style.
  for (int framing = 0; framing < 4; ++framing)
    for (int style : {0x00, 0x05, 0x0E, 0x23}) {
      Bytes b = {static_cast<std::uint8_t>(framing | 4 | (3 << 3)),
                 0xff,
                 0xff,
                 0xfe,
                 0x00,
                 0x00,
                 static_cast<std::uint8_t>(style),
                 static_cast<std::uint8_t>(style)};
      b.push_back(static_cast<std::uint8_t>(style));
      b.push_back(12);  // FPDUs
      for (int k = 0; k < 12; ++k) b.push_back(static_cast<std::uint8_t>(k * 37 + framing));
      put("segment_receiver", fmt::format("gen-valid-f{}-s{:02x}", framing, style), b);
    }
  // mpa_frame: policies only (the frame from make_request), a few combinations.
  for (int k = 0; k < 6; ++k) {
    const mpa::Policy p{.revision = static_cast<std::uint8_t>(1 + (k & 1)),
                        .crc = static_cast<mpa::CrcPolicy>(k % 3),
                        .markers = static_cast<mpa::MarkerPolicy>((k / 2) % 3),
                        .ird = 4,
                        .ord = 4,
                        .peer_to_peer = k >= 3,
                        .rtr = mpa::kAllRtr};
    const Bytes f = mpa::make_request(p).encode();
    Bytes b = {static_cast<std::uint8_t>((k & 1) | ((k % 3) << 1) | (((k / 2) % 3) << 3) |
                                         (k >= 3 ? 0x20 : 0)),
               0x07,
               0x00,
               0x04,
               0x00,
               0x04,
               0x03,
               0x07,
               0x00,
               0x10,
               0x00,
               0x10};
    b.insert(b.end(), f.begin(), f.end());
    put("mpa_frame", fmt::format("gen-request-{}", k), b);
  }
  // enlarge_wire: one of each message.
  using namespace iwarp::enlarge;
  static const Bytes data(40, 0x42);
  const Body bodies[] = {Piece{100, 10, data},
                         EnlargeReq{65536},
                         EnlargeAck{65536, 0x1234, 0x7f0000},
                         EnlargeNak{NakReason::Budget, 4096},
                         Done{70000, 0, 65536, 0},
                         Ready{2},
                         Release{0x1234},
                         Credit{},
                         Cycle{3}};
  for (const auto& body : bodies) {
    Message m;
    m.credits = 2;
    m.seq = 7;
    m.body = body;
    put("enlarge_wire", fmt::format("gen-{}", to_string(m.type())), encode(m));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: fuzz_make_seeds OUT_DIR CAPTURE...\n");
    return 2;
  }
  g_out = argv[1];
  for (int i = 2; i < argc; ++i) from_capture(argv[i]);
  qp_seeds();
  other_seeds();
  fmt::print("{} seeds written under {}\n", g_written.size(), g_out.string());
  return 0;
}
