// read_capture: round trips through PcapWriter, every supported link type and IP variant on
// hand-built frames, the problem notes (mid-connection, snaplen, fragments), the fatal errors,
// and the real siw captures of the corpus.
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "trace/pcap_reader.hpp"
#include "trace/pcap_writer.hpp"
#include "trace/tcp_reassembly.hpp"

namespace iwarp::trace {
namespace {

using TempPcap = test::TempFile;

std::string corpus(const std::string& file) {
  return std::string(IWARP_SOURCE_DIR) + "/pcap_traces/siw/" + file;
}

Bytes random_bytes(std::mt19937& gen, std::size_t n) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::uint8_t>(gen());
  return b;
}

Bytes concat(const std::vector<TcpSegment>& segs) {
  Bytes out;
  for (const auto& s : segs) out.insert(out.end(), s.payload.begin(), s.payload.end());
  return out;
}

// One direction of a flow through TcpReassembler, starting after the SYN.
struct Reassembled {
  Bytes stream;
  std::size_t holes = 0, held = 0;
  std::int64_t highest_end = 0;  // highest payload end, relative to ISN + 1
  std::size_t out_of_order = 0;  // segments starting before the highest end seen so far
};

Reassembled reassemble(const TcpFlow& flow, int d) {
  const TcpSeq start = (d == 0 ? flow.client_isn : flow.server_isn) + 1;
  TcpReassembler r(start);
  Reassembled out;
  TcpSeq high = start;
  for (const TcpSegment& s : flow.dir[static_cast<std::size_t>(d)]) {
    if (s.payload.empty()) continue;
    if (s.seq < high) ++out.out_of_order;
    const TcpSeq end = s.seq + static_cast<std::uint32_t>(s.payload.size());
    if (end > high) high = end;
    r.add(s.seq, s.payload,
          [&](ByteSpan b) { out.stream.insert(out.stream.end(), b.begin(), b.end()); });
  }
  out.holes = r.holes();
  out.held = r.held_bytes();
  out.highest_end = high - start;
  return out;
}

// ---- Frames built by hand ------------------------------------------------------------------

constexpr std::uint8_t FIN = 0x01, SYN = 0x02, RST = 0x04, PSH = 0x08, ACK = 0x10;

struct Pkt {
  bool v6 = false;
  std::array<std::uint8_t, 16> src{}, dst{};
  std::uint16_t sport = 0, dport = 0;
  std::uint32_t seq = 0, ack = 0;
  std::uint8_t flags = 0;
  Bytes payload;
  Bytes tcp_options;                  // multiple of 4
  std::size_t ipv4_option_words = 0;  // IHL - 5
  std::vector<std::uint8_t> v6_ext;   // extension headers before TCP: 0, 43, 60
  // Fragmentation: offset in octets (multiple of 8) and the "more fragments" flag; the
  // identification is `frag_id`. When offset != 0 the packet carries `payload` only.
  bool fragment = false;
  std::size_t frag_offset = 0;
  bool frag_more = false;
  std::uint32_t frag_id = 0;
};

Bytes tcp_bytes(const Pkt& p) {
  Bytes t;
  ByteWriter w(t);
  w.be16(p.sport);
  w.be16(p.dport);
  w.be32(p.seq);
  w.be32(p.ack);
  w.u8(static_cast<std::uint8_t>(((20 + p.tcp_options.size()) / 4) << 4));
  w.u8(p.flags);
  w.be16(65535);
  w.be16(0);
  w.be16(0);
  w.bytes(p.tcp_options);
  w.bytes(p.payload);
  return t;
}

Bytes ip_bytes(const Pkt& p) {
  const Bytes l4 = p.fragment && p.frag_offset != 0 ? p.payload : tcp_bytes(p);
  Bytes out;
  ByteWriter w(out);
  if (!p.v6) {
    const std::size_t ihl = 20 + 4 * p.ipv4_option_words;
    w.u8(static_cast<std::uint8_t>(0x40 | (ihl / 4)));
    w.u8(0);
    w.be16(static_cast<std::uint16_t>(ihl + l4.size()));
    w.be16(static_cast<std::uint16_t>(p.frag_id));
    w.be16(static_cast<std::uint16_t>((p.frag_more ? 0x2000 : 0) | (p.frag_offset / 8)));
    w.u8(64);
    w.u8(6);
    w.be16(0);
    w.bytes(ByteSpan(p.src).first(4));
    w.bytes(ByteSpan(p.dst).first(4));
    for (std::size_t i = 0; i < p.ipv4_option_words; ++i) w.be32(0x01010101);  // NOPs
    store_be16(&out[10], internet_checksum(ByteSpan(out).first(ihl)));
    w.bytes(l4);
    return out;
  }
  Bytes ext;
  ByteWriter e(ext);
  std::vector<std::uint8_t> chain = p.v6_ext;
  if (p.fragment) chain.push_back(44);
  for (std::size_t i = 0; i < chain.size(); ++i) {
    const std::uint8_t next = i + 1 < chain.size() ? chain[i + 1] : 6;
    if (chain[i] == 44) {
      e.u8(next);
      e.u8(0);
      e.be16(static_cast<std::uint16_t>(p.frag_offset | (p.frag_more ? 1 : 0)));
      e.be32(p.frag_id);
    } else {
      // 16 octets: Hdr Ext Len 1; padding options (PadN) fill the rest.
      e.u8(next);
      e.u8(1);
      e.u8(1);
      e.u8(12);
      e.zeros(12);
    }
  }
  w.be32(0x60000000);
  w.be16(static_cast<std::uint16_t>(ext.size() + l4.size()));
  w.u8(chain.empty() ? 6 : chain[0]);
  w.u8(64);
  w.bytes(p.src);
  w.bytes(p.dst);
  w.bytes(ext);
  w.bytes(l4);
  return out;
}

enum class Link { Ethernet, Vlan, QinQ, Sll, Sll2, Raw, NullHost, NullNet, Loop };

int dlt_of(Link l) {
  switch (l) {
    case Link::Ethernet:
    case Link::Vlan:
    case Link::QinQ:
      return DLT_EN10MB;
    case Link::Sll:
      return DLT_LINUX_SLL;
    case Link::Sll2:
      return DLT_LINUX_SLL2;
    case Link::Raw:
      return DLT_RAW;
    case Link::NullHost:
    case Link::NullNet:
      return DLT_NULL;
    case Link::Loop:
      return 108;  // DLT_LOOP
  }
  return -1;
}

Bytes framed(Link l, bool v6, const Bytes& ip) {
  Bytes f;
  ByteWriter w(f);
  const std::uint16_t etype = v6 ? 0x86dd : 0x0800;
  switch (l) {
    case Link::Ethernet:
    case Link::Vlan:
    case Link::QinQ:
      w.bytes(Bytes{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1});
      if (l == Link::QinQ) {
        w.be16(0x88a8);
        w.be16(100);
      }
      if (l != Link::Ethernet) {
        w.be16(0x8100);
        w.be16(7);
      }
      w.be16(etype);
      break;
    case Link::Sll:
      w.be16(0);  // packet type: to us
      w.be16(1);  // ARPHRD_ETHER
      w.be16(6);
      w.bytes(Bytes{0x02, 0, 0, 0, 0, 1, 0, 0});
      w.be16(etype);
      break;
    case Link::Sll2:
      w.be16(etype);
      w.be16(0);
      w.be32(2);  // interface index
      w.be16(1);  // ARPHRD_ETHER
      w.u8(0);
      w.u8(6);
      w.bytes(Bytes{0x02, 0, 0, 0, 0, 1, 0, 0});
      break;
    case Link::Raw:
      break;
    case Link::NullHost: {
      // Host byte order of the machine that wrote it; little-endian here.
      const std::uint32_t fam = v6 ? 30 : 2;
      w.zeros(4);
      store_le32(f.data(), fam);
      break;
    }
    case Link::NullNet:
    case Link::Loop:
      w.be32(v6 ? 24 : 2);
      break;
  }
  w.bytes(ip);
  return f;
}

struct OutFrame {
  Bytes data;
  std::uint32_t len = 0;  // 0: the whole frame was captured
  std::uint64_t time_us = 0;
};

void write_frames(const std::string& path, int dlt, int snaplen,
                  const std::vector<OutFrame>& frames) {
  pcap_t* dead = pcap_open_dead(dlt, snaplen);
  ASSERT_NE(dead, nullptr);
  pcap_dumper_t* d = pcap_dump_open(dead, path.c_str());
  ASSERT_NE(d, nullptr) << pcap_geterr(dead);
  std::uint64_t t = 1'600'000'000'000'000ull;
  for (const auto& f : frames) {
    pcap_pkthdr h{};
    const std::uint64_t ts = f.time_us ? f.time_us : t;
    h.ts.tv_sec = static_cast<time_t>(ts / 1'000'000);
    h.ts.tv_usec = static_cast<suseconds_t>(ts % 1'000'000);
    h.caplen = static_cast<bpf_u_int32>(f.data.size());
    h.len = f.len ? f.len : h.caplen;
    pcap_dump(reinterpret_cast<u_char*>(d), &h, f.data.data());
    t += 10;
  }
  pcap_dump_close(d);
  pcap_close(dead);
}

std::vector<OutFrame> read_frames(const std::string& path) {
  std::vector<OutFrame> out;
  char err[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_open_offline(path.c_str(), err);
  EXPECT_NE(p, nullptr) << err;
  if (!p) return out;
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  while (pcap_next_ex(p, &h, &data) == 1) {
    OutFrame f;
    f.data.assign(data, data + h->caplen);
    f.len = h->len;
    f.time_us = static_cast<std::uint64_t>(h->ts.tv_sec) * 1'000'000 +
                static_cast<std::uint64_t>(h->ts.tv_usec);
    out.push_back(std::move(f));
  }
  pcap_close(p);
  return out;
}

std::array<std::uint8_t, 16> v4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
  return {a, b, c, d};
}
std::array<std::uint8_t, 16> v6addr(std::uint16_t first, std::uint16_t last) {
  std::array<std::uint8_t, 16> a{};
  store_be16(a.data(), first);
  store_be16(a.data() + 14, last);
  return a;
}

// A small conversation: handshake, data both ways, FIN exchange.
std::vector<Pkt> conversation(bool v6, const Bytes& c2s, const Bytes& s2c) {
  Pkt base;
  base.v6 = v6;
  base.src = v6 ? v6addr(0x2001, 1) : v4(192, 0, 2, 1);
  base.dst = v6 ? v6addr(0x2001, 2) : v4(192, 0, 2, 2);
  base.sport = 50000;
  base.dport = 7174;
  auto from_client = [&](std::uint32_t seq, std::uint32_t ack, std::uint8_t flags, Bytes pl) {
    Pkt p = base;
    p.seq = seq;
    p.ack = ack;
    p.flags = flags;
    p.payload = std::move(pl);
    return p;
  };
  auto from_server = [&](std::uint32_t seq, std::uint32_t ack, std::uint8_t flags, Bytes pl) {
    Pkt p = from_client(seq, ack, flags, std::move(pl));
    std::swap(p.src, p.dst);
    std::swap(p.sport, p.dport);
    return p;
  };
  const std::uint32_t c = 100, s = 900;
  const auto cn = static_cast<std::uint32_t>(c2s.size()),
             sn = static_cast<std::uint32_t>(s2c.size());
  std::vector<Pkt> v;
  v.push_back(from_client(c, 0, SYN, {}));
  v.back().tcp_options = {2, 4, 0x05, 0xb4};
  v.push_back(from_server(s, c + 1, SYN | ACK, {}));
  v.back().tcp_options = {2, 4, 0x05, 0xb4};
  v.push_back(from_client(c + 1, s + 1, ACK, {}));
  v.push_back(from_client(c + 1, s + 1, PSH | ACK, c2s));
  v.push_back(from_server(s + 1, c + 1 + cn, PSH | ACK, s2c));
  v.push_back(from_client(c + 1 + cn, s + 1 + sn, FIN | ACK, {}));
  v.push_back(from_server(s + 1 + sn, c + 2 + cn, FIN | ACK, {}));
  v.push_back(from_client(c + 2 + cn, s + 2 + sn, ACK, {}));
  return v;
}

std::vector<OutFrame> frames_of(Link l, const std::vector<Pkt>& pkts) {
  std::vector<OutFrame> out;
  for (const auto& p : pkts) out.push_back({framed(l, p.v6, ip_bytes(p)), 0, 0});
  return out;
}

// ---- Round trips through PcapWriter --------------------------------------------------------

TEST(PcapReaderRoundTrip, BothDirectionsOddSizesAndSequenceNumbers) {
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 gen(seed);
    const TempPcap path_file("roundtrip" + std::to_string(seed));
    const std::string& path = path_file.path;
    PcapWriterOptions o;
    o.client = {{10, 1, 2, 3}, static_cast<std::uint16_t>(30000 + seed)};
    o.server = {{10, 4, 5, 6}, 7174};
    o.client_isn = seed == 3 ? 0xfffffa00u : static_cast<std::uint32_t>(gen());  // 3: wraps
    o.server_isn = static_cast<std::uint32_t>(gen());
    o.start_time_us = 1'650'000'000'123'456ull;
    o.step_us = 250;
    const std::vector<std::size_t> sizes = {0, 1, 1459, 1460, 1461, 2921, 7, 0, 4000, 1, 33};
    Bytes sent[2];
    std::size_t data_segments[2] = {0, 0};
    std::size_t frames = 0;
    {
      auto w = PcapWriter::open(path, o);
      ASSERT_TRUE(w.has_value()) << w.error();
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        const int d = static_cast<int>(gen() % 2);
        const Bytes b = random_bytes(gen, sizes[i]);
        (*w)->write(d == 0 ? Side::Client : Side::Server, b);
        sent[d].insert(sent[d].end(), b.begin(), b.end());
        data_segments[d] += (b.size() + 1459) / 1460;
      }
      (*w)->close(Side::Client);
      frames = (*w)->frames();
    }
    auto cap = read_capture(path);
    ASSERT_TRUE(cap.has_value()) << cap.error();
    EXPECT_EQ(cap->path, path);
    EXPECT_EQ(cap->link_type, DLT_EN10MB);
    EXPECT_EQ(cap->link_name, "EN10MB");
    EXPECT_EQ(cap->frames, frames);
    EXPECT_EQ(cap->non_tcp_frames, 0u);
    EXPECT_TRUE(cap->problems.empty());
    ASSERT_EQ(cap->flows.size(), 1u);
    const TcpFlow& f = cap->flows[0];
    EXPECT_TRUE(f.problems.empty()) << f.problems.front();
    EXPECT_EQ(f.client.to_string(), "10.1.2.3:" + std::to_string(30000 + seed));
    EXPECT_EQ(f.server.to_string(), "10.4.5.6:7174");
    EXPECT_FALSE(f.client.v6);
    EXPECT_TRUE(f.saw_syn);
    EXPECT_TRUE(f.saw_syn_ack);
    EXPECT_EQ(f.client_isn, TcpSeq{o.client_isn});
    EXPECT_EQ(f.server_isn, TcpSeq{o.server_isn});
    EXPECT_EQ(f.first_frame, 1u);
    for (int d = 0; d < 2; ++d) {
      SCOPED_TRACE("direction " + std::to_string(d));
      const auto& segs = f.dir[static_cast<std::size_t>(d)];
      // Pure ACKs are not kept: SYN (or SYN-ACK), the data segments and the FIN.
      ASSERT_EQ(segs.size(), data_segments[d] + 2);
      EXPECT_TRUE(segs.front().syn);
      EXPECT_EQ(segs.front().has_ack, d == 1);
      EXPECT_TRUE(segs.back().fin);
      EXPECT_EQ(concat(segs), sent[d]);
      // Sequence numbers: ISN, then ISN + 1 + octets so far, FIN after the last octet.
      const TcpSeq isn = d == 0 ? f.client_isn : f.server_isn;
      EXPECT_EQ(segs.front().seq, isn);
      TcpSeq next = isn + 1;
      std::uint64_t prev_frame = 0;
      for (std::size_t i = 1; i < segs.size(); ++i) {
        EXPECT_EQ(segs[i].seq, next);
        EXPECT_TRUE(segs[i].has_ack);
        EXPECT_FALSE(segs[i].rst);
        EXPECT_LE(segs[i].payload.size(), 1460u);
        EXPECT_GT(segs[i].frame, prev_frame);
        EXPECT_EQ(segs[i].time_us, o.start_time_us + (segs[i].frame - 1) * o.step_us);
        prev_frame = segs[i].frame;
        next += static_cast<std::uint32_t>(segs[i].payload.size());
      }
      EXPECT_EQ(segs.back().payload.size(), 0u);
      const Reassembled r = reassemble(f, d);
      EXPECT_EQ(r.stream, sent[d]);
      EXPECT_EQ(r.holes, 0u);
    }
    // The acknowledgement numbers of the data segments: what the other side had sent.
    const auto& s2c = f.dir[1];
    EXPECT_EQ(s2c.front().ack, TcpSeq{o.client_isn + 1});
  }
}

