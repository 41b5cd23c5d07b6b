#include "common/wire_error.hpp"

#include <fmt/format.h>

#include <array>

#include "common/bytes.hpp"

namespace iwarp {

namespace {

struct ErrcInfo {
  TermCode term;
  std::string_view name;
};

constexpr TermLayer kR = TermLayer::Rdmap;
constexpr TermLayer kD = TermLayer::Ddp;
constexpr TermLayer kL = TermLayer::Llp;

// Indexed by Errc; the order must follow the enum.
constexpr std::array<ErrcInfo, 33> kInfo{{
    {{kL, 0, 0x01}, "MPA: TCP connection closed, terminated or lost"},
    {{kL, 0, 0x02}, "MPA: CRC mismatch"},
    {{kL, 0, 0x03}, "MPA: Marker and ULPDU length mismatch"},
    {{kL, 0, 0x04}, "MPA: invalid Request or Reply frame"},
    {{kL, 0, 0x05}, "MPA: local catastrophic error"},
    {{kL, 0, 0x06}, "MPA: insufficient IRD resources"},
    {{kL, 0, 0x07}, "MPA: no matching RTR model"},
    {{kD, 0, 0x00}, "DDP: local catastrophic error"},
    {{kD, 1, 0x00}, "DDP tagged: invalid STag"},
    {{kD, 1, 0x01}, "DDP tagged: base or bounds violation"},
    {{kD, 1, 0x02}, "DDP tagged: STag not associated with DDP stream"},
    {{kD, 1, 0x03}, "DDP tagged: TO wrap"},
    {{kD, 1, 0x04}, "DDP tagged: invalid DDP version"},
    {{kD, 2, 0x01}, "DDP untagged: invalid QN"},
    {{kD, 2, 0x02}, "DDP untagged: invalid MSN, no buffer available"},
    {{kD, 2, 0x03}, "DDP untagged: invalid MSN, MSN range not valid"},
    {{kD, 2, 0x04}, "DDP untagged: invalid MO"},
    {{kD, 2, 0x05}, "DDP untagged: message too long for available buffer"},
    {{kD, 2, 0x06}, "DDP untagged: invalid DDP version"},
    {{kR, 0, 0x00}, "RDMAP: local catastrophic error"},
    {{kR, 1, 0x00}, "RDMAP protection: invalid STag"},
    {{kR, 1, 0x01}, "RDMAP protection: base or bounds violation"},
    {{kR, 1, 0x02}, "RDMAP protection: access rights violation"},
    {{kR, 1, 0x03}, "RDMAP protection: STag not associated with RDMAP stream"},
    {{kR, 1, 0x04}, "RDMAP protection: TO wrap"},
    {{kR, 1, 0x09}, "RDMAP protection: STag cannot be invalidated"},
    {{kR, 1, 0xff}, "RDMAP protection: unspecified"},
    {{kR, 2, 0x05}, "RDMAP operation: invalid RDMAP version"},
    {{kR, 2, 0x06}, "RDMAP operation: unexpected opcode"},
    {{kR, 2, 0x07}, "RDMAP operation: catastrophic error, localized to RDMAP stream"},
    {{kR, 2, 0x08}, "RDMAP operation: catastrophic error, global"},
    {{kR, 2, 0x09}, "RDMAP operation: STag cannot be invalidated"},
    {{kR, 2, 0xff}, "RDMAP operation: unspecified"},
}};

static_assert(static_cast<std::size_t>(Errc::RdmapOpUnspecified) + 1 == kInfo.size());

}  // namespace

TermCode term_code(Errc e) {
  return kInfo[static_cast<std::size_t>(e)].term;
}

std::string_view errc_name(Errc e) {
  return kInfo[static_cast<std::size_t>(e)].name;
}

std::string describe_term(std::uint8_t layer, std::uint8_t etype, std::uint8_t ecode) {
  for (const auto& i : kInfo) {
    if (static_cast<std::uint8_t>(i.term.layer) == layer && i.term.etype == etype &&
        i.term.ecode == ecode)
      return std::string(i.name);
  }
  // RFC 5040 §7.4.1: a local catastrophic error uses any error code.
  if (layer == 0 && etype == 0) return "RDMAP: local catastrophic error";
  return fmt::format("unknown Terminate layer {} etype {} code 0x{:02x}", layer, etype, ecode);
}

std::string WireError::to_string() const {
  auto t = term_code(code);
  std::string s = fmt::format("{} [Terminate layer {} etype {} code 0x{:02x}] ({})",
                              errc_name(code), static_cast<int>(t.layer), t.etype, t.ecode, rule);
  if (!detail.empty()) s += ": " + detail;
  return s;
}

std::string hex(ByteSpan b, std::size_t max_bytes) {
  std::string s;
  std::size_t n = std::min(b.size(), max_bytes);
  s.reserve(n * 3 + 4);
  for (std::size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += fmt::format("{:02x}", b[i]);
  }
  if (b.size() > n) s += " ...";
  return s;
}

}  // namespace iwarp
