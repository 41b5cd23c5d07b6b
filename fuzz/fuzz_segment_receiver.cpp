// Target 3: the segment receiver (mpa/segment_receiver.hpp): TCP segments in any order, with
// duplicates and overlaps, in all four framings (CRC on/off x markers on/off).
//
// Input: octet 0: bit 0 CRC, bit 1 markers, bit 2 mode, bits 3-4 what the visitor answers for
// FPDUs found beyond a hole (0 always Placed, 1 always Wait, 2 Invalid, 3 chosen at random);
// octets 1-4: the sequence number of stream offset 0 (wrap-around included); octets 5-6: seed.
//   mode 0 (raw):   segments (i16 offset, u16 length, octets) until the input ends.
//   mode 1 (valid): a valid FPDU stream is built from the input (ULPDU sizes and contents), cut
//                   into segments (at FPDU boundaries, anywhere, or both), and delivered in a
//                   seeded disorder with duplicates and overlapping re-cut retransmissions.
//
// Checks against a model that keeps the first octet received at every offset:
//   * the in-order point is the end of the contiguous received prefix; holes are exactly the
//     gaps beyond it; held octets are exactly the received ones beyond it;
//   * on_stream delivers the model's octets in order, exactly once, from the in-order point;
//     on_claimed_reached comes exactly at each placed FPDU, and nothing of a placed FPDU is
//     delivered through the stream;
//   * every FPDU found beyond a hole is made of received octets, lies beyond its hole, overlaps
//     no other FPDU found, and (with CRC) carries a CRC that matches;
//   * valid mode: once everything arrived, the stream is delivered whole (stream octets and
//     placed FPDUs tile it) and equals the original; with segments cut only at FPDU boundaries,
//     or with markers, every FPDU found beyond a hole is a real FPDU (with CRC alone it is one
//     whose octets and CRC are good, which a ULPDU carrying an FPDU image can also be).
#include <map>
#include <set>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "mpa/crc32c.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/segment_receiver.hpp"

using namespace iwarp;
using namespace iwarp::mpa;
using iwarp::fuzz::Input;
using iwarp::fuzz::Rng;

namespace {

constexpr std::uint64_t kMaxStream = 1u << 17;  // model size (offsets beyond are never sent)

// The first octet received at each offset, or -1. One array for the whole run (a fresh one per
// input costs more page faults than the rest of the input); a Model resets what it used.
std::vector<int>& ref_array() {
  static std::vector<int> r(kMaxStream, -1);
  return r;
}

struct Model {
  std::vector<int>& ref = ref_array();
  std::map<std::uint64_t, std::uint64_t> have;  // received ranges [b, e), merged
  Model() = default;
  Model(const Model&) = delete;
  ~Model() {
    for (auto [b, e] : have) std::fill(ref.begin() + b, ref.begin() + std::min(e, kMaxStream), -1);
  }

