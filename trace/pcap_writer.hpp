// Writes the two directions of a TCP byte stream (for us: an MPA connection) as a plausible
// Ethernet/IPv4/TCP capture that Wireshark opens as real traffic: three-way handshake,
// consistent sequence and acknowledgement numbers, valid IPv4 and TCP checksums, segments no
// larger than the MSS, pure ACKs from the receiver, and a FIN exchange on close.
#pragma once

#include <array>
#include <cstdint>
#include <expected>
#include <memory>
#include <string>

#include "common/bytes.hpp"
#include "common/internet_checksum.hpp"

namespace iwarp::trace {

struct Ipv4Endpoint {
  std::array<std::uint8_t, 4> addr{127, 0, 0, 1};
  std::uint16_t port = 0;
};

enum class Side : std::uint8_t { Client = 0, Server = 1 };

struct PcapWriterOptions {
  Ipv4Endpoint client{{10, 0, 0, 1}, 40000};
  Ipv4Endpoint server{{10, 0, 0, 2}, 7174};
  std::uint16_t mss = 1460;         // largest TCP payload per frame
  std::uint32_t client_isn = 1000;  // initial sequence numbers
  std::uint32_t server_isn = 5000;
  std::uint64_t start_time_us = 1'700'000'000'000'000ull;  // first frame's timestamp
  std::uint32_t step_us = 100;                             // time between consecutive frames
  bool handshake = true;                                   // write SYN, SYN-ACK, ACK first
  // Live recording: stamp each frame with the time it is written, and flush it at once (a
  // process that is killed still leaves a readable capture).
  bool wall_clock = false;
};

class PcapWriter {
 public:
  // Opens `path` for writing (DLT_EN10MB). On failure, one line saying what and where.
  static std::expected<std::unique_ptr<PcapWriter>, std::string> open(
      const std::string& path, const PcapWriterOptions& opts = {});
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  // Sends `data` from `from`: split into MSS-sized segments, each data segment answered by
  // a pure ACK from the other side. Each call starts a new segment, so writing one FPDU per
  // call aligns FPDUs with segments as RFC 5044 §4.1 recommends (and as siw does).
  void write(Side from, ByteSpan data);
  // The same for a run of records (FPDUs) ending at `ends`: whole records are packed into
  // segments of at most the MSS, so no segment starts inside a record (RFC 5044 §8); a
  // record longer than the MSS is cut at the MSS.
  void write_records(Side from, ByteSpan data, std::span<const std::size_t> ends);
  // FIN from `from`, FIN-ACK from the other side, final ACK.
  void close(Side from = Side::Client);
  std::size_t frames() const;

 private:
  struct Impl;
  explicit PcapWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

using iwarp::internet_checksum;  // common/internet_checksum.hpp (RFC 1071)

}  // namespace iwarp::trace
