// The librdmacm entry points (cm_entry.hpp) that the emulated RNIC's CM (cm.cpp) does not
// implement. rpoll() and rselect() are poll() and select(): rsockets never exist here, so every
// descriptor a program hands them is an ordinary one (rping and ucmatose import rpoll for
// exactly that use). The rest fail as librdmacm fails, -1 with errno (NULL for pointers, nothing
// for void), and report the call once on stderr:
//  * rsockets: ENOSYS;
//  * multicast: ENOSYS, which is what the kernel's rdma_cm answers on an iWARP device;
//  * ECE, the SRQ helpers, and the synchronous endpoint helpers rdma_create_ep /
//    rdma_get_request: EOPNOTSUPP.
#include <poll.h>
#include <sys/select.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "verbs_abi/cm_entry.hpp"
#include "verbs_abi/unsupported.hpp"

using iwarp::verbs_abi::report_unsupported;

namespace {

constexpr const char* kNoRsockets =
    "rsockets are not supported by the emulated iWARP RNIC (use the rdma_cm API)";
constexpr const char* kCmNoMulticast = "multicast is not supported on iWARP (RC connections only)";
constexpr const char* kCmNoEce =
    "enhanced connection establishment (ECE) is not supported on iWARP";
constexpr const char* kNoCmSrq =
    "rdma_cm shared receive queues are not supported by the emulated iWARP RNIC (use "
    "ibv_create_srq)";
constexpr const char* kNoEndpoints =
    "the synchronous endpoint helpers (rdma_create_ep, rdma_get_request) are not supported by "
    "the emulated iWARP RNIC (use rdma_create_id with an event channel)";

// librdmacm's ERR(e): errno = e, return -1 (of the function's return type).
template <typename T = int>
T fail(const char* call, const char* what, int err) {
  report_unsupported(call, what);
  errno = err;
  return static_cast<T>(-1);
}

}  // namespace

extern "C" {

// ---- Endpoints, SRQs, ECE ----

int iwarp_cm_rdma_create_ep(rdma_cm_id** /*id*/, rdma_addrinfo* /*res*/, ibv_pd* /*pd*/,
                            ibv_qp_init_attr* /*qp_init_attr*/) {
  return fail("rdma_create_ep", kNoEndpoints, EOPNOTSUPP);
}

// Only an id from rdma_create_ep may be passed here, and that never succeeds.
void iwarp_cm_rdma_destroy_ep(rdma_cm_id* /*id*/) {
  report_unsupported("rdma_destroy_ep", kNoEndpoints);
}

int iwarp_cm_rdma_get_request(rdma_cm_id* /*listen*/, rdma_cm_id** /*id*/) {
  return fail("rdma_get_request", kNoEndpoints, EOPNOTSUPP);
}

int iwarp_cm_rdma_create_srq(rdma_cm_id* /*id*/, ibv_pd* /*pd*/, ibv_srq_init_attr* /*attr*/) {
  return fail("rdma_create_srq", kNoCmSrq, EOPNOTSUPP);
}

int iwarp_cm_rdma_create_srq_ex(rdma_cm_id* /*id*/, ibv_srq_init_attr_ex* /*attr*/) {
  return fail("rdma_create_srq_ex", kNoCmSrq, EOPNOTSUPP);
}

// Only an SRQ from rdma_create_srq* may be passed here, and that never succeeds.
void iwarp_cm_rdma_destroy_srq(rdma_cm_id* /*id*/) {
  report_unsupported("rdma_destroy_srq", kNoCmSrq);
}

int iwarp_cm_rdma_reject_ece(rdma_cm_id* /*id*/, const void* /*private_data*/,
                             uint8_t /*private_data_len*/) {
  return fail("rdma_reject_ece", kCmNoEce, EOPNOTSUPP);
}

int iwarp_cm_rdma_set_local_ece(rdma_cm_id* /*id*/, ibv_ece* /*ece*/) {
  return fail("rdma_set_local_ece", kCmNoEce, EOPNOTSUPP);
}

int iwarp_cm_rdma_get_remote_ece(rdma_cm_id* /*id*/, ibv_ece* /*ece*/) {
  return fail("rdma_get_remote_ece", kCmNoEce, EOPNOTSUPP);
}

// ---- Multicast ----

int iwarp_cm_rdma_join_multicast(rdma_cm_id* /*id*/, sockaddr* /*addr*/, void* /*context*/) {
  return fail("rdma_join_multicast", kCmNoMulticast, ENOSYS);
}

int iwarp_cm_rdma_join_multicast_ex(rdma_cm_id* /*id*/, rdma_cm_join_mc_attr_ex* /*mc_join_attr*/,
                                    void* /*context*/) {
  return fail("rdma_join_multicast_ex", kCmNoMulticast, ENOSYS);
}

int iwarp_cm_rdma_leave_multicast(rdma_cm_id* /*id*/, sockaddr* /*addr*/) {
  return fail("rdma_leave_multicast", kCmNoMulticast, ENOSYS);
}

// ---- rsockets: rpoll/rselect work on ordinary descriptors, the rest fails ----

int iwarp_cm_rpoll(pollfd* fds, nfds_t nfds, int timeout) {
  return ::poll(fds, nfds, timeout);
}

int iwarp_cm_rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds,
                     timeval* timeout) {
  return ::select(nfds, readfds, writefds, exceptfds, timeout);
}

