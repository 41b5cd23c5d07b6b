// Two separate rnic processes over 127.0.0.1: every operation at every size across the MPA
// configurations, each deliberate protection error with the Terminate it must put on the wire
// (checked in the recorded captures, by our decoder and by tshark), a process killed
// mid-transfer, and MPA peers that never speak.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>

#include "process_support.hpp"
#include "test_support.hpp"
#include "trace/trace_decoder.hpp"
#include "tshark_support.hpp"

using namespace iwarp;
using namespace std::chrono_literals;
using test::Process;

namespace {

// rnic decode of a capture, FPDUs by opcode name, with every violation and CRC result counted.
trace::DecodeReport decode(const std::string& file) {
  auto cap = trace::read_capture(file);
  EXPECT_TRUE(cap) << (cap ? "" : cap.error());
  if (!cap) return {};
  return trace::decode_capture(*cap);
}

struct Config {
  const char* name;
  std::vector<std::string> args;
  bool crc, markers;
};

const Config kConfigs[] = {
    {"v1_plain", {"--mpa-rev", "1", "--crc", "off"}, false, false},
    {"v1_crc", {"--mpa-rev", "1", "--crc", "required"}, true, false},
    {"v1_markers", {"--mpa-rev", "1", "--crc", "off", "--markers", "required"}, false, true},
    {"v1_crc_markers",
     {"--mpa-rev", "1", "--crc", "required", "--markers", "required"},
     true,
     true},
    {"v2_plain", {"--mpa-rev", "2", "--crc", "off"}, false, false},
    {"v2_crc", {"--mpa-rev", "2", "--crc", "required"}, true, false},
    {"v2_markers", {"--mpa-rev", "2", "--markers", "required"}, false, true},
    {"v2_crc_markers_p2p",
     {"--mpa-rev", "2", "--crc", "required", "--markers", "required", "--p2p", "--rtr", "read"},
     true,
     true},
};

class EveryOperation : public ::testing::TestWithParam<Config> {};

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

// Issue 3, done-when 1: Send, Write, Read, Write with Immediate and atomics at 0, 1, 4095,
// 4096, 65537 octets, 1 MiB and 16 MiB, data verified on both sides, in every configuration.
TEST_P(EveryOperation, VerifiedBetweenTwoProcesses) {
  const Config& c = GetParam();
  const std::string tag = std::string("ops_") + c.name;
  const auto pf = test::port_file(tag);
  test::TempFile spcap(tag + "_server"), cpcap(tag + "_client");
  Process server(
      cat({"xfer", "--server", "--port", "0", "--port-file", pf, "--pcap", spcap.path}, c.args),
      tag + "_server");
  const auto port = test::read_port(pf);
  ASSERT_FALSE(port.empty()) << server.output();
  Process client(
      cat({"xfer", "--client", "127.0.0.1", "--port", port, "--pcap", cpcap.path, "--verbose"},
          c.args),
      tag + "_client");
  EXPECT_EQ(client.wait(120s), 0) << client.output();
  EXPECT_EQ(server.wait(30s), 0) << server.output();
  EXPECT_NE(client.output().find("30 operations verified, 0 failed"), std::string::npos)
      << client.output();
  EXPECT_NE(server.output().find("server: all checks passed"), std::string::npos);
  EXPECT_NE(server.output().find("guard pages intact"), std::string::npos);

  // Both sides' captures decode cleanly, with the negotiated framing.
  for (const auto* file : {&spcap.path, &cpcap.path}) {
    auto rep = decode(*file);
    ASSERT_EQ(rep.flows.size(), 1u) << *file;
    const auto& f = rep.flows[0];
    EXPECT_TRUE(f.iwarp);
    EXPECT_EQ(f.violations, 0u) << *file;
    ASSERT_TRUE(f.params);
    EXPECT_EQ(f.params->crc, c.crc);
    EXPECT_EQ(f.params->markers_to_responder, c.markers);
    EXPECT_EQ(f.crc_bad, 0u);
    EXPECT_EQ(f.crc_good, c.crc ? f.fpdus : 0u);
    if (c.markers) {
      EXPECT_GT(f.markers, 0u);
    }
    for (const char* op : {"RDMA Write", "RDMA Read Request", "RDMA Read Response", "Send",
                           "Immediate Data", "Atomic Request", "Atomic Response"})
      EXPECT_GT(f.opcode_counts.count(op) ? f.opcode_counts.at(op) : 0, 0u) << op;
  }
}

INSTANTIATE_TEST_SUITE_P(Rnic, EveryOperation, ::testing::ValuesIn(kConfigs),
                         [](const auto& p) { return std::string(p.param.name); });

// tshark reads a live capture of ours: right opcodes, good CRCs, no malformed packets.
TEST(RnicProcesses, LiveCaptureOpensInTshark) {
  ASSERT_TSHARK();
  test::TempFile pcap("live_tshark");
  // ping has no --port-file: ask the kernel for a free port first.
  const std::string port = test::free_port();
  ASSERT_FALSE(port.empty());
  Process srv({"ping", "--server", "--bind", "127.0.0.1", "--port", port, "--size", "70000",
               "--crc", "required"},
              "tshark_server2");
  ASSERT_TRUE(srv.wait_for_output("listening")) << srv.output();
  Process cli({"ping", "--client", "127.0.0.1", "--port", port, "--count", "3", "--size", "70000",
               "--crc", "required", "--pcap", pcap.path},
              "tshark_client");
  ASSERT_EQ(cli.wait(60s), 0) << cli.output();
  EXPECT_EQ(srv.wait(30s), 0) << srv.output();
  auto ours = decode(pcap.path);
  auto theirs = test::tshark_fpdus(pcap.path);
  ASSERT_EQ(ours.flows.size(), 1u);
  EXPECT_EQ(theirs.opcode_counts, ours.flows[0].opcode_counts);
  std::vector<test::FpduKey> our_keys;
  for (const auto& r : ours.records)
    if (r.kind == trace::Record::Kind::Fpdu && r.ddp) our_keys.push_back(test::key_of(r));
  EXPECT_EQ(theirs.keys, our_keys);
  // Every FPDU's CRC is good in tshark's eyes.
  auto detail = test::run_command(test::kTshark + " -r '" + pcap.path + "' -V");
  std::size_t good = 0;
  for (std::size_t at = 0; (at = detail.find("(Good CRC32)", at)) != std::string::npos; ++at)
    ++good;
  EXPECT_EQ(good, ours.flows[0].fpdus);
  EXPECT_EQ(detail.find("Bad CRC32"), std::string::npos);
  auto bad = test::run_command(test::kTshark + " -r '" + pcap.path +
                               "' -Y '_ws.malformed || _ws.expert.severity >= \"error\"'");
  EXPECT_TRUE(bad.empty()) << bad;
}

// Issue 3, done-when 2: each protection error, on the wire and in both sides' completions.
struct Fault {
  const char* name;
  const char* terminate;  // what the detecting side's decoder shows
  const char* words;      // the error's name in our reason text
  std::vector<std::string> server_args, client_args;
};

const Fault kFaults[] = {
    {"write-no-remote-write", "layer 1 etype 1 code 0x00", "DDP tagged: invalid STag", {}, {}},
    {"write-out-of-bounds", "layer 1 etype 1 code 0x01", "base or bounds violation", {}, {}},
    {"unknown-stag", "layer 1 etype 1 code 0x00", "DDP tagged: invalid STag", {}, {}},
    {"stale-key", "layer 1 etype 1 code 0x00", "DDP tagged: invalid STag", {}, {}},
    {"read-beyond-ird",
     "layer 0 etype 2 code 0x07",
     "catastrophic error, localized to RDMAP stream",
     {"--ird", "2"},
     {"--unsafe-ignore-ord"}},
    {"send-no-recv", "layer 1 etype 2 code 0x02", "no buffer available", {}, {}},
    {"send-too-long", "layer 1 etype 2 code 0x05", "message too long", {}, {}},
    {"invalidated-stag", "layer 1 etype 1 code 0x00", "DDP tagged: invalid STag", {}, {}},
    {"pd-mismatch", "layer 1 etype 1 code 0x02", "STag not associated", {}, {}},
};

class ProtectionError : public ::testing::TestWithParam<Fault> {};

TEST_P(ProtectionError, TerminateOnTheWireAndFlushedWorkRequests) {
  const Fault& f = GetParam();
  const std::string tag = std::string("fault_") + f.name;
  const auto pf = test::port_file(tag);
  test::TempFile spcap(tag + "_server"), cpcap(tag + "_client");
  Process server(cat({"xfer", "--server", "--port", "0", "--port-file", pf, "--sizes", "65536",
                      "--crc", "required", "--pcap", spcap.path},
                     f.server_args),
                 tag + "_server");
  const auto port = test::read_port(pf);
  ASSERT_FALSE(port.empty()) << server.output();
  Process client(cat({"xfer", "--client", "127.0.0.1", "--port", port, "--sizes", "65536", "--crc",
                      "required", "--fault", f.name, "--pcap", cpcap.path},
                     f.client_args),
                 tag + "_client");
  EXPECT_EQ(client.wait(30s), 0) << client.output();
  EXPECT_EQ(server.wait(30s), 0) << server.output();
  const auto so = server.output(), co = client.output();
  // The server detected it, sent the Terminate and went to ERROR; the client received it.
  EXPECT_NE(so.find("server: QP ERROR: sent Terminate"), std::string::npos) << so;
  EXPECT_NE(so.find(f.words), std::string::npos) << so;
  EXPECT_NE(co.find("client: QP ERROR: peer sent Terminate"), std::string::npos) << co;
  EXPECT_NE(co.find(f.words), std::string::npos) << co;
  EXPECT_NE(so.find("guard pages intact"), std::string::npos) << so;
  EXPECT_EQ(so.find("CHANGED"), std::string::npos) << so;
  // No work request completes successfully after the error was seen: what was still queued is
  // flushed, and a Read the Terminate answers reports the remote error.
  if (std::string(f.name) == "read-beyond-ird") {
    EXPECT_NE(co.find("remote operation error (RDMA_READ) Terminate 0/2/0x07"), std::string::npos)
        << co;
    EXPECT_NE(co.find("Work Request Flushed Error (RDMA_READ)"), std::string::npos) << co;
  }
  if (std::string(f.name) == "send-too-long") {
    EXPECT_NE(so.find("receive WR completion local length error"), std::string::npos) << so;
  }
  if (std::string(f.name) == "invalidated-stag") {
    EXPECT_NE(so.find("(Send with Invalidate: STag"), std::string::npos) << so;
  }

  // On the wire, in both sides' captures: exactly one Terminate, from the responder, with the
  // RFC's layer/type/code, a good CRC, and nothing else after it from that side.
  for (const auto* file : {&spcap.path, &cpcap.path}) {
    auto rep = decode(*file);
    ASSERT_EQ(rep.flows.size(), 1u);
    EXPECT_EQ(rep.flows[0].violations, 0u) << *file;
    int terminates = 0;
    bool after = false;
    for (const auto& r : rep.records) {
      if (r.kind != trace::Record::Kind::Fpdu || r.dir != mpa::Direction::FromResponder) continue;
      if (after) ADD_FAILURE() << "FPDU after the Terminate: " << r.summary;
      if (r.ddp && r.ddp->opcode == 7) {
        ++terminates;
        after = true;
        EXPECT_NE(r.summary.find(f.terminate), std::string::npos) << r.summary;
        EXPECT_EQ(r.crc, mpa::CrcStatus::Good);
      }
    }
    EXPECT_EQ(terminates, 1) << *file;
  }
}

// tshark agrees on the Terminate's control word (client capture of one fault per layer).
TEST_P(ProtectionError, TsharkReadsTheTerminate) {
  ASSERT_TSHARK();
  const Fault& f = GetParam();
  const std::string tag = std::string("tfault_") + f.name;
  const auto pf = test::port_file(tag);
  test::TempFile cpcap(tag + "_client");
  Process server(cat({"xfer", "--server", "--port", "0", "--port-file", pf, "--sizes", "65536"},
                     f.server_args),
                 tag + "_server");
  const auto port = test::read_port(pf);
  ASSERT_FALSE(port.empty()) << server.output();
  Process client(cat({"xfer", "--client", "127.0.0.1", "--port", port, "--sizes", "65536",
                      "--fault", f.name, "--pcap", cpcap.path},
                     f.client_args),
                 tag + "_client");
  ASSERT_EQ(client.wait(30s), 0) << client.output();
  server.wait(30s);
  unsigned layer = 0, etype = 0, code = 0;
  ASSERT_EQ(std::sscanf(f.terminate, "layer %u etype %u code %x", &layer, &etype, &code), 3);
  auto out = test::run_command(
      test::kTshark + " -r '" + cpcap.path +
      "' -Y 'iwarp_rdma.opcode == 7' -T fields -E separator=, -e iwarp_rdma.term_layer "
      "-e iwarp_rdma.term_etype_rdma -e iwarp_rdma.term_etype_ddp -e iwarp_rdma.term_errcode_rdma "
      "-e iwarp_rdma.term_errcode_ddp_tagged -e iwarp_rdma.term_errcode_ddp_untagged "
      "-e iwarp_rdma.term_hdrct");
  auto v = test::split(out.substr(0, out.find('\n')), ',');
  v.resize(7);
  EXPECT_EQ(test::parse_num(v[0]), layer) << out;
  EXPECT_EQ(test::parse_num(v[1].empty() ? v[2] : v[1]), etype) << out;
  const std::string& c = !v[3].empty() ? v[3] : !v[4].empty() ? v[4] : v[5];
  EXPECT_EQ(test::parse_num(c), code) << out;
  // DDP-layer errors carry the failing DDP header: M and D set. (tshark 4.0 gives the D and R
  // bits no filter names of their own, so read its detail view.)
  if (layer == 1) {
    auto detail = test::run_command(test::kTshark + " -r '" + cpcap.path +
                                    "' -Y 'iwarp_rdma.opcode == 7' -V");
    EXPECT_NE(detail.find("M bit: Set"), std::string::npos) << detail;
    EXPECT_NE(detail.find("D bit: Set"), std::string::npos) << detail;
    EXPECT_NE(detail.find("Terminated DDP Header"), std::string::npos) << detail;
  }
}

INSTANTIATE_TEST_SUITE_P(Rnic, ProtectionError, ::testing::ValuesIn(kFaults), [](const auto& p) {
  std::string n = p.param.name;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
});

// Issue 3, done-when 3: the server is killed mid-transfer; the client reports the disconnect
// and flushes every outstanding work request; nothing hangs.
TEST(RnicProcesses, KilledPeerMidTransfer) {
  const auto pf = test::port_file("kill");
  Process server({"xfer", "--server", "--port", "0", "--port-file", pf, "--sizes", "1048576"},
                 "kill_server");
  const auto port = test::read_port(pf);
  ASSERT_FALSE(port.empty()) << server.output();
  Process client({"xfer", "--client", "127.0.0.1", "--port", port, "--sizes", "1048576", "--ops",
                  "write", "--loop", "100000"},
                 "kill_client");
  ASSERT_TRUE(client.wait_for_output("write loop running")) << client.output();
  server.kill(SIGKILL);
  EXPECT_EQ(client.wait(20s), 3) << client.output();
  EXPECT_NE(client.output().find("outstanding WRs flushed"), std::string::npos) << client.output();
}

TEST(RnicProcesses, KilledClientMidTransfer) {
  const auto pf = test::port_file("killc");
  Process server({"xfer", "--server", "--port", "0", "--port-file", pf, "--sizes", "1048576"},
                 "killc_server");
  const auto port = test::read_port(pf);
  ASSERT_FALSE(port.empty()) << server.output();
  Process client({"xfer", "--client", "127.0.0.1", "--port", port, "--sizes", "1048576", "--ops",
                  "write", "--loop", "100000"},
                 "killc_client");
  ASSERT_TRUE(client.wait_for_output("write loop running")) << client.output();
  client.kill(SIGKILL);
  // The server was waiting for a command: its receive WR is flushed and it says why.
  EXPECT_EQ(server.wait(20s), 1) << server.output();
  EXPECT_NE(server.output().find("Work Request Flushed Error"), std::string::npos)
      << server.output();
  EXPECT_NE(server.output().find("the peer closed the connection"), std::string::npos)
      << server.output();
}

// An MPA peer that connects and sends nothing is timed out (RFC 5044 §7.1 leaves the value to
// the implementation; siw uses 5 s; --timeout caps ours).
TEST(RnicProcesses, SilentInitiatorIsTimedOut) {
  const auto pf = test::port_file("silent");
  Process server({"xfer", "--server", "--port", "0", "--port-file", pf, "--timeout", "1000"},
                 "silent_server");
  const auto port = test::read_port(pf);
  ASSERT_FALSE(port.empty());
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(port)));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{5, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char b;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(::recv(s, &b, 1, 0), 0) << "the server should close the silent connection";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s);
  ::close(s);
  EXPECT_EQ(server.wait(10s), 1);
  EXPECT_NE(server.output().find("no MPA Request arrived within 1000 ms"), std::string::npos)
      << server.output();
}

