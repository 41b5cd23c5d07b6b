// What both verbs APIs translate between their ibv_* / rdma_cm structures and the engine's
// value types, written once. The C++ shim (verbs_shim/) has its own look-alike ibv_* types and
// the drop-in (verbs_abi/) the system's <infiniband/verbs.h>, so the translations are
// templates over the fields both spell the same (libibverbs' names); what differs between the
// two (byte order of immediate data, the C ABI's unions) stays with each caller.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/strong_types.hpp"
#include "rnic/qp_types.hpp"
#include "rnic/work_request.hpp"

namespace iwarp::rnic {

// librdmacm's rdma_cm_event_type numbering (rdma_event_str's names), or nullptr for a value
// librdmacm does not define.
constexpr const char* rdma_cm_event_name(int event) {
  constexpr const char* kNames[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",   "RDMA_CM_EVENT_ADDR_ERROR",
      "RDMA_CM_EVENT_ROUTE_RESOLVED",  "RDMA_CM_EVENT_ROUTE_ERROR",
      "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",   "RDMA_CM_EVENT_UNREACHABLE",
      "RDMA_CM_EVENT_REJECTED",        "RDMA_CM_EVENT_ESTABLISHED",
      "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN",  "RDMA_CM_EVENT_MULTICAST_ERROR",
      "RDMA_CM_EVENT_ADDR_CHANGE",     "RDMA_CM_EVENT_TIMEWAIT_EXIT",
  };
  if (event < 0 || static_cast<std::size_t>(event) >= std::size(kNames)) return nullptr;
  return kNames[event];
}

// libibverbs' ibv_qp_state value for an engine state, as siw reports them: IDLE is INIT (the
// drop-in tells RESET apart itself), CLOSING is SQD, TERMINATE is SQE.
constexpr int ibv_qp_state_value(QpState s) {
  switch (s) {
    case QpState::Idle:
      return 1;  // IBV_QPS_INIT
    case QpState::Rtr:
      return 2;  // IBV_QPS_RTR
    case QpState::Rts:
      return 3;  // IBV_QPS_RTS
    case QpState::Closing:
      return 4;  // IBV_QPS_SQD
    case QpState::Terminate:
      return 5;  // IBV_QPS_SQE
    case QpState::Error:
      return 6;  // IBV_QPS_ERR
  }
  return 6;  // IBV_QPS_ERR
}

// An ibv_sge (addr, length, lkey).
template <class IbvSge>
Sge sge_from_ibv(const IbvSge& s) {
  return {s.addr, s.length, STag{s.lkey}};
}

// An ibv_recv_wr (wr_id, num_sge entries of sg_list).
template <class IbvRecvWr>
RecvWr recv_wr_from_ibv(const IbvRecvWr& w) {
  RecvWr r;
  r.wr_id = w.wr_id;
  r.sg_list.reserve(static_cast<std::size_t>(std::max(w.num_sge, 0)));
  for (int i = 0; i < w.num_sge; ++i) r.sg_list.push_back(sge_from_ibv(w.sg_list[i]));
  return r;
}

// The parts of an ibv_send_wr both APIs read alike: wr_id, opcode (same numbering), the SGEs,
// and the remote address and key (of wr.atomic for the atomics, else of wr.rdma) with the
// atomics' operands. The send flags, immediate data and the STag to invalidate are the
// caller's to fill in.
template <class IbvSendWr>
SendWr send_wr_from_ibv(const IbvSendWr& w) {
  SendWr r;
  r.wr_id = w.wr_id;
  r.opcode = static_cast<WrOpcode>(w.opcode);
  r.sg_list.reserve(static_cast<std::size_t>(std::max(w.num_sge, 0)));
  for (int i = 0; i < w.num_sge; ++i) r.sg_list.push_back(sge_from_ibv(w.sg_list[i]));
  if (r.opcode == WrOpcode::AtomicCmpAndSwp || r.opcode == WrOpcode::AtomicFetchAndAdd) {
    r.remote_addr = w.wr.atomic.remote_addr;
    r.rkey = STag{w.wr.atomic.rkey};
    r.compare_add = w.wr.atomic.compare_add;
    r.swap = w.wr.atomic.swap;
  } else {
    r.remote_addr = w.wr.rdma.remote_addr;
    r.rkey = STag{w.wr.rdma.rkey};
  }
  return r;
}

// The fields of an ibv_wc both APIs fill alike (status and opcode use libibverbs' numbering);
// immediate data, the invalidated STag and src_qp are the caller's.
template <class IbvWc>
void fill_ibv_wc(const Wc& w, IbvWc& o) {
  o.wr_id = w.wr_id;
  o.status = static_cast<decltype(o.status)>(w.status);
  o.opcode = static_cast<decltype(o.opcode)>(w.opcode);
  o.vendor_err = w.vendor_err;
  o.byte_len = w.byte_len;
  o.qp_num = w.qp_num;
  o.wc_flags = w.wc_flags;
}

}  // namespace iwarp::rnic
