// rnic replay --ladder over committed captures: the replay's local events (holes, placements
// beyond them, released completions, CQEs, WQE posts) are drawn beside the message they belong
// to, on the right endpoint's column, and their counts agree with the same replay's --json
// report; an in-order replay draws no hole; a bad --ladder path is one line, exit status 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "program_support.hpp"
#include "svg_groups.hpp"

namespace {

using iwarp::test::Program;
namespace fs = std::filesystem;
using iwarp::test::svg_groups;

const std::string kTrace =
    std::string(IWARP_SOURCE_DIR) + "/pcap_traces/generated/mpa2_p2p_write.pcap";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string temp(const std::string& name) {
  return (fs::temp_directory_path() / ("ladder_replay_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

struct Run {
  int code = -1;
  std::string out, err;
};

Run replay(std::vector<std::string> args) {
  std::vector<std::string> argv{IWARP_RNIC_BIN, "replay", "--no-progress"};
  argv.insert(argv.end(), args.begin(), args.end());
  Program p("rnic replay", argv);
  p.wait(std::chrono::seconds(120));
  Run r;
  r.code = p.status().exited() ? p.status().code : -1;
  r.out = p.stdout_text();
  r.err = p.stderr_text();
  return r;
}

// The local events of `category` (data-count summed: consecutive ones are drawn once).
std::uint64_t drawn(const std::vector<std::map<std::string, std::string>>& locals,
                    const std::string& category) {
  std::uint64_t n = 0;
  for (const auto& l : locals)
    if (l.at("class") == "local " + category) n += std::stoull(l.at("data-count"));
  return n;
}

struct Replayed {
  nlohmann::json counts;    // the --json report's totals (every connection)
  nlohmann::json timeline;  // every connection's timeline, one after the other
  std::vector<std::map<std::string, std::string>> msgs, locals;
};

Replayed run(std::vector<std::string> extra, const std::string& name,
             const std::string& trace = kTrace) {
  const auto svg = temp(name);
  std::vector<std::string> args{trace, "--json", "--ladder", svg};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = replay(args);
  EXPECT_EQ(r.code, 0) << r.err;
  Replayed out;
  const auto doc = nlohmann::json::parse(r.out);
  out.counts = doc["totals"];
  out.timeline = nlohmann::json::array();
  for (const auto& c : doc["connections"])
    for (const auto& t : c["timeline"]) out.timeline.push_back(t);
  const auto text = slurp(svg);
  out.msgs = svg_groups(text, "msg");
  out.locals = svg_groups(text, "local");
  fs::remove(svg);
  return out;
}

// A timeline event of `side` ("I"/"R") at capture frame `frame` is drawn as a local event of
// `category` on that endpoint's column, tied to a message towards it whose segments span the
// frame or the stream octet the event is about.
::testing::AssertionResult tied(const Replayed& r, const std::string& category,
                                const std::string& side, std::uint64_t frame) {
  const std::string column = side == "I" ? "initiator" : "responder";
  for (const auto& l : r.locals) {
    if (l.at("class") != "local " + category || l.at("data-side") != column) continue;
    if (!l.contains("data-of-frame")) continue;
    for (const auto& m : r.msgs) {
      if (m.at("data-frame") != l.at("data-of-frame") || m.at("data-to") != column) continue;
      // The frame carried part of the message, or (TCP data out of order, which the decoder
      // takes only when the stream reaches it) the frame is in the message's time and the
      // octet the event is about is the message's.
      const auto first = std::stoull(m.at("data-frame")),
                 last = std::stoull(m.at("data-last-frame"));
      if (first <= frame && frame <= last) return ::testing::AssertionSuccess();
      if (l.contains("data-offset") && frame <= last &&
          std::stoull(m.at("data-offset")) <= std::stoull(l.at("data-offset")) &&
          std::stoull(l.at("data-offset")) < std::stoull(m.at("data-end")))
        return ::testing::AssertionSuccess();
    }
  }
  return ::testing::AssertionFailure() << "no " << category << " mark on the " << column
                                       << " column tied to the message of frame " << frame;
}

// A seeded disorder of a generated capture, and a capture netem reordered for real (replayed
// in capture order, its holes are the network's).
class LadderReplayHoles : public ::testing::TestWithParam<std::pair<const char*, bool>> {};

TEST_P(LadderReplayHoles, DrawsTheHoleItsPlacementAndTheReleasedCompletions) {
  const auto [trace, permute] = GetParam();
  const auto r =
      run(permute ? std::vector<std::string>{"--permute", "3"} : std::vector<std::string>{},
          "holes.svg", std::string(IWARP_SOURCE_DIR) + "/pcap_traces/" + trace);
  const auto& counts = r.counts;
  // The seed makes holes in this capture (else the test would prove nothing).
  ASSERT_GT(counts["holes_opened"].get<std::uint64_t>(), 0u);
  ASSERT_GT(counts["placed_beyond_hole"].get<std::uint64_t>(), 0u);
  ASSERT_GT(counts["releases"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(drawn(r.locals, "hole-opened"), counts["holes_opened"].get<std::uint64_t>());
  EXPECT_EQ(drawn(r.locals, "hole-closed"), counts["holes_closed"].get<std::uint64_t>());
  EXPECT_EQ(drawn(r.locals, "placed-beyond-hole"),
            counts["placed_beyond_hole"].get<std::uint64_t>());
  EXPECT_EQ(drawn(r.locals, "released"), counts["releases"].get<std::uint64_t>());
  EXPECT_EQ(drawn(r.locals, "cqe"), counts["completions"].get<std::uint64_t>());
  EXPECT_EQ(drawn(r.locals, "duplicate"), counts["duplicates"].get<std::uint64_t>());
  // Each hole event beside the message it belongs to, on the receiver's column.
  for (const auto& t : r.timeline) {
    const std::string ev = t["event"];
    const std::string cat = ev == "placed" && t["beyond_hole"].get<bool>() ? "placed-beyond-hole"
                            : ev == "completion"                           ? "cqe"
                                                                           : ev;
    if (cat == "hole-opened" || cat == "placed-beyond-hole" || cat == "released" ||
        cat == "hole-closed") {
      EXPECT_TRUE(tied(r, cat, t["endpoint"], t["frame"])) << t.dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LadderReplay, LadderReplayHoles,
                         ::testing::Values(std::pair{"generated/mpa2_p2p_write.pcap", true},
                                           std::pair{"siw/netem_reorder.pcap", false}));

TEST(LadderReplay, InOrderReplayDrawsNoHoleAndEveryCompletion) {
  const auto r = run({}, "inorder.svg");
  const auto& counts = r.counts;
  ASSERT_GT(counts["completions"].get<std::uint64_t>(), 0u);
  for (const char* c : {"hole-opened", "hole-closed", "placed-beyond-hole", "released", "deferred"})
    EXPECT_EQ(drawn(r.locals, c), 0u) << c;
  EXPECT_EQ(drawn(r.locals, "cqe"), counts["completions"].get<std::uint64_t>());
  EXPECT_EQ(drawn(r.locals, "placed"), counts["placed_in_order"].get<std::uint64_t>());
  EXPECT_EQ(drawn(r.locals, "doorbell"), counts["doorbells"].get<std::uint64_t>());
  // Every CQE beside the message that completed, on the receiving side.
  for (const auto& t : r.timeline)
    if (t["event"] == "completion") {
      EXPECT_TRUE(tied(r, "cqe", t["endpoint"], t["frame"])) << t.dump();
    }
  // The replay posts each Read where the capture shows its Read Request: a WQE mark beside
  // that request, on the column of the endpoint that sent it.
  std::size_t requests = 0;
  for (const auto& m : r.msgs) {
    if (m.at("data-opcode") != "RDMA Read Request") continue;
    ++requests;
    const std::string column = m.at("data-to") == "responder" ? "initiator" : "responder";
    bool found = false;
    for (const auto& l : r.locals)
      found |= l.at("class") == "local wqe-posted" && l.at("data-side") == column &&
               l.contains("data-of-frame") && l.at("data-of-frame") == m.at("data-frame");
    EXPECT_TRUE(found) << "no WQE mark beside the Read Request of frame " << m.at("data-frame");
  }
  EXPECT_GT(requests, 0u);
}

TEST(LadderReplay, BadLadderPathIsOneLineAndExitStatus2) {
  const auto r = replay({kTrace, "--quiet", "--ladder", "/nonexistent-dir/x.svg"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--ladder /nonexistent-dir/x.svg"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");  // refused before the replay ran
  // Nor a PNG it could not write.
  const auto svg = temp("png_fails.svg");
  const auto p =
      replay({kTrace, "--quiet", "--ladder", svg, "--ladder-png", "/nonexistent-dir/x.png"});
  EXPECT_EQ(p.code, 2);
  EXPECT_EQ(std::count(p.err.begin(), p.err.end(), '\n'), 1) << p.err;
  EXPECT_NE(p.err.find("--ladder-png /nonexistent-dir/x.png"), std::string::npos) << p.err;
  EXPECT_EQ(p.out, "");
  fs::remove(svg);
}

// The reordered replay's ladder committed next to the traces (docs/ladder.md) is what the
// command draws today (all but the title line, which names the capture as it was given), and
// shows a hole, a placement beyond it and completions released on the receiver's side.
TEST(LadderReplay, CommittedReorderedLadderIsCurrent) {
  const std::string base =
      std::string(IWARP_SOURCE_DIR) + "/pcap_traces/generated/mpa2_p2p_read_crc";
  const auto svg = temp("reordered.svg");
  const auto r = replay({base + ".pcap", "--permute", "1", "--quiet", "--ladder", svg});
  ASSERT_EQ(r.code, 0) << r.err;
  auto body = [](const std::string& x) {
    std::vector<std::string> lines;
    std::size_t at = 0;
    while (at < x.size()) {
      const auto nl = x.find('\n', at);
      std::string line = x.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
      if (line.find("rnic ladder: ") == std::string::npos) lines.push_back(std::move(line));
      at = nl == std::string::npos ? x.size() : nl + 1;
    }
    return lines;
  };
  const auto committed = slurp(base + ".reordered.svg");
  const auto now = slurp(svg);
  fs::remove(svg);
  EXPECT_EQ(body(committed), body(now))
      << "regenerate it as docs/ladder.md says (rnic replay --ladder changed)";
  const auto locals = svg_groups(committed, "local");
  EXPECT_GT(drawn(locals, "hole-opened"), 0u);
  EXPECT_GT(drawn(locals, "placed-beyond-hole"), 0u);
  EXPECT_GT(drawn(locals, "released"), 0u);
  EXPECT_TRUE(fs::exists(base + ".reordered.png"));
}

}  // namespace
