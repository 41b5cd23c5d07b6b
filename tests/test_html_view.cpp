// rnic replay --html over the committed captures, opened in a real headless browser (Debian's
// chromium): the page selects the event the URL names (#event=N) through the same path as a
// click, and its details panel must hold that event's decoded fields as `rnic decode --json`
// gives them, with no console message; a screenshot is kept in the build directory. Capture
// strings stay text (an HTML file name with <script> in it), and a bad --html path is one line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "htmlview/html_writer.hpp"
#include "htmlview/view_model.hpp"
#include "program_support.hpp"
#include "replay/replay_plan.hpp"
#include "replay/replayer.hpp"
#include "tests/corpus_files.hpp"
#include "trace/pcap_reader.hpp"

namespace {

using iwarp::test::Program;
namespace fs = std::filesystem;

const std::string kTraces = std::string(IWARP_SOURCE_DIR) + "/pcap_traces/generated/";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

struct Run {
  int code = -1;
  std::string out, err;
};

Run run(const std::string& name, std::vector<std::string> argv, int secs = 120) {
  Program p(name, argv);
  p.wait(std::chrono::seconds(secs));
  Run r;
  r.code = p.status().exited() ? p.status().code : -1;
  r.out = p.stdout_text();
  r.err = p.stderr_text();
  return r;
}

fs::path scratch(const std::string& tag) {
  auto d = fs::path(::testing::TempDir()) / ("html_view_" + std::to_string(::getpid()) + "_" + tag);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// chromium on PATH, or the test fails saying which package to install.
std::string chromium() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  std::size_t b = 0;
  while (b <= p.size()) {
    auto e = p.find(':', b);
    if (e == std::string::npos) e = p.size();
    const auto cand = fs::path(p.substr(b, e - b)) / "chromium";
    if (::access(cand.c_str(), X_OK) == 0) return cand.string();
    b = e + 1;
  }
  return {};
}

// Runs headless chromium (bounded, with a fresh profile) on `url` with `extra` arguments.
Run browse(const fs::path& dir, const std::string& url, std::vector<std::string> extra) {
  const auto bin = chromium();
  std::vector<std::string> argv{bin,
                                "--headless=new",
                                "--no-sandbox",
                                "--disable-gpu",
                                "--enable-logging=stderr",
                                "--v=0",
                                "--user-data-dir=" + (dir / "profile").string()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(url);
  return run("chromium", argv, 60);
}

// Lines of chromium's stderr that are the page's console (errors, uncaught exceptions, CSP
// refusals): the page logs nothing of its own, so any is a failure.
std::string console_lines(const std::string& err) {
  std::string out;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (line.find("CONSOLE") != std::string::npos || line.find("Uncaught") != std::string::npos ||
        line.find("Content Security Policy") != std::string::npos)
      out += line + "\n";
  return out;
}

// The text of the dumped DOM's element with attribute data-f="name" (first one).
std::string field(const std::string& dom, const std::string& name) {
  const std::regex re("data-f=\"" + std::regex_replace(name, std::regex(R"([.])"), R"(\.)") +
                      "\">([^<]*)<");
  std::smatch m;
  return std::regex_search(dom, m, re) ? m[1].str() : std::string("<absent>");
}

std::string hex32(std::uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%08llx", static_cast<unsigned long long>(v));
  return b;
}
std::string hex(std::uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string unescape(std::string s) {
  for (auto [from, to] : {std::pair{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&amp;", "&"}})
    s = std::regex_replace(s, std::regex(from), to);
  return s;
}

class HtmlViewBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(chromium().empty())
        << "chromium is not installed: the HTML view's browser test needs Debian's chromium "
           "package (apt-get install -y chromium; scripts/install-deps.sh installs it)";
  }
};

// Clicking (through #event=N) shows the event's decoded headers, as rnic decode has them.
TEST_F(HtmlViewBrowser, UrlEventShowsItsDecodedHeadersWithNoConsoleError) {
  const auto dir = scratch("click");
  const std::string pcap = kTraces + "mpa2_p2p_read_crc.pcap";
  const auto html = (dir / "view.html").string();
  auto r = run("rnic replay", {IWARP_RNIC_BIN, "replay", pcap, "--quiet", "--html", html});
  ASSERT_EQ(r.code, 0) << r.err;
  auto d = run("rnic decode", {IWARP_RNIC_BIN, "decode", "--json", "--explain", pcap});
  ASSERT_EQ(d.code, 0) << d.err;
  const auto records = nlohmann::json::parse(d.out)["records"];

  // A Read Request, a Send, a three-segment Read Response, an atomic, the Terminate.
  for (int n : {2, 5, 14, 15, 23}) {
    SCOPED_TRACE("event " + std::to_string(n));
    auto b = browse(dir, "file://" + html + "#event=" + std::to_string(n), {"--dump-dom"});
    ASSERT_EQ(b.code, 0) << b.err;
    EXPECT_EQ(console_lines(b.err), "");
    const auto& dom = b.out;
    // The group named by the URL is the one selected, and the panel is about it.
    std::smatch g;
    ASSERT_TRUE(
        std::regex_search(dom, g,
                          std::regex("<g data-ev=\"" + std::to_string(n) +
                                     "\"[^>]* class=\"([^\"]*)\"[^>]*data-frame=\"(\\d+)\"")))
        << "no ladder group for event " << n;
    EXPECT_NE(g[1].str().find("selected"), std::string::npos) << g[1].str();
    const auto frame = std::stoull(g[2].str());
    ASSERT_NE(dom.find("id=\"details\" data-event=\"" + std::to_string(n) + "\""),
              std::string::npos)
        << "the details panel does not show event " << n;
    std::smatch h;
    ASSERT_TRUE(std::regex_search(dom, h, std::regex("<h4>frame (\\d+) @(\\d+): ([^<]*)</h4>")));
    EXPECT_EQ(std::stoull(h[1].str()), frame);
    const auto offset = std::stoull(h[2].str());
    // rnic decode's record of that FPDU.
    const nlohmann::json* rec = nullptr;
    for (const auto& x : records)
      if (x["kind"] == "fpdu" && x["frame"] == frame && x["offset"] == offset) rec = &x;
    ASSERT_NE(rec, nullptr) << "rnic decode has no FPDU at frame " << frame << " @" << offset;
    const auto& x = *rec;
    EXPECT_EQ(unescape(h[3].str()), x["summary"].get<std::string>());
    EXPECT_EQ(field(dom, "MPA.ulpdu_length"), std::to_string(x["ulpdu_length"].get<int>()));
    EXPECT_EQ(field(dom, "MPA.wire_length"), std::to_string(x["wire_length"].get<int>()));
    EXPECT_EQ(field(dom, "MPA.crc"), x["crc"].get<std::string>());
    EXPECT_EQ(field(dom, "MPA.crc_value"), hex32(x["crc_value"].get<std::uint64_t>()));
    EXPECT_EQ(field(dom, "DDP.tagged"), x["tagged"].get<bool>() ? "1" : "0");
    EXPECT_EQ(field(dom, "DDP.last"), x["last"].get<bool>() ? "1" : "0");
    EXPECT_EQ(field(dom, "RDMAP.opcode"), hex(x["opcode"].get<std::uint64_t>()));
    EXPECT_EQ(unescape(field(dom, "RDMAP.opcode_name")), x["opcode_name"].get<std::string>());
    if (x["tagged"].get<bool>()) {
      EXPECT_EQ(field(dom, "DDP.stag"), hex32(x["stag"].get<std::uint64_t>()));
      EXPECT_EQ(field(dom, "DDP.to"), hex(x["to"].get<std::uint64_t>()));
    } else {
      EXPECT_EQ(field(dom, "DDP.qn"), std::to_string(x["qn"].get<std::uint64_t>()));
      EXPECT_EQ(field(dom, "DDP.msn"), std::to_string(x["msn"].get<std::uint64_t>()));
      EXPECT_EQ(field(dom, "DDP.mo"), std::to_string(x["mo"].get<std::uint64_t>()));
    }
    // Its --explain sentence, and the sections a click shows.
    ASSERT_TRUE(x.contains("explanation"));
    EXPECT_NE(unescape(dom).find(x["explanation"].get<std::string>()), std::string::npos);
    for (const char* s : {"Bytes (first FPDUs as on the wire)", "Queue pairs after frame",
                          "Memory it touched", "initiator (I): ", "responder (R): "})
      EXPECT_NE(dom.find(s), std::string::npos) << s;
    EXPECT_NE(dom.find("<pre class=\"hex\">0000  "), std::string::npos);
  }
}

// A screenshot of the page with an event selected is kept as a test artifact: a PNG of the
// window's size with real content (a blank page compresses to a few kB).
TEST_F(HtmlViewBrowser, ScreenshotIsKeptAsAnArtifact) {
  const auto dir = scratch("shot");
  const auto html = (dir / "view.html").string();
  auto r = run("rnic replay", {IWARP_RNIC_BIN, "replay", kTraces + "mpa2_p2p_read_crc.pcap",
                               "--quiet", "--html", html});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto png = (fs::current_path() / "html-view-screenshot.png").string();
  fs::remove(png);
  auto b = browse(dir, "file://" + html + "#event=14",
                  {"--screenshot=" + png, "--window-size=1400,1000", "--hide-scrollbars"});
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(console_lines(b.err), "");
  const auto bytes = slurp(png);
  ASSERT_GE(bytes.size(), 24u) << png << " missing or empty";
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(bytes.substr(12, 4), "IHDR");
  auto be32 = [&](std::size_t at) {
    return (std::uint32_t(std::uint8_t(bytes[at])) << 24) |
           (std::uint32_t(std::uint8_t(bytes[at + 1])) << 16) |
           (std::uint32_t(std::uint8_t(bytes[at + 2])) << 8) | std::uint8_t(bytes[at + 3]);
  };
  EXPECT_EQ(be32(16), 1400u);
  EXPECT_EQ(be32(20), 1000u);
  EXPECT_GT(bytes.size(), 60000u) << "the screenshot looks blank";
  EXPECT_NE(bytes.find("IEND"), std::string::npos);
}

// A capture's name with markup in it is shown as text: no script element is made of it, the
// embedded data still parses (no console error) and the panel still works.
TEST_F(HtmlViewBrowser, CaptureStringsStayText) {
  const auto dir = scratch("escape");
  // The path reads ".../a</script><script>alert(1)</script>.pcap".
  const auto sub = dir / "a<" / "script><script>alert(1)<";
  fs::create_directories(sub);
  const auto pcap = (sub / "script>.pcap").string();
  fs::copy_file(kTraces + "mpa2_p2p_write.pcap", pcap);
  ASSERT_NE(pcap.find("</script><script>alert(1)</script>"), std::string::npos);
  const auto html = (dir / "view.html").string();
  auto r = run("rnic replay", {IWARP_RNIC_BIN, "replay", pcap, "--quiet", "--html", html});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto raw = slurp(html);
  EXPECT_EQ(raw.find("<script>alert"), std::string::npos);
  EXPECT_EQ(raw.find("</script><script>"), std::string::npos);
  auto b = browse(dir, "file://" + html + "#event=2", {"--dump-dom"});
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(console_lines(b.err), "");
  EXPECT_EQ(b.out.find("<script>alert"), std::string::npos);
  EXPECT_NE(b.out.find("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;.pcap</h1>"),
            std::string::npos);
  EXPECT_NE(b.out.find("id=\"details\" data-event=\"2\""), std::string::npos);
}

// The embedded JSON holds no '<', '>' or '&' (so no "</script>" or "<!--" can end it early) and
// parses back to the same document.
TEST(HtmlView, EmbeddedJsonCannotEndItsScriptElement) {
  nlohmann::json j;
  j["s"] = "</script><script>alert(1)</script><!-- & -->";
  j["bad_utf8"] = std::string("\xff\xfe<", 3);
  const auto e = iwarp::htmlview::embed_json(j);
  EXPECT_EQ(e.find_first_of("<>&"), std::string::npos) << e;
  const auto back = nlohmann::json::parse(e);
  EXPECT_EQ(back["s"], j["s"]);
  EXPECT_EQ(back["bad_utf8"].get<std::string>().back(), '<');
}

// A --html path that cannot be written: one line naming it, exit status 2, before any replay.
TEST(HtmlView, BadHtmlPathIsOneLine) {
  const auto dir = scratch("badpath");
  for (const auto& out : {(dir / "no-such-dir" / "x.html").string(), dir.string()}) {
    SCOPED_TRACE(out);
    auto r = run("rnic replay",
                 {IWARP_RNIC_BIN, "replay", kTraces + "mpa2_p2p_write.pcap", "--html", out});
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.out, "");
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_NE(r.err.find("--html " + out + ": cannot write"), std::string::npos) << r.err;
  }
  // A capture that cannot be replayed leaves no page (and no empty file) behind.
  const auto out = (dir / "x.html").string();
  auto r = run("rnic replay", {IWARP_RNIC_BIN, "replay",
                               std::string(IWARP_SOURCE_DIR) + "/README.md", "--html", out});
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace

namespace {

nlohmann::json embedded(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"view-data\">";
  const auto a = html.find(open);
  const auto b = html.find("</script>", a);
  if (a == std::string::npos || b == std::string::npos) return {};
  return nlohmann::json::parse(html.substr(a + open.size(), b - a - open.size()));
}

std::string replay_html(const std::string& pcap, std::vector<std::string> extra,
                        const std::string& tag) {
  const auto html = (scratch(tag) / "view.html").string();
  std::vector<std::string> argv{IWARP_RNIC_BIN, "replay", pcap, "--quiet", "--html", html};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto r = run("rnic replay", argv);
  EXPECT_EQ(r.code, 0) << r.err;
  return slurp(html);
}

// The RDMA Reads outstanding after each event are those rnic decode shows requested by that
// side and not yet answered by a last Read Response segment (RFC 5040 §4.4).
TEST(HtmlView, ReadsOutstandingFollowTheCapture) {
  const std::string pcap = kTraces + "mpa2_p2p_read_crc.pcap";
  const auto view = embedded(replay_html(pcap, {}, "reads"));
  ASSERT_TRUE(view.contains("events"));
  auto d = run("rnic decode", {IWARP_RNIC_BIN, "decode", "--json", pcap});
  ASSERT_EQ(d.code, 0) << d.err;
  const auto records = nlohmann::json::parse(d.out)["records"];
  int checked = 0, nonzero = 0;
  for (const auto& ev : view["events"]) {
    const auto upto = ev["last_frame"].get<std::uint64_t>();
    ASSERT_EQ(ev["state"].size(), 2u);
    for (int side = 0; side < 2; ++side) {
      // Side I issues Reads on i2r (except the RTR's zero-length Read, RFC 6581 §4, no
      // posted work) and gets their responses on r2i.
      const std::string req_dir = side == 0 ? "i2r" : "r2i", resp_dir = side == 0 ? "r2i" : "i2r";
      std::uint64_t issued = 0, done = 0;
      for (const auto& x : records) {
        if (x["kind"] != "fpdu" || x["frame"].get<std::uint64_t>() > upto) continue;
        if (x["direction"] == req_dir && x["opcode"] == 1 &&
            x["summary"].get<std::string>().find("size 0 ") == std::string::npos)
          ++issued;
        if (x["direction"] == resp_dir && x["opcode"] == 2 && x["last"] == true &&
            x["payload_length"] != 0)
          ++done;
      }
      const auto want = std::to_string(issued) + " issued, " + std::to_string(done) +
                        " completed, " + std::to_string(issued - done) + " outstanding";
      EXPECT_EQ(ev["state"][side]["reads"], want) << "event " << ev["id"] << " side " << side;
      ++checked;
      nonzero += issued != done;
    }
  }
  EXPECT_GT(checked, 20);
  EXPECT_GT(nonzero, 0) << "no event with a Read outstanding: the test checks nothing";
}

// In a seeded disorder, a hole an event leaves open is one the replay's timeline opened on
// that side (rnic replay --json), and is listed while open.
TEST(HtmlView, HolesOpenAreTheReplaysHoles) {
  const std::string pcap = kTraces + "mpa2_p2p_read_crc.pcap";
  const auto view = embedded(replay_html(pcap, {"--permute", "1"}, "holes"));
  auto j = run("rnic replay", {IWARP_RNIC_BIN, "replay", pcap, "--permute", "1", "--json"});
  const auto timeline = nlohmann::json::parse(j.out)["connections"][0]["timeline"];
  std::size_t listed = 0;
  for (const auto& ev : view["events"])
    for (int side = 0; side < 2; ++side)
      for (const auto& h : ev["state"][side]["holes"]) {
        std::smatch m;
        const auto s = h.get<std::string>();
        ASSERT_TRUE(std::regex_search(s, m, std::regex(R"(\[(\d+), (\d+)\))"))) << s;
        const auto b = std::stoull(m[1].str()), e = std::stoull(m[2].str());
        bool opened = false;
        for (const auto& t : timeline)
          opened |= t["event"] == "hole-opened" && t["endpoint"] == (side ? "R" : "I") &&
                    t["offset"].get<std::uint64_t>() <= b && t["end"].get<std::uint64_t>() >= e;
        EXPECT_TRUE(opened) << s << " at event " << ev["id"];
        ++listed;
      }
  EXPECT_GT(listed, 0u) << "the disorder left no hole open after any event";
}

// Past the view's limits (events, octets per event, segments, the data's size) the view is cut
// and says so.
TEST(HtmlView, LimitsCutTheViewWithANote) {
  const std::string pcap = kTraces + "mpa2_p2p_read_crc.pcap";
  auto cap = iwarp::trace::read_capture(pcap);
  ASSERT_TRUE(cap) << cap.error();
  auto plan = iwarp::replay::make_plan(*cap);
  ASSERT_TRUE(plan) << plan.error();
  iwarp::replay::ReplayOptions ro;
  const auto result = iwarp::replay::replay(*plan, ro);
  iwarp::htmlview::ViewLimits lim;
  lim.max_events = 16;
  lim.max_bytes_per_event = 32;
  lim.max_segments_per_event = 1;
  auto v = iwarp::htmlview::build_view(pcap, *plan, result, "capture order", lim);
  ASSERT_TRUE(v) << v.error();
  const auto& d = v->data;
  EXPECT_LE(d["events"].size(), 16u);
  EXPECT_FALSE(d["notes"].empty()) << "no note says events were left out";
  bool hex_cut = false, seg_cut = false;
  for (const auto& ev : d["events"]) {
    if (ev.contains("hex")) {
      EXPECT_LE(ev["hex"].get<std::string>().size(), 3u * 80u);  // two 16-octet lines
    }
    hex_cut |= ev.contains("hex_more");
    seg_cut |= ev.contains("segments_more");
    EXPECT_LE(ev["segments"].size(), 1u);
  }
  EXPECT_TRUE(hex_cut);
  EXPECT_TRUE(seg_cut);
  lim.max_json_bytes = 6000;
  auto small = iwarp::htmlview::build_view(pcap, *plan, result, "capture order", lim);
  ASSERT_TRUE(small);
  EXPECT_LE(iwarp::htmlview::embed_json(small->data).size(), 6000u + 2000u);
  EXPECT_TRUE(small->data["events"].back().contains("cut"));
  EXPECT_NE(small->data["notes"].back().get<std::string>().find("limited to 6000 octets"),
            std::string::npos);
}

}  // namespace

namespace {

// `rnic replay --html` of a file learns its plan as it reads the file, its steps read again and
// none kept (its memory does not grow with the capture's length): the view is the one of the
// plan with kept steps, event for event (decoded headers, first octets, the replay's lines, both
// queue pairs' state, the memory touched) and drawing for drawing, on every capture of the
// corpus, whole and with frames dropped.
TEST(HtmlView, ViewOfAPlanReadAgainIsTheViewOfKeptSteps) {
  const auto files = ::testing_support::corpus_captures();
  std::size_t views = 0, hexes = 0, lines = 0, reads = 0;
  for (const auto& path : files) {
    // The whole capture, and without two of its frames with data (the 12th and the 20th).
    std::vector<std::uint64_t> data;
    auto whole = iwarp::trace::read_capture(path);
    ASSERT_TRUE(whole) << whole.error();
    for (const auto& f : whole->flows)
      for (const auto& dir : f.dir)
        for (const auto& sg : dir)
          if (sg.size() > 0) data.push_back(sg.frame);
    std::ranges::sort(data);
    std::vector<std::vector<std::uint64_t>> drops{{}};
    if (data.size() > 20) drops.push_back({data[12], data[20]});
    for (const auto& drop : drops) {
      SCOPED_TRACE(path + " --drop " + ::testing::PrintToString(drop));
      auto again = iwarp::replay::make_plan_from_file(path, {}, drop);
      if (!again) continue;  // (nothing to replay)
      auto cap = iwarp::trace::read_capture(path, {.payloads_in_file = true});
      ASSERT_TRUE(cap) << cap.error();
      if (!drop.empty()) {
        ASSERT_TRUE(iwarp::replay::drop_frames(*cap, drop));
      }
      auto kept = iwarp::replay::make_plan(*cap, {}, iwarp::replay::StepSource::Kept);
      ASSERT_TRUE(kept) << kept.error();
      ASSERT_TRUE(
          std::ranges::any_of(again->connections, &iwarp::replay::ConnectionPlan::read_again));
      iwarp::replay::ReplayOptions ro;
      ro.timeline_keep = iwarp::htmlview::kTimelineKeep;
      const auto ra = iwarp::replay::replay(*again, ro);
      const auto rk = iwarp::replay::replay(*kept, ro);
      auto va = iwarp::htmlview::build_view(path, *again, ra, "capture order");
      auto vk = iwarp::htmlview::build_view(path, *kept, rk, "capture order");
      ASSERT_TRUE(va) << va.error();
      ASSERT_TRUE(vk) << vk.error();
      const auto diff = nlohmann::json::diff(vk->data, va->data);
      EXPECT_TRUE(diff.empty()) << "the view of the plan read again differs from the kept "
                                   "plan's (first changes): "
                                << diff.dump().substr(0, 2000);
      EXPECT_TRUE(va->svg == vk->svg) << "the drawings differ";
      ++views;
      for (const auto& ev : va->data["events"]) {
        hexes += ev.contains("hex");
        lines += ev.contains("replay") ? ev["replay"].size() : 0;
        for (const auto& side : ev["state"])
          reads += side["reads"].get<std::string>().find("0 issued") != 0;
      }
    }
  }
  // (Views with octets, replay lines and Reads posted in them: the comparison compares them.)
  EXPECT_GT(views, 15u);
  EXPECT_GT(hexes, 500u);
  EXPECT_GT(lines, 500u);
  EXPECT_GT(reads, 50u);
}

// The committed views next to the sample traces are what the commands docs/html-view.md shows
// make today (run from the repository's root, as the doc says).
TEST(HtmlView, CommittedViewsAreUpToDate) {
  const auto dir = scratch("committed");
  const std::string src = IWARP_SOURCE_DIR;
  struct Case {
    std::string folder, name, extra;
  };
  for (const auto& c :
       {Case{"generated", "mpa2_p2p_read_crc", ""}, Case{"generated", "mpa1_crc_markers", ""},
        Case{"generated", "mpa2_p2p_read_crc.permute1", "--permute 1"}, Case{"siw", "rping_lo", ""},
        Case{"siw", "siw_crc_on", ""}, Case{"siw", "hostpeer_eth0_terminate", ""}}) {
    SCOPED_TRACE(c.name);
    const std::string stem = "pcap_traces/" + c.folder + "/";
    const std::string pcap = stem + c.name.substr(0, c.name.find('.')) + ".pcap";
    const auto out = (dir / (c.name + ".html")).string();
    auto r = run("bash", {"bash", "-c",
                          "cd '" + src + "' && '" + IWARP_RNIC_BIN + "' replay " + pcap + " " +
                              c.extra + " --quiet --html '" + out + "' >/dev/null"});
    ASSERT_EQ(r.code, 0) << r.err;
    const auto committed = slurp(src + "/" + stem + c.name + ".html");
    ASSERT_FALSE(committed.empty());
    EXPECT_TRUE(slurp(out) == committed)
        << stem << c.name << ".html is stale: remake it with the command in docs/html-view.md";
  }
}

}  // namespace
