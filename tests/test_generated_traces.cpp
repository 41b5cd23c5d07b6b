// Our encoders against tshark: traces generated with every RDMAP opcode, for MPA v1 with and
// without CRC and markers (and MPA v2, peer-to-peer), decode in tshark with the right opcodes,
// good CRCs, and no malformed packet or expert error; our own decoder agrees FPDU for FPDU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "trace/pcap_reader.hpp"
#include "trace/trace_decoder.hpp"
#include "trace/trace_generator.hpp"
#include "tshark_support.hpp"

namespace iwarp::trace {
namespace {

namespace fs = std::filesystem;

struct GenCase {
  const char* name;
  int rev;
  bool crc, markers, p2p;
  mpa::RtrType rtr;
  friend void PrintTo(const GenCase& c, std::ostream* os) { *os << c.name; }
};

fs::path temp_dir() {
  auto d = fs::temp_directory_path() / ("iwarp_gen_" + std::to_string(getpid()));
  fs::create_directories(d);
  return d;
}

GeneratorOptions options(const GenCase& c) {
  GeneratorOptions g;
  for (auto* p : {&g.initiator, &g.responder}) {
    p->revision = static_cast<std::uint8_t>(c.rev);
    p->crc = c.crc ? mpa::CrcPolicy::Required : mpa::CrcPolicy::Optional;
    p->markers = c.markers ? mpa::MarkerPolicy::Required : mpa::MarkerPolicy::Optional;
    p->peer_to_peer = c.p2p;
  }
  g.initiator.rtr = static_cast<mpa::RtrMask>(c.rtr);
  return g;
}

class GeneratedTrace : public ::testing::TestWithParam<GenCase> {};

TEST_P(GeneratedTrace, TsharkAndOurDecoderAgreeWithTheEncoder) {
  ASSERT_TSHARK();
  const auto& c = GetParam();
  const std::string file = (temp_dir() / (std::string(c.name) + ".pcap")).string();
  auto gen = generate_conversation(file, options(c));
  ASSERT_TRUE(gen) << gen.error();
  EXPECT_EQ(gen->params.crc, c.crc);
  EXPECT_EQ(gen->params.markers_to_responder, c.markers);
  EXPECT_EQ(gen->opcode_counts.size(), 12u) << "every opcode 0x0..0xB is in the trace";

  // Our decoder: no violations, same FPDUs per opcode.
  auto cap = read_capture(file);
  ASSERT_TRUE(cap) << cap.error();
  auto rep = decode_capture(*cap);
  ASSERT_EQ(rep.iwarp_flows(), 1u);
  for (const auto& r : rep.records)
    EXPECT_NE(r.kind, Record::Kind::Violation) << format_record(r, 0);
  EXPECT_EQ(rep.flows[0].opcode_counts, gen->opcode_counts);
  EXPECT_EQ(rep.flows[0].fpdus, gen->fpdus);
  EXPECT_EQ(rep.flows[0].crc_good, c.crc ? gen->fpdus : 0u);
  if (c.markers) {
    EXPECT_GT(rep.flows[0].markers, 0u);
  }

  // tshark: the same FPDUs, opcode for opcode and field for field.
  auto ts = test::tshark_fpdus(file);
  EXPECT_EQ(ts.opcode_counts, gen->opcode_counts);
  std::vector<test::FpduKey> mine;
  for (const auto& r : rep.records)
    if (r.kind == Record::Kind::Fpdu) mine.push_back(test::key_of(r));
  auto theirs = ts.keys;
  std::sort(mine.begin(), mine.end());
  std::sort(theirs.begin(), theirs.end());
  EXPECT_EQ(mine, theirs);

  // CRC verdicts: tshark prints them only in the detail view.
  std::string detail = test::run_command(test::kTshark + " -r '" + file + "' -V");
  auto count = [&](const std::string& needle) {
    std::size_t n = 0;
    for (auto p = detail.find(needle); p != std::string::npos; p = detail.find(needle, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("(Good CRC32)"), c.crc ? gen->fpdus : 0u);
  EXPECT_EQ(count("Bad CRC32"), 0u);
  EXPECT_EQ(count("Dissector bug"), 0u);
  // No malformed packet and no expert error. Rev 2 frames draw tshark 4.0's warnings ("Rev field
  // is NOT set to one": it predates RFC 6581), so for them only errors are checked.
  // Wireshark's RPC-over-RDMA heuristic (rpcrdma_iwarp) throws "Malformed" on any Send payload
  // shorter than its 4-octet XID; with it disabled nothing may be flagged, and with it enabled
  // exactly our sub-4-octet Sends are.
  const std::string severity = c.rev == 1 ? "warning" : "error";
  const std::string filter = "'_ws.malformed || _ws.expert.severity >= " + severity + "'";
  EXPECT_EQ(test::run_command(test::kTshark + " --disable-heuristic rpcrdma_iwarp -r '" + file +
                              "' -Y " + filter),
            "")
      << "tshark flagged frames";
  std::set<std::uint64_t> tiny_sends;
  for (const auto& r : rep.records)
    if (r.kind == Record::Kind::Fpdu && r.ddp && !r.ddp->tagged && r.ddp->opcode >= 3 &&
        r.ddp->opcode <= 6 && r.payload_length < 4)
      tiny_sends.insert(r.frame);
  std::set<std::uint64_t> flagged;
  for (const auto& l : test::split(test::run_command(test::kTshark + " -r '" + file + "' -Y " +
                                                     filter + " -T fields -e frame.number"),
                                   '\n'))
    if (!l.empty()) flagged.insert(test::parse_num(l));
  EXPECT_EQ(flagged, tiny_sends);

  // Markers: tshark found and stripped them (it shows an FPDU back pointer per marker).
  EXPECT_EQ(count("FPDU back pointer"), rep.flows[0].markers);

  // The copy committed under pcap_traces/generated/ is exactly what the generator writes.
  const fs::path committed =
      fs::path(IWARP_SOURCE_DIR) / "pcap_traces" / "generated" / (std::string(c.name) + ".pcap");
  if (fs::exists(committed)) {
    auto slurp = [](const fs::path& p) {
      std::ifstream in(p, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    EXPECT_EQ(slurp(committed), slurp(file)) << committed << " is stale: regenerate it";
  }
  fs::remove(file);
}

// RFC 7306 atomics: tshark's fields at the offsets RFC 7306 §4.2 gives. tshark 4.0 names
// AtomicOp 2 "CmpSwap" and prints its data as swap data/mask; for op 1 (Swap) it shows no
// swap fields (a dissector gap), so op 1 is checked through the fields it does print.
TEST(GeneratedTraceAtomics, FieldsMatchRfc7306) {
  ASSERT_TSHARK();
  const std::string file = (temp_dir() / "atomics.pcap").string();
  auto gen = generate_conversation(file, options({"a", 1, true, false, false, mpa::RtrType::None}));
  ASSERT_TRUE(gen) << gen.error();
  std::string out = test::run_command(
      test::kTshark + " -r '" + file +
      "' -Y 'iwarp_rdma.opcode == 0x0a' -T fields -E separator=/t -e iwarp_rdma.atomic.opcode "
      "-e iwarp_rdma.atomic.request_identifier -e iwarp_rdma.atomic.remote_stag "
      "-e iwarp_rdma.atomic.remote_tagged_offset -e iwarp_rdma.atomic.add_data "
      "-e iwarp_rdma.atomic.swap_data -e iwarp_rdma.atomic.compare_data -e iwarp_ddp.qn");
  auto lines = test::split(out, '\n');
  lines.erase(std::remove(lines.begin(), lines.end(), ""), lines.end());
  ASSERT_EQ(lines.size(), 3u) << out;
  for (std::uint64_t op = 0; op < 3; ++op) {
    auto f = test::split(lines[op], '\t');
    f.resize(8);
    EXPECT_EQ(test::parse_num(f[0]), op);
    EXPECT_EQ(test::parse_num(f[1]), 100 + op);
    EXPECT_EQ(test::parse_num(f[2]), 0x00777701u);
    EXPECT_EQ(test::parse_num(f[3]), 0x1000 + 8 * op);
    EXPECT_EQ(test::parse_num(f[7]), 1u) << "Atomic Request rides QN 1";
    if (op == 0) {
      EXPECT_EQ(test::parse_num(f[4]), 0x1111111111111111ull);
    }
    if (op == 2) {
      EXPECT_EQ(test::parse_num(f[5]), 0x3333333333333333ull);
      EXPECT_EQ(test::parse_num(f[6]), 0x42u);
    }
  }
  std::string resp =
      test::run_command(test::kTshark + " -r '" + file +
                        "' -Y 'iwarp_rdma.opcode == 0x0b' -T fields -E separator=/t "
                        "-e iwarp_rdma.atomic.original_request_identifier -e iwarp_ddp.qn");
  auto rl = test::split(resp, '\n');
  ASSERT_GE(rl.size(), 3u);
  auto f = test::split(rl[0], '\t');
  EXPECT_EQ(test::parse_num(f[0]), 100u);
  EXPECT_EQ(test::parse_num(f[1]), 3u) << "Atomic Response rides QN 3";
  fs::remove(file);
}

// A live capture keeps the connection's real ports, and an ephemeral port may be one Wireshark
// gives to another protocol (57000: IRC; siw-interop's case e1 once drew one in CI and tshark
// then found no MPA frame in it). The tshark the tests and scripts run still decodes every FPDU.
TEST(GeneratedTracePorts, APortWiresharkGivesToAnotherProtocolStillDecodesAsMpa) {
  ASSERT_TSHARK();
  const std::string file = (temp_dir() / "irc_port.pcap").string();
  auto opts = options({"p", 2, true, false, false, mpa::RtrType::None});
  opts.pcap.client.port = 57000;
  auto gen = generate_conversation(file, opts);
  ASSERT_TRUE(gen) << gen.error();
  // The port alone decides it: plain tshark hands the stream to IRC.
  EXPECT_EQ(test::run_command("tshark -r '" + file + "' -Y iwarp_mpa -T fields -e frame.number"),
            "")
      << "tshark no longer prefers the port's dissector: this test no longer shows the problem";
  EXPECT_EQ(test::tshark_fpdus(file).opcode_counts, gen->opcode_counts);
  fs::remove(file);
}

INSTANTIATE_TEST_SUITE_P(
    AllFramings, GeneratedTrace,
    ::testing::Values(GenCase{"mpa1_plain", 1, false, false, false, mpa::RtrType::None},
                      GenCase{"mpa1_crc", 1, true, false, false, mpa::RtrType::None},
                      GenCase{"mpa1_markers", 1, false, true, false, mpa::RtrType::None},
                      GenCase{"mpa1_crc_markers", 1, true, true, false, mpa::RtrType::None},
                      GenCase{"mpa2_crc", 2, true, false, false, mpa::RtrType::None},
                      GenCase{"mpa2_p2p_write", 2, false, false, true, mpa::RtrType::Write},
                      GenCase{"mpa2_p2p_read_crc", 2, true, false, true, mpa::RtrType::Read},
                      GenCase{"mpa2_p2p_send_markers", 2, true, true, true, mpa::RtrType::Send}),
    [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace iwarp::trace
