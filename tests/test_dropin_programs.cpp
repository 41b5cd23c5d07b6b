// The drop-in libibverbs.so.1 / librdmacm.so.1 (verbs_abi/) under the real, unmodified Debian
// programs: ibverbs-utils (ibv_devices, ibv_devinfo), rdmacm-utils (rping, ucmatose), perftest
// (always -R: rdma_cm) and qperf (-cm1), each started through `rnic run [settings] -- PROGRAM`
// (so the wrapper is tested too) on 127.0.0.1, server and client as separate processes on fresh
// ports. Every pair checks both sides' exit status and what each printed: rping's ping data
// byte for byte, perftest's result rows, qperf's figures, ucmatose's completion lines; the capture
// directory's pcaps go through `rnic decode` and tshark; misuse fails cleanly and promptly.
// Sizes and counts are bounded so the whole executable stays well under three minutes on two
// cores. Deadlines only detect hangs (a program still running at its deadline is killed and the
// test fails saying so); nothing here asserts on timing.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "program_support.hpp"

namespace iwarp::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kDevice = "rnic0";
constexpr const char* kLoopback = "127.0.0.1";

// Hang detection only: generous against a loaded two-core host.
constexpr auto kClientLimit = std::chrono::milliseconds(60s);  // a client, start to exit
constexpr auto kServerAfter = std::chrono::milliseconds(20s);  // a server once its client ended
constexpr auto kQuickLimit = std::chrono::milliseconds(20s);   // programs that move no data

// `rnic run [settings] -- program...`
std::vector<std::string> rnic_run(const std::vector<std::string>& program,
                                  const std::vector<std::string>& settings = {}) {
  std::vector<std::string> argv{IWARP_RNIC_BIN, "run"};
  argv.insert(argv.end(), settings.begin(), settings.end());
  argv.push_back("--");
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Lines reporting a failure, in the words these programs use, and every line the library itself
// prints ("rnic verbs: ...": a failure or an unsupported call). Lines containing one of
// `skip` (data the program echoes) are not looked at. ("not supported" alone is no error:
// ibv_devinfo -v prints it for optional capabilities.)
std::vector<std::string> error_lines(const std::string& output,
                                     const std::vector<std::string>& skip = {}) {
  static const std::regex kError(
      R"(\b(error|errors|fail|failed|failure|unable|couldn't|could not|cannot|mismatch|abort|)"
      R"(aborted|segmentation|assertion|panic|fatal|invalid|unknown cq)\b|rnic verbs:)",
      std::regex::icase);
  std::vector<std::string> out;
  for (const auto& line : lines_of(output)) {
    bool skipped = false;
    for (const auto& s : skip) skipped = skipped || line.find(s) != std::string::npos;
    if (!skipped && std::regex_search(line, kError)) out.push_back(line);
  }
  return out;
}

::testing::AssertionResult no_error_lines(const Program& p,
                                          const std::vector<std::string>& skip = {}) {
  auto bad = error_lines(p.output(), skip);
  if (bad.empty()) return ::testing::AssertionSuccess();
  auto r = ::testing::AssertionFailure();
  r << p.name() << " printed " << bad.size() << " error line(s), first: \""
    << bad.front().substr(0, 300) << "\"" << p.describe();
  return r;
}

// The peer's description, for a failure message about the other side.
std::string peer(const std::unique_ptr<Program>& p) {
  return p ? "\n-- its peer --" + p->describe() : std::string("\n-- its peer was never started");
}

// ------------------------------------------------------------------------------------------
// The wrapper and the device the programs see.

TEST(DropinWrapper, LibrariesAreBuiltWhereTheWrapperPointsTheLoader) {
  for (const char* lib : {"libibverbs.so.1", "librdmacm.so.1", "libmlx5.so.1", "libefa.so.1"})
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(IWARP_DROPIN_DIR) / lib))
        << lib << " is missing from " << IWARP_DROPIN_DIR;

  Program env("env under rnic run", rnic_run({"env"}));
  env.wait(kQuickLimit);
  ASSERT_TRUE(exited_ok(env));
  std::string path;
  for (const auto& line : lines_of(env.output()))
    if (line.starts_with("LD_LIBRARY_PATH=")) path = line.substr(16);
  ASSERT_FALSE(path.empty()) << "rnic run set no LD_LIBRARY_PATH" << env.describe();
  const std::string first = path.substr(0, path.find(':'));
  std::error_code ec;
  EXPECT_TRUE(std::filesystem::equivalent(first, IWARP_DROPIN_DIR, ec))
      << "LD_LIBRARY_PATH starts with " << first << ", not the drop-in directory "
      << IWARP_DROPIN_DIR << env.describe();
}

TEST(DropinWrapper, MissingProgramFailsWithAMessage) {
  const std::string missing = "/nonexistent/dropin-test-program";
  Program p("rnic run of a missing program", rnic_run({missing, "-x"}));
  p.wait(kQuickLimit);
  EXPECT_TRUE(exited_with_failure(p));
  EXPECT_NE(p.output().find(missing), std::string::npos)
      << "the message should name the program" << p.describe();
}

TEST(DropinDevice, IbvDevicesListsTheDevice) {
  Program p("ibv_devices", rnic_run({"ibv_devices"}));
  p.wait(kQuickLimit);
  ASSERT_TRUE(exited_ok(p));
  int listed = 0;
  for (const auto& line : lines_of(p.output())) {
    std::istringstream f(line);
    std::string first;
    if (f >> first && first == kDevice) ++listed;
  }
  EXPECT_EQ(listed, 1) << "ibv_devices should list " << kDevice << " once" << p.describe();
  EXPECT_TRUE(no_error_lines(p));
}

TEST(DropinDevice, WrapperNamesTheDevice) {
  const std::string name = "rnictest7";
  Program p("ibv_devices with --device", rnic_run({"ibv_devices"}, {"--device", name}));
  p.wait(kQuickLimit);
  ASSERT_TRUE(exited_ok(p));
  int listed = 0;
  for (const auto& line : lines_of(p.output())) {
    std::istringstream f(line);
    std::string first;
    if (f >> first && first == name) ++listed;
  }
  EXPECT_EQ(listed, 1) << "rnic run --device " << name << " should name the device so"
                       << p.describe();
}