TEST(RnicProcesses, SilentResponderIsTimedOut) {
  int l = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(l, 1), 0);
  socklen_t len = sizeof a;
  ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  Process client({"xfer", "--client", "127.0.0.1", "--port", std::to_string(ntohs(a.sin_port)),
                  "--timeout", "1000"},
                 "silent_client");
  EXPECT_EQ(client.wait(10s), 1);
  EXPECT_NE(client.output().find("no MPA Reply arrived within 1000 ms"), std::string::npos)
      << client.output();
  ::close(l);
}

// Issue 3, done-when 4: the README's main demo runs both processes to the end.
TEST(RnicProcesses, DemoRunsBothSides) {
  test::TempFile dummy("demo");
  const std::string dir = dummy.path + ".d";
  Process demo({"demo", "--no-color", "--crc", "required", "--pcap-dir", dir}, "demo");
  ASSERT_EQ(demo.wait(60s), 0) << demo.output();
  const auto out = demo.output();
  for (const char* line :
       {"1. receive completion: RECV success, 16 octets: \"hello over iWARP\"",
        "3. RDMA Read of 64 octets: RDMA_READ success, 64 octets: \"data the server put in its "
        "buffer\"",
        "the buffer now reads \"written by the client with RDMA Write\" and the counter is 42",
        "the counter was 41", "invalidated STag", "peer sent Terminate [DDP tagged: invalid STag]",
        "the invalidated buffer is untouched: yes", "rnic demo: both sides finished as expected"})
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  for (const char* side : {"client", "server"}) {
    auto rep = decode(dir + "/demo-" + side + ".pcap");
    ASSERT_EQ(rep.flows.size(), 1u);
    EXPECT_EQ(rep.flows[0].violations, 0u);
    EXPECT_EQ(rep.flows[0].crc_good, rep.flows[0].fpdus);
  }
  std::filesystem::remove_all(dir);
}

