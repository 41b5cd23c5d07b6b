#include "verbs_shim/rdma_cm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <unordered_map>

#include "mpa/mpa_frame.hpp"
#include "rnic/connection_manager.hpp"
#include "rnic/device.hpp"
#include "rnic/queue_pair.hpp"
#include "rnic/verbs_translation.hpp"

namespace iwarp::verbs {

namespace {
// CmId -> the rdma_cm_id that wraps it, so events name the application's ids.
std::mutex ids_mu;
std::unordered_map<const rnic::CmId*, rdma_cm_id*> ids;

void remember(rdma_cm_id* id) {
  std::lock_guard l(ids_mu);
  ids[id->cm.get()] = id;
}

rdma_cm_id* lookup(const rnic::CmId* cm) {
  std::lock_guard l(ids_mu);
  auto it = ids.find(cm);
  return it == ids.end() ? nullptr : it->second;
}

rnic::ConnParam conn_param(const rdma_conn_param* p) {
  rnic::ConnParam c;
  if (p) {
    auto* b = static_cast<const std::uint8_t*>(p->private_data);
    if (b) c.private_data.assign(b, b + p->private_data_len);
    c.responder_resources = p->responder_resources;
    c.initiator_depth = p->initiator_depth;
  }
  return c;
}

// EINVAL (with the reason) when `len` octets of private data do not fit this id's MPA frame.
int check_private_data(rdma_cm_id* id, std::size_t len, const char* call) {
  const std::size_t max = rdma_max_private_data(id);
  if (len <= max) return 0;
  set_last_error(fmt::format("{}: {} octets of private data, an MPA frame carries at most {}{}",
                             call, len, max,
                             max < mpa::kMaxPrivateData ? " besides RFC 6581's IRD/ORD" : ""));
  errno = EINVAL;
  return EINVAL;
}
}  // namespace

const char* rdma_event_str(rdma_cm_event_type e) {
  // The shim defines the events up to DISCONNECTED; librdmacm's later ones are unknown here.
  const char* name = e <= RDMA_CM_EVENT_DISCONNECTED ? rnic::rdma_cm_event_name(e) : nullptr;
  return name ? name : "RDMA_CM_EVENT_UNKNOWN";
}

rdma_event_channel* rdma_create_event_channel(ibv_context* verbs) {
  auto* ch = new rdma_event_channel;
  ch->verbs = verbs;
  return ch;
}

void rdma_destroy_event_channel(rdma_event_channel* ch) {
  delete ch;
}

int rdma_create_id(rdma_event_channel* ch, rdma_cm_id** out, void* context) {
  auto* id = new rdma_cm_id;
  id->verbs = ch->verbs;
  id->channel = ch;
  id->context = context;
  id->cm = rnic::CmId::create(*ch->verbs->dev, ch->ch);
  remember(id);
  *out = id;
  return 0;
}

int rdma_destroy_id(rdma_cm_id* id) {
  {
    std::lock_guard l(ids_mu);
    ids.erase(id->cm.get());
  }
  // A listener's accept loop holds its CmId: without this the socket would keep listening (and
  // its port taken) for as long as the device lives.
  if (id->cm) id->cm->stop_listening();
  delete id;
  return 0;
}

int rdma_set_mpa(rdma_cm_id* id, const rnic::CmOptions& opts) {
  {
    std::lock_guard l(ids_mu);
    ids.erase(id->cm.get());
  }
  id->cm = rnic::CmId::create(*id->verbs->dev, id->channel->ch, opts);
  remember(id);
  return 0;
}

int rdma_bind_addr(rdma_cm_id* id, const std::string& host, std::uint16_t port) {
  id->bind_host = host;
  id->bind_port = port;
  return 0;
}

int rdma_listen(rdma_cm_id* id, int /*backlog*/) {
  std::string why;
  int e = id->cm->listen(id->bind_host, id->bind_port, &why);
  if (e) {
    errno = e;
    set_last_error(why);
  }
  return e;
}

std::uint16_t rdma_get_src_port(rdma_cm_id* id) {
  return id->cm->local_port();
}

int rdma_resolve_addr(rdma_cm_id* id, const std::string& host, std::uint16_t port,
                      int /*timeout_ms*/) {
  // Names resolve when the TCP connection is made; report the step as librdmacm does.
  id->dst_host = host;
  id->dst_port = port;
  rnic::CmEvent e;
  e.type = rnic::CmEventType::AddrResolved;
  e.id = id->cm;
  id->channel->ch.push(std::move(e));
  return 0;
}

int rdma_resolve_route(rdma_cm_id* id, int /*timeout_ms*/) {
  rnic::CmEvent e;
  e.type = rnic::CmEventType::RouteResolved;
  e.id = id->cm;
  id->channel->ch.push(std::move(e));
  return 0;
}

int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* attr) {
  ibv_qp* qp = ibv_create_qp(pd, attr);
  if (!qp) return errno ? errno : EINVAL;
  id->qp = qp;
  id->pd = pd;
  return 0;
}