// The busy-poll yield knob is a setting like the others: a bad value is one line naming it and
// the device does not open; `rnic run --poll-yield 0` (never yield) runs.
TEST(DropinDevice, PollYieldSettingIsChecked) {
  Program bad("ibv_devices with RNIC_POLL_YIELD=lots",
              rnic_run({"env", "RNIC_POLL_YIELD=lots", "ibv_devices"}));
  bad.wait(kQuickLimit);
  EXPECT_NE(bad.output().find("RNIC_POLL_YIELD"), std::string::npos)
      << "the refusal should name the variable" << bad.describe();
  EXPECT_EQ(bad.output().find(kDevice), std::string::npos)
      << "no device with a bad setting" << bad.describe();
  Program off("ibv_devices with --poll-yield 0", rnic_run({"ibv_devices"}, {"--poll-yield", "0"}));
  off.wait(kQuickLimit);
  ASSERT_TRUE(exited_ok(off));
  EXPECT_NE(off.output().find(kDevice), std::string::npos) << off.describe();
  EXPECT_TRUE(no_error_lines(off));
}

// RNIC_BUSY_POLL is 0 or 1: anything else is one line naming it and no device; `rnic run
// --busy-poll` sets it (perftest runs with it: DropinPerftest's *_busypoll cases).
TEST(DropinDevice, BusyPollSettingIsChecked) {
  Program bad("ibv_devices with RNIC_BUSY_POLL=yes",
              rnic_run({"env", "RNIC_BUSY_POLL=yes", "ibv_devices"}));
  bad.wait(kQuickLimit);
  EXPECT_NE(bad.output().find("RNIC_BUSY_POLL"), std::string::npos)
      << "the refusal should name the variable" << bad.describe();
  EXPECT_EQ(bad.output().find(kDevice), std::string::npos)
      << "no device with a bad setting" << bad.describe();
  Program both("ibv_devices with RNIC_BUSY_POLL=1 and RNIC_RNR_WAIT_MS=100",
               rnic_run({"env", "RNIC_BUSY_POLL=1", "RNIC_RNR_WAIT_MS=100", "ibv_devices"}));
  both.wait(kQuickLimit);
  EXPECT_NE(both.output().find("RNIC_RNR_WAIT_MS is set"), std::string::npos)
      << "busy polling with a soft RNR wait should be refused" << both.describe();
  EXPECT_EQ(both.output().find(kDevice), std::string::npos) << both.describe();
  Program flags("rnic run --busy-poll --rnr-wait 100",
                rnic_run({"env"}, {"--busy-poll", "--rnr-wait", "100"}));
  flags.wait(kQuickLimit);
  EXPECT_TRUE(flags.status().exited() && flags.status().code == 2) << flags.describe();
  EXPECT_NE(flags.output().find("--busy-poll with --rnr-wait"), std::string::npos)
      << flags.describe();
  Program env("env under rnic run --busy-poll", rnic_run({"env"}, {"--busy-poll"}));
  env.wait(kQuickLimit);
  ASSERT_TRUE(exited_ok(env));
  EXPECT_NE(env.output().find("RNIC_BUSY_POLL=1"), std::string::npos) << env.describe();
}

// RNIC_DIRECT_MIN (`rnic run --direct-min`, the receive side's direct-read threshold) is
// octets from 64 to 1 GiB or off: anything else is one line naming it and no device; the flag
// checks its value before the program runs and sets the variable.
TEST(DropinDevice, DirectReadThresholdIsChecked) {
  for (const char* v : {"RNIC_DIRECT_MIN=4k", "RNIC_DIRECT_MIN=63", "RNIC_DIRECT_MIN=1073741825"}) {
    Program bad(std::string("ibv_devices with ") + v, rnic_run({"env", v, "ibv_devices"}));
    bad.wait(kQuickLimit);
    EXPECT_NE(bad.output().find("RNIC_DIRECT_MIN"), std::string::npos)
        << "the refusal should name the variable" << bad.describe();
    EXPECT_EQ(bad.output().find(kDevice), std::string::npos)
        << "no device with a bad setting" << bad.describe();
  }
  Program flag("rnic run --direct-min 10", rnic_run({"env"}, {"--direct-min", "10"}));
  flag.wait(kQuickLimit);
  EXPECT_TRUE(flag.status().exited() && flag.status().code == 2) << flag.describe();
  EXPECT_NE(flag.output().find("--direct-min"), std::string::npos) << flag.describe();
  for (const char* v : {"off", "64", "1073741824"}) {
    Program ok(std::string("ibv_devices with --direct-min ") + v,
               rnic_run({"sh", "-c", "env; ibv_devices"}, {"--direct-min", v}));
    ok.wait(kQuickLimit);
    ASSERT_TRUE(exited_ok(ok));
    EXPECT_NE(ok.output().find(std::string("RNIC_DIRECT_MIN=") + v), std::string::npos)
        << ok.describe();
    EXPECT_NE(ok.output().find(kDevice), std::string::npos) << ok.describe();
    EXPECT_TRUE(no_error_lines(ok)) << ok.describe();
  }
}

// The real-segment mode's settings (RNIC_REAL_SEGMENTS, RNIC_BEYOND_HOLES; `rnic run
// --real-segments/--beyond-holes`): a bad one is one line naming it and no device; hold or
// discard without real segments is refused, as the other programs refuse it. The mode itself
// runs in ImpairedLink.rpingseg (unmodified rping over a lossy link between two namespaces).
TEST(DropinDevice, RealSegmentSettingsAreChecked) {
  struct Bad {
    const char* setting;
    const char* says;
  };
  for (const Bad& b : {Bad{"RNIC_REAL_SEGMENTS=nosuch0", "nosuch0: no such interface"},
                       Bad{"RNIC_BEYOND_HOLES=sideways", "place, hold or discard"},
                       Bad{"RNIC_BEYOND_HOLES=hold", "RNIC_REAL_SEGMENTS with it"},
                       Bad{"RNIC_BEYOND_HOLES=discard", "RNIC_REAL_SEGMENTS with it"}}) {
    Program bad(std::string("ibv_devices with ") + b.setting,
                rnic_run({"env", b.setting, "ibv_devices"}));
    bad.wait(kQuickLimit);
    EXPECT_NE(bad.output().find(b.says), std::string::npos) << bad.describe();
    EXPECT_EQ(bad.output().find(kDevice), std::string::npos)
        << "no device with a bad setting" << bad.describe();
  }
  Program hold("rnic run --beyond-holes hold", rnic_run({"env"}, {"--beyond-holes", "hold"}));
  hold.wait(kQuickLimit);
  EXPECT_TRUE(hold.status().exited() && hold.status().code == 2) << hold.describe();
  EXPECT_NE(hold.output().find("--beyond-holes hold needs --real-segments"), std::string::npos)
      << hold.describe();
  Program nosuch("rnic run --real-segments nosuch0",
                 rnic_run({"env"}, {"--real-segments", "nosuch0"}));
  nosuch.wait(kQuickLimit);
  EXPECT_FALSE(exited_ok(nosuch)) << nosuch.describe();
  EXPECT_NE(nosuch.output().find("nosuch0: no such interface"), std::string::npos)
      << nosuch.describe();
  // Tapping an interface needs CAP_NET_RAW: where this process cannot open an AF_PACKET socket,
  // the refusal says so.
  const int probe = ::socket(AF_PACKET, SOCK_RAW, 0);
  const bool can_tap = probe >= 0;
  if (probe >= 0) ::close(probe);
  Program lo("ibv_devices under rnic run --real-segments lo --beyond-holes discard",
             rnic_run({"ibv_devices"}, {"--real-segments", "lo", "--beyond-holes", "discard"}));
  lo.wait(kQuickLimit);
  if (can_tap) {
    ASSERT_TRUE(exited_ok(lo));
    EXPECT_NE(lo.output().find(kDevice), std::string::npos) << lo.describe();
  } else {
    EXPECT_FALSE(exited_ok(lo)) << lo.describe();
    EXPECT_NE(lo.output().find("lo: socket(AF_PACKET)"), std::string::npos) << lo.describe();
  }
}