TEST(PcapReaderRoundTrip, MidConnectionCaptureIsFlagged) {
  const TempPcap path_file("midconn");
  const std::string& path = path_file.path;
  PcapWriterOptions o;
  o.handshake = false;
  o.client_isn = 41;
  o.server_isn = 0xfffffffe;
  {
    auto w = PcapWriter::open(path, o);
    ASSERT_TRUE(w.has_value()) << w.error();
    (*w)->write(Side::Server, Bytes(10, 7));  // the server speaks first
    (*w)->write(Side::Client, Bytes(3, 8));
  }
  auto cap = read_capture(path);
  ASSERT_TRUE(cap.has_value()) << cap.error();
  ASSERT_EQ(cap->flows.size(), 1u);
  const TcpFlow& f = cap->flows[0];
  EXPECT_FALSE(f.saw_syn);
  EXPECT_FALSE(f.saw_syn_ack);
  // Without a SYN the first sender is taken as the client.
  EXPECT_EQ(f.client.to_string(), "10.0.0.2:7174");
  EXPECT_EQ(f.server.to_string(), "10.0.0.1:40000");
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_EQ(
      f.problems[0],
      "capture starts mid-connection: no SYN for 10.0.0.2:7174 -> 10.0.0.1:40000 (first frame 1)");
  ASSERT_EQ(f.dir[0].size(), 1u);
  EXPECT_EQ(f.dir[0][0].seq, TcpSeq{0xffffffffu});
  EXPECT_EQ(f.dir[0][0].payload, Bytes(10, 7));
  ASSERT_EQ(f.dir[1].size(), 1u);
  EXPECT_EQ(f.dir[1][0].seq, TcpSeq{42});
  EXPECT_EQ(f.dir[1][0].frame, 3u);
}

