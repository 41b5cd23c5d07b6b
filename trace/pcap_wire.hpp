#pragma once
// What pcap_reader.cpp and pcap_writer.cpp both need of the frames they parse and build, and of
// libpcap's messages. Internal to trace/.
#include <algorithm>
#include <cstdint>
#include <string>

namespace iwarp::trace::pcap_wire {

inline constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr std::uint8_t kProtoTcp = 6;

// RFC 793 §3.1 control bits.
inline constexpr std::uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10;

// libpcap prefixes some messages with the file name; the caller adds it once.
inline std::string strip_path_prefix(std::string msg, const std::string& path) {
  const std::string prefix = path + ": ";
  if (msg.starts_with(prefix)) msg.erase(0, prefix.size());
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  return msg;
}

}  // namespace iwarp::trace::pcap_wire
