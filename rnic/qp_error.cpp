// Errors and the end of a connection: the Terminate message (RFC 5040 §4.8, §7.4), the move to
// ERROR with every outstanding work request flushed, a received Terminate, disconnect, and the
// peer-to-peer RTR message (RFC 6581 §4).
#include <fmt/format.h>

#include <boost/asio/post.hpp>

#include "common/log.hpp"
#include "ddp/terminate.hpp"
#include "rnic/engine_log.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic {

std::string llp_error(const boost::system::error_code& ec) {
  // Linux ends a connection that TCP_USER_TIMEOUT or keepalive gave up on with ETIMEDOUT, or
  // with the soft error an ICMP unreachable left on the way (a vanished peer on the local
  // network: ARP fails), which alone never ends an established connection (RFC 1122 §4.2.3.9).
  if (ec == boost::asio::error::timed_out || ec == boost::asio::error::host_unreachable ||
      ec == boost::asio::error::network_unreachable)
    return ec.message() +
           " (the peer acknowledged nothing within the LLP timeout: TCP_USER_TIMEOUT or "
           "keepalive; --llp-timeout / RNIC_LLP_TIMEOUT_MS)";
  return ec.message();
}

namespace {
using rdmap::Opcode;

// What a work request that a peer's Terminate ended reports (ibv_wc_status meanings).
WcStatus status_for_terminate(const rdmap::Terminate& t) {
  if (t.layer == static_cast<std::uint8_t>(TermLayer::Rdmap))
    return t.etype == 1 ? WcStatus::RemAccessErr : WcStatus::RemOpErr;
  if (t.layer == static_cast<std::uint8_t>(TermLayer::Ddp))
    return t.etype == 1 ? WcStatus::RemAccessErr : WcStatus::RemInvReqErr;
  return WcStatus::RemOpErr;
}
}  // namespace

void QueuePair::fatal(const WireError& e, ByteSpan ddp_hdr, ByteSpan rdmap_hdr,
                      std::uint16_t segment_length) {
  TxLock tl(tx_mu_);
  const QpState st = state_.load();
  if (closed_ || st == QpState::Terminate || st == QpState::Error) return;
  // RFC 5040 §4.8: the Terminate echoes the failed segment's headers as its layer allows.
  const rdmap::Terminate t = rdmap::make_terminate(e.code, ddp_hdr, rdmap_hdr, segment_length);
  const std::string reason = fmt::format("sent Terminate [{}]: {}",
                                         describe_term(t.layer, t.etype, t.ecode), e.to_string());
  logger().warn("QP {}: {}", qp_num_, reason);
  {
    std::lock_guard l(mu_);
    error_reason_ = reason;
    ++stats_.terminates_sent;
    if (e.code == Errc::MpaCrcError) ++stats_.crc_errors;
  }
  rx_event(RxEvent{.kind = RxEvent::Kind::TerminateSent,
                   .offset = rx_.segments ? rx_.segments->in_order() : 0,
                   .text = reason,
                   .term = term_code(e.code)});
  TxMsg m;
  m.kind = TxKind::Terminate;
  m.hdr = ddp::untagged_header(Opcode::Terminate, QueueNumber{rdmap::kQnTerminate},
                               next_msn(rdmap::kQnTerminate), MessageOffset{0});
  t.encode(m.body);
  set_state(QpState::Terminate);
  // Nothing more is placed into the FPDU being received (its WQE completes just below).
  if (rx_.reader) rx_.reader->drop_destination();
  // The receive WQE of a Send too long for it completes with a length error, one whose own
  // buffer is unusable with a protection error; the rest flush.
  if (rx_.send.active && rx_.send.error != WcStatus::Success) {
    recv_push(recv_completion(rx_.send.rqe.wr_id, rx_.send.error));
    rx_.send.active = false;
  }
  flush_all();
  tx_.priority.clear();
  tx_.priority.push_back(std::move(m));
  closing_after_tx_ = true;
  closed_reason_ = {QpClosed::Cause::TerminateSent, reason};
  arm_close_timer();
  tx_kick();
}

