// Writes a scripted iWARP conversation as a capture: the MPA exchange for the given policies,
// then every RDMAP message type in both directions (multi-segment where the type allows),
// encoded by our own MPA/DDP/RDMAP encoders and framed by PcapWriter one FPDU per segment.
// Used for the sample traces in pcap_traces/ and to check our encoders against tshark.
#pragma once

#include <cstdint>
#include <expected>
#include <map>
#include <string>

#include "mpa/negotiation.hpp"
#include "trace/pcap_writer.hpp"

namespace iwarp::trace {

struct GeneratorOptions {
  mpa::Policy initiator;
  mpa::Policy responder;
  PcapWriterOptions pcap;  // pcap.mss also sets each direction's MULPDU
  std::uint32_t seed = 1;  // payload contents
  // Octets of bulk RDMA Write payload (messages of bulk_message octets from the initiator to one
  // STag, cycling over 1 MiB of tagged offsets) written before the closing Terminate: a capture
  // of any size whose replay needs a fixed 1 MiB of shadow memory (scripts/replay-bench.sh).
  // 0: none.
  std::uint64_t bulk_bytes = 0;
  std::uint64_t bulk_message = kBulkMessage;  // 1 .. kBulkSpan
  static constexpr std::uint64_t kBulkMessage = 64 * 1024, kBulkSpan = 1024 * 1024;
};

struct GeneratedTrace {
  mpa::ConnectionParams params;
  std::map<std::string, std::uint64_t> opcode_counts;  // FPDUs per RDMAP opcode name
  std::uint64_t fpdus = 0;
};

std::expected<GeneratedTrace, std::string> generate_conversation(const std::string& path,
                                                                 const GeneratorOptions& opts);

}  // namespace iwarp::trace
