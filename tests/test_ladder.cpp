// rnic ladder over the committed captures: the SVG is well-formed XML, draws one arrow per
// RDMAP message (counted against `rnic decode --json`), Terminates in their own style, filters
// and pages reduce what is drawn, runs of identical exchanges collapse, bad input is one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "program_support.hpp"

namespace {

using iwarp::test::Program;
namespace fs = std::filesystem;

const std::string kTraces = std::string(IWARP_SOURCE_DIR) + "/pcap_traces/";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

struct Run {
  int code = -1;
  std::string out, err, svg;
};

Run ladder(std::vector<std::string> args, const std::string& svg_path = "") {
  std::vector<std::string> argv{IWARP_RNIC_BIN, "ladder"};
  argv.insert(argv.end(), args.begin(), args.end());
  Program p("rnic ladder", argv);
  p.wait(std::chrono::seconds(120));
  Run r;
  r.code = p.status().exited() ? p.status().code : -1;
  r.out = p.stdout_text();
  r.err = p.stderr_text();
  if (!svg_path.empty()) r.svg = slurp(svg_path);
  return r;
}

// A small XML well-formedness check: declaration, balanced and properly nested elements,
// quoted attributes, entities limited to the five predefined and numeric ones, one root.
::testing::AssertionResult well_formed(const std::string& x) {
  std::vector<std::string> stack;
  std::size_t i = 0, roots = 0;
  auto fail = [&](const std::string& why) {
    return ::testing::AssertionFailure() << why << " at offset " << i;
  };
  auto check_entities = [&](std::string_view s) {
    for (std::size_t k = 0; k < s.size(); ++k) {
      if (s[k] == '<') return false;
      if (s[k] != '&') continue;
      const auto semi = s.find(';', k);
      if (semi == std::string_view::npos) return false;
      const auto name = s.substr(k + 1, semi - k - 1);
      if (name != "amp" && name != "lt" && name != "gt" && name != "quot" && name != "apos" &&
          !(name.size() > 1 && name[0] == '#'))
        return false;
    }
    return true;
  };
  if (!x.starts_with("<?xml ")) return fail("no XML declaration");
  i = x.find("?>") + 2;
  while (i < x.size()) {
    const auto lt = x.find('<', i);
    const std::string_view text(x.data() + i, (lt == std::string::npos ? x.size() : lt) - i);
    if (!check_entities(text)) return fail("bad character data");
    if (stack.empty() && text.find_first_not_of(" \n\t\r") != std::string_view::npos)
      return fail("text outside the root");
    if (lt == std::string::npos) break;
    i = lt;
    // Find the tag's end, skipping quoted attribute values.
    std::size_t k = i + 1;
    char quote = 0;
    for (; k < x.size(); ++k) {
      if (quote) {
        if (x[k] == quote)
          quote = 0;
        else if (x[k] == '<')
          return fail("'<' in an attribute value");
      } else if (x[k] == '"' || x[k] == '\'') {
        quote = x[k];
      } else if (x[k] == '>') {
        break;
      }
    }
    if (k >= x.size()) return fail("unterminated tag");
    std::string tag = x.substr(i + 1, k - i - 1);
    if (!check_entities(std::regex_replace(tag, std::regex("<"), "")))
      return fail("bad entity in a tag");
    if (tag.starts_with("/")) {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return fail("mismatched </" + name + ">");
      stack.pop_back();
    } else {
      const bool empty = tag.ends_with("/");
      const std::string name = tag.substr(0, tag.find_first_of(" \n\t/"));
      if (name.empty()) return fail("empty tag name");
      // Attributes: name="value" pairs only.
      static const std::regex attrs(R"(^[A-Za-z][\w:-]*(\s+[\w:-]+="[^"]*")*\s*/?$)");
      if (!std::regex_match(tag, attrs)) return fail("bad attributes in <" + name + ">");
      if (stack.empty() && ++roots > 1) return fail("two root elements");
      if (!empty) stack.push_back(name);
    }
    i = k + 1;
  }
  if (!stack.empty()) return fail("unclosed <" + stack.back() + ">");
  if (roots != 1) return fail("no root element");
  return ::testing::AssertionSuccess();
}

// The drawn message arrows: (data-opcode, data-repeat, incomplete?) of each <g class="msg ...">.
struct Arrow {
  std::string cls, opcode;
  std::uint64_t repeat = 0;
};
std::vector<Arrow> arrows(const std::string& svg) {
  static const std::regex re(
      R"re(<g class="(msg[^"]*)" data-opcode="([^"]*)" data-repeat="(\d+)")re");
  std::vector<Arrow> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it)
    out.push_back({(*it)[1], (*it)[2], std::stoull((*it)[3])});
  return out;
}
std::uint64_t complete_messages(const std::vector<Arrow>& a) {
  std::uint64_t n = 0;
  for (const auto& x : a)
    if (x.cls.find("incomplete") == std::string::npos) n += x.repeat;
  return n;
}

