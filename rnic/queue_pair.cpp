// Queue pair: state machine, posting (verbs side) and connection start-up.
#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <cstring>

#include "common/log.hpp"
#include "rnic/engine_log.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic {

std::string_view to_string(QpState s) {
  switch (s) {
    case QpState::Idle:
      return "IDLE";
    case QpState::Rtr:
      return "RTR";
    case QpState::Rts:
      return "RTS";
    case QpState::Closing:
      return "CLOSING";
    case QpState::Terminate:
      return "TERMINATE";
    case QpState::Error:
      return "ERROR";
  }
  return "?";
}

bool legal_transition(QpState from, QpState to) {
  using S = QpState;
  if (to == S::Error) return from != S::Error;  // any state may fail
  switch (from) {
    case S::Idle:
      return to == S::Rtr || to == S::Idle;
    case S::Rtr:
      return to == S::Rts || to == S::Idle;
    case S::Rts:
      return to == S::Closing || to == S::Terminate;
    case S::Closing:
      return to == S::Idle;
    case S::Terminate:
      return false;
    case S::Error:
      return to == S::Idle;  // reset after the flush
  }
  return false;
}

std::string_view to_string(WrOpcode op) {
  switch (op) {
    case WrOpcode::RdmaWrite:
      return "RDMA_WRITE";
    case WrOpcode::RdmaWriteWithImm:
      return "RDMA_WRITE_WITH_IMM";
    case WrOpcode::Send:
      return "SEND";
    case WrOpcode::SendWithImm:
      return "SEND_WITH_IMM";
    case WrOpcode::RdmaRead:
      return "RDMA_READ";
    case WrOpcode::AtomicCmpAndSwp:
      return "ATOMIC_CMP_AND_SWP";
    case WrOpcode::AtomicFetchAndAdd:
      return "ATOMIC_FETCH_AND_ADD";
    case WrOpcode::LocalInv:
      return "LOCAL_INV";
    case WrOpcode::SendWithInv:
      return "SEND_WITH_INV";
  }
  return "?";
}

std::string_view to_string(WcStatus s) {
  switch (s) {
    case WcStatus::Success:
      return "SUCCESS";
    case WcStatus::LocLenErr:
      return "LOC_LEN_ERR";
    case WcStatus::LocQpOpErr:
      return "LOC_QP_OP_ERR";
    case WcStatus::LocProtErr:
      return "LOC_PROT_ERR";
    case WcStatus::WrFlushErr:
      return "WR_FLUSH_ERR";
    case WcStatus::BadRespErr:
      return "BAD_RESP_ERR";
    case WcStatus::LocAccessErr:
      return "LOC_ACCESS_ERR";
    case WcStatus::RemInvReqErr:
      return "REM_INV_REQ_ERR";
    case WcStatus::RemAccessErr:
      return "REM_ACCESS_ERR";
    case WcStatus::RemOpErr:
      return "REM_OP_ERR";
    case WcStatus::FatalErr:
      return "FATAL_ERR";
    case WcStatus::GeneralErr:
      return "GENERAL_ERR";
  }
  return "?";
}

std::string_view to_string(WcOpcode op) {
  switch (op) {
    case WcOpcode::Send:
      return "SEND";
    case WcOpcode::RdmaWrite:
      return "RDMA_WRITE";
    case WcOpcode::RdmaRead:
      return "RDMA_READ";
    case WcOpcode::CompSwap:
      return "COMP_SWAP";
    case WcOpcode::FetchAdd:
      return "FETCH_ADD";
    case WcOpcode::LocalInv:
      return "LOCAL_INV";
    case WcOpcode::Recv:
      return "RECV";
    case WcOpcode::RecvRdmaWithImm:
      return "RECV_RDMA_WITH_IMM";
  }
  return "?";
}

int SharedReceiveQueue::post_recv(const RecvWr& wr, std::string* why) {
  std::lock_guard l(mu_);
  if (wr.sg_list.size() > max_sge_) {
    if (why) *why = fmt::format("{} SGEs, the SRQ allows {}", wr.sg_list.size(), max_sge_);
    return EINVAL;
  }
  if (q_.size() >= max_wr_) {
    if (why) *why = fmt::format("the SRQ is full ({} receive WRs)", max_wr_);
    return ENOMEM;
  }
  q_.push_back(wr);
  posted_.notify_all();
  return 0;
}

