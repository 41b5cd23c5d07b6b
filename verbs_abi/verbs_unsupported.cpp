// The libibverbs exports that are not the emulated RNIC's verbs (device.cpp, verbs.cpp have
// those): rdma-core's pure helpers, implemented as rdma-core 44 implements them, and the verbs
// this RNIC does not have (it is an iWARP RNIC with RC queue pairs only: no address handles, no
// multicast, no extended post-send API, no object import, no ECE, no dma-buf), which fail the
// way rdma-core fails a verb whose provider lacks it (the ops of libibverbs/dummy_ops.c: pointer
// verbs return NULL with errno EOPNOTSUPP, int verbs return EOPNOTSUPP, void verbs do nothing)
// and say why on stderr (once: report_unsupported). None of them dereferences its arguments
// unchecked.
#include <endian.h>
#include <unistd.h>

#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "verbs_abi/unsupported.hpp"

using iwarp::verbs_abi::report_unsupported;

// Exported by rdma-core's libibverbs but declared only in its private headers (driver.h,
// marshall.h), not in the installed <infiniband/verbs.h>.
extern "C" {
int ibv_dofork_range(void* base, size_t size);
int ibv_dontfork_range(void* base, size_t size);
const char* ibv_get_sysfs_path(void);
void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src);
void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src);
void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src);
void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src);
}

