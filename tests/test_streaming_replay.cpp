// make_plan(Capture&&), which `rnic replay` uses, keeps each segment's octets once: a segment
// whose every octet is a first arrival reads them from the plan's rebuilt stream instead of
// holding a copy (Step::in_stream). Its replay must be the one of make_plan(const Capture&),
// report for report, on every capture of the corpus (Atomic Responses renumbered, with their
// CRCs recomputed, included), in capture order and in a seeded disorder.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
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

TEST(StreamingReplay, PlanThatTakesTheCaptureReplaysAsTheCopyingOne) {
  const auto files = corpus();
  ASSERT_GE(files.size(), 20u);
  std::size_t in_stream = 0, planned = 0;
  for (const auto& path : files) {
    SCOPED_TRACE(path);
    auto cap = trace::read_capture(path);
    ASSERT_TRUE(cap) << cap.error();
    auto copying = make_plan(*cap);
    auto taking = make_plan(std::move(*cap));
    ASSERT_EQ(copying.has_value(), taking.has_value());
    if (!copying) {
      EXPECT_EQ(copying.error(), taking.error());
      continue;
    }
    ++planned;
    for (const auto& c : taking->connections)
      for (const auto& st : c.steps) {
        in_stream += st.in_stream;
        if (st.in_stream) {
          EXPECT_TRUE(st.payload.empty());
        }
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
  EXPECT_GT(in_stream, 1000u);  // the corpus's segments mostly read from the stream
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
