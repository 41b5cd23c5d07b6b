// A queue pair's value types, for code that names QP states and limits without the engine
// (the verbs APIs, the CM's options): the state machine's states, the queue capacities and the
// default close timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace iwarp::rnic {

// siw's QP states (RFC 5040 §5 leaves the names to the implementation).
enum class QpState : std::uint8_t { Idle, Rtr, Rts, Closing, Terminate, Error };
std::string_view to_string(QpState s);
// The transitions the state machine allows (IDLE->RTR->RTS, RTS->CLOSING|TERMINATE|ERROR, ...).
bool legal_transition(QpState from, QpState to);

struct QpCaps {
  std::uint32_t max_send_wr = 256;
  std::uint32_t max_recv_wr = 256;
  std::uint32_t max_send_sge = 6;
  std::uint32_t max_recv_sge = 6;
  std::uint32_t max_inline_data = 80;
};

// Default bound on closing a stream whose peer does not read: RFC 5040 §5.6 ends the stream
// after a Terminate, but sets no time; siw aborts such a socket too.
inline constexpr std::chrono::milliseconds kCloseTimeout{5000};

// Default bound on a connection whose peer is gone or stuck (CmOptions::llp_timeout): TCP
// itself keeps probing a zero window for ever (RFC 9293 §3.8.6.1) and retransmits to a vanished
// peer for some 15 minutes, and notices nothing on an idle connection. RFC 5040 §6 leaves
// failures of the LLP to it; a connection that acknowledges nothing for this long is lost.
inline constexpr std::chrono::milliseconds kLlpTimeout{60000};
// The range a program may choose (0 turns it off): below 1 s a healthy connection could be
// dropped at its first retransmission (Linux's minimum RTO is 200 ms) and keepalive, counted in
// whole seconds, cannot follow; above an hour it bounds nothing a user would wait for.
inline constexpr std::chrono::milliseconds kMinLlpTimeout{1000};
inline constexpr std::chrono::milliseconds kMaxLlpTimeout{3600000};
// The receive side reads a payload run of at least kDirectReadMin octets from the socket
// straight into its target (no staging copy); shorter runs come through the staging buffer with
// the FPDUs around them, in one read (RxOptions::direct_min, RNIC_DIRECT_MIN): a direct read of
// a short run is one more system call. Over loopback no threshold measured better or worse
// within the machine's noise (docs/direct-reads.md).
inline constexpr std::size_t kDirectReadMin = 4096;
inline constexpr std::size_t kMinDirectReadMin = 64;  // a floor: a read per cache line at most
inline constexpr std::size_t kMaxDirectReadMin = std::size_t{1} << 30;
inline constexpr std::size_t kNoDirectReads = SIZE_MAX;  // every octet through the staging buffer

}  // namespace iwarp::rnic