namespace {

// ---- The tables of rdma-core 44's helpers (libibverbs/verbs.c, enum_strs.c) ----

template <typename K, typename V>
struct Row {
  K key;
  V value;
};

template <typename K, typename V, std::size_t N>
constexpr V find_value(const Row<K, V> (&table)[N], K key, V otherwise) {
  for (const auto& row : table) {
    if (row.key == key) return row.value;
  }
  return otherwise;
}

template <typename K, typename V, std::size_t N>
constexpr K find_key(const Row<K, V> (&table)[N], V value, K otherwise) {
  for (const auto& row : table) {
    if (row.value == value) return row.key;
  }
  return otherwise;
}

// ibv_rate_to_mult / mult_to_ibv_rate: the rate as a multiple of 2.5 Gb/s.
constexpr Row<ibv_rate, int> kRateMult[] = {
    {IBV_RATE_2_5_GBPS, 1},   {IBV_RATE_5_GBPS, 2},     {IBV_RATE_10_GBPS, 4},
    {IBV_RATE_20_GBPS, 8},    {IBV_RATE_30_GBPS, 12},   {IBV_RATE_40_GBPS, 16},
    {IBV_RATE_60_GBPS, 24},   {IBV_RATE_80_GBPS, 32},   {IBV_RATE_120_GBPS, 48},
    {IBV_RATE_28_GBPS, 11},   {IBV_RATE_50_GBPS, 20},   {IBV_RATE_400_GBPS, 160},
    {IBV_RATE_600_GBPS, 240}, {IBV_RATE_800_GBPS, 320}, {IBV_RATE_1200_GBPS, 480},
};

// ibv_rate_to_mbps / mbps_to_ibv_rate: the data rate in Mb/s.
constexpr Row<ibv_rate, int> kRateMbps[] = {
    {IBV_RATE_2_5_GBPS, 2500},   {IBV_RATE_5_GBPS, 5000},       {IBV_RATE_10_GBPS, 10000},
    {IBV_RATE_20_GBPS, 20000},   {IBV_RATE_30_GBPS, 30000},     {IBV_RATE_40_GBPS, 40000},
    {IBV_RATE_60_GBPS, 60000},   {IBV_RATE_80_GBPS, 80000},     {IBV_RATE_120_GBPS, 120000},
    {IBV_RATE_14_GBPS, 14062},   {IBV_RATE_56_GBPS, 56250},     {IBV_RATE_112_GBPS, 112500},
    {IBV_RATE_168_GBPS, 168750}, {IBV_RATE_25_GBPS, 25781},     {IBV_RATE_100_GBPS, 103125},
    {IBV_RATE_200_GBPS, 206250}, {IBV_RATE_300_GBPS, 309375},   {IBV_RATE_28_GBPS, 28125},
    {IBV_RATE_50_GBPS, 53125},   {IBV_RATE_400_GBPS, 425000},   {IBV_RATE_600_GBPS, 637500},
    {IBV_RATE_800_GBPS, 850000}, {IBV_RATE_1200_GBPS, 1275000},
};

constexpr const char* kUnknown = "unknown";

constexpr Row<ibv_node_type, const char*> kNodeTypeStr[] = {
    {IBV_NODE_CA, "InfiniBand channel adapter"},
    {IBV_NODE_SWITCH, "InfiniBand switch"},
    {IBV_NODE_ROUTER, "InfiniBand router"},
    {IBV_NODE_RNIC, "iWARP NIC"},
    {IBV_NODE_USNIC, "usNIC"},
    {IBV_NODE_USNIC_UDP, "usNIC UDP"},
    {IBV_NODE_UNSPECIFIED, "unspecified"},
};

constexpr Row<ibv_port_state, const char*> kPortStateStr[] = {
    {IBV_PORT_NOP, "no state change (NOP)"},
    {IBV_PORT_DOWN, "down"},
    {IBV_PORT_INIT, "init"},
    {IBV_PORT_ARMED, "armed"},
    {IBV_PORT_ACTIVE, "active"},
    {IBV_PORT_ACTIVE_DEFER, "active defer"},
};

constexpr Row<ibv_event_type, const char*> kEventTypeStr[] = {
    {IBV_EVENT_CQ_ERR, "CQ error"},
    {IBV_EVENT_QP_FATAL, "local work queue catastrophic error"},
    {IBV_EVENT_QP_REQ_ERR, "invalid request local work queue error"},
    {IBV_EVENT_QP_ACCESS_ERR, "local access violation work queue error"},
    {IBV_EVENT_COMM_EST, "communication established"},
    {IBV_EVENT_SQ_DRAINED, "send queue drained"},
    {IBV_EVENT_PATH_MIG, "path migrated"},
    {IBV_EVENT_PATH_MIG_ERR, "path migration request error"},
    {IBV_EVENT_DEVICE_FATAL, "local catastrophic error"},
    {IBV_EVENT_PORT_ACTIVE, "port active"},
    {IBV_EVENT_PORT_ERR, "port error"},
    {IBV_EVENT_LID_CHANGE, "LID change"},
    {IBV_EVENT_PKEY_CHANGE, "P_Key change"},
    {IBV_EVENT_SM_CHANGE, "SM change"},
    {IBV_EVENT_SRQ_ERR, "SRQ catastrophic error"},
    {IBV_EVENT_SRQ_LIMIT_REACHED, "SRQ limit reached"},
    {IBV_EVENT_QP_LAST_WQE_REACHED, "last WQE reached"},
    {IBV_EVENT_CLIENT_REREGISTER, "client reregistration"},
    {IBV_EVENT_GID_CHANGE, "GID table change"},
    {IBV_EVENT_WQ_FATAL, "WQ fatal"},
};

constexpr Row<ibv_wc_status, const char*> kWcStatusStr[] = {
    {IBV_WC_SUCCESS, "success"},
    {IBV_WC_LOC_LEN_ERR, "local length error"},
    {IBV_WC_LOC_QP_OP_ERR, "local QP operation error"},
    {IBV_WC_LOC_EEC_OP_ERR, "local EE context operation error"},
    {IBV_WC_LOC_PROT_ERR, "local protection error"},
    {IBV_WC_WR_FLUSH_ERR, "Work Request Flushed Error"},
    {IBV_WC_MW_BIND_ERR, "memory management operation error"},
    {IBV_WC_BAD_RESP_ERR, "bad response error"},
    {IBV_WC_LOC_ACCESS_ERR, "local access error"},
    {IBV_WC_REM_INV_REQ_ERR, "remote invalid request error"},
    {IBV_WC_REM_ACCESS_ERR, "remote access error"},
    {IBV_WC_REM_OP_ERR, "remote operation error"},
    {IBV_WC_RETRY_EXC_ERR, "transport retry counter exceeded"},
    {IBV_WC_RNR_RETRY_EXC_ERR, "RNR retry counter exceeded"},
    {IBV_WC_LOC_RDD_VIOL_ERR, "local RDD violation error"},
    {IBV_WC_REM_INV_RD_REQ_ERR, "remote invalid RD request"},
    {IBV_WC_REM_ABORT_ERR, "aborted error"},
    {IBV_WC_INV_EECN_ERR, "invalid EE context number"},
    {IBV_WC_INV_EEC_STATE_ERR, "invalid EE context state"},
    {IBV_WC_FATAL_ERR, "fatal error"},
    {IBV_WC_RESP_TIMEOUT_ERR, "response timeout error"},
    {IBV_WC_GENERAL_ERR, "general error"},
    {IBV_WC_TM_ERR, "TM error"},
    {IBV_WC_TM_RNDV_INCOMPLETE, "TM software rendezvous"},
};

// ---- Why the unsupported verbs fail ----

constexpr const char* kNoAddressHandles =
    "address handles are not supported by the emulated iWARP RNIC (RC queue pairs only)";
constexpr const char* kNoMulticast =
    "multicast is not supported by the emulated iWARP RNIC (RC queue pairs only, no UD)";
constexpr const char* kNoImport =
    "sharing verbs objects between processes (ibv_import_*) is not supported by the emulated "
    "iWARP RNIC";
constexpr const char* kNoEce =
    "enhanced connection establishment (ECE) is not supported by the emulated iWARP RNIC";

// The pointer-returning failure: NULL with errno EOPNOTSUPP.
template <typename T>
T* fail_null(const char* call, const char* what) {
  report_unsupported(call, what);
  errno = EOPNOTSUPP;
  return nullptr;
}

// The failure of verbs that return an errno value (and, for programs that print errno, also
// leave it in errno).
int fail_errno_value(const char* call, const char* what) {
  report_unsupported(call, what);
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

}  // namespace

extern "C" {

// ---------------------------------------------------------------------------------------------
// Pure helpers (rdma-core 44: libibverbs/verbs.c, enum_strs.c, marshall.c, sysfs.c, memory.c)
// ---------------------------------------------------------------------------------------------

int ibv_rate_to_mult(enum ibv_rate rate) {
  return find_value(kRateMult, rate, -1);
}

enum ibv_rate mult_to_ibv_rate(int mult) {
  return find_key(kRateMult, mult, IBV_RATE_MAX);
}

int ibv_rate_to_mbps(enum ibv_rate rate) {
  return find_value(kRateMbps, rate, -1);
}

enum ibv_rate mbps_to_ibv_rate(int mbps) {
  return find_key(kRateMbps, mbps, IBV_RATE_MAX);
}

const char* ibv_node_type_str(enum ibv_node_type node_type) {
  return find_value(kNodeTypeStr, node_type, kUnknown);
}

const char* ibv_port_state_str(enum ibv_port_state port_state) {
  return find_value(kPortStateStr, port_state, kUnknown);
}

const char* ibv_event_type_str(enum ibv_event_type event) {
  return find_value(kEventTypeStr, event, kUnknown);
}

const char* ibv_wc_status_str(enum ibv_wc_status status) {
  return find_value(kWcStatusStr, status, kUnknown);
}

// rdma-core marks ranges MADV_DONTFORK/MADV_DOFORK only after ibv_fork_init(); the emulated RNIC
// pins no memory (the engine reads and writes registered buffers in place), so there is nothing
// to protect from copy-on-write and these succeed without doing anything.
int ibv_dontfork_range(void* /*base*/, size_t /*size*/) {
  return 0;
}

int ibv_dofork_range(void* /*base*/, size_t /*size*/) {
  return 0;
}

// "/sys", or $SYSFS_PATH without trailing slashes (not for set-uid callers), as rdma-core.
const char* ibv_get_sysfs_path(void) {
  static constexpr std::size_t kMax = 256;  // rdma-core's IBV_SYSFS_PATH_MAX
  static std::array<char, kMax + 1> buffer{};
  static const char* const path = [] {
    const char* env = getuid() == geteuid() ? std::getenv("SYSFS_PATH") : nullptr;
    if (env == nullptr) return "/sys";
    std::size_t len = strnlen(env, kMax);
    std::memcpy(buffer.data(), env, len);
    while (len > 0 && buffer[len - 1] == '/') --len;
    buffer[len] = '\0';
    return static_cast<const char*>(buffer.data());
  }();
  return path;
}

// Kernel-ABI to verbs struct copies (rdma-core: libibverbs/marshall.c), field by field.
void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src) {
  if (dst == nullptr || src == nullptr) return;
  std::memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof dst->grh.dgid);
  dst->grh.flow_label = src->grh.flow_label;
  dst->grh.sgid_index = src->grh.sgid_index;
  dst->grh.hop_limit = src->grh.hop_limit;
  dst->grh.traffic_class = src->grh.traffic_class;