// `ibv_devinfo -v` fields (first occurrence of "name: value"), from one run per process.
struct Devinfo {
  std::string output, description;
  bool ok = false;
  std::string field(const std::string& name) const {
    std::regex re("(^|\\n)\\s*" + name + ":\\s*([^\\n]*)");
    std::smatch m;
    return std::regex_search(output, m, re) ? m[2].str() : std::string();
  }
};

const Devinfo& devinfo() {
  static const Devinfo info = [] {
    Program p("ibv_devinfo -v", rnic_run({"ibv_devinfo", "-v"}));
    p.wait(kQuickLimit);
    Devinfo d;
    d.output = p.output();
    d.description = p.describe();
    d.ok = p.status().ok();
    return d;
  }();
  return info;
}

TEST(DropinDevice, IbvDevinfoShowsAnActiveIwarpPort) {
  const auto& d = devinfo();
  ASSERT_TRUE(d.ok) << "ibv_devinfo -v did not exit 0" << d.description;
  EXPECT_EQ(d.field("hca_id"), kDevice) << d.description;
  EXPECT_EQ(d.field("transport"), "iWARP (1)") << d.description;
  EXPECT_TRUE(d.field("state").starts_with("PORT_ACTIVE")) << d.description;
  EXPECT_EQ(d.field("link_layer"), "Ethernet") << d.description;
  const std::string rd_atom = d.field("max_qp_rd_atom");
  ASSERT_FALSE(rd_atom.empty()) << "no max_qp_rd_atom in ibv_devinfo -v" << d.description;
  EXPECT_GT(std::strtol(rd_atom.c_str(), nullptr, 10), 0) << d.description;
  // max_vl_num 0 is what siw reports too (its query_port leaves it zero), and ibv_devinfo
  // prints "invalid value (0)" for it there as well.
  EXPECT_EQ(error_lines(d.output, {"max_vl_num:"}), std::vector<std::string>{}) << d.description;
}

// ------------------------------------------------------------------------------------------
// rping: the client advertises a buffer, the server RDMA Reads it and RDMA Writes it back; with
// -v both print every ping's data, which is checked here byte for byte against rping's pattern.

// What rping's client puts in its buffer for ping `ping` (rping.c, rping_test_client), as
// printed: size - 1 characters.
std::vector<std::string> rping_expected_data(int count, int size) {
  std::vector<std::string> out;
  int start = 65;
  for (int ping = 0; ping < count; ++ping) {
    std::string buf(size, '\0');
    int cc = std::snprintf(buf.data(), size, "rdma-ping-%d: ", ping);
    unsigned char c = start;
    for (int i = cc; i < size; ++i) {
      buf[i] = static_cast<char>(c);
      if (++c > 122) c = 65;
    }
    if (++start > 122) start = 65;
    buf.resize(size - 1);
    out.push_back(buf);
  }
  return out;
}

::testing::AssertionResult pings_printed(const Program& p, const std::string& prefix, int count,
                                         int size) {
  const auto expected = rping_expected_data(count, size);
  std::vector<std::string> got;
  for (const auto& line : lines_of(p.output()))
    if (line.starts_with(prefix + "rdma-ping-")) got.push_back(line.substr(prefix.size()));
  if (got.size() != expected.size())
    return ::testing::AssertionFailure()
           << p.name() << " printed " << got.size() << " \"" << prefix
           << "rdma-ping-\" lines, expected " << count << p.describe();
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == expected[i]) continue;
    std::size_t at = 0;
    while (at < got[i].size() && at < expected[i].size() && got[i][at] == expected[i][at]) ++at;
    return ::testing::AssertionFailure()
           << p.name() << " ping " << i << ": data differs from rping's pattern at byte " << at
           << " (printed " << got[i].size() << " characters, expected " << expected[i].size() << ")"
           << p.describe();
  }
  return ::testing::AssertionSuccess();
}

struct RpingCase {
  int size;
  bool validate;  // -V: the client compares what came back itself
};
void PrintTo(const RpingCase& c, std::ostream* os) {
  *os << "-S " << c.size << (c.validate ? " -V" : "");
}

class DropinRping : public ::testing::TestWithParam<RpingCase> {};

TEST_P(DropinRping, EveryPingComesBackIntact) {
  const auto [size, validate] = GetParam();
  constexpr int kCount = 20;
  const int port = free_tcp_port();
  ASSERT_NE(port, 0);
  std::vector<std::string> common{"-a", kLoopback,
                                  "-p", std::to_string(port),
                                  "-C", std::to_string(kCount),
                                  "-S", std::to_string(size),
                                  "-v"};
  if (validate) common.push_back("-V");
  auto server = std::make_unique<Program>("rping server", rnic_run(cat({"rping", "-s"}, common)));
  ASSERT_TRUE(wait_listening(*server, port));
  auto client = std::make_unique<Program>("rping client", rnic_run(cat({"rping", "-c"}, common)));
  client->wait(kClientLimit);
  server->wait(kServerAfter);

  EXPECT_TRUE(exited_ok(*client)) << peer(server);
  EXPECT_TRUE(exited_ok(*server)) << peer(client);
  // The server prints what it RDMA Read from the client; the client what the server RDMA Wrote.
  EXPECT_TRUE(pings_printed(*server, "server ping data: ", kCount, size));
  EXPECT_TRUE(pings_printed(*client, "ping data: ", kCount, size));
  EXPECT_TRUE(no_error_lines(*client, {"ping data: "}));
  EXPECT_TRUE(no_error_lines(*server, {"server ping data: "}));
}

INSTANTIATE_TEST_SUITE_P(Sizes, DropinRping,
                         ::testing::Values(RpingCase{26, true}, RpingCase{100, false},
                                           RpingCase{4096, false}, RpingCase{65535, true}),
                         [](const auto& tp) {
                           return "size" + std::to_string(tp.param.size) +
                                  (tp.param.validate ? "_verify" : "");
                         });