// DDP segments under the drawn arrows (data-segments summed).
std::uint64_t segments(const std::string& svg) {
  static const std::regex re(R"re(<g class="msg[^"]*"[^>]* data-segments="(\d+)")re");
  std::uint64_t n = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it)
    n += std::stoull((*it)[1]);
  return n;
}

// What `rnic decode --json` says: RDMAP messages ended (FPDUs with L set) per connection, with
// the time of each message's last segment relative to the first record.
struct Decoded {
  std::uint64_t last_segments = 0, segments = 0;
  std::vector<double> last_times;
};
Decoded decode(const std::string& file) {
  Program p("rnic decode", {IWARP_RNIC_BIN, "decode", "--json", file});
  p.wait(std::chrono::seconds(120));
  const auto doc = nlohmann::json::parse(p.stdout_text());
  Decoded d;
  std::optional<std::uint64_t> t0;
  for (const auto& r : doc["records"]) {
    if (!t0) t0 = r["time_us"].get<std::uint64_t>();
    if (r["kind"] == "fpdu" && r.contains("last")) ++d.segments;
    if (r["kind"] == "fpdu" && r.contains("last") && r["last"].get<bool>()) {
      ++d.last_segments;
      d.last_times.push_back(static_cast<double>(r["time_us"].get<std::uint64_t>() - *t0) / 1e6);
    }
  }
  return d;
}

std::string temp(const std::string& name) {
  static const std::string dir = iwarp::test::fresh_directory("ladder");
  return dir + "/" + name;
}

std::vector<std::string> iwarp_samples() {
  std::vector<std::string> out;
  for (const char* sub : {"generated", "siw"})
    for (const auto& e : fs::directory_iterator(kTraces + sub))
      if (e.path().extension() == ".pcap" && e.path().filename() != "hostnet_eth0.pcap")
        out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool one_line(const std::string& s) {
  return !s.empty() && s.find('\n') == s.size() - 1 && s.starts_with("rnic ladder: ");
}

TEST(Ladder, EverySampleCaptureDrawsOneArrowPerRdmapMessage) {
  const auto files = iwarp_samples();
  ASSERT_GE(files.size(), 20u);
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    const auto d = decode(f);
    const auto svg = temp(fs::path(f).stem().string() + ".svg");
    // Every message drawn: one arrow each.
    auto all = ladder({f, "-o", svg, "--no-collapse", "--max-events", "0"}, svg);
    ASSERT_EQ(all.code, 0) << all.err;
    ASSERT_TRUE(well_formed(all.svg));
    const auto a = arrows(all.svg);
    for (const auto& x : a) EXPECT_EQ(x.repeat, 1u);
    // Every message of these captures ends in them: one arrow per L segment, and every DDP
    // segment under exactly one arrow.
    EXPECT_EQ(a.size(), d.last_segments);
    EXPECT_EQ(complete_messages(a), d.last_segments);
    EXPECT_EQ(segments(all.svg), d.segments);
    EXPECT_NE(all.svg.find("viewBox=\"0 0 "), std::string::npos);
    EXPECT_NE(all.svg.find("MPA initiator"), std::string::npos);
    // Collapsed: fewer (or as many) arrows, standing for the same messages.
    auto col = ladder({f, "-o", svg, "--max-events", "0"}, svg);
    ASSERT_EQ(col.code, 0) << col.err;
    ASSERT_TRUE(well_formed(col.svg));
    const auto c = arrows(col.svg);
    EXPECT_LE(c.size(), a.size());
    EXPECT_EQ(complete_messages(c), d.last_segments);
  }
}

