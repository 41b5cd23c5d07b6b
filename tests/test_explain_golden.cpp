// Golden outputs of `rnic decode --explain` and `rnic replay --explain` over the committed
// sample captures: the whole output must equal tests/golden/explain/<name>.txt, and the goldens
// together must show every RDMAP opcode, the MPA exchange (and a reject) and every hole event.
// To regenerate them after an intended change (then read the diff before committing):
//   IWARP_UPDATE_GOLDEN=1 build/tests/unit_tests --gtest_filter='ExplainGolden*'
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Case {
  std::string name;  // golden file name, without .txt
  std::string args;  // rnic's arguments; capture paths relative to the source tree
};

const std::vector<Case>& decode_cases() {
  static const std::vector<Case> k{
      {"decode_mpa1_plain", "decode --explain pcap_traces/generated/mpa1_plain.pcap"},
      {"decode_mpa1_crc_markers", "decode --explain pcap_traces/generated/mpa1_crc_markers.pcap"},
      {"decode_mpa2_crc", "decode --explain pcap_traces/generated/mpa2_crc.pcap"},
      {"decode_mpa2_p2p_read_crc", "decode --explain pcap_traces/generated/mpa2_p2p_read_crc.pcap"},
      {"decode_mpa2_p2p_write", "decode --explain pcap_traces/generated/mpa2_p2p_write.pcap"},
      {"decode_siw_rping_lo", "decode --explain pcap_traces/siw/rping_lo.pcap"},
      {"decode_siw_terminate", "decode --explain pcap_traces/siw/hostpeer_eth0_terminate.pcap"},
      {"decode_siw_reject", "decode --explain pcap_traces/siw/siw_accept_race_stall.pcap"},
      {"decode_siw_mpa_v1", "decode --explain pcap_traces/siw/siw_mpa_v1.pcap"},
      {"decode_siw_p2p", "decode --explain pcap_traces/siw/siw_p2p.pcap"},
  };
  return k;
}

const std::vector<Case>& replay_cases() {
  static const std::vector<Case> k{
      {"replay_mpa2_crc_permute4",
       "replay --explain --timeline --permute 4 --reorder 0.5 pcap_traces/generated/mpa2_crc.pcap"},
      {"replay_mpa1_crc_markers_permute6",
       "replay --explain --timeline --permute 6 --reorder 0.5 "
       "pcap_traces/generated/mpa1_crc_markers.pcap"},
      {"replay_mpa2_p2p_read_crc_permute1",
       "replay --explain --timeline --permute 1 --reorder 0.5 "
       "pcap_traces/generated/mpa2_p2p_read_crc.pcap"},
      {"replay_siw_terminate",
       "replay --explain --timeline pcap_traces/siw/hostpeer_eth0_terminate.pcap"},
      {"replay_siw_rping_drop30", "replay --explain --drop 30 pcap_traces/siw/rping_lo.pcap"},
  };
  return k;
}

struct RunResult {
  std::string out;
  int status = -1;
};

