// Running tshark from tests. Tests that use it fail (never skip) when tshark is missing:
// scripts/install-deps.sh installs it.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>
#include <array>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "ddp/rdmap_opcode.hpp"
#include "trace/trace_decoder.hpp"

namespace iwarp::test {

// Runs `cmd` through the shell and returns its standard output. With `err`, its standard error
// goes there (else it is discarded); with `status`, pclose()'s status.
inline std::string run_command(const std::string& cmd, int* status = nullptr,
                               std::string* err = nullptr) {
  std::string out;
  char err_path[] = "/tmp/iwarp_cmd_stderr_XXXXXX";
  int err_fd = err ? mkstemp(err_path) : -1;
  if (err_fd >= 0) close(err_fd);
  const std::string redirect = err_fd >= 0 ? std::string(" 2>'") + err_path + "'" : " 2>/dev/null";
  FILE* p = popen((cmd + redirect).c_str(), "r");
  if (!p) return out;
  std::array<char, 65536> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = pclose(p);
  if (status) *status = st;
  if (err_fd >= 0) {
    std::ifstream in(err_path);
    std::ostringstream text;
    text << in.rdbuf();
    *err = text.str();
    std::remove(err_path);
  }
  return out;
}

// tshark as every test runs it. Wireshark gives a TCP payload to a dissector registered for
// either port before it tries heuristic dissectors such as MPA's, so a live capture whose
// ephemeral port Wireshark assigns to another protocol (57000 is IRC's) showed no MPA frame at
// all (siw-interop case e1 in CI). Heuristics first puts MPA's ahead; it claims only MPA Requests
// and Replies and the FPDUs of connections whose exchange it saw.
inline const std::string kTshark = "tshark -o tcp.try_heuristic_first:TRUE";

inline bool tshark_available() {
  int st = -1;
  run_command("tshark --version", &st);
  return st == 0;
}

#define ASSERT_TSHARK()                          \
  ASSERT_TRUE(::iwarp::test::tshark_available()) \
      << "tshark is required: run scripts/install-deps.sh"

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

inline std::uint64_t parse_num(const std::string& s) {
  if (s.empty()) return 0;
  return std::stoull(s, nullptr, 0);
}

// One FPDU as (opcode, tagged, last, STag-or-QN, TO-or-MSN, MO, ULPDU length).
using FpduKey =
    std::tuple<int, int, int, std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t>;

// tshark is asked to reassemble out-of-order TCP segments: by default it does not, and then it
// never decodes the FPDUs those segments carry (netem_reorder.pcap: 263 of 380 RDMA Writes).
struct TsharkFpdus {
  std::map<std::string, std::uint64_t> opcode_counts;  // by our opcode names
  std::vector<FpduKey> keys;                           // one per FPDU
  std::uint64_t fpdus = 0;
  std::uint64_t multi_fpdu_frames = 0;  // frames holding several FPDUs (after reassembly)
};

inline TsharkFpdus tshark_fpdus(const std::string& file) {
  TsharkFpdus t;
  int status = -1;
  std::string err;
  std::string out = run_command(
      kTshark + " -o tcp.reassemble_out_of_order:TRUE -r '" + file +
          "' -Y iwarp_mpa.fpdu -T fields -E occurrence=a -E separator=/t -E aggregator=, "
          "-e iwarp_rdma.opcode -e iwarp_ddp.tagged_flag -e iwarp_ddp.last_flag -e iwarp_ddp.stag "
          "-e iwarp_ddp.tagged_offset -e iwarp_ddp.qn -e iwarp_ddp.msn -e iwarp_ddp.mo "
          "-e iwarp_mpa.ulpdulength",
      &status, &err);
  // A tshark that fails says why (an empty answer alone says nothing about the cause).
  if (status != 0)
    ADD_FAILURE() << "tshark exited with status " << status << " reading " << file << ": " << err;
  for (const auto& line : split(out, '\n')) {
    if (line.empty()) continue;
    auto f = split(line, '\t');
    f.resize(9);
    // With several FPDUs in one frame each field lists one value per FPDU that has it:
    // STag/TO only for tagged ones, QN/MSN/MO only for untagged ones. Walk them in order.
    std::vector<std::vector<std::string>> v;
    for (const auto& field : f) v.push_back(split(field, ','));
    const auto& ops = v[0];
    std::size_t ti = 0, ui = 0;
    if (ops.size() > 1) ++t.multi_fpdu_frames;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      ++t.opcode_counts[std::string(
          rdmap::opcode_name(static_cast<std::uint8_t>(parse_num(ops[i]))))];
      ++t.fpdus;
      auto at = [&](int field, std::size_t k) {
        return k < v[field].size() ? parse_num(v[field][k]) : ~0ull;
      };
      bool tagged = i < v[1].size() && v[1][i] == "1";
      bool last = i < v[2].size() && v[2][i] == "1";
      if (tagged) {
        t.keys.emplace_back(static_cast<int>(parse_num(ops[i])), 1, last, at(3, ti), at(4, ti), 0,
                            at(8, i));
        ++ti;
      } else {
        t.keys.emplace_back(static_cast<int>(parse_num(ops[i])), 0, last, at(5, ui), at(6, ui),
                            at(7, ui), at(8, i));
        ++ui;
      }
    }
  }
  return t;
}

inline FpduKey key_of(const trace::Record& r) {
  const auto& h = *r.ddp;
  return {h.opcode,
          h.tagged,
          h.last,
          h.tagged ? h.stag.value() : h.qn.value(),
          h.tagged ? h.to.value() : h.msn.value(),
          h.tagged ? 0 : h.mo.value(),
          r.ulpdu_length};
}

}  // namespace iwarp::test
