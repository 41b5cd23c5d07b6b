// QueuePair::live_state(): a queue pair's state, queues, read queues, holes and counters for
// `rnic stat` (rnic/live_state.hpp). Engine thread: it reads the engine-only read queues.
#include <fmt/format.h>

#include "rnic/live_state.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic {

namespace {

std::string endpoint_text(const boost::asio::ip::tcp::endpoint& e) {
  const auto a = e.address();
  return a.is_v6() ? fmt::format("[{}]:{}", a.to_string(), e.port())
                   : fmt::format("{}:{}", a.to_string(), e.port());
}

}  // namespace

QpLiveState QueuePair::live_state() const {
  QpLiveState s;
  s.qp_num = qp_num_;
  s.state = state_.load();
  s.pd = init_.pd;
  s.sq_depth = init_.caps.max_send_wr;
  s.rq_depth = init_.caps.max_recv_wr;
  s.send_cq = init_.send_cq;
  s.recv_cq = init_.recv_cq;
  s.srq = init_.srq != nullptr;
  {
    TxLock tl(tx_mu_);  // transport_ (a posting thread reads it under this lock too)
    if (auto* st = dynamic_cast<SocketTransport*>(transport_.get()); st && !closed_) {
      boost::system::error_code ec;
      const auto local = st->socket().local_endpoint(ec);
      if (!ec) s.local = endpoint_text(local);
      const auto peer = st->socket().remote_endpoint(ec);
      if (!ec) s.peer = endpoint_text(peer);
    }
    s.ird_used = static_cast<std::uint32_t>(irq_.size());
    if (tx_.framing && setup_) s.mulpdu = mulpdu();
  }
  s.ord_used = static_cast<std::uint32_t>(orq_.size());
  {
    std::lock_guard l(mu_);
    s.error = error_reason_;
    s.sq_used = static_cast<std::uint32_t>(sq_tail_ - sq_head_);
    s.rq_used = static_cast<std::uint32_t>(rq_.size());
    if (setup_) {
      s.mpa = setup_->params;
      s.initiator = setup_->initiator;
      const auto& p = setup_->params;
      s.ord = setup_->initiator ? p.initiator_ord : p.responder_ord;
      s.ird = setup_->initiator ? p.initiator_ird : p.responder_ird;
    }
  }
  const Stats st = stats();
  if (init_.srq) {
    s.rq_used = static_cast<std::uint32_t>(init_.srq->size());
  }
  // On the engine thread both run here, at once.
  s.holes = hole_report();
  s.segments = segment_stats();
  s.fpdus_sent = st.fpdus_sent;
  s.fpdus_received = st.fpdus_received;
  s.bytes_sent = st.bytes_sent;
  s.bytes_received = st.bytes_received;
  s.doorbells = st.doorbells;
  s.tx_batches = st.tx_batches;
  s.direct_reads = st.direct_reads;
  s.posted_inline_batches = st.posted_inline_batches;
  s.posted_inline_wrs = st.posted_inline_wrs;
  s.inline_handoffs = st.inline_handoffs;
  s.ooo_placed = st.ooo_placed;
  s.released = st.released;
  s.crc_errors = st.crc_errors;
  s.terminates_sent = st.terminates_sent;
  s.terminates_received = st.terminates_received;
  return s;
}

}  // namespace iwarp::rnic
