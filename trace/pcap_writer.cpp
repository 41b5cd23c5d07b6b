// Synthesises an Ethernet/IPv4/TCP conversation around two byte streams and writes it with
// libpcap. Every field is written explicitly with the helpers of common/bytes.hpp.
#include "trace/pcap_writer.hpp"
#include "trace/pcap_wire.hpp"

#include <chrono>

#include <pcap/pcap.h>

#include <algorithm>
#include <utility>

namespace iwarp::trace {
namespace {

constexpr int kSnapLen = 262144;
constexpr std::size_t kEthHeader = 14;
constexpr std::size_t kIpv4Header = 20;  // no options
constexpr std::size_t kTcpHeader = 20;   // without options
using namespace pcap_wire;

// Locally administered (bit 1 of the first octet), unicast (bit 0 clear) MAC addresses.
constexpr std::array<std::uint8_t, 6> kMac[2] = {{0x02, 0x00, 0x00, 0x00, 0x00, 0x01},
                                                 {0x02, 0x00, 0x00, 0x00, 0x00, 0x02}};

}  // namespace

struct PcapWriter::Impl {
  pcap_t* dead = nullptr;
  pcap_dumper_t* dumper = nullptr;
  PcapWriterOptions opts;
  std::uint16_t mss = 1;                   // effective MSS, 1 .. 65495
  std::array<std::uint32_t, 2> snd_nxt{};  // next sequence number each side sends
  std::array<std::uint16_t, 2> ip_id{};
  std::size_t frames = 0;
  bool fin_done = false;

  ~Impl() {
    finish();
    if (dead) pcap_close(dead);
  }

  void finish() {
    if (!dumper) return;
    pcap_dump_flush(dumper);
    pcap_dump_close(dumper);
    dumper = nullptr;
  }

  const Ipv4Endpoint& endpoint(Side s) const {
    return s == Side::Client ? opts.client : opts.server;
  }

  // Writes one frame from `from` to the other side.
  void emit(Side from, std::uint8_t flags, std::uint32_t seq, std::uint32_t ack, ByteSpan payload) {
    if (!dumper) return;
    const Side to = from == Side::Client ? Side::Server : Side::Client;
    const auto fi = static_cast<std::size_t>(from), ti = static_cast<std::size_t>(to);
    const Ipv4Endpoint& src = endpoint(from);
    const Ipv4Endpoint& dst = endpoint(to);
    // RFC 793 §3.1 / RFC 879: the MSS option only on segments with SYN set.
    const bool mss_option = (flags & kSyn) != 0;
    const std::size_t tcp_len = kTcpHeader + (mss_option ? 4 : 0) + payload.size();
    const auto ip_total = static_cast<std::uint16_t>(kIpv4Header + tcp_len);

    Bytes f;
    f.reserve(kEthHeader + ip_total);
    ByteWriter w(f);
    // Ethernet II: destination, source, EtherType.
    w.bytes(kMac[ti]);
    w.bytes(kMac[fi]);
    w.be16(kEtherTypeIpv4);

    // RFC 791 §3.1 Internet header, IHL 5 (no options).
    const std::size_t ip_off = f.size();
    w.u8(0x45);           // version 4, IHL 5
    w.u8(0);              // type of service
    w.be16(ip_total);     // total length
    w.be16(ip_id[fi]++);  // identification, one counter per sender
    w.be16(0x4000);       // flags: DF; fragment offset 0
    w.u8(64);             // time to live
    w.u8(kProtoTcp);      // protocol
    w.be16(0);            // header checksum, filled below
    w.bytes(src.addr);
    w.bytes(dst.addr);
    store_be16(&f[ip_off + 10], internet_checksum(ByteSpan(f).subspan(ip_off, kIpv4Header)));

    // RFC 793 §3.1 TCP header.
    const std::size_t tcp_off = f.size();
    w.be16(src.port);
    w.be16(dst.port);
    w.be32(seq);
    w.be32(ack);
    w.u8(static_cast<std::uint8_t>(((kTcpHeader + (mss_option ? 4 : 0)) / 4) << 4));  // data offset
    w.u8(flags);
    w.be16(65535);  // window
    w.be16(0);      // checksum, filled below
    w.be16(0);      // urgent pointer
    if (mss_option) {
      w.u8(2);  // kind: maximum segment size
      w.u8(4);  // length
      w.be16(mss);
    }
    w.bytes(payload);

    // RFC 793 §3.1: the checksum covers a pseudo header of source address, destination
    // address, zero, protocol and TCP length, then the TCP header and text.
    Bytes pseudo;
    ByteWriter pw(pseudo);
    pw.bytes(src.addr);
    pw.bytes(dst.addr);
    pw.u8(0);
    pw.u8(kProtoTcp);
    pw.be16(static_cast<std::uint16_t>(tcp_len));
    const std::uint32_t pseudo_sum = checksum_fold(checksum_add_words(pseudo, 0));
    store_be16(&f[tcp_off + 16], internet_checksum(ByteSpan(f).subspan(tcp_off), pseudo_sum));

    const std::uint64_t t =
        opts.wall_clock
            ? static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count())
            : opts.start_time_us + std::uint64_t{opts.step_us} * frames;
    pcap_pkthdr hdr{};
    hdr.ts.tv_sec = static_cast<decltype(hdr.ts.tv_sec)>(t / 1'000'000);
    hdr.ts.tv_usec = static_cast<decltype(hdr.ts.tv_usec)>(t % 1'000'000);
    hdr.caplen = static_cast<bpf_u_int32>(f.size());
    hdr.len = hdr.caplen;
    pcap_dump(reinterpret_cast<u_char*>(dumper), &hdr, f.data());
    if (opts.wall_clock) pcap_dump_flush(dumper);
    ++frames;
  }
};

