// `rnic decode` streams a capture: trace::decode_file reads it frame by frame and holds, per
// direction, at most the reassembly window beyond a gap. Checked on captures made of many
// repeated Writes (generated here, a few MB): the streaming decode agrees with the in-memory
// one, its high-water mark of held octets stays within a small window (dropping what lies
// beyond, with a note), and the rnic process's peak resident set stays below the file's size.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "trace/pcap_reader.hpp"
#include "trace/tcp_reassembly.hpp"
#include "trace/trace_decoder.hpp"
#include "trace/trace_generator.hpp"

namespace iwarp::trace {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "streaming_" + std::to_string(::getpid()) + "_" + name;
}

// A capture of the sample conversation with `bulk` octets of 64 KiB Writes in it.
std::string bulk_capture(const std::string& name, std::uint64_t bulk) {
  const std::string path = temp_path(name);
  GeneratorOptions g;
  g.bulk_bytes = bulk;
  auto r = generate_conversation(path, g);
  EXPECT_TRUE(r) << (r ? "" : r.error());
  return path;
}

// Rewrites a capture with each run of `group` frames after the first `keep` in reverse order:
// every direction then has up to group - 1 segments beyond a gap at a time.
std::string reversed_groups(const std::string& in, const std::string& name, std::size_t keep,
                            std::size_t group) {
  const std::string out = temp_path(name);
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline(in.c_str(), err);
  EXPECT_NE(p, nullptr) << err;
  if (!p) return out;
  pcap_dumper_t* d = pcap_dump_open(p, out.c_str());
  EXPECT_NE(d, nullptr);
  struct Frame {
    pcap_pkthdr h;
    std::vector<u_char> data;
  };
  std::vector<Frame> run;
  auto flush = [&] {
    for (auto it = run.rbegin(); it != run.rend(); ++it)
      pcap_dump(reinterpret_cast<u_char*>(d), &it->h, it->data.data());
    run.clear();
  };
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  for (std::size_t n = 0; pcap_next_ex(p, &h, &data) == 1; ++n) {
    run.push_back({*h, std::vector<u_char>(data, data + h->caplen)});
    if (n < keep || run.size() == group) flush();
  }
  flush();
  pcap_dump_close(d);
  pcap_close(p);
  return out;
}

struct Streamed {
  DecodeReport rep;
  std::vector<Record> records;
};

Streamed stream(const std::string& path, std::size_t window) {
  Streamed s;
  auto r = decode_file(path, [&](Record&& rec) { s.records.push_back(std::move(rec)); },
                       {.window = window});
  EXPECT_TRUE(r) << (r ? "" : r.error());
  if (r) s.rep = std::move(*r);
  return s;
}

// The streaming decode and the in-memory one agree on every connection and record.
void expect_same_as_in_memory(const std::string& path, const Streamed& s) {
  auto cap = read_capture(path);
  ASSERT_TRUE(cap) << cap.error();
  const auto whole = decode_capture(*cap);
  EXPECT_EQ(s.rep.frames, whole.frames);
  ASSERT_EQ(s.rep.flows.size(), whole.flows.size());
  for (std::size_t i = 0; i < whole.flows.size(); ++i) {
    const auto &a = s.rep.flows[i], &b = whole.flows[i];
    EXPECT_EQ(a.verdict, b.verdict);
    EXPECT_EQ(a.fpdus, b.fpdus);
    EXPECT_EQ(a.opcode_counts, b.opcode_counts);
    EXPECT_EQ(a.violations, b.violations);
    EXPECT_EQ(a.notes, b.notes);
  }
  ASSERT_EQ(s.records.size(), whole.records.size());
  for (std::size_t i = 0; i < whole.records.size(); ++i) {
    EXPECT_EQ(format_record(s.records[i], 0), format_record(whole.records[i], 0)) << i;
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(StreamingReassembly, WindowBoundsWhatIsHeldAndDropsBeyond) {
  TcpReassembler r(TcpSeq{1000}, 4096);
  Bytes got;
  auto deliver = [&](ByteSpan b) { got.insert(got.end(), b.begin(), b.end()); };
  Bytes big(12000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>(i * 7);
  auto at = [](std::uint32_t offset) { return TcpSeq{1000 + offset}; };
  // In order, longer than the window: delivered whole, nothing held.
  EXPECT_EQ(r.add(at(0), ByteSpan(big).first(6000), deliver), 6000u);
  EXPECT_EQ(r.held_bytes(), 0u);
  // Beyond a gap [6000, 7000): held while within the window.
  r.add(at(7000), ByteSpan(big).subspan(7000, 3000), deliver);
  EXPECT_EQ(r.held_bytes(), 3000u);
  EXPECT_EQ(r.dropped(), 0u);
  // [9500, 10500) reaches past 6000 + 4096: [10096, 10500) is dropped.
  r.add(at(9500), ByteSpan(big).subspan(9500, 1000), deliver);
  EXPECT_EQ(r.held_bytes(), 3096u);
  EXPECT_EQ(r.dropped(), 404u);
  EXPECT_EQ(r.dropped_segments(), 1u);
  // Wholly beyond: dropped.
  r.add(at(11000), ByteSpan(big).subspan(11000, 1000), deliver);
  EXPECT_EQ(r.held_bytes(), 3096u);
  EXPECT_EQ(r.dropped(), 1404u);
  // Filling the gap delivers everything held, in order.
  r.add(at(6000), ByteSpan(big).subspan(6000, 1000), deliver);
  EXPECT_EQ(r.held_bytes(), 0u);
  ASSERT_EQ(got.size(), 10096u);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), big.begin()));
}

