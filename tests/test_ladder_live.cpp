// rnic xfer --ladder between two real processes over 127.0.0.1: the client's ladder draws the
// messages of its own capture and, on its column beside each message it received, what its
// receive engine did: one placement per FPDU the capture shows arriving, a CQE beside each
// Send and Read Response; a bad --ladder path is one line, exit status 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "process_support.hpp"
#include "svg_groups.hpp"

namespace iwarp {
namespace {

namespace fs = std::filesystem;
using iwarp::test::svg_groups;
using namespace std::chrono_literals;
using test::Process;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(LadderLive, XferClientLadderShowsWhatItsEngineDidBesideEachMessage) {
  const auto pf = test::port_file("ladder_live");
  const auto svg =
      (fs::temp_directory_path() / ("ladder_live_" + std::to_string(::getpid()) + ".svg")).string();
  Process server({"xfer", "--server", "--port", "0", "--port-file", pf, "--sizes", "64,5000"},
                 "ladder_live_server");
  const auto port = test::read_port(pf);
  ASSERT_FALSE(port.empty()) << server.output();
  Process client({"xfer", "--client", "127.0.0.1", "--port", port, "--sizes", "64,5000", "--ops",
                  "send,read,write", "--ladder", svg},
                 "ladder_live_client");
  ASSERT_EQ(client.wait(60s), 0) << client.output();
  EXPECT_EQ(server.wait(30s), 0) << server.output();
  const auto text = slurp(svg);
  fs::remove(svg);
  const auto msgs = svg_groups(text, "msg"), locals = svg_groups(text, "local");
  // What the capture shows arriving at the client (the MPA initiator): FPDUs, and the
  // messages that complete a receive or a Read there.
  std::uint64_t fpdus = 0, completing = 0;
  for (const auto& m : msgs) {
    if (m.at("data-to") != "initiator") continue;
    const auto n = std::stoull(m.at("data-repeat"));
    fpdus += n * std::stoull(m.at("data-segments"));
    const auto& op = m.at("data-opcode");
    if (op.starts_with("Send") || op == "RDMA Read Response") completing += n;
  }
  ASSERT_GT(fpdus, 0u) << text.substr(0, 2000);
  std::uint64_t placed = 0, cqes = 0;
  for (const auto& l : locals) {
    EXPECT_EQ(l.at("data-side"), "initiator");  // only this side's engine
    EXPECT_TRUE(l.contains("data-of-frame")) << "not tied to a message: " << l.at("class");
    if (l.at("class") == "local placed") placed += std::stoull(l.at("data-count"));
    if (l.at("class") == "local cqe") cqes += std::stoull(l.at("data-count"));
  }
  EXPECT_EQ(placed, fpdus);
  EXPECT_EQ(cqes, completing);
}

// rnic ping --ladder on both sides: each side's ladder draws the same messages and only its own
// engine's events, on its own column, one placement per FPDU it received.
TEST(LadderLive, PingLadderOfEachSideShowsItsOwnEngine) {
  const auto dir = fs::temp_directory_path() / ("ladder_ping_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto server_svg = (dir / "server.svg").string(), client_svg = (dir / "client.svg").string();
  Process server({"ping", "--server", "--port", "0", "--ladder", server_svg}, "ladder_ping_server");
  ASSERT_TRUE(server.wait_for_output("listening on")) << server.output();
  const std::regex port_re(R"(listening on [0-9.]+:(\d+))");
  std::smatch pm;
  const auto so = server.output();
  ASSERT_TRUE(std::regex_search(so, pm, port_re)) << so;
  Process client(
      {"ping", "--client", "127.0.0.1", "--port", pm[1], "--count", "3", "--ladder", client_svg},
      "ladder_ping_client");
  ASSERT_EQ(client.wait(60s), 0) << client.output();
  ASSERT_EQ(server.wait(30s), 0) << server.output();
  for (const auto& [svg, column] : {std::pair{client_svg, std::string("initiator")},
                                    std::pair{server_svg, std::string("responder")}}) {
    const auto text = slurp(svg);
    std::uint64_t fpdus = 0, placed = 0;
    for (const auto& m : svg_groups(text, "msg"))
      if (m.at("data-to") == column)
        fpdus += std::stoull(m.at("data-repeat")) * std::stoull(m.at("data-segments"));
    const auto locals = svg_groups(text, "local");
    EXPECT_FALSE(locals.empty()) << svg;
    for (const auto& l : locals) {
      EXPECT_EQ(l.at("data-side"), column) << svg;
      EXPECT_TRUE(l.contains("data-of-frame")) << svg << ": " << l.at("class");
      if (l.at("class") == "local placed") placed += std::stoull(l.at("data-count"));
    }
    EXPECT_GT(fpdus, 0u) << svg;
    EXPECT_EQ(placed, fpdus) << svg;
  }
  fs::remove_all(dir);
}

TEST(LadderLive, XferBadLadderPathIsOneLineAndExitStatus2) {
  Process client(
      {"xfer", "--client", "127.0.0.1", "--port", "1", "--ladder", "/nonexistent-dir/x.svg"},
      "ladder_live_bad");
  EXPECT_EQ(client.wait(30s), 2) << client.output();
  const auto out = client.output();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_NE(out.find("--ladder /nonexistent-dir/x.svg"), std::string::npos) << out;
}

}  // namespace
}  // namespace iwarp
