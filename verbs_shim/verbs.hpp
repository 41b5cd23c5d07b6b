// A verbs API over the emulated RNIC, with the names, structures, opcodes and status values of
// libibverbs (ibv_reg_mr, ibv_post_send, ibv_poll_cq, ibv_req_notify_cq, completion channels,
// ...), so a libibverbs user can read and write it at once. Differences from libibverbs:
// everything lives in namespace iwarp::verbs; ibv_open_device() creates an emulated device;
// immediate data and invalidate_rkey are plain host-order fields.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "rnic/completion_queue.hpp"
#include "rnic/engine_fwd.hpp"
#include "rnic/qp_types.hpp"
#include "rnic/work_request.hpp"

namespace iwarp::verbs {

enum ibv_access_flags : int {
  IBV_ACCESS_LOCAL_WRITE = 1,
  IBV_ACCESS_REMOTE_WRITE = 2,
  IBV_ACCESS_REMOTE_READ = 4,
  IBV_ACCESS_REMOTE_ATOMIC = 8,
};

enum ibv_wr_opcode : int {
  IBV_WR_RDMA_WRITE = 0,
  IBV_WR_RDMA_WRITE_WITH_IMM = 1,
  IBV_WR_SEND = 2,
  IBV_WR_SEND_WITH_IMM = 3,
  IBV_WR_RDMA_READ = 4,
  IBV_WR_ATOMIC_CMP_AND_SWP = 5,
  IBV_WR_ATOMIC_FETCH_AND_ADD = 6,
  IBV_WR_LOCAL_INV = 7,
  IBV_WR_SEND_WITH_INV = 9,
};

enum ibv_send_flags : unsigned {
  IBV_SEND_FENCE = 1,
  IBV_SEND_SIGNALED = 2,
  IBV_SEND_SOLICITED = 4,
  IBV_SEND_INLINE = 8,
};

enum ibv_wc_status : int {
  IBV_WC_SUCCESS = 0,
  IBV_WC_LOC_LEN_ERR = 1,
  IBV_WC_LOC_QP_OP_ERR = 2,
  IBV_WC_LOC_PROT_ERR = 4,
  IBV_WC_WR_FLUSH_ERR = 5,
  IBV_WC_BAD_RESP_ERR = 7,
  IBV_WC_LOC_ACCESS_ERR = 8,
  IBV_WC_REM_INV_REQ_ERR = 9,
  IBV_WC_REM_ACCESS_ERR = 10,
  IBV_WC_REM_OP_ERR = 11,
  IBV_WC_FATAL_ERR = 19,
  IBV_WC_GENERAL_ERR = 21,
};
const char* ibv_wc_status_str(ibv_wc_status s);

enum ibv_wc_opcode : int {
  IBV_WC_SEND = 0,
  IBV_WC_RDMA_WRITE = 1,
  IBV_WC_RDMA_READ = 2,
  IBV_WC_COMP_SWAP = 3,
  IBV_WC_FETCH_ADD = 4,
  IBV_WC_LOCAL_INV = 6,
  IBV_WC_RECV = 128,
  IBV_WC_RECV_RDMA_WITH_IMM = 129,
};
const char* ibv_wc_opcode_str(ibv_wc_opcode op);

enum ibv_wc_flags : unsigned { IBV_WC_WITH_IMM = 2, IBV_WC_WITH_INV = 8 };

enum ibv_qp_type : int { IBV_QPT_RC = 2 };
enum ibv_qp_state : int {
  IBV_QPS_RESET = 0,  // IDLE
  IBV_QPS_INIT = 1,   // IDLE
  IBV_QPS_RTR = 2,
  IBV_QPS_RTS = 3,
  IBV_QPS_SQD = 4,  // CLOSING
  IBV_QPS_SQE = 5,  // TERMINATE
  IBV_QPS_ERR = 6,
};

struct ibv_context {
  std::unique_ptr<rnic::Device> dev;
  std::string name;
};

// Object lifetimes follow rdma-core: a PD with MRs, QPs or SRQs, a CQ with QPs or with
// completion events not yet acknowledged, and a channel with CQs cannot be destroyed (EBUSY).
struct ibv_pd {
  ibv_context* context = nullptr;
  std::uint32_t handle = 0;
  std::atomic<int> users{0};  // MRs, QPs and SRQs in this PD
};

struct ibv_mr {
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  void* addr = nullptr;
  std::size_t length = 0;
  std::uint32_t lkey = 0;  // iWARP: one STag serves as both keys
  std::uint32_t rkey = 0;
};

struct ibv_comp_channel {
  ibv_context* context = nullptr;
  rnic::CompletionChannel ch;
  std::atomic<int> cqs{0};  // CQs that report to it
  int fd() const { return ch.fd(); }
};

struct ibv_cq {
  ibv_context* context = nullptr;
  ibv_comp_channel* channel = nullptr;
  void* cq_context = nullptr;
  int cqe = 0;
  // Shared with the engine's queue pairs: a QP that outlives its ibv_qp (the engine finishing
  // a flush) still has somewhere to complete into.
  std::shared_ptr<rnic::CompletionQueue> cq;
  std::atomic<int> qps{0};  // QPs that complete into it
};

struct ibv_srq {
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  std::shared_ptr<rnic::SharedReceiveQueue> srq;
};

struct ibv_qp_cap {
  std::uint32_t max_send_wr = 256;
  std::uint32_t max_recv_wr = 256;
  std::uint32_t max_send_sge = 6;
  std::uint32_t max_recv_sge = 6;
  std::uint32_t max_inline_data = 80;
};

struct ibv_qp_init_attr {
  void* qp_context = nullptr;
  ibv_cq* send_cq = nullptr;
  ibv_cq* recv_cq = nullptr;
  ibv_srq* srq = nullptr;
  ibv_qp_cap cap;
  ibv_qp_type qp_type = IBV_QPT_RC;
  int sq_sig_all = 0;
};

struct ibv_qp {
  ibv_context* context = nullptr;
  void* qp_context = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* send_cq = nullptr;
  ibv_cq* recv_cq = nullptr;
  ibv_srq* srq = nullptr;
  std::uint32_t qp_num = 0;
  std::shared_ptr<rnic::QueuePair> qp;
};

struct ibv_sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

struct ibv_send_wr {
  std::uint64_t wr_id = 0;
  ibv_send_wr* next = nullptr;
  ibv_sge* sg_list = nullptr;
  int num_sge = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  unsigned send_flags = 0;
  std::uint32_t imm_data = 0;         // host order
  std::uint32_t invalidate_rkey = 0;  // SEND_WITH_INV, LOCAL_INV
  struct {
    struct {
      std::uint64_t remote_addr = 0;
      std::uint32_t rkey = 0;
    } rdma;
    struct {
      std::uint64_t remote_addr = 0;
      std::uint64_t compare_add = 0;
      std::uint64_t swap = 0;
      std::uint32_t rkey = 0;
    } atomic;
  } wr;
};

struct ibv_recv_wr {
  std::uint64_t wr_id = 0;
  ibv_recv_wr* next = nullptr;
  ibv_sge* sg_list = nullptr;
  int num_sge = 0;
};

struct ibv_wc {
  std::uint64_t wr_id = 0;
  ibv_wc_status status = IBV_WC_SUCCESS;
  ibv_wc_opcode opcode = IBV_WC_SEND;
  std::uint32_t vendor_err = 0;  // Terminate layer<<16 | etype<<8 | code when a Terminate caused it
  std::uint32_t byte_len = 0;
  std::uint32_t imm_data = 0;  // host order
  std::uint32_t invalidated_rkey = 0;
  std::uint32_t qp_num = 0;
  std::uint32_t src_qp = 0;
  unsigned wc_flags = 0;
};

// Devices. The emulated RNIC has no hardware to find: open creates one (engine thread included).
ibv_context* ibv_open_device(const char* name = "rnic0");
int ibv_close_device(ibv_context* ctx);
// This emulator's extension (as a provider's direct verbs, mlx5dv_*, are rdma-core's): with
// `on`, a thread that polls an unarmed CQ of the device and finds it empty runs the device's
// receive path itself, the engine thread parked while it polls; arming a CQ hands the engine
// back (the program is about to block). What `rnic run --busy-poll` sets for the drop-in.
int rnic_set_busy_poll(ibv_context* ctx, bool on);

ibv_pd* ibv_alloc_pd(ibv_context* ctx);
int ibv_dealloc_pd(ibv_pd* pd);

// Registers [addr, addr + length); the TO of addr is its virtual address, as in libibverbs.
ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, std::size_t length, int access);
int ibv_dereg_mr(ibv_mr* mr);

ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx);
int ibv_destroy_comp_channel(ibv_comp_channel* ch);
ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel,
                      int comp_vector);
