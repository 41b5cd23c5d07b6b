// Helpers shared by the libFuzzer targets in fuzz/: a cursor over the fuzz input that never
// fails (missing octets read as zero), a small deterministic PRNG seeded from the input, an
// invariant check that aborts with a message (libFuzzer then saves the input as a crash), and
// quiet logging.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "common/bytes.hpp"
#include "common/log.hpp"

namespace iwarp::fuzz {

// Aborts with a message when an invariant does not hold. Used instead of assert() so the
// checks stay in RelWithDebInfo builds.
#define FUZZ_CHECK(cond, ...)                                                                \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                     \
      std::fprintf(stderr, "\n");                                                            \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

// Reads the fuzz input front to back. Past the end every read returns zero / empty, so a
// harness never has to check lengths.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data, size) {}
  explicit Input(ByteSpan data) : data_(data) {}

  std::uint8_t u8() { return pos_ < data_.size() ? data_[pos_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>((u8() << 8) | u8()); }
  std::uint32_t u32() { return (std::uint32_t{u16()} << 16) | u16(); }
  bool flag() { return u8() & 1; }
  // Up to n octets (fewer at the end of the input).
  ByteSpan take(std::size_t n) {
    n = std::min(n, remaining());
    ByteSpan s = data_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  ByteSpan rest() { return take(remaining()); }
  std::size_t remaining() const { return data_.size() - pos_; }
  bool empty() const { return remaining() == 0; }

 private:
  ByteSpan data_;
  std::size_t pos_ = 0;
};

// splitmix64: deterministic choices (chunk sizes, orders) from a seed the input holds.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform-ish in [0, n) (n > 0).
  std::size_t below(std::size_t n) { return n ? static_cast<std::size_t>(next() % n) : 0; }

 private:
  std::uint64_t s_;
};

// FNV-1a, to compare what two runs saw without keeping every octet.
inline std::uint64_t fnv(std::uint64_t h, ByteSpan b) {
  for (auto c : b) h = (h ^ c) * 0x100000001b3ull;
  return h;
}
inline std::uint64_t fnv_u64(std::uint64_t h, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return h;
}
inline constexpr std::uint64_t kFnvBasis = 0xcbf29ce484222325ull;

// Checks switched off for bugs that are reported but not fixed yet, named in the environment:
// IWARP_FUZZ_KNOWN_BUGS=name,name (scripts/fuzz.sh sets it from fuzz/known_bugs.txt), so the
// fuzzer can look beyond them. Every other check stays on.
inline bool known_bug(std::string_view name) {
  static const std::string list = [] {
    const char* e = std::getenv("IWARP_FUZZ_KNOWN_BUGS");
    return "," + std::string(e ? e : "") + ",";
  }();
  return list.find("," + std::string(name) + ",") != std::string::npos;
}

// Logging off (every harness calls this once): a fuzzer run produces millions of protocol
// errors, and formatting them to stderr would dominate the time.
inline void quiet_logs() {
  static const bool done = [] {
    log::configure("off");
    return true;
  }();
  (void)done;
}

}  // namespace iwarp::fuzz
