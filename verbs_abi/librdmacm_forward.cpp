// The whole of the drop-in librdmacm.so.1: every symbol rdma-core 44's librdmacm exports
// (librdmacm.map gives the versions), each forwarding to its iwarp_cm_* twin in libibverbs.so.1
// (cm_entry.hpp), where the CM lives next to the verbs it creates QPs with. This library keeps
// no state of its own.
#include <fcntl.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

#include <cstdarg>
#include <cstdint>

#include "verbs_abi/cm_entry.hpp"

namespace {

// The optional third argument of fcntl(2), as rfcntl() receives it: none, an int, or a pointer.
enum class FcntlArg { kNone, kInt, kPointer };

FcntlArg fcntl_arg(int cmd) {
  switch (cmd) {
    case F_GETFD:
    case F_GETFL:
    case F_GETOWN:
    case F_GETSIG:
    case F_GETLEASE:
    case F_GETPIPE_SZ:
    case F_GET_SEALS:
      return FcntlArg::kNone;
    case F_GETLK:
    case F_SETLK:
    case F_SETLKW:
    case F_OFD_GETLK:
    case F_OFD_SETLK:
    case F_OFD_SETLKW:
    case F_GETOWN_EX:
    case F_SETOWN_EX:
    case F_GET_RW_HINT:
    case F_SET_RW_HINT:
    case F_GET_FILE_RW_HINT:
    case F_SET_FILE_RW_HINT:
      return FcntlArg::kPointer;
    default:  // F_DUPFD, F_DUPFD_CLOEXEC, F_SETFD, F_SETFL, F_SETOWN, F_SETSIG, ...
      return FcntlArg::kInt;
  }
}

}  // namespace

extern "C" {

// ---- RDMACM_1.0: <rdma/rdma_cma.h> ----

rdma_event_channel* rdma_create_event_channel(void) {
  return iwarp_cm_rdma_create_event_channel();
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  iwarp_cm_rdma_destroy_event_channel(channel);
}

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                   enum rdma_port_space ps) {
  return iwarp_cm_rdma_create_id(channel, id, context, ps);
}

int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd,
                   ibv_qp_init_attr* qp_init_attr) {
  return iwarp_cm_rdma_create_ep(id, res, pd, qp_init_attr);
}

void rdma_destroy_ep(rdma_cm_id* id) {
  iwarp_cm_rdma_destroy_ep(id);
}

int rdma_destroy_id(rdma_cm_id* id) {
  return iwarp_cm_rdma_destroy_id(id);
}

int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  return iwarp_cm_rdma_bind_addr(id, addr);
}

int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms) {
  return iwarp_cm_rdma_resolve_addr(id, src_addr, dst_addr, timeout_ms);
}

int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
  return iwarp_cm_rdma_resolve_route(id, timeout_ms);
}

int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  return iwarp_cm_rdma_create_qp(id, pd, qp_init_attr);
}

int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* qp_init_attr) {
  return iwarp_cm_rdma_create_qp_ex(id, qp_init_attr);
}

void rdma_destroy_qp(rdma_cm_id* id) {
  iwarp_cm_rdma_destroy_qp(id);
}

int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  return iwarp_cm_rdma_connect(id, conn_param);
}

int rdma_listen(rdma_cm_id* id, int backlog) {
  return iwarp_cm_rdma_listen(id, backlog);
}

int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  return iwarp_cm_rdma_get_request(listen, id);
}

int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  return iwarp_cm_rdma_accept(id, conn_param);
}

int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  return iwarp_cm_rdma_reject(id, private_data, private_data_len);
}

int rdma_notify(rdma_cm_id* id, enum ibv_event_type event) {
  return iwarp_cm_rdma_notify(id, event);
}

int rdma_disconnect(rdma_cm_id* id) {
  return iwarp_cm_rdma_disconnect(id);
}

int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) {
  return iwarp_cm_rdma_join_multicast(id, addr, context);
}

int rdma_leave_multicast(rdma_cm_id* id, sockaddr* addr) {
  return iwarp_cm_rdma_leave_multicast(id, addr);
}

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  return iwarp_cm_rdma_get_cm_event(channel, event);
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  return iwarp_cm_rdma_ack_cm_event(event);
}

__be16 rdma_get_src_port(rdma_cm_id* id) {
  return iwarp_cm_rdma_get_src_port(id);
}

__be16 rdma_get_dst_port(rdma_cm_id* id) {
  return iwarp_cm_rdma_get_dst_port(id);
}

ibv_context** rdma_get_devices(int* num_devices) {
  return iwarp_cm_rdma_get_devices(num_devices);
}

void rdma_free_devices(ibv_context** list) {
  iwarp_cm_rdma_free_devices(list);
}

const char* rdma_event_str(enum rdma_cm_event_type event) {
  return iwarp_cm_rdma_event_str(event);
}

int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen) {
  return iwarp_cm_rdma_set_option(id, level, optname, optval, optlen);
}

int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  return iwarp_cm_rdma_migrate_id(id, channel);
}

int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                     rdma_addrinfo** res) {
  return iwarp_cm_rdma_getaddrinfo(node, service, hints, res);
}

void rdma_freeaddrinfo(rdma_addrinfo* res) {
  iwarp_cm_rdma_freeaddrinfo(res);
}

// ---- RDMACM_1.0: <rdma/rdma_verbs.h> ----

int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  return iwarp_cm_rdma_create_srq(id, pd, attr);
}

int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  return iwarp_cm_rdma_create_srq_ex(id, attr);
}

void rdma_destroy_srq(rdma_cm_id* id) {
  iwarp_cm_rdma_destroy_srq(id);
}