TEST(StreamingDecode, InOrderCaptureHoldsNothingAndMatchesTheInMemoryDecode) {
  const auto path = bulk_capture("inorder.pcap", 4u << 20);
  const auto s = stream(path, 64 * 1024);
  EXPECT_EQ(s.rep.max_held, 0u);
  EXPECT_GT(s.rep.flows.at(0).opcode_counts.at("RDMA Write"), 64u * 45);
  expect_same_as_in_memory(path, s);
  std::remove(path.c_str());
}

TEST(StreamingDecode, ReorderedCaptureHoldsAtMostTheWindow) {
  const auto in = bulk_capture("ordered.pcap", 4u << 20);
  // 40 frames in order (the handshake and the MPA exchange), then groups of 8 reversed: up to
  // 7 segments of about 1,460 octets are held at a time.
  const auto path = reversed_groups(in, "reordered.pcap", 40, 8);
  // A window that fits them: the same decode as in memory, something held, never more than
  // the window.
  const auto wide = stream(path, 64 * 1024);
  EXPECT_GT(wide.rep.max_held, 4096u);
  EXPECT_LE(wide.rep.max_held, 64u * 1024);
  expect_same_as_in_memory(path, wide);
  // A window too small for them: what lies beyond is dropped with a note, and what is held
  // stays within the window.
  const auto narrow = stream(path, 2048);
  EXPECT_LE(narrow.rep.max_held, 2048u);
  const auto& notes = narrow.rep.flows.at(0).notes;
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.find("more than the reassembly window (2048 octets)") != std::string::npos;
  })) << ::testing::PrintToString(notes);
  std::remove(in.c_str());
  std::remove(path.c_str());
}

// Peak resident set of `rnic args...` (octets), and its exit status.
std::pair<std::uint64_t, int> run_rnic(const std::vector<std::string>& args) {
  std::vector<std::string> argv_s{IWARP_RNIC_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int st = 0;
  rusage ru{};
  const auto t0 = std::chrono::steady_clock::now();
  while (::wait4(pid, &st, WNOHANG, &ru) != pid) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(120)) {
      ::kill(pid, SIGKILL);
      ::wait4(pid, &st, 0, &ru);
      return {0, -1};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return {static_cast<std::uint64_t>(ru.ru_maxrss) * 1024, WIFEXITED(st) ? WEXITSTATUS(st) : -2};
}

TEST(StreamingDecode, RnicDecodeDoesNotLoadTheFile) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's quarantine and shadow memory make the resident set no measure";
#endif
  // 48 MiB of Writes: a decoder that loaded the file would be resident with all of it.
  const auto path = bulk_capture("rss.pcap", 48u << 20);
  const auto size = std::filesystem::file_size(path);
  const auto [rss, status] = run_rnic({"decode", "--window", "64k", path});
  EXPECT_EQ(status, 0);
  EXPECT_GT(rss, 0u);
  EXPECT_LT(rss, size / 2) << "max RSS " << (rss >> 20) << " MiB for a " << (size >> 20)
                           << " MiB capture";
  std::remove(path.c_str());
}

}  // namespace
}  // namespace iwarp::trace