// The committed sample ladders are what the loop in docs/ladder.md makes today (from inside
// pcap_traces/, the paths in their titles as written there).
TEST(Ladder, CommittedSampleLaddersAreCurrent) {
  std::size_t checked = 0;
  for (const char* dir : {"generated", "siw"}) {
    for (const auto& e : fs::directory_iterator(kTraces + dir)) {
      if (e.path().extension() != ".pcap") continue;
      auto committed = e.path();
      committed.replace_extension(".svg");
      if (e.path().filename() == "hostnet_eth0.pcap") continue;  // plain TCP, no ladder
      if (!fs::exists(committed)) {
        ADD_FAILURE() << committed << " is missing: make it with the loop in docs/ladder.md";
        continue;
      }
      SCOPED_TRACE(committed.string());
      const auto out = temp("current_" + e.path().stem().string() + ".svg");
      const std::string rel = std::string(dir) + "/" + e.path().filename().string();
      Program p("rnic ladder", {"/bin/bash", "-c",
                                "cd '" + kTraces + "' && '" + IWARP_RNIC_BIN + "' ladder '" + rel +
                                    "' -o '" + out + "' >/dev/null"});
      p.wait(std::chrono::seconds(120));
      ASSERT_TRUE(p.status().exited() && p.status().code == 0) << p.stderr_text();
      EXPECT_TRUE(slurp(out) == slurp(committed.string()))
          << committed << " is stale: remake it with the loop in docs/ladder.md";
      ++checked;
    }
  }
  EXPECT_GE(checked, 20u);
}

// xmllint is installed by scripts/install-deps.sh (libxml2-utils): missing, the test fails.
TEST(Ladder, XmllintAcceptsTheSvg) {
  ASSERT_EQ(std::system("command -v xmllint >/dev/null 2>&1"), 0)
      << "no xmllint: run scripts/install-deps.sh (libxml2-utils)";
  // A file name with XML's special characters ends up in the title, escaped.
  const auto odd = temp("a&b<c>'d\".pcap");
  fs::copy_file(kTraces + "siw/rping_lo.pcap", odd, fs::copy_options::overwrite_existing);
  const auto svg = temp("odd.svg");
  auto r = ladder({odd, "-o", svg}, svg);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.svg.find("a&amp;b&lt;c&gt;&apos;d&quot;.pcap"), std::string::npos);
  EXPECT_TRUE(well_formed(r.svg));
  EXPECT_EQ(std::system(("xmllint --noout '" + svg + "'").c_str()), 0);
}

TEST(Ladder, TerminateIsDrawnInItsOwnStyleWithLayerTypeAndCode) {
  const auto svg = temp("term.svg");
  auto r = ladder({kTraces + "siw/hostpeer_eth0_terminate.pcap", "-o", svg}, svg);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto a = arrows(r.svg);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].opcode, "RDMA Write");
  EXPECT_EQ(a[0].cls.find("terminate"), std::string::npos);
  EXPECT_EQ(a[1].opcode, "Terminate");
  EXPECT_NE(a[1].cls.find("terminate"), std::string::npos);
  // The Terminate's group: red dashed arrow, its layer/type/code and what they mean.
  const auto g = r.svg.find("<g class=\"msg term terminate\"");
  ASSERT_NE(g, std::string::npos);
  const auto group = r.svg.substr(g, r.svg.find("</g>", g) - g);
  EXPECT_NE(group.find("stroke-dasharray"), std::string::npos);
  EXPECT_NE(group.find("stroke=\"#c62828\""), std::string::npos);
  EXPECT_NE(group.find("layer 1 (DDP) etype 1 code 0x00"), std::string::npos);
  EXPECT_NE(group.find("DDP tagged: invalid STag"), std::string::npos);
  // The Write before it is neither dashed nor red.
  const auto w = r.svg.find("<g class=\"msg write\"");
  ASSERT_NE(w, std::string::npos);
  const auto wgroup = r.svg.substr(w, r.svg.find("</g>", w) - w);
  EXPECT_EQ(wgroup.find("stroke-dasharray"), std::string::npos);
  EXPECT_EQ(wgroup.find("#c62828"), std::string::npos);
  // The generated captures end with a Terminate too.
  auto gen = ladder({kTraces + "generated/mpa2_crc.pcap", "-o", svg}, svg);
  ASSERT_EQ(gen.code, 0) << gen.err;
  EXPECT_NE(gen.svg.find("<g class=\"msg term terminate\""), std::string::npos);
}

