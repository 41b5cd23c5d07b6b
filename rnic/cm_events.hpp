// The connection manager's events and the channel they arrive on (librdmacm's
// rdma_cm_event and rdma_event_channel), without the engine: what the verbs APIs hold.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/bytes.hpp"
#include "mpa/negotiation.hpp"
#include "rnic/engine_fwd.hpp"

namespace iwarp::rnic {

enum class CmEventType : std::uint8_t {
  ConnectRequest,  // RDMA_CM_EVENT_CONNECT_REQUEST (on the listener's channel)
  Established,     // RDMA_CM_EVENT_ESTABLISHED
  Rejected,        // RDMA_CM_EVENT_REJECTED: the responder answered R=1
  Unreachable,     // RDMA_CM_EVENT_UNREACHABLE: no TCP connection
  ConnectError,    // RDMA_CM_EVENT_CONNECT_ERROR: the MPA exchange failed or timed out
  Disconnected,    // RDMA_CM_EVENT_DISCONNECTED
  AddrResolved,    // RDMA_CM_EVENT_ADDR_RESOLVED
  RouteResolved,   // RDMA_CM_EVENT_ROUTE_RESOLVED
};
std::string_view to_string(CmEventType t);

struct ConnParam {
  Bytes private_data;
  std::uint16_t responder_resources = 16;  // our IRD
  std::uint16_t initiator_depth = 16;      // our ORD
};

struct CmEvent {
  CmEventType type = CmEventType::Established;
  std::shared_ptr<CmId> id;  // the connection (for ConnectRequest: the new one to accept)
  Bytes private_data;        // the peer's
  std::uint16_t peer_ird = 0, peer_ord = 0;
  std::optional<mpa::ConnectionParams> params;  // Established: what was negotiated
  std::string detail;                           // in words: why, for errors and disconnects
};

class EventChannel {
 public:
  // nonblocking_fd = false: a blocking eventfd, as librdmacm's channel fd (see
  // CompletionChannel).
  explicit EventChannel(bool nonblocking_fd = true);
  ~EventChannel();
  EventChannel(const EventChannel&) = delete;
  EventChannel& operator=(const EventChannel&) = delete;
  // Blocks for the next event; nullopt on timeout.
  std::optional<CmEvent> get(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // The next event without waiting.
  std::optional<CmEvent> try_get();
  // Events the consumer would drop are never queued (so the fd is readable only while there is
  // an event to get): `keep` decides, under the queue's lock, on the engine or the caller's
  // thread. It must not call back into this channel.
  void set_filter(std::function<bool(const CmEvent&)> keep);
  // Takes the queued events of `id` off the channel (its owner destroyed it), or those `drop`
  // picks.
  void purge(const CmId* id);
  void purge_if(const std::function<bool(const CmEvent&)>& drop);
  void push(CmEvent e);
  int fd() const { return q_->fd; }

 private:
  friend class CmId;
  // The queue and its eventfd. The ids of the channel share it, because a connection can end
  // (and its id emit an event from the engine thread) after the application destroyed the
  // channel: the channel's destructor closes the queue, and later events are dropped.
  struct Queue {
    int fd = -1;
    std::mutex mu;
    std::deque<CmEvent> events;
    bool closed = false;
    std::function<bool(const CmEvent&)> keep;
    void push(CmEvent e);
    // Takes the events of `id` out (under the lock); the fd is drained when none are left.
    std::deque<CmEvent> take_events_of(const CmId* id);
    std::deque<CmEvent> take_if(const std::function<bool(const CmEvent&)>& pick);
  };
  std::shared_ptr<Queue> q_;
};

}  // namespace iwarp::rnic
