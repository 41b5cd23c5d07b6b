// read_capture(path, {.payloads_in_file = true}), which `rnic replay` uses: each segment keeps
// where its payload lies in the file, and PayloadReader reads it back. Checked on the same
// conversation written as pcap (both byte orders, micro- and nanosecond, the "modified"
// format) and as pcapng (both byte orders, with options and other blocks between the packets,
// and Simple Packet Blocks): every payload is found in the file, and octet for octet the one
// read_capture holds in memory; the replay of each is the replay of the original. A file that
// changes after it was read is refused with one line; a pipe's payloads are held. And `rnic
// replay`'s resident memory grows with a capture's length by a fraction of what it did when it
// held the payloads and kept a step per segment. A file that changes is refused whether the
// replay keeps its steps or makes them as it reads the file again.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/bytes.hpp"
#include "replay/replay_plan.hpp"
#include "replay/replay_report.hpp"
#include "replay/replayer.hpp"
#include "tests/child_rss.hpp"
#include "tests/pipe_writer.hpp"
#include "tests/sanitizers.hpp"
#include "trace/pcap_reader.hpp"
#include "trace/trace_generator.hpp"

namespace iwarp::trace {
namespace capture_file_test {

std::string temp(const std::string& name) {
  return ::testing::TempDir() + "capfile_" + std::to_string(::getpid()) + "_" + name;
}

std::string source_file(const std::string& rel) {
  return std::string(IWARP_SOURCE_DIR) + "/" + rel;
}

Bytes slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void spit(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// A classic little-endian microsecond pcap's records.
struct Record {
  std::uint32_t sec = 0, usec = 0, len = 0;
  Bytes data;
};
std::vector<Record> records_of(const Bytes& pcap) {
  EXPECT_EQ(load_le32(pcap.data()), 0xa1b2c3d4u);  // (the corpus is written so)
  std::vector<Record> out;
  for (std::size_t at = 24; at + 16 <= pcap.size();) {
    Record r;
    r.sec = load_le32(&pcap[at]);
    r.usec = load_le32(&pcap[at + 4]);
    const std::uint32_t caplen = load_le32(&pcap[at + 8]);
    r.len = load_le32(&pcap[at + 12]);
    r.data.assign(pcap.begin() + static_cast<std::ptrdiff_t>(at + 16),
                  pcap.begin() + static_cast<std::ptrdiff_t>(at + 16 + caplen));
    out.push_back(std::move(r));
    at += 16 + caplen;
  }
  return out;
}

// Writes 32- and 16-bit fields in one byte order.
struct Out {
  bool big = false;
  Bytes b;
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i)
      b.push_back(static_cast<std::uint8_t>(big ? v >> (24 - 8 * i) : v >> (8 * i)));
  }
  void u16(std::uint16_t v) {
    for (int i = 0; i < 2; ++i)
      b.push_back(static_cast<std::uint8_t>(big ? v >> (8 - 8 * i) : v >> (8 * i)));
  }
  void bytes(ByteSpan d) {
    b.insert(b.end(), d.begin(), d.end());
    while (b.size() % 4 != 0) b.push_back(0);
  }
};

// The records as a classic pcap in the given byte order, with nanosecond timestamps or not, or
// in the "modified" format (Kuznetzov's: 24-octet record headers).
Bytes as_pcap(const std::vector<Record>& recs, bool big, bool nano, bool modified = false) {
  Out o{big, {}};
  o.u32(modified ? 0xa1b2cd34 : nano ? 0xa1b23c4d : 0xa1b2c3d4);
  o.u16(2);
  o.u16(4);
  o.u32(0);
  o.u32(0);
  o.u32(262144);
  o.u32(1);  // Ethernet
  for (const auto& r : recs) {
    o.u32(r.sec);
    o.u32(nano ? r.usec * 1000 : r.usec);
    o.u32(static_cast<std::uint32_t>(r.data.size()));
    o.u32(r.len);
    if (modified) {
      o.u32(1);  // interface index
      o.u16(0x0800);
      o.b.push_back(0);  // packet type
      o.b.push_back(0);
    }
    o.b.insert(o.b.end(), r.data.begin(), r.data.end());
  }
  return o.b;
}

// The records as pcapng: a Section Header and an Interface Description Block, then per
// record an Enhanced Packet Block (every third one with a comment option), a Name Resolution
// Block before every fourth and an Interface Statistics Block before every fifth; or, with
// `simple`, Simple Packet Blocks (no timestamps).
Bytes as_pcapng(const std::vector<Record>& recs, bool big, bool simple) {
  Out o{big, {}};
  o.u32(0x0a0d0d0a);
  o.u32(28);
  o.u32(0x1a2b3c4d);
  o.u16(1);
  o.u16(0);
  o.u32(0xffffffff);
  o.u32(0xffffffff);  // section length: not given
  o.u32(28);
  o.u32(1);
  o.u32(20);
  o.u16(1);  // Ethernet
  o.u16(0);
  o.u32(262144);
  o.u32(20);
  for (std::size_t i = 0; i < recs.size(); ++i) {
    const auto& r = recs[i];
    if (i % 4 == 1) {  // NRB with nothing but its end record
      o.u32(4);
      o.u32(16);
      o.u32(0);
      o.u32(16);
    }
    if (i % 5 == 2) {  // ISB: interface 0, a timestamp, no options
      o.u32(5);
      o.u32(24);
      o.u32(0);
      o.u32(0);
      o.u32(0);
      o.u32(24);
    }
    const auto padded = static_cast<std::uint32_t>((r.data.size() + 3) & ~std::size_t{3});
    if (simple) {
      o.u32(3);
      o.u32(16 + padded);
      o.u32(r.len);
      o.bytes(r.data);
      o.u32(16 + padded);
      continue;
    }
    const bool comment = i % 3 == 2;
    const std::uint32_t total = 32 + padded + (comment ? 16 : 0);
    const std::uint64_t ts = std::uint64_t{r.sec} * 1'000'000 + r.usec;
    o.u32(6);
    o.u32(total);
    o.u32(0);
    o.u32(static_cast<std::uint32_t>(ts >> 32));
    o.u32(static_cast<std::uint32_t>(ts));
    o.u32(static_cast<std::uint32_t>(r.data.size()));
    o.u32(r.len);
    o.bytes(r.data);
    if (comment) {
      o.u16(1);  // opt_comment
      o.u16(5);
      o.bytes(ByteSpan(reinterpret_cast<const std::uint8_t*>("hello"), 5));
      o.u32(0);  // opt_endofopt
    }
    o.u32(total);
  }
  return o.b;
}

// Every segment of `on_disk` (read with payloads_in_file) is in the file, and its payload is
// the one of the same frame in `held` (read into memory).
void expect_same_payloads(const Capture& held, const Capture& on_disk) {
  ASSERT_TRUE(on_disk.file);
  ASSERT_EQ(held.flows.size(), on_disk.flows.size());
  PayloadReader reader(on_disk.file);
  std::size_t n = 0;
  for (std::size_t f = 0; f < held.flows.size(); ++f)
    for (int d = 0; d < 2; ++d) {
      const auto &a = held.flows[f].dir[d], &b = on_disk.flows[f].dir[d];
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].frame, b[i].frame);
        EXPECT_EQ(a[i].size(), b[i].size());
        if (a[i].payload.empty()) continue;
        EXPECT_TRUE(b[i].in_file()) << "frame " << b[i].frame;
        EXPECT_TRUE(b[i].payload.empty());
        const auto p = reader.payload(b[i]);
        EXPECT_EQ(Bytes(p.begin(), p.end()), a[i].payload) << "frame " << b[i].frame;
        ++n;
      }
    }
  EXPECT_GT(n, 20u);
}