TEST(Ladder, MpaExchangeShowsWhatWasNegotiated) {
  const auto svg = temp("p2p.svg");
  auto r = ladder({kTraces + "generated/mpa2_p2p_read_crc.pcap", "-o", svg}, svg);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.svg.begin(), r.svg.end(), '\n') > 0, true);
  std::size_t mpa = 0;
  for (auto p = r.svg.find("<g class=\"mpa\""); p != std::string::npos;
       p = r.svg.find("<g class=\"mpa\"", p + 1))
    ++mpa;
  EXPECT_EQ(mpa, 2u);
  EXPECT_NE(r.svg.find("MPA Request rev 2  M=0 C=1  IRD 16 ORD 16  P2P RTR"), std::string::npos);
  EXPECT_NE(r.svg.find("negotiated: rev 2, CRC on, markers off/off"), std::string::npos);
  EXPECT_NE(r.svg.find("10.0.0.1:40000"), std::string::npos);
  // The zero-length RDMA Read that opens a peer-to-peer connection is its RTR (RFC 6581 §5).
  const auto rtr = r.svg.find("peer-to-peer RTR message");
  ASSERT_NE(rtr, std::string::npos);
  EXPECT_LT(r.svg.rfind("data-opcode=\"RDMA Read Request\"", rtr), rtr);
  EXPECT_EQ(r.svg.find("data-opcode=", r.svg.find("<g class=\"mpa\"")),
            r.svg.rfind("data-opcode=\"RDMA Read Request\"", rtr));
}

TEST(Ladder, FiltersReduceWhatIsDrawn) {
  const auto f = kTraces + "siw/rping_lo.pcap";
  const auto svg = temp("filter.svg");
  auto all = ladder({f, "-o", svg, "--no-collapse"}, svg);
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_EQ(arrows(all.svg).size(), 70u);

  auto sends = ladder({f, "-o", svg, "--no-collapse", "--opcode", "send"}, svg);
  ASSERT_EQ(sends.code, 0) << sends.err;
  const auto s = arrows(sends.svg);
  EXPECT_EQ(s.size(), 40u);
  for (const auto& a : s) EXPECT_EQ(a.opcode, "Send");
  EXPECT_EQ(sends.svg.find("<g class=\"mpa\""), std::string::npos);

  auto reads = ladder(
      {f, "-o", svg, "--no-collapse", "--opcode", "read-request,RDMA Read Response,mpa"}, svg);
  ASSERT_EQ(reads.code, 0) << reads.err;
  EXPECT_EQ(arrows(reads.svg).size(), 20u);
  EXPECT_NE(reads.svg.find("<g class=\"mpa\""), std::string::npos);

  // A time window: the messages (all single-segment here) that start within it.
  const auto d = decode(f);
  const double from = 0.02, to = 0.03;
  const auto in_window = static_cast<std::size_t>(std::count_if(
      d.last_times.begin(), d.last_times.end(), [&](double t) { return t >= from && t <= to; }));
  ASSERT_GT(in_window, 0u);
  ASSERT_LT(in_window, 70u);
  auto win = ladder({f, "-o", svg, "--no-collapse", "--from", "0.02", "--to", "0.03"}, svg);
  ASSERT_EQ(win.code, 0) << win.err;
  EXPECT_EQ(arrows(win.svg).size(), in_window);

  // One connection of six.
  const auto multi = kTraces + "siw/perftest_send_bw.pcap";
  auto one = ladder({multi, "-o", svg, "--connection", "1", "--max-events", "0"}, svg);
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_NE(one.svg.find("connection c1:"), std::string::npos);
  EXPECT_EQ(one.svg.find("connection c0:"), std::string::npos);
  EXPECT_EQ(one.svg.find("connection c2:"), std::string::npos);
}

