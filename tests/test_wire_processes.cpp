// Issue 5, done-when 4: two rnic processes receiving through the simulated impaired wire
// (--wire): TCP segments re-cut and presented out of order, duplicated and retransmitted, so the
// segment path places FPDUs beyond holes and defers completions. rnic ping and every RDMA
// operation up to 16 MiB complete with data verified, with and without markers and CRC.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "process_support.hpp"
#include "test_support.hpp"
#include "trace/trace_decoder.hpp"

using namespace iwarp;
using namespace std::chrono_literals;
using test::Process;

namespace {

struct WireConfig {
  const char* name;
  std::vector<std::string> args;
};

const WireConfig kWireConfigs[] = {
    {"plain", {"--crc", "off"}},
    {"crc", {"--crc", "required"}},
    {"markers", {"--crc", "off", "--markers", "required"}},
    {"crc_markers_v1", {"--mpa-rev", "1", "--crc", "required", "--markers", "required"}},
    {"p2p_read", {"--crc", "required", "--p2p", "--rtr", "read"}},
};

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct SegmentPath {
  std::uint64_t segments = 0, ooo = 0, opened = 0, closed = 0, placed = 0, released = 0;
};

// The "segment path (...)" line a program prints with --wire.
std::optional<SegmentPath> segment_path(const std::string& out) {
  const auto at = out.find("segment path (simulated wire ");
  if (at == std::string::npos) return std::nullopt;
  const auto colon = out.find("): ", at);
  if (colon == std::string::npos) return std::nullopt;
  SegmentPath s;
  unsigned long long v[6] = {};
  const int n = std::sscanf(out.c_str() + colon + 3,
                            "%llu segments received, %llu out of order, %*u duplicate octets; %llu "
                            "holes opened, %llu closed; %llu FPDUs placed beyond a hole, %llu "
                            "delivered when their hole closed",
                            &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]);
  if (n != 6) return std::nullopt;
  s.segments = v[0];
  s.ooo = v[1];
  s.opened = v[2];
  s.closed = v[3];
  s.placed = v[4];
  s.released = v[5];
  return s;
}

void expect_holes_exercised(const std::string& out, const char* who) {
  auto s = segment_path(out);
  ASSERT_TRUE(s) << who << " printed no segment-path line:\n" << out;
  EXPECT_GT(s->ooo, 0u) << who;
  EXPECT_GT(s->opened, 0u) << who;
  EXPECT_EQ(s->opened, s->closed) << who << ": every hole closed";
  EXPECT_GT(s->placed, 0u) << who << ": FPDUs were placed beyond a hole";
  EXPECT_EQ(s->placed, s->released) << who << ": each was delivered when its hole closed";
}

class WireXfer : public ::testing::TestWithParam<WireConfig> {};

}  // namespace

TEST_P(WireXfer, EveryOperationUpTo16MiBThroughHoles) {
  const auto& c = GetParam();
  const std::string tag = std::string("wire_") + c.name;
  const auto pf = test::port_file(tag);
  test::TempFile spcap(tag + "_server");
  Process server(cat({"xfer", "--server", "--port", "0", "--port-file", pf, "--pcap", spcap.path,
                      "--wire", "reorder=0.3,dup=0.05,seed=11"},
                     c.args),
                 tag + "_server");
  const auto port = test::read_port(pf);
  ASSERT_FALSE(port.empty()) << server.output();
  Process client(cat({"xfer", "--client", "127.0.0.1", "--port", port, "--wire",
                      "reorder=0.3,dup=0.05,delay=6,seed=12"},
                     c.args),
                 tag + "_client");
  EXPECT_EQ(client.wait(180s), 0) << client.output();
  EXPECT_EQ(server.wait(30s), 0) << server.output();
  EXPECT_NE(client.output().find("30 operations verified, 0 failed"), std::string::npos)
      << client.output();
  EXPECT_NE(server.output().find("server: all checks passed"), std::string::npos)
      << server.output();
  EXPECT_NE(server.output().find("guard pages intact"), std::string::npos);
  expect_holes_exercised(client.output(), "client");
  expect_holes_exercised(server.output(), "server");
  // The capture holds the stream as TCP delivered it (before the simulated wire): clean.
  auto cap = trace::read_capture(spcap.path);
  ASSERT_TRUE(cap) << cap.error();
  auto rep = trace::decode_capture(*cap);
  ASSERT_EQ(rep.flows.size(), 1u);
  EXPECT_EQ(rep.flows[0].violations, 0u);
}

INSTANTIATE_TEST_SUITE_P(Rnic, WireXfer, ::testing::ValuesIn(kWireConfigs),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(WireProcesses, PingThroughHolesWithAndWithoutMarkers) {
  for (const char* markers : {"off", "required"}) {
    SCOPED_TRACE(markers);
    const std::string port = test::free_port();
    ASSERT_FALSE(port.empty());
    // 20000-octet pings span several segments, so the wire can reorder inside each message.
    Process server(
        {"ping", "--server", "--bind", "127.0.0.1", "--port", port, "-C", "40", "-S", "20000",
         "--markers", markers, "--mss", "1460", "--wire", "reorder=0.3,dup=0.05,seed=3"},
        std::string("wping_server_") + markers);
    ASSERT_TRUE(server.wait_for_output("listening")) << server.output();
    Process client({"ping", "--client", "127.0.0.1", "--port", port, "-C", "40", "-S", "20000",
                    "--markers", markers, "--mss", "1460", "--wire", "reorder=0.3,dup=0.05,seed=4"},
                   std::string("wping_client_") + markers);
    EXPECT_EQ(client.wait(120s), 0) << client.output();
    EXPECT_EQ(server.wait(30s), 0) << server.output();
    EXPECT_NE(client.output().find("40 pings of 20000 octets verified"), std::string::npos)
        << client.output();
    expect_holes_exercised(client.output(), "client");
    expect_holes_exercised(server.output(), "server");
  }
}

TEST(WireProcesses, BadWireSpecIsOneLine) {
  for (const char* spec : {"reorder=2", "bogus=1", "delay=0", "reorder"}) {
    Process p({"ping", "--client", "127.0.0.1", "--port", "1", "--wire", spec},
              std::string("wire_bad"));
    EXPECT_EQ(p.wait(10s), 2) << spec;
    const std::string out = p.output();
    EXPECT_NE(out.find("--wire"), std::string::npos) << out;
    EXPECT_LE(std::count(out.begin(), out.end(), '\n'), 2) << out;
  }
}
