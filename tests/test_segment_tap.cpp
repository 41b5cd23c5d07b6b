// The real-segment mode's frame parser (rnic/segment_tap.cpp) on frames from the wire, which
// may be anything: real frames (written by our PcapWriter, whose checksums tshark checks) parse
// to the right flow, sequence number and payload; every cut, every flipped bit of the checksummed
// part and every bad header length is refused, never read beyond the frame, never placed.
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "rnic/segment_tap.hpp"
#include "trace/pcap_writer.hpp"

namespace iwarp::rnic {
namespace {

using Frame = SegmentTap::Frame;

// The frames of a short connection: handshake, one data segment each way, FIN.
std::vector<Bytes> sample_frames(const Bytes& client_data) {
  const auto path =
      (std::filesystem::temp_directory_path() / ("segtap_" + std::to_string(getpid()) + ".pcap"))
          .string();
  {
    trace::PcapWriterOptions o;
    o.client = {{10, 77, 0, 1}, 40001};
    o.server = {{10, 77, 0, 2}, 7175};
    o.client_isn = 0xfffffff0u;  // the stream's sequence numbers wrap
    auto w = trace::PcapWriter::open(path, o);
    EXPECT_TRUE(w) << w.error();
    if (!w) return {};
    (*w)->write(trace::Side::Client, client_data);
    (*w)->write(trace::Side::Server, Bytes{1, 2, 3});
    (*w)->close(trace::Side::Client);
  }
  std::vector<Bytes> out;
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline(path.c_str(), err);
  EXPECT_NE(p, nullptr) << err;
  if (!p) return out;
  pcap_pkthdr* h;
  const u_char* d;
  while (pcap_next_ex(p, &h, &d) == 1) out.emplace_back(d, d + h->caplen);
  pcap_close(p);
  std::filesystem::remove(path);
  return out;
}

Bytes payload_of(const Bytes& f) {
  SegmentTap::Segment s;
  if (SegmentTap::parse_frame(f, false, s) != Frame::Tcp) return {};
  return Bytes(s.payload.begin(), s.payload.end());
}

// The frame of `frames` that carries `n` octets of payload (nullptr: none).
const Bytes* data_frame(const std::vector<Bytes>& frames, std::size_t n) {
  for (const auto& f : frames)
    if (payload_of(f).size() == n) return &f;
  return nullptr;
}

TEST(SegmentTapFrame, RealFramesParseToTheirFlowSequenceAndPayload) {
  const Bytes data{'F', 'P', 'D', 'U', 0, 1, 2, 3, 4, 5};
  const auto frames = sample_frames(data);
  ASSERT_GE(frames.size(), 4u);
  SegmentTap::Segment syn;
  ASSERT_EQ(SegmentTap::parse_frame(frames[0], false, syn), Frame::Tcp);
  EXPECT_TRUE(syn.syn);
  EXPECT_EQ(syn.seq, TcpSeq{0xfffffff0u}) << "a SYN carries the sender's ISN";
  const SegmentTap::FlowKey c2s{10, 77, 0, 1, 0x9c, 0x41, 10, 77, 0, 2, 0x1c, 0x07};
  EXPECT_EQ(syn.key, c2s);
  bool found = false;
  for (const auto& f : frames) {
    SegmentTap::Segment s;
    ASSERT_EQ(SegmentTap::parse_frame(f, false, s), Frame::Tcp);
    if (s.payload.size() == data.size()) {
      found = true;
      EXPECT_FALSE(s.syn);
      EXPECT_EQ(s.key, c2s);
      EXPECT_EQ(s.seq, TcpSeq{0xfffffff1u}) << "data starts at ISN + 1";
      EXPECT_TRUE(std::equal(s.payload.begin(), s.payload.end(), data.begin()));
    }
  }
  EXPECT_TRUE(found);
}

TEST(SegmentTapFrame, EveryCutOfAFrameIsRefused) {
  const auto frames = sample_frames(Bytes(300, 0xab));
  const Bytes* data = data_frame(frames, 300);
  ASSERT_NE(data, nullptr);
  for (std::size_t cut = 0; cut < data->size(); ++cut) {
    SegmentTap::Segment s;
    const Bytes f(data->begin(), data->begin() + static_cast<std::ptrdiff_t>(cut));
    EXPECT_NE(SegmentTap::parse_frame(f, true, s), Frame::Tcp) << "cut at " << cut;
  }
}

TEST(SegmentTapFrame, AFlippedBitFailsTheChecksumUnlessTheKernelVouchedForIt) {
  const auto frames = sample_frames(Bytes(64, 0x5a));
  const Bytes* data = data_frame(frames, 64);
  ASSERT_NE(data, nullptr);
  // Every bit of the IPv4 header (its own checksum; the addresses are in the TCP pseudo header
  // too), of the TCP header and of the payload.
  constexpr std::size_t kIpStart = 14;
  std::size_t refused = 0, tried = 0;
  for (std::size_t i = kIpStart; i < data->size(); ++i) {
    for (int b = 0; b < 8; ++b) {
      Bytes f = *data;
      f[i] ^= static_cast<std::uint8_t>(1u << b);
      SegmentTap::Segment s;
      const auto v = SegmentTap::parse_frame(f, false, s);
      ++tried;
      if (v == Frame::Tcp) {
        ADD_FAILURE() << "bit " << b << " of octet " << i << " flipped and still accepted";
      } else {
        ++refused;
      }
    }
  }
  EXPECT_EQ(refused, tried);
  // The kernel checked it already (TP_STATUS_CSUM_VALID): the sum is not recomputed.
  Bytes f = *data;
  f.back() ^= 1;
  SegmentTap::Segment s;
  EXPECT_EQ(SegmentTap::parse_frame(f, true, s), Frame::Tcp);
}

TEST(SegmentTapFrame, ResetIsFlagged) {
  const auto frames = sample_frames(Bytes(16, 2));
  const Bytes* data = data_frame(frames, 16);
  ASSERT_NE(data, nullptr);
  Bytes f = *data;
  f[14 + 20 + 13] |= 0x04;  // RST (the checksum no longer matches: the kernel vouched)
  SegmentTap::Segment s;
  ASSERT_EQ(SegmentTap::parse_frame(f, true, s), Frame::Tcp);
  EXPECT_TRUE(s.rst) << "a RST's octets are never taken as data (on_frame drops it)";
}

TEST(SegmentTapFrame, BadHeaderFieldsAreMalformedOrNotOurs) {
  const auto frames = sample_frames(Bytes(32, 1));
  const Bytes* data = data_frame(frames, 32);
  ASSERT_NE(data, nullptr);
  auto with = [&](std::size_t at, std::uint8_t v) {
    Bytes f = *data;
    f[at] = v;
    SegmentTap::Segment s;
    return SegmentTap::parse_frame(f, true, s);
  };
  EXPECT_EQ(with(14, 0x44), Frame::Malformed) << "IHL 4 (16 octets) is below the minimum";
  EXPECT_EQ(with(14, 0x4f), Frame::Malformed)
      << "IHL 15 runs into the TCP header, doff no longer fits";
  EXPECT_EQ(with(14, 0x65), Frame::Malformed) << "IP version 6 in an IPv4 frame";
  EXPECT_EQ(with(16, 0xff), Frame::Malformed) << "total length beyond the frame";
  EXPECT_EQ(with(17, 0x05), Frame::Malformed) << "total length below the header";
  EXPECT_EQ(with(23, 17), Frame::Other) << "UDP";
  EXPECT_EQ(with(20, 0x20), Frame::Other) << "more fragments";
  EXPECT_EQ(with(14 + 20 + 12, 0x40), Frame::Malformed) << "data offset 4";
  EXPECT_EQ(with(14 + 20 + 12, 0xf0), Frame::Malformed) << "data offset 15 beyond the segment";
  EXPECT_EQ(with(12, 0x86), Frame::Other) << "not IPv4";
}

TEST(SegmentTapFrame, RandomMutationsNeverEscapeTheFrame) {
  const auto frames = sample_frames(Bytes(200, 7));
  std::mt19937 rng(17);
  std::size_t accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    Bytes f = frames[rng() % frames.size()];
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) f[rng() % f.size()] = static_cast<std::uint8_t>(rng());
    if (rng() % 4 == 0) f.resize(rng() % (f.size() + 1));
    SegmentTap::Segment s;
    if (SegmentTap::parse_frame(f, rng() % 2 == 0, s) == Frame::Tcp) {
      ++accepted;
      ASSERT_GE(s.payload.data(), f.data());
      ASSERT_LE(s.payload.data() + s.payload.size(), f.data() + f.size());
    }
  }
  EXPECT_GT(accepted, 0u) << "some mutations leave a valid frame (e.g. in the Ethernet addresses)";
}

}  // namespace
}  // namespace iwarp::rnic
