// PcapWriter: the frames it writes are checked field by field (RFC 791 / RFC 793 headers,
// RFC 1071 checksums, sequence and acknowledgement numbers), and tshark must find nothing
// to complain about.
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "trace/pcap_writer.hpp"

namespace iwarp::trace {
namespace {

using TempPcap = test::TempFile;

Bytes random_bytes(std::mt19937& gen, std::size_t n) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::uint8_t>(gen());
  return b;
}

struct RawFrame {
  std::uint64_t time_us = 0;
  std::uint32_t caplen = 0, len = 0;
  Bytes data;
};

std::vector<RawFrame> read_raw(const std::string& path, int* dlt = nullptr) {
  std::vector<RawFrame> out;
  char err[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_open_offline(path.c_str(), err);
  EXPECT_NE(p, nullptr) << err;
  if (!p) return out;
  if (dlt) *dlt = pcap_datalink(p);
  pcap_pkthdr* h = nullptr;
  const u_char* d = nullptr;
  while (pcap_next_ex(p, &h, &d) == 1) {
    RawFrame f;
    f.time_us = static_cast<std::uint64_t>(h->ts.tv_sec) * 1'000'000 +
                static_cast<std::uint64_t>(h->ts.tv_usec);
    f.caplen = h->caplen;
    f.len = h->len;
    f.data.assign(d, d + h->caplen);
    out.push_back(std::move(f));
  }
  pcap_close(p);
  return out;
}

// The fields of one Ethernet/IPv4/TCP frame, decoded independently of the reader under test.
struct Decoded {
  bool ok = false;
  std::array<std::uint8_t, 6> dst_mac{}, src_mac{};
  std::uint16_t ethertype = 0;
  std::uint8_t vihl = 0, ttl = 0, proto = 0;
  std::uint16_t total = 0, id = 0, frag = 0;
  bool ip_checksum_ok = false, tcp_checksum_ok = false;
  std::array<std::uint8_t, 4> src{}, dst{};
  std::uint16_t sport = 0, dport = 0, window = 0, urgent = 0;
  std::uint32_t seq = 0, ack = 0;
  std::size_t hlen = 0;
  std::uint8_t flags = 0;
  int mss = -1;  // -1: no MSS option
  Bytes payload;
};

Decoded decode(const Bytes& f) {
  Decoded d;
  if (f.size() < 54) return d;
  std::copy(f.begin(), f.begin() + 6, d.dst_mac.begin());
  std::copy(f.begin() + 6, f.begin() + 12, d.src_mac.begin());
  d.ethertype = load_be16(&f[12]);
  const std::uint8_t* ip = &f[14];
  d.vihl = ip[0];
  d.total = load_be16(ip + 2);
  d.id = load_be16(ip + 4);
  d.frag = load_be16(ip + 6);
  d.ttl = ip[8];
  d.proto = ip[9];
  std::copy(ip + 12, ip + 16, d.src.begin());
  std::copy(ip + 16, ip + 20, d.dst.begin());
  if (f.size() != 14u + d.total) return d;
  d.ip_checksum_ok = internet_checksum(ByteSpan(ip, 20)) == 0;
  const std::uint8_t* tcp = ip + 20;
  const std::size_t tcp_len = d.total - 20u;
  Bytes pseudo(ip + 12, ip + 20);
  pseudo.push_back(0);
  pseudo.push_back(6);
  pseudo.push_back(static_cast<std::uint8_t>(tcp_len >> 8));
  pseudo.push_back(static_cast<std::uint8_t>(tcp_len));
  Bytes whole = pseudo;
  whole.insert(whole.end(), tcp, tcp + tcp_len);
  d.tcp_checksum_ok = internet_checksum(whole) == 0;
  d.sport = load_be16(tcp);
  d.dport = load_be16(tcp + 2);
  d.seq = load_be32(tcp + 4);
  d.ack = load_be32(tcp + 8);
  d.hlen = static_cast<std::size_t>(tcp[12] >> 4) * 4;
  d.flags = tcp[13];
  d.window = load_be16(tcp + 14);
  d.urgent = load_be16(tcp + 18);
  if (d.hlen < 20 || d.hlen > tcp_len) return d;
  for (std::size_t i = 20; i < d.hlen;) {
    const std::uint8_t kind = tcp[i];
    if (kind == 0) break;
    if (kind == 1) {
      ++i;
      continue;
    }
    if (i + 1 >= d.hlen || tcp[i + 1] < 2) return d;
    if (kind == 2 && tcp[i + 1] == 4 && i + 4 <= d.hlen) d.mss = load_be16(tcp + i + 2);
    i += tcp[i + 1];
  }
  d.payload.assign(tcp + d.hlen, tcp + tcp_len);
  d.ok = true;
  return d;
}

constexpr std::uint8_t FIN = 0x01, SYN = 0x02, PSH = 0x08, ACK = 0x10;

// Runs a shell command; returns its exit status and standard output.
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, out};
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST(PcapWriterChecksum, Rfc1071Example) {
  // RFC 1071 §3 example: the words 0001 f203 f4f5 f6f7 sum to 0xddf2 after folding.
  const Bytes b = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(internet_checksum(b), static_cast<std::uint16_t>(~0xddf2));
  EXPECT_EQ(internet_checksum({}), 0xffff);
  // An odd trailing octet is padded with zero on the right.
  EXPECT_EQ(internet_checksum(Bytes{0x12}), static_cast<std::uint16_t>(~0x1200));
  EXPECT_EQ(internet_checksum(Bytes{0x12, 0x34, 0x56}),
            static_cast<std::uint16_t>(~(0x1234 + 0x5600)));
}

TEST(PcapWriterChecksum, PartialSumAndCarries) {
  std::mt19937 gen(11);
  for (int round = 0; round < 50; ++round) {
    Bytes b = random_bytes(gen, 2 * (gen() % 40000) + 2);
    // Starting from the sum of a prefix equals checksumming prefix + rest.
    const std::size_t cut = 2 * (gen() % (b.size() / 2));
    std::uint32_t prefix = 0;
    for (std::size_t i = 0; i < cut; i += 2) prefix += load_be16(&b[i]);
    EXPECT_EQ(internet_checksum(ByteSpan(b).subspan(cut), prefix), internet_checksum(b));
    // Storing the checksum in the data makes the whole verify to zero (RFC 1071 §1).
    b[0] = b[1] = 0;
    const std::uint16_t c = internet_checksum(b);
    store_be16(b.data(), c);
    EXPECT_EQ(internet_checksum(b), 0);
  }
  // Lots of 0xffff words: the carries must fold back in, however many there are.
  const Bytes ff(200000, 0xff);
  EXPECT_EQ(internet_checksum(ff), 0);
}

TEST(PcapWriterOpen, ErrorNamesTheFileOnce) {
  const std::string path = "/nonexistent-dir-for-pcap-writer-test/x.pcap";
  auto w = PcapWriter::open(path);
  ASSERT_FALSE(w.has_value());
  const std::string& e = w.error();
  EXPECT_TRUE(e.starts_with("cannot write capture " + path + ": ")) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_EQ(e.find(path), e.rfind(path)) << "path repeated: " << e;
  EXPECT_GT(e.size(), ("cannot write capture " + path + ": ").size()) << e;
}

// Every field of a short conversation: handshake, segmentation at the MSS across the 2^32
// sequence wrap, ACKs, timestamps and the FIN exchange.
TEST(PcapWriterFrames, EveryFieldOfAConversation) {
  const TempPcap path_file("fields");
  const std::string& path = path_file.path;
  PcapWriterOptions o;
  o.client = {{192, 168, 1, 10}, 40001};
  o.server = {{192, 168, 1, 20}, 7174};
  o.mss = 100;
  o.client_isn = 0xffffff9c;  // client data wraps: ISN + 1 + 250 > 2^32
  o.server_isn = 77;
  o.start_time_us = 1'700'000'000'999'950ull;  // crosses a second boundary
  o.step_us = 30;
  std::mt19937 gen(5);
  const Bytes c1 = random_bytes(gen, 250), s1 = random_bytes(gen, 1);
  {
    auto w = PcapWriter::open(path, o);
    ASSERT_TRUE(w.has_value()) << w.error();
    EXPECT_EQ((*w)->frames(), 3u);
    (*w)->write(Side::Client, c1);  // 100 + 100 + 50, each ACKed
    EXPECT_EQ((*w)->frames(), 9u);
    (*w)->write(Side::Server, s1);
    (*w)->write(Side::Client, {});  // nothing
    EXPECT_EQ((*w)->frames(), 11u);
    (*w)->close(Side::Server);
    EXPECT_EQ((*w)->frames(), 14u);
  }
  int dlt = -1;
  const auto raw = read_raw(path, &dlt);
  EXPECT_EQ(dlt, DLT_EN10MB);
  ASSERT_EQ(raw.size(), 14u);

  const std::uint32_t C = o.client_isn, S = o.server_isn;
  struct Want {
    bool from_client;
    std::uint8_t flags;
    std::uint32_t seq, ack;
    std::size_t len;
  };
  const std::vector<Want> want = {
      {true, SYN, C, 0, 0},
      {false, SYN | ACK, S, C + 1, 0},
      {true, ACK, C + 1, S + 1, 0},
      {true, PSH | ACK, C + 1, S + 1, 100},
      {false, ACK, S + 1, C + 101, 0},
      {true, PSH | ACK, C + 101, S + 1, 100},
      {false, ACK, S + 1, C + 201, 0},
      {true, PSH | ACK, C + 201, S + 1, 50},
      {false, ACK, S + 1, C + 251, 0},
      {false, PSH | ACK, S + 1, C + 251, 1},
      {true, ACK, C + 251, S + 2, 0},
      {false, FIN | ACK, S + 2, C + 251, 0},
      {true, FIN | ACK, C + 251, S + 3, 0},
      {false, ACK, S + 3, C + 252, 0},
  };
  std::uint16_t last_id[2] = {0, 0};
  bool seen[2] = {false, false};
  Bytes got_c, got_s;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    SCOPED_TRACE("frame " + std::to_string(i + 1));
    const RawFrame& rf = raw[i];
    EXPECT_EQ(rf.caplen, rf.len);
    EXPECT_EQ(rf.time_us, o.start_time_us + i * o.step_us);
    const Decoded d = decode(rf.data);
    ASSERT_TRUE(d.ok);
    const Want& w = want[i];
    // Ethernet: unicast (I/G bit clear), distinct MACs, IPv4 EtherType.
    EXPECT_EQ(d.src_mac[0] & 1, 0);
    EXPECT_EQ(d.dst_mac[0] & 1, 0);
    EXPECT_NE(d.src_mac, d.dst_mac);
    EXPECT_EQ(d.ethertype, 0x0800);
    // IPv4: version 4 IHL 5, DF, TTL 64, TCP, valid checksum, per-sender incrementing id.
    EXPECT_EQ(d.vihl, 0x45);
    EXPECT_EQ(d.frag, 0x4000);
    EXPECT_EQ(d.ttl, 64);
    EXPECT_EQ(d.proto, 6);
    EXPECT_TRUE(d.ip_checksum_ok);
    const int side = w.from_client ? 0 : 1;
    if (seen[side]) {
      EXPECT_EQ(d.id, static_cast<std::uint16_t>(last_id[side] + 1));
    }
    seen[side] = true;
    last_id[side] = d.id;
    EXPECT_EQ(d.src, w.from_client ? o.client.addr : o.server.addr);
    EXPECT_EQ(d.dst, w.from_client ? o.server.addr : o.client.addr);
    // TCP.
    EXPECT_EQ(d.sport, w.from_client ? o.client.port : o.server.port);
    EXPECT_EQ(d.dport, w.from_client ? o.server.port : o.client.port);
    EXPECT_EQ(d.flags, w.flags);
    EXPECT_EQ(d.seq, w.seq);
    EXPECT_EQ(d.ack, w.ack);
    EXPECT_EQ(d.window, 65535);
    EXPECT_EQ(d.urgent, 0);
    EXPECT_TRUE(d.tcp_checksum_ok);
    EXPECT_EQ(d.payload.size(), w.len);
    if (w.flags & SYN) {
      EXPECT_EQ(d.hlen, 24u);
      EXPECT_EQ(d.mss, 100);
    } else {
      EXPECT_EQ(d.hlen, 20u);
      EXPECT_EQ(d.mss, -1);
    }
    (w.from_client ? got_c : got_s)
        .insert((w.from_client ? got_c : got_s).end(), d.payload.begin(), d.payload.end());
    // MACs stay tied to the sides.
    if (i > 0) {
      const Decoded first = decode(raw[0].data);
      EXPECT_EQ(d.src_mac, w.from_client ? first.src_mac : first.dst_mac);
    }
  }
  EXPECT_EQ(got_c, c1);
  EXPECT_EQ(got_s, s1);
}