// The writer's capture rewritten with snaplen 96: frames whose TCP payload was cut keep no
// payload and leave a problem note; frames that fit are untouched.
TEST(PcapReaderSnaplen, TruncatedPayloadIsDroppedWithAProblem) {
  const TempPcap full_file("snap_full"), cut_file("snap_cut");
  const std::string &full = full_file.path, &cut = cut_file.path;
  PcapWriterOptions o;
  const Bytes small(42, 0x11);  // 54 + 42 = 96: fits exactly
  std::mt19937 gen(4);
  const Bytes big = random_bytes(gen, 2000);  // 1460 + 540: both cut
  const Bytes tiny(5, 0x22);
  {
    auto w = PcapWriter::open(full, o);
    ASSERT_TRUE(w.has_value()) << w.error();
    (*w)->write(Side::Client, small);  // frames 4, 5
    (*w)->write(Side::Server, big);    // frames 6..9
    (*w)->write(Side::Client, tiny);   // frames 10, 11
    (*w)->close();
  }
  std::vector<OutFrame> frames = read_frames(full);
  ASSERT_EQ(frames.size(), 14u);
  for (auto& f : frames) {
    f.len = static_cast<std::uint32_t>(f.data.size());
    if (f.data.size() > 96) f.data.resize(96);
  }
  write_frames(cut, DLT_EN10MB, 96, frames);

  auto cap = read_capture(cut);
  ASSERT_TRUE(cap.has_value()) << cap.error();
  EXPECT_EQ(cap->frames, 14u);
  EXPECT_EQ(cap->non_tcp_frames, 0u);
  ASSERT_EQ(cap->flows.size(), 1u);
  const TcpFlow& f = cap->flows[0];
  EXPECT_EQ(
      f.problems,
      (std::vector<std::string>{
          "frame 6: truncated by snaplen 96 (caplen 96 of 1514 octets); TCP payload incomplete",
          "frame 8: truncated by snaplen 96 (caplen 96 of 594 octets); TCP payload incomplete"}));
  Bytes client_data = small;  // both client segments fit in 96 octets
  client_data.insert(client_data.end(), tiny.begin(), tiny.end());
  EXPECT_EQ(concat(f.dir[0]), client_data);
  EXPECT_EQ(reassemble(f, 0).stream, client_data);
  // Server direction: SYN-ACK and FIN only; the cut segments are not kept.
  ASSERT_EQ(f.dir[1].size(), 2u);
  EXPECT_TRUE(f.dir[1][0].syn);
  EXPECT_TRUE(f.dir[1][1].fin);
  const Reassembled r = reassemble(f, 1);
  EXPECT_TRUE(r.stream.empty());
}

