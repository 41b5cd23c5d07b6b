// Capture file -> TCP flows. libpcap does the file format (pcap and pcapng); everything from
// the link-layer header on is parsed here with bounds-checked reads (common/bytes.hpp), so a
// damaged or hostile frame yields a problem note, never a crash.
//
// To keep memory low only segments that carry payload or SYN, FIN or RST are stored; pure
// ACKs are parsed (they can open a flow) but not kept. TCP checksums are not verified: loopback
// captures carry unfinished checksums (TX offload).
#include "trace/pcap_reader.hpp"
#include "trace/pcap_wire.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pcap/pcap.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "common/unnamed_file.hpp"

namespace iwarp::trace {

std::string IpEndpoint::to_string() const {
  if (!v6) return fmt::format("{}.{}.{}.{}:{}", addr[0], addr[1], addr[2], addr[3], port);
  // RFC 5952 §4: lower-case hex without leading zeros; the longest run (first if tied) of two
  // or more zero groups becomes "::".
  std::array<std::uint16_t, 8> g{};
  for (std::size_t i = 0; i < 8; ++i) g[i] = load_be16(&addr[2 * i]);
  std::size_t best = 8, best_len = 0;
  for (std::size_t i = 0; i < 8;) {
    if (g[i] != 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < 8 && g[j] == 0) ++j;
    if (j - i > best_len) {
      best = i;
      best_len = j - i;
    }
    i = j;
  }
  if (best_len < 2) best = 8;
  std::string s = "[";
  for (std::size_t i = 0; i < 8; ++i) {
    if (i == best) {
      s += "::";
      i += best_len - 1;
      continue;
    }
    if (i != 0 && i != best + best_len) s += ':';
    s += fmt::format("{:x}", g[i]);
  }
  return s + "]:" + std::to_string(port);
}

namespace {

// Link types. LINKTYPE_RAW (101) is what the file says; libpcap normally maps it to DLT_RAW.
constexpr int kLinkNull = DLT_NULL;        // 0: BSD loopback, family in host byte order
constexpr int kLinkEthernet = DLT_EN10MB;  // 1
constexpr int kLinkRaw12 = 12;             // DLT_RAW on most platforms
constexpr int kLinkRaw14 = 14;             // DLT_RAW on OpenBSD
constexpr int kLinkRaw101 = 101;           // LINKTYPE_RAW
constexpr int kLinkLoop = 108;             // DLT_LOOP: OpenBSD loopback, network byte order
constexpr int kLinkSll = 113;              // DLT_LINUX_SLL
constexpr int kLinkSll2 = 276;             // DLT_LINUX_SLL2
constexpr const char* kSupported =
    "EN10MB (1), LINUX_SLL (113), LINUX_SLL2 (276), RAW (12/101), NULL (0), LOOP (108)";

using namespace pcap_wire;
constexpr std::uint16_t kEtherIpv6 = 0x86dd;

// Per-frame facts the problem notes quote.
struct Frame {
  std::uint64_t number = 0;
  std::uint64_t time_us = 0;
  std::uint32_t caplen = 0, len = 0;
  int snaplen = 0;
  const std::uint8_t* base = nullptr;      // the frame's first octet as libpcap holds it
  std::uint64_t file_offset = kNotInFile;  // and where that octet lies in the file, if known
  bool cut() const { return caplen < len; }
};

// The IP layer of a frame, reduced to what TCP needs.
struct IpPacket {
  IpEndpoint src, dst;                  // ports filled from the TCP header
  ByteSpan l4;                          // captured transport octets (never beyond the datagram)
  std::size_t l4_declared = 0;          // transport octets the IP header announces
  bool first_fragment = false;          // offset 0 with more fragments: the TCP payload is partial
  std::string fragment_desc;            // for the problem note of a first fragment
  std::optional<std::string> frag_key;  // identifies the datagram's other fragments
};

using EndpointKey = std::tuple<bool, std::array<std::uint8_t, 16>, std::uint16_t>;
EndpointKey key_of(const IpEndpoint& e) {
  return {e.v6, e.addr, e.port};
}

std::string frag_key(const char* family, ByteSpan src, ByteSpan dst, std::uint32_t id) {
  return fmt::format("{} {} {} {}", family, hex(src, 16), hex(dst, 16), id);
}

class Reader {
 public:
  Reader(Capture& cap, SegmentSink& sink) : cap_(cap), sink_(sink) {}

  void frame(const Frame& f, ByteSpan data) {
    ++cap_.frames;
    if (!link(f, data)) ++cap_.non_tcp_frames;
  }

  void finish() {
    for (auto& flow : cap_.flows) {
      if (flow.saw_syn) continue;
      flow.problems.insert(
          flow.problems.begin(),
          fmt::format("capture starts mid-connection: no SYN for {} -> {} (first frame {})",
                      flow.client.to_string(), flow.server.to_string(), flow.first_frame));
    }
  }

