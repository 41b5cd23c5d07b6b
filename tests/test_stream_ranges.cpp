// replay::stream_ranges: the octets of many ranges of connections' streams in one more read of
// the capture (what `rnic replay --html` shows of each message), for a plan whose steps are read
// again, must be those the steps of the same capture's kept plan carry (StreamOctets: each octet
// from the first segment in capture order that carried it, the renumbering's patches applied),
// range for range, on every capture of the corpus, with frames dropped, with the sequence space
// wrapping, and with a retransmission that carries other octets than the first copy.
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "replay/replay_plan.hpp"
#include "replay/stream_ranges.hpp"
#include "tests/corpus_files.hpp"
#include "tests/pcap_frames.hpp"
#include "trace/pcap_reader.hpp"
#include "trace/trace_decoder.hpp"
#include "trace/trace_generator.hpp"

namespace iwarp::replay {
namespace {

std::vector<std::string> corpus() {
  return ::testing_support::corpus_captures();
}

std::string temp(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) /
          ("stream_ranges_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// Every MPA frame and FPDU `rnic decode` finds in the plan's connections, as a range (at most
// 300 octets of each, so that the ranges of one message overlap none of another's), and a range
// past each direction's end (the capture holds none of it).
std::vector<StreamRange> ranges_of(const std::string& path, const Plan& plan) {
  std::vector<StreamRange> out;
  auto rep = trace::decode_file(path, [&](trace::Record&& r) {
    if (r.kind != trace::Record::Kind::MpaFrame && r.kind != trace::Record::Kind::Fpdu) return;
    for (const auto& c : plan.connections)
      if (c.flow == r.flow)
        out.push_back({r.flow, r.dir, r.offset, std::min<std::uint32_t>(r.length, 300)});
  });
  EXPECT_TRUE(rep) << rep.error();
  for (const auto& c : plan.connections)
    for (auto d : {mpa::Direction::FromInitiator, mpa::Direction::FromResponder})
      out.push_back({c.flow, d, c.stream_length[index(d)] + 5, 64});
  return out;
}

// The octets of each range as the kept plan's steps carry them.
std::vector<Bytes> kept_octets(const Plan& kept, const std::vector<StreamRange>& ranges) {
  std::vector<Bytes> out;
  std::optional<trace::PayloadReader> reader;
  if (!kept.connections.empty() && kept.connections.front().file)
    reader.emplace(kept.connections.front().file);
  for (const auto& r : ranges) {
    const ConnectionPlan* cp = nullptr;
    for (const auto& c : kept.connections)
      if (c.flow == r.flow) cp = &c;
    out.push_back(cp ? StreamOctets(*cp).get(r.dir, r.offset, r.length, reader ? &*reader : nullptr)
                     : Bytes{});
  }
  return out;
}

// The capture's plan read again (as `rnic replay` of a file learns it) and its plan with kept
// steps, both with `drop` taken out; stream_ranges() of the first against StreamOctets of the
// second, range for range. Returns how many ranges had octets.
std::size_t expect_kept_octets(const std::string& path, const std::vector<std::uint64_t>& drop) {
  auto again = make_plan_from_file(path, {}, drop);
  if (!again) {
    EXPECT_TRUE(drop.empty()) << again.error();
    return 0;  // (no connection to replay)
  }
  auto cap = trace::read_capture(path, {.payloads_in_file = true});
  EXPECT_TRUE(cap) << cap.error();
  if (!cap) return 0;
  if (!drop.empty()) {
    EXPECT_TRUE(drop_frames(*cap, drop));
  }
  auto kept = make_plan(*cap, {}, StepSource::Kept);
  EXPECT_TRUE(kept) << kept.error();
  if (!kept) return 0;
  EXPECT_TRUE(std::ranges::any_of(again->connections, &ConnectionPlan::read_again))
      << "no connection's steps are read again: the test checks nothing";
  const auto ranges = ranges_of(path, *again);
  const auto got = stream_ranges(*again, ranges);
  const auto want = kept_octets(*kept, ranges);
  EXPECT_EQ(got.size(), ranges.size());
  std::size_t with = 0;
  for (std::size_t i = 0; i < ranges.size() && i < got.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << "range " << i << ": c" << ranges[i].flow << " dir "
                               << index(ranges[i].dir) << " [" << ranges[i].offset << ", +"
                               << ranges[i].length << ")";
    with += !got[i].empty();
  }
  // The same from the kept plan (its steps).
  EXPECT_EQ(stream_ranges(*kept, ranges), want);
  return with;
}

TEST(StreamRanges, ReadAgainGivesTheOctetsOfTheKeptPlansSteps) {
  std::size_t with = 0, files = 0;
  for (const auto& path : corpus()) {
    SCOPED_TRACE(path);
    const auto n = expect_kept_octets(path, {});
    with += n;
    files += n > 0;
  }
  EXPECT_GT(files, 8u);
  EXPECT_GT(with, 500u);
}

// Frames dropped (`rnic replay --drop`): the octets they carried are missing, unless a later
// segment carried them again; a range stops at the first octet missing.
TEST(StreamRanges, DroppedFramesLeaveTheirOctetsOut) {
  const std::string path =
      std::string(IWARP_SOURCE_DIR) + "/pcap_traces/generated/mpa2_p2p_read_crc.pcap";
  // Frames with data past the MPA exchange: the 10th, 11th, 20th... of the capture.
  std::vector<std::uint64_t> data;
  auto cap = trace::read_capture(path);
  ASSERT_TRUE(cap) << cap.error();
  for (const auto& f : cap->flows)
    for (const auto& dir : f.dir)
      for (const auto& sg : dir)
        if (sg.size() > 0) data.push_back(sg.frame);
  std::ranges::sort(data);
  ASSERT_GT(data.size(), 30u);
  std::size_t with = 0;
  for (const std::vector<std::uint64_t>& drop : {std::vector<std::uint64_t>{data[10]},
                                                 {data[11], data[12]},
                                                 {data[20], data[21], data[22], data[29]}}) {
    SCOPED_TRACE(::testing::PrintToString(drop));
    with += expect_kept_octets(path, drop);
  }
  EXPECT_GT(with, 20u);
}

// A stream whose sequence numbers wrap past 2^32 right after the MPA exchange (RFC 9293 §3.4):
// its octets are found on both sides of the wrap.
TEST(StreamRanges, SequenceNumbersThatWrapAreFollowed) {
  const auto path = temp("wrap.pcap");
  trace::GeneratorOptions g;
  g.pcap.client_isn = 0xffffff00u;
  g.pcap.server_isn = 0xfffffe00u;
  g.bulk_bytes = 256 * 1024;
  ASSERT_TRUE(trace::generate_conversation(path, g));
  EXPECT_GT(expect_kept_octets(path, {}), 20u);
  std::remove(path.c_str());
}

using testing_support::frames_of;
using testing_support::tcp_payload;
using testing_support::write_frames;

// A segment sent again carrying other octets: each octet comes from the first segment in capture
// order that carried it, whichever copy that is (as the replay injects it: its TCP receiver
// keeps the first copy).
TEST(StreamRanges, TheFirstCopyOfARetransmittedSegmentIsTheOneShown) {
  const auto path = temp("retx.pcap");
  trace::GeneratorOptions g;
  g.bulk_bytes = 64 * 1024;
  ASSERT_TRUE(trace::generate_conversation(path, g));
  auto frames = frames_of(path);
  ASSERT_GT(frames.size(), 60u);
  // A data segment in the bulk Writes (the 40th from the end, a full one).
  std::size_t at = 0;
  for (std::size_t i = frames.size() - 40; i > 0 && at == 0; --i)
    if (tcp_payload(frames[i].second).second >= 1000) at = i;
  ASSERT_NE(at, 0u);
  auto changed = frames[at];
  const auto [p, n] = tcp_payload(changed.second);
  for (std::size_t k = p + 100; k < p + n; ++k) changed.second[k] ^= 0x5a;
  for (const bool changed_first : {false, true}) {
    SCOPED_TRACE(changed_first ? "the changed copy first" : "the changed copy later");
    auto out = frames;
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(at + (changed_first ? 0 : 1)), changed);
    const auto cap_path = temp(changed_first ? "retx_first.pcap" : "retx_later.pcap");
    write_frames(cap_path, out);
    EXPECT_GT(expect_kept_octets(cap_path, {}), 20u);
    // The octets shown are the first copy's.
    auto plan = make_plan_from_file(cap_path);
    ASSERT_TRUE(plan) << plan.error();
    const auto& c = plan->connections.front();
    const auto& first = changed_first ? changed.second : frames[at].second;
    // (The segment's stream offset: its sequence number against the stream's start.)
    const std::uint32_t seq =
        static_cast<std::uint32_t>(first[p - 20 + 4] << 24 | first[p - 20 + 5] << 16 |
                                   first[p - 20 + 6] << 8 | first[p - 20 + 7]);
    const auto off = static_cast<std::uint64_t>(TcpSeq{seq} - c.stream_seq[0]);
    const StreamRange r{c.flow, mpa::Direction::FromInitiator, off, static_cast<std::uint32_t>(n)};
    const auto got = stream_ranges(*plan, std::span(&r, 1));
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0], Bytes(first.begin() + static_cast<std::ptrdiff_t>(p),
                            first.begin() + static_cast<std::ptrdiff_t>(p + n)));
    std::remove(cap_path.c_str());
  }
  std::remove(path.c_str());
}

