// A ready-made connected endpoint over the shim, for programs and tests that want a QP with its
// CQs and a completion channel without writing the rdma_cm dance each time: device, PD, one CQ
// per direction on one completion channel, a QP, and the connect or listen/accept sequence,
// with blocking helpers that wait for a completion (on the channel, no busy loop) or an event.
#pragma once

#include <chrono>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "verbs_shim/rdma_cm.hpp"
#include "verbs_shim/verbs.hpp"

namespace iwarp::verbs {

// A work request with one SGE, the common case, for designated-initializer posting:
//   post_one(qp, {.op = IBV_WR_RDMA_WRITE, .addr = buf, .len = n, .lkey = mr->lkey,
//                 .remote_addr = to, .rkey = stag});
struct OneWr {
  ibv_wr_opcode op = IBV_WR_SEND;
  const void* addr = nullptr;
  std::uint32_t len = 0;
  std::uint32_t lkey = 0;
  std::uint64_t remote_addr = 0;  // Write, Read, atomics
  std::uint32_t rkey = 0;         // Write, Read, atomics; the STag to invalidate for SEND_WITH_INV
  unsigned flags = IBV_SEND_SIGNALED;
  std::uint64_t wr_id = 0;
  std::uint32_t imm = 0;
  std::uint64_t compare_add = 0, swap = 0;  // atomics
};
int post_one(ibv_qp* qp, const OneWr& w);
// A receive WR with one SGE.
int post_one_recv(ibv_qp* qp, const void* addr, std::uint32_t len, std::uint32_t lkey,
                  std::uint64_t wr_id = 0);

struct EndpointOptions {
  rnic::CmOptions cm;
  ibv_qp_cap cap;
  int cq_depth = 4096;
  std::uint16_t ird = 16, ord = 16;  // 14 bits on the wire (RFC 6581 §3)
  Bytes private_data;
  std::chrono::milliseconds timeout{10000};  // for each wait
  // Runs once the QP exists and before the connection is accepted or requested: the place to
  // post the first receives, so the peer's first Send finds one (as rping does).
  std::function<void(class Endpoint&)> on_qp_created;
};

class Endpoint {
 public:
  explicit Endpoint(EndpointOptions opts = {}, ibv_context* shared_device = nullptr);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // Server: listen on addr:port (0 picks a port), returns the port or an error message.
  std::expected<std::uint16_t, std::string> listen(const std::string& addr, std::uint16_t port);
  // Server: waits for one connect request (for ever, or within `limit`) and accepts it.
  std::expected<void, std::string> accept_one(std::optional<std::chrono::milliseconds> limit = {});
  // Server: stops listening (the accepted connection stays): the port refuses new clients
  // until a listener takes it again.
  void stop_listening();
  // Client: connects and waits for ESTABLISHED.
  std::expected<void, std::string> connect(const std::string& host, std::uint16_t port);

  // Waits for the next completion on `cq` (send or recv).
  std::expected<ibv_wc, std::string> wait(ibv_cq* cq);
  // Waits for a CM event of `type` (others are skipped; errors end the wait) within `timeout`
  // (default: options().timeout).
  std::expected<rdma_cm_event, std::string> wait_event(
      rdma_cm_event_type type, std::optional<std::chrono::milliseconds> timeout = {});
  std::expected<rdma_cm_event, std::string> wait_event_forever(rdma_cm_event_type type);
  // The next CM event, if one arrives within `t`.
  std::optional<rdma_cm_event> next_event(std::chrono::milliseconds t);

  ibv_mr* reg(void* addr, std::size_t len, int access);
  // Deregisters a region reg() made (nothing in the engine touches its memory afterwards, so
  // it may be freed); false for one it did not make.
  bool dereg(ibv_mr* mr);

  ibv_context* ctx() { return ctx_; }
  ibv_pd* pd() { return pd_; }
  ibv_cq* send_cq() { return scq_; }
  ibv_cq* recv_cq() { return rcq_; }
  ibv_qp* qp() { return conn_ ? conn_->qp : nullptr; }
  rdma_cm_id* id() { return conn_; }
  const std::optional<mpa::ConnectionParams>& params() const { return params_; }
  const Bytes& peer_private_data() const { return peer_pd_; }
  EndpointOptions& options() { return opts_; }

 private:
  std::expected<void, std::string> make_qp(rdma_cm_id* id);
  EndpointOptions opts_;
  bool own_ctx_ = false;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* sch_ = nullptr;
  ibv_comp_channel* rch_ = nullptr;
  ibv_cq* scq_ = nullptr;
  ibv_cq* rcq_ = nullptr;
  rdma_event_channel* ech_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  rdma_cm_id* conn_ = nullptr;
  std::vector<ibv_mr*> mrs_;
  std::optional<mpa::ConnectionParams> params_;
  Bytes peer_pd_;
  std::expected<void, std::string> check_private_data() const;
};

}  // namespace iwarp::verbs