 private:
  // Returns true when the frame produced a TCP segment.
  bool link(const Frame& f, ByteSpan data) {
    ByteReader r(data);
    switch (cap_.link_type) {
      case kLinkEthernet: {
        r.skip(12);  // destination and source MAC
        return ethertype(f, r.be16(), r);
      }
      case kLinkSll: {
        // Linux cooked v1: packet type, ARPHRD, address length, 8 address octets, protocol.
        r.skip(14);
        return ethertype(f, r.be16(), r);
      }
      case kLinkSll2: {
        // Linux cooked v2: protocol first, then reserved, ifindex, ARPHRD, type, addr len, addr.
        const std::uint16_t proto = r.be16();
        r.skip(18);
        return ethertype(f, proto, r);
      }
      case kLinkRaw12:
      case kLinkRaw14:
      case kLinkRaw101:
        return ip(f, r.rest());
      case kLinkNull:
      case kLinkLoop: {
        // 4-octet address family in the writer's byte order (DLT_NULL) or big-endian
        // (DLT_LOOP); either way only the low 16 bits are non-zero, which tells the order.
        const ByteSpan fam = r.bytes(4);
        if (!r.ok()) return short_frame(f, "loopback header");
        std::uint32_t family = load_le32(fam.data());
        if (family > 0xffff) family = load_be32(fam.data());
        // AF_INET is 2 everywhere; AF_INET6 is 10 (Linux), 24, 28 or 30 (BSDs, macOS).
        if (family == 2) return ipv4(f, r.rest());
        if (family == 10 || family == 24 || family == 28 || family == 30) return ipv6(f, r.rest());
        return false;
      }
      default:
        return false;
    }
  }

  // IEEE 802.1Q / 802.1ad tags (TPID 0x8100, 0x88a8, 0x9100) are skipped: 2 octets TCI and
  // the next EtherType.
  bool ethertype(const Frame& f, std::uint16_t type, ByteReader& r) {
    while (r.ok() && (type == 0x8100 || type == 0x88a8 || type == 0x9100)) {
      r.skip(2);
      type = r.be16();
    }
    if (!r.ok()) return short_frame(f, "link-layer header");
    if (type == kEtherTypeIpv4) return ipv4(f, r.rest());
    if (type == kEtherIpv6) return ipv6(f, r.rest());
    return false;
  }

  bool ip(const Frame& f, ByteSpan net) {
    if (net.empty()) return short_frame(f, "IP header");
    const int version = net[0] >> 4;
    if (version == 4) return ipv4(f, net);
    if (version == 6) return ipv6(f, net);
    return false;
  }

  bool short_frame(const Frame& f, const char* what) {
    cap_problem(
        f.cut() ? fmt::format(
                      "frame {}: truncated by snaplen {} (caplen {} of {} octets); {} incomplete",
                      f.number, f.snaplen, f.caplen, f.len, what)
                : fmt::format("frame {}: {} incomplete (frame of {} octets)", f.number, what,
                              f.caplen));
    return false;
  }

  // RFC 791 §3.1.
  bool ipv4(const Frame& f, ByteSpan net) {
    ByteReader r(net);
    const std::uint8_t vihl = r.u8();
    r.skip(1);  // type of service
    const std::uint16_t total = r.be16();
    const std::uint16_t id = r.be16();
    const std::uint16_t frag = r.be16();
    r.skip(1);  // time to live
    const std::uint8_t proto = r.u8();
    r.skip(2);  // header checksum
    const ByteSpan src = r.bytes(4), dst = r.bytes(4);
    if (!r.ok()) return short_frame(f, "IPv4 header");
    if ((vihl >> 4) != 4)
      return malformed(f, fmt::format("IP version {} in an IPv4 frame", vihl >> 4));
    const std::size_t ihl = std::size_t{vihl & 0x0fu} * 4;
    if (ihl < 20) return malformed(f, fmt::format("IPv4 header length {} below 20", ihl));
    // A total length of 0 is what TCP segmentation offload leaves in captures of the sender.
    const std::size_t declared = total == 0 ? net.size() : total;
    if (declared < ihl) {
      return malformed(f,
                       fmt::format("IPv4 total length {} below header length {}", declared, ihl));
    }
    if (proto != kProtoTcp) return false;
    if (net.size() < ihl) return short_frame(f, "IPv4 options");

    IpPacket p;
    p.src.addr = {};
    p.dst.addr = {};
    std::copy(src.begin(), src.end(), p.src.addr.begin());
    std::copy(dst.begin(), dst.end(), p.dst.addr.begin());
    // Bytes beyond the total length are link-layer padding (Ethernet minimum frame size).
    p.l4 = net.subspan(ihl, std::min(net.size(), declared) - ihl);
    p.l4_declared = declared - ihl;

    // RFC 791 §3.2 fragmentation: MF flag 0x2000, offset in 8-octet units.
    const std::size_t offset = std::size_t{frag & 0x1fffu} * 8;
    const bool more = (frag & 0x2000) != 0;
    if (offset != 0 || more) {
      const std::string key = frag_key("4", src, dst, id);
      if (offset != 0) {
        return fragment_note(key, fmt::format("frame {}: IPv4 fragment (id 0x{:04x}, offset {}) "
                                              "skipped; IP fragments are not reassembled",
                                              f.number, id, offset));
      }
      p.first_fragment = true;
      p.fragment_desc = fmt::format("IPv4 first fragment (id 0x{:04x})", id);
      p.frag_key = key;
    }
    return tcp(f, p);
  }

