#include "verbs_abi/settings.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>

#include "capture/pcap_tap.hpp"
#include "common/log.hpp"
#include "rnic/segment_tap.hpp"

namespace iwarp::verbs_abi {

namespace {
std::atomic<bool> tap_forked{false};  // set in a child fork()ed after the tap was opened
}  // namespace

// The program's name, for capture file names ("ib_write_bw-4242.pcap").
std::string program_name() {
  std::ifstream f("/proc/self/comm");
  std::string s;
  std::getline(f, s);
  return s.empty() ? std::string("program") : s;
}

Settings parse_settings(const char* (*get)(const char*)) {
  Settings s;
  auto& pol = s.cm.policy;
  auto fail = [&](const char* var, const char* value, const std::string& expected) {
    if (s.error.empty())
      s.error = fmt::format("{}={}: expected {}", var, value ? value : "", expected);
  };
  if (const char* v = get("RNIC_DEVICE"); v && *v) {
    if (std::strlen(v) >= 64)
      fail("RNIC_DEVICE", v, "a name shorter than 64 characters");
    else
      s.device_name = v;
  }
  if (const char* v = get("RNIC_MPA_REV"); v && *v) {
    if (std::strcmp(v, "1") == 0)
      pol.revision = 1;
    else if (std::strcmp(v, "2") == 0)
      pol.revision = 2;
    else
      fail("RNIC_MPA_REV", v, "1 or 2");
  }
  if (const char* v = get("RNIC_CRC"); v && *v) {
    if (std::strcmp(v, "required") == 0)
      pol.crc = mpa::CrcPolicy::Required;
    else if (std::strcmp(v, "optional") == 0)
      pol.crc = mpa::CrcPolicy::Optional;
    else if (std::strcmp(v, "off") == 0)
      pol.crc = mpa::CrcPolicy::Off;
    else
      fail("RNIC_CRC", v, "required, optional or off");
  }
  if (const char* v = get("RNIC_MARKERS"); v && *v) {
    if (std::strcmp(v, "required") == 0)
      pol.markers = mpa::MarkerPolicy::Required;
    else if (std::strcmp(v, "optional") == 0)
      pol.markers = mpa::MarkerPolicy::Optional;
    else if (std::strcmp(v, "off") == 0)
      pol.markers = mpa::MarkerPolicy::Off;
    else
      fail("RNIC_MARKERS", v, "required, optional or off");
  }
  // Peer-to-peer mode by default: programs such as ucmatose have the responder send first,
  // which RFC 5044 §7.1 forbids before the initiator's first FPDU unless RFC 6581's RTR comes
  // first. A peer that does not speak it just does not negotiate it.
  pol.peer_to_peer = pol.revision >= 2;
  if (const char* v = get("RNIC_P2P"); v && *v) {
    if (std::strcmp(v, "1") == 0) {
      pol.peer_to_peer = true;
      if (pol.revision < 2)
        fail("RNIC_P2P", v, "RNIC_MPA_REV=2 with it (peer-to-peer mode is RFC 6581)");
    } else if (std::strcmp(v, "0") == 0) {
      pol.peer_to_peer = false;
    } else {
      fail("RNIC_P2P", v, "0 or 1");
    }
  }
  if (const char* v = get("RNIC_RTR"); pol.peer_to_peer && v && *v) {
    const std::string rtr = v;
    if (rtr == "write")
      pol.rtr = static_cast<mpa::RtrMask>(mpa::RtrType::Write);
    else if (rtr == "read")
      pol.rtr = static_cast<mpa::RtrMask>(mpa::RtrType::Read);
    else if (rtr == "send")
      pol.rtr = static_cast<mpa::RtrMask>(mpa::RtrType::Send);
    else
      fail("RNIC_RTR", v, "write, read or send");
  }
  if (const char* v = get("RNIC_TIMEOUT_MS"); v && *v) {
    int ms = 0;
    auto [p, ec] = std::from_chars(v, v + std::strlen(v), ms);
    if (ec != std::errc{} || *p || ms < 100 || ms > 3600000)
      fail("RNIC_TIMEOUT_MS", v, "milliseconds from 100 to 3600000");
    else
      s.cm.mpa_timeout = s.cm.connect_timeout = std::chrono::milliseconds(ms);
  }
  // perftest's server re-listens on its port for the data connection after the control one;
  // a client that comes too soon is refused. Kernel timing hides that race; ours retries.
  s.cm.connect_retry = std::chrono::milliseconds(1000);
  if (const char* v = get("RNIC_CONNECT_RETRY_MS"); v && *v) {
    int ms = 0;
    auto [p, ec] = std::from_chars(v, v + std::strlen(v), ms);
    if (ec != std::errc{} || *p || ms < 0 || ms > 60000)
      fail("RNIC_CONNECT_RETRY_MS", v, "milliseconds from 0 to 60000");
    else
      s.cm.connect_retry = std::chrono::milliseconds(ms);
  }
  if (const char* v = get("RNIC_FIRST_FPDU_DELAY_MS"); v && *v) {
    int ms = 0;
    auto [p, ec] = std::from_chars(v, v + std::strlen(v), ms);
    if (ec != std::errc{} || *p || ms < 0 || ms > 10000)
      fail("RNIC_FIRST_FPDU_DELAY_MS", v, "milliseconds from 0 to 10000");
    else
      s.cm.first_fpdu_delay = std::chrono::milliseconds(ms);
  }
  if (const char* v = get("RNIC_LLP_TIMEOUT_MS"); v && *v) {
    int ms = 0;
    auto [p, ec] = std::from_chars(v, v + std::strlen(v), ms);
    if (ec != std::errc{} || *p ||
        (ms != 0 && (ms < rnic::kMinLlpTimeout.count() || ms > rnic::kMaxLlpTimeout.count())))
      fail("RNIC_LLP_TIMEOUT_MS", v, "milliseconds: 0 (the kernel's defaults) or 1000 to 3600000");
    else
      s.cm.llp_timeout = std::chrono::milliseconds(ms);
  }
  if (const char* v = get("RNIC_RNR_WAIT_MS"); v && *v) {
    int ms = 0;
    auto [p, ec] = std::from_chars(v, v + std::strlen(v), ms);
    if (ec != std::errc{} || *p || ms < 0 || ms > 5000)
      fail("RNIC_RNR_WAIT_MS", v, "milliseconds from 0 to 5000");
    else
      s.rnr_wait = std::chrono::milliseconds(ms);
  }
  if (const char* v = get("RNIC_POLL_YIELD"); v && *v) {
    unsigned n = 0;
    auto [p, ec] = std::from_chars(v, v + std::strlen(v), n);
    if (ec != std::errc{} || *p || n > 1000000)
      fail("RNIC_POLL_YIELD", v, "a count of empty polls from 0 to 1000000");
    else
      s.poll_yield = n;
  }
  if (const char* v = get("RNIC_BUSY_POLL"); v && *v) {
    if (std::strcmp(v, "1") == 0)
      s.busy_poll = true;
    else if (std::strcmp(v, "0") == 0)
      s.busy_poll = false;
    else
      fail("RNIC_BUSY_POLL", v, "0 or 1");
    // The soft RNR wait waits for the program to post a receive; with busy polling the thread
    // that would wait is the program's own (rnic::Device::progress()).
    if (s.busy_poll && s.rnr_wait.count() > 0)
      fail("RNIC_BUSY_POLL", v,
           "0 while RNIC_RNR_WAIT_MS is set (a busy-polling thread cannot wait for itself to "
           "post a receive)");
  }
  if (const char* v = get("RNIC_CAPTURE_DIR"); v && *v) {
    struct stat st {};
    if (::stat(v, &st) != 0 || !S_ISDIR(st.st_mode) || ::access(v, W_OK) != 0) {
      fail("RNIC_CAPTURE_DIR", v, "a directory this process can write");
    } else {
      s.capture_dir = v;
      // Named after the process that makes the connection: a fork()ed child (qperf's server
      // runs each test in one) records its own files instead of overwriting its parent's.
      struct PerProcess {
        std::mutex mu;
        pid_t pid = 0;
        rnic::TapFactory factory;
      };
      auto pp = std::make_shared<PerProcess>();
      s.cm.tap = [pp, dir = s.capture_dir](const rnic::TapInfo& ti) {
        std::lock_guard l(pp->mu);
        if (pp->pid != ::getpid()) {
          pp->pid = ::getpid();
          pp->factory =
              capture::pcap_tap_factory(fmt::format("{}/{}-{}.pcap", dir, program_name(), pp->pid));
        }
        return pp->factory(ti);
      };
    }
  }
  // The real-segment receive mode (docs/impaired-link.md): checked here, opened by settings().
  if (const char* v = get("RNIC_REAL_SEGMENTS"); v && *v) {
    if (auto why = rnic::SegmentTap::check(v); !why.empty())
      fail("RNIC_REAL_SEGMENTS", v, fmt::format("an interface this process can tap ({})", why));
    else
      s.real_segments = v;
  }
  if (const char* v = get("RNIC_BEYOND_HOLES"); v && *v) {
    const std::string b = v;
    if (b == "place")
      s.cm.beyond_holes = rnic::BeyondHoles::Place;
    else if (b == "hold")
      s.cm.beyond_holes = rnic::BeyondHoles::Hold;
    else if (b == "discard")
      s.cm.beyond_holes = rnic::BeyondHoles::Discard;
    else
      fail("RNIC_BEYOND_HOLES", v, "place, hold or discard");
    // Over the socket alone nothing arrives beyond a hole (docs/beyond-holes.md).
    if (b != "place" && s.real_segments.empty())
      fail("RNIC_BEYOND_HOLES", v,
           "RNIC_REAL_SEGMENTS with it (without it no segment arrives "
           "beyond a hole)");
  }
  if (const char* v = get("RNIC_DIRECT_MIN"); v && *v) {
    std::size_t n = 0;
    auto [p, ec] = std::from_chars(v, v + std::strlen(v), n);
    if (std::strcmp(v, "off") == 0)
      s.cm.direct_min = rnic::kNoDirectReads;
    else if (ec != std::errc{} || *p || n < rnic::kMinDirectReadMin || n > rnic::kMaxDirectReadMin)
      fail("RNIC_DIRECT_MIN", v,
           fmt::format("octets from {} to {}, or off", rnic::kMinDirectReadMin,
                       rnic::kMaxDirectReadMin));
    else
      s.cm.direct_min = n;
  }
  if (const char* v = get("RNIC_LOG"); v && *v) s.log_spec = v;
  return s;
}

const rnic::CmOptions& cm_options() {
  static const rnic::CmOptions& forked = *new rnic::CmOptions([] {
    rnic::CmOptions o = settings().cm;
    o.segment_tap.reset();
    return o;
  }());
  if (!tap_forked.load()) return settings().cm;
  static std::once_flag said;
  std::call_once(said, [] {
    log::layer("cm").warn(
        "RNIC_REAL_SEGMENTS: the segment tap does not survive fork(); this "
        "process's connections are received from the socket only");
  });
  return forked;
}

rnic::SegmentTap* segment_tap() {
  return cm_options().segment_tap.get();
}

const Settings& settings() {
  // Never destroyed: whatever runs while the program's statics go (a program thread still in
  // the library, the engine before its at-exit stop) still reads valid settings.
  static const Settings& s = *new Settings([] {
    Settings r = parse_settings([](const char* n) -> const char* { return std::getenv(n); });
    if (auto err = log::configure(r.log_spec); !err.empty() && r.error.empty())
      r.error = fmt::format("RNIC_LOG={}: {}", r.log_spec, err);
    if (r.error.empty() && !r.real_segments.empty()) {
      // One tap for every connection of the process; the engine stop at exit detaches it. Its
      // reader thread inherits this mask: no signal of the program is delivered to it (a
      // program that sigwait()s would lose them), as for the engine thread.
      sigset_t all, old;
      ::sigfillset(&all);
      ::pthread_sigmask(SIG_SETMASK, &all, &old);
      try {
        if (auto tap = rnic::SegmentTap::open(r.real_segments))
          r.cm.segment_tap = std::shared_ptr<rnic::SegmentTap>(std::move(*tap));
        else
          r.error = fmt::format("RNIC_REAL_SEGMENTS={}: {}", r.real_segments, tap.error());
      } catch (const std::exception& e) {
        r.error = fmt::format("RNIC_REAL_SEGMENTS={}: {}", r.real_segments, e.what());
      }
      ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
      // Threads do not survive fork(): a child has the tap's state but no reader, and may have
      // its lock as the reader held it. The child's connections are received from the socket.
      ::pthread_atfork(nullptr, nullptr, [] { tap_forked.store(true); });
    }
    if (!r.error.empty()) std::fprintf(stderr, "rnic verbs: %s\n", r.error.c_str());
    return r;
  }());
  return s;
}

}  // namespace iwarp::verbs_abi
