// The private entry points behind the drop-in librdmacm.so.1.
//
// librdmacm.so.1 (librdmacm_forward.cpp) holds no state: each of its exports (every symbol the
// real rdma-core 44 librdmacm exports) forwards to iwarp_cm_<same name> here, implemented inside
// libibverbs.so.1 and exported there under the private version node IWARP_PRIVATE_1
// (libibverbs.map), so the CM and the verbs share one engine and one set of objects.
// The prototypes are those of <rdma/rdma_cma.h>, <rdma/rdma_verbs.h> and <rdma/rsocket.h> with
// the name prefixed, except iwarp_cm_rfcntl, which takes the optional fcntl() argument as a long
// (the forwarder fetches it with va_arg).
//
// Implemented in cm.cpp (the working CM) and cm_unsupported.cpp (rsockets, multicast, ECE, SRQ
// and endpoint helpers: fail like librdmacm, or rpoll/rselect => poll/select).
#pragma once

#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>

extern "C" {

// ---- <rdma/rdma_cma.h> ----
rdma_event_channel* iwarp_cm_rdma_create_event_channel(void);
void iwarp_cm_rdma_destroy_event_channel(rdma_event_channel* channel);
int iwarp_cm_rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                            rdma_port_space ps);
int iwarp_cm_rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd,
                            ibv_qp_init_attr* qp_init_attr);
void iwarp_cm_rdma_destroy_ep(rdma_cm_id* id);
int iwarp_cm_rdma_destroy_id(rdma_cm_id* id);
int iwarp_cm_rdma_bind_addr(rdma_cm_id* id, sockaddr* addr);
int iwarp_cm_rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr,
                               int timeout_ms);
int iwarp_cm_rdma_resolve_route(rdma_cm_id* id, int timeout_ms);
int iwarp_cm_rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr);
int iwarp_cm_rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* qp_init_attr);
void iwarp_cm_rdma_destroy_qp(rdma_cm_id* id);
int iwarp_cm_rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param);
int iwarp_cm_rdma_establish(rdma_cm_id* id);
int iwarp_cm_rdma_listen(rdma_cm_id* id, int backlog);
int iwarp_cm_rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id);
int iwarp_cm_rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param);
int iwarp_cm_rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len);
int iwarp_cm_rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t private_data_len);
int iwarp_cm_rdma_notify(rdma_cm_id* id, ibv_event_type event);
int iwarp_cm_rdma_disconnect(rdma_cm_id* id);
int iwarp_cm_rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context);
int iwarp_cm_rdma_leave_multicast(rdma_cm_id* id, sockaddr* addr);
int iwarp_cm_rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* mc_join_attr,
                                    void* context);
int iwarp_cm_rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event);
int iwarp_cm_rdma_ack_cm_event(rdma_cm_event* event);
__be16 iwarp_cm_rdma_get_src_port(rdma_cm_id* id);
__be16 iwarp_cm_rdma_get_dst_port(rdma_cm_id* id);
ibv_context** iwarp_cm_rdma_get_devices(int* num_devices);
void iwarp_cm_rdma_free_devices(ibv_context** list);
const char* iwarp_cm_rdma_event_str(rdma_cm_event_type event);
int iwarp_cm_rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen);
int iwarp_cm_rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel);
int iwarp_cm_rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                              rdma_addrinfo** res);
void iwarp_cm_rdma_freeaddrinfo(rdma_addrinfo* res);
int iwarp_cm_rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask);
int iwarp_cm_rdma_set_local_ece(rdma_cm_id* id, ibv_ece* ece);
int iwarp_cm_rdma_get_remote_ece(rdma_cm_id* id, ibv_ece* ece);

// ---- <rdma/rdma_verbs.h> ----
int iwarp_cm_rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr);
int iwarp_cm_rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr);
void iwarp_cm_rdma_destroy_srq(rdma_cm_id* id);

// ---- <rdma/rsocket.h> ----
int iwarp_cm_rsocket(int domain, int type, int protocol);
int iwarp_cm_rbind(int socket, const sockaddr* addr, socklen_t addrlen);
int iwarp_cm_rlisten(int socket, int backlog);
int iwarp_cm_raccept(int socket, sockaddr* addr, socklen_t* addrlen);
int iwarp_cm_rconnect(int socket, const sockaddr* addr, socklen_t addrlen);
int iwarp_cm_rshutdown(int socket, int how);
int iwarp_cm_rclose(int socket);
ssize_t iwarp_cm_rrecv(int socket, void* buf, size_t len, int flags);
ssize_t iwarp_cm_rrecvfrom(int socket, void* buf, size_t len, int flags, sockaddr* src_addr,
                           socklen_t* addrlen);
ssize_t iwarp_cm_rrecvmsg(int socket, msghdr* msg, int flags);
ssize_t iwarp_cm_rsend(int socket, const void* buf, size_t len, int flags);
ssize_t iwarp_cm_rsendto(int socket, const void* buf, size_t len, int flags,
                         const sockaddr* dest_addr, socklen_t addrlen);
ssize_t iwarp_cm_rsendmsg(int socket, const msghdr* msg, int flags);
ssize_t iwarp_cm_rread(int socket, void* buf, size_t count);
ssize_t iwarp_cm_rreadv(int socket, const iovec* iov, int iovcnt);
ssize_t iwarp_cm_rwrite(int socket, const void* buf, size_t count);
ssize_t iwarp_cm_rwritev(int socket, const iovec* iov, int iovcnt);
int iwarp_cm_rpoll(pollfd* fds, nfds_t nfds, int timeout);
int iwarp_cm_rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds,
                     timeval* timeout);
int iwarp_cm_rgetpeername(int socket, sockaddr* addr, socklen_t* addrlen);
int iwarp_cm_rgetsockname(int socket, sockaddr* addr, socklen_t* addrlen);
int iwarp_cm_rsetsockopt(int socket, int level, int optname, const void* optval, socklen_t optlen);
int iwarp_cm_rgetsockopt(int socket, int level, int optname, void* optval, socklen_t* optlen);
int iwarp_cm_rfcntl(int socket, int cmd, long arg);
off_t iwarp_cm_riomap(int socket, void* buf, size_t len, int prot, int flags, off_t offset);
int iwarp_cm_riounmap(int socket, void* buf, size_t len);
size_t iwarp_cm_riowrite(int socket, const void* buf, size_t count, off_t offset, int flags);

}  // extern "C"
