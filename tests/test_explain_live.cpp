// rnic xfer --explain between two processes: every event the client's receive engine reports
// is printed as it happens, each followed by its sentence.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "process_support.hpp"

namespace iwarp {
namespace {

using namespace std::chrono_literals;
using test::Process;

TEST(ExplainLive, XferClientExplainsWhatItReceives) {
  const auto pf = test::port_file("explain_live");
  Process server({"xfer", "--server", "--port", "0", "--port-file", pf, "--sizes", "64"},
                 "explain_live_server");
  const auto port = test::read_port(pf);
  ASSERT_FALSE(port.empty()) << server.output();
  Process client({"xfer", "--client", "127.0.0.1", "--port", port, "--sizes", "64", "--ops",
                  "send,read", "--explain"},
                 "explain_live_client");
  ASSERT_EQ(client.wait(60s), 0) << client.output();
  EXPECT_EQ(server.wait(30s), 0) << server.output();
  const std::string out = client.output();
  EXPECT_NE(out.find("operations verified, 0 failed"), std::string::npos) << out;
  // Each event line is followed by its sentence.
  std::istringstream in(out);
  std::string line, prev;
  int events = 0;
  while (std::getline(in, line)) {
    if (prev.starts_with("client: rx ")) {
      ++events;
      EXPECT_TRUE(line.starts_with("          why: ")) << prev << "\n" << line;
    }
    prev = line;
  }
  EXPECT_GE(events, 4) << out;
  for (const char* p :
       {"why: in order: Send MSN 1 single segment", "why: receive completion: the Send with MSN 1",
        "why: in order: RDMA Read Response last segment: 64 octets placed",
        "why: the RDMA Read work request completes on the requester"})
    EXPECT_NE(out.find(p), std::string::npos) << p << "\n" << out;
  // Without --explain, none of it.
  const auto pf2 = test::port_file("explain_live2");
  Process server2({"xfer", "--server", "--port", "0", "--port-file", pf2, "--sizes", "64"},
                  "explain_live_server2");
  const auto port2 = test::read_port(pf2);
  ASSERT_FALSE(port2.empty()) << server2.output();
  Process plain(
      {"xfer", "--client", "127.0.0.1", "--port", port2, "--sizes", "64", "--ops", "send,read"},
      "explain_live_plain");
  ASSERT_EQ(plain.wait(60s), 0) << plain.output();
  EXPECT_EQ(server2.wait(30s), 0);
  EXPECT_EQ(plain.output().find("why: "), std::string::npos) << plain.output();
}

}  // namespace
}  // namespace iwarp