  void add(std::uint64_t off, ByteSpan b) {
    if (b.empty()) return;
    for (std::size_t i = 0; i < b.size(); ++i)
      if (off + i < kMaxStream && ref[off + i] < 0) ref[off + i] = b[i];
    std::uint64_t s = off, e = off + b.size();
    auto it = have.upper_bound(s);
    if (it != have.begin() && std::prev(it)->second >= s) --it;
    while (it != have.end() && it->first <= e) {
      s = std::min(s, it->first);
      e = std::max(e, it->second);
      it = have.erase(it);
    }
    have[s] = e;
  }
  std::uint64_t prefix() const {
    auto it = have.find(0);
    return it == have.end() ? 0 : it->second;
  }
  std::vector<Hole> holes() const {
    std::vector<Hole> out;
    std::uint64_t cur = prefix();
    for (auto [b, e] : have) {
      if (e <= cur) continue;
      if (b > cur) out.push_back({cur, b});
      cur = e;
    }
    return out;
  }
  std::size_t held() const {
    std::size_t n = 0;
    const std::uint64_t p = prefix();
    for (auto [b, e] : have)
      if (e > p) n += e - std::max(b, p);
    return n;
  }
  bool present(std::uint64_t b, std::uint64_t e) const {
    auto it = have.upper_bound(b);
    if (it == have.begin()) return false;
    --it;
    return it->first <= b && it->second >= e;
  }
};

// The FPDU at `off` in the model's octets, markers removed (nullopt when it is not all there).
struct Parsed {
  std::uint32_t wire = 0;
  Bytes ulpdu;
  bool crc_ok = false;
};
std::optional<Parsed> parse_model(const Model& m, FramingConfig cfg, std::uint64_t off) {
  Bytes logical;
  Crc32c crc;
  std::uint64_t p = off;
  auto octet = [&](std::uint64_t at) -> int { return at < kMaxStream ? m.ref[at] : -1; };
  auto take = [&](std::size_t n, bool covered) -> bool {
    for (std::size_t k = 0; k < n;) {
      if (cfg.markers && is_marker_position(p)) {
        for (int i = 0; i < 4; ++i) {
          const int o = octet(p + i);
          if (o < 0) return false;
          const std::uint8_t c = static_cast<std::uint8_t>(o);
          crc.update(ByteSpan(&c, 1));
        }
        p += 4;
        continue;
      }
      const int o = octet(p);
      if (o < 0) return false;
      const std::uint8_t c = static_cast<std::uint8_t>(o);
      if (covered) crc.update(ByteSpan(&c, 1));
      logical.push_back(c);
      ++p;
      ++k;
    }
    return true;
  };
  if (!take(2, true)) return std::nullopt;
  const std::uint16_t len = load_be16(logical.data());
  if (!take(len + pad_length(len), true)) return std::nullopt;
  const std::size_t crc_at = logical.size();
  if (!take(4, false)) return std::nullopt;
  Parsed r;
  r.wire = static_cast<std::uint32_t>(p - off);
  r.ulpdu.assign(logical.begin() + 2, logical.begin() + 2 + len);
  r.crc_ok = load_le32(logical.data() + crc_at) == crc.value();
  return r;
}

struct TrueFpdu {
  std::uint64_t offset;
  std::uint32_t wire;
  Bytes ulpdu;
};

class Checker final : public SegmentVisitor {
 public:
  Checker(const Model& m, FramingConfig cfg, int verdicts, Rng& rng)
      : m_(m), cfg_(cfg), verdicts_(verdicts), rng_(rng) {}

  const SegmentReceiver* rx = nullptr;
  std::uint64_t delivered = 0;                               // where the stream is now
  std::map<std::uint64_t, std::uint32_t> offered, placed;    // FPDUs found beyond a hole
  std::set<std::uint64_t> reached;                           // placed FPDUs the stream reached
  const std::map<std::uint64_t, TrueFpdu>* truth = nullptr;  // valid mode, strict
  Bytes stream;                                              // octets delivered, in order
  bool record = false;

  void on_stream(ByteSpan b) override {
    FUZZ_CHECK(!b.empty(), "empty on_stream");
    FUZZ_CHECK(m_.present(delivered, delivered + b.size()),
               "on_stream [%llu, +%zu) of octets never received", (unsigned long long)delivered,
               b.size());
    for (std::size_t i = 0; i < b.size(); ++i)
      FUZZ_CHECK(m_.ref[delivered + i] == b[i],
                 "stream octet %llu is 0x%02x, first received 0x%02x",
                 (unsigned long long)(delivered + i), b[i], m_.ref[delivered + i]);
    // Nothing inside a placed FPDU goes through the stream.
    auto it = placed.upper_bound(delivered);
    if (it != placed.begin()) {
      auto p = std::prev(it);
      FUZZ_CHECK(p->first + p->second <= delivered,
                 "stream octet %llu inside the placed FPDU @%llu", (unsigned long long)delivered,
                 (unsigned long long)p->first);
    }
    FUZZ_CHECK(it == placed.end() || it->first >= delivered + b.size(),
               "stream [%llu, +%zu) runs into the placed FPDU @%llu", (unsigned long long)delivered,
               b.size(), (unsigned long long)it->first);
    if (record) stream.insert(stream.end(), b.begin(), b.end());
    delivered += b.size();
  }