// Mixed: unmodified rping over the drop-in against `rnic ping` (the C++ verbs shim), both
// ways. rnic ping prints its verified pings; rping -V checks what comes back, the server
// prints it.
TEST(DropinMixed, RpingClientAgainstRnicPingServer) {
  constexpr int kCount = 10, kSize = 1000;
  const int port = free_tcp_port();
  ASSERT_NE(port, 0);
  auto server = std::make_unique<Program>(
      "rnic ping server",
      std::vector<std::string>{IWARP_RNIC_BIN, "ping", "--server", "--bind", kLoopback, "-p",
                               std::to_string(port), "-C", std::to_string(kCount), "-S",
                               std::to_string(kSize)});
  ASSERT_TRUE(wait_listening(*server, port));
  auto client = std::make_unique<Program>(
      "rping client", rnic_run({"rping", "-c", "-a", kLoopback, "-p", std::to_string(port), "-C",
                                std::to_string(kCount), "-S", std::to_string(kSize), "-v", "-V"}));
  client->wait(kClientLimit);
  server->wait(kServerAfter);
  EXPECT_TRUE(exited_ok(*client)) << peer(server);
  EXPECT_TRUE(exited_ok(*server)) << peer(client);
  EXPECT_TRUE(pings_printed(*client, "ping data: ", kCount, kSize)) << peer(server);
  EXPECT_NE(server->output().find(std::to_string(kCount) + " pings served"), std::string::npos)
      << server->describe();
}

TEST(DropinMixed, RnicPingClientAgainstRpingServer) {
  constexpr int kCount = 10, kSize = 1000;
  const int port = free_tcp_port();
  ASSERT_NE(port, 0);
  auto server = std::make_unique<Program>(
      "rping server", rnic_run({"rping", "-s", "-a", kLoopback, "-p", std::to_string(port), "-C",
                                std::to_string(kCount), "-S", std::to_string(kSize), "-v"}));
  ASSERT_TRUE(wait_listening(*server, port));
  auto client = std::make_unique<Program>(
      "rnic ping client",
      std::vector<std::string>{IWARP_RNIC_BIN, "ping", "--client", kLoopback, "-p",
                               std::to_string(port), "-C", std::to_string(kCount), "-S",
                               std::to_string(kSize)});
  client->wait(kClientLimit);
  server->wait(kServerAfter);
  EXPECT_TRUE(exited_ok(*client)) << peer(server);
  EXPECT_TRUE(exited_ok(*server)) << peer(client);
  EXPECT_NE(client->output().find(std::to_string(kCount) + " pings of " + std::to_string(kSize) +
                                  " octets verified"),
            std::string::npos)
      << client->describe();
  // rnic ping fills its buffer with a pattern of its own (it verifies it itself, above): the
  // rping server prints one line per ping it read.
  int lines = 0;
  for (const auto& line : lines_of(server->output()))
    if (line.rfind("server ping data: rdma-ping-", 0) == 0) ++lines;
  EXPECT_EQ(lines, kCount) << server->describe();
}

// ------------------------------------------------------------------------------------------
// ucmatose (cmatose.c): N connections; the server sends C messages of S bytes on each, the
// client receives them and sends as many back, then both disconnect.

struct UcmatoseCase {
  int connections, count, size;
};
void PrintTo(const UcmatoseCase& c, std::ostream* os) {
  *os << "-c " << c.connections << " -C " << c.count << " -S " << c.size;
}

class DropinUcmatose : public ::testing::TestWithParam<UcmatoseCase> {};

TEST_P(DropinUcmatose, DataTransfersComplete) {
  const auto c = GetParam();
  const int port = free_tcp_port();
  ASSERT_NE(port, 0);
  const std::vector<std::string> common{
      "-p", std::to_string(port),    "-c", std::to_string(c.connections),
      "-C", std::to_string(c.count), "-S", std::to_string(c.size)};
  auto server = std::make_unique<Program>("ucmatose server", rnic_run(cat({"ucmatose"}, common)));
  ASSERT_TRUE(wait_listening(*server, port));
  auto client = std::make_unique<Program>("ucmatose client",
                                          rnic_run(cat({"ucmatose", "-s", kLoopback}, common)));
  client->wait(kClientLimit);
  server->wait(kServerAfter);

  EXPECT_TRUE(exited_ok(*client)) << peer(server);
  EXPECT_TRUE(exited_ok(*server)) << peer(client);
  for (auto* p : {client.get(), server.get()}) {
    const auto out = p->output();
    for (const char* line : {"data transfers complete", "test complete", "return status 0"})
      EXPECT_NE(out.find(line), std::string::npos)
          << p->name() << " did not print \"" << line << "\"" << p->describe();
    EXPECT_EQ(out.find("cmatose: event:"), std::string::npos)
        << p->name() << " got a connection error event" << p->describe();
    EXPECT_TRUE(no_error_lines(*p));
  }
  EXPECT_NE(server->output().find("disconnected"), std::string::npos) << server->describe();
}

INSTANTIATE_TEST_SUITE_P(Connections, DropinUcmatose,
                         ::testing::Values(UcmatoseCase{1, 10, 100}, UcmatoseCase{4, 10, 1048576}),
                         [](const auto& tp) {
                           return "c" + std::to_string(tp.param.connections) + "_C" +
                                  std::to_string(tp.param.count) + "_S" +
                                  std::to_string(tp.param.size);
                         });

// ------------------------------------------------------------------------------------------
// perftest, always -R (rdma_cm: perftest's own QP exchange cannot connect an iWARP QP) and -F
// (no cpufreq failure), on the device by name. Server first (no host), client with 127.0.0.1.

// perftest result rows: "#bytes #iterations figures..." lines made only of numbers.
struct PerftestRow {
  std::uint64_t bytes = 0, iterations = 0;
  std::vector<double> figures;
};

std::vector<PerftestRow> perftest_rows(const std::string& output) {
  std::vector<PerftestRow> rows;
  for (const auto& line : lines_of(output)) {
    std::istringstream f(line);
    std::vector<std::string> tokens;
    for (std::string t; f >> t;) tokens.push_back(t);
    if (tokens.size() < 3) continue;
    PerftestRow row;
    bool numeric = true;
    for (std::size_t i = 0; i < tokens.size() && numeric; ++i) {
      char* end = nullptr;
      const double v = std::strtod(tokens[i].c_str(), &end);
      numeric = end && *end == '\0';
      if (i == 0) row.bytes = std::strtoull(tokens[i].c_str(), nullptr, 10);
      if (i == 1) row.iterations = std::strtoull(tokens[i].c_str(), nullptr, 10);
      if (i >= 2) row.figures.push_back(v);
    }
    numeric = numeric && tokens[0].find_first_not_of("0123456789") == std::string::npos &&
              tokens[1].find_first_not_of("0123456789") == std::string::npos;
    if (numeric) rows.push_back(row);
  }
  return rows;
}