// ---- Link types and IP variants ------------------------------------------------------------

TEST(PcapReaderLinkTypes, EveryLinkTypeWithIpv4AndIpv6) {
  std::mt19937 gen(8);
  const Bytes c2s = random_bytes(gen, 300), s2c = random_bytes(gen, 77);
  const Link links[] = {Link::Ethernet, Link::Vlan,     Link::QinQ,    Link::Sll, Link::Sll2,
                        Link::Raw,      Link::NullHost, Link::NullNet, Link::Loop};
  for (Link l : links) {
    for (bool v6 : {false, true}) {
      SCOPED_TRACE("link " + std::to_string(static_cast<int>(l)) + (v6 ? " IPv6" : " IPv4"));
      const TempPcap path_file("link");
      const std::string& path = path_file.path;
      write_frames(path, dlt_of(l), 65535, frames_of(l, conversation(v6, c2s, s2c)));
      auto cap = read_capture(path);
      ASSERT_TRUE(cap.has_value()) << cap.error();
      EXPECT_EQ(cap->link_type, dlt_of(l));
      EXPECT_EQ(cap->frames, 8u);
      EXPECT_EQ(cap->non_tcp_frames, 0u);
      EXPECT_TRUE(cap->problems.empty());
      ASSERT_EQ(cap->flows.size(), 1u);
      const TcpFlow& f = cap->flows[0];
      EXPECT_TRUE(f.problems.empty());
      EXPECT_EQ(f.client.v6, v6);
      EXPECT_EQ(f.client.to_string(), v6 ? "[2001::1]:50000" : "192.0.2.1:50000");
      EXPECT_EQ(f.server.to_string(), v6 ? "[2001::2]:7174" : "192.0.2.2:7174");
      EXPECT_TRUE(f.saw_syn && f.saw_syn_ack);
      EXPECT_EQ(f.client_isn, TcpSeq{100});
      EXPECT_EQ(f.server_isn, TcpSeq{900});
      EXPECT_EQ(reassemble(f, 0).stream, c2s);
      EXPECT_EQ(reassemble(f, 1).stream, s2c);
    }
  }
}