  dst->dlid = src->dlid;
  dst->sl = src->sl;
  dst->src_path_bits = src->src_path_bits;
  dst->static_rate = src->static_rate;
  dst->is_global = src->is_global;
  dst->port_num = src->port_num;
}

void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src) {
  if (dst == nullptr || src == nullptr) return;
  // As rdma-core: qp_state itself is not copied.
  dst->cur_qp_state = static_cast<ibv_qp_state>(src->cur_qp_state);
  dst->path_mtu = static_cast<ibv_mtu>(src->path_mtu);
  dst->path_mig_state = static_cast<ibv_mig_state>(src->path_mig_state);
  dst->qkey = src->qkey;
  dst->rq_psn = src->rq_psn;
  dst->sq_psn = src->sq_psn;
  dst->dest_qp_num = src->dest_qp_num;
  dst->qp_access_flags = src->qp_access_flags;

  dst->cap.max_send_wr = src->max_send_wr;
  dst->cap.max_recv_wr = src->max_recv_wr;
  dst->cap.max_send_sge = src->max_send_sge;
  dst->cap.max_recv_sge = src->max_recv_sge;
  dst->cap.max_inline_data = src->max_inline_data;

  ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
  ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);

  dst->pkey_index = src->pkey_index;
  dst->alt_pkey_index = src->alt_pkey_index;
  dst->en_sqd_async_notify = src->en_sqd_async_notify;
  dst->sq_draining = src->sq_draining;
  dst->max_rd_atomic = src->max_rd_atomic;
  dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
  dst->min_rnr_timer = src->min_rnr_timer;
  dst->port_num = src->port_num;
  dst->timeout = src->timeout;
  dst->retry_cnt = src->retry_cnt;
  dst->rnr_retry = src->rnr_retry;
  dst->alt_port_num = src->alt_port_num;
  dst->alt_timeout = src->alt_timeout;
}