TEST(PcapWriterFrames, NoHandshakeStartsWithDataAtIsnPlusOne) {
  const TempPcap path_file("nohs");
  const std::string& path = path_file.path;
  PcapWriterOptions o;
  o.handshake = false;
  o.client_isn = 10;
  o.server_isn = 20;
  {
    auto w = PcapWriter::open(path, o);
    ASSERT_TRUE(w.has_value()) << w.error();
    EXPECT_EQ((*w)->frames(), 0u);
    (*w)->write(Side::Server, Bytes(5, 0xab));
  }  // destructor flushes without a FIN exchange
  const auto raw = read_raw(path);
  ASSERT_EQ(raw.size(), 2u);
  const Decoded d0 = decode(raw[0].data), d1 = decode(raw[1].data);
  EXPECT_EQ(d0.flags, PSH | ACK);
  EXPECT_EQ(d0.seq, 21u);
  EXPECT_EQ(d0.ack, 11u);
  EXPECT_EQ(d0.sport, o.server.port);
  EXPECT_EQ(d1.flags, ACK);
  EXPECT_EQ(d1.ack, 26u);
  EXPECT_EQ(raw[0].time_us, o.start_time_us);
}

TEST(PcapWriterFrames, ZeroLengthWriteAndWriteAfterCloseWriteNothing) {
  const TempPcap path_file("zero");
  const std::string& path = path_file.path;
  auto w = PcapWriter::open(path);
  ASSERT_TRUE(w.has_value()) << w.error();
  (*w)->write(Side::Client, {});
  (*w)->write(Side::Server, {});
  EXPECT_EQ((*w)->frames(), 3u);
  (*w)->close();
  EXPECT_EQ((*w)->frames(), 6u);
  (*w)->write(Side::Client, Bytes(10, 1));
  (*w)->close();
  EXPECT_EQ((*w)->frames(), 6u);
  EXPECT_EQ(read_raw(path).size(), 6u);  // close() flushed the file
}

