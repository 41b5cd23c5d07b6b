// `rnic replay` reads the capture with payloads_in_file: the plan's steps keep where each
// payload lies in the file (Step::file_offset), and the replay reads it back when it injects the
// step. Its replay must be the one of a capture held in memory, report for report, on every
// capture of the corpus (Atomic Responses renumbered, with their CRCs recomputed, included), in
// capture order and in a seeded disorder.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "replay/replay_plan.hpp"
#include "replay/replay_report.hpp"
#include "replay/replayer.hpp"
#include "trace/pcap_reader.hpp"

namespace iwarp::replay {
namespace {

std::vector<std::string> corpus() {
  std::vector<std::string> files;
  for (const char* dir : {"pcap_traces/generated", "pcap_traces/siw"})
    for (const auto& e :
         std::filesystem::directory_iterator(std::string(IWARP_SOURCE_DIR) + "/" + dir))
      if (e.path().extension() == ".pcap") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(StreamingReplay, PlanThatReadsTheFileReplaysAsTheOneInMemory) {
  const auto files = corpus();
  ASSERT_GE(files.size(), 20u);
  std::size_t in_file = 0, held = 0, planned = 0;
  for (const auto& path : files) {
    SCOPED_TRACE(path);
    auto cap = trace::read_capture(path);
    ASSERT_TRUE(cap) << cap.error();
    auto on_disk = trace::read_capture(path, {.payloads_in_file = true});
    ASSERT_TRUE(on_disk) << on_disk.error();
    ASSERT_TRUE(on_disk->file);
    // Every payload of the corpus (pcap files, no IP fragments) stays in the file.
    for (const auto& f : on_disk->flows)
      for (const auto& dir : f.dir)
        for (const auto& s : dir) EXPECT_TRUE(s.payload.empty());
    auto copying = make_plan(*cap);
    auto taking = make_plan(*on_disk);
    ASSERT_EQ(copying.has_value(), taking.has_value());
    if (!copying) {
      EXPECT_EQ(copying.error(), taking.error());
      continue;
    }
    ++planned;
    for (const auto& c : taking->connections) {
      std::map<std::uint64_t, const trace::TcpSegment*> captured;  // by frame
      for (const auto& dir : cap->flows[c.flow].dir)
        for (const auto& s : dir) captured[s.frame] = &s;
      for (const auto& st : c.steps) {
        if (st.kind != Step::Kind::Segment) continue;
        if (st.file_offset != trace::kNotInFile) {
          ++in_file;
          EXPECT_TRUE(st.payload.empty());
        } else {
          // A step holds its payload only when renumbering patched it.
          ++held;
          ASSERT_TRUE(captured.contains(st.frame));
          EXPECT_NE(st.payload, captured[st.frame]->payload) << "frame " << st.frame;
        }
      }
    }
    for (std::size_t i = 0; i < copying->connections.size(); ++i) {
      const auto &a = copying->connections[i], &b = taking->connections[i];
      ASSERT_EQ(a.steps.size(), b.steps.size());
      trace::PayloadReader reader(b.file);
      for (std::size_t k = 0; k < a.steps.size(); ++k)
        ASSERT_EQ(a.payload_of(a.steps[k], nullptr), b.payload_of(b.steps[k], &reader)) << k;
    }
    for (const std::optional<Permutation>& order :
         {std::optional<Permutation>{}, std::optional<Permutation>{Permutation{}}}) {
      ReplayOptions o;
      o.permutation = order;
      const auto a = replay(*copying, o);
      const auto b = replay(*taking, o);
      EXPECT_EQ(to_json(*copying, a, order, std::nullopt, true).dump(),
                to_json(*taking, b, order, std::nullopt, true).dump());
    }
  }
  EXPECT_GE(planned, 15u);
  EXPECT_GT(in_file, 1000u);  // the corpus's segments are read from the file
  EXPECT_GT(held, 0u);        // (the corpus has renumbered Atomic Responses)
}

// The learning pass decodes each direction as it becomes contiguous, in capture order. A
// capture that shows the initiator's first FPDUs before the MPA Reply (two hosts' captures
// merged with skewed clocks) has them held by the decoder until the Reply fixes their framing,
// then decoded as if they came after it: the same endpoints are learned. Bounded: past
// max_held octets held, that direction is not learned further, and nothing else breaks.
TEST(StreamingReplay, InitiatorOctetsBeforeTheReplyAreLearnedOnceItComes) {
  const auto path = std::string(IWARP_SOURCE_DIR) + "/pcap_traces/generated/mpa2_p2p_read_crc.pcap";
  auto cap = trace::read_capture(path);
  ASSERT_TRUE(cap) << cap.error();
  const auto in_order = make_plan(*cap);
  ASSERT_TRUE(in_order) << in_order.error();
  // The Reply is the responder's first segment with data; it now comes after the initiator's
  // third (its Request, then two with FPDUs).
  auto& flow = cap->flows.at(0);
  trace::TcpSegment* reply = nullptr;
  for (auto& sg : flow.dir[1])
    if (!sg.payload.empty()) {
      reply = &sg;
      break;
    }
  ASSERT_NE(reply, nullptr);
  std::vector<const trace::TcpSegment*> initiator;
  for (const auto& sg : flow.dir[0])
    if (!sg.payload.empty()) initiator.push_back(&sg);
  ASSERT_GE(initiator.size(), 4u);
  ASSERT_LT(reply->frame, initiator[1]->frame);
  reply->frame = initiator[2]->frame;  // (equal frames: the initiator's segment sorts first)
  const auto late = make_plan(*cap);
  ASSERT_TRUE(late) << late.error();
  const auto &a = in_order->connections.at(0), &b = late->connections.at(0);
  EXPECT_EQ(a.fpdus[0], b.fpdus[0]);
  EXPECT_EQ(a.fpdus[1], b.fpdus[1]);
  for (int e = 0; e < 2; ++e) {
    SCOPED_TRACE(e);
    ASSERT_EQ(a.ep[e].recvs.size(), b.ep[e].recvs.size());
    for (std::size_t k = 0; k < a.ep[e].recvs.size(); ++k)
      EXPECT_EQ(a.ep[e].recvs[k].size, b.ep[e].recvs[k].size);
    ASSERT_EQ(a.ep[e].regions.size(), b.ep[e].regions.size());
    for (std::size_t k = 0; k < a.ep[e].regions.size(); ++k) {
      EXPECT_EQ(a.ep[e].regions[k].stag, b.ep[e].regions[k].stag);
      EXPECT_EQ(a.ep[e].regions[k].end_to, b.ep[e].regions[k].end_to);
    }
    EXPECT_EQ(a.ep[e].reads.size(), b.ep[e].reads.size());
    EXPECT_EQ(a.ep[e].atomics.size(), b.ep[e].atomics.size());
  }
  EXPECT_EQ(a.notes, b.notes);
  // With 64 octets held at most, the initiator's direction stops where its held octets pass
  // 64 (and the responder's FPDUs captured before its Reply lie beyond a gap past 64 octets):
  // each a finding; less is learned, and the replay runs all the same.
  PlanLimits tiny;
  tiny.max_held = 64;
  const auto bounded = make_plan(*cap, tiny);
  ASSERT_TRUE(bounded) << bounded.error();
  const auto& c = bounded->connections.at(0);
  EXPECT_LT(c.fpdus[0], a.fpdus[0]);
  EXPECT_LT(c.fpdus[1], a.fpdus[1]);
  bool before_reply = false, beyond_gap = false;
  for (const auto& l : c.limits) {
    EXPECT_EQ(l.limit, "kMaxHeldBeyondGap");
    before_reply |= l.text.starts_with("I>R: more than 64 octets arrived before the MPA Reply");
    beyond_gap |= l.text.starts_with("R>I: ") && l.text.find("beyond a gap") != std::string::npos;
  }
  EXPECT_TRUE(before_reply) << ::testing::PrintToString(c.limits.size());
  EXPECT_TRUE(beyond_gap);
  const auto r = replay(*bounded, {});
  EXPECT_EQ(r.connections.size(), 1u);
}

// Keeping only the first events of the timeline (what the text report prints) changes nothing
// else: the same counts, Terminates and violations, the same event count, the same text.
TEST(StreamingReplay, BoundedTimelineKeepsTheFirstEventsAndEveryFinding) {
  for (const char* name :
       {"pcap_traces/generated/mpa2_crc.pcap", "pcap_traces/siw/netem_reorder.pcap",
        "pcap_traces/generated/mpa1_crc_markers.pcap"}) {
    SCOPED_TRACE(name);
    auto cap = trace::read_capture(std::string(IWARP_SOURCE_DIR) + "/" + name);
    ASSERT_TRUE(cap) << cap.error();
    auto plan = make_plan(*cap);
    ASSERT_TRUE(plan) << plan.error();
    const auto all = replay(*plan, {});
    ReplayOptions few;
    few.timeline_keep = 3;
    const auto some = replay(*plan, few);
    ASSERT_EQ(all.connections.size(), some.connections.size());
    std::size_t findings = 0;
    for (std::size_t i = 0; i < all.connections.size(); ++i) {
      const auto &a = all.connections[i], &b = some.connections[i];
      ASSERT_GT(a.timeline.size(), 3u);
      EXPECT_EQ(a.timeline_events, a.timeline.size());
      EXPECT_EQ(b.timeline.size(), 3u);
      EXPECT_EQ(b.timeline_events, a.timeline.size());
      for (std::size_t k = 0; k < 3; ++k)
        EXPECT_EQ(format_event(a.timeline[k], 0), format_event(b.timeline[k], 0));
      findings += a.terminates_sent.size() + a.terminates_received.size() + a.violations.size();
    }
    EXPECT_EQ(to_json(*plan, all, std::nullopt, std::nullopt, false).dump(),
              to_json(*plan, some, std::nullopt, std::nullopt, false).dump());
    ReportOptions ro;
    ro.timeline_limit = 3;
    EXPECT_EQ(format_text(*plan, all, std::nullopt, std::nullopt, ro),
              format_text(*plan, some, std::nullopt, std::nullopt, ro));
    if (std::string(name).find("generated") != std::string::npos) {
      EXPECT_GT(findings, 0u);  // the generated conversation ends with a Terminate
    }
  }
}

}  // namespace
}  // namespace iwarp::replay