  // RFC 8200 §3-§4: fixed header, then a chain of extension headers.
  bool ipv6(const Frame& f, ByteSpan net) {
    ByteReader r(net);
    const std::uint8_t v = r.u8();
    r.skip(3);  // traffic class, flow label
    const std::uint16_t plen = r.be16();
    std::uint8_t next = r.u8();
    r.skip(1);  // hop limit
    const ByteSpan src = r.bytes(16), dst = r.bytes(16);
    if (!r.ok()) return short_frame(f, "IPv6 header");
    if ((v >> 4) != 6) return malformed(f, fmt::format("IP version {} in an IPv6 frame", v >> 4));
    // Payload length 0 means a jumbogram (RFC 2675); take what the frame holds.
    const std::size_t declared = plen == 0 ? net.size() : 40 + std::size_t{plen};
    const ByteSpan datagram = net.subspan(0, std::min(net.size(), declared));

    IpPacket p;
    p.src.v6 = p.dst.v6 = true;
    std::copy(src.begin(), src.end(), p.src.addr.begin());
    std::copy(dst.begin(), dst.end(), p.dst.addr.begin());
    std::size_t pos = 40;
    // Each extension header makes progress of at least 8 octets, so this ends.
    while (next != kProtoTcp) {
      ByteReader h(datagram.subspan(std::min(pos, datagram.size())));
      if (next == 0 || next == 43 || next == 60 || next == 51) {
        // Hop-by-Hop (0), Routing (43), Destination Options (60): length in 8-octet units
        // not counting the first 8. AH (51, RFC 4302 §2.2): in 4-octet units minus 2.
        const std::uint8_t nh = h.u8();
        const std::uint8_t len = h.u8();
        if (!h.ok()) return v6_short(f, declared, net.size());
        pos += next == 51 ? (std::size_t{len} + 2) * 4 : (std::size_t{len} + 1) * 8;
        next = nh;
        continue;
      }
      if (next == 44) {
        // Fragment header (RFC 8200 §4.5): next header, reserved, offset(13) res(2) M(1), id.
        const std::uint8_t nh = h.u8();
        h.skip(1);
        const std::uint16_t offlg = h.be16();
        const std::uint32_t id = h.be32();
        if (!h.ok()) return v6_short(f, declared, net.size());
        pos += 8;
        next = nh;
        const std::size_t offset = static_cast<std::size_t>(offlg >> 3) * 8;
        const bool more = (offlg & 1) != 0;
        if (offset == 0 && !more) continue;  // atomic fragment (RFC 6946): a whole packet
        const std::string key = frag_key("6", src, dst, id);
        if (offset != 0) {
          return fragment_note(key, fmt::format("frame {}: IPv6 fragment (id 0x{:08x}, offset {}) "
                                                "skipped; IP fragments are not reassembled",
                                                f.number, id, offset));
        }
        p.first_fragment = true;
        p.fragment_desc = fmt::format("IPv6 first fragment (id 0x{:08x})", id);
        p.frag_key = key;
        continue;
      }
      return false;  // another upper layer (or No Next Header, 59)
    }
    if (pos > declared) return malformed(f, "IPv6 extension headers exceed the payload length");
    if (pos > datagram.size()) return v6_short(f, declared, net.size());
    p.l4 = datagram.subspan(pos);
    p.l4_declared = declared - pos;
    return tcp(f, p);
  }

  bool v6_short(const Frame& f, std::size_t declared, std::size_t available) {
    if (f.cut() || declared > available) return short_frame(f, "IPv6 extension header");
    return malformed(f, "IPv6 extension header runs past the payload length");
  }

