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
#include "tests/corpus_files.hpp"
#include "tests/pcap_frames.hpp"
#include "trace/trace_decoder.hpp"
#include "trace/trace_generator.hpp"

namespace iwarp::replay {
namespace {

std::vector<std::string> corpus() {
  return ::testing_support::corpus_captures();
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
  std::uint64_t spooled = 0;
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
          spooled += c.spool_count;
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

  std::remove(rtr.c_str());
}

// A spool of many megabytes (written out a megabyte at a time, read back in chunks whose ends
// cut records) gives back every event: the reports of a long connection are those of its
// timeline held in memory.
TEST(TimelineSpool, ManyMegabytesReadBackWhole) {
  const auto path = temp("long.pcap");
  trace::GeneratorOptions g;
  g.pcap.mss = 256;
  g.bulk_bytes = 6u << 20;
  ASSERT_TRUE(trace::generate_conversation(path, g));
  auto plan = make_plan_from_file(path);
  ASSERT_TRUE(plan) << plan.error();
  const auto whole = replay(*plan, {});
  ReplayOptions ro;
  ro.timeline_keep = 0;
  ro.spool_timeline = true;
  const auto part = replay(*plan, ro);
  ASSERT_EQ(part.connections.size(), 1u);
  const auto& c = part.connections.front();
  ASSERT_NE(c.timeline_spool, nullptr);
  EXPECT_TRUE(c.timeline_spool->has_file());
  EXPECT_GT(c.timeline_spool->octets(), 4u << 20);
  EXPECT_EQ(c.spool_count, c.timeline_events);
  EXPECT_EQ(json_written(*plan, part, false), json_written(*plan, whole, false));
  EXPECT_EQ(text_written(*plan, part, true), text_written(*plan, whole, true));
  std::remove(path.c_str());
}

// Two long connections one after the other share the spool, each a run: the second's starts
// inside the file (the first's megabytes were written out) and ends in the buffer; each reads
// back whole, and no more than its own octets.
TEST(TimelineSpool, ConnectionsOneAfterTheOtherReadBackTheirOwnRuns) {
  const auto first = temp("first.pcap"), second = temp("second.pcap"), both = temp("both.pcap");
  trace::GeneratorOptions g;
  g.pcap.mss = 256;
  g.bulk_bytes = 3u << 20;
  ASSERT_TRUE(trace::generate_conversation(first, g));
  g.pcap.client.port = 40001;
  g.bulk_bytes = 2u << 20;
  g.pcap.start_time_us += 60'000'000;
  ASSERT_TRUE(trace::generate_conversation(second, g));
  auto frames = testing_support::frames_of(first);
  const auto more = testing_support::frames_of(second);
  frames.insert(frames.end(), more.begin(), more.end());
  testing_support::write_frames(both, frames);
  auto plan = make_plan_from_file(both);
  ASSERT_TRUE(plan) << plan.error();
  ASSERT_EQ(plan->connections.size(), 2u);
  const auto whole = replay(*plan, {});
  ReplayOptions ro;
  ro.timeline_keep = 3;
  ro.spool_timeline = true;
  const auto part = replay(*plan, ro);
  ASSERT_EQ(part.connections.size(), 2u);
  const auto& a = part.connections[0];
  const auto& b = part.connections[1];
  ASSERT_NE(a.timeline_spool, nullptr);
  EXPECT_EQ(a.timeline_spool, b.timeline_spool) << "one spool for the replay";
  EXPECT_TRUE(a.timeline_spool->has_file());
  EXPECT_EQ(a.spool_offset, 0u);
  EXPECT_EQ(b.spool_offset, a.spool_octets);
  EXPECT_GT(a.spool_octets, 2u << 20);
  EXPECT_GT(b.spool_octets, 1u << 20);
  for (std::size_t i = 0; i < 2; ++i) {
    std::uint64_t n = 0;
    for_each_timeline_event(part.connections[i], [&](const TimelineEntry&) { ++n; });
    EXPECT_EQ(n, whole.connections[i].timeline_events) << "connection " << i;
  }
  EXPECT_EQ(json_written(*plan, part, false), json_written(*plan, whole, false));
  EXPECT_EQ(text_written(*plan, part, false), text_written(*plan, whole, false));
  for (const auto& f : {first, second, both}) std::remove(f.c_str());
}

// Without a directory for its temporary file, a replay that spools less than its buffer (a
// megabyte) makes no file and goes on; one that spools more ends in one line saying where and
// why.
TEST(TimelineSpool, NoRoomForTheFileIsOneLine) {
  const std::string missing = temp("no-such-dir");
  std::filesystem::remove_all(missing);
  const auto big = temp("big.pcap");
  trace::GeneratorOptions g;
  g.pcap.mss = 256;
  g.bulk_bytes = 2u << 20;
  ASSERT_TRUE(trace::generate_conversation(big, g));
  auto small = make_plan_from_file(std::string(IWARP_SOURCE_DIR) +
                                   "/pcap_traces/generated/mpa2_p2p_read_crc.pcap");
  ASSERT_TRUE(small) << small.error();
  auto large = make_plan_from_file(big);
  ASSERT_TRUE(large) << large.error();
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", missing.c_str(), 1);
  ReplayOptions ro;
  ro.timeline_keep = 0;
  ro.spool_timeline = true;
  std::string small_error, what;
  ReplayResult r;
  try {
    r = replay(*small, ro);
  } catch (const std::runtime_error& e) {
    small_error = e.what();
  }
  try {
    (void)replay(*large, ro);
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  if (old)
    ::setenv("TMPDIR", saved.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  EXPECT_EQ(small_error, "");
  ASSERT_EQ(r.connections.size(), 1u);
  EXPECT_GT(r.connections[0].spool_count, 0u);
  EXPECT_FALSE(r.connections[0].timeline_spool->has_file());
  EXPECT_NE(what.find("making it in " + missing + ": No such file or directory"), std::string::npos)
      << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  std::remove(big.c_str());
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
    const auto out = temp("stdout.txt");
    const auto [status, err] =
        sh("trap '' XFSZ; ulimit -f 256; exec \"$1\" replay --no-progress "
           "\"$2\" \"$3\" >\"$4\"",
           {IWARP_RNIC_BIN, how, path, out});
    EXPECT_EQ(status, 2) << err;
    EXPECT_EQ(std::filesystem::file_size(out), 0u) << "a report was printed";
    std::remove(out.c_str());
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

// A report that cannot be written whole (standard output a full disk: /dev/full) ends in exit
// status 2 and one line, as the whole report printed at once did, not in a report cut short and
// exit status 0.
TEST(TimelineSpool, AReportThatCannotBeWrittenIsAnError) {
  const std::string path = std::string(IWARP_SOURCE_DIR) + "/pcap_traces/generated/mpa1_crc.pcap";
  for (const char* how : {"--timeline", "--json", "--quiet"}) {
    SCOPED_TRACE(how);
    const auto [status, err] = sh("exec \"$1\" replay --no-progress \"$2\" \"$3\" >/dev/full",
                                  {IWARP_RNIC_BIN, how, path});
    EXPECT_EQ(status, 2) << err;
    EXPECT_NE(err.find("rnic replay: " + path + ": writing the report: No space left on device\n"),
              std::string::npos)
        << err;
  }
}

// `rnic generate --bulk N --bulk-message M` (the captures the memory tests use): the bulk Writes
// are M octets each; an M out of range, or an M without a --bulk above 0, is one line and exit
// status 2.
TEST(GenerateBulk, MessageSizeSetsTheWritesAndIsCheckedInOneLine) {
  const auto path = temp("bulk_message.pcap");
  // Writes to the bulk STag that end a message (L=1), per size asked for.
  auto writes = [&](const char* size) -> std::size_t {
    const auto [status, err] =
        sh("exec \"$1\" generate --bulk 1m --bulk-message \"$2\" \"$3\" >/dev/null",
           {IWARP_RNIC_BIN, size, path});
    EXPECT_EQ(status, 0) << err;
    std::size_t n = 0;
    auto rep = trace::decode_file(path, [&](trace::Record&& r) {
      n += r.kind == trace::Record::Kind::Fpdu && r.ddp && r.ddp->tagged && r.ddp->last &&
           r.ddp->stag.value() == 0x00bb0001;
    });
    EXPECT_TRUE(rep) << rep.error();
    return n;
  };
  EXPECT_EQ(writes("64k"), 16u);
  EXPECT_EQ(writes("256k"), 4u);
  EXPECT_EQ(writes("1m"), 1u);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--bulk", "1m", "--bulk-message", "0"},
        {"--bulk", "1m", "--bulk-message", "2m"},
        {"--bulk", "0", "--bulk-message", "4k"}}) {
    SCOPED_TRACE(::testing::PrintToString(args));
    const auto [status, err] =
        sh("exec \"$1\" generate \"$2\" \"$3\" \"$4\" \"$5\" \"$6\" >/dev/null",
           {IWARP_RNIC_BIN, args[0], args[1], args[2], args[3], path});
    EXPECT_EQ(status, 2) << err;
    EXPECT_NE(err.find("--bulk-message"), std::string::npos) << err;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace iwarp::replay