TEST(PcapReaderIp, Ipv4OptionsAndEthernetPadding) {
  Pkt p;
  p.src = v4(10, 0, 0, 1);
  p.dst = v4(10, 0, 0, 2);
  p.sport = 1;
  p.dport = 2;
  p.seq = 5;
  p.flags = PSH | ACK;
  p.payload = {0xaa, 0xbb};
  p.ipv4_option_words = 3;
  Pkt q = p;
  q.ipv4_option_words = 0;
  q.seq = 7;
  Bytes padded = framed(Link::Ethernet, false, ip_bytes(q));  // 14 + 20 + 20 + 2 = 56
  padded.resize(60, 0xee);  // Ethernet minimum frame: padding is not TCP payload
  const TempPcap path_file("ipv4opts");
  const std::string& path = path_file.path;
  write_frames(path, DLT_EN10MB, 65535,
               {{framed(Link::Ethernet, false, ip_bytes(p)), 0, 0}, {padded, 0, 0}});
  auto cap = read_capture(path);
  ASSERT_TRUE(cap.has_value()) << cap.error();
  ASSERT_EQ(cap->flows.size(), 1u);
  const auto& segs = cap->flows[0].dir[0];
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].payload, (Bytes{0xaa, 0xbb}));
  EXPECT_EQ(segs[1].payload, (Bytes{0xaa, 0xbb}));
  EXPECT_EQ(segs[1].seq, TcpSeq{7});
}

TEST(PcapReaderIp, Ipv6ExtensionHeadersAreSkipped) {
  std::mt19937 gen(9);
  const Bytes c2s = random_bytes(gen, 50), s2c = random_bytes(gen, 60);
  auto pkts = conversation(true, c2s, s2c);
  for (auto& p : pkts) p.v6_ext = {0, 43, 60};  // hop-by-hop, routing, destination options
  pkts[3].fragment = true;  // an atomic fragment (offset 0, M 0) is a whole packet
  const TempPcap path_file("v6ext");
  const std::string& path = path_file.path;
  write_frames(path, DLT_EN10MB, 65535, frames_of(Link::Ethernet, pkts));
  auto cap = read_capture(path);
  ASSERT_TRUE(cap.has_value()) << cap.error();
  ASSERT_EQ(cap->flows.size(), 1u);
  EXPECT_TRUE(cap->flows[0].problems.empty());
  EXPECT_EQ(reassemble(cap->flows[0], 0).stream, c2s);
  EXPECT_EQ(reassemble(cap->flows[0], 1).stream, s2c);
}

TEST(PcapReaderIp, FragmentsAreNotedNotReassembled) {
  for (bool v6 : {false, true}) {
    SCOPED_TRACE(v6 ? "IPv6" : "IPv4");
    auto pkts = conversation(v6, Bytes(40, 1), Bytes(8, 2));
    // The client's data segment becomes a first fragment plus a later fragment.
    Pkt first = pkts[3];
    first.fragment = true;
    first.frag_more = true;
    first.frag_id = 0x1234;
    Pkt later = pkts[3];
    later.fragment = true;
    later.frag_offset = 24;
    later.frag_id = 0x1234;
    later.payload = Bytes(16, 1);
    first.payload.resize(4);
    Pkt orphan = later;  // a fragment whose first fragment is not in the capture
    orphan.frag_id = 0x9999;
    std::vector<Pkt> v = {pkts[0], pkts[1], pkts[2], first, later, pkts[4], orphan};
    const TempPcap path_file("frag");
    const std::string& path = path_file.path;
    write_frames(path, DLT_EN10MB, 65535, frames_of(Link::Ethernet, v));
    auto cap = read_capture(path);
    ASSERT_TRUE(cap.has_value()) << cap.error();
    EXPECT_EQ(cap->frames, 7u);
    EXPECT_EQ(cap->non_tcp_frames, 2u);  // the two non-first fragments
    ASSERT_EQ(cap->flows.size(), 1u);
    const TcpFlow& f = cap->flows[0];
    ASSERT_EQ(f.problems.size(), 2u);
    EXPECT_TRUE(f.problems[0].starts_with(v6 ? "frame 4: IPv6 first fragment (id 0x00001234)"
                                             : "frame 4: IPv4 first fragment (id 0x1234)"))
        << f.problems[0];
    EXPECT_TRUE(
        f.problems[0].ends_with("TCP payload incomplete (IP fragments are not reassembled)"))
        << f.problems[0];
    EXPECT_TRUE(f.problems[1].starts_with(v6 ? "frame 5: IPv6 fragment (id 0x00001234, offset 24)"
                                             : "frame 5: IPv4 fragment (id 0x1234, offset 24)"))
        << f.problems[1];
    ASSERT_EQ(cap->problems.size(), 1u);
    EXPECT_TRUE(cap->problems[0].starts_with("frame 7: ")) << cap->problems[0];
    EXPECT_TRUE(cap->problems[0].ends_with("(first fragment not seen)")) << cap->problems[0];
    // No partial payload was taken from the first fragment.
    EXPECT_TRUE(concat(f.dir[0]).empty());
    EXPECT_EQ(concat(f.dir[1]), Bytes(8, 2));
  }
}