std::string replay_json(const std::string& path, bool in_file,
                        replay::StepSource source = replay::StepSource::Kept) {
  auto cap = read_capture(path, {.payloads_in_file = in_file});
  EXPECT_TRUE(cap) << cap.error();
  if (!cap) return {};
  auto plan = replay::make_plan(*cap, {}, source);
  EXPECT_TRUE(!plan || plan->connections.at(0).read_again ==
                           (in_file && source == replay::StepSource::ReadAgain));
  EXPECT_TRUE(plan) << plan.error();
  if (!plan) return {};
  const auto r = replay::replay(*plan, {});
  auto j = replay::to_json(*plan, r, std::nullopt, std::nullopt, true);
  j.erase("file");  // (the path differs)
  return j.dump();
}

TEST(CaptureFile, EveryFormatsPayloadsAreReadBackFromTheFile) {
  // A conversation with RDMA Reads, atomics (their responses renumbered) and a Terminate.
  const auto original = source_file("pcap_traces/generated/mpa2_p2p_read_crc.pcap");
  const auto recs = records_of(slurp(original));
  ASSERT_GT(recs.size(), 30u);
  auto held = read_capture(original);
  ASSERT_TRUE(held) << held.error();
  const std::string expected = replay_json(original, false);
  ASSERT_FALSE(expected.empty());
  struct Variant {
    std::string name;
    Bytes bytes;
    bool timestamps = true;
  };
  const std::vector<Variant> variants = {
      {"be.pcap", as_pcap(recs, true, false)},
      {"ns.pcap", as_pcap(recs, false, true)},
      {"modified.pcap", as_pcap(recs, false, false, true)},
      {"le.pcapng", as_pcapng(recs, false, false)},
      {"be.pcapng", as_pcapng(recs, true, false)},
      {"spb.pcapng", as_pcapng(recs, false, true), false},
      {"spb_be.pcapng", as_pcapng(recs, true, true), false},
  };
  for (const auto& v : variants) {
    SCOPED_TRACE(v.name);
    const auto path = temp(v.name);
    spit(path, v.bytes);
    auto on_disk = read_capture(path, {.payloads_in_file = true});
    ASSERT_TRUE(on_disk) << on_disk.error();
    EXPECT_TRUE(on_disk->problems.empty());
    expect_same_payloads(*held, *on_disk);
    // (Simple Packet Blocks carry no timestamp: the replay's times differ.)
    if (v.timestamps) {
      EXPECT_EQ(replay_json(path, true), expected);
    }
    // And the steps made as each format is read again are the ones kept.
    EXPECT_EQ(replay_json(path, true, replay::StepSource::ReadAgain), replay_json(path, true));
    std::remove(path.c_str());
  }
}

