// What a ladder shows: one connection, some RDMAP opcodes, a time window. Opcode names are
// parsed here so that a bad one is refused before the capture is read.
#pragma once

#include <bitset>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>

namespace iwarp::ladder {

struct Filter {
  std::optional<std::size_t> connection;  // cN as `rnic decode` numbers connections
  // Opcodes drawn (bit = RDMAP opcode, RFC 5040 §4.2 / RFC 7306 §4); all when `any_opcode`.
  bool any_opcode = true;
  std::bitset<16> opcodes;
  bool mpa = true;  // the MPA Request/Reply rows (and notes): hidden by an --opcode list
                    // that does not name "mpa"
  std::optional<double> from_s, to_s;  // seconds after the model's t0, inclusive

  bool keeps_opcode(std::uint8_t op) const { return any_opcode || opcodes.test(op & 0x0F); }
  bool keeps_time(std::uint64_t rel_us) const;
};

// Parses "write,read-request,send" (names as `rnic ladder --help` lists them, or rnic
// decode's names such as "RDMA Read Response", case and spaces/dashes/underscores ignored)
// into `f`. The error names the unknown entry and lists the known ones.
std::expected<void, std::string> parse_opcodes(const std::string& list, Filter& f);

// The names parse_opcodes() takes, comma-separated (lines of at most 64 characters if `wrap`).
std::string opcode_names_help(bool wrap);

}  // namespace iwarp::ladder