TEST(PcapReaderIp, NonTcpAndMalformedFramesNeverCrash) {
  std::vector<OutFrame> frames;
  // ARP, UDP over IPv4, ICMPv6, an 802.3 length frame, and empty/short frames.
  frames.push_back(
      {Bytes{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1}, 0, 0});
  Pkt udp;
  udp.src = v4(1, 2, 3, 4);
  udp.dst = v4(5, 6, 7, 8);
  Bytes ip = ip_bytes(udp);
  ip[9] = 17;
  frames.push_back({framed(Link::Ethernet, false, ip), 0, 0});
  Pkt icmp6;
  icmp6.v6 = true;
  Bytes ip6 = ip_bytes(icmp6);
  ip6[6] = 58;
  frames.push_back({framed(Link::Ethernet, true, ip6), 0, 0});
  frames.push_back({Bytes(14, 0), 0, 0});
  frames.push_back({Bytes{1, 2, 3}, 0, 0});
  frames.push_back({Bytes{}, 0, 0});
  // A valid segment, then every prefix of it and versions with damaged header fields.
  Pkt good;
  good.src = v4(10, 0, 0, 1);
  good.dst = v4(10, 0, 0, 2);
  good.sport = 1000;
  good.dport = 2000;
  good.flags = PSH | ACK;
  good.payload = Bytes(30, 3);
  const Bytes whole = framed(Link::Ethernet, false, ip_bytes(good));
  for (std::size_t n = 0; n < whole.size(); ++n)
    frames.push_back({Bytes(whole.begin(), whole.begin() + n), 0, 0});
  std::mt19937 gen(10);
  for (int i = 0; i < 2000; ++i) {
    Bytes b = whole;
    for (int k = 0; k < 3; ++k) b[14 + gen() % (b.size() - 14)] = static_cast<std::uint8_t>(gen());
    frames.push_back({b, 0, 0});
  }
  Pkt good6 = good;
  good6.v6 = true;
  good6.v6_ext = {0, 60};
  const Bytes whole6 = framed(Link::Ethernet, true, ip_bytes(good6));
  for (int i = 0; i < 2000; ++i) {
    Bytes b = whole6;
    for (int k = 0; k < 3; ++k) b[14 + gen() % (b.size() - 14)] = static_cast<std::uint8_t>(gen());
    frames.push_back({b, 0, 0});
  }
  const TempPcap path_file("junk");
  const std::string& path = path_file.path;
  write_frames(path, DLT_EN10MB, 65535, frames);
  auto cap = read_capture(path);
  ASSERT_TRUE(cap.has_value()) << cap.error();
  EXPECT_EQ(cap->frames, frames.size());
  EXPECT_GE(cap->non_tcp_frames, 6u + whole.size() - 54);
  EXPECT_FALSE(cap->problems.empty());  // e.g. "frame 12: IPv4 header incomplete (...)"
  for (const auto& p : cap->problems) {
    EXPECT_TRUE(p.starts_with("frame ")) << p;
    EXPECT_EQ(p.find('\n'), std::string::npos);
  }
}

// ---- Flows ---------------------------------------------------------------------------------

TEST(PcapReaderFlows, NewSynAfterFinOrRstStartsANewFlow) {
  auto a = conversation(false, Bytes(10, 1), Bytes(20, 2));  // ends with FIN
  auto b = conversation(false, Bytes(30, 3), Bytes(40, 4));
  for (auto& p : b) {
    p.seq += 5000;
    if (p.ack) p.ack += 5000;
  }
  // c: a connection reset by the server after its SYN-ACK.
  std::vector<Pkt> c(b.begin(), b.begin() + 2);
  for (auto& p : c) {
    p.seq += 5000;
    if (p.ack) p.ack += 5000;
  }
  Pkt rst = c[1];
  rst.flags = RST | ACK;
  rst.seq += 1;
  c.push_back(rst);
  auto d = conversation(false, Bytes(5, 5), Bytes(6, 6));
  d.insert(d.begin() + 1, d[0]);  // a retransmitted SYN stays in the same flow

  std::vector<Pkt> all;
  for (auto* v : {&a, &b, &c, &d}) all.insert(all.end(), v->begin(), v->end());
  const TempPcap path_file("newsyn");
  const std::string& path = path_file.path;
  write_frames(path, DLT_EN10MB, 65535, frames_of(Link::Ethernet, all));
  auto cap = read_capture(path);
  ASSERT_TRUE(cap.has_value()) << cap.error();
  ASSERT_EQ(cap->flows.size(), 4u);
  EXPECT_EQ(cap->flows[0].first_frame, 1u);
  EXPECT_EQ(cap->flows[1].first_frame, 9u);
  EXPECT_EQ(cap->flows[2].first_frame, 17u);
  EXPECT_EQ(cap->flows[3].first_frame, 20u);
  EXPECT_EQ(cap->flows[0].client_isn, TcpSeq{100});
  EXPECT_EQ(cap->flows[1].client_isn, TcpSeq{5100});
  EXPECT_EQ(cap->flows[2].client_isn, TcpSeq{10100});
  EXPECT_EQ(cap->flows[3].client_isn, TcpSeq{100});
  EXPECT_EQ(concat(cap->flows[1].dir[0]), Bytes(30, 3));
  EXPECT_EQ(concat(cap->flows[1].dir[1]), Bytes(40, 4));
  ASSERT_EQ(cap->flows[2].dir[1].size(), 2u);
  EXPECT_TRUE(cap->flows[2].dir[1][1].rst);
  EXPECT_EQ(cap->flows[3].dir[0].size(), 4u);  // SYN twice, data, FIN
  EXPECT_EQ(concat(cap->flows[3].dir[0]), Bytes(5, 5));
  for (const auto& f : cap->flows) EXPECT_TRUE(f.problems.empty());
}

TEST(PcapReaderFlows, SynAckFirstMakesItsReceiverTheClient) {
  auto pkts = conversation(false, Bytes(3, 1), Bytes(4, 2));
  pkts.erase(pkts.begin());  // the SYN was not captured
  const TempPcap path_file("synackfirst");
  const std::string& path = path_file.path;
  write_frames(path, DLT_EN10MB, 65535, frames_of(Link::Ethernet, pkts));
  auto cap = read_capture(path);
  ASSERT_TRUE(cap.has_value()) << cap.error();
  ASSERT_EQ(cap->flows.size(), 1u);
  const TcpFlow& f = cap->flows[0];
  EXPECT_EQ(f.client.to_string(), "192.0.2.1:50000");
  EXPECT_FALSE(f.saw_syn);
  EXPECT_TRUE(f.saw_syn_ack);
  EXPECT_EQ(f.server_isn, TcpSeq{900});
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_EQ(f.problems[0],
            "capture starts mid-connection: no SYN for 192.0.2.1:50000 -> 192.0.2.2:7174 (first "
            "frame 1)");
}