TEST(CaptureFile, FileChangedAfterReadingIsRefusedInOneLine) {
  const auto original = source_file("pcap_traces/siw/rping_lo.pcap");
  const auto bytes = slurp(original);
  for (const auto source : {replay::StepSource::Kept, replay::StepSource::ReadAgain})
    for (const char* change : {"appended", "truncated", "rewritten"}) {
      SCOPED_TRACE(change);
      SCOPED_TRACE(source == replay::StepSource::Kept ? "steps kept" : "steps read again");
      const auto path = temp(std::string("changed_") + change + ".pcap");
      spit(path, bytes);
      auto cap = read_capture(path, {.payloads_in_file = true});
      ASSERT_TRUE(cap) << cap.error();
      auto plan = replay::make_plan(*cap, {}, source);
      ASSERT_TRUE(plan) << plan.error();
      ASSERT_EQ(plan->connections.at(0).read_again, source == replay::StepSource::ReadAgain);
      EXPECT_NO_THROW(replay::replay(*plan, {}));  // unchanged: fine
      if (std::string(change) == "appended") {
        Bytes more = bytes;
        more.push_back(0);
        spit(path, more);
      } else if (std::string(change) == "truncated") {
        spit(path,
             Bytes(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2)));
      } else {
        // The same octets written again, the modification time set back to what it was: the
        // status change time says it changed.
        struct stat before {};
        ASSERT_EQ(::stat(path.c_str(), &before), 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        spit(path, bytes);
        const timespec times[2] = {before.st_atim, before.st_mtim};
        ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
      }
      try {
        replay::replay(*plan, {});
        ADD_FAILURE() << "no error";
      } catch (const CaptureChanged& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(path + ": the file changed"), std::string::npos) << what;
        EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      }
      std::remove(path.c_str());
    }
}

