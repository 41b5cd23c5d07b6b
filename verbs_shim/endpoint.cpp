#include "verbs_shim/endpoint.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common/log.hpp"
#include "mpa/mpa_frame.hpp"
#include "rnic/connection_manager.hpp"
#include "rnic/device.hpp"
#include "rnic/queue_pair.hpp"
#include "rnic/segment_tap.hpp"

namespace iwarp::verbs {

int post_one(ibv_qp* qp, const OneWr& w) {
  ibv_sge sge{reinterpret_cast<std::uint64_t>(w.addr), w.len, w.lkey};
  ibv_send_wr wr;
  wr.wr_id = w.wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = w.op;
  wr.send_flags = w.flags;
  wr.imm_data = w.imm;
  wr.invalidate_rkey = w.rkey;
  wr.wr.rdma.remote_addr = wr.wr.atomic.remote_addr = w.remote_addr;
  wr.wr.rdma.rkey = wr.wr.atomic.rkey = w.rkey;
  wr.wr.atomic.compare_add = w.compare_add;
  wr.wr.atomic.swap = w.swap;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

int post_one_recv(ibv_qp* qp, const void* addr, std::uint32_t len, std::uint32_t lkey,
                  std::uint64_t wr_id) {
  ibv_sge sge{reinterpret_cast<std::uint64_t>(addr), len, lkey};
  ibv_recv_wr wr;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

Endpoint::Endpoint(EndpointOptions opts, ibv_context* shared_device) : opts_(std::move(opts)) {
  own_ctx_ = shared_device == nullptr;
  ctx_ = shared_device ? shared_device : ibv_open_device("rnic0");
  pd_ = ibv_alloc_pd(ctx_);
  // One channel per CQ, so waiting on one direction never eats the other's event.
  sch_ = ibv_create_comp_channel(ctx_);
  rch_ = ibv_create_comp_channel(ctx_);
  scq_ = ibv_create_cq(ctx_, opts_.cq_depth, nullptr, sch_, 0);
  rcq_ = ibv_create_cq(ctx_, opts_.cq_depth, nullptr, rch_, 0);
  ech_ = rdma_create_event_channel(ctx_);
}

Endpoint::~Endpoint() {
  if (conn_) {
    if (conn_->qp) {
      rdma_disconnect(conn_);
      rdma_destroy_qp(conn_);
    }
    rdma_destroy_id(conn_);
  }
  if (listen_id_) rdma_destroy_id(listen_id_);
  for (auto* mr : mrs_) ibv_dereg_mr(mr);
  rdma_destroy_event_channel(ech_);
  // A segment tap (--real-segments) posts to the device's engine from its own thread: nothing
  // more once the device goes.
  if (opts_.cm.segment_tap) opts_.cm.segment_tap->detach_all();
  // The engine may still run handlers that touch the CQs: stop it first.
  if (own_ctx_) {
    ctx_->dev.reset();
  }
  ibv_destroy_cq(scq_);
  ibv_destroy_cq(rcq_);
  ibv_destroy_comp_channel(sch_);
  ibv_destroy_comp_channel(rch_);
  ibv_dealloc_pd(pd_);
  if (own_ctx_) ibv_close_device(ctx_);
}

ibv_mr* Endpoint::reg(void* addr, std::size_t len, int access) {
  auto* mr = ibv_reg_mr(pd_, addr, len, access);
  if (mr) mrs_.push_back(mr);
  return mr;
}

bool Endpoint::dereg(ibv_mr* mr) {
  auto it = std::find(mrs_.begin(), mrs_.end(), mr);
  if (it == mrs_.end() || ibv_dereg_mr(mr) != 0) return false;  // kept: still registered
  mrs_.erase(it);
  return true;
}

std::expected<void, std::string> Endpoint::make_qp(rdma_cm_id* id) {
  ibv_qp_init_attr attr;
  attr.send_cq = scq_;
  attr.recv_cq = rcq_;
  attr.cap = opts_.cap;
  if (int e = rdma_create_qp(id, pd_, &attr); e)
    return std::unexpected(fmt::format("cannot create the QP: {}", ibv_last_error()));
  if (opts_.on_qp_created) opts_.on_qp_created(*this);
  return {};
}

std::optional<rdma_cm_event> Endpoint::next_event(std::chrono::milliseconds t) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ech_, &ev, static_cast<int>(t.count())) != 0) return std::nullopt;
  rdma_cm_event copy = *ev;
  rdma_ack_cm_event(ev);
  // A connection that failed before CONNECT_REQUEST comes with an id made for it: not ours to
  // keep.
  if (copy.event == RDMA_CM_EVENT_CONNECT_ERROR && copy.id && copy.id != conn_ &&
      copy.id != listen_id_) {
    rdma_destroy_id(copy.id);
    copy.id = nullptr;
  }
  copy.param.conn.private_data =
      copy.private_data_storage.empty() ? nullptr : copy.private_data_storage.data();
  return copy;
}

std::expected<rdma_cm_event, std::string> Endpoint::wait_event_forever(rdma_cm_event_type type) {
  return wait_event(type, std::chrono::hours(24 * 365));
}

