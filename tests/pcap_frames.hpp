// Frames of a capture read whole (libpcap), to write back changed: the tests that make hostile
// or combined captures from generated ones (a retransmission carrying other octets, garbage
// far ahead, two connections one after the other).
#pragma once

#include <gtest/gtest.h>
#include <pcap/pcap.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace testing_support {

using PcapFrames = std::vector<std::pair<pcap_pkthdr, std::vector<u_char>>>;

inline PcapFrames frames_of(const std::string& path) {
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline(path.c_str(), err);
  EXPECT_NE(p, nullptr) << err;
  PcapFrames out;
  if (!p) return out;
  pcap_pkthdr* h = nullptr;
  const u_char* d = nullptr;
  while (pcap_next_ex(p, &h, &d) == 1) out.emplace_back(*h, std::vector<u_char>(d, d + h->caplen));
  pcap_close(p);
  return out;
}

// Writes Ethernet frames as a pcap file.
inline void write_frames(const std::string& path, const PcapFrames& frames) {
  pcap_t* dead = pcap_open_dead(DLT_EN10MB, 262144);
  pcap_dumper_t* w = pcap_dump_open(dead, path.c_str());
  ASSERT_NE(w, nullptr) << pcap_geterr(dead);
  for (const auto& [h, d] : frames) pcap_dump(reinterpret_cast<u_char*>(w), &h, d.data());
  pcap_dump_close(w);
  pcap_close(dead);
}

// Offset of the TCP payload of an Ethernet/IPv4/TCP frame, and its length.
inline std::pair<std::size_t, std::size_t> tcp_payload(const std::vector<u_char>& f) {
  const std::size_t ip = 14, ihl = (f[ip] & 0x0f) * 4u;
  const std::size_t tcp = ip + ihl, doff = (f[tcp + 12] >> 4) * 4u;
  const std::size_t total = static_cast<std::size_t>(f[ip + 2] << 8 | f[ip + 3]);
  return {tcp + doff, ip + total - (tcp + doff)};
}

}  // namespace testing_support