// ---- RDMACM_1.0: <rdma/rsocket.h> ----

int rsocket(int domain, int type, int protocol) {
  return iwarp_cm_rsocket(domain, type, protocol);
}

int rbind(int socket, const sockaddr* addr, socklen_t addrlen) {
  return iwarp_cm_rbind(socket, addr, addrlen);
}

int rlisten(int socket, int backlog) {
  return iwarp_cm_rlisten(socket, backlog);
}

int raccept(int socket, sockaddr* addr, socklen_t* addrlen) {
  return iwarp_cm_raccept(socket, addr, addrlen);
}

int rconnect(int socket, const sockaddr* addr, socklen_t addrlen) {
  return iwarp_cm_rconnect(socket, addr, addrlen);
}

int rshutdown(int socket, int how) {
  return iwarp_cm_rshutdown(socket, how);
}

int rclose(int socket) {
  return iwarp_cm_rclose(socket);
}

ssize_t rrecv(int socket, void* buf, size_t len, int flags) {
  return iwarp_cm_rrecv(socket, buf, len, flags);
}

ssize_t rrecvfrom(int socket, void* buf, size_t len, int flags, sockaddr* src_addr,
                  socklen_t* addrlen) {
  return iwarp_cm_rrecvfrom(socket, buf, len, flags, src_addr, addrlen);
}

ssize_t rrecvmsg(int socket, msghdr* msg, int flags) {
  return iwarp_cm_rrecvmsg(socket, msg, flags);
}

ssize_t rsend(int socket, const void* buf, size_t len, int flags) {
  return iwarp_cm_rsend(socket, buf, len, flags);
}

ssize_t rsendto(int socket, const void* buf, size_t len, int flags, const sockaddr* dest_addr,
                socklen_t addrlen) {
  return iwarp_cm_rsendto(socket, buf, len, flags, dest_addr, addrlen);
}

ssize_t rsendmsg(int socket, const msghdr* msg, int flags) {
  return iwarp_cm_rsendmsg(socket, msg, flags);
}

ssize_t rread(int socket, void* buf, size_t count) {
  return iwarp_cm_rread(socket, buf, count);
}

ssize_t rreadv(int socket, const iovec* iov, int iovcnt) {
  return iwarp_cm_rreadv(socket, iov, iovcnt);
}

ssize_t rwrite(int socket, const void* buf, size_t count) {
  return iwarp_cm_rwrite(socket, buf, count);
}

ssize_t rwritev(int socket, const iovec* iov, int iovcnt) {
  return iwarp_cm_rwritev(socket, iov, iovcnt);
}

int rpoll(pollfd* fds, nfds_t nfds, int timeout) {
  return iwarp_cm_rpoll(fds, nfds, timeout);
}

int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, timeval* timeout) {
  return iwarp_cm_rselect(nfds, readfds, writefds, exceptfds, timeout);
}

int rgetpeername(int socket, sockaddr* addr, socklen_t* addrlen) {
  return iwarp_cm_rgetpeername(socket, addr, addrlen);
}

int rgetsockname(int socket, sockaddr* addr, socklen_t* addrlen) {
  return iwarp_cm_rgetsockname(socket, addr, addrlen);
}

int rsetsockopt(int socket, int level, int optname, const void* optval, socklen_t optlen) {
  return iwarp_cm_rsetsockopt(socket, level, optname, optval, optlen);
}

int rgetsockopt(int socket, int level, int optname, void* optval, socklen_t* optlen) {
  return iwarp_cm_rgetsockopt(socket, level, optname, optval, optlen);
}

// Fetches the argument only for the commands that have one, and with the type they pass it as.
int rfcntl(int socket, int cmd, ...) {
  long arg = 0;
  const FcntlArg kind = fcntl_arg(cmd);
  if (kind != FcntlArg::kNone) {
    va_list ap;
    va_start(ap, cmd);
    if (kind == FcntlArg::kInt) {
      arg = va_arg(ap, int);
    } else {
      arg = static_cast<long>(reinterpret_cast<intptr_t>(va_arg(ap, void*)));
    }
    va_end(ap);
  }
  return iwarp_cm_rfcntl(socket, cmd, arg);
}

off_t riomap(int socket, void* buf, size_t len, int prot, int flags, off_t offset) {
  return iwarp_cm_riomap(socket, buf, len, prot, flags, offset);
}

int riounmap(int socket, void* buf, size_t len) {
  return iwarp_cm_riounmap(socket, buf, len);
}

size_t riowrite(int socket, const void* buf, size_t count, off_t offset, int flags) {
  return iwarp_cm_riowrite(socket, buf, count, offset, flags);
}

// ---- RDMACM_1.1 ----

int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* mc_join_attr, void* context) {
  return iwarp_cm_rdma_join_multicast_ex(id, mc_join_attr, context);
}

// ---- RDMACM_1.2 ----

int rdma_establish(rdma_cm_id* id) {
  return iwarp_cm_rdma_establish(id);
}

int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  return iwarp_cm_rdma_init_qp_attr(id, qp_attr, qp_attr_mask);
}

// ---- RDMACM_1.3 ----

int rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  return iwarp_cm_rdma_reject_ece(id, private_data, private_data_len);
}

int rdma_set_local_ece(rdma_cm_id* id, ibv_ece* ece) {
  return iwarp_cm_rdma_set_local_ece(id, ece);
}

int rdma_get_remote_ece(rdma_cm_id* id, ibv_ece* ece) {
  return iwarp_cm_rdma_get_remote_ece(id, ece);
}

}  // extern "C"