// A bad file or flag: one line saying what and where, exit 2, nothing attempted.
TEST(RnicProcesses, BadPcapPathIsOneLine) {
  Process p({"ping", "--client", "127.0.0.1", "--pcap", "/nonexistent-dir/x.pcap"}, "badpcap");
  EXPECT_EQ(p.wait(10s), 2);
  EXPECT_NE(p.output().find(
                "--pcap: cannot write capture /nonexistent-dir/x.pcap: No such file or directory"),
            std::string::npos)
      << p.output();
}

TEST(RnicProcesses, UnreachableServerSaysWhy) {
  const std::string port = test::free_port();
  ASSERT_FALSE(port.empty());
  Process p({"ping", "--client", "127.0.0.1", "--port", port}, "unreach");
  EXPECT_EQ(p.wait(20s), 1);
  EXPECT_NE(p.output().find("RDMA_CM_EVENT_UNREACHABLE"), std::string::npos) << p.output();
  EXPECT_NE(p.output().find("Connection refused"), std::string::npos) << p.output();
}

// --first-fpdu-delay (for siw's accept race): the connection is usable at once, and the first
// FPDU leaves at least the delay after the MPA Reply (the capture's timestamps are real).
TEST(RnicProcesses, FirstFpduDelayHoldsOnlyTransmission) {
  // With --p2p the first FPDU is the RTR: it waits too.
  for (const std::string mode : {"", "--p2p"}) {
    SCOPED_TRACE(mode);
    const auto pf = test::port_file("delay");
    test::TempFile pcap("delay_client");
    std::vector<std::string> common{"--sizes", "4096", "--ops", "send,write,read"};
    if (!mode.empty()) common.push_back(mode);
    Process server(cat({"xfer", "--server", "--port", "0", "--port-file", pf}, common),
                   "delay_server");
    const auto port = test::read_port(pf);
    ASSERT_FALSE(port.empty());
    Process client(cat({"xfer", "--client", "127.0.0.1", "--port", port, "--first-fpdu-delay",
                        "150", "--pcap", pcap.path},
                       common),
                   "delay_client");
    ASSERT_EQ(client.wait(30s), 0) << client.output();
    EXPECT_EQ(server.wait(30s), 0) << server.output();
    auto rep = decode(pcap.path);
    std::uint64_t reply_us = 0, first_fpdu_us = 0;
    for (const auto& r : rep.records) {
      if (r.kind == trace::Record::Kind::MpaFrame && r.dir == mpa::Direction::FromResponder)
        reply_us = r.time_us;
      if (r.kind == trace::Record::Kind::Fpdu && r.dir == mpa::Direction::FromInitiator &&
          !first_fpdu_us)
        first_fpdu_us = r.time_us;
    }
    ASSERT_GT(reply_us, 0u);
    ASSERT_GT(first_fpdu_us, 0u);
    EXPECT_GE(first_fpdu_us - reply_us, 150'000u);
  }
}

// rnic ping --fault: a Write to an STag the server never advertised ends in its Terminate.
TEST(RnicProcesses, PingFaultUnknownStag) {
  const std::string port = test::free_port();
  ASSERT_FALSE(port.empty());
  Process server({"ping", "--server", "--bind", "127.0.0.1", "--port", port}, "pfault_server");
  ASSERT_TRUE(server.wait_for_output("listening")) << server.output();
  Process client({"ping", "--client", "127.0.0.1", "--port", port, "--fault", "unknown-stag"},
                 "pfault_client");
  EXPECT_EQ(client.wait(20s), 0) << client.output();
  EXPECT_NE(client.output().find("QP ERROR: peer sent Terminate [DDP tagged: invalid STag]"),
            std::string::npos)
      << client.output();
  server.wait(20s);
  EXPECT_NE(server.output().find("STag 0x00dead00 is not registered"), std::string::npos)
      << server.output();
}

// rnic cmatose (librdmacm's ucmatose exchange): messages far beyond rping's 64 KiB, both ways.
TEST(RnicProcesses, CmatoseLargeSendsBothWays) {
  const std::string port = test::free_port();
  ASSERT_FALSE(port.empty());
  Process server({"cmatose", "--server", "--bind", "127.0.0.1", "--port", port, "--size", "3000000",
                  "--count", "4", "--p2p", "--crc", "required"},
                 "cmatose_server");
  ASSERT_TRUE(server.wait_for_output("listening")) << server.output();
  Process client({"cmatose", "--client", "127.0.0.1", "--port", port, "--size", "3000000",
                  "--count", "4", "--p2p", "--crc", "required"},
                 "cmatose_client");
  EXPECT_EQ(client.wait(60s), 0) << client.output();
  EXPECT_EQ(server.wait(60s), 0) << server.output();
  EXPECT_NE(client.output().find("received and sent 4 messages of 3000000 octets"),
            std::string::npos)
      << client.output();
  EXPECT_NE(server.output().find("sent and received 4 messages of 3000000 octets"),
            std::string::npos)
      << server.output();
}