std::expected<rdma_cm_event, std::string> Endpoint::wait_event(
    rdma_cm_event_type type, std::optional<std::chrono::milliseconds> timeout) {
  const auto limit = timeout.value_or(opts_.timeout);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return std::unexpected(
          fmt::format("no {} within {} ms", rdma_event_str(type), limit.count()));
    auto ev = next_event(left);
    if (!ev) continue;
    if (ev->event == type) return std::move(*ev);  // a move keeps private_data valid
    if (ev->event == RDMA_CM_EVENT_REJECTED || ev->event == RDMA_CM_EVENT_UNREACHABLE ||
        ev->event == RDMA_CM_EVENT_CONNECT_ERROR || ev->event == RDMA_CM_EVENT_DISCONNECTED)
      return std::unexpected(fmt::format("{} while waiting for {}: {}", rdma_event_str(ev->event),
                                         rdma_event_str(type), ev->detail));
  }
}

std::expected<std::uint16_t, std::string> Endpoint::listen(const std::string& addr,
                                                           std::uint16_t port) {
  rdma_create_id(ech_, &listen_id_, nullptr);
  rdma_set_mpa(listen_id_, opts_.cm);
  rdma_bind_addr(listen_id_, addr, port);
  if (rdma_listen(listen_id_, 16) != 0) return std::unexpected(ibv_last_error());
  return rdma_get_src_port(listen_id_);
}

// More than an MPA frame carries (RFC 5044 §7.1: 512 octets) is refused before it could be
// cut to the 16-bit length of rdma_conn_param.
std::expected<void, std::string> Endpoint::check_private_data() const {
  if (opts_.private_data.size() > mpa::kMaxPrivateData)
    return std::unexpected(fmt::format("{} octets of private data, an MPA frame carries at most {}",
                                       opts_.private_data.size(), mpa::kMaxPrivateData));
  return {};
}

std::expected<void, std::string> Endpoint::accept_one(
    std::optional<std::chrono::milliseconds> limit) {
  // A server waits for its client as long as it takes (or `limit`); a client that connects and
  // then fails the MPA exchange ends the wait with the reason.
  auto ev = limit ? wait_event(RDMA_CM_EVENT_CONNECT_REQUEST, *limit)
                  : wait_event_forever(RDMA_CM_EVENT_CONNECT_REQUEST);
  if (!ev) return std::unexpected(ev.error());
  conn_ = ev->id;
  peer_pd_ = ev->private_data_storage;
  if (auto r = make_qp(conn_); !r) return r;
  if (auto r = check_private_data(); !r) return r;
  rdma_conn_param p;
  p.private_data = opts_.private_data.data();
  p.private_data_len = static_cast<std::uint16_t>(opts_.private_data.size());
  p.responder_resources = opts_.ird;
  p.initiator_depth = opts_.ord;
  if (rdma_accept(conn_, &p) != 0) return std::unexpected("rdma_accept failed");
  auto est = wait_event(RDMA_CM_EVENT_ESTABLISHED);
  if (!est) return std::unexpected(est.error());
  params_ = est->mpa;
  return {};
}

void Endpoint::stop_listening() {
  if (!listen_id_) return;
  rdma_destroy_id(listen_id_);
  listen_id_ = nullptr;
}

std::expected<void, std::string> Endpoint::connect(const std::string& host, std::uint16_t port) {
  rdma_create_id(ech_, &conn_, nullptr);
  rdma_set_mpa(conn_, opts_.cm);
  rdma_resolve_addr(conn_, host, port, 2000);
  if (auto e = wait_event(RDMA_CM_EVENT_ADDR_RESOLVED); !e) return std::unexpected(e.error());
  rdma_resolve_route(conn_, 2000);
  if (auto e = wait_event(RDMA_CM_EVENT_ROUTE_RESOLVED); !e) return std::unexpected(e.error());
  if (auto r = make_qp(conn_); !r) return r;
  if (auto r = check_private_data(); !r) return r;
  rdma_conn_param p;
  p.private_data = opts_.private_data.data();
  p.private_data_len = static_cast<std::uint16_t>(opts_.private_data.size());
  p.responder_resources = opts_.ird;
  p.initiator_depth = opts_.ord;
  if (rdma_connect(conn_, &p) != 0) return std::unexpected("rdma_connect: " + ibv_last_error());
  // The connection manager times out the TCP connect and the MPA Reply itself.
  auto est = wait_event(RDMA_CM_EVENT_ESTABLISHED,
                        opts_.cm.connect_timeout + opts_.cm.mpa_timeout + std::chrono::seconds(2));
  if (!est) return std::unexpected(est.error());
  params_ = est->mpa;
  peer_pd_ = est->private_data_storage;
  return {};
}

namespace {

// Where a connection stands when a wait for a completion gave up: what this QP has sent and
// received so far, so the message says which side (or the link) stopped moving.
std::string progress_of(const ibv_qp* qp) {
  if (!qp || !qp->qp) return {};
  const auto s = qp->qp->stats();
  return fmt::format(
      " (QP {} so far: {} octets sent in {} FPDUs, {} transmit batches; {} octets received in {} "
      "FPDUs; {} Terminates sent, {} received)",
      qp->qp_num, s.bytes_sent, s.fpdus_sent, s.tx_batches, s.bytes_received, s.fpdus_received,
      s.terminates_sent, s.terminates_received);
}

}  // namespace

std::expected<ibv_wc, std::string> Endpoint::wait(ibv_cq* cq) {
  // The canonical loop: poll, arm, poll again (closes the race), then sleep on the channel.
  const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
  ibv_wc wc;
  for (;;) {
    if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
    ibv_req_notify_cq(cq, 0);
    if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return std::unexpected(
          fmt::format("no completion within {} ms{}", opts_.timeout.count(), progress_of(qp())));
    auto* got = cq->channel->ch.wait(left);
    if (got) ibv_ack_cq_events(static_cast<ibv_cq*>(got->context()), 1);
  }
}

}  // namespace iwarp::verbs
