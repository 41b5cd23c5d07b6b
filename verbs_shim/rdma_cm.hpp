// The connection half of the shim, in the manner of librdmacm: event channels, ids, bind and
// listen, resolve address and route, connect, accept, reject, disconnect, with private data
// and responder_resources / initiator_depth (IRD / ORD). iWARP specifics (MPA revision, CRC,
// markers, peer-to-peer RTR, timeouts, pcap recording) are set per id with rdma_set_mpa().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "rnic/cm_events.hpp"
#include "rnic/cm_options.hpp"
#include "rnic/engine_fwd.hpp"
#include "verbs_shim/verbs.hpp"

namespace iwarp::verbs {

enum rdma_cm_event_type : int {
  RDMA_CM_EVENT_ADDR_RESOLVED = 0,
  RDMA_CM_EVENT_ADDR_ERROR = 1,
  RDMA_CM_EVENT_ROUTE_RESOLVED = 2,
  RDMA_CM_EVENT_ROUTE_ERROR = 3,
  RDMA_CM_EVENT_CONNECT_REQUEST = 4,
  RDMA_CM_EVENT_CONNECT_RESPONSE = 5,
  RDMA_CM_EVENT_CONNECT_ERROR = 6,
  RDMA_CM_EVENT_UNREACHABLE = 7,
  RDMA_CM_EVENT_REJECTED = 8,
  RDMA_CM_EVENT_ESTABLISHED = 9,
  RDMA_CM_EVENT_DISCONNECTED = 10,
};
const char* rdma_event_str(rdma_cm_event_type e);

// Wider than librdmacm's (whose three fields are uint8_t): MPA carries up to 512 octets of
// private data (RFC 5044 §7.1; 508 besides RFC 6581's IRD/ORD) and 14-bit IRD/ORD (RFC 6581
// §5), so with 8 bits a peer's 300 octets or IRD 256 would not fit. The shim keeps them whole.
struct rdma_conn_param {
  const void* private_data = nullptr;
  std::uint16_t private_data_len = 0;      // at most rdma_max_private_data(id)
  std::uint16_t responder_resources = 16;  // our IRD (more than 16383 is taken as 16383)
  std::uint16_t initiator_depth = 16;      // our ORD (likewise)
};

struct rdma_event_channel {
  rnic::EventChannel ch;
  ibv_context* verbs = nullptr;  // the device its ids use
  int fd() const { return ch.fd(); }
};

struct rdma_cm_id {
  ibv_context* verbs = nullptr;
  rdma_event_channel* channel = nullptr;
  void* context = nullptr;
  ibv_qp* qp = nullptr;
  ibv_pd* pd = nullptr;
  std::shared_ptr<rnic::CmId> cm;
  std::string dst_host;
  std::uint16_t dst_port = 0;
  std::string bind_host = "0.0.0.0";
  std::uint16_t bind_port = 0;
};

struct rdma_cm_event {
  rdma_cm_id* id = nullptr;
  rdma_cm_id* listen_id = nullptr;
  rdma_cm_event_type event = RDMA_CM_EVENT_ESTABLISHED;
  int status = 0;
  struct {
    // The peer's, whole (see rdma_conn_param): its private data (up to 512 octets) and the
    // IRD and ORD it sent in an RFC 6581 frame (14 bits each; 0 without them). Note that the
    // kernel's iWARP CM reports them the other way round (initiator_depth = the peer's IRD).
    struct {
      const void* private_data = nullptr;
      std::uint16_t private_data_len = 0;
      std::uint16_t responder_resources = 0;  // the peer's IRD
      std::uint16_t initiator_depth = 0;      // the peer's ORD
    } conn;
  } param;
  // Not in librdmacm: what happened, in words, and what MPA negotiated.
  std::string detail;
  std::optional<mpa::ConnectionParams> mpa;
  Bytes private_data_storage;
};

// The channel's ids live on `verbs`.
rdma_event_channel* rdma_create_event_channel(ibv_context* verbs);
void rdma_destroy_event_channel(rdma_event_channel* ch);
int rdma_create_id(rdma_event_channel* ch, rdma_cm_id** id, void* context);
int rdma_destroy_id(rdma_cm_id* id);
// MPA policy, timeouts and recording for this id (and the ids a listener creates).
int rdma_set_mpa(rdma_cm_id* id, const rnic::CmOptions& opts);

int rdma_bind_addr(rdma_cm_id* id, const std::string& host, std::uint16_t port);
int rdma_listen(rdma_cm_id* id, int backlog);
std::uint16_t rdma_get_src_port(rdma_cm_id* id);
int rdma_resolve_addr(rdma_cm_id* id, const std::string& host, std::uint16_t port, int timeout_ms);
int rdma_resolve_route(rdma_cm_id* id, int timeout_ms);
int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* attr);
void rdma_destroy_qp(rdma_cm_id* id);
// Private data longer than rdma_max_private_data(id) is refused with EINVAL (and the reason in
// ibv_last_error()).
int rdma_connect(rdma_cm_id* id, const rdma_conn_param* param);
int rdma_accept(rdma_cm_id* id, const rdma_conn_param* param);
int rdma_reject(rdma_cm_id* id, const void* private_data, std::uint16_t private_data_len);
// During the MPA exchange too: the QP is not started when the exchange completes; the id gets
// RDMA_CM_EVENT_DISCONNECTED (or REJECTED / CONNECT_ERROR when the exchange failed anyway).
int rdma_disconnect(rdma_cm_id* id);
// The most private data an MPA frame of this id can carry: 512 octets, less the 4 that RFC
// 6581's IRD/ORD take when the frame is enhanced (MPA revision 2).
std::size_t rdma_max_private_data(rdma_cm_id* id);

// Blocks for the next event (timeout_ms < 0: forever). Returns 0, or ETIMEDOUT.
int rdma_get_cm_event(rdma_event_channel* ch, rdma_cm_event** event, int timeout_ms = -1);
int rdma_ack_cm_event(rdma_cm_event* event);

}  // namespace iwarp::verbs
