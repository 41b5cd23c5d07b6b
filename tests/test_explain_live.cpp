// --explain on the live programs, between real processes over 127.0.0.1: rnic xfer (every
// event the client's receive engine reports is printed as it happens, each followed by its
// sentence), rnic ping and rnic demo (both sides: the Sends, Reads and Writes each side posts,
// their completions, and what its receive engine reports), checked against golden output.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "process_support.hpp"
#include "trace/explain.hpp"

namespace iwarp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::Process;

// What ping and demo --explain printed, per side and thread, with what varies from run to run
// normalized. Each side prints from two threads: its receive engine ("rx" lines) and the
// program ("post" and "cqe" lines); the order between the two threads varies, the order within
// each does not, so each is kept as its own stream. A line is attributed by its "server: " /
// "client: " prefix (ping) or by demo's "[server pid N] " label; a "why:" line belongs to the
// event line just before it, which must be of the same side.
struct Explained {
  std::string text;       // "== server engine" then its lines, ... (golden form)
  int events = 0;         // event lines seen
  int explained = 0;      // of those, followed by their "why:" line
  std::string misplaced;  // a "why:" line not right after an event line of its side
};

Explained explained_streams(const std::string& out) {
  static const std::regex demo_label(R"(^\[(server|client) pid \d+ *\] (.*)$)");
  static const std::regex ping_side(R"(^(server|client): (.*)$)");
  // Addresses (TOs) and STags differ each run.
  static const std::regex hex(R"(0x[0-9a-f]{8,})");
  Explained r;
  std::map<std::string, std::string> streams;
  std::string current, current_side;  // the stream and side of the last event line
  bool awaiting_why = false;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    std::string side, body;
    if (std::regex_match(line, m, demo_label) || std::regex_match(line, m, ping_side)) {
      side = m[1];
      body = m[2];
    } else {
      body = line;  // ping's why lines carry no side of their own
    }
    const auto b = body.substr(std::min(body.find_first_not_of(' '), body.size()));
    if (b.starts_with("why: ")) {
      if (!awaiting_why || (!side.empty() && side != current_side)) {
        r.misplaced = line;
      } else {
        ++r.explained;
        streams[current] += "  " + b + "\n";
      }
      awaiting_why = false;
      continue;
    }
    awaiting_why = false;
    if (side.empty()) continue;
    const bool rx = b.starts_with("rx "), local = b.starts_with("post ") || b.starts_with("cqe ");
    if (!rx && !local) continue;
    ++r.events;
    awaiting_why = true;
    current_side = side;
    current = side + (rx ? " receive engine" : " posted and completed");
    streams[current] += b + "\n";
  }
  for (auto& [name, lines] : streams) r.text += "== " + name + "\n" + lines;
  r.text = std::regex_replace(r.text, hex, "0x…");
  return r;
}

bool updating() {
  const char* u = std::getenv("IWARP_UPDATE_GOLDEN");
  return u && *u && std::string(u) != "0";
}

// Compares `got` with tests/golden/explain/<name>.txt (IWARP_UPDATE_GOLDEN=1 rewrites it).
void expect_golden(const std::string& got, const std::string& name) {
  const fs::path p = fs::path(IWARP_SOURCE_DIR) / "tests" / "golden" / "explain" / (name + ".txt");
  if (updating()) {
    std::ofstream(p, std::ios::binary) << got;
    return;
  }
  std::ifstream in(p, std::ios::binary);
  ASSERT_TRUE(in) << p << " is missing; IWARP_UPDATE_GOLDEN=1 writes it";
  std::stringstream want;
  want << in.rdbuf();
  std::istringstream g(got), w(want.str());
  std::string gl, wl;
  for (int n = 1;; ++n) {
    const bool gm = static_cast<bool>(std::getline(g, gl));
    const bool wm = static_cast<bool>(std::getline(w, wl));
    if (!gm && !wm) break;
    ASSERT_TRUE(gm && wm && gl == wl)
        << p << " differs at line " << n << "\n  golden: " << (wm ? wl : "<end>")
        << "\n  output: " << (gm ? gl : "<end>")
        << "\n(IWARP_UPDATE_GOLDEN=1 regenerates; read the diff first)\nwhole output:\n"
        << got;
  }
}

// Runs a ping server and client (both with `extra` options) and returns both outputs.
std::pair<std::string, std::string> run_ping(const std::vector<std::string>& extra,
                                             const std::string& tag) {
  const std::string port = test::free_port();  // ping has no --port-file
  EXPECT_FALSE(port.empty());
  std::vector<std::string> sa{"ping", "--server", "--bind", "127.0.0.1", "--port", port};
  std::vector<std::string> ca{"ping", "--client", "127.0.0.1", "--port", port, "--count", "2"};
  sa.insert(sa.end(), extra.begin(), extra.end());
  ca.insert(ca.end(), extra.begin(), extra.end());
  Process server(sa, tag + "_server");
  EXPECT_TRUE(server.wait_for_output("listening")) << server.output();
  Process client(ca, tag + "_client");
  EXPECT_EQ(client.wait(60s), 0) << client.output();
  EXPECT_EQ(server.wait(30s), 0) << server.output();
  return {server.output(), client.output()};
}