int iwarp_cm_rsocket(int /*domain*/, int /*type*/, int /*protocol*/) {
  return fail("rsocket", kNoRsockets, ENOSYS);
}

int iwarp_cm_rbind(int /*socket*/, const sockaddr* /*addr*/, socklen_t /*addrlen*/) {
  return fail("rbind", kNoRsockets, ENOSYS);
}

int iwarp_cm_rlisten(int /*socket*/, int /*backlog*/) {
  return fail("rlisten", kNoRsockets, ENOSYS);
}

int iwarp_cm_raccept(int /*socket*/, sockaddr* /*addr*/, socklen_t* /*addrlen*/) {
  return fail("raccept", kNoRsockets, ENOSYS);
}

int iwarp_cm_rconnect(int /*socket*/, const sockaddr* /*addr*/, socklen_t /*addrlen*/) {
  return fail("rconnect", kNoRsockets, ENOSYS);
}

int iwarp_cm_rshutdown(int /*socket*/, int /*how*/) {
  return fail("rshutdown", kNoRsockets, ENOSYS);
}

int iwarp_cm_rclose(int /*socket*/) {
  return fail("rclose", kNoRsockets, ENOSYS);
}

ssize_t iwarp_cm_rrecv(int /*socket*/, void* /*buf*/, size_t /*len*/, int /*flags*/) {
  return fail<ssize_t>("rrecv", kNoRsockets, ENOSYS);
}

ssize_t iwarp_cm_rrecvfrom(int /*socket*/, void* /*buf*/, size_t /*len*/, int /*flags*/,
                           sockaddr* /*src_addr*/, socklen_t* /*addrlen*/) {
  return fail<ssize_t>("rrecvfrom", kNoRsockets, ENOSYS);
}

ssize_t iwarp_cm_rrecvmsg(int /*socket*/, msghdr* /*msg*/, int /*flags*/) {
  return fail<ssize_t>("rrecvmsg", kNoRsockets, ENOSYS);
}

ssize_t iwarp_cm_rsend(int /*socket*/, const void* /*buf*/, size_t /*len*/, int /*flags*/) {
  return fail<ssize_t>("rsend", kNoRsockets, ENOSYS);
}

ssize_t iwarp_cm_rsendto(int /*socket*/, const void* /*buf*/, size_t /*len*/, int /*flags*/,
                         const sockaddr* /*dest_addr*/, socklen_t /*addrlen*/) {
  return fail<ssize_t>("rsendto", kNoRsockets, ENOSYS);
}

ssize_t iwarp_cm_rsendmsg(int /*socket*/, const msghdr* /*msg*/, int /*flags*/) {
  return fail<ssize_t>("rsendmsg", kNoRsockets, ENOSYS);
}

ssize_t iwarp_cm_rread(int /*socket*/, void* /*buf*/, size_t /*count*/) {
  return fail<ssize_t>("rread", kNoRsockets, ENOSYS);
}

ssize_t iwarp_cm_rreadv(int /*socket*/, const iovec* /*iov*/, int /*iovcnt*/) {
  return fail<ssize_t>("rreadv", kNoRsockets, ENOSYS);
}

ssize_t iwarp_cm_rwrite(int /*socket*/, const void* /*buf*/, size_t /*count*/) {
  return fail<ssize_t>("rwrite", kNoRsockets, ENOSYS);
}

ssize_t iwarp_cm_rwritev(int /*socket*/, const iovec* /*iov*/, int /*iovcnt*/) {
  return fail<ssize_t>("rwritev", kNoRsockets, ENOSYS);
}

int iwarp_cm_rgetpeername(int /*socket*/, sockaddr* /*addr*/, socklen_t* /*addrlen*/) {
  return fail("rgetpeername", kNoRsockets, ENOSYS);
}

int iwarp_cm_rgetsockname(int /*socket*/, sockaddr* /*addr*/, socklen_t* /*addrlen*/) {
  return fail("rgetsockname", kNoRsockets, ENOSYS);
}

int iwarp_cm_rsetsockopt(int /*socket*/, int /*level*/, int /*optname*/, const void* /*optval*/,
                         socklen_t /*optlen*/) {
  return fail("rsetsockopt", kNoRsockets, ENOSYS);
}

int iwarp_cm_rgetsockopt(int /*socket*/, int /*level*/, int /*optname*/, void* /*optval*/,
                         socklen_t* /*optlen*/) {
  return fail("rgetsockopt", kNoRsockets, ENOSYS);
}

int iwarp_cm_rfcntl(int /*socket*/, int /*cmd*/, long /*arg*/) {
  return fail("rfcntl", kNoRsockets, ENOSYS);
}

off_t iwarp_cm_riomap(int /*socket*/, void* /*buf*/, size_t /*len*/, int /*prot*/, int /*flags*/,
                      off_t /*offset*/) {
  return fail<off_t>("riomap", kNoRsockets, ENOSYS);
}

int iwarp_cm_riounmap(int /*socket*/, void* /*buf*/, size_t /*len*/) {
  return fail("riounmap", kNoRsockets, ENOSYS);
}

// size_t return: librdmacm's error value is (size_t)-1 as well.
size_t iwarp_cm_riowrite(int /*socket*/, const void* /*buf*/, size_t /*count*/, off_t /*offset*/,
                         int /*flags*/) {
  return fail<size_t>("riowrite", kNoRsockets, ENOSYS);
}

}  // extern "C"
