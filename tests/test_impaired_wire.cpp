// The simulated impaired wire (sim/impaired_wire): parsing --wire specs, StreamCutter's
// FPDU-aligned segmentation, SegmentDisorder's seeded disorder, and the whole wire feeding a
// SegmentReceiver. Streams are real FPDUs (FpduEncoder) of real DDP segments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ddp/ddp_header.hpp"
#include "framing_support.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/segment_receiver.hpp"
#include "sim/impaired_wire.hpp"

namespace iwarp::sim {
namespace {

using mpa::FramingConfig;
using test::encode_stream;
using test::framing_name;
using test::kBoth;
using test::kCrc;
using test::kMarkers;
using test::kNone;
using test::param_name;
using test::Rng;
using test::Stream;
using test::TrueFpdu;
using test::uniform;

// Random FPDUs: tagged RDMA Writes and untagged Sends with random payloads of 0..max_payload.
// The last FPDU's payload is `last_payload` octets when given.
Stream make_stream(FramingConfig cfg, std::uint64_t seed, std::size_t n,
                   std::size_t max_payload = 3000, std::optional<std::size_t> last_payload = {}) {
  Rng rng(seed);
  std::vector<Bytes> ulpdus;
  for (std::size_t i = 0; i < n; ++i) {
    Bytes u;
    if (rng() % 2)
      ddp::tagged_header(rdmap::Opcode::Write, STag{static_cast<std::uint32_t>(rng())},
                         TaggedOffset{rng() % 100000})
          .encode(u);
    else
      ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0},
                           Msn{static_cast<std::uint32_t>(i + 1)}, MessageOffset{0})
          .encode(u);
    std::size_t len = rng() % 5 == 0 ? uniform(rng, 0, 20) : uniform(rng, 0, max_payload);
    if (last_payload && i + 1 == n) len = *last_payload;
    for (std::size_t k = 0; k < len; ++k) u.push_back(static_cast<std::uint8_t>(rng()));
    ulpdus.push_back(std::move(u));
  }
  return encode_stream(cfg, ulpdus);
}

// ---------------------------------------------------------------------------------------------
// parse_wire_impairment

TEST(ImpairedWireParse, AcceptsAFullSpecInAnyOrderAndRoundTripsDescribe) {
  auto w = parse_wire_impairment("reorder=0.3,dup=0.05,delay=4,seed=7,mss=1460");
  ASSERT_TRUE(w.has_value()) << w.error();
  EXPECT_DOUBLE_EQ(w->reorder, 0.3);
  EXPECT_DOUBLE_EQ(w->dup, 0.05);
  EXPECT_EQ(w->delay, 4u);
  EXPECT_EQ(w->seed, 7u);
  EXPECT_EQ(w->mss, 1460u);
  auto w2 = parse_wire_impairment("mss=1460,seed=7,delay=4,dup=0.05,reorder=0.3");
  ASSERT_TRUE(w2.has_value()) << w2.error();
  EXPECT_EQ(w2->describe(), w->describe());
  auto back = parse_wire_impairment(w->describe());
  ASSERT_TRUE(back.has_value()) << back.error();
  EXPECT_DOUBLE_EQ(back->reorder, 0.3);
  EXPECT_DOUBLE_EQ(back->dup, 0.05);
  EXPECT_EQ(back->delay, 4u);
  EXPECT_EQ(back->seed, 7u);
  EXPECT_EQ(back->mss, 1460u);

  // A subset keeps the defaults for the rest.
  auto d = parse_wire_impairment("dup=1");
  ASSERT_TRUE(d.has_value()) << d.error();
  const WireImpairment def;
  EXPECT_DOUBLE_EQ(d->dup, 1.0);
  EXPECT_DOUBLE_EQ(d->reorder, def.reorder);
  EXPECT_EQ(d->delay, def.delay);
  EXPECT_EQ(d->seed, def.seed);
  EXPECT_EQ(d->mss, def.mss);

  // The ends of every range.
  for (const char* ok : {"reorder=0", "reorder=1", "dup=0.0", "delay=1", "delay=1000", "mss=64",
                         "mss=65535", "seed=0", "seed=18446744073709551615"}) {
    auto r = parse_wire_impairment(ok);
    EXPECT_TRUE(r.has_value()) << ok << ": " << (r ? "" : r.error());
  }
  EXPECT_EQ(parse_wire_impairment("seed=18446744073709551615")->seed, ~std::uint64_t{0});
}

