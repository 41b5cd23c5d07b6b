// The drop-in librdmacm's implementation (librdmacm.so.1 forwards each rdma_* call to the
// iwarp_cm_* function of the same name here, so both libraries share one engine): event
// channels, ids, bind/listen, address and route resolution (no I/O: the TCP connection is made
// by rdma_connect), connect/accept/reject/disconnect with the MPA exchange of the engine's
// connection manager (rnic::CmId), and rdma_getaddrinfo. librdmacm's conventions throughout:
// 0 or -1 with errno; events live until rdma_ack_cm_event.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/log.hpp"
#include "rnic/connection_manager.hpp"
#include "rnic/device.hpp"
#include "rnic/queue_pair.hpp"
#include "rnic/verbs_translation.hpp"
#include "verbs_abi/cm_entry.hpp"
#include "verbs_abi/context.hpp"
#include "verbs_abi/settings.hpp"
#include "verbs_abi/unsupported.hpp"

namespace iwarp::verbs_abi {

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// Freed when destroyed and nobody uses it any more: no thread inside rdma_get_cm_event and no
// id on it. The three counts below change under ids_mu.
struct EventChannel {
  rdma_event_channel pub;
  rnic::EventChannel ch{false};  // blocking fd, as librdmacm's
  int readers = 0;               // threads inside rdma_get_cm_event
  int ids = 0;                   // ids created on it (or migrated to it) and not destroyed
  bool destroyed = false;
};

struct Id {
  rdma_cm_id pub;
  std::shared_ptr<rnic::CmId> cm;
  EventChannel* ch = nullptr;
  bool listening = false;
  bool bound = false;  // rdma_bind_addr made a socket (which queues connections until listen)
  bool qp_by_number = false;  // connected through conn_param->qp_num: CONNECT_RESPONSE
  bool own_cqs = false;       // rdma_create_qp made the CQs and their channels
  bool has_dst = false;
  bool connecting = false;  // rdma_connect or rdma_accept was called (a second one is EINVAL)
  std::uint16_t peer_ird = 0, peer_ord = 0;  // from the CONNECT_REQUEST
  // Events naming this id (as id or listen_id) that the program holds and has not acked, and
  // whether it was destroyed meanwhile: then the last rdma_ack_cm_event frees it (rdma-core's
  // rdma_destroy_id waits for those acks instead). Both under ids_mu.
  int unacked = 0;
  bool destroyed = false;
};

struct Event {
  rdma_cm_event pub;
  Bytes private_data;
  Id* id = nullptr;
  Id* listen_id = nullptr;
};

// The engine's ids to the program's, so events name the program's ids; every id the program
// holds, so that a call on a destroyed (or never created) id fails with EINVAL instead of
// touching freed memory (perftest's connect retry calls rdma_resolve_addr with an id it
// destroyed). Allocated once and never freed: the engine thread and the program's threads may
// still use them while the process exits.
std::mutex& ids_mu = *new std::mutex;
std::unordered_map<const rnic::CmId*, Id*>& ids = *new std::unordered_map<const rnic::CmId*, Id*>;
std::unordered_set<const rdma_cm_id*>& live_ids = *new std::unordered_set<const rdma_cm_id*>;
// Every event channel the program holds, so that a call on one another thread destroyed never
// touches freed memory (rping's CM thread asks for its next event while main destroys the
// channel).
std::unordered_set<const rdma_event_channel*>& live_channels =
    *new std::unordered_set<const rdma_event_channel*>;

// The program's channel, or nullptr when it is not one it holds. Under ids_mu.
EventChannel* live_channel_locked(rdma_event_channel* c) {
  return live_channels.contains(c) ? reinterpret_cast<EventChannel*>(c) : nullptr;
}

// Under ids_mu: the channel if it is to be freed now (destroyed, no reader, no id), which the
// caller deletes once it has released ids_mu: ~EventChannel takes the queue's lock, and the
// engine holds that lock while its filter (wanted()) takes ids_mu.
EventChannel* unused_channel_locked(EventChannel* ch) {
  return ch->destroyed && ch->readers == 0 && ch->ids == 0 ? ch : nullptr;
}

// Frees what unused_channel_locked() returned, with ids_mu released; no cancellation point
// runs during it (~EventChannel closes an fd), so a pending pthread_cancel cannot unwind out of
// a destructor.
void free_channel(EventChannel* ch) {
  if (!ch) return;
  int old = 0;
  ::pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  delete ch;
  ::pthread_setcancelstate(old, nullptr);
}

std::mutex default_pd_mu;
ibv_pd* the_default_pd = nullptr;

void remember_locked(Id* id) {
  ids[id->cm.get()] = id;
  live_ids.insert(&id->pub);
}

void remember(Id* id) {
  std::lock_guard l(ids_mu);
  remember_locked(id);
}

// The program's id, or nullptr (errno EINVAL) for a pointer that is not a live id.
Id* live_id(rdma_cm_id* i) {
  std::lock_guard l(ids_mu);
  if (!i || !live_ids.contains(i)) {
    errno = EINVAL;
    return nullptr;
  }
  return reinterpret_cast<Id*>(i);
}

Id* lookup_locked(const rnic::CmId* cm) {
  auto it = ids.find(cm);
  return it == ids.end() ? nullptr : it->second;
}

// Which engine events reach the program (EventChannel::set_filter, under the channel's lock):
// those of ids it holds, and connect requests to listeners it holds. Anything else would make
// the fd readable with nothing to get, and a flood of half-made connections could grow the
// queue without bound.
bool wanted(const rnic::CmEvent& e) {
  std::lock_guard l(ids_mu);
  if (e.type == rnic::CmEventType::ConnectRequest) {
    auto listener = e.id->listener_id();
    return listener && lookup_locked(listener.get());
  }
  return lookup_locked(e.id.get()) != nullptr;
}

// The PD rdma_create_qp uses when the program gives none (as librdmacm's per-device PD).
ibv_pd* default_pd() {
  std::lock_guard l(default_pd_mu);
  if (!the_default_pd) {
    if (ibv_context* c = shared_context()) the_default_pd = ibv_alloc_pd(c);
  }
  return the_default_pd;
}

void to_sockaddr(const tcp::endpoint& ep, sockaddr_storage* out) {
  std::memset(out, 0, sizeof *out);
  std::memcpy(out, ep.data(), std::min<std::size_t>(ep.size(), sizeof *out));
}

bool from_sockaddr(const sockaddr* sa, std::string* host, std::uint16_t* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    *port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *host = buf;
  return true;
}

socklen_t sockaddr_len(const sockaddr* sa) {
  return sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// The source address the kernel would pick to reach `dst` (a UDP connect sends nothing).
void pick_source(const sockaddr* dst, sockaddr_storage* src) {
  std::memset(src, 0, sizeof *src);
  src->ss_family = dst->sa_family;
  int s = ::socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return;
  if (::connect(s, dst, sockaddr_len(dst)) == 0) {
    socklen_t len = sizeof *src;
    ::getsockname(s, reinterpret_cast<sockaddr*>(src), &len);
    // The port comes with the connection.
    if (src->ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(src)->sin_port = 0;
    if (src->ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(src)->sin6_port = 0;
  }
  ::close(s);
}

void push(Id* id, rnic::CmEventType t) {
  rnic::CmEvent e;
  e.type = t;
  e.id = id->cm;
  id->ch->ch.push(std::move(e));
}

rdma_cm_event_type event_type(const rnic::CmEvent& e, const Id* id) {
  switch (e.type) {
    case rnic::CmEventType::ConnectRequest:
      return RDMA_CM_EVENT_CONNECT_REQUEST;
    case rnic::CmEventType::Established:
      return id && id->qp_by_number && id->pub.qp == nullptr ? RDMA_CM_EVENT_CONNECT_RESPONSE
                                                             : RDMA_CM_EVENT_ESTABLISHED;
    case rnic::CmEventType::Rejected:
      return RDMA_CM_EVENT_REJECTED;
    case rnic::CmEventType::Unreachable:
      // As the kernel's iWARP CM: a refused TCP connection is a rejection.
      return e.detail.find("refused") != std::string::npos ? RDMA_CM_EVENT_REJECTED
                                                           : RDMA_CM_EVENT_UNREACHABLE;
    case rnic::CmEventType::ConnectError:
      return RDMA_CM_EVENT_CONNECT_ERROR;
    case rnic::CmEventType::Disconnected:
      return RDMA_CM_EVENT_DISCONNECTED;
    case rnic::CmEventType::AddrResolved:
      return RDMA_CM_EVENT_ADDR_RESOLVED;
    case rnic::CmEventType::RouteResolved:
      return RDMA_CM_EVENT_ROUTE_RESOLVED;
  }
  return RDMA_CM_EVENT_CONNECT_ERROR;
}

int event_status(rdma_cm_event_type t) {
  switch (t) {
    case RDMA_CM_EVENT_REJECTED:
      return -ECONNREFUSED;
    case RDMA_CM_EVENT_UNREACHABLE:
      return -ETIMEDOUT;
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return -ECONNABORTED;
    default:
      return 0;
  }
}

// The program's event for an engine event, or nullptr for an event of an id the program has
// destroyed (dropped).
Event* translate(EventChannel* ch, rnic::CmEvent&& e) {
  ibv_context* verbs = shared_context();
  std::lock_guard l(ids_mu);  // no id goes away under us
  Id* id = lookup_locked(e.id.get());
  Id* listener = nullptr;
  if (e.type == rnic::CmEventType::ConnectRequest) {
    auto lst = e.id->listener_id();
    listener = lst ? lookup_locked(lst.get()) : nullptr;
    // The kernel drops a connect request whose listener is gone (M1 of the review): the
    // connection then times out in the MPA exchange.
    if (!listener) return nullptr;
    // A new id for the new connection, on the listener's channel, with its context.
    auto* n = new Id;
    std::memset(&n->pub, 0, sizeof n->pub);
    n->cm = e.id;
    n->ch = ch;
    n->has_dst = true;
    n->pub.verbs = verbs;
    n->pub.channel = &ch->pub;
    n->pub.context = listener ? listener->pub.context : nullptr;
    n->pub.ps = RDMA_PS_TCP;
    n->pub.qp_type = IBV_QPT_RC;
    n->pub.port_num = 1;
    // A Request without RFC 6581's IRD/ORD (MPA revision 1, or revision 2 without them) says
    // nothing of the peer's: report the device's, as the kernel's iWARP CM does, so that
    // rdma_accept(id, NULL) does not end up with ORD 0.
    const auto req = e.id->request();
    if (!req || !req->params) {
      const rnic::DeviceLimits lim;
      e.peer_ird = lim.max_ird;
      e.peer_ord = lim.max_ord;
    }
    n->peer_ird = e.peer_ird;
    n->peer_ord = e.peer_ord;
    to_sockaddr(e.id->local_endpoint(), &n->pub.route.addr.src_storage);
    to_sockaddr(e.id->remote_endpoint(), &n->pub.route.addr.dst_storage);
    ++ch->ids;
    remember_locked(n);
    id = n;
  }
  if (!id) return nullptr;
  auto* ev = new Event;
  std::memset(&ev->pub, 0, sizeof ev->pub);
  ev->pub.id = &id->pub;
  ev->pub.listen_id = listener ? &listener->pub : nullptr;
  ev->id = id;
  ev->listen_id = listener;
  ++id->unacked;
  if (listener) ++listener->unacked;
  ev->pub.event = event_type(e, id);
  ev->pub.status = event_status(ev->pub.event);
  ev->private_data = std::move(e.private_data);
  auto& c = ev->pub.param.conn;
  c.private_data = ev->private_data.empty() ? nullptr : ev->private_data.data();
  // librdmacm's field is 8 bits; an MPA frame may carry up to 512 octets (RFC 5044 §7.1).
  c.private_data_len =
      static_cast<std::uint8_t>(std::min<std::size_t>(ev->private_data.size(), 255));
  // As the kernel's iWARP CM reports them: what this side should use.
  c.initiator_depth = static_cast<std::uint8_t>(std::min<int>(e.peer_ird, 255));
  c.responder_resources = static_cast<std::uint8_t>(std::min<int>(e.peer_ord, 255));
  if (e.type == rnic::CmEventType::Established) {
    to_sockaddr(e.id->local_endpoint(), &id->pub.route.addr.src_storage);
    if (auto r = e.id->remote_endpoint(); r.port()) to_sockaddr(r, &id->pub.route.addr.dst_storage);
  }
  return ev;
}

// The QP an rdma_connect/rdma_accept uses: the id's, or the one named by conn_param->qp_num.
Qp* qp_for(Id* id, const rdma_conn_param* p) {
  if (id->pub.qp) return impl<Qp>(id->pub.qp);
  if (p && p->qp_num) {
    if (Qp* q = qp_by_num(p->qp_num)) {
      id->qp_by_number = true;
      return q;
    }
  }
  return nullptr;
}

// librdmacm refuses IRD/ORD beyond what the device offers (ucma_valid_param).
bool valid_param(const rdma_conn_param* p) {
  if (!p) return true;
  const rnic::DeviceLimits lim;
  if (p->responder_resources != RDMA_MAX_RESP_RES && p->responder_resources > lim.max_ird)
    return false;
  if (p->initiator_depth != RDMA_MAX_INIT_DEPTH && p->initiator_depth > lim.max_ord) return false;
  return p->private_data_len == 0 || p->private_data;
}

rnic::ConnParam conn_param(const rdma_conn_param* p, std::uint16_t default_ird,
                           std::uint16_t default_ord) {
  const rnic::DeviceLimits lim;
  rnic::ConnParam c;
  if (!p) {
    c.responder_resources = std::min(default_ird, lim.max_ird);
    c.initiator_depth = std::min(default_ord, lim.max_ord);
    return c;
  }
  auto* b = static_cast<const std::uint8_t*>(p->private_data);
  if (b) c.private_data.assign(b, b + p->private_data_len);
  // RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH ask for the device's most.
  c.responder_resources =
      p->responder_resources == RDMA_MAX_RESP_RES ? lim.max_ird : p->responder_resources;
  c.initiator_depth = p->initiator_depth == RDMA_MAX_INIT_DEPTH ? lim.max_ord : p->initiator_depth;
  return c;
}

// Waits (no lock held; poll() is a cancellation point) for the channel's next event with
// read() semantics: EAGAIN when the fd is non-blocking, EINTR on a signal.
int wait_event(EventChannel* ch, rdma_cm_event** out) {
  for (;;) {
    if (auto e = ch->ch.try_get()) {
      if (Event* ev = translate(ch, std::move(*e))) {
        *out = &ev->pub;
        return 0;
      }
      continue;
    }
    const int flags = ::fcntl(ch->pub.fd, F_GETFL);
    if (flags < 0) return -1;
    if (flags & O_NONBLOCK) return fail_neg(EAGAIN);
    pollfd p{ch->pub.fd, POLLIN, 0};
    if (::poll(&p, 1, -1) < 0) return -1;
  }
}

}  // namespace

void forget_cm_after_fork() {
  // The parent's ids and channels belong to an engine the child does not have: forgotten
  // (leaked), and the locks made new in case another thread held one at the fork.
  new (&ids_mu) std::mutex;
  new (&ids) std::unordered_map<const rnic::CmId*, Id*>;
  new (&live_ids) std::unordered_set<const rdma_cm_id*>;
  new (&live_channels) std::unordered_set<const rdma_event_channel*>;
  new (&default_pd_mu) std::mutex;
  the_default_pd = nullptr;
}

}  // namespace iwarp::verbs_abi

using namespace iwarp;
using namespace iwarp::verbs_abi;

extern "C" {

rdma_event_channel* iwarp_cm_rdma_create_event_channel(void) {
  if (!engine()) return nullptr;
  try {
    auto* ch = new EventChannel;
    ch->pub.fd = ch->ch.fd();
    ch->ch.set_filter(wanted);
    std::lock_guard l(ids_mu);
    live_channels.insert(&ch->pub);
    return &ch->pub;
  } catch (const std::exception&) {
    errno = EMFILE;
    return nullptr;
  }
}

void iwarp_cm_rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (!channel) return;
  EventChannel* gone = nullptr;
  {
    std::lock_guard l(ids_mu);
    EventChannel* ch = live_channel_locked(channel);
    if (!ch) return;
    // A thread may still wait in rdma_get_cm_event (rping's CM thread does when main returns):
    // then the channel is left to it, never freed under it; the last one out frees it.
    // Ids still on it keep it too (their events would go to freed memory): it is then left
    // allocated, with nobody reading it, until the last of them is destroyed.
    live_channels.erase(channel);
    ch->destroyed = true;
    gone = unused_channel_locked(ch);
  }
  free_channel(gone);
}

int iwarp_cm_rdma_create_id(rdma_event_channel* channel, rdma_cm_id** out, void* context,
                            rdma_port_space ps) {
  if (!out) return fail_neg(EINVAL);
  if (!channel) {
    report_unsupported("rdma_create_id",
                       "synchronous ids (a NULL event channel) are not supported: create an "
                       "event channel");
    return fail_neg(ENOSYS);
  }
  if (ps != RDMA_PS_TCP) {
    report_unsupported("rdma_create_id",
                       "only RDMA_PS_TCP (reliable-connected) ids exist on iWARP; UD, IPoIB and "
                       "IB port spaces are not supported");
    return fail_neg(EPROTONOSUPPORT);
  }
  rnic::Device* dev = engine();
  if (!dev) return -1;
  EventChannel* ch = nullptr;
  {
    std::lock_guard l(ids_mu);
    ch = live_channel_locked(channel);
    if (!ch) return fail_neg(EINVAL);
    ++ch->ids;
  }
  auto* id = new Id;
  std::memset(&id->pub, 0, sizeof id->pub);
  id->ch = ch;
  id->cm = rnic::CmId::create(*dev, ch->ch, cm_options());
  id->pub.channel = channel;
  id->pub.context = context;
  id->pub.ps = ps;
  id->pub.qp_type = IBV_QPT_RC;
  remember(id);
  *out = &id->pub;
  return 0;
}

int iwarp_cm_rdma_destroy_id(rdma_cm_id* i) {
  Id* id = live_id(i);
  if (!id) return -1;
  if (id->listening || id->bound) id->cm->stop_listening();
  // A connection still up ends (the kernel's rdma_destroy_id does the same); its QP stays the
  // program's to destroy.
  if (id->cm->qp()) id->cm->disconnect();
  const rnic::CmId* cm = id->cm.get();
  bool free_now = false;
  {
    std::lock_guard l(ids_mu);
    ids.erase(cm);
    live_ids.erase(&id->pub);
    id->destroyed = true;
    free_now = id->unacked == 0;
  }
  // Its queued events go with it, and so do connect requests to it that nobody took yet.
  id->ch->ch.purge(cm);
  id->ch->ch.purge_if([cm](const rnic::CmEvent& e) {
    return e.type == rnic::CmEventType::ConnectRequest && e.id->listener_id().get() == cm;
  });
  EventChannel* gone = nullptr;
  {
    std::lock_guard l(ids_mu);
    --id->ch->ids;
    gone = unused_channel_locked(id->ch);
  }
  free_channel(gone);
  if (free_now) delete id;
  return 0;
}

int iwarp_cm_rdma_bind_addr(rdma_cm_id* i, sockaddr* addr) {
  Id* id = live_id(i);
  if (!id) return -1;
  if (!addr) return fail_neg(EINVAL);
  std::string host;
  std::uint16_t port = 0;
  if (!from_sockaddr(addr, &host, &port)) {
    report_unsupported("rdma_bind_addr", "only IPv4 and IPv6 addresses (no AF_IB)");
    return fail_neg(EAFNOSUPPORT);
  }
  std::string why;
  // Connections that come before rdma_listen wait in the backlog (CmId::bind's queue_now).
  if (int e = id->cm->bind(host, port, &why, true)) return fail_neg(e);
  id->bound = true;
  to_sockaddr(id->cm->local_endpoint(), &i->route.addr.src_storage);
  i->verbs = shared_context();
  i->port_num = 1;
  return 0;
}

int iwarp_cm_rdma_listen(rdma_cm_id* i, int /*backlog*/) {
  Id* id = live_id(i);
  if (!id) return -1;
  std::string why;
  if (i->route.addr.src_addr.sa_family == 0) {
    // As the kernel: an id that was not bound listens on every address, on a port it picks.
    if (int e = id->cm->bind("0.0.0.0", 0, &why)) return fail_neg(e);
    to_sockaddr(id->cm->local_endpoint(), &i->route.addr.src_storage);
    i->verbs = shared_context();
    i->port_num = 1;
  }
  if (int e = id->cm->listen(&why)) return fail_neg(e);
  id->listening = true;
  return 0;
}

std::uint16_t iwarp_cm_rdma_get_src_port(rdma_cm_id* i) {
  if (!live_id(i)) return 0;
  const auto& a = i->route.addr;
  if (a.src_addr.sa_family == AF_INET) return a.src_sin.sin_port;
  if (a.src_addr.sa_family == AF_INET6) return a.src_sin6.sin6_port;
  return 0;
}

std::uint16_t iwarp_cm_rdma_get_dst_port(rdma_cm_id* i) {
  if (!live_id(i)) return 0;
  const auto& a = i->route.addr;
  if (a.dst_addr.sa_family == AF_INET) return a.dst_sin.sin_port;
  if (a.dst_addr.sa_family == AF_INET6) return a.dst_sin6.sin6_port;
  return 0;
}

int iwarp_cm_rdma_resolve_addr(rdma_cm_id* i, sockaddr* src, sockaddr* dst, int /*timeout_ms*/) {
  Id* id = live_id(i);
  if (!id) return -1;
  if (!dst) return fail_neg(EINVAL);
  if (dst->sa_family != AF_INET && dst->sa_family != AF_INET6) {
    report_unsupported("rdma_resolve_addr", "only IPv4 and IPv6 addresses (no AF_IB)");
    return fail_neg(EAFNOSUPPORT);
  }
  if (id->bound && !id->listening) {
    // A client that bound a source address first: the TCP connection is made from an address
    // the kernel picks (the bound one is not kept), and the bound socket must not queue
    // connections meanwhile.
    id->cm->stop_listening();
    id->bound = false;
  }
  std::memset(&i->route.addr.dst_storage, 0, sizeof i->route.addr.dst_storage);
  std::memcpy(&i->route.addr.dst_storage, dst, sockaddr_len(dst));
  if (src && src->sa_family) {
    std::memset(&i->route.addr.src_storage, 0, sizeof i->route.addr.src_storage);
    std::memcpy(&i->route.addr.src_storage, src, sockaddr_len(src));
  } else {
    pick_source(dst, &i->route.addr.src_storage);
  }
  id->has_dst = true;
  i->verbs = shared_context();
  i->port_num = 1;
  // Names need no lookup (the address is given); the TCP connection comes with rdma_connect.
  push(id, rnic::CmEventType::AddrResolved);
  return 0;
}

int iwarp_cm_rdma_resolve_route(rdma_cm_id* i, int /*timeout_ms*/) {
  Id* id = live_id(i);
  if (!id) return -1;
  if (!id->has_dst) return fail_neg(EINVAL);
  push(id, rnic::CmEventType::RouteResolved);
  return 0;
}

int iwarp_cm_rdma_create_qp(rdma_cm_id* i, ibv_pd* pd, ibv_qp_init_attr* attr) {
  Id* id = live_id(i);
  if (!id) return -1;
  if (!attr) return fail_neg(EINVAL);
  if (i->qp) return fail_neg(EINVAL);
  if (!pd) pd = default_pd();
  if (!pd) return -1;
  ibv_qp_init_attr a = *attr;
  // As librdmacm: CQs (each with its own channel) when the program gives none.
  bool made = false;
  auto make_cq = [&](ibv_comp_channel** ch, ibv_cq** cq, std::uint32_t depth) -> bool {
    *ch = ibv_create_comp_channel(pd->context);
    if (!*ch) return false;
    *cq = ibv_create_cq(pd->context, static_cast<int>(std::max(depth, 1u)), i, *ch, 0);
    if (!*cq) {
      ibv_destroy_comp_channel(*ch);
      *ch = nullptr;
      return false;
    }
    made = true;
    return true;
  };
  auto undo = [&] {
    if (i->send_cq) ibv_destroy_cq(i->send_cq);
    if (i->send_cq_channel) ibv_destroy_comp_channel(i->send_cq_channel);
    if (i->recv_cq) ibv_destroy_cq(i->recv_cq);
    if (i->recv_cq_channel) ibv_destroy_comp_channel(i->recv_cq_channel);
    i->send_cq = i->recv_cq = nullptr;
    i->send_cq_channel = i->recv_cq_channel = nullptr;
  };
  if (!a.send_cq) {
    if (!make_cq(&i->send_cq_channel, &i->send_cq, a.cap.max_send_wr)) return -1;
    a.send_cq = i->send_cq;
  }
  if (!a.recv_cq) {
    if (!make_cq(&i->recv_cq_channel, &i->recv_cq, a.cap.max_recv_wr)) {
      const int e = errno;
      undo();
      return fail_neg(e);
    }
    a.recv_cq = i->recv_cq;
  }
  ibv_qp* qp = ibv_create_qp(pd, &a);
  if (!qp) {
    const int e = errno;
    if (made) undo();
    return fail_neg(e);
  }
  qp->state = IBV_QPS_INIT;
  attr->cap = a.cap;
  id->own_cqs = made;
  i->qp = qp;
  i->pd = pd;
  return 0;
}

int iwarp_cm_rdma_create_qp_ex(rdma_cm_id* i, ibv_qp_init_attr_ex* attr) {
  if (!live_id(i)) return -1;
  if (!attr) return fail_neg(EINVAL);
  if (attr->comp_mask & ~IBV_QP_INIT_ATTR_PD) {
    report_unsupported("rdma_create_qp_ex",
                       "extended QP attributes (new post-send API, XRC, create flags) are not "
                       "supported: only a PD");
    return fail_neg(EOPNOTSUPP);
  }
  ibv_qp_init_attr a{};
  a.qp_context = attr->qp_context;
  a.send_cq = attr->send_cq;
  a.recv_cq = attr->recv_cq;
  a.srq = attr->srq;
  a.cap = attr->cap;
  a.qp_type = attr->qp_type;
  a.sq_sig_all = attr->sq_sig_all;
  int r =
      iwarp_cm_rdma_create_qp(i, (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr, &a);
  if (r == 0) attr->cap = a.cap;
  return r;
}

void iwarp_cm_rdma_destroy_qp(rdma_cm_id* i) {
  Id* id = live_id(i);
  if (!id || !i->qp) return;
  ibv_destroy_qp(i->qp);
  i->qp = nullptr;
  if (id->own_cqs) {
    if (i->send_cq) ibv_destroy_cq(i->send_cq);
    if (i->send_cq_channel) ibv_destroy_comp_channel(i->send_cq_channel);
    if (i->recv_cq) ibv_destroy_cq(i->recv_cq);
    if (i->recv_cq_channel) ibv_destroy_comp_channel(i->recv_cq_channel);
    i->send_cq = i->recv_cq = nullptr;
    i->send_cq_channel = i->recv_cq_channel = nullptr;
    id->own_cqs = false;
  }
}

int iwarp_cm_rdma_connect(rdma_cm_id* i, rdma_conn_param* param) {
  Id* id = live_id(i);
  if (!id) return -1;
  if (!id->has_dst || !valid_param(param)) return fail_neg(EINVAL);
  Qp* qp = qp_for(id, param);
  if (!qp || id->connecting) return fail_neg(EINVAL);
  std::string host;
  std::uint16_t port = 0;
  if (!from_sockaddr(&i->route.addr.dst_addr, &host, &port)) return fail_neg(EINVAL);
  const rnic::DeviceLimits lim;
  auto c = conn_param(param, lim.max_ird, lim.max_ord);
  id->connecting = true;
  id->cm->connect(host, port, qp->qp, c);
  return 0;
}

int iwarp_cm_rdma_accept(rdma_cm_id* i, rdma_conn_param* param) {
  Id* id = live_id(i);
  if (!id) return -1;
  if (!valid_param(param)) return fail_neg(EINVAL);
  Qp* qp = qp_for(id, param);
  if (!qp || id->connecting) return fail_neg(EINVAL);
  id->connecting = true;
  // Without parameters: what the peer asked for (its ORD is our IRD), within the device's.
  auto c = conn_param(param, id->peer_ord, id->peer_ird);
  std::string why;
  if (int e = id->cm->accept(qp->qp, c, &why)) {
    log::layer("rnic").warn("rdma_accept: {}", why);
    return fail_neg(e);
  }
  // The kernel's iWARP CM sends the MPA Reply and moves the QP to RTS inside rdma_accept, and
  // programs post sends right after it returns (perftest does): wait, bounded, for the same.
  const auto deadline =
      std::chrono::steady_clock::now() + settings().cm.mpa_timeout + std::chrono::seconds(1);
  for (;;) {
    const auto st = qp->qp->state();
    if (st != rnic::QpState::Idle) break;
    if (id->cm->failed()) return fail_neg(ECONNABORTED);
    if (std::chrono::steady_clock::now() > deadline) return fail_neg(ETIMEDOUT);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  qp->pub.state = to_ibv_state(qp->qp->state());
  return 0;
}

int iwarp_cm_rdma_reject(rdma_cm_id* i, const void* private_data, std::uint8_t private_data_len) {
  if (!live_id(i)) return -1;
  if (private_data_len && !private_data) return fail_neg(EINVAL);
  auto* b = static_cast<const std::uint8_t*>(private_data);
  std::string why;
  if (int e = reinterpret_cast<Id*>(i)->cm->reject(ByteSpan(b, b ? private_data_len : 0), &why)) {
    log::layer("rnic").warn("rdma_reject: {}", why);
    return fail_neg(e);
  }
  return 0;
}

int iwarp_cm_rdma_disconnect(rdma_cm_id* i) {
  Id* id = live_id(i);
  if (!id) return -1;
  if (id->listening) return fail_neg(EINVAL);
  // Also after the peer disconnected (ucmatose calls it from its DISCONNECTED handler): 0.
  id->cm->disconnect();
  return 0;
}

int iwarp_cm_rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (!channel || !event) return fail_neg(EINVAL);
  EventChannel* ch = nullptr;
  {
    std::lock_guard l(ids_mu);
    ch = live_channel_locked(channel);
    if (ch) ++ch->readers;
  }
  if (!ch) {
    // A destroyed channel has no events: the call waits like a read() of a descriptor that
    // never becomes readable (the kernel's, for a thread already blocked in it when librdmacm
    // closes the fd: rping's CM thread, which would otherwise report an error and exit 255
    // after a clean run), until a signal interrupts it (EINTR) or the process ends. poll() is a
    // cancellation point, so pthread_cancel ends it too.
    for (;;)
      if (::poll(nullptr, 0, -1) < 0 && errno == EINTR) return -1;
  }
  struct Leave {
    EventChannel* ch;
    ~Leave() {  // also when the thread is cancelled in poll()
      EventChannel* gone = nullptr;
      {
        std::lock_guard l(ids_mu);
        --ch->readers;
        gone = unused_channel_locked(ch);
      }
      free_channel(gone);
    }
  } leave{ch};
  return wait_event(ch, event);
}

int iwarp_cm_rdma_ack_cm_event(rdma_cm_event* event) {
  if (!event) return fail_neg(EINVAL);
  auto* ev = reinterpret_cast<Event*>(event);
  {
    std::lock_guard l(ids_mu);
    for (Id* id : {ev->id, ev->listen_id}) {
      if (!id) continue;
      if (--id->unacked == 0 && id->destroyed) delete id;  // rdma_destroy_id came first
    }
  }
  delete ev;
  return 0;
}

const char* iwarp_cm_rdma_event_str(rdma_cm_event_type event) {
  static_assert(RDMA_CM_EVENT_TIMEWAIT_EXIT == 15, "rdma_cm_event_name follows rdma-core 44");
  const char* name = rnic::rdma_cm_event_name(event);
  return name ? name : "UNKNOWN EVENT";
}

int iwarp_cm_rdma_set_option(rdma_cm_id* i, int level, int optname, void* optval, size_t optlen) {
  if (!live_id(i)) return -1;
  if (optlen && !optval) return fail_neg(EINVAL);
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
      case RDMA_OPTION_ID_REUSEADDR:  // listeners always reuse the address (SO_REUSEADDR)
      case RDMA_OPTION_ID_AFONLY:
      case RDMA_OPTION_ID_ACK_TIMEOUT:  // TCP's own retransmission applies
        return 0;
      default:
        break;
    }
  }
  report_unsupported("rdma_set_option",
                     "only RDMA_OPTION_ID TOS, REUSEADDR, AFONLY and "
                     "ACK_TIMEOUT are accepted (IB path options are not)");
  return fail_neg(ENOSYS);
}

int iwarp_cm_rdma_migrate_id(rdma_cm_id* i, rdma_event_channel* channel) {
  Id* id = live_id(i);
  if (!id) return -1;
  if (!channel) {
    report_unsupported("rdma_migrate_id", "moving an id to synchronous mode (NULL channel)");
    return fail_neg(ENOSYS);
  }
  EventChannel* ch = nullptr;
  {
    std::lock_guard l(ids_mu);
    ch = live_channel_locked(channel);
    if (!ch) return fail_neg(EINVAL);
    ++ch->ids;
  }
  id->cm->migrate(ch->ch);
  EventChannel* gone = nullptr;
  {
    std::lock_guard l(ids_mu);
    --id->ch->ids;
    gone = unused_channel_locked(id->ch);
  }
  free_channel(gone);
  id->ch = ch;
  i->channel = channel;
  return 0;
}

int iwarp_cm_rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                              rdma_addrinfo** res) {
  if (!res || (!node && !service)) return fail_neg(EINVAL);
  addrinfo h{};
  h.ai_socktype = SOCK_STREAM;
  h.ai_family = AF_UNSPEC;
  if (hints) {
    if (hints->ai_family == AF_INET || hints->ai_family == AF_INET6)
      h.ai_family = hints->ai_family;
    else if (hints->ai_family && hints->ai_family != AF_UNSPEC)
      return fail_neg(EAFNOSUPPORT);
    if (hints->ai_flags & RAI_PASSIVE) h.ai_flags |= AI_PASSIVE;
    if (hints->ai_flags & RAI_NUMERICHOST) h.ai_flags |= AI_NUMERICHOST;
    if (hints->ai_qp_type && hints->ai_qp_type != IBV_QPT_RC) return fail_neg(EOPNOTSUPP);
    if (hints->ai_port_space && hints->ai_port_space != RDMA_PS_TCP) return fail_neg(EOPNOTSUPP);
  }
  addrinfo* list = nullptr;
  if (int e = ::getaddrinfo(node, service, &h, &list); e) {
    // librdmacm returns getaddrinfo's code (negative EAI_*) with errno set.
    errno = e == EAI_SYSTEM ? errno : ENOENT;
    return e;
  }
  const bool passive = hints && (hints->ai_flags & RAI_PASSIVE);
  rdma_addrinfo* head = nullptr;
  rdma_addrinfo** tail = &head;
  for (auto* a = list; a; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    auto* r = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
    auto* sa = static_cast<sockaddr*>(std::calloc(1, a->ai_addrlen));
    if (!r || !sa) {
      std::free(r);
      std::free(sa);
      break;
    }
    std::memcpy(sa, a->ai_addr, a->ai_addrlen);
    r->ai_flags = hints ? hints->ai_flags : 0;
    r->ai_family = a->ai_family;
    r->ai_qp_type = IBV_QPT_RC;
    r->ai_port_space = RDMA_PS_TCP;
    if (passive) {
      r->ai_src_len = a->ai_addrlen;
      r->ai_src_addr = sa;
    } else {
      r->ai_dst_len = a->ai_addrlen;
      r->ai_dst_addr = sa;
    }
    *tail = r;
    tail = &r->ai_next;
  }
  ::freeaddrinfo(list);
  if (!head) return fail_neg(ENODEV);
  *res = head;
  return 0;
}