std::optional<RecvWr> SharedReceiveQueue::take(std::chrono::milliseconds wait) {
  std::unique_lock l(mu_);
  if (q_.empty() && wait.count() > 0) posted_.wait_for(l, wait, [&] { return !q_.empty(); });
  if (q_.empty()) return std::nullopt;
  RecvWr wr = std::move(q_.front());
  q_.pop_front();
  return wr;
}

std::size_t SharedReceiveQueue::size() const {
  std::lock_guard l(mu_);
  return q_.size();
}

QueuePair::QueuePair(Device& dev, const QpInit& init)
    : dev_(dev), init_(init), qp_num_(dev.next_qp_num()) {
  std::size_t n = 1;
  while (n < init_.caps.max_send_wr) n <<= 1;
  sq_.resize(n);
  // Last, so that a constructor that threw counts nothing (the destructor would not run).
  if (init_.rnr_wait.count() > 0) dev_.count_rnr_waiter(+1);
}

bool QueuePair::set_state(QpState s) {
  const QpState from = state_.load();
  if (from == s) return true;
  if (!legal_transition(from, s)) {
    // Never taken: a QP that left RTS (a disconnect, an error) does not come back to it.
    logger().warn("QP {}: refused transition {} -> {}", qp_num_, to_string(from), to_string(s));
    return false;
  }
  logger().debug("QP {}: {} -> {}", qp_num_, to_string(from), to_string(s));
  state_ = s;
  return true;
}

std::string QueuePair::error_reason() const {
  std::lock_guard l(mu_);
  return error_reason_;
}

std::optional<StreamSetup> QueuePair::setup() const {
  std::lock_guard l(mu_);
  return setup_;
}

QueuePair::Stats QueuePair::stats() const {
  const auto& c = stats_;
  return Stats{.fpdus_sent = c.fpdus_sent.load(),
               .fpdus_received = c.fpdus_received.load(),
               .bytes_sent = c.bytes_sent.load(),
               .bytes_received = c.bytes_received.load(),
               .doorbells = c.doorbells.load(),
               .tx_batches = c.tx_batches.load(),
               .direct_reads = c.direct_reads.load(),
               .posted_inline_batches = c.posted_inline_batches.load(),
               .posted_inline_wrs = c.posted_inline_wrs.load(),
               .inline_handoffs = c.inline_handoffs.load(),
               .ooo_placed = c.ooo_placed.load(),
               .released = c.released.load(),
               .crc_errors = c.crc_errors.load(),
               .terminates_sent = c.terminates_sent.load(),
               .terminates_received = c.terminates_received.load()};
}