// Garbage segments far ahead in a stream (sequence numbers 2^31 and 2^32 - 2 MiB past a real
// one, as a damaged capture may hold) move nothing: the octets of the segments after them are
// found where the replay puts them (a review found them lost when each segment's offset was
// taken from the furthest one before it).
TEST(StreamRanges, SegmentsFarAheadMoveNothing) {
  const auto path = temp("far.pcap");
  ASSERT_TRUE(trace::generate_conversation(path, {}));
  auto frames = frames_of(path);
  // The 12th frame with data.
  std::size_t at = 0, seen = 0;
  for (std::size_t i = 0; i < frames.size() && at == 0; ++i)
    if (tcp_payload(frames[i].second).second > 0 && ++seen == 12) at = i;
  ASSERT_NE(at, 0u);
  auto out = frames;
  std::size_t put = at + 1;  // (in this order: each jump less than 2^31 past the one before)
  for (const std::uint32_t ahead : {0x7ff00000u, 0xffe00000u}) {
    auto far = frames[at];
    const std::size_t tcp = 14 + (far.second[14] & 0x0f) * 4u;
    std::uint32_t seq =
        static_cast<std::uint32_t>(far.second[tcp + 4] << 24 | far.second[tcp + 5] << 16 |
                                   far.second[tcp + 6] << 8 | far.second[tcp + 7]);
    seq += ahead;
    for (int k = 0; k < 4; ++k)
      far.second[tcp + 4 + static_cast<std::size_t>(k)] = static_cast<u_char>(seq >> (24 - 8 * k));
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(put++), far);
  }
  const auto far_path = temp("far_ahead.pcap");
  write_frames(far_path, out);
  EXPECT_GT(expect_kept_octets(far_path, {}), 20u);
  std::remove(far_path.c_str());
  std::remove(path.c_str());
}

// Ranges adding up to more than kMaxRangeOctets are refused before anything is read or held.
TEST(StreamRanges, TooManyOctetsAtOnceAreRefused) {
  auto plan = make_plan_from_file(std::string(IWARP_SOURCE_DIR) +
                                  "/pcap_traces/generated/mpa2_p2p_read_crc.pcap");
  ASSERT_TRUE(plan) << plan.error();
  const auto flow = plan->connections.front().flow;
  std::vector<StreamRange> ranges(kMaxRangeOctets / (1u << 20) + 1,
                                  StreamRange{flow, mpa::Direction::FromInitiator, 0, 1u << 20});
  try {
    (void)stream_ranges(*plan, ranges);
    ADD_FAILURE() << "no error";
  } catch (const std::length_error& e) {
    EXPECT_NE(std::string(e.what()).find("kMaxRangeOctets"), std::string::npos) << e.what();
  }
  ranges.pop_back();
  EXPECT_EQ(stream_ranges(*plan, ranges).size(), ranges.size());
}

}  // namespace
}  // namespace iwarp::replay
