// What a connection manager id can be told (MPA policy, timeouts, listener limits, a simulated
// impaired wire, pcap recording), without the engine: what the applications' options hold.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>

#include "mpa/negotiation.hpp"
#include "rnic/engine_fwd.hpp"
#include "rnic/qp_types.hpp"
#include "rnic/rx_observer.hpp"
#include "rnic/rx_segment_shaper.hpp"
#include "rnic/segment_input.hpp"

namespace iwarp::rnic {

class SegmentTap;

// Makes the wire tap that records a connection (nullptr: none), given where it runs.
using TapFactory = std::function<std::shared_ptr<WireTap>(const TapInfo&)>;

// A listener's defences against connections that never finish the MPA exchange (each holds a
// socket, i.e. a file descriptor, and a timer until it times out, up to 2 x mpa_timeout).
// At most this many connections may be in the MPA exchange at once (from the TCP accept until
// the exchange has an outcome: established, rejected or failed). Past it a connection is reset
// at once: the oldest one that has not sent its MPA Request yet, to make room for the new one
// (ListenerStats::evicted), so that idle connections cannot lock real clients out (a real
// client sends its Request at once); or, when every slot holds a Request the application has
// not answered yet, the new one (ListenerStats::refused). Both are logged at most once per
// kAcceptLogInterval, and no event is reported for them. 1024: above the bursts real clients
// make (enlarge-bench connects 250 at a time) and at the default RLIMIT_NOFILE soft limit, so
// idle connections cannot take every descriptor of a process allowed more.
inline constexpr std::size_t kMaxPendingMpa = 1024;
// When accept fails for want of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM: the connection stays
// queued, so trying again at once fails again at once), the listener waits this long before it
// tries again, instead of spinning; it logs the failures at most once per kAcceptLogInterval.
inline constexpr std::chrono::milliseconds kAcceptBackoff{100};
inline constexpr std::chrono::milliseconds kAcceptLogInterval{1000};

struct CmOptions {
  mpa::Policy policy;  // ird/ord are taken from ConnParam
  std::chrono::milliseconds connect_timeout{5000};
  // A refused TCP connection is tried again, every 20 ms, for this long (0: reported at once
  // as UNREACHABLE): a server between two listeners, as perftest's is between its control and
  // data connections, is not gone.
  std::chrono::milliseconds connect_retry{0};
  std::chrono::milliseconds mpa_timeout{5000};  // for the peer's MPA Request or Reply
  // siw 6.1 answers the MPA Request before it reads its socket; an initiator whose first FPDU
  // follows the Reply too closely can stall it. This delays our first FPDU (0: none).
  std::chrono::milliseconds first_fpdu_delay{0};
  // How long a Terminate or disconnect may wait for a peer that takes nothing before the stream
  // is aborted (StreamSetup::close_timeout).
  std::chrono::milliseconds close_timeout = kCloseTimeout;
  // How long an established connection may go without an acknowledgement from the peer before
  // it is lost (0: the kernel's defaults): TCP_USER_TIMEOUT bounds unacknowledged data and a
  // zero window, TCP keepalive probes an idle connection, so a peer that stops reading or
  // vanishes (no FIN, no RST) ends the QP with a "connection lost" within about this long.
  std::chrono::milliseconds llp_timeout = kLlpTimeout;
  // The TCP segment size to frame for (0: the socket's TCP_MAXSEG). RFC 5044 §4.1 MULPDU.
  std::size_t emss = 0;
  bool ignore_ord = false;  // testing aid, see StreamSetup
  // Listener: see kMaxPendingMpa and kAcceptBackoff.
  std::size_t max_pending_mpa = kMaxPendingMpa;
  std::chrono::milliseconds accept_backoff = kAcceptBackoff;
  // Testing aid: the responder sends its MPA Reply this long after accept (0: at once), so that
  // what happens meanwhile (a disconnect on either side) can be exercised.
  std::chrono::milliseconds reply_delay{0};
  // Makes a receive-side segment shaper (a simulated impaired wire, sim/impaired_wire.hpp) for
  // every QP this id starts (RxOptions::shaper); empty: none.
  RxShaperFactory rx_shaper;
  // The real-segment receive mode (rnic/segment_tap.hpp): every QP this id starts also gets the
  // TCP segments of its connection as they arrive on the tap's interface. Shared: the tap lives
  // as long as any id that was given it. Empty: the socket's stream only.
  std::shared_ptr<SegmentTap> segment_tap;
  // What every QP this id starts does with data beyond a TCP hole (RxOptions::beyond_holes).
  BeyondHoles beyond_holes = BeyondHoles::Place;
  // From what payload run every QP this id starts reads straight into the target
  // (RxOptions::direct_min; RNIC_DIRECT_MIN).
  std::size_t direct_min = kDirectReadMin;
  // Told what every QP this id starts receives (RxOptions::observer; rnic xfer --explain).
  std::shared_ptr<RxObserver> rx_observer;
  TapFactory tap;
};

}  // namespace iwarp::rnic