int QueuePair::post_send(const SendWr& in, std::string* why, bool ring) {
  auto refuse = [&](int err, std::string text) {
    if (why) *why = std::move(text);
    return err;
  };
  if (in.sg_list.size() > init_.caps.max_send_sge)
    return refuse(EINVAL, fmt::format("{} SGEs, the QP allows {}", in.sg_list.size(),
                                      init_.caps.max_send_sge));
  std::uint64_t total = 0;
  for (const auto& s : in.sg_list) total += s.length;
  // RFC 5041 §5.3: an untagged message's MO is 32 bits, and a WC's byte_len too: nothing
  // longer than 2^32 - 1 octets can be sent as one message.
  if (total > 0xFFFFFFFFu)
    return refuse(EINVAL, fmt::format("{} octets in one work request: a message carries at most "
                                      "4 GiB - 1 (RFC 5041 §5.3: 32-bit message offsets)",
                                      total));
  switch (in.opcode) {
    case WrOpcode::RdmaRead:
      // RFC 5040 §4.4: a Read Request names one Data Sink STag, so one sink SGE.
      if (in.sg_list.size() > 1)
        return refuse(EINVAL, "an RDMA Read has one sink SGE (RFC 5040 §4.4: one Data Sink STag)");
      break;
    case WrOpcode::AtomicCmpAndSwp:
    case WrOpcode::AtomicFetchAndAdd:
      if (in.sg_list.size() != 1 || in.sg_list[0].length != 8)
        return refuse(EINVAL, "an atomic needs one 8-octet SGE for the original value");
      if (in.remote_addr % 8 != 0)
        return refuse(EINVAL, "an atomic's remote address must be 8-octet aligned (RFC 7306 §5)");
      break;
    case WrOpcode::SendWithImm:
      if (total != 0)
        return refuse(EINVAL,
                      "RFC 7306 has no Send with Immediate Data: SEND_WITH_IMM carries no payload "
                      "(use RDMA_WRITE_WITH_IMM to move data with an immediate)");
      break;
    default:
      break;
  }
  const bool inline_copy = in.flags & kSendInline;
  if (inline_copy) {
    if (total > init_.caps.max_inline_data)
      return refuse(EINVAL, fmt::format("{} inline octets, the QP allows {}", total,
                                        init_.caps.max_inline_data));
    if (in.opcode == WrOpcode::RdmaRead || in.opcode == WrOpcode::AtomicCmpAndSwp ||
        in.opcode == WrOpcode::AtomicFetchAndAdd)
      return refuse(EINVAL, "inline data is for Send and Write only");
  }

  const QpState st = state_.load();
  if (st == QpState::Idle)
    return refuse(EINVAL, "the QP is not connected yet (state IDLE): connect or accept first");
  if (in.opcode == WrOpcode::RdmaRead || in.opcode == WrOpcode::AtomicCmpAndSwp ||
      in.opcode == WrOpcode::AtomicFetchAndAdd) {
    std::lock_guard l(mu_);
    if (setup_ && !setup_->ignore_ord && negotiated_ord() == 0)
      return refuse(EINVAL,
                    "the connection's ORD is 0 (the responder granted IRD 0): no RDMA "
                    "Read or atomic can be sent (RFC 6581 §6)");
  }
  bool failed = false;
  {
    // The state is read under mu_, with the enqueue: flush_all() takes mu_ after the QP has
    // left RTS, so a WR posted meanwhile is either in the queue it flushes or sees the failed
    // state here (never left behind in a flushed queue).
    std::lock_guard l(mu_);
    const QpState now = state_.load();
    failed = now == QpState::Error || now == QpState::Terminate || now == QpState::Closing;
    if (!failed) {
      if (sq_tail_ - sq_head_ >= init_.caps.max_send_wr)
        return refuse(ENOMEM, fmt::format("the send queue is full ({} WRs outstanding)",
                                          init_.caps.max_send_wr));
      auto& e = sq_[sq_tail_ % sq_.size()];
      // The slot's inline buffer is kept for its capacity: an inline post copies its octets
      // into it (at most max_inline_data, read from the program's memory under mu_) and
      // allocates nothing once the slot has carried an inline WR as large.
      Bytes inline_buf = std::move(e.wr.inline_data);
      e.wr = in;
      inline_buf.clear();
      if (inline_copy) {
        inline_buf.reserve(total);
        for (const auto& s : in.sg_list) {
          auto* p = reinterpret_cast<const std::uint8_t*>(s.addr);
          inline_buf.insert(inline_buf.end(), p, p + s.length);
        }
        e.wr.sg_list.clear();
      }
      e.wr.inline_data = std::move(inline_buf);
      e.signaled = init_.sq_sig_all || (e.wr.flags & kSendSignaled);
      e.done = false;
      e.wc = Wc{};
      ++sq_tail_;
    }
  }
  if (failed) {
    // As siw does: posting to a failed QP completes the WR as flushed. The completion goes
    // through the engine, so it cannot overtake older WRs the engine is still flushing.
    Wc wc;
    wc.wr_id = in.wr_id;
    wc.status = WcStatus::WrFlushErr;
    wc.qp_num = qp_num_;
    boost::asio::post(dev_.io(),
                      [self = shared_from_this(), wc] { self->init_.send_cq->push(wc); });
    return 0;
  }
  if (ring) ring_doorbell();
  return 0;
}