// rnic ping --explain, both sides: each side's posted Sends, Read and Write, their completions
// and its receive engine's events, each followed by its sentence, as in the golden file.
TEST(ExplainLive, PingExplainsBothSides) {
  const auto [server, client] = run_ping({"--explain"}, "explain_ping");
  EXPECT_NE(client.find("2 pings of 64 octets verified"), std::string::npos) << client;
  // Every explained line names its side; ping prints nothing else with "rx " or "why: ".
  for (const auto* out : {&server, &client}) {
    std::istringstream in(*out);
    const std::string side = out == &server ? "server: " : "client: ";
    for (std::string line; std::getline(in, line);) {
      if (line.find("why: ") != std::string::npos) {
        EXPECT_TRUE(line.starts_with("          why: ")) << line;
      }
      for (const char* ev : {"rx ", "post ", "cqe "}) {
        if (line.find(std::string(": ") + ev) != std::string::npos) {
          EXPECT_TRUE(line.starts_with(side + ev)) << line;
        }
      }
    }
  }
  const auto e = explained_streams(server + client);
  EXPECT_EQ(e.misplaced, "");
  EXPECT_GE(e.events, 30) << server << client;
  EXPECT_EQ(e.explained, e.events) << server << client;
  expect_golden(e.text, "live_ping");
}

// ping's deliberate protection error, explained on both sides: the client's Write to an STag
// never advertised, the server's Terminate, the client's receipt of it.
TEST(ExplainLive, PingFaultExplainsTheTerminate) {
  const std::string port = test::free_port();
  ASSERT_FALSE(port.empty());
  Process server({"ping", "--server", "--bind", "127.0.0.1", "--port", port, "--explain"},
                 "explain_ping_fault_server");
  ASSERT_TRUE(server.wait_for_output("listening")) << server.output();
  Process client(
      {"ping", "--client", "127.0.0.1", "--port", port, "--fault", "unknown-stag", "--explain"},
      "explain_ping_fault_client");
  EXPECT_EQ(client.wait(60s), 0) << client.output();
  server.wait(30s);  // it served no ping: exit 1
  const std::string out = server.output() + client.output();
  const auto e = explained_streams(out);
  EXPECT_EQ(e.misplaced, "") << out;
  EXPECT_EQ(e.explained, e.events) << out;
  for (const char* p :
       {"client: post RDMA Write, 16 octets, peer STag 0x00dead00 TO 0x0\n          why: RDMA "
        "Write "
        "posted: 16 octets go out as tagged DDP segments to TO 0x0 of the peer's STag 0x00dead00",
        "server: rx terminate-sent",
        "why: this endpoint found a violation and sends a Terminate "
        "[DDP tagged: invalid STag] (layer 1 etype 1 code 0x00): a tagged segment named an STag "
        "that is not valid at the data sink",
        "client: rx terminate-received",
        "why: the peer sent a Terminate [DDP tagged: invalid "
        "STag] (layer 1 etype 1 code 0x00)",
        "client: cqe RDMA Write success\n          why: the RDMA Write work request completes on "
        "this side once TCP has taken all of it"})
    EXPECT_NE(out.find(p), std::string::npos) << p << "\n" << out;
}

TEST(ExplainLive, PingWithoutExplainPrintsNoSentence) {
  const auto [server, client] = run_ping({}, "explain_ping_plain");
  EXPECT_NE(client.find("2 pings of 64 octets verified"), std::string::npos) << client;
  for (const auto* out : {&server, &client}) {
    EXPECT_EQ(out->find("why: "), std::string::npos) << *out;
    EXPECT_EQ(out->find(": rx "), std::string::npos) << *out;
    EXPECT_EQ(explained_streams(*out).events, 0) << *out;
  }
}

// rnic demo --explain: the parent labels each child's lines, and every sentence sits right
// under its event, in the same side's label, as in the golden file.
TEST(ExplainLive, DemoExplainsBothSides) {
  Process demo({"demo", "--explain", "--no-color"}, "explain_demo");
  ASSERT_EQ(demo.wait(60s), 0) << demo.output();
  const std::string out = demo.output();
  EXPECT_NE(out.find("both sides finished as expected"), std::string::npos) << out;
  auto e = explained_streams(out);
  // The Send posted behind the failing Write completes when TCP took it before the server's
  // Terminate came back, else it is flushed: both are right, and the flushed form (with its own
  // sentence) is compared as the usual one.
  const trace::PostedWork send{.opcode = 0x3};
  const std::string flushed =
      "cqe Send Work Request Flushed Error\n  why: " + trace::explain_work_completion(send, false) +
      "\n";
  if (const auto at = e.text.find(flushed); at != std::string::npos)
    e.text.replace(at, flushed.size(),
                   "cqe Send success\n  why: " + trace::explain_work_completion(send, true) + "\n");
  EXPECT_EQ(e.misplaced, "") << out;
  EXPECT_GE(e.events, 30) << out;
  EXPECT_EQ(e.explained, e.events) << out;
  expect_golden(e.text, "live_demo");
}

TEST(ExplainLive, DemoWithoutExplainPrintsNoSentence) {
  Process demo({"demo", "--no-color"}, "explain_demo_plain");
  ASSERT_EQ(demo.wait(60s), 0) << demo.output();
  EXPECT_EQ(demo.output().find("why: "), std::string::npos) << demo.output();
  EXPECT_EQ(explained_streams(demo.output()).events, 0) << demo.output();
}

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