TEST(ImpairedWireParse, EachErrorIsOneLineNamingTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"jitter=3", "jitter"},
      {"reorder=0.3,loss=0.1", "loss"},
      {"reorder=1.5", "reorder"},
      {"reorder=-0.1", "reorder"},
      {"reorder=abc", "reorder"},
      {"reorder=", "reorder"},
      {"reorder=0.5x", "reorder"},
      {"dup=2", "dup"},
      {"dup=inf", "dup"},
      {"delay=0", "delay"},
      {"delay=1001", "delay"},
      {"delay=-1", "delay"},
      {"delay=4.5", "delay"},
      {"mss=63", "mss"},
      {"mss=65536", "mss"},
      {"seed=-1", "seed"},
      {"seed=18446744073709551616", "seed"},
      {"seed=x", "seed"},
      {"reorder", "reorder"},
      {"reorder=0.1,dup", "dup"},
      {"reorder=0.1,mss=10", "mss"},
  };
  for (const auto& [spec, key] : cases) {
    auto r = parse_wire_impairment(spec);
    ASSERT_FALSE(r.has_value()) << spec << " was accepted";
    EXPECT_NE(r.error().find(key), std::string::npos) << spec << " -> " << r.error();
    EXPECT_EQ(r.error().find('\n'), std::string::npos) << spec << " -> " << r.error();
    EXPECT_FALSE(r.error().empty());
  }
  auto e = parse_wire_impairment("");
  ASSERT_FALSE(e.has_value());
  EXPECT_FALSE(e.error().empty());
  EXPECT_EQ(e.error().find('\n'), std::string::npos);
}

// NaN is no probability between 0 and 1 (std::from_chars reads "nan").
TEST(ImpairedWireParse, NanIsNotAProbability) {
  for (const char* spec : {"reorder=nan", "dup=nan"}) {
    auto r = parse_wire_impairment(spec);
    EXPECT_FALSE(r.has_value()) << spec << " accepted as probability "
                                << (r ? (std::string(spec)[0] == 'r' ? r->reorder : r->dup) : 0.0);
  }
}

// ---------------------------------------------------------------------------------------------
// StreamCutter

struct Cut {
  std::vector<WireSegment> segs;
  SegmentOut out() {
    return [this](WireSegment s) { segs.push_back(std::move(s)); };
  }
};

Cut cut_stream(const Stream& s, std::size_t mss, TcpSeq start, Rng* chunk_rng) {
  StreamCutter c(s.cfg, mss, start);
  Cut cut;
  const auto out = cut.out();
  if (!chunk_rng) {
    c.push(s.bytes, out);
  } else {
    std::size_t off = 0;
    while (off < s.bytes.size()) {
      const std::size_t n = std::min(s.bytes.size() - off, uniform(*chunk_rng, 1, 2500));
      c.push(ByteSpan(s.bytes).subspan(off, n), out);
      off += n;
    }
  }
  c.flush(out);
  return cut;
}