TEST(PcapWriterFrames, SegmentsNeverExceedTheMss) {
  const TempPcap path_file("mss");
  const std::string& path = path_file.path;
  PcapWriterOptions o;
  o.mss = 7;
  {
    auto w = PcapWriter::open(path, o);
    ASSERT_TRUE(w.has_value()) << w.error();
    (*w)->write(Side::Client, Bytes(15, 1));  // 7 + 7 + 1
    (*w)->write(Side::Server, Bytes(14, 2));  // 7 + 7
    (*w)->close();
  }
  const auto raw = read_raw(path);
  ASSERT_EQ(raw.size(), 3u + 2 * 5 + 3);
  std::vector<std::size_t> lens;
  for (const auto& f : raw) {
    const Decoded d = decode(f.data);
    if (!d.payload.empty()) lens.push_back(d.payload.size());
  }
  EXPECT_EQ(lens, (std::vector<std::size_t>{7, 7, 1, 7, 7}));
}

// Records (FPDUs) are packed whole into segments up to the MSS; none is split unless it is
// longer than the MSS on its own (RFC 5044 §8: every segment starts with an FPDU).
TEST(PcapWriterFrames, RecordsArePackedWholeIntoSegments) {
  const TempPcap path_file("records");
  const std::string& path = path_file.path;
  PcapWriterOptions o;
  o.mss = 10;
  {
    auto w = PcapWriter::open(path, o);
    ASSERT_TRUE(w.has_value()) << w.error();
    // Records of 4, 4, 3, 12, 2, 5 octets.
    const std::vector<std::size_t> ends = {4, 8, 11, 23, 25, 30};
    (*w)->write_records(Side::Client, Bytes(30, 1), ends);
    (*w)->close();
  }
  std::vector<std::size_t> lens;
  for (const auto& f : read_raw(path)) {
    const Decoded d = decode(f.data);
    if (!d.payload.empty()) lens.push_back(d.payload.size());
  }
  // 4+4 | 3 | 12 cut at the MSS: 10 + 2 | 2+5
  EXPECT_EQ(lens, (std::vector<std::size_t>{8, 3, 10, 2, 7}));
}