// Runs rnic in the source tree (so the paths it prints are the relative ones above); its
// stderr (log lines) is left out.
RunResult run_rnic(const std::string& args) {
  const std::string cmd = std::string("cd '") + IWARP_SOURCE_DIR + "' && '" + IWARP_RNIC_BIN +
                          "' " + args + " 2>/dev/null";
  RunResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[65536];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

fs::path golden_path(const std::string& name) {
  return fs::path(IWARP_SOURCE_DIR) / "tests" / "golden" / "explain" / (name + ".txt");
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool updating() {
  const char* u = std::getenv("IWARP_UPDATE_GOLDEN");
  return u && *u && std::string(u) != "0";
}

// The first line where `got` and `want` differ, both shown.
std::string first_difference(const std::string& got, const std::string& want) {
  std::istringstream g(got), w(want);
  std::string gl, wl;
  for (int line = 1;; ++line) {
    const bool gm = static_cast<bool>(std::getline(g, gl));
    const bool wm = static_cast<bool>(std::getline(w, wl));
    if (!gm && !wm) return "no line differs (trailing newline?)";
    if (!gm || !wm || gl != wl)
      return "line " + std::to_string(line) + "\n  golden: " + (wm ? wl : "<end>") +
             "\n  output: " + (gm ? gl : "<end>");
  }
}

// Runs one case and compares (or, with IWARP_UPDATE_GOLDEN=1, rewrites its golden file).
std::string check(const Case& c) {
  const RunResult r = run_rnic(c.args);
  EXPECT_TRUE(r.status == 0 || r.status == 1)
      << "rnic " << c.args << " exited with " << r.status << "\n"
      << r.out;
  EXPECT_NE(r.out.find("why: "), std::string::npos) << "no explanation in rnic " << c.args;
  const fs::path p = golden_path(c.name);
  if (updating()) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << r.out;
    return r.out;
  }
  EXPECT_TRUE(fs::exists(p)) << p << " is missing; IWARP_UPDATE_GOLDEN=1 writes it";
  const std::string want = read_all(p);
  EXPECT_EQ(r.out == want, true) << "rnic " << c.args << " differs from " << p << " at "
                                 << first_difference(r.out, want)
                                 << "\n(IWARP_UPDATE_GOLDEN=1 regenerates; read the diff first)";
  return r.out;
}

// The explanation lines only.
std::string why_lines(const std::string& out) {
  std::istringstream in(out);
  std::string line, s;
  while (std::getline(in, line))
    if (line.find(" why: ") != std::string::npos) s += line + '\n';
  return s;
}

void expect_all(const std::string& why, const std::vector<std::string>& phrases) {
  for (const auto& p : phrases)
    EXPECT_NE(why.find(p), std::string::npos) << "no golden explains \"" << p << "\"";
}

TEST(ExplainGolden, DecodeSampleCaptures) {
  std::string why;
  for (const auto& c : decode_cases()) {
    SCOPED_TRACE(c.name);
    why += why_lines(check(c));
  }
  // Every RDMAP opcode (RFC 5040, RFC 7306), both MPA frames, markers, CRC and a reject.
  expect_all(why, {"why: RDMA Write ",
                   "why: RDMA Read Request MSN",
                   "why: RDMA Read Response ",
                   "why: Send MSN",
                   "why: Send with Invalidate MSN",
                   "why: Send with Solicited Event MSN",
                   "why: Send with Solicited Event and Invalidate MSN",
                   "why: Terminate MSN 1 on queue 2",
                   "why: Immediate Data MSN",
                   "why: Immediate Data with Solicited Event MSN",
                   "why: Atomic Request ",
                   "why: Atomic Response MSN",
                   "why: MPA Request rev 1",
                   "why: MPA Request rev 2",
                   "why: MPA Reply rev",
                   "with R=1",
                   "marker(s) removed",
                   "(C=1",
                   "(M=1)",
                   "first segment (more follow)",
                   "last segment (",
                   "peer-to-peer with RTR"});
}

TEST(ExplainGolden, ReplayWithHoles) {
  std::string why;
  for (const auto& c : replay_cases()) {
    SCOPED_TRACE(c.name);
    why += why_lines(check(c));
  }
  // Every hole event the timeline reports, and what placement and completion mean.
  expect_all(why, {"why: TCP hole opened", "why: TCP hole closed", "beyond a TCP hole: MSN",
                   "why: RDMA Write beyond a TCP hole", "cannot be placed yet",
                   "released in stream order", "why: in order: ", "why: receive completion",
                   "why: doorbell: ", "why: the peer sent a Terminate",
                   "why: duplicate: ", "why: the RDMA Read work request completes"});
}

// Real bytes with errors: a committed capture whose last zero-length Send (MSN 4) gets the
// reserved opcode 0xC, so its CRC no longer matches either. The FPDU line says the opcode is
// reserved and what a receiver does; the violations name their rules and Terminates.
TEST(ExplainGolden, ReservedOpcodeAndBadCrcInACapture) {
  const fs::path src = fs::path(IWARP_SOURCE_DIR) / "pcap_traces/generated/mpa2_crc.pcap";
  std::string bytes = read_all(src);
  // ULPDU_Length 18, T=0 L=1 DV=1, RV=1 opcode 3 (Send), RsvdULP 0, QN 0, MSN 4, MO 0.
  const std::string send4(
      "\x00\x12\x41\x43\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04"
      "\x00\x00\x00\x00",
      20);
  const auto at = bytes.find(send4);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(bytes.find(send4, at + 1), std::string::npos) << "the pattern must be unique";
  bytes[at + 3] = '\x4c';  // opcode 0xC: reserved
  const fs::path bad = fs::path(::testing::TempDir()) / "explain_reserved_opcode.pcap";
  std::ofstream(bad, std::ios::binary) << bytes;
  const RunResult r = run_rnic("decode --explain '" + bad.string() + "'");
  EXPECT_EQ(r.status, 1) << r.out;  // violations found
  const std::string why = why_lines(r.out);
  expect_all(why, {"why: opcode 0xc is reserved", "layer 0 etype 2 code 0x06",
                   "§7.4.1); violation: an FPDU's CRC did not match",
                   "why: violation: a segment carried an opcode the receiver does not know"});
  fs::remove(bad);
}

}  // namespace