// Segments concatenate to the stream with consecutive sequence numbers, hold at most `mss`
// octets, and start and end on FPDU boundaries except where an FPDU larger than `mss` is cut.
// `full`: each segment holds as many whole FPDUs as fit.
void check_cut(const Stream& s, const std::vector<WireSegment>& segs, std::size_t mss, TcpSeq start,
               bool full) {
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const auto& g = segs[i];
    SCOPED_TRACE("segment " + std::to_string(i) + " at " + std::to_string(off));
    ASSERT_EQ(g.seq, start + static_cast<std::uint32_t>(off));
    ASSERT_FALSE(g.payload.empty());
    ASSERT_LE(g.payload.size(), mss);
    ASSERT_LE(off + g.payload.size(), s.bytes.size());
    ASSERT_TRUE(
        std::equal(g.payload.begin(), g.payload.end(), s.bytes.begin() + static_cast<long>(off)));
    const std::uint64_t end = off + g.payload.size();
    if (!s.is_boundary(off)) {
      // Continues an FPDU larger than a segment, cut at the MSS by the segment before.
      EXPECT_GT(s.containing(off).wire, mss);
      EXPECT_EQ(segs[i - 1].payload.size(), mss);
    }
    if (!s.is_boundary(end)) {
      EXPECT_GT(s.containing(end).wire, mss) << "cut inside an FPDU that fits a segment";
      EXPECT_EQ(g.payload.size(), mss);
    } else if (full && end < s.bytes.size()) {
      EXPECT_GT(s.containing(end).end() - off, mss)
          << "the next FPDU would have fit in this segment too";
    }
    off = end;
  }
  EXPECT_EQ(off, s.bytes.size());
}

class StreamCutterFraming : public ::testing::TestWithParam<FramingConfig> {};

INSTANTIATE_TEST_SUITE_P(StreamCutter, StreamCutterFraming,
                         ::testing::Values(kNone, kCrc, kMarkers, kBoth), param_name);

constexpr std::size_t kMssChoices[] = {64, 100, 536, 1460, 4000};

TEST_P(StreamCutterFraming, SegmentsAreFpduAlignedBoundedAndFull) {
  std::size_t cut_fpdus = 0, multi = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Stream s = make_stream(GetParam(), seed, 30);
    const std::size_t mss = kMssChoices[seed % std::size(kMssChoices)];
    const TcpSeq start{static_cast<std::uint32_t>(0u - 3000u * seed)};  // wraps
    const Cut c = cut_stream(s, mss, start, nullptr);
    check_cut(s, c.segs, mss, start, true);
    if (HasFatalFailure()) return;
    std::uint64_t off = 0;
    for (const auto& g : c.segs) {
      if (!s.is_boundary(off)) ++cut_fpdus;
      std::size_t starts = 0;
      for (std::uint64_t p = off; p < off + g.payload.size(); ++p) starts += s.is_boundary(p);
      if (starts > 1) ++multi;
      off += g.payload.size();
    }
  }
  EXPECT_GT(cut_fpdus, 0u);  // both cases were exercised
  EXPECT_GT(multi, 0u);
}

TEST_P(StreamCutterFraming, ChunkedInputStaysAlignedAndBounded) {
  for (std::uint64_t seed = 21; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Stream s = make_stream(GetParam(), seed, 30);
    const std::size_t mss = kMssChoices[seed % std::size(kMssChoices)];
    Rng chunks(seed);
    const TcpSeq start{static_cast<std::uint32_t>(seed * 1000003u)};
    const Cut c = cut_stream(s, mss, start, &chunks);
    check_cut(s, c.segs, mss, start, false);
    if (HasFatalFailure()) return;
  }
}

// Like a sender with Nagle off, the cutter sends whole FPDUs as soon as it has them: FPDUs
// pushed together share a segment (up to the MSS), an FPDU whose successor has not been pushed
// yet goes alone rather than waiting (chunking changes the cut, never the alignment).
TEST(StreamCutter, WholeFpdusGoAtOnceAndShareASegmentWhenPushedTogether) {
  const Stream s = make_stream(kCrc, 3, 2, 200);
  ASSERT_LE(s.bytes.size(), 1460u);
  {
    StreamCutter c(kCrc, 1460, TcpSeq{0});
    Cut cut;
    const auto out = cut.out();
    c.push(s.bytes, out);
    ASSERT_EQ(cut.segs.size(), 1u) << "both FPDUs in one segment";
    EXPECT_EQ(cut.segs[0].payload, s.bytes);
  }
  {
    StreamCutter c(kCrc, 1460, TcpSeq{0});
    Cut cut;
    const auto out = cut.out();
    c.push(ByteSpan(s.bytes).subspan(0, s.fpdus[0].wire + 4), out);
    ASSERT_EQ(cut.segs.size(), 1u) << "FPDU A goes at once, without waiting for B";
    EXPECT_EQ(cut.segs[0].payload.size(), s.fpdus[0].wire);
    c.push(ByteSpan(s.bytes).subspan(s.fpdus[0].wire + 4), out);
    ASSERT_EQ(cut.segs.size(), 2u);
    EXPECT_EQ(cut.segs[1].seq, TcpSeq{0} + static_cast<std::uint32_t>(s.fpdus[0].wire));
    EXPECT_EQ(cut.segs[1].payload.size(), s.fpdus[1].wire);
  }
}