  OooVerdict on_ooo_fpdu(const OooFpdu& f, const Hole& hole) override {
    FUZZ_CHECK(f.offset >= rx->in_order(), "FPDU @%llu behind the in-order point %llu",
               (unsigned long long)f.offset, (unsigned long long)rx->in_order());
    FUZZ_CHECK(rx->has_holes(), "FPDU beyond a hole with no hole open");
    FUZZ_CHECK(hole.begin >= rx->in_order() && hole.begin < hole.end && hole.end <= f.offset,
               "FPDU @%llu beyond hole [%llu, %llu), in order %llu", (unsigned long long)f.offset,
               (unsigned long long)hole.begin, (unsigned long long)hole.end,
               (unsigned long long)rx->in_order());
    FUZZ_CHECK(m_.present(f.offset, f.offset + f.wire_length),
               "FPDU @%llu wire %u made of octets never received", (unsigned long long)f.offset,
               f.wire_length);
    FUZZ_CHECK(f.ulpdu.size() == f.ulpdu_length, "ulpdu span");
    const auto p = parse_model(m_, cfg_, f.offset);
    FUZZ_CHECK(p && p->wire == f.wire_length && p->ulpdu.size() == f.ulpdu.size() &&
                   std::equal(p->ulpdu.begin(), p->ulpdu.end(), f.ulpdu.begin()),
               "FPDU @%llu is not what its octets say", (unsigned long long)f.offset);
    if (cfg_.crc)
      FUZZ_CHECK(p->crc_ok && f.crc == CrcStatus::Good, "FPDU @%llu with a bad CRC trusted",
                 (unsigned long long)f.offset);
    // No overlap with any FPDU offered before.
    auto it = offered.upper_bound(f.offset);
    FUZZ_CHECK(it == offered.end() || it->first >= f.offset + f.wire_length,
               "FPDU @%llu+%u overlaps the one @%llu", (unsigned long long)f.offset, f.wire_length,
               (unsigned long long)it->first);
    if (it != offered.begin()) {
      auto q = std::prev(it);
      FUZZ_CHECK(q->first + q->second <= f.offset, "FPDU @%llu overlaps the one @%llu+%u",
                 (unsigned long long)f.offset, (unsigned long long)q->first, q->second);
    }
    offered[f.offset] = f.wire_length;
    if (std::getenv("FUZZ_DEBUG"))
      std::fprintf(stderr, "  found FPDU @%llu wire %u beyond hole [%llu, %llu)\n",
                   (unsigned long long)f.offset, f.wire_length, (unsigned long long)hole.begin,
                   (unsigned long long)hole.end);
    if (truth) {
      auto t = truth->find(f.offset);
      FUZZ_CHECK(t != truth->end() && t->second.wire == f.wire_length &&
                     t->second.ulpdu.size() == f.ulpdu.size() &&
                     std::equal(f.ulpdu.begin(), f.ulpdu.end(), t->second.ulpdu.begin()),
                 "FPDU @%llu wire %u found beyond a hole is not an FPDU of the stream (crc %d "
                 "markers %d)",
                 (unsigned long long)f.offset, f.wire_length, int(cfg_.crc), int(cfg_.markers));
    }
    int v = verdicts_ == 3 ? static_cast<int>(rng_.below(3)) : verdicts_;
    if (v == 0) {
      placed[f.offset] = f.wire_length;
      return OooVerdict::Placed;
    }
    return v == 1 ? OooVerdict::Wait : OooVerdict::Invalid;
  }

  void on_claimed_reached(std::uint64_t offset, std::uint32_t wire_length) override {
    FUZZ_CHECK(offset == delivered, "claimed FPDU @%llu reached at %llu",
               (unsigned long long)offset, (unsigned long long)delivered);
    auto it = placed.find(offset);
    FUZZ_CHECK(it != placed.end() && it->second == wire_length,
               "reached @%llu+%u, which was never placed", (unsigned long long)offset, wire_length);
    FUZZ_CHECK(!reached.count(offset), "placed FPDU @%llu reached twice",
               (unsigned long long)offset);
    reached.insert(offset);
    if (record) stream.resize(stream.size() + wire_length, 0);  // filled in by the caller
    delivered += wire_length;
  }

