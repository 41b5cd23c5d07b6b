// --html on the live programs (rnic ping, xfer, demo) and --ladder on rnic demo, between real
// processes over 127.0.0.1: the page (and the demo's ladder) is what `rnic replay --html`
// (`--ladder`) makes of the run's own capture, with the run's heading; a temporary capture is
// not left behind; a path that cannot be written is one line, exit status 2, before the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
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

// The page's data (the JSON it embeds) and its heading.
nlohmann::json embedded(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"view-data\">";
  const auto a = html.find(open);
  const auto b = html.find("</script>", a);
  if (a == std::string::npos || b == std::string::npos) return {};
  return nlohmann::json::parse(html.substr(a + open.size(), b - a - open.size()));
}
std::string heading(const std::string& html) {
  std::smatch m;
  return std::regex_search(html, m, std::regex("<h1>([^<]*)</h1>")) ? m[1].str() : "";
}

fs::path scratch(const std::string& tag) {
  auto d = fs::temp_directory_path() / ("live_views_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// What `rnic replay CAPTURE` makes with `extra` (its stdout is not wanted).
void replay(const std::string& capture, std::vector<std::string> extra) {
  std::vector<std::string> args{"replay", capture, "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  Process r(args, "live_views_replay");
  ASSERT_EQ(r.wait(60s), 0) << r.output();
}

std::string start_ping_server(Process& server) {
  if (!server.wait_for_output("listening on")) return "";
  std::smatch m;
  const auto out = server.output();
  return std::regex_search(out, m, std::regex(R"(listening on [0-9.]+:(\d+))")) ? m[1].str() : "";
}

TEST(LiveViews, PingHtmlIsTheReplayOfItsOwnCapture) {
  const auto dir = scratch("ping");
  const auto pcap = (dir / "client.pcap").string(), html = (dir / "client.html").string(),
             again = (dir / "replayed.html").string();
  Process server({"ping", "--server", "--port", "0"}, "live_views_ping_server");
  const auto port = start_ping_server(server);
  ASSERT_FALSE(port.empty()) << server.output();
  Process client({"ping", "--client", "127.0.0.1", "--port", port, "--count", "3", "--pcap", pcap,
                  "--html", html},
                 "live_views_ping_client");
  ASSERT_EQ(client.wait(60s), 0) << client.output();
  ASSERT_EQ(server.wait(30s), 0) << server.output();
  replay(pcap, {"--html", again});
  const auto page = slurp(html), replayed = slurp(again);
  EXPECT_EQ(heading(page), "rnic ping --client: this run&apos;s capture, replayed");
  EXPECT_EQ(heading(replayed), "rnic replay --html: " + pcap);
  auto mine = embedded(page), theirs = embedded(replayed);
  ASSERT_TRUE(mine.contains("events")) << page.substr(0, 500);
  // 3 pings, each (as rnic ping prints it) Send, Read, Send, Write, Send: 4 Sends (both ways),
  // a Read Response and a Write a ping.
  std::size_t sends = 0, reads = 0, writes = 0;
  for (const auto& e : mine["events"]) {
    const auto t = e["title"].get<std::string>();
    sends += t == "Send";
    reads += t == "RDMA Read Response";
    writes += t == "RDMA Write";
  }
  EXPECT_EQ(sends, 12u);
  EXPECT_EQ(reads, 3u);
  EXPECT_EQ(writes, 3u);
  EXPECT_EQ(mine["heading"], "rnic ping --client: this run's capture, replayed");
  mine.erase("heading");
  EXPECT_TRUE(mine == theirs) << "the live page's data differs from rnic replay --html's";
  fs::remove_all(dir);
}

TEST(LiveViews, XferHtmlWithoutPcapKeepsNoCapture) {
  const auto dir = scratch("xfer");
  const auto html = (dir / "server.html").string();
  const auto pf = test::port_file("live_views_xfer");
  Process server(
      {"xfer", "--server", "--port", "0", "--port-file", pf, "--sizes", "64,5000", "--html", html},
      "live_views_xfer_server");
  const auto port = test::read_port(pf);
  ASSERT_FALSE(port.empty()) << server.output();
  Process client({"xfer", "--client", "127.0.0.1", "--port", port, "--sizes", "64,5000", "--ops",
                  "send,read,write"},
                 "live_views_xfer_client");
  ASSERT_EQ(client.wait(60s), 0) << client.output();
  ASSERT_EQ(server.wait(30s), 0) << server.output();
  const auto page = slurp(html);
  const auto data = embedded(page);
  ASSERT_TRUE(data.contains("events")) << page.substr(0, 500);
  EXPECT_GT(data["events"].size(), 6u);
  EXPECT_EQ(heading(page), "rnic xfer --server: this run&apos;s capture, replayed");
  EXPECT_NE(data["file"].get<std::string>().find("not kept"), std::string::npos) << data["file"];
  EXPECT_FALSE(fs::exists(fs::temp_directory_path() /
                          ("rnic-xfer-views-" + std::to_string(server.pid()) + ".pcap")));
  fs::remove_all(dir);
}

TEST(LiveViews, DemoLadderAndHtmlAreTheReplayOfTheClientsCapture) {
  const auto dir = scratch("demo");
  const auto caps = dir / "caps";
  const auto svg = (dir / "demo.svg").string(), html = (dir / "demo.html").string();
  Process demo({"demo", "--no-color", "--pcap-dir", caps.string(), "--ladder", svg, "--html", html},
               "live_views_demo");
  ASSERT_EQ(demo.wait(60s), 0) << demo.output();
  EXPECT_NE(demo.output().find("ladder: " + svg), std::string::npos) << demo.output();
  EXPECT_NE(demo.output().find("HTML view: " + html), std::string::npos) << demo.output();
  const auto capture = (caps / "demo-client.pcap").string();
  const auto again_svg = (dir / "replayed.svg").string(),
             again_html = (dir / "replayed.html").string();
  replay(capture, {"--ladder", again_svg, "--html", again_html});
  // The ladder: every operation of the demo, and what both sides' emulated RNICs did.
  const auto text = slurp(svg);
  std::map<std::string, int> ops;
  for (const auto& m : svg_groups(text, "msg")) ops[m.at("data-opcode")]++;
  for (const char* op : {"Send", "RDMA Write", "RDMA Read Request", "RDMA Read Response",
                         "Atomic Request", "Atomic Response", "Send with Invalidate", "Terminate"})
    EXPECT_GT(ops[op], 0) << op;
  std::map<std::string, int> sides;
  for (const auto& l : svg_groups(text, "local")) sides[l.at("data-side")]++;
  EXPECT_GT(sides["initiator"], 0);
  EXPECT_GT(sides["responder"], 0);
  // ... the same drawing as rnic replay --ladder of that capture, but for the title.
  auto untitled = [](std::string s) {
    return std::regex_replace(s, std::regex("rnic ladder: [^<]*\\(page"), "rnic ladder: (page");
  };
  EXPECT_TRUE(untitled(text) == untitled(slurp(again_svg)));
  // The page: rnic replay --html's, with the demo's heading and the capture's path.
  auto mine = embedded(slurp(html)), theirs = embedded(slurp(again_html));
  EXPECT_EQ(mine["heading"], "rnic demo: the demo's connection (the client's capture), replayed");
  EXPECT_EQ(mine["file"], capture);
  mine.erase("heading");
  EXPECT_TRUE(mine == theirs) << "the demo's page data differs from rnic replay --html's";
  fs::remove_all(dir);
}

// A failed run (the client's deliberate protection error) still gets its page, on the server's
// side too: the Terminate is in it.
TEST(LiveViews, PingServerPageOfAFailedRunShowsTheTerminate) {
  const auto dir = scratch("fault");
  const auto html = (dir / "server.html").string();
  Process server({"ping", "--server", "--port", "0", "--html", html}, "live_views_fault_server");
  const auto port = start_ping_server(server);
  ASSERT_FALSE(port.empty()) << server.output();
  Process client({"ping", "--client", "127.0.0.1", "--port", port, "--fault", "unknown-stag"},
                 "live_views_fault_client");
  client.wait(60s);
  EXPECT_NE(server.wait(30s), 0) << server.output();  // its QP ended by its own Terminate
  const auto page = slurp(html);
  EXPECT_EQ(heading(page), "rnic ping --server: this run&apos;s capture, replayed");
  const auto data = embedded(page);
  ASSERT_TRUE(data.contains("events")) << server.output();
  bool terminate = false;
  for (const auto& e : data["events"]) terminate |= e["title"] == "Terminate";
  EXPECT_TRUE(terminate) << page.substr(0, 300);
  fs::remove_all(dir);
}

// The demo without --pcap-dir: its captures are kept in a temporary directory only for the views.
TEST(LiveViews, DemoWithoutPcapDirKeepsNothing) {
  const auto dir = scratch("demo_tmp");
  const auto html = (dir / "demo.html").string();
  Process demo({"demo", "--no-color", "--html", html}, "live_views_demo_tmp");
  ASSERT_EQ(demo.wait(60s), 0) << demo.output();
  const auto data = embedded(slurp(html));
  ASSERT_TRUE(data.contains("events")) << demo.output();
  EXPECT_GT(data["events"].size(), 10u);
  EXPECT_NE(data["file"].get<std::string>().find("not kept"), std::string::npos) << data["file"];
  EXPECT_FALSE(fs::exists(fs::temp_directory_path() / ("rnic-demo-" + std::to_string(demo.pid()))));
  fs::remove_all(dir);
}

// No connection, no capture: said in one line, not as a missing temporary file.
TEST(LiveViews, RunWithoutAConnectionSaysNoPageWasWritten) {
  const auto dir = scratch("noconn");
  const auto html = (dir / "x.html").string();
  Process client({"xfer", "--client", "127.0.0.1", "--port", "1", "--html", html},
                 "live_views_noconn");
  EXPECT_NE(client.wait(30s), 0) << client.output();
  const auto out = client.output();
  EXPECT_NE(out.find("no page written: the run made no connection"), std::string::npos) << out;
  EXPECT_EQ(out.find("rnic-xfer-views"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(html));
  fs::remove_all(dir);
}

// An existing --ladder file is left as it was when another path is refused before the run.
TEST(LiveViews, ARefusedPathLeavesAnExistingLadderAlone) {
  const auto dir = scratch("keep");
  const auto svg = (dir / "old.svg").string();
  std::ofstream(svg) << "keep";
  Process p({"ping", "--client", "127.0.0.1", "--port", "1", "--ladder", svg, "--html",
             "/nonexistent-dir/x.html"},
            "live_views_keep");
  EXPECT_EQ(p.wait(30s), 2) << p.output();
  EXPECT_EQ(slurp(svg), "keep");
  fs::remove_all(dir);
}

TEST(LiveViews, BadPathsAreOneLineAndExitStatus2BeforeTheRun) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  for (const auto& c :
       {Case{{"ping", "--client", "127.0.0.1", "--port", "1", "--html", "/nonexistent-dir/x.html"},
             "--html /nonexistent-dir/x.html"},
        Case{{"xfer", "--client", "127.0.0.1", "--port", "1", "--html", "/nonexistent-dir/x.html"},
             "--html /nonexistent-dir/x.html"},
        Case{{"demo", "--html", "/nonexistent-dir/x.html"}, "--html /nonexistent-dir/x.html"},
        Case{{"demo", "--ladder", "/nonexistent-dir/x.svg"}, "--ladder /nonexistent-dir/x.svg"}}) {
    Process p(c.args, "live_views_bad");
    EXPECT_EQ(p.wait(30s), 2) << p.command() << "\n" << p.output();
    const auto out = p.output();
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << p.command() << "\n" << out;
    EXPECT_NE(out.find(c.says), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace iwarp