  // RFC 793 §3.1.
  bool tcp(const Frame& f, IpPacket& p) {
    ByteReader r(p.l4);
    p.src.port = r.be16();
    p.dst.port = r.be16();
    const TcpSeq seq{r.be32()};
    const TcpSeq ack{r.be32()};
    const std::uint8_t doff = r.u8();
    const std::uint8_t flags = r.u8();
    r.skip(6);  // window, checksum, urgent pointer
    if (!r.ok()) {
      if (p.l4_declared < 20 && !p.first_fragment && p.l4.size() >= p.l4_declared) {
        return malformed(
            f, fmt::format("TCP segment of {} octets is shorter than its header", p.l4_declared));
      }
      return short_frame(f, "TCP header");
    }
    const std::size_t hlen = static_cast<std::size_t>(doff >> 4) * 4;
    if (hlen < 20 || hlen > p.l4_declared) {
      return malformed(
          f, fmt::format("TCP data offset {} invalid for a {}-octet segment", hlen, p.l4_declared));
    }
    const std::size_t payload_len = p.l4_declared - hlen;
    std::string problem;
    ByteSpan payload;
    if (p.first_fragment) {
      problem =
          fmt::format("frame {}: {}; TCP payload incomplete (IP fragments are not reassembled)",
                      f.number, p.fragment_desc);
    } else if (p.l4.size() < p.l4_declared) {
      if (payload_len > 0) {
        problem = f.cut() ? fmt::format(
                                "frame {}: truncated by snaplen {} (caplen {} of {} octets); TCP "
                                "payload incomplete",
                                f.number, f.snaplen, f.caplen, f.len)
                          : fmt::format(
                                "frame {}: IP datagram announces {} TCP octets but the frame holds "
                                "{}; TCP payload incomplete",
                                f.number, p.l4_declared, p.l4.size());
      }
    } else {
      payload = p.l4.subspan(hlen, payload_len);
    }

    TcpFlow& flow = flow_for(f, p, flags);
    const std::size_t flow_index = static_cast<std::size_t>(&flow - cap_.flows.data());
    if (p.frag_key) frag_flows_[*p.frag_key] = flow_index;
    const int d = p.src == flow.client ? 0 : 1;
    const bool syn = flags & kSyn, fin = flags & kFin, rst = flags & kRst, has_ack = flags & kAck;
    if (syn && !has_ack && d == 0 && !flow.saw_syn) {
      flow.saw_syn = true;
      flow.client_isn = seq;
    }
    if (syn && has_ack && d == 1 && !flow.saw_syn_ack) {
      flow.saw_syn_ack = true;
      flow.server_isn = seq;
    }
    if (fin || rst) ended_[flow_index] = true;
    if (!problem.empty()) flow.problems.push_back(std::move(problem));
    if (!payload.empty() || syn || fin || rst) {
      SegmentView s;
      s.frame = f.number;
      s.time_us = f.time_us;
      s.seq = seq;
      s.ack = ack;
      s.syn = syn;
      s.fin = fin;
      s.rst = rst;
      s.has_ack = has_ack;
      s.payload = payload;
      if (f.file_offset != kNotInFile && !payload.empty() && payload.data() >= f.base &&
          payload.data() + payload.size() <= f.base + f.caplen)
        s.file_offset = f.file_offset + static_cast<std::uint64_t>(payload.data() - f.base);
      sink_.on_segment(flow_index, flow, d, s);
    }
    return true;
  }

  // The flow this segment belongs to; a SYN (without ACK) on a tuple whose flow already saw
  // FIN or RST opens a new connection that reuses the ports.
  TcpFlow& flow_for(const Frame& f, const IpPacket& p, std::uint8_t flags) {
    auto a = key_of(p.src), b = key_of(p.dst);
    if (b < a) std::swap(a, b);
    const auto key = std::make_pair(a, b);
    const bool syn_only = (flags & kSyn) && !(flags & kAck);
    auto it = index_.find(key);
    if (it != index_.end() && !(syn_only && ended_[it->second])) return cap_.flows[it->second];
    TcpFlow flow;
    // The client sent the SYN; a SYN-ACK comes from the server; else the first sender.
    const bool syn_ack = (flags & kSyn) && (flags & kAck);
    flow.client = syn_ack ? p.dst : p.src;
    flow.server = syn_ack ? p.src : p.dst;
    flow.first_frame = f.number;
    cap_.flows.push_back(std::move(flow));
    ended_.push_back(false);
    index_[key] = cap_.flows.size() - 1;
    return cap_.flows.back();
  }

  bool fragment_note(const std::string& key, std::string note) {
    auto it = frag_flows_.find(key);
    if (it != frag_flows_.end()) {
      cap_.flows[it->second].problems.push_back(std::move(note));
    } else {
      cap_problem(std::move(note) + " (first fragment not seen)");
    }
    return false;
  }

  bool malformed(const Frame& f, const std::string& what) {
    cap_problem(fmt::format("frame {}: malformed: {}", f.number, what));
    return false;
  }

  void cap_problem(std::string s) { cap_.problems.push_back(std::move(s)); }

  Capture& cap_;
  SegmentSink& sink_;
  std::map<std::pair<EndpointKey, EndpointKey>, std::size_t> index_;  // tuple -> latest flow
  std::vector<bool> ended_;                                           // per flow: FIN or RST seen
  std::map<std::string, std::size_t> frag_flows_;                     // fragmented datagram -> flow
};

// libpcap reads a file through stdio, whose buffer (4 KiB) would cost a read(2) per few frames:
// a file read with payloads_in_file, and read again, goes through a buffer this large.
constexpr std::size_t kScanBuffer = 1u << 20;

struct PcapCloser {
  void operator()(pcap_t* p) const { pcap_close(p); }
};

// read_capture's sink: every segment kept with its flow (its payload, or where it lies).
class KeepAll final : public SegmentSink {
 public:
  explicit KeepAll(bool in_file) : in_file_(in_file) {}
  void on_segment(std::size_t, TcpFlow& flow, int dir, const SegmentView& v) override {
    flow.dir[static_cast<std::size_t>(dir)].push_back(kept_segment(v, in_file_));
  }