TEST_P(StreamCutterFraming, WaitsForTheRestOfAnFpduUntilFlush) {
  const Stream s = make_stream(GetParam(), 77, 12, 1000, 30);
  // The last FPDU small, and its last 5 octets not yet pushed.
  ASSERT_LT(s.fpdus.back().wire, 100u);
  const std::size_t mss = 1460;
  StreamCutter c(GetParam(), mss, TcpSeq{500});
  Cut cut;
  const auto out = cut.out();
  const std::size_t held_back = 5;
  c.push(ByteSpan(s.bytes).first(s.bytes.size() - held_back), out);
  std::uint64_t emitted = 0;
  for (const auto& g : cut.segs) emitted += g.payload.size();
  EXPECT_TRUE(s.is_boundary(emitted));
  EXPECT_LE(emitted, s.fpdus.back().offset) << "part of the incomplete FPDU was cut off";
  c.flush(out);
  Bytes all;
  for (const auto& g : cut.segs) {
    EXPECT_LE(g.payload.size(), mss);
    all.insert(all.end(), g.payload.begin(), g.payload.end());
  }
  EXPECT_EQ(all, Bytes(s.bytes.begin(), s.bytes.end() - static_cast<long>(held_back)));
}

// ---------------------------------------------------------------------------------------------
// SegmentDisorder

std::vector<WireSegment> make_segments(std::uint64_t seed, std::size_t n, TcpSeq start,
                                       Bytes& stream) {
  Rng rng(seed);
  std::vector<WireSegment> segs;
  TcpSeq seq = start;
  for (std::size_t i = 0; i < n; ++i) {
    Bytes p(uniform(rng, 1, 1500));
    for (auto& b : p) b = static_cast<std::uint8_t>(rng());
    stream.insert(stream.end(), p.begin(), p.end());
    segs.push_back({seq, p});
    seq += static_cast<std::uint32_t>(p.size());
  }
  return segs;
}

// What came out, and during which push.
struct Outcome {
  std::vector<WireSegment> out;
  std::vector<std::size_t> during;  // index of the push (segments.size() for flush)
};

Outcome run_disorder(const WireImpairment& w, const std::vector<WireSegment>& segs,
                     SegmentDisorder* keep = nullptr) {
  SegmentDisorder local(w);
  SegmentDisorder& d = keep ? *keep : local;
  Outcome o;
  std::size_t now = 0;
  const SegmentOut out = [&](WireSegment s) {
    o.out.push_back(std::move(s));
    o.during.push_back(now);
  };
  for (now = 0; now < segs.size(); ++now) d.push(segs[now], out);
  d.flush(out);
  EXPECT_FALSE(d.holding());
  return o;
}

TEST(SegmentDisorder, EveryOctetArrivesAtLeastOnceWithItsOwnBytes) {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const TcpSeq start{0xFFFF0000u};
    Bytes stream;
    const auto segs = make_segments(seed, 200, start, stream);
    WireImpairment w;
    w.reorder = 0.3;
    w.dup = 0.2;
    w.delay = 1 + static_cast<unsigned>(seed % 6);
    w.seed = seed;
    SegmentDisorder d(w);
    const Outcome o = run_disorder(w, segs, &d);
    std::vector<int> seen(stream.size(), 0);
    for (const auto& g : o.out) {
      const std::uint64_t off = static_cast<std::uint32_t>(g.seq - start);
      ASSERT_LE(off + g.payload.size(), stream.size());
      ASSERT_TRUE(
          std::equal(g.payload.begin(), g.payload.end(), stream.begin() + static_cast<long>(off)));
      for (std::size_t i = 0; i < g.payload.size(); ++i) ++seen[off + i];
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 0), 0);
    const auto& st = d.stats();
    EXPECT_EQ(st.segments, segs.size());
    EXPECT_EQ(o.out.size(), segs.size() + st.duplicated + st.overlapped);
  }
}

