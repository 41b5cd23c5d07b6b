#include "verbs_abi/unsupported.hpp"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace iwarp::verbs_abi {
namespace {

// FNV-1a (64 bit) of CALL, a separator and WHAT: the identity of a report. Zero marks a free
// slot, so a (vanishingly unlikely) zero hash is moved to 1.
std::uint64_t report_key(std::string_view call, std::string_view what) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](std::string_view s) {
    for (const char c : s) {
      h ^= static_cast<unsigned char>(c);
      h *= 0x100000001b3ULL;
    }
  };
  mix(call);
  mix(std::string_view("\0", 1));
  mix(what);
  return h == 0 ? 1 : h;
}

// The reports already made. Slots fill from the front and never empty; a slot is claimed with
// one compare-exchange, so two threads making the same report print it once (the loser finds
// the winner's key in the slot it lost) and two threads making different reports both print.
// There are far more slots than distinct reports in the libraries; should they ever run out,
// further new reports are dropped rather than risk flooding stderr.
constexpr std::size_t kSlots = 1024;
std::array<std::atomic<std::uint64_t>, kSlots> g_reported{};

// True if this is the first report with this key in this process.
bool first_report(std::uint64_t key) noexcept {
  for (auto& slot : g_reported) {
    std::uint64_t seen = slot.load(std::memory_order_acquire);
    if (seen == 0) {
      if (slot.compare_exchange_strong(seen, key, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        return true;
      }
      // Another thread claimed this slot first; `seen` now holds its key.
    }
    if (seen == key) return false;
  }
  return false;
}

// Appends `s` to buf[len..cap), truncating; returns the new length.
std::size_t append(char* buf, std::size_t len, std::size_t cap, std::string_view s) noexcept {
  const std::size_t n = s.size() < cap - len ? s.size() : cap - len;
  std::memcpy(buf + len, s.data(), n);
  return len + n;
}

}  // namespace

void report_unsupported(const char* call, const char* what) noexcept {
  const std::string_view c = call != nullptr ? call : "(unknown call)";
  const std::string_view w = what != nullptr ? what : "not supported by the emulated iWARP RNIC";
  if (!first_report(report_key(c, w))) return;

  const int saved_errno = errno;
  // One write(2) per line, so that reports from concurrent threads do not interleave.
  char line[512];
  constexpr std::size_t kCap = sizeof(line) - 1;  // room for the newline
  std::size_t len = append(line, 0, kCap, "rnic verbs: ");
  len = append(line, len, kCap, c);
  len = append(line, len, kCap, ": ");
  len = append(line, len, kCap, w);
  line[len++] = '\n';
  std::size_t done = 0;
  while (done < len) {
    const ssize_t n = ::write(STDERR_FILENO, line + done, len - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // stderr closed or full: the report is best effort
    }
  }
  errno = saved_errno;
}

}  // namespace iwarp::verbs_abi
