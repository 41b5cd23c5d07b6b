// The drop-in libraries' settings, read once from the environment (`rnic run` sets them from
// its flags; see `rnic run --help` and the README):
//   RNIC_DEVICE       the device's name (default rnic0)
//   RNIC_MPA_REV      highest MPA revision spoken: 1 or 2 (default 2; 2 adds RFC 6581 IRD/ORD)
//   RNIC_CRC          CRC32c policy: required, optional (follow the peer; default) or off
//   RNIC_MARKERS      MPA markers policy: required, optional or off (default)
//   RNIC_P2P          RFC 6581 peer-to-peer mode: 1 (default with MPA revision 2) or 0; RNIC_RTR
//                     offers one RTR message (write, read or send; default: all three)
//   RNIC_TIMEOUT_MS   how long the MPA exchange may wait for the peer (default 5000)
//   RNIC_CONNECT_RETRY_MS  how long a refused TCP connect is retried (default 1000; perftest's
//                     server is briefly between two listeners)
//   RNIC_FIRST_FPDU_DELAY_MS  the initiator holds its first FPDU (the RTR too) this long after the
//                     MPA Reply (default 0); Linux siw 6.1 stalls on an FPDU that comes within
//                     ~2 ms of its Reply (docs/siw-interop.md)
//   RNIC_LLP_TIMEOUT_MS  how long a connection may go without an acknowledgement from the peer
//                     (a zero window, a vanished or silent peer) before it is lost and its work
//                     requests flushed (default 60000; 0: the kernel's defaults)
//   RNIC_RNR_WAIT_MS  how long a Send that finds no posted receive waits for one before it is a
//                     protocol error (default 0: at once, as the RFCs have it; at most 5000).
//                     iWARP has no RNR NAK; InfiniBand benchmarks such as qperf's rc_bw count on
//                     one. The wait holds the engine: every connection of the process pauses.
//   RNIC_POLL_YIELD   a thread that polls an empty CQ this many times in a row yields the CPU
//                     (sched_yield), so a busy-polling program (perftest) does not starve the
//                     engine thread on a machine with few cores (default 16; 0: never; at most
//                     1000000)
//   RNIC_BUSY_POLL    1: a thread that polls an empty CQ runs the engine's ready work itself
//                     (receives, placements, completions) while the engine thread steps aside,
//                     so a spinning program (perftest) has no thread hop and no wake-up on its
//                     path; the engine thread takes over 250 us after the last poll
//                     (docs/progress-model.md); not with RNIC_RNR_WAIT_MS. 0 (default): the
//                     engine thread does it all
//   RNIC_CAPTURE_DIR  record every connection of the process as a pcap in this directory
//   RNIC_REAL_SEGMENTS  IFACE: the real-segment receive mode (docs/impaired-link.md): every
//                     connection also gets the real TCP segments that arrive on IFACE, in arrival
//                     order (AF_PACKET: root or CAP_NET_RAW); each QP reports its segment path on
//                     stderr when it is destroyed
//   RNIC_BEYOND_HOLES what the segment path does beyond a TCP hole: place (default), hold or
//                     discard (docs/beyond-holes.md); hold and discard need RNIC_REAL_SEGMENTS
//   RNIC_DIRECT_MIN   payload runs of at least this many octets are read from the socket straight
//                     into their target, shorter ones through the staging buffer (default 4096;
//                     64 to 1073741824, or off: never; docs/direct-reads.md)
//   RNIC_STAT         0: the process does not answer `rnic stat PID` (read by rnic/stat_server.cpp;
//                     docs/stat.md)
//   RNIC_LOG          log levels, as --log-level: "debug" or "mpa=trace,rnic=debug" (default:
//   error)
#pragma once

#include <chrono>
#include <string>

#include "rnic/cm_options.hpp"

namespace iwarp::verbs_abi {

struct Settings {
  std::string device_name = "rnic0";
  rnic::CmOptions cm;  // policy, timeouts and the capture tap for every id
  std::string capture_dir;
  std::string log_spec = "error";
  std::chrono::milliseconds rnr_wait{0};  // rnic::QpInit::rnr_wait
  unsigned poll_yield = 16;               // empty polls in a row before ibv_poll_cq yields
  bool busy_poll = false;                 // rnic::Device::set_busy_poll
  std::string real_segments;  // RNIC_REAL_SEGMENTS: the interface; settings() opens cm.segment_tap
  // Empty, or one line saying which variable is wrong and why (the device then does not open).
  std::string error;
};

// The running program's name (for capture files and report lines).
std::string program_name();

// The connection manager's options for this process's ids: settings().cm, without the segment
// tap in a child fork()ed after the tap was opened (the tap's reader did not come along).
const rnic::CmOptions& cm_options();
// The real-segment tap this process may use (nullptr: none, or a fork()ed child's).
rnic::SegmentTap* segment_tap();

// Read once, on first use (thread-safe).
const Settings& settings();

// Parses the environment as settings() does (for tests and `rnic run`, which checks its flags
// the same way).
Settings parse_settings(const char* (*getenv_fn)(const char*));

}  // namespace iwarp::verbs_abi