 private:
  bool in_file_;
};

// Where each frame's octets lie in the file. libpcap reads a savefile through stdio, one
// record or block per frame, so ftell() after a frame is the end of its record (pcap) or block
// (pcapng); the frame's octets are the first caplen octets after the record header (16 octets;
// 24 in the "modified" format), or after an Enhanced (or obsolete) Packet Block's 28 octets or
// a Simple Packet Block's 12. In pcapng other blocks may come before the packet's: they are
// walked over by their lengths (a pread of 8 octets per block). Anything else (an unknown
// magic, a new section, a length that does not add up) leaves the position unknown, and that
// frame's payloads are held in memory.
class FramePositions {
 public:
  explicit FramePositions(pcap_t* p) : pcap_(p), file_(pcap_file(p)) {
    if (!file_) return;
    fd_ = ::fileno(file_);
    std::uint8_t magic[4];
    if (fd_ < 0 || ::pread(fd_, magic, 4, 0) != 4) return;
    const std::uint32_t m = load_le32(magic), b = std::byteswap(m);
    if (m == 0x0a0d0d0a) {
      pcapng_ = true;
    } else if (m == 0xa1b2c3d4 || b == 0xa1b2c3d4 || m == 0xa1b23c4d || b == 0xa1b23c4d) {
      record_header_ = 16;
    } else if (m == 0xa1b2cd34 || b == 0xa1b2cd34) {
      record_header_ = 24;
    } else {
      return;
    }
    const long at = std::ftell(file_);
    if (at < 0) return;
    prev_ = static_cast<std::uint64_t>(at);
    snapshot_ = static_cast<std::uint32_t>(std::max(pcap_snapshot(p), 0));
    known_ = true;
  }

  // The file position of the first octet of the frame just read (caplen octets), or kNotInFile.
  std::uint64_t frame_read(std::uint32_t caplen) {
    if (!known_) return kNotInFile;
    // pcap records follow one another: the next starts after this one's caplen octets, unless
    // libpcap cut a record longer than the file's snapshot length to it (and skipped the rest),
    // which leaves caplen at the snapshot length: then stdio says where the record ended.
    if (!pcapng_ && caplen < snapshot_) {
      const std::uint64_t data = prev_ + record_header_;
      prev_ = data + caplen;
      return data;
    }
    const long at = std::ftell(file_);
    if (at < 0) {
      known_ = false;
      return kNotInFile;
    }
    const auto end = static_cast<std::uint64_t>(at);
    const std::uint64_t start = prev_;
    prev_ = end;
    if (end < start) return kNotInFile;
    if (!pcapng_) {
      const std::uint64_t data = start + record_header_;
      return end >= data && end - data >= caplen ? data : kNotInFile;
    }
    // (Each block's type is read: a length alone can match another block, e.g. a Simple Packet
    // Block whose stored octets libpcap cut to the interface's snaplen.)
    const bool swapped = pcap_is_swapped(pcap_) == 1;
    for (std::uint64_t pos = start; pos < end;) {
      std::uint8_t h[8];
      if (::pread(fd_, h, 8, static_cast<off_t>(pos)) != 8) return kNotInFile;
      std::uint32_t type = load_le32(h), len = load_le32(h + 4);
      if constexpr (std::endian::native == std::endian::little) {
        if (swapped) type = std::byteswap(type), len = std::byteswap(len);
      } else {
        if (!swapped) type = std::byteswap(type), len = std::byteswap(len);
      }
      if (type == 0x0a0d0d0a || len < 12 || len % 4 != 0 || len > end - pos) return kNotInFile;
      if (pos + len < end) {
        pos += len;
        continue;
      }
      std::uint64_t header = 0;
      if (type == 6 || type == 2) header = 28;  // Enhanced / obsolete Packet Block
      if (type == 3) header = 12;               // Simple Packet Block
      if (header == 0 || len < header + caplen) return kNotInFile;
      return pos + header;
    }
    return kNotInFile;
  }

 private:
  pcap_t* pcap_;
  std::FILE* file_;
  int fd_ = -1;
  bool known_ = false, pcapng_ = false;
  std::uint64_t record_header_ = 0;
  std::uint32_t snapshot_ = 0;
  std::uint64_t prev_ = 0;  // end of the previous frame's record or block
};

// libpcap on descriptor `fd` (taken: closed on failure, else with the capture), read through
// `buffer` (kScanBuffer octets, which must outlive the capture); one line naming `path` when it
// is no capture libpcap reads.
std::expected<std::unique_ptr<pcap_t, PcapCloser>, std::string> pcap_on(int fd, char* buffer,
                                                                        const std::string& path) {
  std::FILE* fp = fd < 0 ? nullptr : ::fdopen(fd, "rb");
  if (!fp) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    return std::unexpected(fmt::format("{}: {}", path, std::strerror(e)));
  }
  std::setvbuf(fp, buffer, _IOFBF, kScanBuffer);
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_fopen_offline(fp, errbuf);
  if (!p) {
    std::fclose(fp);
    return std::unexpected(path + ": " + strip_path_prefix(errbuf, path));
  }
  return std::unique_ptr<pcap_t, PcapCloser>(p);
}

// scan_capture() on a capture libpcap has opened; with `positions`, each segment says where
// its payload lies in the file (SegmentView::file_offset).
std::expected<Capture, std::string> scan_open(std::unique_ptr<pcap_t, PcapCloser> p,
                                              const std::string& path, SegmentSink& sink,
                                              bool positions);

}  // namespace