// The read-ahead pays off on one connection read in capture order (a few preads for many
// segments), and costs little on many connections interleaved in the file, read one after the
// other as the learning pass and the replay do: never more than 4 times the octets served plus
// one window (it read 1 MiB per segment of such a capture once).
TEST(CaptureFile, ReadAheadServesOneConnectionAndCostsLittleOnInterleavedOnes) {
  // 40 copies of a connection (client ports 1 apart), interleaved frame by frame.
  auto recs = records_of(slurp(source_file("pcap_traces/siw/rping_lo.pcap")));
  ASSERT_FALSE(recs.empty());
  ASSERT_EQ(load_be16(&recs[0].data[12]), 0x0800);  // Ethernet, IPv4
  const std::size_t tcp = 14 + 4 * (recs[0].data[14] & 0x0f);
  const std::uint16_t client = load_be16(&recs[0].data[tcp]);  // (the SYN's sender)
  std::vector<Record> mixed;
  constexpr int kCopies = 40;
  for (const auto& r : recs)
    for (int k = 0; k < kCopies; ++k) {
      Record c = r;
      for (std::size_t at : {tcp, tcp + 2})
        if (load_be16(&c.data[at]) == client)
          store_be16(&c.data[at], static_cast<std::uint16_t>(client + k));
      mixed.push_back(std::move(c));
    }
  const auto path = temp("interleaved.pcap");
  spit(path, as_pcap(mixed, false, false));
  auto cap = read_capture(path, {.payloads_in_file = true});
  ASSERT_TRUE(cap) << cap.error();
  ASSERT_EQ(cap->flows.size(), static_cast<std::size_t>(kCopies));
  PayloadReader reader(cap->file);
  for (const auto& f : cap->flows)
    for (const auto& dir : f.dir)
      for (const auto& sg : dir) reader.payload(sg);
  EXPECT_GT(reader.octets_served(), 100'000u);
  EXPECT_LE(reader.octets_read(), 4 * reader.octets_served() + PayloadReader::kReadAhead);
  std::remove(path.c_str());

  // One connection of 8 MiB of Writes: about one pread per MiB, the file read about once.
  const auto bulk = temp("sequential.pcap");
  GeneratorOptions g;
  g.bulk_bytes = 8u << 20;
  ASSERT_TRUE(generate_conversation(bulk, g));
  auto one = read_capture(bulk, {.payloads_in_file = true});
  ASSERT_TRUE(one) << one.error();
  ASSERT_EQ(one->flows.size(), 1u);
  std::vector<const TcpSegment*> order;
  for (const auto& dir : one->flows[0].dir)
    for (const auto& sg : dir) order.push_back(&sg);
  std::sort(order.begin(), order.end(),
            [](const TcpSegment* a, const TcpSegment* b) { return a->frame < b->frame; });
  PayloadReader seq(one->file);
  for (const auto* sg : order) seq.payload(*sg);
  EXPECT_GT(seq.octets_served(), 8u << 20);
  EXPECT_LT(seq.refills(), 40u) << "for " << order.size() << " segments";
  EXPECT_LE(seq.octets_read(), std::filesystem::file_size(bulk) + PayloadReader::kFirstAhead);
  std::remove(bulk.c_str());
}

// A pipe (`rnic replay <(zcat x.pcap.gz)`) cannot be read twice: its payloads are held.
TEST(CaptureFile, PipeHoldsItsPayloads) {
  const auto bytes = slurp(source_file("pcap_traces/siw/rping_lo.pcap"));
  const auto fifo = temp("pipe.pcap");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  testing_support::PipeWriter writer(fifo, std::string(bytes.begin(), bytes.end()));
  auto cap = read_capture(fifo, {.payloads_in_file = true});
  writer.join();
  ASSERT_TRUE(cap) << cap.error();
  EXPECT_FALSE(cap->file);
  std::size_t held = 0;
  for (const auto& f : cap->flows)
    for (const auto& dir : f.dir)
      for (const auto& sg : dir) {
        EXPECT_FALSE(sg.in_file());
        held += !sg.payload.empty();
      }
  EXPECT_GT(held, 20u);
  auto plan = replay::make_plan(*cap);
  ASSERT_TRUE(plan) << plan.error();
  EXPECT_EQ(replay::replay(*plan, {}).unexpected, 0u);
  std::remove(fifo.c_str());
}

// `rnic replay -` reads the capture from standard input (libpcap's "-"): once, its payloads held.
TEST(CaptureFile, StandardInputIsReadOnce) {
  const std::string cmd = std::string(IWARP_RNIC_BIN) + " replay --quiet --no-progress - < " +
                          source_file("pcap_traces/siw/rping_lo.pcap") + " > /dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// Through a pipe, the views that read the capture again (--html, --ladder) read the copy the
// replay made of it, and show the name given; --permute copies it too. A device is read once, as
// before (it is not copied: it may never end): /dev/null gets libpcap's one line.
TEST(CaptureFile, ViewsOfAPipeReadItsCopy) {
  const auto file = source_file("pcap_traces/siw/rping_lo.pcap");
  const auto html = temp("pipe_view.html"), svg = temp("pipe_view.svg");
  const auto dir = temp("pipe_views_tmp");
  std::filesystem::create_directories(dir);
  const std::string rnic = IWARP_RNIC_BIN;
  auto run = [&](const std::string& args, const std::string& tmpdir) {
    const std::string cmd = "cat '" + file + "' | TMPDIR='" + tmpdir + "' '" + rnic +
                            "' replay --quiet --no-progress " + args + " - > /dev/null 2>&1";
    return std::system(cmd.c_str());
  };
  EXPECT_EQ(run("--html '" + html + "' --ladder '" + svg + "'", dir), 0);
  std::ifstream h(html), l(svg);
  const std::string page((std::istreambuf_iterator<char>(h)), std::istreambuf_iterator<char>());
  const std::string ladder((std::istreambuf_iterator<char>(l)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("rnic replay --html: -"), std::string::npos);
  EXPECT_NE(ladder.find("<svg"), std::string::npos);
  EXPECT_EQ(page.find("/proc/self/fd"), std::string::npos);
  // --permute and --html copy the pipe too: a directory that cannot hold it refuses them.
  EXPECT_NE(run("--permute 3", dir + "/missing"), 0);
  EXPECT_EQ(run("--permute 3", dir), 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  const std::string dev = rnic + " replay --quiet --no-progress /dev/null 2>&1";
  FILE* p = ::popen(dev.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[512] = {};
  const bool got = std::fgets(line, sizeof line, p) != nullptr;
  const int st = ::pclose(p);
  EXPECT_TRUE(got);
  EXPECT_EQ(WEXITSTATUS(st), 2);
  EXPECT_TRUE(std::string(line).starts_with("rnic replay: /dev/null: ")) << line;
  EXPECT_EQ(std::string(line).find("neither a regular file"), std::string::npos) << line;
  std::filesystem::remove_all(dir);
  std::remove(html.c_str());
  std::remove(svg.c_str());
}

// Peak resident set of `rnic replay --quiet path` (octets), and its exit status; with `pipe`,
// of `cat path | rnic replay --quiet -` (standard input a pipe); with `drop`, --drop FRAME.
std::pair<std::uint64_t, int> replay_rss(const std::string& path, bool pipe = false,
                                         std::uint64_t drop = 0) {
  const std::string d = drop ? " --drop " + std::to_string(drop) : std::string();
  if (pipe)
    return testing_support::run_child_rss(
        {"/bin/sh", "-c", "cat \"$1\" | exec \"$0\" replay --quiet --no-progress" + d + " -",
         IWARP_RNIC_BIN, path},
        std::chrono::seconds(300), true);
  std::vector<std::string> argv{IWARP_RNIC_BIN, "replay", "--quiet", "--no-progress", path};
  if (drop) argv.insert(argv.end() - 1, {"--drop", std::to_string(drop)});
  return testing_support::run_child_rss(argv, std::chrono::seconds(300), true);
}

// The frame of the first FIN in `path`.
std::uint64_t first_fin(const std::string& path) {
  auto cap = read_capture(path, {.payloads_in_file = true});
  EXPECT_TRUE(cap) << cap.error();
  std::uint64_t fin = 0;
  if (cap)
    for (const auto& f : cap->flows)
      for (const auto& dir : f.dir)
        for (const auto& sg : dir)
          if (sg.fin && (fin == 0 || sg.frame < fin)) fin = sg.frame;
  EXPECT_NE(fin, 0u) << path;
  return fin;
}

// `rnic replay` of a regular file learns its plan as the file is read (make_plan_from_file) and
// makes its steps as it reads the file again: nothing it holds grows with the capture's length.
// 4 times the capture in 256-octet segments (127 MiB and 640,000 segments more) add under
// 4 MiB (0.1 MiB, 2026-11-29; read whole, as before, 30 MiB: 80 octets per segment and more).
// The same through a pipe (copied into an unnamed file first; before, its payloads were held:
// 91 -> 341 MiB) and with a frame dropped (read whole before: 19 -> 48 MiB).
TEST(CaptureFile, RnicReplayDoesNotHoldThePayloads) {
#if IWARP_TEST_ASAN || IWARP_TEST_TSAN
  GTEST_SKIP() << "a sanitizer's quarantine and shadow memory make the resident set no measure";
#endif
  const auto small = temp("rss_small.pcap"), large = temp("rss_large.pcap");
  GeneratorOptions g;
  g.pcap.mss = 256;
  g.bulk_bytes = 24u << 20;
  ASSERT_TRUE(generate_conversation(small, g));
  g.bulk_bytes = 96u << 20;
  ASSERT_TRUE(generate_conversation(large, g));
  const auto grown = std::filesystem::file_size(large) - std::filesystem::file_size(small);
  // The file, the file through a pipe (copied into an unnamed file first), and the file with a
  // frame dropped (its first FIN: no hole).
  for (const auto& [how, pipe, drop] : {std::tuple<const char*, bool, bool>{"a file", false, false},
                                        {"a pipe", true, false},
                                        {"a file, --drop", false, true}}) {
    SCOPED_TRACE(how);
    const auto [rss_small, st_small] = replay_rss(small, pipe, drop ? first_fin(small) : 0);
    const auto [rss_large, st_large] = replay_rss(large, pipe, drop ? first_fin(large) : 0);
    EXPECT_EQ(st_small, 0);
    EXPECT_EQ(st_large, 0);
    ASSERT_GT(rss_small, 0u);
    const auto more = rss_large > rss_small ? rss_large - rss_small : 0;
    EXPECT_LT(more, 4u << 20) << "max RSS " << (rss_small >> 20) << " MiB -> " << (rss_large >> 20)
                              << " MiB for " << (grown >> 20) << " MiB more of capture";
    std::printf("rnic replay of %s, max RSS: %llu MiB (%llu MiB capture) -> %llu MiB (%llu MiB)\n",
                how, static_cast<unsigned long long>(rss_small >> 20),
                static_cast<unsigned long long>(std::filesystem::file_size(small) >> 20),
                static_cast<unsigned long long>(rss_large >> 20),
                static_cast<unsigned long long>(std::filesystem::file_size(large) >> 20));
  }
  std::remove(small.c_str());
  std::remove(large.c_str());
}

// `rnic replay --html` of a file reads its plan and its steps as `rnic replay` does (the view
// takes each message's first octets in one more read of the file, replay::stream_ranges): what
// it holds grows with the view (its events, at most htmlview::ViewLimits), not with the
// capture's segments. The same 32 one-MiB Writes (so the same events and view) in 512- and in
// 128-octet segments, 4 times as many (196,000 more): under 4 MiB more (-1.4 MiB, 2026-11-29;
// with the steps kept, as before: 46 -> 96 MiB).
TEST(CaptureFile, RnicReplayHtmlHoldsNothingPerSegment) {
#if IWARP_TEST_ASAN || IWARP_TEST_TSAN
  GTEST_SKIP() << "a sanitizer's quarantine and shadow memory make the resident set no measure";
#endif
  const auto fewer = temp("html_fewer.pcap"), more = temp("html_more.pcap");
  const auto html = temp("html_view.html");
  GeneratorOptions g;
  g.bulk_bytes = 32u << 20;
  g.bulk_message = 1u << 20;
  g.pcap.mss = 512;
  ASSERT_TRUE(generate_conversation(fewer, g));
  g.pcap.mss = 128;
  ASSERT_TRUE(generate_conversation(more, g));
  auto rss = [&](const std::string& path) {
    return testing_support::run_child_rss(
        {IWARP_RNIC_BIN, "replay", "--quiet", "--no-progress", "--html", html, path},
        std::chrono::seconds(300), true);
  };
  const auto [rss_fewer, st_fewer] = rss(fewer);
  const auto view_fewer = std::filesystem::file_size(html);
  const auto [rss_more, st_more] = rss(more);
  EXPECT_EQ(st_fewer, 0);
  EXPECT_EQ(st_more, 0);
  ASSERT_GT(rss_fewer, 0u);
  // (The same events: the view of the smaller segments, each event's first 8 of many more, is
  // no larger.)
  EXPECT_LE(std::filesystem::file_size(html), view_fewer);
  const auto grown = rss_more > rss_fewer ? rss_more - rss_fewer : 0;
  EXPECT_LT(grown, 4u << 20) << "max RSS " << (rss_fewer >> 20) << " MiB -> " << (rss_more >> 20)
                             << " MiB for 4 times the segments";
  std::printf("rnic replay --html, max RSS: %llu MiB (%llu MiB capture) -> %llu MiB (%llu MiB)\n",
              static_cast<unsigned long long>(rss_fewer >> 20),
              static_cast<unsigned long long>(std::filesystem::file_size(fewer) >> 20),
              static_cast<unsigned long long>(rss_more >> 20),
              static_cast<unsigned long long>(std::filesystem::file_size(more) >> 20));
  for (const auto& f : {fewer, more, html}) std::remove(f.c_str());
}

// `rnic replay --timeline` and `--json` print every timeline event: past the first 4,096 of a
// connection they wait in an unnamed temporary file (replay::TimelineSpool), and the report is
// written as they are read back. 16 and 64 one-MiB Writes in 256-octet segments (about 70,000
// and 280,000 timeline events): under 4 MiB more (0 MiB, 2026-11-29; held in memory, as
// before: --timeline 42 -> 153 MiB, --json 202 -> 753 MiB).
TEST(CaptureFile, RnicReplayPrintsEveryTimelineEventHoldingFewInMemory) {
#if IWARP_TEST_ASAN || IWARP_TEST_TSAN
  GTEST_SKIP() << "a sanitizer's quarantine and shadow memory make the resident set no measure";
#endif
  const auto fewer = temp("timeline_fewer.pcap"), more = temp("timeline_more.pcap");
  GeneratorOptions g;
  g.bulk_message = 1u << 20;
  g.pcap.mss = 256;
  g.bulk_bytes = 16u << 20;
  ASSERT_TRUE(generate_conversation(fewer, g));
  g.bulk_bytes = 64u << 20;
  ASSERT_TRUE(generate_conversation(more, g));
  for (const char* how : {"--timeline", "--json"}) {
    SCOPED_TRACE(how);
    auto rss = [&](const std::string& path) {
      return testing_support::run_child_rss({IWARP_RNIC_BIN, "replay", "--no-progress", how, path},
                                            std::chrono::seconds(300), true);
    };
    const auto [rss_fewer, st_fewer] = rss(fewer);
    const auto [rss_more, st_more] = rss(more);
    EXPECT_EQ(st_fewer, 0);
    EXPECT_EQ(st_more, 0);
    ASSERT_GT(rss_fewer, 0u);
    const auto grown = rss_more > rss_fewer ? rss_more - rss_fewer : 0;
    EXPECT_LT(grown, 4u << 20) << "max RSS " << (rss_fewer >> 20) << " MiB -> " << (rss_more >> 20)
                               << " MiB for 4 times the events";
    std::printf("rnic replay %s, max RSS: %llu MiB (%llu MiB capture) -> %llu MiB (%llu MiB)\n",
                how, static_cast<unsigned long long>(rss_fewer >> 20),
                static_cast<unsigned long long>(std::filesystem::file_size(fewer) >> 20),
                static_cast<unsigned long long>(rss_more >> 20),
                static_cast<unsigned long long>(std::filesystem::file_size(more) >> 20));
  }
  for (const auto& f : {fewer, more}) std::remove(f.c_str());
}

}  // namespace capture_file_test
}  // namespace iwarp::trace