// Wireshark's own opinion: no bad checksum, no TCP analysis flag, no malformed packet and no
// expert warning, and the TCP lengths add up to what was written. Fails if tshark is missing.
void check_with_tshark(const PcapWriterOptions& o, std::uint32_t seed, const std::string& name) {
  const TempPcap path_file(name);
  const std::string& path = path_file.path;
  std::mt19937 gen(seed);
  const std::vector<std::size_t> sizes = {0,    1, 1459, 1460, 1461, 2920, 2921, 7,
                                          4000, 1, 0,    65,   3000, 1,    17,   9999};
  std::size_t total = 0;
  {
    auto w = PcapWriter::open(path, o);
    ASSERT_TRUE(w.has_value()) << w.error();
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const Bytes b = random_bytes(gen, sizes[i]);
      (*w)->write(gen() % 2 ? Side::Client : Side::Server, b);
      total += b.size();
    }
    (*w)->close(Side::Server);
  }
  const auto [st0, ver] = run("tshark --version 2>&1");
  ASSERT_EQ(st0, 0) << "tshark is required for this test and was not found: " << ver;

  const std::string filter =
      "tcp.analysis.flags || tcp.checksum.status==0 || ip.checksum.status==0 || _ws.malformed || "
      "_ws.expert.severity>=warning";
  const auto [st1, problems] =
      run("tshark -r '" + path + "' -o tcp.check_checksum:TRUE -o ip.check_checksum:TRUE -Y '" +
          filter + "' 2>/dev/null");
  EXPECT_EQ(st1, 0);
  EXPECT_EQ(problems, "") << "tshark flags these frames of " << path;

  // The filter must actually be able to match: a checksum field that tshark checked.
  const auto [st2, good] =
      run("tshark -r '" + path +
          "' -o tcp.check_checksum:TRUE -o ip.check_checksum:TRUE -Y 'tcp.checksum.status==1 && "
          "ip.checksum.status==1' -T fields -e frame.number 2>/dev/null | wc -l");
  EXPECT_EQ(st2, 0);
  const auto [st3, frames] =
      run("tshark -r '" + path + "' -T fields -e frame.number 2>/dev/null | wc -l");
  EXPECT_EQ(st3, 0);
  EXPECT_EQ(std::stoul(good), std::stoul(frames));

  const auto [st4, lens] = run("tshark -r '" + path + "' -T fields -e tcp.len 2>/dev/null");
  EXPECT_EQ(st4, 0);
  std::size_t sum = 0, lines = 0;
  std::size_t pos = 0;
  while (pos < lens.size()) {
    const std::size_t nl = lens.find('\n', pos);
    const std::string line = lens.substr(pos, nl == std::string::npos ? nl : nl - pos);
    if (!line.empty()) {
      sum += std::stoul(line);
      ++lines;
    }
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  EXPECT_EQ(sum, total);
  EXPECT_EQ(lines, std::stoul(frames));
}

TEST(PcapWriterTshark, HandshakeConversationIsClean) {
  PcapWriterOptions o;
  o.client_isn = 0xfffff000;  // wraps during the conversation
  o.server_isn = 123456789;
  check_with_tshark(o, 1, "tshark_hs");
}

TEST(PcapWriterTshark, SmallMssWithoutHandshakeIsClean) {
  PcapWriterOptions o;
  o.handshake = false;
  o.mss = 536;
  o.step_us = 1;
  check_with_tshark(o, 2, "tshark_nohs");
}

}  // namespace
}  // namespace iwarp::trace