std::expected<Capture, std::string> read_capture(const std::string& path, const ReadOptions& opts) {
  // ("-" is libpcap's standard input: read once, its payloads held, unless it is copied.)
  if (!opts.payloads_in_file || (path == "-" && !opts.copy_pipe)) {
    KeepAll keep(false);
    return scan_capture(path, keep);
  }
  // (KeepAll keeps a payload in memory where the file's position of it is not known.)
  KeepAll keep(true);
  return scan_capture_file(path, keep, opts.copy_pipe);
}

std::expected<int, std::string> copy_to_unnamed_file(int fd, const std::string& path) {
  const auto made = open_unnamed_file();
  const std::string dir = made ? temp_dir() : made.error().dir;
  auto fail = [&](const char* what, int e) {
    return std::unexpected(fmt::format(
        "{}: a pipe is copied into a temporary file to be read again; {} in {}: {} (set TMPDIR "
        "to a directory with room, or give the capture as a file)",
        path, what, dir, std::strerror(e)));
  };
  if (!made) return fail("making the file", made.error().error);
  const int out = *made;
  constexpr std::size_t kChunk = 1u << 20;
  const auto buf = std::make_unique_for_overwrite<std::uint8_t[]>(kChunk);
  // A stream that does not start as a capture libpcap reads (pcap or pcapng) is not copied
  // further than its first octets: libpcap then says what it is not.
  std::size_t have = 0;  // of the first four octets
  std::uint8_t head[4] = {};
  for (;;) {
    if (have == sizeof head) {
      const std::uint32_t m = load_be32(head);
      constexpr std::uint32_t kMagics[] = {0xa1b2c3d4, 0xd4c3b2a1, 0xa1b23c4d, 0x4d3cb2a1,
                                           0xa1b2cd34, 0x34cdb2a1, 0x0a0d0d0a};
      if (std::find(std::begin(kMagics), std::end(kMagics), m) == std::end(kMagics)) break;
    }
    const ssize_t n = ::read(fd, buf.get(), kChunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(out);
      return std::unexpected(fmt::format("{}: {}", path, std::strerror(e)));
    }
    if (n == 0) break;
    for (ssize_t at = 0; at < n;) {
      const ssize_t w = ::write(out, buf.get() + at, static_cast<std::size_t>(n - at));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int e = w < 0 ? errno : ENOSPC;
        ::close(out);
        return fail("writing it", e);
      }
      at += w;
    }
    for (ssize_t i = 0; i < n && have < sizeof head; ++i) head[have++] = buf[i];
  }
  if (::lseek(out, 0, SEEK_SET) != 0) {
    const int e = errno;
    ::close(out);
    return fail("reading it back", e);
  }
  return out;
}

std::expected<Capture, std::string> scan_capture_file(const std::string& path, SegmentSink& sink,
                                                      bool copy_pipe) {
  if (path == "-" && !copy_pipe) return scan_capture(path, sink);
  // The path is opened once: libpcap reads the very file whose identity is noted (a file
  // renamed over the path meanwhile is not the one read), and a named pipe is not opened twice.
  // ("-" is standard input.)
  int fd =
      path == "-" ? ::fcntl(0, F_DUPFD_CLOEXEC, 0) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::unexpected(fmt::format("{}: {}", path, std::strerror(errno)));
  // (A pipe or a socket; a device, which may never end, is read once as it is.)
  if (struct stat st{};
      copy_pipe && ::fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
    auto copy = copy_to_unnamed_file(fd, path);
    ::close(fd);
    if (!copy) return std::unexpected(copy.error());
    fd = *copy;
  }
  auto adopted = CaptureFile::adopt(fd, path);
  if (!adopted) {
    ::close(fd);
    return std::unexpected(adopted.error());
  }
  std::shared_ptr<const CaptureFile> file = std::move(*adopted);
  // A regular file is read through a descriptor of libpcap's own; a pipe's, once, by libpcap
  // alone (its payloads are held).
  const int pcap_fd = file ? ::fcntl(fd, F_DUPFD_CLOEXEC, 0) : fd;
  // (The buffer outlives the stream: libpcap closes it before this returns.)
  const auto buffer = std::make_unique_for_overwrite<char[]>(kScanBuffer);
  auto p = pcap_on(pcap_fd, buffer.get(), path);
  if (!p) return std::unexpected(p.error());
  auto cap = scan_open(std::move(*p), path, sink, file != nullptr);
  if (cap && file) {
    // The identity noted before the scan: a file changed while it was scanned is refused too.
    if (auto why = file->changed(); !why.empty()) return std::unexpected(why);
    cap->file = std::move(file);
  }
  return cap;
}