int ibv_destroy_cq(ibv_cq* cq);
int ibv_poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int ibv_req_notify_cq(ibv_cq* cq, int solicited_only);
// Blocks until a CQ on the channel has an event. Returns 0, or -1 (errno set) on timeout
// when the channel is non-blocking (never here: it blocks).
int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context);
void ibv_ack_cq_events(ibv_cq* cq, unsigned nevents);

ibv_srq* ibv_create_srq(ibv_pd* pd, std::uint32_t max_wr, std::uint32_t max_sge);
int ibv_destroy_srq(ibv_srq* srq);

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr);
int ibv_destroy_qp(ibv_qp* qp);
ibv_qp_state ibv_query_qp_state(ibv_qp* qp);
// Only the move to IBV_QPS_ERR is open to applications (the connection manager does the rest).
int ibv_modify_qp_to_err(ibv_qp* qp);

// Return 0 or an errno value; on failure *bad_wr is the first WR not posted. The reason in
// words is available from ibv_last_error() on the same thread.
int ibv_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int ibv_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int ibv_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
const std::string& ibv_last_error();
void set_last_error(std::string why);

// Conversions for the layers below.
rnic::SendWr to_send_wr(const ibv_send_wr& wr);
rnic::RecvWr to_recv_wr(const ibv_recv_wr& wr);
ibv_wc to_ibv_wc(const rnic::Wc& wc);

}  // namespace iwarp::verbs