TEST(SegmentDisorder, StatsCountHeldDuplicatedAndOverlapped) {
  std::uint64_t held = 0, dup = 0, ovl = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Bytes stream;
    const auto segs = make_segments(seed + 100, 150, TcpSeq{1}, stream);
    WireImpairment w;
    w.reorder = 0.25;
    w.dup = 0.3;
    w.delay = 5;
    w.seed = seed;
    SegmentDisorder d(w);
    const Outcome o = run_disorder(w, segs, &d);
    std::map<std::uint32_t, std::size_t> index;  // seq -> input segment
    for (std::size_t i = 0; i < segs.size(); ++i) index[segs[i].seq.value()] = i;
    std::vector<int> whole(segs.size(), 0);
    std::vector<bool> out_during_own_push(segs.size(), false);
    std::uint64_t tails = 0;
    for (std::size_t k = 0; k < o.out.size(); ++k) {
      const auto& g = o.out[k];
      auto it = index.find(g.seq.value());
      if (it != index.end() && segs[it->second].payload.size() == g.payload.size()) {
        ++whole[it->second];
        if (o.during[k] == it->second) out_during_own_push[it->second] = true;
        continue;
      }
      // An overlapping retransmission: a proper tail of one input segment.
      auto up = index.upper_bound(g.seq.value());
      ASSERT_NE(up, index.begin());
      const auto& src = segs[std::prev(up)->second];
      EXPECT_GT(g.seq.value(), src.seq.value());
      EXPECT_EQ(g.seq.value() + g.payload.size(), src.seq.value() + src.payload.size());
      ++tails;
    }
    std::uint64_t n_held = 0, n_dup = 0;
    for (std::size_t i = 0; i < segs.size(); ++i) {
      EXPECT_GE(whole[i], 1);
      n_dup += static_cast<std::uint64_t>(whole[i] - 1);
      n_held += !out_during_own_push[i];
    }
    const auto& st = d.stats();
    EXPECT_EQ(st.held, n_held);
    EXPECT_EQ(st.duplicated, n_dup);
    EXPECT_EQ(st.overlapped, tails);
    held += st.held;
    dup += st.duplicated;
    ovl += st.overlapped;
  }
  EXPECT_GT(held, 0u);
  EXPECT_GT(dup, 0u);
  EXPECT_GT(ovl, 0u);
}

// A held segment arrives after 1..delay later segments that were not held themselves.
TEST(SegmentDisorder, HeldSegmentsArriveWithinDelay) {
  for (unsigned delay : {1u, 2u, 4u, 9u}) {
    SCOPED_TRACE("delay " + std::to_string(delay));
    Bytes stream;
    const auto segs = make_segments(delay, 300, TcpSeq{0}, stream);
    WireImpairment w;
    w.reorder = 0.3;
    w.delay = delay;
    w.seed = delay * 31;
    const Outcome o = run_disorder(w, segs);
    ASSERT_EQ(o.out.size(), segs.size());
    std::map<std::uint32_t, std::size_t> index;
    for (std::size_t i = 0; i < segs.size(); ++i) index[segs[i].seq.value()] = i;
    std::vector<bool> passed(segs.size(), false);  // came out during its own push
    std::vector<std::size_t> when(segs.size());
    for (std::size_t k = 0; k < o.out.size(); ++k) {
      const std::size_t i = index.at(o.out[k].seq.value());
      when[i] = o.during[k];
      passed[i] = o.during[k] == i;
    }
    unsigned max_seen = 0;
    for (std::size_t i = 0; i < segs.size(); ++i) {
      if (passed[i] || when[i] == segs.size()) continue;  // not held, or released by flush
      unsigned later = 0;  // not-held pushes after its own, up to the one that released it
      for (std::size_t j = i + 1; j <= when[i]; ++j) later += passed[j];
      EXPECT_GE(later, 1u) << "segment " << i;
      EXPECT_LE(later, delay) << "segment " << i;
      EXPECT_TRUE(passed[when[i]]) << "released during a push that was itself held";
      max_seen = std::max(max_seen, later);
    }
    EXPECT_GE(max_seen, 1u);
  }
}