TEST(Ladder, RepeatedExchangesCollapseIntoOneDrawingWithTheirCount) {
  const auto svg = temp("collapse.svg");
  // rping: the same 7-message exchange ten times.
  auto r = ladder({kTraces + "siw/rping_lo.pcap", "-o", svg}, svg);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto a = arrows(r.svg);
  EXPECT_EQ(a.size(), 7u);
  for (const auto& x : a) EXPECT_EQ(x.repeat, 10u);
  EXPECT_NE(r.svg.find("<g class=\"repeat\" data-repeat=\"10\""), std::string::npos);
  EXPECT_NE(r.svg.find("\u00d710"), std::string::npos);
  EXPECT_NE(r.svg.find("MSN 1..19"), std::string::npos);  // the Sends' MSNs it stands for
  // perftest's 100 identical 4 KiB Writes on one connection: one arrow, x100, 3 segments each.
  auto w = ladder({kTraces + "siw/perftest_write_bw.pcap", "-o", svg, "--connection", "3"}, svg);
  ASSERT_EQ(w.code, 0) << w.err;
  bool found = false;
  for (const auto& x : arrows(w.svg)) found |= x.opcode == "RDMA Write" && x.repeat == 100;
  EXPECT_TRUE(found);
  EXPECT_NE(w.svg.find("data-segments=\"3\""), std::string::npos);
  EXPECT_NE(w.svg.find("3 DDP segments"), std::string::npos);
}

TEST(Ladder, LongCapturesAreSplitIntoPages) {
  const auto f = kTraces + "siw/perftest_send_bw.pcap";
  const auto d = decode(f);
  const auto svg = temp("page.svg");
  auto first = ladder({f, "-o", svg, "--no-collapse", "--max-events", "100"}, svg);
  ASSERT_EQ(first.code, 0) << first.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first.svg, m, std::regex(R"(\(page 1 of (\d+)\))")));
  const int pages = std::stoi(m[1]);
  EXPECT_GE(pages, 3);  // 288 messages and 12 MPA frames
  EXPECT_NE(first.out.find("--page 2"), std::string::npos);
  std::uint64_t total = 0;
  for (int p = 1; p <= pages; ++p) {
    auto r = ladder(
        {f, "-o", svg, "--no-collapse", "--max-events", "100", "--page", std::to_string(p)}, svg);
    ASSERT_EQ(r.code, 0) << r.err;
    ASSERT_TRUE(well_formed(r.svg));
    EXPECT_NE(r.svg.find("(page " + std::to_string(p) + " of " + std::to_string(pages) + ")"),
              std::string::npos);
    const auto a = arrows(r.svg);
    EXPECT_LE(a.size(), 100u);
    total += complete_messages(a);
  }
  EXPECT_EQ(total, d.last_segments);
  auto beyond = ladder(
      {f, "-o", svg, "--no-collapse", "--max-events", "100", "--page", std::to_string(pages + 1)});
  EXPECT_EQ(beyond.code, 2);
  EXPECT_TRUE(one_line(beyond.err)) << beyond.err;
  EXPECT_NE(beyond.err.find("--page"), std::string::npos);
}