std::string rows_text(const std::vector<PerftestRow>& rows) {
  std::string s;
  for (const auto& r : rows)
    s += " " + std::to_string(r.bytes) + "x" + std::to_string(r.iterations);
  return s.empty() ? " none" : s;
}

enum class Sizes { Fixed, All };

// What a perftest server prints (perftest 4.5): the SEND tests and the WRITE latency test
// measure on both sides (a row per size, like the client); the passive WRITE/READ bandwidth
// servers print one row, the client's report for its last size; ib_read_lat's server prints none.
enum class ServerRows { LikeClient, LastSize, None };

struct PerftestCase {
  const char* program;
  Sizes sizes;
  bool events;             // -e: wait on completion events instead of busy polling
  bool busy_poll = false;  // rnic run --busy-poll on both sides
};
void PrintTo(const PerftestCase& c, std::ostream* os) {
  *os << c.program << (c.sizes == Sizes::Fixed ? " -s/-n" : " -a") << (c.events ? " -e" : "")
      << (c.busy_poll ? " (rnic run --busy-poll)" : "");
}

bool is_latency(const PerftestCase& c) {
  return std::string_view(c.program).ends_with("_lat");
}
bool is_send_bw(const PerftestCase& c) {
  return std::string_view(c.program) == "ib_send_bw";
}

ServerRows server_rows(const PerftestCase& c) {
  const std::string_view p(c.program);
  if (p == "ib_read_lat") return ServerRows::None;
  if (p == "ib_write_bw" || p == "ib_read_bw") return ServerRows::LastSize;
  return ServerRows::LikeClient;
}

constexpr int kFixedSize = 65536;

// -s 65536 -n 5000, as issue 13 lists them, for the bandwidth tests. The latency tests run 1000
// iterations: both perftest processes busy-poll, and on two cores the engine threads then wait
// for a scheduler tick (4 ms) for many round trips, so 5000 took 15 s each.
int fixed_iterations(const PerftestCase& c) {
  return is_latency(c) ? 1000 : 5000;
}

// -a runs every size 2..2^23 (23 sizes): a bounded count per size; 5 (perftest's minimum) for
// the latency tests, for the same reason (20 took 15-22 s each).
int all_iterations(const PerftestCase& c) {
  return is_latency(c) ? 5 : 20;
}

int iterations(const PerftestCase& c) {
  return c.sizes == Sizes::Fixed ? fixed_iterations(c) : all_iterations(c);
}

std::vector<std::string> perftest_args(const PerftestCase& c, int port) {
  std::vector<std::string> a{c.program, "-R", "-F", "-d", kDevice, "-p", std::to_string(port)};
  if (c.sizes == Sizes::Fixed)
    a = cat(a, {"-s", std::to_string(kFixedSize), "-n", std::to_string(iterations(c))});
  else
    a = cat(a, {"-a", "-n", std::to_string(iterations(c))});
  if (c.events) {
    a.push_back("-e");
    // ib_send_bw on iWARP flow-controls with receive credits: the server RDMA Writes its
    // receive count into the client's memory, which raises no completion. With -e the client,
    // once rx_depth (default 512) Sends ahead of the credits it has seen, waits for a send
    // completion event that never comes when all its signaled Sends have completed (perftest
    // 4.5 run_iter_bw; credits then land in memory nobody looks at): a deadlock in perftest,
    // not in the RNIC (captured: the three credit Writes arrive 0.5 ms after the client's 511th
    // Send, and both sides sleep in ibv_get_cq_event). With rx_depth = iterations the client
    // could only block on its last Send with no credit at all, i.e. with the server a third of
    // the run behind.
    if (is_send_bw(c)) a = cat(a, {"-r", std::to_string(iterations(c))});
  }
  return a;
}

std::set<std::uint64_t> all_sizes() {
  std::set<std::uint64_t> sizes;
  for (int i = 1; i <= 23; ++i) sizes.insert(std::uint64_t{1} << i);
  return sizes;
}

// The rows `p` printed are the ones expected: each with the test's iteration count, one per
// size in `sizes`.
::testing::AssertionResult rows_for(const Program& p, const std::set<std::uint64_t>& sizes,
                                    int iters) {
  const auto rows = perftest_rows(p.output());
  std::set<std::uint64_t> got;
  bool counts_ok = rows.size() == sizes.size();
  for (const auto& r : rows) {
    got.insert(r.bytes);
    counts_ok = counts_ok && r.iterations == static_cast<std::uint64_t>(iters);
  }
  if (counts_ok && got == sizes) return ::testing::AssertionSuccess();
  std::string want;
  for (auto s : sizes) want += " " + std::to_string(s) + "x" + std::to_string(iters);
  return ::testing::AssertionFailure()
         << p.name() << " result rows (#bytes x #iterations):" << rows_text(rows)
         << "; expected:" << want << p.describe();
}

class DropinPerftest : public ::testing::TestWithParam<PerftestCase> {};

TEST_P(DropinPerftest, ServerAndClientReportResults) {
  const auto& c = GetParam();
  const int port = free_tcp_port();
  ASSERT_NE(port, 0);
  const auto args = perftest_args(c, port);
  // Busy polling: each side says at exit how many engine handlers its polling threads ran
  // (the "engine" log layer prints just that line).
  const std::vector<std::string> settings =
      c.busy_poll ? std::vector<std::string>{"--busy-poll", "--log", "engine=info"}
                  : std::vector<std::string>{};
  auto server =
      std::make_unique<Program>(std::string(c.program) + " server", rnic_run(args, settings));
  ASSERT_TRUE(wait_listening(*server, port));
  auto client = std::make_unique<Program>(std::string(c.program) + " client",
                                          rnic_run(cat(args, {kLoopback}), settings));
  client->wait(kClientLimit);
  server->wait(kServerAfter);

  EXPECT_TRUE(exited_ok(*client)) << peer(server);
  EXPECT_TRUE(exited_ok(*server)) << peer(client);
  EXPECT_TRUE(no_error_lines(*client));
  EXPECT_TRUE(no_error_lines(*server));
  if (c.busy_poll) {
    // ib_write_lat waits by watching memory, not its CQ: its polling threads may run nothing.
    const bool polls_cq = std::string_view(c.program) != "ib_write_lat";
    std::uint64_t polled = 0;
    for (const Program* p : {client.get(), server.get()}) {
      static const std::regex kSummary(R"(busy polling: (\d+) handlers ran on polling threads)");
      std::smatch m;
      const std::string out = p->output();
      ASSERT_TRUE(std::regex_search(out, m, kSummary))
          << p->name() << " printed no busy-polling summary" << p->describe();
      polled += std::stoull(m[1].str());
    }
    if (polls_cq) {
      EXPECT_GT(polled, 0u) << "no engine handler ran on a polling thread";
    }
  }

  const auto sizes = c.sizes == Sizes::Fixed ? std::set<std::uint64_t>{kFixedSize} : all_sizes();
  EXPECT_TRUE(rows_for(*client, sizes, iterations(c))) << peer(server);
  switch (server_rows(c)) {
    case ServerRows::LikeClient:
      EXPECT_TRUE(rows_for(*server, sizes, iterations(c))) << peer(client);
      break;
    case ServerRows::LastSize:
      EXPECT_TRUE(rows_for(*server, {*sizes.rbegin()}, iterations(c))) << peer(client);
      break;
    case ServerRows::None:
      break;
  }
}

