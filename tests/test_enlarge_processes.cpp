// rnic enlarge-demo between two processes: seeded random streams (0 - 1 MiB, random iovecs)
// both ways at once, verified in order on each side; idle connections stay small.
#include <gtest/gtest.h>

#include <cctype>

#include "tests/process_support.hpp"
#include "tests/test_support.hpp"
#include "tests/tshark_support.hpp"
#include "trace/pcap_reader.hpp"
#include "trace/trace_decoder.hpp"

namespace iwarp {
namespace {

using test::Process;

struct DemoCase {
  const char* name;
  std::vector<std::string> extra;
  int messages = 120;
  bool expect_refusals = false;
  bool expect_reenlarge = false;
};

// The number just before `word` on the line that starts with `line`.
long number_before(const std::string& out, const std::string& line, const std::string& word) {
  const auto l = out.find(line);
  if (l == std::string::npos) return -1;
  const auto w = out.find(word, l);
  if (w == std::string::npos) return -1;
  auto b = w;
  while (b > 0 && std::isdigit(static_cast<unsigned char>(out[b - 1]))) --b;
  return b == w ? -1 : std::stol(out.substr(b, w - b));
}

class EnlargeDemo : public ::testing::TestWithParam<DemoCase> {};

TEST_P(EnlargeDemo, RandomStreamsBothWaysArriveIntactAndInOrder) {
  const auto& c = GetParam();
  const auto pf = test::port_file(std::string("enl_") + c.name);
  std::vector<std::string> sargs = {
      "enlarge-demo", "--server", "--port",     "0",
      "--port-file",  pf,         "--messages", std::to_string(c.messages),
      "--seed",       "7"};
  sargs.insert(sargs.end(), c.extra.begin(), c.extra.end());
  Process server(sargs, std::string("enl_s_") + c.name);
  const auto port = test::read_port(pf);
  ASSERT_FALSE(port.empty()) << server.output();
  std::vector<std::string> cargs = {"enlarge-demo",
                                    "--client",
                                    "127.0.0.1",
                                    "--port",
                                    port,
                                    "--messages",
                                    std::to_string(c.messages),
                                    "--seed",
                                    "7"};
  cargs.insert(cargs.end(), c.extra.begin(), c.extra.end());
  Process client(cargs, std::string("enl_c_") + c.name);
  ASSERT_EQ(client.wait(std::chrono::seconds(300)), 0) << client.output() << server.output();
  ASSERT_EQ(server.wait(std::chrono::seconds(60)), 0) << server.output();
  for (const auto* p : {&client, &server}) {
    const auto out = p->output();
    const auto n = std::to_string(c.messages);
    EXPECT_NE(out.find(n + " messages"), std::string::npos) << out;
    EXPECT_NE(out.find(n + " ("), std::string::npos) << out;
    EXPECT_NE(out.find("received and verified in order"), std::string::npos) << out;
    // The idle connections kept their small buffer (8 KiB: 4 + 4 slots of 1 KiB).
    EXPECT_NE(out.find("connection 2: registered 8.0 KiB -> 8.0 KiB (idle)"), std::string::npos)
        << out;
    EXPECT_NE(out.find("connection 3: registered 8.0 KiB -> 8.0 KiB (idle)"), std::string::npos)
        << out;
    EXPECT_EQ(out.find("warning"), std::string::npos) << out;
  }
  const auto out = client.output();
  const long refused = number_before(out, "client: sending side:", " refused");
  // Phases: enlarged more than once (re-enlarge) and reused (more Writes than enlargements).
  const long granted = number_before(out, "client: sending side:", " granted");
  const long writes = number_before(out, "client: sending side:", " RDMA Writes");
  if (std::string(c.name) != "tight_budget") {
    EXPECT_GE(granted, c.expect_reenlarge ? 2 : 1) << out;
    EXPECT_GT(writes, granted) << out;  // buffers reused
  }
  if (std::string(c.name) == "free_small_shrink" || std::string(c.name) == "busy_poll_shrink") {
    EXPECT_GE(number_before(out, "client: sending side:", " release(s)"), 1) << out;
    EXPECT_GE(number_before(out, "client: receiving side:", " time(s)"), 1) << out;
  }
  if (c.expect_refusals) {
    EXPECT_GT(refused, 0) << client.output();
  } else {
    EXPECT_EQ(refused, 0) << client.output();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Enlarge, EnlargeDemo,
    ::testing::Values(
        DemoCase{"default", {}},
        DemoCase{"free_small_shrink", {"--free-small", "--idle-shrink", "5", "--pause", "30"}},
        // Buffers for one message at a time: larger messages enlarge again.
        DemoCase{"depth1", {"--depth", "1"}, 60, false, true},
        // A budget that refuses most enlargements: pieces carry the rest.
        DemoCase{"tight_budget", {"--budget", "300000", "--refusal-backoff", "20"}, 120, true},
        // Busy polling: each side's thread runs its receive path; with the idle timer too.
        DemoCase{"busy_poll", {"--busy-poll", "100"}},
        DemoCase{"busy_poll_shrink",
                 {"--busy-poll", "300", "--free-small", "--idle-shrink", "5", "--pause", "30"},
                 60},
        // The segment path: holes, duplicates, CRC and markers.
        DemoCase{
            "impaired_wire",
            {"--crc", "required", "--markers", "required", "--wire", "reorder=0.2,dup=0.05,seed=3"},
            40}),
    [](const auto& p) { return std::string(p.param.name); });

// The protocol on the wire: a capture of the demo opens cleanly in our decoder and in tshark,
// with the same FPDUs, every CRC good, and the protocol's RDMA Writes and Sends in it.
TEST(EnlargeDemoCapture, OpensCleanlyInTheDecoderAndTshark) {
  ASSERT_TSHARK();
  test::TempFile pcap("enlarge_capture");
  const auto pf = test::port_file("enl_cap");
  Process server(
      {"enlarge-demo", "--server", "--port", "0", "--port-file", pf, "--crc", "required"},
      "enl_cap_s");
  const auto port = test::read_port(pf);
  ASSERT_FALSE(port.empty()) << server.output();
  Process client(
      {"enlarge-demo", "--client", "127.0.0.1", "--port", port, "--messages", "30", "--max-size",
       "300000", "--connections", "2", "--crc", "required", "--pcap", pcap.path},
      "enl_cap_c");
  ASSERT_EQ(client.wait(std::chrono::seconds(120)), 0) << client.output();
  ASSERT_EQ(server.wait(std::chrono::seconds(60)), 0) << server.output();
  // One capture per connection: the first carried the stream, the second (path-2) stayed idle.
  auto cap = trace::read_capture(pcap.path);
  ASSERT_TRUE(cap) << cap.error();
  auto ours = trace::decode_capture(*cap);
  ASSERT_EQ(ours.flows.size(), 1u);
  EXPECT_EQ(ours.violations(), 0u);
  const auto& f = ours.flows[0];
  EXPECT_GT(f.opcode_counts.at("RDMA Write"), 0u);
  EXPECT_GT(f.opcode_counts.at("Send"), 0u);
  EXPECT_EQ(f.crc_good, f.fpdus);
  const auto dot = pcap.path.rfind('.');
  const std::string second = dot == std::string::npos
                                 ? pcap.path + "-2"
                                 : pcap.path.substr(0, dot) + "-2" + pcap.path.substr(dot);
  auto idle = trace::read_capture(second);
  ASSERT_TRUE(idle) << idle.error();
  auto idle_rep = trace::decode_capture(*idle);
  std::remove(second.c_str());
  ASSERT_EQ(idle_rep.flows.size(), 1u);
  EXPECT_EQ(idle_rep.violations(), 0u);
  EXPECT_EQ(idle_rep.flows[0].opcode_counts.count("RDMA Write"), 0u);  // it never grew
  // tshark agrees on every FPDU and every CRC.
  auto theirs = test::tshark_fpdus(pcap.path);
  EXPECT_EQ(theirs.opcode_counts, f.opcode_counts);
  // Our Sends carry this protocol, not RPC-over-RDMA or SMB Direct: tshark's guesses at those
  // would call them malformed.
  const auto detail =
      test::run_command(test::kTshark +
                        " --disable-protocol rpcordma --disable-protocol smb_direct "
                        "-o tcp.reassemble_out_of_order:TRUE -r '" +
                        pcap.path + "' -V");
  std::size_t good = 0;
  for (std::size_t at = 0; (at = detail.find("(Good CRC32)", at)) != std::string::npos; ++at)
    ++good;
  EXPECT_EQ(good, f.fpdus);
  EXPECT_EQ(detail.find("Bad CRC32"), std::string::npos);
  EXPECT_EQ(detail.find("Malformed"), std::string::npos);
}

TEST(EnlargeDemoCli, BadFlagsSayWhatIsWrong) {
  Process a({"enlarge-demo", "--server", "--slot-size", "10"}, "enl_bad1");
  EXPECT_EQ(a.wait(), 2);
  EXPECT_NE(a.output().find("--slot-size"), std::string::npos) << a.output();
  Process b({"enlarge-demo", "--server", "--min-enlarged", "9000", "--max-enlarged", "100"},
            "enl_bad2");
  EXPECT_EQ(b.wait(), 2);
  EXPECT_NE(b.output().find("min <= max"), std::string::npos) << b.output();
  Process c({"enlarge-demo"}, "enl_bad3");
  EXPECT_EQ(c.wait(), 2);
  EXPECT_NE(c.output().find("give --server or --client"), std::string::npos) << c.output();
  Process d({"enlarge-demo", "--server", "--busy-poll", "-5"}, "enl_bad4");
  EXPECT_EQ(d.wait(), 2);
  EXPECT_NE(d.output().find("--busy-poll"), std::string::npos) << d.output();
}

}  // namespace
}  // namespace iwarp
