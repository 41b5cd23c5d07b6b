// Stub libefa.so.1 for perftest (verbs_abi/CMakeLists.txt): the ib_* binaries NEED libefa.so.1
// and, being linked BIND_NOW, must resolve the two efadv_* symbols they import (used for SRD on
// AWS EFA devices only). The real libefa is a provider that imports rdma-core's private
// libibverbs interface, which the drop-in libibverbs does not have, so this stub takes its place,
// failing as libefa does on a device that is not an EFA. It depends on nothing but libc.
#include <cerrno>
#include <cstdint>

#if __has_include(<infiniband/efadv.h>)
#include <infiniband/efadv.h>  // checks the declarations below against the real ones
#endif

extern "C" {

// Only pointers to these cross the ABI.
struct ibv_context;
struct ibv_qp;
struct ibv_qp_init_attr_ex;
struct efadv_device_attr;
struct efadv_qp_init_attr;

// EFA_1.1
int efadv_query_device(ibv_context* ibvctx, efadv_device_attr* attr, uint32_t inlen);
ibv_qp* efadv_create_qp_ex(ibv_context* ibvctx, ibv_qp_init_attr_ex* attr_ex,
                           efadv_qp_init_attr* efa_attr, uint32_t inlen);

int efadv_query_device(ibv_context* /*ibvctx*/, efadv_device_attr* /*attr*/, uint32_t /*inlen*/) {
  return EOPNOTSUPP;
}

ibv_qp* efadv_create_qp_ex(ibv_context* /*ibvctx*/, ibv_qp_init_attr_ex* /*attr_ex*/,
                           efadv_qp_init_attr* /*efa_attr*/, uint32_t /*inlen*/) {
  errno = EOPNOTSUPP;
  return nullptr;
}

}  // extern "C"