void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src) {
  if (dst == nullptr || src == nullptr) return;
  std::memcpy(dst->dgid.raw, src->dgid, sizeof dst->dgid);
  std::memcpy(dst->sgid.raw, src->sgid, sizeof dst->sgid);

  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = static_cast<int>(src->raw_traffic);
  dst->flow_label = src->flow_label;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->reversible = static_cast<int>(src->reversible);
  dst->numb_path = src->numb_path;
  dst->pkey = src->pkey;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->mtu = static_cast<uint8_t>(src->mtu);
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
  dst->packet_life_time_selector = src->packet_life_time_selector;
}

void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src) {
  if (dst == nullptr || src == nullptr) return;
  std::memcpy(dst->dgid, src->dgid.raw, sizeof src->dgid);
  std::memcpy(dst->sgid, src->sgid.raw, sizeof src->sgid);

  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = static_cast<uint32_t>(src->raw_traffic);
  dst->flow_label = src->flow_label;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->reversible = static_cast<uint32_t>(src->reversible);
  dst->numb_path = src->numb_path;
  dst->pkey = src->pkey;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->mtu = src->mtu;
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
  dst->packet_life_time_selector = src->packet_life_time_selector;
}

// rdma-core fills the generic fields and, for a completion without a GRH, succeeds. A GRH only
// arrives with UD receives (which this RNIC does not have); resolving its source GID to a
// RoCE GID-table index is not supported, so that case fails with EOPNOTSUPP.
int ibv_init_ah_from_wc(ibv_context* /*context*/, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                        ibv_ah_attr* ah_attr) {
  if (wc == nullptr || ah_attr == nullptr) {
    errno = EINVAL;
    return -1;
  }
  std::memset(ah_attr, 0, sizeof *ah_attr);
  if (grh != nullptr) ah_attr->grh.flow_label = be32toh(grh->version_tclass_flow) & 0xFFFFF;
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port_num;
  if ((wc->wc_flags & IBV_WC_GRH) == 0) return 0;

  ah_attr->is_global = 1;
  report_unsupported("ibv_init_ah_from_wc",
                     "address handles from a GRH (UD completions) are not supported by the "
                     "emulated iWARP RNIC (RC queue pairs only)");
  errno = EOPNOTSUPP;
  return -1;
}

// ---------------------------------------------------------------------------------------------
// Address handles and multicast (UD only; iWARP has RC queue pairs only)
// ---------------------------------------------------------------------------------------------

ibv_ah* ibv_create_ah(ibv_pd* /*pd*/, ibv_ah_attr* /*attr*/) {
  return fail_null<ibv_ah>("ibv_create_ah", kNoAddressHandles);
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* /*pd*/, ibv_wc* /*wc*/, ibv_grh* /*grh*/,
                              uint8_t /*port_num*/) {
  return fail_null<ibv_ah>("ibv_create_ah_from_wc", kNoAddressHandles);
}

// No address handle can exist, so there is none to destroy.
int ibv_destroy_ah(ibv_ah* /*ah*/) {
  return fail_errno_value("ibv_destroy_ah", kNoAddressHandles);
}

int ibv_attach_mcast(ibv_qp* /*qp*/, const union ibv_gid* /*gid*/, uint16_t /*lid*/) {
  return fail_errno_value("ibv_attach_mcast", kNoMulticast);
}

int ibv_detach_mcast(ibv_qp* /*qp*/, const union ibv_gid* /*gid*/, uint16_t /*lid*/) {
  return fail_errno_value("ibv_detach_mcast", kNoMulticast);
}