TEST(PcapReaderEndpoint, ToString) {
  IpEndpoint e;
  e.addr = {10, 0, 2, 15};
  e.port = 7174;
  EXPECT_EQ(e.to_string(), "10.0.2.15:7174");
  e.v6 = true;
  e.addr = {};
  e.addr[15] = 1;
  EXPECT_EQ(e.to_string(), "[::1]:7174");
  e.addr = {};
  e.port = 0;
  EXPECT_EQ(e.to_string(), "[::]:0");
  e.addr = v6addr(0x2001, 1);
  store_be16(&e.addr[2], 0x0db8);
  e.port = 443;
  EXPECT_EQ(e.to_string(), "[2001:db8::1]:443");
  // A single zero group is not shortened; the longest run wins, the first on a tie.
  const std::uint16_t g1[8] = {0x2001, 0xdb8, 0, 1, 1, 1, 1, 1};
  const std::uint16_t g2[8] = {1, 0, 0, 2, 0, 0, 0, 3};
  const std::uint16_t g3[8] = {1, 0, 0, 2, 0, 0, 3, 0xabcd};
  const std::uint16_t g4[8] = {0xfe80, 0, 0, 0, 0, 0, 0, 0};
  const std::pair<const std::uint16_t*, const char*> cases[] = {{g1, "[2001:db8:0:1:1:1:1:1]:1"},
                                                                {g2, "[1:0:0:2::3]:1"},
                                                                {g3, "[1::2:0:0:3:abcd]:1"},
                                                                {g4, "[fe80::]:1"}};
  e.port = 1;
  for (const auto& [g, want] : cases) {
    for (int i = 0; i < 8; ++i) store_be16(&e.addr[2 * static_cast<std::size_t>(i)], g[i]);
    EXPECT_EQ(e.to_string(), want);
  }
}

// ---- Fatal errors --------------------------------------------------------------------------

TEST(PcapReaderErrors, UnsupportedLinkType) {
  const TempPcap path_file("wifi");
  const std::string& path = path_file.path;
  write_frames(path, DLT_IEEE802_11, 65535, {{Bytes(40, 0), 0, 0}});
  auto cap = read_capture(path);
  ASSERT_FALSE(cap.has_value());
  EXPECT_TRUE(
      cap.error().starts_with(path + ": unsupported link type IEEE802_11 (105); supported: "))
      << cap.error();
  EXPECT_NE(cap.error().find("EN10MB"), std::string::npos);
  EXPECT_NE(cap.error().find("LINUX_SLL2"), std::string::npos);
  EXPECT_EQ(cap.error().find('\n'), std::string::npos);
}

TEST(PcapReaderErrors, GarbageAndMissingFiles) {
  const TempPcap path_file("garbage");
  const std::string& path = path_file.path;
  {
    std::mt19937 gen(12);
    std::ofstream out(path, std::ios::binary);
    const Bytes b = random_bytes(gen, 5000);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  auto cap = read_capture(path);
  ASSERT_FALSE(cap.has_value());
  EXPECT_TRUE(cap.error().starts_with(path + ": ")) << cap.error();
  EXPECT_GT(cap.error().size(), path.size() + 2);
  EXPECT_EQ(cap.error().find('\n'), std::string::npos);

  const std::string missing = "/nonexistent-dir-for-pcap-reader-test/none.pcap";
  auto m = read_capture(missing);
  ASSERT_FALSE(m.has_value());
  EXPECT_TRUE(m.error().starts_with(missing + ": ")) << m.error();
  EXPECT_EQ(m.error().find(missing), m.error().rfind(missing)) << m.error();

  const TempPcap empty("empty");
  std::ofstream(empty.path, std::ios::binary).close();
  EXPECT_FALSE(read_capture(empty.path).has_value());
}

TEST(PcapReaderErrors, TruncatedFileKeepsWhatWasRead) {
  const TempPcap full_file("tail_full");
  const std::string& full = full_file.path;
  {
    auto w = PcapWriter::open(full);
    ASSERT_TRUE(w.has_value()) << w.error();
    (*w)->write(Side::Client, Bytes(100, 1));
    (*w)->write(Side::Server, Bytes(100, 2));
  }
  std::string bytes;
  {
    std::ifstream in(full, std::ios::binary | std::ios::ate);
    bytes.resize(static_cast<std::size_t>(in.tellg()));
    in.seekg(0);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(in.good());
  }
  const TempPcap cut_file("tail_cut");
  const std::string& cut = cut_file.path;
  std::ofstream(cut, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 30));
  auto cap = read_capture(cut);
  ASSERT_TRUE(cap.has_value()) << cap.error();
  EXPECT_EQ(cap->frames, 6u);  // the seventh (last ACK) is damaged
  ASSERT_EQ(cap->problems.size(), 1u);
  EXPECT_TRUE(cap->problems[0].starts_with("frame 7: ")) << cap->problems[0];
  ASSERT_EQ(cap->flows.size(), 1u);
  EXPECT_EQ(concat(cap->flows[0].dir[0]), Bytes(100, 1));
  EXPECT_EQ(concat(cap->flows[0].dir[1]), Bytes(100, 2));
}

// ---- The siw corpus ------------------------------------------------------------------------

TEST(PcapReaderCorpus, RpingLoopbackIsOneFlowWithHandshake) {
  auto cap = read_capture(corpus("rping_lo.pcap"));
  ASSERT_TRUE(cap.has_value()) << cap.error();
  EXPECT_EQ(cap->link_type, DLT_EN10MB);
  EXPECT_EQ(cap->frames, 90u);
  EXPECT_EQ(cap->non_tcp_frames, 0u);
  ASSERT_EQ(cap->flows.size(), 1u);
  const TcpFlow& f = cap->flows[0];
  EXPECT_TRUE(f.saw_syn);
  EXPECT_TRUE(f.saw_syn_ack);
  EXPECT_TRUE(f.problems.empty());
  EXPECT_EQ(f.client.to_string(), "10.0.2.15:47361");
  EXPECT_EQ(f.server.to_string(), "10.0.2.15:7174");
  EXPECT_EQ(f.first_frame, 1u);
  ASSERT_FALSE(f.dir[0].empty());
  EXPECT_TRUE(f.dir[0][0].syn);
  EXPECT_FALSE(f.dir[0][0].has_ack);
  // The MPA Request opens the client's stream (RFC 5044 §7.1).
  const Reassembled c = reassemble(f, 0), s = reassemble(f, 1);
  ASSERT_GE(c.stream.size(), 16u);
  EXPECT_EQ(std::string(c.stream.begin(), c.stream.begin() + 16), "MPA ID Req Frame");
  ASSERT_GE(s.stream.size(), 16u);
  EXPECT_EQ(std::string(s.stream.begin(), s.stream.begin() + 16), "MPA ID Rep Frame");
  // Lengths agree with tshark (tcp.nxtseq of the last data segment minus 1).
  EXPECT_EQ(c.stream.size(), 1664u);
  EXPECT_EQ(s.stream.size(), 2184u);
}