std::vector<PerftestCase> perftest_cases() {
  std::vector<PerftestCase> out;
  for (const char* program :
       {"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat"})
    for (Sizes sizes : {Sizes::Fixed, Sizes::All})
      for (bool events : {false, true}) {
        const std::string_view p(program);
        // perftest 4.5's parser refuses -e for the WRITE tests ("Events feature not available
        // on WRITE verb", exit 1 before any device is opened): their completion is polled in
        // memory. So the WRITE tests run polling only.
        if (events && p.starts_with("ib_write")) continue;
        // ib_send_bw -a -e: the credit deadlock described in perftest_args, certain here: with
        // -a the receive depth is the iteration count (20) and at small sizes the client's 20
        // Sends all complete before the server has seen 20/3 of them (no workaround by flags;
        // -a with more iterations takes minutes). ib_send_bw -e runs with -s/-n above, and
        // the other -a tests run with -e.
        if (events && sizes == Sizes::All && p == "ib_send_bw") continue;
        // -a with -e too only on request (DROPIN_TESTS_FULL=1, adds ib_read_bw, ib_read_lat and
        // ib_send_lat -a -e: about a minute). -a costs perftest itself about 0.4 s (bandwidth)
        // or 0.8 s (latency) per size, 23 sizes, whatever -n is: it samples the CPU clock with
        // a 0.2 s busy loop (get_cpu_mhz) once or twice per size on each side. The completion
        // events are covered by -s/-n -e, every size by -a polling.
        if (events && sizes == Sizes::All && !std::getenv("DROPIN_TESTS_FULL")) continue;
        out.push_back({program, sizes, events});
      }
  // Busy polling (rnic run --busy-poll): every program at -s/-n, polling.
  for (const char* program :
       {"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat"})
    out.push_back({program, Sizes::Fixed, false, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Perftest, DropinPerftest, ::testing::ValuesIn(perftest_cases()),
                         [](const auto& tp) {
                           const auto& c = tp.param;
                           return std::string(c.program) +
                                  (c.sizes == Sizes::Fixed ? "_s" + std::to_string(kFixedSize)
                                                           : std::string("_all")) +
                                  "_n" + std::to_string(iterations(c)) +
                                  (c.events ? "_events" : "_poll") +
                                  (c.busy_poll ? "_busypoll" : "");
                         });

// ib_atomic_bw / ib_atomic_lat: RFC 7306 atomics. What must happen follows from what the device
// reports: with an atomic capability (ATOMIC_HCA / ATOMIC_GLOB) they must run and report; with
// ATOMIC_NONE they must fail cleanly (both sides end by themselves with a non-zero status and a
// perftest error message: no signal, no hang).
struct AtomicCase {
  const char* program;
  const char* type;  // -A
};
void PrintTo(const AtomicCase& c, std::ostream* os) {
  *os << c.program << " -A " << c.type;
}

class DropinPerftestAtomic : public ::testing::TestWithParam<AtomicCase> {};

TEST_P(DropinPerftestAtomic, RunsOrFailsAsTheDeviceCapabilitySays) {
  const auto& c = GetParam();
  const auto& d = devinfo();
  ASSERT_TRUE(d.ok) << "ibv_devinfo -v did not exit 0" << d.description;
  const std::string cap = d.field("atomic_cap");
  ASSERT_FALSE(cap.empty()) << "no atomic_cap in ibv_devinfo -v" << d.description;
  const bool capable = !cap.starts_with("ATOMIC_NONE");

  const int port = free_tcp_port();
  ASSERT_NE(port, 0);
  const std::vector<std::string> args{
      c.program, "-R", "-F", "-d", kDevice, "-p", std::to_string(port), "-A", c.type, "-n", "1000"};
  auto server = std::make_unique<Program>(std::string(c.program) + " server", rnic_run(args));
  ASSERT_TRUE(wait_listening(*server, port));
  auto client = std::make_unique<Program>(std::string(c.program) + " client",
                                          rnic_run(cat(args, {kLoopback})));
  client->wait(kClientLimit);
  server->wait(kServerAfter);

  if (capable) {
    EXPECT_TRUE(exited_ok(*client)) << "device atomic_cap: " << cap << peer(server);
    EXPECT_TRUE(exited_ok(*server)) << "device atomic_cap: " << cap << peer(client);
    EXPECT_TRUE(no_error_lines(*client));
    EXPECT_TRUE(no_error_lines(*server));
    const auto rows = perftest_rows(client->output());
    ASSERT_EQ(rows.size(), 1u) << "client result rows:" << rows_text(rows) << client->describe();
    EXPECT_EQ(rows[0].bytes, 8u) << client->describe();
  } else {
    EXPECT_TRUE(exited_with_failure(*client)) << "device atomic_cap: " << cap << peer(server);
    EXPECT_FALSE(error_lines(client->output()).empty())
        << "the client should say why it failed" << client->describe();
    // The server may end either way once its client is gone, but by itself.
    EXPECT_TRUE(server->status().exited()) << server->describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Atomics, DropinPerftestAtomic,
                         ::testing::Values(AtomicCase{"ib_atomic_bw", "FETCH_AND_ADD"},
                                           AtomicCase{"ib_atomic_bw", "CMP_AND_SWAP"},
                                           AtomicCase{"ib_atomic_lat", "FETCH_AND_ADD"},
                                           AtomicCase{"ib_atomic_lat", "CMP_AND_SWAP"}),
                         [](const auto& tp) {
                           return std::string(tp.param.program) + "_" + tp.param.type;
                         });

// ------------------------------------------------------------------------------------------
// qperf -cm1: every RC test of issue 13 and, in the same run, the TCP baseline. The server is a
// daemon (it serves one test after another, forking per test): it must still be running after
// the client is done, and is stopped by the test.

// qperf's rc_bw and rc_bi_bw keep 1024 Sends in flight and re-post receives as they poll,
// counting on InfiniBand's RNR NAK; iWARP has none, so both sides use the emulated
// receiver-not-ready wait (rnic run --rnr-wait, README).
const std::vector<std::string> kRnr{"--rnr-wait", "1000"};

TEST(DropinQperf, RcTestsAndTcpBaselineInOneRun) {
  const int port = free_tcp_port();
  ASSERT_NE(port, 0);
  const std::vector<std::string> tests{"rc_bw",
                                       "rc_bi_bw",
                                       "rc_lat",
                                       "rc_rdma_read_bw",
                                       "rc_rdma_read_lat",
                                       "rc_rdma_write_bw",
                                       "rc_rdma_write_lat",
                                       "rc_rdma_write_poll_lat",
                                       "tcp_bw",
                                       "tcp_lat"};
  auto server = std::make_unique<Program>("qperf server",
                                          rnic_run({"qperf", "-lp", std::to_string(port)}, kRnr));
  ASSERT_TRUE(wait_listening(*server, port));
  auto client = std::make_unique<Program>(
      "qperf client",
      rnic_run(cat({"qperf", "-cm1", "-lp", std::to_string(port), kLoopback, "-t", "2"}, tests),
               kRnr));
  // Ten tests of two seconds each, plus setup.
  client->wait(std::chrono::milliseconds(120s));
  EXPECT_TRUE(server->running()) << "the qperf server should still be serving" << server->describe()
                                 << peer(client);
  server->stop();

  EXPECT_TRUE(exited_ok(*client)) << peer(server);
  EXPECT_TRUE(no_error_lines(*client));
  EXPECT_TRUE(no_error_lines(*server));
  // Each test prints "name:" and then its figure on an indented line.
  const auto lines = lines_of(client->output());
  for (const auto& test : tests) {
    const std::string figure = test.ends_with("_bw") ? "bw  =" : "latency  =";
    bool printed = false;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (lines[i] != test + ":") continue;
      for (std::size_t j = i + 1; j < lines.size() && lines[j].starts_with(" "); ++j)
        printed = printed || lines[j].find(figure) != std::string::npos;
    }
    EXPECT_TRUE(printed) << "qperf printed no \"" << figure << "\" for " << test
                         << client->describe(80);
  }
}

// ------------------------------------------------------------------------------------------
// The capture directory: an unmodified perftest run records its connections as pcaps that
// `rnic decode` and tshark both read cleanly (issue 13, "Done when" 4).

std::vector<std::string> pcaps_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".pcap") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string listing(const std::string& dir) {
  std::string s;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    s += "\n  " + e.path().filename().string();
  return s.empty() ? " (empty)" : s;
}

TEST(DropinCapture, PerftestConnectionsRecordedAsReadablePcaps) {
  {
    Program tshark("tshark --version", {"tshark", "--version"});
    tshark.wait(kQuickLimit);
    ASSERT_TRUE(tshark.status().ok())
        << "tshark is required: run scripts/install-deps.sh" << tshark.describe();
  }
  const int port = free_tcp_port();
  ASSERT_NE(port, 0);
  const auto server_dir = fresh_directory("server_capture");
  const auto client_dir = fresh_directory("client_capture");
  const std::vector<std::string> args{"ib_write_bw",        "-R", "-F",   "-d", kDevice, "-p",
                                      std::to_string(port), "-s", "4096", "-n", "100"};
  auto server = std::make_unique<Program>("ib_write_bw server (capturing)",
                                          rnic_run(args, {"--capture-dir", server_dir}));
  ASSERT_TRUE(wait_listening(*server, port));
  auto client =
      std::make_unique<Program>("ib_write_bw client (capturing)",
                                rnic_run(cat(args, {kLoopback}), {"--capture-dir", client_dir}));
  client->wait(kClientLimit);
  server->wait(kServerAfter);
  EXPECT_TRUE(exited_ok(*client)) << peer(server);
  EXPECT_TRUE(exited_ok(*server)) << peer(client);

  // perftest -R opens two connections per side, a control one and a data one, and the capture
  // directory holds a pcap per connection. Each is read cleanly by rnic decode (exit 0: no
  // protocol violation) and by tshark (exit 0; its iWARP dissectors find the same FPDUs); the
  // data connection's pcap holds every RDMA Write of the run (100).
  for (const auto& dir : {server_dir, client_dir}) {
    const auto files = pcaps_in(dir);
    EXPECT_GE(files.size(), 2u) << "expected a pcap per connection in " << dir << ":"
                                << listing(dir);
    int iwarp_connections = 0, iwarp_fpdus = 0, most_writes = 0;
    for (const auto& file : files) {
      Program decode("rnic decode", {IWARP_RNIC_BIN, "decode", file});
      decode.wait(kQuickLimit);
      EXPECT_TRUE(exited_ok(decode));
      const auto out = decode.output();
      EXPECT_EQ(out.find("capture problem"), std::string::npos) << decode.describe();
      EXPECT_EQ(out.find("no iWARP connection"), std::string::npos) << decode.describe();
      EXPECT_FALSE(std::regex_search(out, std::regex("violations [1-9]"))) << decode.describe();
      std::smatch m;
      if (std::regex_search(out, m, std::regex(R"((\d+) iWARP\n)")))
        iwarp_connections += std::stoi(m[1].str());
      if (std::regex_search(out, m, std::regex(R"(RDMA Write (\d+))")))
        most_writes = std::max(most_writes, std::stoi(m[1].str()));

      Program tshark("tshark -r", {"tshark", "-o", "tcp.try_heuristic_first:TRUE", "-r", file});
      tshark.wait(kQuickLimit);
      EXPECT_TRUE(exited_ok(tshark));
      EXPECT_TRUE(no_error_lines(tshark));
      // tshark's iWARP dissectors find the same FPDUs as rnic decode (one RDMAP opcode each).
      Program fpdus("tshark FPDUs", {"tshark", "-o", "tcp.try_heuristic_first:TRUE", "-o",
                                     "tcp.reassemble_out_of_order:TRUE", "-r", file, "-Y",
                                     "iwarp_mpa.fpdu", "-T", "fields", "-E", "occurrence=a", "-E",
                                     "aggregator=,", "-e", "iwarp_rdma.opcode"});
      fpdus.wait(kQuickLimit);
      EXPECT_TRUE(exited_ok(fpdus));
      int tshark_fpdus = 0;
      for (const auto& line : lines_of(fpdus.stdout_text()))
        if (!line.empty()) tshark_fpdus += 1 + static_cast<int>(std::ranges::count(line, ','));
      int decoded_fpdus = 0;
      static const std::regex kFpdus(R"(FPDUs (\d+))");
      for (auto it = std::sregex_iterator(out.begin(), out.end(), kFpdus);
           it != std::sregex_iterator(); ++it)
        decoded_fpdus += std::stoi((*it)[1].str());
      EXPECT_EQ(tshark_fpdus, decoded_fpdus)
          << "tshark and rnic decode disagree on the FPDUs in " << file << decode.describe();
      iwarp_fpdus += tshark_fpdus;
    }
    EXPECT_GE(iwarp_connections, 2)
        << "rnic decode found fewer than two iWARP connections in " << dir << ":" << listing(dir);
    EXPECT_GE(iwarp_fpdus, 100) << "tshark dissected too few FPDUs in " << dir << ":"
                                << listing(dir);
    EXPECT_GE(most_writes, 100) << "no pcap in " << dir
                                << " holds the run's 100 RDMA Writes:" << listing(dir);
  }
}

// ------------------------------------------------------------------------------------------
// The wrapper's settings reach the connection: the same settings on both sides of an rping,
// the client's capture decoded, the negotiated parameters checked.

struct SettingsCase {
  const char* name;
  std::vector<std::string> settings;
  const char* negotiated;  // in rnic decode's "negotiated:" line
  // Whether rping's server can post its RDMA Read (every case here: with MPA revision 1, which
  // negotiates no IRD/ORD, rdma_accept(id, NULL) takes the device's, as the kernel's CM does).
  bool reads = true;
};
void PrintTo(const SettingsCase& c, std::ostream* os) {
  *os << command_line(c.settings);
}

class DropinWrapperSettings : public ::testing::TestWithParam<SettingsCase> {};

TEST_P(DropinWrapperSettings, RpingNegotiatesWhatTheWrapperSays) {
  const auto& c = GetParam();
  const int port = free_tcp_port();
  ASSERT_NE(port, 0);
  const auto dir = fresh_directory(std::string("settings_") + c.name);
  constexpr int kCount = 10, kSize = 4096;
  const std::vector<std::string> common{"-a", kLoopback,
                                        "-p", std::to_string(port),
                                        "-C", std::to_string(kCount),
                                        "-S", std::to_string(kSize),
                                        "-v", "-V"};
  auto server =
      std::make_unique<Program>("rping server", rnic_run(cat({"rping", "-s"}, common), c.settings));
  ASSERT_TRUE(wait_listening(*server, port));
  auto client = std::make_unique<Program>(
      "rping client",
      rnic_run(cat({"rping", "-c"}, common), cat(c.settings, {"--capture-dir", dir})));
  client->wait(kClientLimit);
  server->wait(kServerAfter);
  EXPECT_TRUE(exited_ok(*client)) << peer(server);
  if (c.reads) {
    EXPECT_TRUE(exited_ok(*server)) << peer(client);
    // rping's client exits 0 when the server disconnects early: its pings tell.
    EXPECT_TRUE(pings_printed(*server, "server ping data: ", kCount, kSize)) << peer(client);
    EXPECT_TRUE(pings_printed(*client, "ping data: ", kCount, kSize)) << peer(server);
  } else {
    EXPECT_FALSE(exited_ok(*server)) << "rping's Read cannot go with ORD 0" << peer(client);
    EXPECT_NE(server->output().find("ORD is 0"), std::string::npos)
        << "the refused Read should say why" << server->describe();
  }

  const auto files = pcaps_in(dir);
  ASSERT_FALSE(files.empty()) << "no .pcap in " << dir << ":" << listing(dir);
  std::string negotiated;
  for (const auto& file : files) {
    Program decode("rnic decode --summary", {IWARP_RNIC_BIN, "decode", "--summary", file});
    decode.wait(kQuickLimit);
    EXPECT_TRUE(exited_ok(decode));
    for (const auto& line : lines_of(decode.output()))
      if (line.find("negotiated:") != std::string::npos) negotiated += line + "\n";
  }
  EXPECT_NE(negotiated.find(c.negotiated), std::string::npos)
      << "wrapper settings " << command_line(c.settings) << " should negotiate \"" << c.negotiated
      << "\"; rnic decode says:\n"
      << negotiated;
}

INSTANTIATE_TEST_SUITE_P(
    Settings, DropinWrapperSettings,
    ::testing::Values(SettingsCase{"crc_off", {"--crc", "off"}, "crc off"},
                      SettingsCase{"crc_required", {"--crc", "required"}, "crc on"},
                      SettingsCase{
                          "markers_required", {"--markers", "required"}, "markers i->r on r->i on"},
                      SettingsCase{"mpa_rev1", {"--mpa-rev", "1"}, "negotiated: rev 1 "}),
    [](const auto& tp) { return std::string(tp.param.name); });

// ------------------------------------------------------------------------------------------
// Misuse: a client with no server fails by itself, promptly, saying so (no hang, no signal).

struct NoServerCase {
  const char* name;
  std::vector<std::string> (*args)(int port);
  const char* message;  // regex over the output
};
void PrintTo(const NoServerCase& c, std::ostream* os) {
  *os << c.name;
}

class DropinNoServer : public ::testing::TestWithParam<NoServerCase> {};

TEST_P(DropinNoServer, ClientFailsCleanly) {
  const auto& c = GetParam();
  const int port = free_tcp_port();  // nobody listens there
  ASSERT_NE(port, 0);
  Program client(std::string(c.name) + " client with no server", rnic_run(c.args(port)));
  client.wait(kQuickLimit);
  EXPECT_TRUE(exited_with_failure(client));
  EXPECT_TRUE(std::regex_search(client.output(), std::regex(c.message)))
      << "expected a message matching /" << c.message << "/" << client.describe();
}

INSTANTIATE_TEST_SUITE_P(
    Misuse, DropinNoServer,
    ::testing::Values(
        NoServerCase{"rping",
                     [](int port) -> std::vector<std::string> {
                       return {"rping", "-c", "-a", kLoopback, "-p", std::to_string(port),
                               "-C",    "1",  "-v"};
                     },
                     "RDMA_CM_EVENT_(REJECTED|UNREACHABLE|CONNECT_ERROR)|connect error"},
        NoServerCase{"ucmatose",
                     [](int port) -> std::vector<std::string> {
                       return {"ucmatose", "-s", kLoopback, "-p", std::to_string(port)};
                     },
                     "cmatose: event: RDMA_CM_EVENT_"},
        NoServerCase{"ib_write_bw",
                     [](int port) -> std::vector<std::string> {
                       return {"ib_write_bw",        "-R",     "-F", "-d", kDevice, "-p",
                               std::to_string(port), kLoopback};
                     },
                     "Unable to perform rdma_client function|Failed to connect RDMA CM"},
        NoServerCase{"ib_read_lat",
                     [](int port) -> std::vector<std::string> {
                       return {"ib_read_lat",        "-R",     "-F", "-d", kDevice, "-p",
                               std::to_string(port), kLoopback};
                     },
                     "Unable to perform rdma_client function|Failed to connect RDMA CM"}),
    [](const auto& tp) { return std::string(tp.param.name); });

}  // namespace
}  // namespace iwarp::test