std::expected<std::shared_ptr<const CaptureFile>, std::string> CaptureFile::adopt(
    int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return std::unexpected(fmt::format("{}: {}", path, std::strerror(errno)));
  // A pipe or a device cannot be read twice.
  if (!S_ISREG(st.st_mode)) return std::shared_ptr<const CaptureFile>();
  std::shared_ptr<CaptureFile> f(new CaptureFile(fd, path));
  f->size_ = static_cast<std::uint64_t>(st.st_size);
  f->mtime_ns_ = std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  f->ctime_ns_ = std::int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec;
  return f;
}

CaptureFile::~CaptureFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string CaptureFile::changed() const {
  struct stat now {};
  if (::fstat(fd_, &now) != 0) return fmt::format("{}: {}", path_, std::strerror(errno));
  const std::int64_t mtime = std::int64_t{now.st_mtim.tv_sec} * 1'000'000'000 + now.st_mtim.tv_nsec;
  // (The status change time too: a rewrite that set the modification time back changes it.)
  const std::int64_t ctime = std::int64_t{now.st_ctim.tv_sec} * 1'000'000'000 + now.st_ctim.tv_nsec;
  if (static_cast<std::uint64_t>(now.st_size) != size_ || mtime != mtime_ns_ || ctime != ctime_ns_)
    return fmt::format("{}: the file changed while it was being read (size {} -> {} octets{})",
                       path_, size_, static_cast<std::uint64_t>(now.st_size),
                       mtime != mtime_ns_ || ctime != ctime_ns_ ? ", modified" : "");
  // (A file replaced under the same name is not read: the open file is still the one scanned.)
  return {};
}

ByteSpan PayloadReader::payload(const TcpSegment& s) {
  if (!s.in_file()) return s.payload;
  return read(s.file_offset, s.length);
}