TEST(PcapReaderCorpus, HostnetHasTwoFlowsInOppositeDirections) {
  auto cap = read_capture(corpus("hostnet_eth0.pcap"));
  ASSERT_TRUE(cap.has_value()) << cap.error();
  EXPECT_EQ(cap->frames, 22u);
  ASSERT_EQ(cap->flows.size(), 2u);
  const TcpFlow& a = cap->flows[0];
  const TcpFlow& b = cap->flows[1];
  EXPECT_EQ(a.client.to_string(), "10.0.2.15:51328");
  EXPECT_EQ(a.server.to_string(), "10.0.2.2:18600");
  EXPECT_EQ(b.client.to_string(), "10.0.2.2:55990");
  EXPECT_EQ(b.server.to_string(), "10.0.2.15:18601");
  EXPECT_EQ(a.first_frame, 1u);
  EXPECT_EQ(b.first_frame, 12u);
  EXPECT_EQ(concat(a.dir[0]).size(), 17u);
  EXPECT_EQ(concat(a.dir[1]).size(), 16u);
  EXPECT_EQ(concat(b.dir[0]).size(), 28u);
  EXPECT_EQ(concat(b.dir[1]).size(), 39u);
  for (const auto& f : cap->flows) {
    EXPECT_TRUE(f.saw_syn && f.saw_syn_ack);
    EXPECT_TRUE(f.problems.empty());
  }
  // Frame 21 retransmits the FIN of frame 20; both are kept.
  ASSERT_GE(b.dir[0].size(), 2u);
  EXPECT_EQ(b.dir[0].back().frame, 21u);
  EXPECT_TRUE(b.dir[0].back().fin);
  EXPECT_TRUE(b.dir[0][b.dir[0].size() - 2].fin);
}

// netem reordered the loopback traffic: segments arrive out of order and are retransmitted,
// yet each direction reassembles to exactly (highest sequence end) - (ISN + 1) octets.
TEST(PcapReaderCorpus, NetemReorderReassemblesEveryDirection) {
  auto cap = read_capture(corpus("netem_reorder.pcap"));
  ASSERT_TRUE(cap.has_value()) << cap.error();
  ASSERT_EQ(cap->flows.size(), 3u);
  std::size_t out_of_order = 0;
  std::vector<std::size_t> lengths;
  for (const TcpFlow& f : cap->flows) {
    SCOPED_TRACE(f.client.to_string() + " -> " + f.server.to_string());
    ASSERT_TRUE(f.saw_syn && f.saw_syn_ack);
    EXPECT_TRUE(f.problems.empty());
    for (int d = 0; d < 2; ++d) {
      const Reassembled r = reassemble(f, d);
      EXPECT_EQ(static_cast<std::int64_t>(r.stream.size()), r.highest_end);
      EXPECT_EQ(r.holes, 0u);
      EXPECT_EQ(r.held, 0u);
      out_of_order += r.out_of_order;
      lengths.push_back(r.stream.size());
    }
  }
  EXPECT_GT(out_of_order, 50u);  // the test is only meaningful with reordering present
  // Per direction, as tshark counts them (last tcp.nxtseq minus the FIN, minus 1).
  EXPECT_EQ(lengths, (std::vector<std::size_t>{22024, 23064, 868, 868, 498744, 24}));
}

// Every corpus capture reads without fatal error, and every flow that shows its handshake
// reassembles without holes.
TEST(PcapReaderCorpus, AllCapturesReassembleWithoutHoles) {
  const char* files[] = {"hostnet_eth0.pcap",
                         "hostpeer_eth0_siw_client.pcap",
                         "hostpeer_eth0_siw_server.pcap",
                         "hostpeer_eth0_terminate.pcap",
                         "hostpeer_hostlo.pcap",
                         "netem_reorder.pcap",
                         "perftest_mtu64k_write_bw.pcap",
                         "perftest_send_bw.pcap",
                         "perftest_send_lat.pcap",
                         "perftest_write_bw.pcap",
                         "rping_lo.pcap",
                         "siw_accept_race_stall.pcap",
                         "siw_accept_race_stall_badstag.pcap",
                         "siw_crc_on.pcap",
                         "siw_crc_strict_on.pcap",
                         "siw_mpa_v1.pcap",
                         "siw_p2p.pcap",
                         "siw_tcp_nagle.pcap"};
  for (const char* file : files) {
    SCOPED_TRACE(file);
    auto cap = read_capture(corpus(file));
    ASSERT_TRUE(cap.has_value()) << cap.error();
    EXPECT_EQ(cap->non_tcp_frames, 0u);
    EXPECT_TRUE(cap->problems.empty());
    ASSERT_FALSE(cap->flows.empty());
    for (const TcpFlow& f : cap->flows) {
      EXPECT_TRUE(f.saw_syn);
      for (int d = 0; d < 2; ++d) {
        if (d == 1 && !f.saw_syn_ack) continue;
        const Reassembled r = reassemble(f, d);
        EXPECT_EQ(r.holes, 0u);
        EXPECT_EQ(static_cast<std::int64_t>(r.stream.size()), r.highest_end);
      }
    }
  }
}

}  // namespace
}  // namespace iwarp::trace