PcapWriter::PcapWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PcapWriter::~PcapWriter() = default;

std::expected<std::unique_ptr<PcapWriter>, std::string> PcapWriter::open(
    const std::string& path, const PcapWriterOptions& opts) {
  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  // The IPv4 total length is 16 bits: at most 65535 - 20 - 20 octets of TCP payload.
  impl->mss = static_cast<std::uint16_t>(
      std::clamp<unsigned>(opts.mss, 1u, 65535u - kIpv4Header - kTcpHeader));
  impl->dead = pcap_open_dead(DLT_EN10MB, kSnapLen);
  if (!impl->dead)
    return std::unexpected("cannot write capture " + path + ": pcap_open_dead failed");
  impl->dumper = pcap_dump_open(impl->dead, path.c_str());
  if (!impl->dumper) {
    return std::unexpected("cannot write capture " + path + ": " +
                           strip_path_prefix(pcap_geterr(impl->dead), path));
  }
  // RFC 793 §3.4: the SYN occupies one sequence number, so data starts at ISN + 1. Without a
  // handshake the capture simply begins after it.
  impl->snd_nxt = {opts.client_isn + 1, opts.server_isn + 1};
  impl->ip_id = {1, 1};
  if (opts.handshake) {
    impl->emit(Side::Client, kSyn, opts.client_isn, 0, {});
    impl->emit(Side::Server, kSyn | kAck, opts.server_isn, opts.client_isn + 1, {});
    impl->emit(Side::Client, kAck, opts.client_isn + 1, opts.server_isn + 1, {});
  }
  return std::unique_ptr<PcapWriter>(new PcapWriter(std::move(impl)));
}

void PcapWriter::write(Side from, ByteSpan data) {
  Impl& m = *impl_;
  if (m.fin_done) return;  // nothing may follow our FIN
  const auto fi = static_cast<std::size_t>(from);
  const std::size_t ti = 1 - fi;
  const Side to = from == Side::Client ? Side::Server : Side::Client;
  for (std::size_t off = 0; off < data.size(); off += m.mss) {
    const ByteSpan seg = data.subspan(off, std::min<std::size_t>(m.mss, data.size() - off));
    m.emit(from, kPsh | kAck, m.snd_nxt[fi], m.snd_nxt[ti], seg);
    m.snd_nxt[fi] += static_cast<std::uint32_t>(seg.size());
    // The receiver acknowledges every segment (RFC 793 §3.7 / RFC 1122 §4.2.3.2 would allow
    // delaying; acknowledging each keeps the capture simple to follow).
    m.emit(to, kAck, m.snd_nxt[ti], m.snd_nxt[fi], {});
  }
}

void PcapWriter::write_records(Side from, ByteSpan data, std::span<const std::size_t> ends) {
  const std::size_t mss = impl_->mss;
  std::size_t seg = 0, prev = 0;  // the segment being packed: [seg, prev)
  for (std::size_t e : ends) {
    e = std::min(e, data.size());
    if (e <= prev) continue;
    if (e - seg > mss) {
      if (prev > seg) write(from, data.subspan(seg, prev - seg));
      seg = prev;
      if (e - seg > mss) {  // longer than a segment on its own
        write(from, data.subspan(seg, e - seg));
        seg = e;
      }
    }
    prev = e;
  }
  if (data.size() > seg) write(from, data.subspan(seg));
}

void PcapWriter::close(Side from) {
  Impl& m = *impl_;
  if (!m.fin_done) {
    m.fin_done = true;
    const auto fi = static_cast<std::size_t>(from);
    const std::size_t ti = 1 - fi;
    const Side to = from == Side::Client ? Side::Server : Side::Client;
    // RFC 793 §3.5: FIN consumes one sequence number on each side.
    m.emit(from, kFin | kAck, m.snd_nxt[fi], m.snd_nxt[ti], {});
    m.snd_nxt[fi] += 1;
    m.emit(to, kFin | kAck, m.snd_nxt[ti], m.snd_nxt[fi], {});
    m.snd_nxt[ti] += 1;
    m.emit(from, kAck, m.snd_nxt[fi], m.snd_nxt[ti], {});
  }
  m.finish();
}

std::size_t PcapWriter::frames() const {
  return impl_->frames;
}

}  // namespace iwarp::trace
