#include "trace/trace_generator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "ddp/segmentation.hpp"
#include "ddp/terminate.hpp"
#include "mpa/fpdu.hpp"

namespace iwarp::trace {

namespace {

using rdmap::Opcode;

class Conversation {
 public:
  Conversation(PcapWriter& w, const mpa::ConnectionParams& p, std::uint16_t mss)
      : w_(w),
        enc_{mpa::FpduEncoder(p.framing_to_responder()),
             mpa::FpduEncoder(p.framing_to_initiator())},
        mulpdu_{mpa::mulpdu(mss, p.markers_to_responder),
                mpa::mulpdu(mss, p.markers_to_initiator)} {}

  // Sends one message from `from` (Client = initiator); fills in the MSN for untagged ones.
  std::expected<void, std::string> send(Side from, ddp::Segment whole) {
    const int d = static_cast<int>(from);
    if (!whole.hdr.tagged) whole.hdr.msn = Msn{++msn_[d][whole.hdr.qn.value()]};
    auto segs = ddp::segment_message(whole, mulpdu_[d]);
    if (!segs) return std::unexpected(segs.error().to_string());
    for (const auto& s : *segs) {
      ulpdu_.clear();
      ddp::encode_segment(s, ulpdu_);
      fpdu_.clear();
      auto n = enc_[d].encode(ulpdu_, fpdu_);
      if (!n) return std::unexpected(n.error().to_string());
      w_.write(from, fpdu_);
      ++counts_[std::string(rdmap::opcode_name(s.hdr.opcode))];
      ++fpdus_;
    }
    return {};
  }

  const std::map<std::string, std::uint64_t>& counts() const { return counts_; }
  std::uint64_t fpdus() const { return fpdus_; }

