// Every real siw capture (pcap_traces/siw, copied from the project's corpus) decodes with no
// violation, with good CRCs where negotiated, and FPDU for FPDU as tshark decodes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "trace/pcap_reader.hpp"
#include "trace/trace_decoder.hpp"
#include "tshark_support.hpp"

namespace iwarp::trace {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> corpus_files() {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(fs::path(IWARP_SOURCE_DIR) / "pcap_traces" / "siw"))
    if (e.path().extension() == ".pcap") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(SiwCorpus, HasTheWholeCorpus) {
  EXPECT_EQ(corpus_files().size(), 18u);
}

class SiwCorpusTrace : public ::testing::TestWithParam<std::string> {};

TEST_P(SiwCorpusTrace, DecodesCleanlyAndAgreesWithTshark) {
  ASSERT_TSHARK();
  const std::string file = GetParam();
  auto cap = read_capture(file);
  ASSERT_TRUE(cap) << cap.error();
  auto rep = decode_capture(*cap);

  for (const auto& r : rep.records)
    EXPECT_NE(r.kind, Record::Kind::Violation) << format_record(r, 0);
  EXPECT_EQ(rep.violations(), 0u);

  const bool plain_tcp = fs::path(file).filename() == "hostnet_eth0.pcap";
  if (plain_tcp) {
    EXPECT_EQ(rep.iwarp_flows(), 0u);
    for (const auto& f : rep.flows) EXPECT_NE(f.verdict.find("no iWARP"), std::string::npos);
  } else {
    EXPECT_GE(rep.iwarp_flows(), 1u);
  }

  // CRC: every FPDU good where C was negotiated, none checked elsewhere.
  for (const auto& f : rep.flows) {
    if (!f.params) continue;
    EXPECT_EQ(f.crc_bad, 0u);
    if (f.params->crc)
      EXPECT_EQ(f.crc_good, f.fpdus);
    else
      EXPECT_EQ(f.crc_absent, f.fpdus);
  }

  // Per opcode and per FPDU, the same as tshark.
  auto ts = test::tshark_fpdus(file);
  std::map<std::string, std::uint64_t> ours;
  for (const auto& f : rep.flows)
    for (const auto& [k, v] : f.opcode_counts) ours[k] += v;
  EXPECT_EQ(ours, ts.opcode_counts);
  std::vector<test::FpduKey> mine;
  for (const auto& r : rep.records)
    if (r.kind == Record::Kind::Fpdu && r.ddp) mine.push_back(test::key_of(r));
  auto theirs = ts.keys;
  std::sort(mine.begin(), mine.end());
  std::sort(theirs.begin(), theirs.end());
  EXPECT_EQ(mine, theirs);
}

INSTANTIATE_TEST_SUITE_P(AllTraces, SiwCorpusTrace, ::testing::ValuesIn(corpus_files()),
                         [](const auto& p) {
                           std::string n = fs::path(p.param).stem().string();
                           std::replace_if(
                               n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return n;
                         });

TEST(SiwCorpus, SiwTerminateIsFlaggedAsItsBitFieldQuirk) {
  auto cap =
      read_capture(std::string(IWARP_SOURCE_DIR) + "/pcap_traces/siw/hostpeer_eth0_terminate.pcap");
  ASSERT_TRUE(cap) << cap.error();
  auto rep = decode_capture(*cap);
  int terms = 0;
  for (const auto& r : rep.records) {
    if (r.kind != Record::Kind::Fpdu || !r.ddp || r.ddp->opcode != 7) continue;
    ++terms;
    EXPECT_TRUE(r.siw_terminate_quirk);
    EXPECT_NE(r.summary.find("DDP tagged: invalid STag"), std::string::npos) << r.summary;
  }
  EXPECT_EQ(terms, 1);
}

TEST(SiwCorpus, NegotiatedParametersAreReadFromTheFrames) {
  auto cap = read_capture(std::string(IWARP_SOURCE_DIR) + "/pcap_traces/siw/siw_p2p.pcap");
  ASSERT_TRUE(cap);
  auto rep = decode_capture(*cap);
  ASSERT_EQ(rep.iwarp_flows(), 1u);
  const auto& p = *rep.flows[0].params;
  EXPECT_TRUE(p.peer_to_peer);
  EXPECT_EQ(p.rtr, mpa::RtrType::Write);
  EXPECT_EQ(p.initiator_ird, 1);
  EXPECT_EQ(p.responder_ord, 1);
  EXPECT_FALSE(p.crc);

  auto cap2 = read_capture(std::string(IWARP_SOURCE_DIR) +
                           "/pcap_traces/siw/hostpeer_eth0_siw_client.pcap");
  ASSERT_TRUE(cap2);
  auto rep2 = decode_capture(*cap2);
  ASSERT_EQ(rep2.iwarp_flows(), 1u);
  EXPECT_FALSE(rep2.flows[0].request->crc);
  EXPECT_TRUE(rep2.flows[0].reply->crc);
  EXPECT_TRUE(rep2.flows[0].params->crc);  // RFC 5044 §7.1: either side's C turns CRC on
  EXPECT_EQ(rep2.flows[0].crc_good, 35u);
}

TEST(SiwCorpus, RejectedRetryAndCutShortExchangesAreNotedNotViolations) {
  auto cap =
      read_capture(std::string(IWARP_SOURCE_DIR) + "/pcap_traces/siw/siw_accept_race_stall.pcap");
  ASSERT_TRUE(cap);
  auto rep = decode_capture(*cap);
  EXPECT_EQ(rep.violations(), 0u);
  bool rejected = false;
  for (const auto& f : rep.flows)
    for (const auto& n : f.notes) rejected |= n.find("rejected") != std::string::npos;
  EXPECT_TRUE(rejected);
}

}  // namespace
}  // namespace iwarp::trace