void iwarp_cm_rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}

int iwarp_cm_rdma_init_qp_attr(rdma_cm_id* i, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (!live_id(i)) return -1;
  if (!qp_attr || !qp_attr_mask) return fail_neg(EINVAL);
  // The CM moves an iWARP QP itself; the attributes a program may apply on the way are these.
  *qp_attr_mask = IBV_QP_STATE;
  if (qp_attr->qp_state == IBV_QPS_INIT) {
    qp_attr->qp_access_flags =
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    qp_attr->port_num = 1;
    qp_attr->pkey_index = 0;
    *qp_attr_mask |= IBV_QP_ACCESS_FLAGS | IBV_QP_PORT | IBV_QP_PKEY_INDEX;
  }
  return 0;
}

int iwarp_cm_rdma_establish(rdma_cm_id* i) {
  if (!live_id(i)) return -1;
  return 0;  // the engine started the QP when the MPA exchange completed
}

ibv_context** iwarp_cm_rdma_get_devices(int* num_devices) {
  if (num_devices) *num_devices = 0;
  ibv_context* c = shared_context();
  if (!c) return nullptr;
  auto** list = static_cast<ibv_context**>(std::calloc(2, sizeof(ibv_context*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  list[0] = c;
  if (num_devices) *num_devices = 1;
  return list;
}

void iwarp_cm_rdma_free_devices(ibv_context** list) {
  std::free(list);
}

int iwarp_cm_rdma_notify(rdma_cm_id* i, ibv_event_type) {
  if (!live_id(i)) return -1;
  return 0;
}

}  // extern "C"