ByteSpan PayloadReader::read(std::uint64_t offset, std::uint32_t length) {
  if (length == 0) return {};
  served_total_ += length;
  if (offset >= window_at_ && offset - window_at_ + length <= window_.size()) {
    served_ += length;
    return ByteSpan(window_).subspan(static_cast<std::size_t>(offset - window_at_), length);
  }
  // Read ahead while the reads go forward through the file (one connection's segments in
  // capture order): a read that starts at most kNear past the last window's end reads
  // kFirstAhead, and a read-ahead window at least half served doubles the next, up to
  // kReadAhead. Otherwise (connections interleaved in the file, short connections) just what is
  // asked is read. And never more than 4 times what was served (plus kReadAhead) in all, so no
  // pattern of offsets makes a pass read much more than its own octets.
  const std::uint64_t last_end = window_at_ + window_.size();
  const bool near = !window_.empty() && offset >= last_end && offset - last_end <= kNear;
  // (What was read ahead, beyond the octets the refill was for, and how much of it was served.)
  const bool used =
      ahead_ > 0 && window_.size() > asked_ && (served_ - asked_) * 2 >= window_.size() - asked_;
  ahead_ = used ? std::min(kReadAhead, 2 * ahead_) : near ? kFirstAhead : 0;
  const std::uint64_t budget = 4 * served_total_ + kReadAhead;  // (length counted as served)
  ahead_ = static_cast<std::size_t>(
      std::min<std::uint64_t>(ahead_, budget > read_total_ ? budget - read_total_ : 0));
  served_ = length;
  asked_ = length;
  if (auto why = file_->changed(); !why.empty()) throw CaptureChanged(why);
  window_.resize(std::max<std::size_t>(ahead_, length));
  window_at_ = offset;
  std::size_t got = 0;
  while (got < window_.size()) {
    const ssize_t n = ::pread(file_->fd(), window_.data() + got, window_.size() - got,
                              static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      window_.clear();  // (nothing stale is served after an error)
      throw CaptureChanged(fmt::format("{}: reading at offset {}: {}", file_->path(), offset + got,
                                       std::strerror(e)));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  window_.resize(got);
  read_total_ += got;
  ++refills_;
  if (got < length) {
    window_.clear();
    throw CaptureChanged(fmt::format(
        "{}: the file ends at offset {}, before the {} octet(s) of payload at {} it held when read",
        file_->path(), offset + got, length, offset));
  }
  return ByteSpan(window_).first(length);
}

std::expected<Capture, std::string> scan_capture(const std::string& path, SegmentSink& sink) {
  if (path == "-") {  // libpcap's standard input
    char errbuf[PCAP_ERRBUF_SIZE] = {};
    std::unique_ptr<pcap_t, PcapCloser> p(pcap_open_offline(path.c_str(), errbuf));
    if (!p) return std::unexpected(path + ": " + strip_path_prefix(errbuf, path));
    return scan_open(std::move(p), path, sink, false);
  }
  // Through kScanBuffer, not stdio's 4 KiB (a read(2) per 4 KiB of the file otherwise). (The
  // buffer outlives the stream: libpcap closes it before this returns.)
  const auto buffer = std::make_unique_for_overwrite<char[]>(kScanBuffer);
  auto p = pcap_on(::open(path.c_str(), O_RDONLY | O_CLOEXEC), buffer.get(), path);
  if (!p) return std::unexpected(p.error());
  return scan_open(std::move(*p), path, sink, false);
}

std::expected<Capture, std::string> rescan_capture(const CaptureFile& file, SegmentSink& sink,
                                                   bool positions) {
  if (auto why = file.changed(); !why.empty()) throw CaptureChanged(why);
  // (The buffer outlives the stream: libpcap closes it before this returns.)
  const auto buffer = std::make_unique_for_overwrite<char[]>(kScanBuffer);
  // libpcap reads through a descriptor of its own (closed with it), from the start of the file:
  // the open file again, through /proc (a file position of its own, so that no other read of
  // the file moves it), checked to be the same file; without /proc, a duplicate descriptor.
  int fd = ::open(fmt::format("/proc/self/fd/{}", file.fd()).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    struct stat a {};
    struct stat b {};
    if (::fstat(fd, &a) != 0 || ::fstat(file.fd(), &b) != 0 || a.st_dev != b.st_dev ||
        a.st_ino != b.st_ino) {
      ::close(fd);
      fd = -1;
    }
  }
  if (fd < 0) {
    fd = ::fcntl(file.fd(), F_DUPFD_CLOEXEC, 0);
    if (fd >= 0 && ::lseek(fd, 0, SEEK_SET) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  auto p = pcap_on(fd, buffer.get(), file.path());
  if (!p) throw CaptureChanged(p.error() + " (reading the file again)");
  auto cap = scan_open(std::move(*p), file.path(), sink, positions);
  if (auto why = file.changed(); !why.empty()) throw CaptureChanged(why);
  return cap;
}

namespace {

std::expected<Capture, std::string> scan_open(std::unique_ptr<pcap_t, PcapCloser> p,
                                              const std::string& path, SegmentSink& sink,
                                              bool positions) {
  Capture cap;
  cap.path = path;
  cap.link_type = pcap_datalink(p.get());
  const char* name = pcap_datalink_val_to_name(cap.link_type);
  cap.link_name = name ? name : fmt::format("DLT_{}", cap.link_type);
  switch (cap.link_type) {
    case kLinkEthernet:
    case kLinkSll:
    case kLinkSll2:
    case kLinkRaw12:
    case kLinkRaw14:
    case kLinkRaw101:
    case kLinkNull:
    case kLinkLoop:
      break;
    default:
      return std::unexpected(fmt::format("{}: unsupported link type {} ({}); supported: {}", path,
                                         cap.link_name, cap.link_type, kSupported));
  }

  Reader reader(cap, sink);
  std::optional<FramePositions> where;
  if (positions) where.emplace(p.get());
  const int snaplen = pcap_snapshot(p.get());
  for (;;) {
    pcap_pkthdr* hdr = nullptr;
    const u_char* data = nullptr;
    const int rc = pcap_next_ex(p.get(), &hdr, &data);
    if (rc == PCAP_ERROR_BREAK) break;  // end of file
    if (rc != 1 || !hdr || !data) {
      cap.problems.push_back(fmt::format("frame {}: {}; rest of the file ignored", cap.frames + 1,
                                         strip_path_prefix(pcap_geterr(p.get()), path)));
      break;
    }
    Frame f;
    f.number = cap.frames + 1;
    const auto sec = hdr->ts.tv_sec < 0 ? 0 : static_cast<std::uint64_t>(hdr->ts.tv_sec);
    const auto usec = hdr->ts.tv_usec < 0 ? 0 : static_cast<std::uint64_t>(hdr->ts.tv_usec);
    f.time_us = sec * 1'000'000 + usec;
    f.caplen = hdr->caplen;
    f.len = std::max(hdr->len, hdr->caplen);
    f.snaplen = snaplen;
    f.base = data;
    if (where) f.file_offset = where->frame_read(hdr->caplen);
    reader.frame(f, ByteSpan(data, hdr->caplen));
    if (sink.done()) break;
  }
  reader.finish();
  return cap;
}

}  // namespace

TcpSegment kept_segment(const SegmentView& v, bool in_file) {
  TcpSegment s;
  s.frame = v.frame;
  s.time_us = v.time_us;
  s.seq = v.seq;
  s.ack = v.ack;
  s.syn = v.syn;
  s.fin = v.fin;
  s.rst = v.rst;
  s.has_ack = v.has_ack;
  if (in_file && v.file_offset != kNotInFile) {
    s.file_offset = v.file_offset;
    s.length = static_cast<std::uint32_t>(v.payload.size());
  } else {
    s.payload.assign(v.payload.begin(), v.payload.end());
  }
  return s;
}

TcpSeq stream_start(const TcpFlow& f, int dir) {
  if (dir == 0 && f.saw_syn) return f.client_isn + 1;
  if (dir == 1 && f.saw_syn_ack) return f.server_isn + 1;
  std::optional<TcpSeq> low;
  for (const auto& s : f.dir[dir])
    if (s.size() > 0 && (!low || s.seq < *low)) low = s.seq;
  return low.value_or(TcpSeq{0});
}

}  // namespace iwarp::trace