// RoCE: the MAC and VLAN of the peer behind a GID. Returns a negative errno value, as rdma-core.
int ibv_resolve_eth_l2_from_gid(ibv_context* /*context*/, ibv_ah_attr* /*attr*/,
                                uint8_t /*eth_mac*/[ETHERNET_LL_SIZE], uint16_t* /*vid*/) {
  report_unsupported("ibv_resolve_eth_l2_from_gid",
                     "Ethernet address resolution from a RoCE GID does not apply to the emulated "
                     "iWARP RNIC");
  errno = EOPNOTSUPP;
  return -EOPNOTSUPP;
}

// ---------------------------------------------------------------------------------------------
// Memory regions beyond ibv_reg_mr*
// ---------------------------------------------------------------------------------------------

// A failed re-registration leaves the MR as it was; rdma-core reports a failed provider
// command as IBV_REREG_MR_ERR_CMD with the provider's errno.
int ibv_rereg_mr(ibv_mr* /*mr*/, int /*flags*/, ibv_pd* /*pd*/, void* /*addr*/, size_t /*length*/,
                 int /*access*/) {
  report_unsupported("ibv_rereg_mr",
                     "re-registering a memory region is not supported by the emulated iWARP "
                     "RNIC (deregister it and register again)");
  errno = EOPNOTSUPP;
  return IBV_REREG_MR_ERR_CMD;
}

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* /*pd*/, uint64_t /*offset*/, size_t /*length*/, uint64_t /*iova*/,
                          int /*fd*/, int /*access*/) {
  return fail_null<ibv_mr>("ibv_reg_dmabuf_mr",
                           "dma-buf memory regions are not supported by the emulated iWARP RNIC "
                           "(use ibv_reg_mr on host memory)");
}

// ---------------------------------------------------------------------------------------------
// Queue pair extras
// ---------------------------------------------------------------------------------------------

// rdma-core returns NULL for a QP not created with ibv_create_qp_ex() and the send-ops flags;
// this RNIC's QPs never have the extended post-send interface.
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* /*qp*/) {
  return fail_null<ibv_qp_ex>("ibv_qp_to_qp_ex",
                              "the extended post-send API (ibv_qp_ex, ibv_wr_*) is not supported "
                              "by the emulated iWARP RNIC (use ibv_post_send; perftest: "
                              "--use_old_post_send)");
}

// The answer of rdma-core's default op: 0, i.e. no in-order guarantee is offered.
int ibv_query_qp_data_in_order(ibv_qp* /*qp*/, enum ibv_wr_opcode /*op*/, uint32_t /*flags*/) {
  report_unsupported("ibv_query_qp_data_in_order",
                     "in-order data placement is not guaranteed by the emulated iWARP RNIC "
                     "(answering 0)");
  return 0;
}

int ibv_set_ece(ibv_qp* /*qp*/, ibv_ece* /*ece*/) {
  return fail_errno_value("ibv_set_ece", kNoEce);
}

int ibv_query_ece(ibv_qp* /*qp*/, ibv_ece* /*ece*/) {
  return fail_errno_value("ibv_query_ece", kNoEce);
}

// ---------------------------------------------------------------------------------------------
// Importing objects of another process (needs a shared kernel command fd)
// ---------------------------------------------------------------------------------------------

ibv_context* ibv_import_device(int /*cmd_fd*/) {
  return fail_null<ibv_context>("ibv_import_device",
                                "importing a device from a command fd is not supported (the "
                                "emulated iWARP RNIC has no kernel device)");
}

ibv_pd* ibv_import_pd(ibv_context* /*context*/, uint32_t /*pd_handle*/) {
  return fail_null<ibv_pd>("ibv_import_pd", kNoImport);
}

void ibv_unimport_pd(ibv_pd* /*pd*/) {
  report_unsupported("ibv_unimport_pd", kNoImport);
}

ibv_mr* ibv_import_mr(ibv_pd* /*pd*/, uint32_t /*mr_handle*/) {
  return fail_null<ibv_mr>("ibv_import_mr", kNoImport);
}

void ibv_unimport_mr(ibv_mr* /*mr*/) {
  report_unsupported("ibv_unimport_mr", kNoImport);
}

ibv_dm* ibv_import_dm(ibv_context* /*context*/, uint32_t /*dm_handle*/) {
  return fail_null<ibv_dm>("ibv_import_dm", kNoImport);
}

void ibv_unimport_dm(ibv_dm* /*dm*/) {
  report_unsupported("ibv_unimport_dm", kNoImport);
}

}  // extern "C"