void QueuePair::arm_close_timer() {
  if (close_timer_ || closed_ || !transport_) return;
  // RFC 5040 §5.6 / §6.2: after a Terminate (or a disconnect) the stream is closed; a peer
  // that takes nothing (a zero window) must not keep the QP from closing, so after
  // close_timeout the RNIC aborts the stream and reports the close anyway.
  close_timer_.emplace(dev_.io());
  close_timer_->expires_after(setup_ ? setup_->close_timeout : std::chrono::seconds(5));
  close_timer_->async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->closed_) return;
    const auto ms = self->setup_ ? self->setup_->close_timeout.count() : 5000;
    logger().warn("QP {}: the peer took nothing for {} ms while {}: aborting the stream",
                  self->qp_num_, ms,
                  self->closed_reason_.cause == QpClosed::Cause::TerminateSent
                      ? "a Terminate waited to go out"
                      : "the connection was closing");
    QpClosed why = self->closed_reason_;
    why.detail += fmt::format(" (stream aborted: the peer took nothing for {} ms)", ms);
    self->enter_error(why);
  });
}

void QueuePair::local_fatal(std::uint64_t sq_index, WcStatus status, const std::string& why) {
  logger().warn("QP {}: {}", qp_num_, why);
  complete_sq(sq_index, status);
  // RFC 5040 §7.4: a local error that ends the stream is reported to the peer as a local
  // catastrophic error.
  fatal(WireError{Errc::RdmapLocalCatastrophic, "RFC 5040 §7.4: local error ends the stream", why});
}

void QueuePair::flush_all() {
  TxLock tl(tx_mu_);
  // Work requests are reported flushed only once the engine no longer reads or writes their
  // memory: the unsent rest of the batch on the wire is copied out of registered memory, and
  // the FPDU being received stops placing into its destination (its octets are discarded).
  tx_detach([](const std::uint8_t*, std::size_t) { return true; });
  tx_.batch_wrs.clear();
  if (rx_.reader) rx_.reader->drop_destination();
  rx_.fpdu.atomic_word = nullptr;
  rx_.fpdu.pending_irq.reset();
  rx_.send.buffer = RecvBuffer{};
  // The message being sent and every request not yet completed, in posting order.
  if (tx_.cur && (tx_.cur->kind == TxKind::Sq || tx_.cur->kind == TxKind::ReadResponse))
    tx_.cur.reset();
  for (const auto& e : orq_)
    if (e.sq_index != kNoSqIndex) complete_sq(e.sq_index, WcStatus::WrFlushErr);
  orq_.clear();
  std::uint64_t from, to;
  {
    std::lock_guard l(mu_);
    from = sq_head_;
    to = sq_tail_;
    sq_next_ = sq_tail_;
  }
  for (auto i = from; i < to; ++i) complete_sq(i, WcStatus::WrFlushErr);
  irq_.clear();
  if (rx_.send.active) {
    recv_push(recv_completion(rx_.send.rqe.wr_id, WcStatus::WrFlushErr));
    rx_.send.active = false;
  }
  std::deque<RecvWr> rq;
  {
    std::lock_guard l(mu_);
    rq.swap(rq_);
  }
  {
    RecvBatch batch(*this);
    for (const auto& r : rq) recv_push(recv_completion(r.wr_id, WcStatus::WrFlushErr));
  }
  // Whatever the receive side gathered so far goes now, in order: the flush is visible before
  // the close is reported (the CM's DISCONNECTED event).
  recv_flush();
}

void QueuePair::close_socket() {
  TxLock tl(tx_mu_);
  if (!transport_ || closed_) return;
  closed_ = true;
  transport_->close();
  tx_.writing = false;  // the wait for room ends with operation_aborted; nothing is read any more
  if (close_timer_) close_timer_->cancel();
  if (tap_wire_.wire_flush) tap_wire_.wire_flush->cancel();
  if (tap_wire_.tap) {
    // A last FPDU that never arrived whole is still recorded.
    if (!tap_wire_.rx_partial.empty()) tap_wire_.tap->on_data(false, tap_wire_.rx_partial);
    tap_wire_.rx_partial.clear();
    tap_wire_.tap->on_close(true);
  }
}

void QueuePair::enter_error(QpClosed why) {
  TxLock tl(tx_mu_);
  if (closed_ && state_.load() == QpState::Error) return;
  {
    std::lock_guard l(mu_);
    if (error_reason_.empty() && why.cause != QpClosed::Cause::LocalDisconnect)
      error_reason_ = why.detail;
  }
  if (state_.load() != QpState::Error) {
    logger().info("QP {}: {} -> ERROR: {}", qp_num_, to_string(state_.load()), why.detail);
    state_ = QpState::Error;
  }
  flush_all();
  close_socket();
  if (on_closed_) {
    auto cb = std::move(on_closed_);
    on_closed_ = nullptr;
    cb(why);
  }
  // Drop the self-reference once the handlers now queued have run.
  boost::asio::post(dev_.io(), [self = std::move(self_)] {});
}

