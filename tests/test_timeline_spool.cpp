// `rnic replay --timeline` and `--json` print every timeline event: the events past the first
// ones wait in an unnamed temporary file (replay::TimelineSpool) instead of memory, and the
// report is written as they are read back. The report must be the one of the timeline held in
// memory, octet for octet (text and JSON, with and without --explain), on every capture of the
// corpus, whatever number of events stays in memory; a temporary file that cannot be made or
// written ends the replay in one line.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "replay/replay_explain.hpp"
#include "replay/replay_plan.hpp"
#include "replay/replay_report.hpp"
#include "replay/replayer.hpp"
#include "replay/timeline_spool.hpp"
#include "trace/trace_generator.hpp"

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

std::string temp(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) /
          ("timeline_spool_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string explain(const TimelineEntry& t) {
  return explain_event(t.event);
}

std::string json_written(const Plan& plan, const ReplayResult& r, bool with_explain) {
  std::string s;
  write_json([&](std::string_view p) { s += p; }, plan, r, std::nullopt, std::nullopt, true,
             with_explain ? explain : std::function<std::string(const TimelineEntry&)>{});
  return s;
}

std::string text_written(const Plan& plan, const ReplayResult& r, bool with_explain) {
  ReportOptions o;
  o.timeline_all = true;
  if (with_explain) o.explain = explain;
  return format_text(plan, r, std::nullopt, std::nullopt, o);
}

// The reports of a replay that keeps its whole timeline in memory, and of replays that keep 0, 1
// and 7 events in memory and the others in the spool: the same, octet for octet. (write_json is
// also checked against the document to_json builds, dumped whole, as `rnic replay --json`
// printed it before.)
TEST(TimelineSpool, ReportsAreThoseOfTheTimelineHeldInMemory) {
  std::uint64_t spooled = 0, spool_octets = 0;
  std::size_t plans = 0, rtrs = 0;
  // (And a peer-to-peer RTR that is a Send, whose completion the timeline names as such.)
  const auto rtr = temp("rtr_send.pcap");
  trace::GeneratorOptions g;
  for (auto* p : {&g.initiator, &g.responder}) {
    p->revision = 2;
    p->peer_to_peer = true;
  }
  g.initiator.rtr = static_cast<mpa::RtrMask>(mpa::RtrType::Send);
  ASSERT_TRUE(trace::generate_conversation(rtr, g));
  auto paths = corpus();
  paths.push_back(rtr);
  for (const auto& path : paths) {
    SCOPED_TRACE(path);
    auto plan = make_plan_from_file(path);
    if (!plan) continue;
    ++plans;
    const auto whole = replay(*plan, {});
    for (const bool ex : {false, true}) {
      const auto json_whole = json_written(*plan, whole, ex);
      ASSERT_EQ(json_whole,
                to_json(*plan, whole, std::nullopt, std::nullopt, true,
                        ex ? explain : std::function<std::string(const TimelineEntry&)>{})
                        .dump(1) +
                    "\n");
      const auto text_whole = text_written(*plan, whole, ex);
      for (const std::size_t keep : {0, 1, 7}) {
        SCOPED_TRACE("in memory: " + std::to_string(keep) + (ex ? ", explained" : ""));
        ReplayOptions ro;
        ro.timeline_keep = keep;
        ro.spool_timeline = true;
        const auto part = replay(*plan, ro);
        ASSERT_EQ(part.connections.size(), whole.connections.size());
        for (const auto& c : part.connections) {
          EXPECT_EQ(kept_timeline_events(c), c.timeline_events);
          ASSERT_NE(c.timeline_spool, nullptr);
          spooled += c.timeline_spool->size();
          spool_octets += c.timeline_spool->octets();
        }
        EXPECT_EQ(json_written(*plan, part, ex), json_whole);
        const auto text = text_written(*plan, part, ex);
        EXPECT_EQ(text, text_whole);
        rtrs += text.find("the peer-to-peer RTR (a zero-length Send") != std::string::npos;
      }
    }
  }
  EXPECT_GT(plans, 8u);
  EXPECT_GT(spooled, 2000u);
  EXPECT_EQ(rtrs, 6u);  // (the RTR capture's six reports)
  std::printf("%llu events spooled in %llu octets\n", static_cast<unsigned long long>(spooled),
              static_cast<unsigned long long>(spool_octets));
  std::remove(rtr.c_str());
}

// Without room for its temporary file, the replay ends in one line saying where and why.
TEST(TimelineSpool, NoRoomForTheFileIsOneLine) {
  const std::string missing = temp("no-such-dir");
  std::filesystem::remove_all(missing);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", missing.c_str(), 1);
  auto plan = make_plan_from_file(std::string(IWARP_SOURCE_DIR) +
                                  "/pcap_traces/generated/mpa2_p2p_read_crc.pcap");
  ReplayOptions ro;
  ro.timeline_keep = 0;
  ro.spool_timeline = true;
  std::string what;
  try {
    (void)replay(*plan, ro);
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  if (old)
    ::setenv("TMPDIR", saved.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  ASSERT_TRUE(plan) << plan.error();
  EXPECT_NE(what.find("making it in " + missing + ": No such file or directory"), std::string::npos)
      << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
}

// Runs `sh -c script` with the arguments after it, and returns its exit status and standard error.
std::pair<int, std::string> sh(const std::string& script, std::vector<std::string> args) {
  const auto err = temp("stderr.txt");
  std::vector<std::string> argv{"/bin/sh", "-c", script + " 2>'" + err + "'", "sh"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv("/bin/sh", a.data());
    ::_exit(127);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  std::string text;
  if (FILE* f = std::fopen(err.c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
  }
  std::remove(err.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), text};
}

// `rnic replay --timeline` whose temporary file cannot grow past 256 KiB (a file size limit,
// EFBIG): exit status 2 and one line naming the file's directory and the error, after which
// nothing of a report is printed as if it were whole.
TEST(TimelineSpool, AFileThatCannotBeWrittenEndsTheReplayInOneLine) {
  const auto path = temp("bulk.pcap");
  trace::GeneratorOptions g;
  g.pcap.mss = 256;
  g.bulk_bytes = 4u << 20;  // about 17,000 segments, more events: past 256 KiB of spool
  ASSERT_TRUE(trace::generate_conversation(path, g));
  for (const char* how : {"--timeline", "--json"}) {
    SCOPED_TRACE(how);
    // (SIGXFSZ ignored, as a shell leaves it for the program it starts: the write fails instead.)
    const auto [status, err] =
        sh("trap '' XFSZ; ulimit -f 256; exec \"$1\" replay --no-progress "
           "\"$2\" \"$3\" >/dev/null",
           {IWARP_RNIC_BIN, how, path});
    EXPECT_EQ(status, 2) << err;
    // (The replay's own log lines aside: the capture's Terminate is logged as it is replayed.)
    std::string last;
    for (std::size_t b = 0; b < err.size();) {
      auto e = err.find('\n', b);
      if (e == std::string::npos) e = err.size();
      if (err.compare(b, 1, "[") != 0) {
        EXPECT_TRUE(last.empty()) << "more than one line: " << err;
        last = err.substr(b, e - b);
      }
      b = e + 1;
    }
    EXPECT_NE(last.find("rnic replay: " + path + ": the timeline is kept in a temporary file"),
              std::string::npos)
        << err;
    EXPECT_NE(last.find("File too large"), std::string::npos) << err;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace iwarp::replay