TEST(Ladder, BadInputGetsOneLineAndNonZeroExit) {
  const auto svg = temp("bad.svg");
  const auto garbage = temp("garbage.pcap");
  std::ofstream(garbage) << "this is not a capture\n";
  const auto rping = kTraces + "siw/rping_lo.pcap";
  struct BadInput {
    std::vector<std::string> args;
    std::string says;
  };
  const BadInput cases[] = {
      {{temp("missing.pcap"), "-o", svg}, "missing.pcap"},
      {{garbage, "-o", svg}, "garbage.pcap"},
      {{kTraces + "siw/hostnet_eth0.pcap", "-o", svg}, "no iWARP connection"},
      {{rping, "-o", svg, "--opcode", "send,frobnicate"}, "frobnicate"},
      {{rping, "-o", svg, "--connection", "7"}, "--connection 7"},
      {{rping, "-o", svg, "--max-events", "lots"}, "--max-events"},
      {{rping, "-o", svg, "--from", "0.5", "--to", "0.1"}, "--to"},
      {{rping, "-o", svg, "--from", "-1"}, "--from"},
      {{rping, "-o", svg, "--bogus"}, "--bogus"},
      {{rping, "-o", temp("no/such/dir/x.svg")}, "no/such/dir/x.svg"},
      {{rping, "-o", svg, "--from", "99"}, "nothing to draw"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.says);
    auto r = ladder(c.args);
    EXPECT_EQ(r.code, 2);
    EXPECT_TRUE(one_line(r.err)) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
}

TEST(Ladder, PngThroughRsvgConvertOrOneLineWhenMissing) {
  const auto svg = temp("png.svg"), png = temp("png.png");
  const auto f = kTraces + "siw/hostpeer_eth0_terminate.pcap";
  // Without the converter on PATH: the SVG is written, the PNG refused in one line.
  Program missing("rnic ladder", {"/usr/bin/env", "PATH=/nonexistent", IWARP_RNIC_BIN, "ladder", f,
                                  "-o", svg, "--png", png});
  missing.wait(std::chrono::seconds(60));
  EXPECT_EQ(missing.status().code, 2);
  EXPECT_TRUE(one_line(missing.stderr_text())) << missing.stderr_text();
  EXPECT_NE(missing.stderr_text().find("librsvg2-bin"), std::string::npos);
  EXPECT_FALSE(fs::exists(png));
  ASSERT_EQ(std::system("command -v rsvg-convert >/dev/null 2>&1"), 0)
      << "rsvg-convert not installed: run scripts/install-deps.sh (librsvg2-bin)";
  auto r = ladder({f, "-o", svg, "--png", png});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto bytes = slurp(png);
  ASSERT_GT(bytes.size(), 1000u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

}  // namespace

namespace {

TEST(Ladder, AMessageWithABadCrcIsFlaggedOnItsArrow) {
  // mpa2_crc.pcap with one octet of frame 12's FPDU (the 100-octet Send with SE) flipped:
  // its CRC no longer matches (RFC 5044 §6.2).
  std::string bytes = slurp(kTraces + "generated/mpa2_crc.pcap");
  std::size_t off = 24, frame = 0;
  while (off + 16 <= bytes.size()) {
    std::uint32_t incl = 0;
    std::memcpy(&incl, bytes.data() + off + 8, 4);  // little-endian pcap record header
    if (++frame == 12) {
      ASSERT_LE(off + 16 + incl, bytes.size());
      bytes[off + 16 + incl - 10] ^= 0x5a;
      break;
    }
    off += 16 + incl;
  }
  ASSERT_EQ(frame, 12u);
  const auto bad = temp("badcrc.pcap"), svg = temp("badcrc.svg");
  std::ofstream(bad, std::ios::binary) << bytes;
  auto r = ladder({bad, "-o", svg, "--no-collapse"}, svg);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto g = r.svg.find("<g class=\"msg send error\" data-opcode=\"Send with SE\"");
  ASSERT_NE(g, std::string::npos);
  const auto group = r.svg.substr(g, r.svg.find("</g>", g) - g);
  EXPECT_NE(group.find("CRC mismatch"), std::string::npos);
  EXPECT_NE(group.find("#c62828"), std::string::npos);
  // Only that one.
  std::size_t flagged = 0;
  for (const auto& a : arrows(r.svg)) flagged += a.cls.ends_with(" error") ? 1 : 0;
  EXPECT_EQ(flagged, 1u);
}

}  // namespace