TEST(SegmentDisorder, SameSeedSameSequenceOtherSeedAnother) {
  Bytes stream;
  const auto segs = make_segments(5, 200, TcpSeq{77}, stream);
  auto signature = [&](std::uint64_t seed) {
    WireImpairment w;
    w.reorder = 0.3;
    w.dup = 0.1;
    w.seed = seed;
    std::vector<std::pair<std::uint32_t, std::size_t>> sig;
    for (const auto& g : run_disorder(w, segs).out)
      sig.emplace_back(g.seq.value(), g.payload.size());
    return sig;
  };
  const auto a = signature(7);
  EXPECT_EQ(a, signature(7));
  EXPECT_NE(a, signature(8));
  EXPECT_NE(a, signature(9));
}

TEST(SegmentDisorder, NoReorderNoDupIsTheIdentity) {
  Bytes stream;
  const auto segs = make_segments(9, 100, TcpSeq{0xFFFFFFF0u}, stream);
  WireImpairment w;  // reorder=0, dup=0
  w.seed = 1234;
  SegmentDisorder d(w);
  const Outcome o = run_disorder(w, segs, &d);
  ASSERT_EQ(o.out.size(), segs.size());
  for (std::size_t i = 0; i < segs.size(); ++i) {
    EXPECT_EQ(o.out[i].seq, segs[i].seq);
    EXPECT_EQ(o.out[i].payload, segs[i].payload);
    EXPECT_EQ(o.during[i], i);  // at once, during its own push
  }
  EXPECT_EQ(d.stats().held, 0u);
  EXPECT_EQ(d.stats().duplicated, 0u);
  EXPECT_EQ(d.stats().overlapped, 0u);
}