void QueuePair::rx_terminate_received(const rdmap::Terminate& t) {
  const std::string reason =
      fmt::format("peer sent Terminate [{}] (layer {} etype {} code 0x{:02x}){}",
                  describe_term(t.layer, t.etype, t.ecode), t.layer, t.etype, t.ecode,
                  t.siw_bitfield_quirk ? ", in siw's bit-field layout" : "");
  logger().warn("QP {}: {}", qp_num_, reason);
  {
    std::lock_guard l(mu_);
    error_reason_ = reason;
    ++stats_.terminates_received;
  }
  rx_event(RxEvent{.kind = RxEvent::Kind::TerminateReceived,
                   .offset = rx_.segments ? rx_.segments->in_order() : 0,
                   .text = reason,
                   .term = TermCode{static_cast<TermLayer>(t.layer), t.etype, t.ecode}});
  // The oldest request still waiting for the peer (a Read or atomic) learns why, when the
  // Terminate is about it: RFC 5040 §4.8, the terminated DDP header is that of a Read (or
  // atomic, RFC 7306) Request. A Terminate about another message (a Write, a Send) is not the
  // Read's doing: the Read is flushed with the rest.
  const std::uint32_t vendor =
      (std::uint32_t{t.layer} << 16) | (std::uint32_t{t.etype} << 8) | t.ecode;
  bool about_request = false;
  if (t.d) {
    auto h = ddp::DdpHeader::decode(t.ddp_header);
    about_request = h && !h->tagged && h->qn.value() == rdmap::kQnReadReq;
  }
  if (about_request && !orq_.empty() && orq_.front().sq_index != kNoSqIndex) {
    complete_sq(orq_.front().sq_index, status_for_terminate(t), 0, vendor);
    orq_.pop_front();
  }
  set_state(QpState::Terminate);
  enter_error({QpClosed::Cause::TerminateReceived, reason});
}

void QueuePair::disconnect() {
  boost::asio::post(dev_.io(), [self = shared_from_this()] {
    TxLock tl(self->tx_mu_);
    if (self->closed_ || !self->transport_) {
      if (self->state_.load() != QpState::Error)
        self->enter_error({QpClosed::Cause::LocalDisconnect, "disconnected"});
      return;
    }
    if (self->state_.load() == QpState::Rts) self->set_state(QpState::Closing);
    if (!self->closing_after_tx_) {
      self->closing_after_tx_ = true;
      self->closed_reason_ = {QpClosed::Cause::LocalDisconnect, "disconnected by the local side"};
    }
    self->arm_close_timer();
    self->tx_kick();
  });
}

void QueuePair::modify_to_error() {
  {
    // A receive the engine waits for (QpInit::rnr_wait) will not come: stop waiting.
    std::lock_guard l(mu_);
    rnr_abort_ = true;
  }
  rq_posted_.notify_all();
  boost::asio::post(dev_.io(), [self = shared_from_this()] {
    self->enter_error({QpClosed::Cause::LocalDisconnect, "moved to ERROR by the application"});
  });
}

void QueuePair::send_rtr(mpa::RtrType type) {
  // RFC 6581 §4: the initiator's first FPDU is a zero-length RTR message; like siw, a
  // zero-length Write or Read names STag 1, which the responder does not look up.
  TxLock tl(tx_mu_);
  TxMsg m;
  m.kind = TxKind::Rtr;
  switch (type) {
    case mpa::RtrType::Write:
      m.hdr = ddp::tagged_header(Opcode::Write, STag{1}, TaggedOffset{0});
      break;
    case mpa::RtrType::Read: {
      m.hdr = ddp::untagged_header(Opcode::ReadRequest, QueueNumber{rdmap::kQnReadReq},
                                   next_msn(rdmap::kQnReadReq), MessageOffset{0});
      rdmap::ReadRequest rr{STag{1}, TaggedOffset{0}, 0, STag{1}, TaggedOffset{0}};
      rr.encode(m.body);
      orq_.push_back(OrqEntry{kNoSqIndex, false, STag{1}, TaggedOffset{0}, 0, 0, 0, nullptr});
      break;
    }
    default:
      m.hdr = ddp::untagged_header(Opcode::Send, QueueNumber{rdmap::kQnSend},
                                   next_msn(rdmap::kQnSend), MessageOffset{0});
      break;
  }
  tx_.priority.push_back(std::move(m));
}

}  // namespace iwarp::rnic