int QueuePair::post_recv(const RecvWr& wr, std::string* why) {
  if (init_.srq) {
    if (why) *why = "the QP uses a shared receive queue: post to the SRQ";
    return EINVAL;
  }
  if (wr.sg_list.size() > init_.caps.max_recv_sge) {
    if (why)
      *why = fmt::format("{} SGEs, the QP allows {}", wr.sg_list.size(), init_.caps.max_recv_sge);
    return EINVAL;
  }
  {
    // State check and enqueue under one lock, as in post_send.
    std::lock_guard l(mu_);
    if (state_.load() != QpState::Error) {
      if (rq_.size() >= init_.caps.max_recv_wr) {
        if (why) *why = fmt::format("the receive queue is full ({} WRs)", init_.caps.max_recv_wr);
        return ENOMEM;
      }
      rq_.push_back(wr);
      rq_posted_.notify_all();
      return 0;
    }
  }
  boost::asio::post(
      dev_.io(), [self = shared_from_this(), wc = recv_completion(wr.wr_id, WcStatus::WrFlushErr)] {
        self->init_.recv_cq->push(wc);
      });
  return 0;
}

void QueuePair::ring_doorbell() {
  // A program busy-polls this device and posted already since its last poll: its next poll
  // sends this and what follows in one batch (Device::defer_post). Otherwise the posting
  // thread sends itself when it can (docs/progress-model.md).
  if (dev_.defer_post()) {
    engine_doorbell();
    dev_.note_deferred_post();  // after the handler is queued: the poll that sees it finds it
    return;
  }
  if (tx_now()) return;
  engine_doorbell();
}

void QueuePair::engine_doorbell() {
  // Many posts before the engine runs are one doorbell and so one batch.
  if (doorbell_pending_.exchange(true)) return;
  boost::asio::post(dev_.io(), [self = shared_from_this()] {
    self->doorbell_pending_ = false;
    ++self->stats_.doorbells;
    self->tx_kick();
  });
}

void QueuePair::start(std::unique_ptr<Transport> transport, const StreamSetup& setup,
                      Bytes rx_leftover, std::shared_ptr<WireTap> tap,
                      std::function<void(const QpClosed&)> on_closed, RxOptions rx) {
  TxLock tl(tx_mu_);
  self_ = shared_from_this();
  dev_.attach(weak_from_this());
  transport_ = std::move(transport);
  rx_.opts = std::move(rx);
  tap_wire_.tap = std::move(tap);
  on_closed_ = std::move(on_closed);
  {
    std::lock_guard l(mu_);
    setup_ = setup;
  }
  const auto& p = setup.params;
  tx_.framing.emplace(setup.initiator ? p.framing_to_responder() : p.framing_to_initiator());
  rx_.reader.emplace(setup.initiator ? p.framing_to_initiator() : p.framing_to_responder());
  // RFC 5044 §7.1.2 / RFC 6581 §4: the responder sends no FPDU before the initiator's first
  // (in peer-to-peer mode that is the RTR message).
  tx_.gated = !setup.initiator;
  if (setup.initiator && setup.first_fpdu_delay.count() > 0) {
    tx_.gated = true;
    tx_.delay.emplace(dev_.io());
    tx_.delay->expires_after(setup.first_fpdu_delay);
    tx_.delay->async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec) return;
      TxLock l(self->tx_mu_);
      self->tx_.gated = false;
      self->tx_kick();
    });
  }
  if (state_.load() == QpState::Idle) set_state(QpState::Rtr);
  if (!set_state(QpState::Rts)) {
    // Disconnected or failed during the MPA exchange: the QP stays where it is and the
    // stream is closed at once.
    logger().info("QP {}: not entering RTS from {}: closing the new stream", qp_num_,
                  to_string(state_.load()));
    transport_->close();
    closed_ = true;
    auto cb = std::move(on_closed_);
    on_closed_ = nullptr;
    boost::asio::post(dev_.io(), [self = std::move(self_)] {});
    if (cb) cb({QpClosed::Cause::LocalDisconnect, "disconnected before the connection was up"});
    return;
  }
  logger().info("QP {}: RTS as {} ({}), MULPDU {}", qp_num_,
                setup.initiator ? "initiator" : "responder", mpa::describe(p), mulpdu());
  rx_start(std::move(rx_leftover));
  tx_kick();
}

}  // namespace iwarp::rnic