 private:
  PcapWriter& w_;
  mpa::FpduEncoder enc_[2];
  std::size_t mulpdu_[2];
  std::uint32_t msn_[2][rdmap::kQueueCount] = {};  // last MSN sent per queue
  std::map<std::string, std::uint64_t> counts_;
  std::uint64_t fpdus_ = 0;
  Bytes ulpdu_, fpdu_;
};

ddp::Segment tagged(Opcode op, std::uint32_t stag, std::uint64_t to, ByteSpan payload) {
  ddp::Segment s;
  s.hdr = ddp::tagged_header(op, STag{stag}, TaggedOffset{to});
  s.payload = payload;
  return s;
}

ddp::Segment untagged(Opcode op, ByteSpan payload = {}, std::uint32_t rsvd_ulp = 0) {
  ddp::Segment s;
  s.hdr =
      ddp::untagged_header(op, QueueNumber{rdmap::opcode_info(static_cast<std::uint8_t>(op))->qn},
                           Msn{0}, MessageOffset{0}, true, rsvd_ulp);
  s.payload = payload;
  return s;
}

}  // namespace

std::expected<GeneratedTrace, std::string> generate_conversation(const std::string& path,
                                                                 const GeneratorOptions& opts) {
  auto n = mpa::negotiate(opts.initiator, opts.responder);
  if (n.initiator.kind != mpa::Outcome::Kind::Established)
    return std::unexpected(
        fmt::format("the two policies do not connect ({}): {}", mpa::to_string(n.initiator.kind),
                    n.initiator.error ? n.initiator.error->to_string()
                                      : (n.responder.error ? n.responder.error->to_string() : "")));
  auto w = PcapWriter::open(path, opts.pcap);
  if (!w) return std::unexpected(w.error());
  PcapWriter& pw = **w;
  pw.write(Side::Client, n.request.encode());
  pw.write(Side::Server, n.reply.encode());

  const auto& p = n.initiator.params;
  Conversation c(pw, p, opts.pcap.mss);
  std::mt19937 rng(opts.seed);
  auto data = [&](std::size_t len) {
    Bytes b(len);
    for (auto& x : b) x = static_cast<std::uint8_t>(rng());
    return b;
  };
  std::vector<Bytes> keep;  // payloads must outlive their segments
  auto buf = [&](std::size_t len) -> ByteSpan { return keep.emplace_back(data(len)); };

  std::expected<void, std::string> r;
  auto run = [&](Side from, ddp::Segment s) {
    if (r) r = c.send(from, std::move(s));
  };
  const auto C = Side::Client, S = Side::Server;

  // RFC 6581 §5: in peer-to-peer mode the initiator's first FPDU is the RTR the responder chose.
  // Like siw we use STag 1 rather than 0 (some hardware treats STag 0 specially).
  if (p.peer_to_peer) {
    if (p.rtr == mpa::RtrType::Write) run(C, tagged(Opcode::Write, 1, 0, {}));
    if (p.rtr == mpa::RtrType::Send) run(C, untagged(Opcode::Send));
    if (p.rtr == mpa::RtrType::Read) {
      auto s = untagged(Opcode::ReadRequest);
      s.body = rdmap::ReadRequest{STag{1}, TaggedOffset{0}, 0, STag{1}, TaggedOffset{0}};
      run(C, s);
      run(S, tagged(Opcode::ReadResponse, 1, 0, {}));
    }
  }
  // Sends of every flavour, from both sides; one large enough to need several segments.
  run(C, untagged(Opcode::Send, buf(16)));
  run(S, untagged(Opcode::Send, buf(1)));
  run(C, untagged(Opcode::SendSe, buf(100)));
  run(C, untagged(Opcode::SendInvalidate, buf(3000), 0x00abcd01));
  run(S, untagged(Opcode::SendSeInvalidate, buf(7), 0x00abcd02));
  run(C, untagged(Opcode::Send, {}));
  // RDMA Write: multi-segment, and zero-length.
  run(S, tagged(Opcode::Write, 0x00123401, 0x10000, buf(5000)));
  run(C, tagged(Opcode::Write, 0x00123402, 0x7ffff000, buf(64)));
  run(C, tagged(Opcode::Write, 0x00123403, 0, {}));
  // RDMA Read: request from the server, multi-segment response from the client.
  {
    auto rq = untagged(Opcode::ReadRequest);
    rq.body = rdmap::ReadRequest{STag{0x00555501}, TaggedOffset{0x2000}, 4000, STag{0x00666601},
                                 TaggedOffset{0x40}};
    run(S, rq);
    run(C, tagged(Opcode::ReadResponse, 0x00555501, 0x2000, buf(4000)));
  }
  // RFC 7306 atomics, each answered on QN 3.
  for (std::uint8_t op : {0, 1, 2}) {
    auto aq = untagged(Opcode::AtomicRequest);
    rdmap::AtomicRequest a;
    a.op = op;
    a.request_id = 100u + op;
    a.stag = STag{0x00777701};
    a.to = TaggedOffset{0x1000 + 8u * op};
    a.add_swap_data = 0x1111111111111111ull * (op + 1);
    a.add_swap_mask = op == 0 ? 0 : ~0ull;
    a.compare_data = op == 2 ? 0x42 : 0;
    a.compare_mask = op == 2 ? ~0ull : 0;
    aq.body = a;
    run(C, aq);
    auto ar = untagged(Opcode::AtomicResponse);
    ar.body = rdmap::AtomicResponse{a.request_id, 0x42};
    run(S, ar);
  }
  // RFC 7306 immediate data.
  {
    auto im = untagged(Opcode::ImmediateData);
    im.body = std::uint64_t{0x0102030405060708ull};
    run(C, im);
    auto ims = untagged(Opcode::ImmediateDataSe);
    ims.body = std::uint64_t{0x1112131415161718ull};
    run(S, ims);
  }
  // Bulk Writes (only when asked for): the same data, again and again, to 1 MiB of STag
  // 0x00bb0001 at the responder.
  if (opts.bulk_bytes > 0) {
    if (opts.bulk_message == 0 || opts.bulk_message > GeneratorOptions::kBulkSpan)
      return std::unexpected(fmt::format("bulk Writes of {} octets: from 1 to {} octets",
                                         opts.bulk_message, GeneratorOptions::kBulkSpan));
    const std::uint64_t kMessage = opts.bulk_message, kSpan = GeneratorOptions::kBulkSpan;
    const ByteSpan block = buf(kMessage);
    std::uint64_t to = 0;
    for (std::uint64_t left = opts.bulk_bytes; left > 0 && r;) {
      const std::uint64_t len = std::min(left, kMessage);
      run(C, tagged(Opcode::Write, 0x00bb0001, to, block.first(static_cast<std::size_t>(len))));
      left -= len;
      to = (to + kMessage) % kSpan;
    }
  }
  // A Terminate: DDP layer, tagged buffer, invalid STag, echoing the offending Write's header.
  {
    auto bad = tagged(Opcode::Write, 0xdeadbe00, 0x1000, {});
    Bytes echoed;
    bad.hdr.encode(echoed);
    auto t = rdmap::make_terminate(Errc::DdpTaggedInvalidStag, echoed, {},
                                   static_cast<std::uint16_t>(echoed.size() + 3));
    auto term = untagged(Opcode::Terminate);
    term.body = t;
    run(S, term);
  }
  if (!r) return std::unexpected(r.error());
  pw.close(Side::Client);

  GeneratedTrace g;
  g.params = p;
  g.opcode_counts = c.counts();
  g.fpdus = c.fpdus();
  return g;
}

}  // namespace iwarp::trace