 private:
  const Model& m_;
  FramingConfig cfg_;
  int verdicts_;
  Rng& rng_;
};

void check_state(const SegmentReceiver& rx, const Model& m, const Checker& c) {
  FUZZ_CHECK(rx.in_order() == c.delivered, "in-order point %llu, delivered up to %llu",
             (unsigned long long)rx.in_order(), (unsigned long long)c.delivered);
  FUZZ_CHECK(rx.in_order() == m.prefix(), "in-order point %llu, received prefix %llu",
             (unsigned long long)rx.in_order(), (unsigned long long)m.prefix());
  const auto h = rx.holes();
  const auto mh = m.holes();
  FUZZ_CHECK(h == mh, "%zu holes, the model has %zu (first at %llu vs %llu)", h.size(), mh.size(),
             (unsigned long long)(h.empty() ? 0 : h[0].begin),
             (unsigned long long)(mh.empty() ? 0 : mh[0].begin));
  FUZZ_CHECK(rx.has_holes() == !mh.empty(), "has_holes");
  FUZZ_CHECK(rx.held_bytes() == m.held(), "held %zu, the model %zu", rx.held_bytes(), m.held());
  // Every placed FPDU behind the in-order point was reached, not streamed.
  for (auto [off, w] : c.placed)
    if (off < rx.in_order())
      FUZZ_CHECK(c.reached.count(off), "placed FPDU @%llu passed without on_claimed_reached",
                 (unsigned long long)off);
}

struct Seg {
  std::uint64_t off;
  Bytes data;
};

void feed(SegmentReceiver& rx, Model& m, Checker& c, TcpSeq start, std::int64_t off,
          ByteSpan data) {
  const TcpSeq seq = start + static_cast<std::uint32_t>(off);
  if (off >= 0) {
    // What the receiver will take (the part at or beyond its in-order point).
    const std::uint64_t from =
        std::max<std::uint64_t>(static_cast<std::uint64_t>(off), rx.in_order());
    if (from < static_cast<std::uint64_t>(off) + data.size())
      m.add(from, data.subspan(from - static_cast<std::uint64_t>(off)));
  } else if (off + static_cast<std::int64_t>(data.size()) > 0) {
    const std::uint64_t skip = static_cast<std::uint64_t>(-off);
    const std::uint64_t from = std::max<std::uint64_t>(0, rx.in_order());
    if (from < data.size() - skip) m.add(from, data.subspan(static_cast<std::size_t>(skip + from)));
  }
  static const bool debug = std::getenv("FUZZ_DEBUG") != nullptr;
  if (debug)
    std::fprintf(stderr, "segment offset %lld length %zu (seq %u)%s\n", static_cast<long long>(off),
                 data.size(), seq.value(), data.size() <= 8 ? " (short)" : "");
  rx.receive(seq, data, c);
  check_state(rx, m, c);
}

void raw_mode(Input& in, FramingConfig cfg, int verdicts, TcpSeq start, Rng& rng) {
  SegmentReceiver rx(cfg, start);
  Model m;
  Checker c(m, cfg, verdicts, rng);
  c.rx = &rx;
  int segments = 0;
  while (!in.empty() && segments++ < 512) {
    const std::int64_t off = static_cast<std::int64_t>(in.u16()) - 256;
    const std::size_t len = in.u16() & 0x7FF;
    feed(rx, m, c, start, off, in.take(len));
  }
}

void valid_mode(Input& in, FramingConfig cfg, int verdicts, TcpSeq start, Rng& rng) {
  // The original stream: FPDUs whose ULPDU sizes and contents come from the input.
  const std::uint8_t style = in.u8();
  const int nfpdu = 1 + in.u8() % 48;
  FpduEncoder enc(cfg);
  Bytes stream;
  std::map<std::uint64_t, TrueFpdu> truth;
  std::vector<std::uint64_t> bounds{0};
  for (int i = 0; i < nfpdu && stream.size() < 24000; ++i) {
    const std::uint8_t s = in.u8();
    std::size_t len = 14 + (s & 0x3F);
    if (s & 0x40) len += 200 + (s & 0x3F) * 20;
    if ((s & 0xC0) == 0xC0) len += 1500;
    Bytes ulpdu(len);
    ByteSpan src = in.take(len);
    for (std::size_t k = 0; k < len; ++k)
      ulpdu[k] = k < src.size() ? src[k] : static_cast<std::uint8_t>(rng.next());
    const std::uint64_t at = stream.size();
    auto r = enc.encode(ulpdu, stream);
    FUZZ_CHECK(r.has_value(), "encode");
    truth[at] = TrueFpdu{at, static_cast<std::uint32_t>(*r), ulpdu};
    bounds.push_back(stream.size());
  }
  // Segments: cut at FPDU boundaries (one or more FPDUs each), or anywhere.
  const int cut = style & 3;  // 0 aligned, 1 anywhere, 2 mixed, 3 aligned + re-cut retransmits
  std::vector<Seg> segs;
  for (std::size_t i = 0; i + 1 < bounds.size();) {
    std::uint64_t b = bounds[i];
    std::size_t j = i + 1 + rng.below(3);
    j = std::min(j, bounds.size() - 1);
    std::uint64_t e = bounds[j];
    if (cut == 1 || (cut == 2 && rng.below(2))) {
      // Anywhere: pieces of 1 .. 1500 octets.
      for (std::uint64_t p = b; p < e;) {
        const std::uint64_t q = std::min<std::uint64_t>(e, p + 1 + rng.below(1500));
        segs.push_back({p, Bytes(stream.begin() + static_cast<std::ptrdiff_t>(p),
                                 stream.begin() + static_cast<std::ptrdiff_t>(q))});
        p = q;
      }
    } else {
      segs.push_back({b, Bytes(stream.begin() + static_cast<std::ptrdiff_t>(b),
                               stream.begin() + static_cast<std::ptrdiff_t>(e))});
    }
    i = j;
  }
  // Disorder: a seeded shuffle, then duplicates and overlapping retransmissions.
  const std::size_t n = segs.size();
  std::vector<Seg> order = segs;
  for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  const int dups = (style >> 2) & 7;
  bool recut = false;
  for (int k = 0; k < dups && n > 0; ++k) {
    Seg s = segs[rng.below(n)];
    if (cut == 3 || (style & 0x20)) {
      // A retransmission re-cut at an arbitrary point (TCP may re-segment).
      const std::size_t at = rng.below(s.data.size() + 1);
      Seg tail{s.off + at, Bytes(s.data.begin() + static_cast<std::ptrdiff_t>(at), s.data.end())};
      s.data.resize(at);
      recut = true;
      if (!tail.data.empty()) order.insert(order.begin() + rng.below(order.size() + 1), tail);
    }
    if (!s.data.empty()) order.insert(order.begin() + rng.below(order.size() + 1), s);
  }
  // FPDUs found beyond holes must be real ones whenever the framing makes them provable.
  const bool aligned = cut == 0 && !recut;
  // With markers a marker proves where its FPDU starts, and no FPDU starts inside or right
  // after a marker (RFC 5044 §5). A good CRC proves nothing here: a ULPDU may itself carry a
  // CRC-valid FPDU chain (the fuzzer copied one in from a seed), and a segment cut right at it
  // is, octet for octet, a stream whose FPDUs start there; only a sender that cuts at FPDU
  // boundaries (RFC 5044 §8) or markers rule that out.
  const bool strict = aligned || cfg.markers;

  SegmentReceiver rx(cfg, start);
  Model m;
  Checker c(m, cfg, verdicts, rng);
  c.rx = &rx;
  c.record = true;
  if (strict) c.truth = &truth;
  if (std::getenv("FUZZ_DEBUG")) {
    std::fprintf(stderr, "stream of %zu octets (crc %d markers %d), FPDUs at:", stream.size(),
                 int(cfg.crc), int(cfg.markers));
    for (const auto& [off, t] : truth)
      std::fprintf(stderr, " %llu+%u", (unsigned long long)off, t.wire);
    std::fprintf(stderr, "\n");
  }
  for (const auto& s : order)
    feed(rx, m, c, start, static_cast<std::int64_t>(s.off), ByteSpan(s.data));

  FUZZ_CHECK(rx.in_order() == stream.size(), "in-order point %llu after all %zu octets arrived",
             (unsigned long long)rx.in_order(), stream.size());
  FUZZ_CHECK(!rx.has_holes() && rx.held_bytes() == 0, "holes or held octets left");
  FUZZ_CHECK(c.stream.size() == stream.size(), "delivered %zu of %zu", c.stream.size(),
             stream.size());
  // Placed FPDUs were skipped in the delivered copy: put the originals there and compare.
  for (auto [off, w] : c.placed)
    std::copy(stream.begin() + static_cast<std::ptrdiff_t>(off),
              stream.begin() + static_cast<std::ptrdiff_t>(off + w),
              c.stream.begin() + static_cast<std::ptrdiff_t>(off));
  FUZZ_CHECK(c.stream == stream, "the delivered stream differs from the original");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  Input in(data, size);
  const std::uint8_t mode = in.u8();
  const FramingConfig cfg{(mode & 1) != 0, (mode & 2) != 0};
  const int verdicts = (mode >> 3) & 3;
  const TcpSeq start{in.u32()};
  Rng rng(in.u16() + 0x1234);
  if (mode & 4)
    valid_mode(in, cfg, verdicts, start, rng);
  else
    raw_mode(in, cfg, verdicts, start, rng);
  return 0;
}
