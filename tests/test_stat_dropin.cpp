// rnic stat on a real, unmodified program under the drop-in libraries: rping's server and
// client (`rnic run -- rping ...`) answer `rnic stat PID` while they ping, with their queue pair
// in RTS, their registered regions and counters that move; a program started with RNIC_STAT=0
// does not answer. (In dropin_tests: it needs the drop-in libraries.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "program_support.hpp"

namespace iwarp::test {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// `rnic stat PID --json`: the exit status and the document (discarded when not JSON).
std::pair<int, json> stat_of(pid_t pid, const std::vector<std::string>& more = {}) {
  std::vector<std::string> argv{IWARP_RNIC_BIN, "stat", std::to_string(pid), "--json"};
  argv.insert(argv.end(), more.begin(), more.end());
  Program p("rnic stat", argv);
  p.wait(20s);
  const int code = p.status().kind == ProgramStatus::Kind::Exited ? p.status().code : -1;
  return {code, json::parse(p.stdout_text(), nullptr, false)};
}

std::uint64_t fpdus_received(const json& qp) {
  return qp.at("counters").at("mpa").at("fpdus_received").get<std::uint64_t>();
}

TEST(StatDropin, RpingAnswersWhileItPings) {
  const int port = free_tcp_port();
  ASSERT_NE(port, 0);
  const std::string p = std::to_string(port);
  Program server("rping server", {IWARP_RNIC_BIN, "run", "--", "rping", "-s", "-a", "127.0.0.1",
                                  "-p", p, "-C", "1000000", "-S", "100"});
  ASSERT_TRUE(wait_listening(server, port));
  // Listening, no client yet: the device answers with no queue pair in RTS.
  auto [code0, idle] = stat_of(server.pid());
  ASSERT_EQ(code0, 0) << idle.dump();
  ASSERT_EQ(idle.at("devices").size(), 1u) << idle.dump(2);
  for (const auto& q : idle["devices"][0].at("queue_pairs")) EXPECT_NE(q.at("state"), "RTS");
  Program client("rping client", {IWARP_RNIC_BIN, "run", "--", "rping", "-c", "-a", "127.0.0.1",
                                  "-p", p, "-C", "1000000", "-S", "100"});
  json first;
  std::uint64_t received = 0;
  for (int i = 0; i < 200 && received == 0; ++i) {
    std::this_thread::sleep_for(50ms);
    auto [code, j] = stat_of(server.pid());
    ASSERT_EQ(code, 0) << j.dump();
    for (const auto& q : j["devices"][0]["queue_pairs"])
      if (q.at("state") == "RTS" && fpdus_received(q) > 0) {
        first = q;
        received = fpdus_received(q);
        EXPECT_FALSE(j["devices"][0].at("memory_regions").empty()) << j.dump(2);
        EXPECT_EQ(j["devices"][0].at("program"), "rping");
      }
  }
  ASSERT_GT(received, 0u) << "no queue pair of rping's server in RTS with traffic"
                          << server.describe() << client.describe();
  EXPECT_EQ(first.at("role"), "responder");
  std::this_thread::sleep_for(300ms);
  auto [code1, later] = stat_of(server.pid());
  ASSERT_EQ(code1, 0);
  bool moved = false;
  for (const auto& q : later["devices"][0]["queue_pairs"])
    if (q.at("qp_num") == first.at("qp_num")) moved = fpdus_received(q) > received;
  EXPECT_TRUE(moved) << later.dump(2);
  auto [code2, c] = stat_of(client.pid());
  ASSERT_EQ(code2, 0);
  bool initiator = false;
  for (const auto& q : c["devices"][0]["queue_pairs"])
    initiator = initiator || (q.at("state") == "RTS" && q.at("role") == "initiator");
  EXPECT_TRUE(initiator) << c.dump(2);
  client.stop();
  server.stop();
}

// RNIC_STAT=0 turns the socket off: the same program answers without it and not with it.
TEST(StatDropin, RnicStatZeroTurnsTheSocketOff) {
  for (const bool off : {false, true}) {
    const int port = free_tcp_port();
    ASSERT_NE(port, 0);
    std::vector<std::string> argv{
        IWARP_RNIC_BIN,       "run", "--", "rping", "-s", "-a", "127.0.0.1", "-p",
        std::to_string(port), "-C",  "1"};
    if (off) argv.insert(argv.begin(), {"env", "RNIC_STAT=0"});
    Program server("rping server", argv);
    ASSERT_TRUE(wait_listening(server, port));
    Program stat("rnic stat", {IWARP_RNIC_BIN, "stat", std::to_string(server.pid())});
    stat.wait(20s);
    if (off) {
      EXPECT_EQ(stat.status().code, 2) << stat.describe();
      EXPECT_EQ(stat.stderr_text(), "rnic stat: no emulated RNIC in process " +
                                        std::to_string(server.pid()) +
                                        " (is it running under rnic run?)\n");
    } else {
      EXPECT_EQ(stat.status().code, 0) << stat.describe();
      EXPECT_NE(stat.stdout_text().find("(rping): 1 emulated RNIC"), std::string::npos)
          << stat.describe();
    }
    server.stop();
  }
}

}  // namespace
}  // namespace iwarp::test