void rdma_destroy_qp(rdma_cm_id* id) {
  ibv_destroy_qp(id->qp);
  id->qp = nullptr;
}

std::size_t rdma_max_private_data(rdma_cm_id* id) {
  return id->cm->max_private_data();
}

int rdma_connect(rdma_cm_id* id, const rdma_conn_param* param) {
  if (!id->qp) return EINVAL;
  if (id->dst_host.empty()) return EINVAL;
  auto c = conn_param(param);
  if (int e = check_private_data(id, c.private_data.size(), "rdma_connect")) return e;
  id->cm->connect(id->dst_host, id->dst_port, id->qp->qp, c);
  return 0;
}

int rdma_accept(rdma_cm_id* id, const rdma_conn_param* param) {
  if (!id->qp) return EINVAL;
  auto c = conn_param(param);
  if (int e = check_private_data(id, c.private_data.size(), "rdma_accept")) return e;
  std::string why;
  int e = id->cm->accept(id->qp->qp, c, &why);
  if (e) {
    set_last_error(why);
    errno = e;
  }
  return e;
}

int rdma_reject(rdma_cm_id* id, const void* private_data, std::uint16_t len) {
  auto* b = static_cast<const std::uint8_t*>(private_data);
  if (int e = check_private_data(id, b ? len : 0, "rdma_reject")) return e;
  std::string why;
  int e = id->cm->reject(ByteSpan(b, b ? len : 0), &why);
  if (e) {
    set_last_error(why);
    errno = e;
  }
  return e;
}

int rdma_disconnect(rdma_cm_id* id) {
  id->cm->disconnect();
  return 0;
}

int rdma_get_cm_event(rdma_event_channel* ch, rdma_cm_event** out, int timeout_ms) {
  std::optional<std::chrono::milliseconds> t;
  if (timeout_ms >= 0) t = std::chrono::milliseconds(timeout_ms);
  auto e = ch->ch.get(t);
  if (!e) return ETIMEDOUT;
  auto* ev = new rdma_cm_event;
  ev->detail = e->detail;
  ev->mpa = e->params;
  ev->private_data_storage = std::move(e->private_data);
  ev->param.conn.private_data =
      ev->private_data_storage.empty() ? nullptr : ev->private_data_storage.data();
  // Whole: the CM never hands over more than an MPA frame carries (512 octets, 14-bit IRD/ORD).
  ev->param.conn.private_data_len = static_cast<std::uint16_t>(
      std::min<std::size_t>(ev->private_data_storage.size(), mpa::kMaxPrivateData));
  ev->param.conn.responder_resources = std::min(e->peer_ird, mpa::kMaxIrdOrd);
  ev->param.conn.initiator_depth = std::min(e->peer_ord, mpa::kMaxIrdOrd);
  rdma_cm_id* id = lookup(e->id.get());
  if (!id && e->type != rnic::CmEventType::ConnectRequest) {
    // An id the listener made for a connection that failed before CONNECT_REQUEST; the
    // application destroys it with rdma_destroy_id as usual.
    id = new rdma_cm_id;
    id->verbs = ch->verbs;
    id->channel = ch;
    id->cm = e->id;
    remember(id);
  }
  switch (e->type) {
    case rnic::CmEventType::ConnectRequest: {
      // A new id for the new connection, on the listener's channel.
      ev->event = RDMA_CM_EVENT_CONNECT_REQUEST;
      ev->listen_id = nullptr;
      auto* nid = new rdma_cm_id;
      nid->verbs = ch->verbs;
      nid->channel = ch;
      nid->cm = e->id;
      remember(nid);
      ev->id = nid;
      break;
    }
    case rnic::CmEventType::AddrResolved:
      ev->event = RDMA_CM_EVENT_ADDR_RESOLVED;
      ev->id = id;
      break;
    case rnic::CmEventType::RouteResolved:
      ev->event = RDMA_CM_EVENT_ROUTE_RESOLVED;
      ev->id = id;
      break;
    case rnic::CmEventType::Established:
      ev->event = RDMA_CM_EVENT_ESTABLISHED;
      ev->id = id;
      break;
    case rnic::CmEventType::Rejected:
      ev->event = RDMA_CM_EVENT_REJECTED;
      ev->status = ECONNREFUSED;
      ev->id = id;
      break;
    case rnic::CmEventType::Unreachable:
      ev->event = RDMA_CM_EVENT_UNREACHABLE;
      ev->status = EHOSTUNREACH;
      ev->id = id;
      break;
    case rnic::CmEventType::ConnectError:
      ev->event = RDMA_CM_EVENT_CONNECT_ERROR;
      ev->status = ECONNABORTED;
      ev->id = id;
      break;
    case rnic::CmEventType::Disconnected:
      ev->event = RDMA_CM_EVENT_DISCONNECTED;
      ev->id = id;
      break;
  }
  *out = ev;
  return 0;
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  delete event;
  return 0;
}

}  // namespace iwarp::verbs
