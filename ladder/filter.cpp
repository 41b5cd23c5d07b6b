#include "ladder/filter.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <string_view>

#include "ddp/rdmap_opcode.hpp"

namespace iwarp::ladder {

namespace {

struct Name {
  std::string_view name;  // short name for the command line
  int opcode;             // -1: the MPA rows
};

// Short names of RFC 5040 §4.2 / RFC 7306 §4 opcodes.
constexpr std::array<Name, 13> kNames{{
    {"write", 0x0},
    {"read-request", 0x1},
    {"read-response", 0x2},
    {"send", 0x3},
    {"send-inv", 0x4},
    {"send-se", 0x5},
    {"send-se-inv", 0x6},
    {"terminate", 0x7},
    {"imm", 0x8},
    {"imm-se", 0x9},
    {"atomic-request", 0xA},
    {"atomic-response", 0xB},
    {"mpa", -1},
}};

// Lower case, letters and digits only: "RDMA Read-Response" -> "rdmareadresponse".
std::string squash(std::string_view s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int lookup(std::string_view word) {
  const std::string w = squash(word);
  if (w.empty()) return -2;
  for (const auto& n : kNames)
    if (squash(n.name) == w) return n.opcode;
  for (int op = 0; op <= rdmap::kMaxOpcode; ++op)
    if (squash(rdmap::opcode_name(static_cast<std::uint8_t>(op))) == w) return op;
  return -2;
}

}  // namespace

bool Filter::keeps_time(std::uint64_t rel_us) const {
  const double t = static_cast<double>(rel_us) / 1e6;
  if (from_s && t < *from_s) return false;
  if (to_s && t > *to_s) return false;
  return true;
}

std::expected<void, std::string> parse_opcodes(const std::string& list, Filter& f) {
  f.any_opcode = false;
  f.opcodes.reset();
  f.mpa = false;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string_view word(list.data() + start, comma - start);
    const int op = lookup(word);
    if (op == -2)
      return std::unexpected(
          fmt::format("unknown opcode name '{}' (known: {})", word, opcode_names_help(false)));
    if (op == -1)
      f.mpa = true;
    else
      f.opcodes.set(static_cast<std::size_t>(op));
    start = comma + 1;
  }
  return {};
}

std::string opcode_names_help(bool wrap) {
  std::string s;
  std::size_t line = 0;  // characters on the current line
  for (const auto& n : kNames) {
    if (!s.empty()) {
      s += ",";
      ++line;
      if (wrap && line + n.name.size() + 1 > 64) {
        s += "\n";
        line = 0;
      } else {
        s += " ";
        ++line;
      }
    }
    s += n.name;
    line += n.name.size();
  }
  return s;
}

}  // namespace iwarp::ladder