// WireImpairment is a plain struct: delay=0 can reach SegmentDisorder without the parser (which
// rejects it). The hold-back path treats it as 1; the duplicate path must not divide by it.
TEST(SegmentDisorder, ZeroDelayDoesNotDivideByZero) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        WireImpairment w;
        w.dup = 1;
        w.delay = 0;
        SegmentDisorder d(w);
        std::size_t n = 0;
        const SegmentOut out = [&](WireSegment) { ++n; };
        d.push(WireSegment{TcpSeq{0}, Bytes(10, 1)}, out);
        d.flush(out);
        std::exit(n == 2 ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------------------------
// ImpairedWire

TEST(ImpairedWire, MssOverridesTheConnectionsEmss) {
  const Stream s = make_stream(kBoth, 13, 30);
  for (std::size_t wmss : {std::size_t{0}, std::size_t{200}}) {
    WireImpairment w;
    w.mss = wmss;
    ImpairedWire wire(w, kBoth, 1460, TcpSeq{10});
    std::vector<WireSegment> segs;
    const SegmentOut out = [&](WireSegment g) { segs.push_back(std::move(g)); };
    wire.push(s.bytes, out);
    wire.flush(out);
    std::size_t largest = 0;
    Bytes all;
    for (const auto& g : segs) {
      largest = std::max(largest, g.payload.size());
      all.insert(all.end(), g.payload.begin(), g.payload.end());
    }
    EXPECT_EQ(all, s.bytes);
    if (wmss) {
      EXPECT_EQ(largest, wmss);
    } else {
      EXPECT_LE(largest, 1460u);
      EXPECT_GT(largest, 1000u);
    }
  }
}

// Places everything it is offered and rebuilds the stream from the in-order octets and the
// placed FPDUs; counts offers that are not FPDUs of the original stream.
class PlaceAll : public mpa::SegmentVisitor {
 public:
  explicit PlaceAll(const Stream& s) : s_(s) {
    for (const auto& f : s.fpdus) truth_[f.offset] = &f;
  }
  void on_stream(ByteSpan b) override {
    rebuilt.insert(rebuilt.end(), b.begin(), b.end());
    pos += b.size();
  }
  mpa::OooVerdict on_ooo_fpdu(const mpa::OooFpdu& f, const mpa::Hole& hole) override {
    EXPECT_LE(hole.end, f.offset);
    const Bytes u(f.ulpdu.begin(), f.ulpdu.end());
    auto it = truth_.find(f.offset);
    if (it != truth_.end() && it->second->wire == f.wire_length && it->second->ulpdu == u)
      ++true_offers;
    else
      false_offsets.push_back(f.offset);
    EXPECT_TRUE(placed.emplace(f.offset, std::make_pair(u, 0)).second);
    return mpa::OooVerdict::Placed;
  }
  void on_claimed_reached(std::uint64_t offset, std::uint32_t wire_length) override {
    EXPECT_EQ(offset, pos);
    auto it = placed.find(offset);
    if (it == placed.end()) {
      ADD_FAILURE() << "reached an FPDU never placed at " << offset;
      return;
    }
    ++it->second.second;
    mpa::FpduEncoder(s_.cfg, offset).encode(it->second.first, rebuilt);
    pos += wire_length;
  }
  void on_hole_opened(const mpa::Hole&) override { ++opened; }
  void on_hole_closed(const mpa::Hole&, bool) override { ++closed; }

  Bytes rebuilt;
  std::uint64_t pos = 0;
  std::size_t true_offers = 0, opened = 0, closed = 0;
  std::vector<std::uint64_t> false_offsets;
  std::map<std::uint64_t, std::pair<Bytes, int>> placed;

 private:
  const Stream& s_;
  std::map<std::uint64_t, const TrueFpdu*> truth_;
};

class ImpairedWireFraming : public ::testing::TestWithParam<FramingConfig> {};

INSTANTIATE_TEST_SUITE_P(ImpairedWire, ImpairedWireFraming,
                         ::testing::Values(kNone, kCrc, kMarkers, kBoth), param_name);

TEST_P(ImpairedWireFraming, EndToEndIntoASegmentReceiverRebuildsTheStream) {
  const FramingConfig cfg = GetParam();
  std::size_t true_offers = 0, false_offers = 0, held = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Stream s = make_stream(cfg, seed * 101, 40);
    Rng rng(seed);
    const TcpSeq start{static_cast<std::uint32_t>(rng())};
    auto w = parse_wire_impairment("reorder=0.4,dup=0.1,seed=" + std::to_string(seed));
    ASSERT_TRUE(w.has_value());
    ImpairedWire wire(*w, cfg, 1460, start);
    mpa::SegmentReceiver rx(cfg, start);
    PlaceAll v(s);
    const SegmentOut out = [&](WireSegment g) { rx.receive(g.seq, g.payload, v); };
    std::size_t off = 0;
    while (off < s.bytes.size()) {
      const std::size_t n = std::min(s.bytes.size() - off, uniform(rng, 1, 4000));
      wire.push(ByteSpan(s.bytes).subspan(off, n), out);
      off += n;
    }
    wire.flush(out);
    EXPECT_FALSE(wire.holding());
    EXPECT_EQ(v.rebuilt, s.bytes);
    EXPECT_EQ(rx.in_order(), s.bytes.size());
    EXPECT_FALSE(rx.has_holes());
    EXPECT_EQ(rx.held_bytes(), 0u);
    EXPECT_EQ(v.opened, v.closed);
    EXPECT_EQ(rx.stats().holes_opened, rx.stats().holes_closed);
    EXPECT_TRUE(v.false_offsets.empty())
        << "offered non-FPDUs at " << ::testing::PrintToString(v.false_offsets);
    for (const auto& [o, p] : v.placed) EXPECT_EQ(p.second, 1) << "placed FPDU at " << o;
    true_offers += v.true_offers;
    false_offers += v.false_offsets.size();
    held += wire.stats().held;
  }
  EXPECT_GT(held, 0u);
  EXPECT_GT(true_offers, 0u);
  RecordProperty("false_offers", static_cast<int>(false_offers));
}

}  // namespace
}  // namespace iwarp::sim
