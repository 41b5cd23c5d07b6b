// Receive engine: reads the MPA stream, and for each DDP segment checks it (RFC 5041 §7.2,
// RFC 5040 §7.4) and places its payload directly: tagged segments into the STag's region at
// their TO, untagged Sends into the receive WQE at their MO. Large payloads are read from the
// socket straight into the target memory (FpduReader::direct_window). Completions follow the
// last segment of each message, in stream order (RFC 5040 §5.3 / RFC 5041 §5.4).
#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <cstring>

#include "common/log.hpp"
#include "rnic/engine_log.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic {

namespace {
// The receive staging buffer: a socket read that is not placed directly lands here, and
// rx_data() takes from it everything it keeps (the FPDU reader copies a partial header, the
// segment receiver the octets beyond a hole, the tap its partial FPDU) before the next read.
// So one buffer per reading thread serves every QP that thread reads for, instead of one per
// QP: an idle connection holds none (it was 16 KiB resident per QP, issue 15's idle-QP memory).
// It starts small and doubles whenever a read fills it, up to the largest.
constexpr std::size_t kRxBufferFirst = 16 * 1024;
constexpr std::size_t kRxBufferMax = 256 * 1024;
Bytes& rx_staging() {
  thread_local Bytes buf(kRxBufferFirst);
  return buf;
}
using rdmap::Opcode;

// RFC 7306 §4.2.1 masked fetch-add: a set bit in the add mask ends a field, so no carry leaves
// it; a zero mask is a plain 64-bit add.
std::uint64_t masked_add(std::uint64_t a, std::uint64_t b, std::uint64_t mask) {
  if (mask == 0) return a + b;
  std::uint64_t out = 0, carry = 0;
  for (int i = 0; i < 64; ++i) {
    const std::uint64_t x = (a >> i) & 1, y = (b >> i) & 1;
    const std::uint64_t s = x ^ y ^ carry;
    carry = (x & y) | (x & carry) | (y & carry);
    out |= s << i;
    if ((mask >> i) & 1) carry = 0;
  }
  return out;
}
}  // namespace

class QueuePair::RxSink : public mpa::FpduSink {
 public:
  explicit RxSink(QueuePair& qp) : qp_(qp) {}
  MutableByteSpan on_fpdu_head(const mpa::FpduHead& h) override {
    return qp_.rx_head(h, Delivery::InOrder);
  }
  void on_fpdu_end(const mpa::FpduTrailer& t) override { qp_.rx_end(t, Delivery::InOrder); }
  void on_framing_error(const WireError& e) override { qp_.rx_framing_error(e); }

 private:
  QueuePair& qp_;
};

QueuePair::~QueuePair() {
  if (init_.rnr_wait.count() > 0) dev_.count_rnr_waiter(-1);
}

void QueuePair::recv_push(const Wc& wc, bool solicited) {
  if (rx_.batching) {
    rx_.wcs.push_back(wc);
    rx_.wcs_solicited |= solicited;
    return;
  }
  if (!init_.recv_cq->push(wc, solicited))
    logger().error("QP {}: receive CQ overflow, completion of WR {} lost", qp_num_, wc.wr_id);
}

void QueuePair::recv_flush() {
  if (rx_.wcs.empty()) return;
  const std::size_t n = init_.recv_cq->push(std::span<const Wc>(rx_.wcs), rx_.wcs_solicited);
  if (n < rx_.wcs.size())
    logger().error("QP {}: receive CQ overflow, {} completions lost (the first: WR {})", qp_num_,
                   rx_.wcs.size() - n, rx_.wcs[n].wr_id);
  rx_.wcs.clear();
  rx_.wcs_solicited = false;
}

// The segment path's visitor: the in-order stream goes through the FpduReader, FPDUs beyond a
// hole to rx_ooo, and the in-order point reaching one of those to rx_release.
class QueuePair::SegVisitor : public mpa::SegmentVisitor {
 public:
  explicit SegVisitor(QueuePair& qp) : qp_(qp) {}
  void on_stream(ByteSpan bytes) override {
    if (!qp_.closed_) qp_.rx_.reader->feed(bytes, *qp_.rx_.sink);
  }
  mpa::OooVerdict on_ooo_fpdu(const mpa::OooFpdu& f, const mpa::Hole& hole) override {
    return qp_.rx_ooo(f, hole);
  }
  void on_claimed_reached(std::uint64_t offset, std::uint32_t wire_length) override {
    qp_.rx_release(offset, wire_length);
  }
  void on_hole_opened(const mpa::Hole& h) override {
    qp_.rx_event(
        RxEvent{.kind = RxEvent::Kind::HoleOpened, .offset = h.begin, .end = h.end, .text = {}});
  }
  void on_hole_closed(const mpa::Hole& h, bool first) override { qp_.rx_hole_closed(h, first); }
  void on_duplicate(std::uint64_t offset, std::size_t length) override {
    qp_.rx_event(RxEvent{
        .kind = RxEvent::Kind::Duplicate, .offset = offset, .end = offset + length, .text = {}});
  }

 private:
  QueuePair& qp_;
};

void QueuePair::rx_start(Bytes leftover) {
  rx_.sink = std::make_shared<RxSink>(*this);
  rx_.visitor = std::make_shared<SegVisitor>(*this);
  mpa::SegmentReceiver::Limits limits;
  // Discard: no hole is ever opened, so every segment beyond the in-order point is dropped
  // (counted as SegmentReceiver::Stats::dropped_hole_limit). Only where something brings the
  // octets again in order: a live segment tap's connection (tap_window set), whose socket
  // does. A simulated wire or a replay presents a segment once: there it would lose data.
  if (rx_.opts.beyond_holes == BeyondHoles::Discard && rx_.opts.tap_window == 0) {
    logger().warn(
        "QP {}: data beyond holes is discarded only with a live segment tap (whose socket "
        "brings it again): held instead",
        qp_num_);
    rx_.opts.beyond_holes = BeyondHoles::Hold;
  }
  if (rx_.opts.beyond_holes == BeyondHoles::Discard) limits.max_holes = 0;
  // Hold: nothing beyond a hole is placed, so none of it is searched for FPDUs either.
  if (rx_.opts.beyond_holes == BeyondHoles::Hold) limits.discover = false;
  rx_.segments.emplace(rx_.reader->config(), rx_.opts.stream_start, limits);
  if (rx_.opts.shaper) {
    const std::size_t mss = setup_ ? setup_->emss : 1448;
    tap_wire_.shaper =
        rx_.opts.shaper(RxShaperContext{rx_.reader->config(), mss, rx_.opts.stream_start});
    logger().info("QP {}: receiving through a {}", qp_num_, tap_wire_.shaper->describe());
  }
  if (!leftover.empty()) rx_data(leftover);
  rx_read();
}

// The tap gets received bytes cut at FPDU boundaries (without markers the length field finds
// them), so a capture's segments each start with an FPDU, as RFC 5044 §8 has senders cut them
// (and as Wireshark's dissector expects); the socket's reads cut anywhere.
void QueuePair::tap_inbound(ByteSpan data) {
  if (rx_.reader->config().markers) return tap_wire_.tap->on_data(false, data);
  tap_wire_.rx_partial.insert(tap_wire_.rx_partial.end(), data.begin(), data.end());
  std::vector<std::size_t> ends;
  std::size_t pos = 0;
  while (tap_wire_.rx_partial.size() - pos >= mpa::kUlpduLengthSize) {
    const std::size_t n = mpa::fpdu_length(load_be16(&tap_wire_.rx_partial[pos]));
    if (tap_wire_.rx_partial.size() - pos < n) break;
    pos += n;
    ends.push_back(pos);
  }
  if (pos == 0) return;
  tap_wire_.tap->on_fpdus(false, ByteSpan(tap_wire_.rx_partial.data(), pos), ends);
  tap_wire_.rx_partial.erase(tap_wire_.rx_partial.begin(),
                             tap_wire_.rx_partial.begin() + static_cast<std::ptrdiff_t>(pos));
}

void QueuePair::rx_data(ByteSpan data) {
  if (tap_wire_.tap) tap_inbound(data);
  stats_.bytes_received += data.size();
  if (tap_wire_.shaper) {
    // A simulation: the stream is cut into segments again and presented out of order.
    tap_wire_.shaper->push(data, [this](TcpSeq seq, ByteSpan p) { rx_segment(seq, p); });
    arm_shaper_flush();
    return;
  }
  rx_segment(rx_.segments->next_seq(), data);
}

void QueuePair::rx_segment(TcpSeq seq, ByteSpan payload) {
  if (closed_) return;
  const std::int32_t ahead = seq - rx_.segments->next_seq();
  if (ahead > 0) {
    const std::uint64_t lo = rx_.segments->in_order() + static_cast<std::uint32_t>(ahead);
    rx_.hole_clock.seen(rx_.segments->in_order(), lo, lo + payload.size());
  }
  if (rx_.hole_clock.open_runs() == 0) {
    rx_.segments->receive(seq, payload, *rx_.visitor);
  } else {
    const auto began = HoleClock::Clock::now();
    rx_.segments->receive(seq, payload, *rx_.visitor);
    rx_.hole_clock.advanced(rx_.segments->in_order(), began, HoleClock::Clock::now());
  }
  if (rx_.fin_seq) rx_check_fin();
}

void QueuePair::arm_shaper_flush() {
  if (!tap_wire_.shaper->holding() || closed_) return;
  // Held segments arrive at the latest 2 ms after the stream pauses (a retransmission).
  if (!tap_wire_.wire_flush) tap_wire_.wire_flush.emplace(dev_.io());
  tap_wire_.wire_flush->expires_after(std::chrono::milliseconds(2));
  tap_wire_.wire_flush->async_wait(
      [self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec || self->closed_) return;
        self->tap_wire_.shaper->flush([&](TcpSeq seq, ByteSpan p) { self->rx_segment(seq, p); });
      });
}

void QueuePair::rx_read() {
  if (closed_ || !transport_ || rx_.reader->failed()) return;
  transport_->async_wait_readable([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec) return self->on_rx_error(ec);
    if (self->closed_) return;
    self->rx_drain();
  });
}

// Reads what the socket holds now, on the engine thread: straight into the target region when
// the reader is inside a large placed payload (no staging copy), into the staging buffer
// otherwise. A bounded number of reads per wake-up, so one busy connection does not starve the
// others on the engine.
void QueuePair::rx_drain() {
  constexpr int kReadsPerWakeup = 16;
  RecvBatch batch(*this);
  for (int i = 0; i < kReadsPerWakeup; ++i) {
    if (closed_ || rx_.reader->failed()) return;
    boost::system::error_code ec;
    auto win = rx_.reader->direct_window();
    if (win.size() >= rx_.opts.direct_min && !tap_wire_.shaper && !rx_.segments->has_holes()) {
      const std::size_t n = transport_->read_some(win, ec);
      if (!ec) {
        if (tap_wire_.tap) tap_inbound(ByteSpan(win.data(), n));
        stats_.bytes_received += n;
        ++stats_.direct_reads;
        rx_.segments->advance(n);
        rx_.reader->commit_direct(n, *rx_.sink);
        continue;
      }
    } else {
      Bytes& buf = rx_staging();
      const std::size_t n = transport_->read_some(MutableByteSpan(buf), ec);
      if (!ec) {
        rx_data(ByteSpan(buf.data(), n));
        if (n == buf.size() && n < kRxBufferMax) buf.resize(std::min(2 * n, kRxBufferMax));
        continue;
      }
    }
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) break;
    // The end of the stream (or an error) is handled after what the octets before it queued
    // (a doorbell for a Read or atomic response), as it would be had it arrived on its own.
    boost::asio::post(dev_.io(), [self = shared_from_this(), ec] { self->on_rx_error(ec); });
    return;
  }
  rx_read();
}

void QueuePair::revoke(const MemoryRegion& r) {
  // A posting thread's batch in progress holds the lock: it is out (or handed to the engine,
  // and detached below) before this goes on.
  TxLock tl(tx_mu_);
  const std::uint8_t* lo = r.addr;
  const std::uint8_t* hi = r.addr + r.length;
  auto touches = [&](const std::uint8_t* p, std::size_t n) {
    return n != 0 && p < hi && p + n > lo;
  };
  const std::string why =
      fmt::format("STag 0x{:08x} was deregistered while in use", r.stag.value());
  // Transmit: the unsent octets of the batch are copied; a message that still had to read from
  // the region cannot be finished.
  tx_detach(touches);
  for (auto& e : irq_)
    if (!e.atomic && touches(e.src.data(), e.src.size())) {
      e.revoked = true;
      e.src = {};
    }
  for (auto& e : orq_)
    if (e.atomic && touches(e.result, 8)) {
      e.result = nullptr;
      e.result_revoked = true;
    }
  std::optional<std::uint64_t> failed_wr;
  bool failed_response = false;
  if (tx_.cur)
    for (const auto& d : tx_.cur->data)
      if (touches(d.data(), d.size())) {
        if (tx_.cur->kind == TxKind::Sq)
          failed_wr = tx_.cur->sq_index;
        else
          failed_response = true;
        break;
      }
  // Receive: the FPDU being placed there stops placing (its rest is discarded and it ends in a
  // Terminate), a receive WR whose buffer it was fails, a pending Read Request or atomic fails.
  if (rx_.reader && touches(rx_.reader->destination().data(), rx_.reader->destination().size())) {
    rx_.reader->drop_destination();
    if (!rx_.fpdu.error)
      rx_.fpdu.error = WireError{
          rx_.fpdu.seg.hdr.tagged ? Errc::DdpTaggedInvalidStag : Errc::DdpLocalCatastrophic,
          "RFC 5041 §7.2: placement needs a valid STag for the whole segment",
          why + ", with its FPDU half placed"};
  }
  if (rx_.send.active)
    for (auto sge : rx_.send.buffer.sges)
      if (touches(sge.data(), sge.size())) {
        rx_.send.revoked = true;
        rx_.send.buffer = RecvBuffer{};
        rx_.send.error = WcStatus::LocProtErr;
        break;
      }
  if (rx_.fpdu.atomic_word &&
      touches(reinterpret_cast<const std::uint8_t*>(rx_.fpdu.atomic_word), 8)) {
    rx_.fpdu.atomic_word = nullptr;
    if (!rx_.fpdu.error)
      rx_.fpdu.error = WireError{Errc::RdmapInvalidStag,
                                 "RFC 7306 §5: the atomic target's STag must be valid", why};
  }
  if (rx_.fpdu.pending_irq && !rx_.fpdu.pending_irq->atomic &&
      touches(rx_.fpdu.pending_irq->src.data(), rx_.fpdu.pending_irq->src.size())) {
    rx_.fpdu.pending_irq.reset();
    if (!rx_.fpdu.error)
      rx_.fpdu.error = WireError{Errc::RdmapInvalidStag,
                                 "RFC 5040 §4.4: the Read's source STag must be valid", why};
  }
  if (failed_wr) {
    tx_.cur.reset();
    local_fatal(*failed_wr, WcStatus::LocProtErr,
                fmt::format("{}: its work request was still being sent", why));
  } else if (failed_response) {
    tx_.cur.reset();
    fatal(WireError{Errc::RdmapInvalidStag,
                    "RFC 5040 §4.4: a Read Request's source must stay registered",
                    why + ", with its Read Response half sent"});
  }
}

void QueuePair::on_rx_error(const boost::system::error_code& ec) {
  if (ec == boost::asio::error::operation_aborted || closed_) return;
  // What the simulated wire still holds arrived before the end of the stream.
  if (tap_wire_.shaper)
    tap_wire_.shaper->flush([this](TcpSeq seq, ByteSpan p) { rx_segment(seq, p); });
  if (closed_) return;
  if (ec == boost::asio::error::eof)
    enter_error({QpClosed::Cause::PeerClosed, "the peer closed the connection"});
  else
    enter_error({QpClosed::Cause::PeerClosed, fmt::format("connection lost: {}", llp_error(ec))});
}

bool QueuePair::take_rqe() {
  std::optional<RecvWr> wr;
  // QpInit::rnr_wait: the application may be waiting for a completion held in the batch
  // before it posts the receive.
  // A busy-polling program thread running this handler is the application: it cannot post
  // while it waits here, so it does not wait (Device::progress() does not run while a QP has a
  // soft RNR wait; this covers a QP made while a poll was under way).
  const auto rnr_wait = dev_.on_polling_thread() ? std::chrono::milliseconds(0) : init_.rnr_wait;
  if (rnr_wait.count() > 0) recv_flush();
  if (init_.srq) {
    wr = init_.srq->take(rnr_wait);
  } else {
    std::unique_lock l(mu_);
    // QpInit::rnr_wait: give the application a bounded chance to post the receive.
    if (rq_.empty() && rnr_wait.count() > 0)
      rq_posted_.wait_for(l, rnr_wait, [&] { return !rq_.empty() || rnr_abort_; });
    if (!rq_.empty()) {
      wr = std::move(rq_.front());
      rq_.pop_front();
    }
  }
  if (!wr) return false;
  rx_.send = RxSend{};
  rx_.send.active = true;
  rx_.send.msn = rx_.fpdu.seg.hdr.msn;
  rx_.send.rqe = std::move(*wr);
  return true;
}

MutableByteSpan QueuePair::rx_head(const mpa::FpduHead& h, Delivery how) {
  rx_.fpdu.error.reset();
  rx_.fpdu.seg = ddp::Segment{};
  rx_.fpdu.peer_rtr = false;
  rx_.fpdu.pending_irq.reset();
  rx_.fpdu.atomic_word = nullptr;
  if (state_.load() != QpState::Rts) return {};  // after a Terminate nothing more is placed
  rx_.fpdu.bounce.clear();
  rx_.fpdu.ulpdu_length = h.ulpdu_length;
  rx_.fpdu.raw_ddp.assign(
      h.head.begin(), h.head.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(
                                           h.head.size(), h.head.size() >= 1 && (h.head[0] & 0x80)
                                                              ? ddp::kTaggedHeaderSize
                                                              : ddp::kUntaggedHeaderSize)));
  rx_.fpdu.raw_rdmap.clear();
  ++stats_.fpdus_received;
  if (!rx_.first_fpdu_seen) {
    rx_.first_fpdu_seen = true;
    TxLock tl(tx_mu_);
    if (tx_.gated) {
      tx_.gated = false;
      ring_doorbell();
    }
  }
  auto seg = ddp::parse_segment(h.head);
  if (!seg) {
    rx_.fpdu.error = seg.error();
    return {};
  }
  rx_.fpdu.seg = *seg;
  const std::size_t payload_len = h.ulpdu_length - seg->hdr.size() - seg->info().body_size;
  rx_.fpdu.payload_len = payload_len;
  if (seg->hdr.op() == Opcode::ReadRequest)
    rx_.fpdu.raw_rdmap.assign(
        h.head.begin() + ddp::kUntaggedHeaderSize,
        h.head.begin() + ddp::kUntaggedHeaderSize + rdmap::kReadRequestBodySize);
  if (auto c = rx_.checker.check(seg->hdr, payload_len); !c) {
    rx_.fpdu.error = c.error();
    return {};
  }
  auto dest = seg->hdr.tagged ? rx_tagged(*seg, payload_len, seg->payload, how)
                              : rx_untagged(*seg, payload_len, seg->payload, how);
  if (!dest) {
    rx_.fpdu.error = dest.error();
    return {};
  }
  return *dest;
}

Result<MutableByteSpan> QueuePair::rx_tagged(const ddp::Segment& s, std::size_t len,
                                             ByteSpan head_payload, Delivery how) {
  const auto& h = s.hdr;
  if (s.info().family == rdmap::MessageFamily::ReadResponse) {
    // RFC 5040 §7.4.1: with no RDMA Read outstanding the opcode itself is unexpected.
    if (orq_.empty() || orq_.front().atomic)
      return fail(
          Errc::RdmapUnexpectedOpcode,
          "RFC 5040 §4.5: a Read Response answers an outstanding RDMA Read Request",
          fmt::format("Read Response to STag 0x{:08x} with no Read outstanding", h.stag.value()));
    auto& e = orq_.front();
    if (h.stag != e.sink)
      return fail(Errc::DdpTaggedInvalidStag,
                  "RFC 5040 §4.5: a Read Response carries the Read Request's Data Sink STag",
                  fmt::format("STag 0x{:08x}, the Read asked for 0x{:08x}", h.stag.value(),
                              e.sink.value()));
    if (h.to.value() != e.sink_to.value() + e.received || e.received + len > e.size)
      return fail(Errc::DdpTaggedBaseBounds,
                  "RFC 5040 §4.5: Read Response data lies inside the requested sink range",
                  fmt::format("TO 0x{:x} + {} outside [0x{:x}, +{})", h.to.value(), len,
                              e.sink_to.value(), e.size));
    e.received += static_cast<std::uint32_t>(len);
  } else {
    rx_.cur_write_len += static_cast<std::uint32_t>(len);
  }
  // RFC 5041 §7.2 (and siw): a zero-length tagged segment is not checked against any STag.
  if (len == 0) return MutableByteSpan{};
  auto r = dev_.memory().check_remote(h.stag, init_.pd, h.to.value(), len, kRemoteWrite, true);
  if (!r) return std::unexpected(r.error());
  std::uint8_t* p = *r;
  if (how == Delivery::AlreadyPlaced) return MutableByteSpan{};
  if (!head_payload.empty()) std::memcpy(p, head_payload.data(), head_payload.size());
  return MutableByteSpan(p + head_payload.size(), len - head_payload.size());
}

// RFC 6581 §4: in peer-to-peer mode with a Send RTR, the responder's first message from the
// initiator may be that RTR, a zero-length Send with MSN 1 that consumes no receive WQE.
bool QueuePair::expects_peer_rtr_send() const {
  const auto& st = *setup_;
  return !st.initiator && st.params.peer_to_peer && st.params.rtr == mpa::RtrType::Send;
}

Result<MutableByteSpan> QueuePair::rx_untagged(const ddp::Segment& s, std::size_t len,
                                               ByteSpan head_payload, Delivery how) {
  const auto& h = s.hdr;
  using F = rdmap::MessageFamily;
  switch (s.info().family) {
    case F::Send:
      return rx_send_segment(s, len, head_payload, how);
    case F::ImmediateData:
      if (!take_rqe())
        return fail(Errc::DdpUntaggedNoBuffer,
                    "RFC 7306 §4.3: Immediate Data consumes a posted receive buffer",
                    fmt::format("Immediate Data MSN {} with no receive WR posted", h.msn.value()));
      return MutableByteSpan{};
    case F::ReadRequest:
    case F::AtomicRequest:
      if (auto r = rx_check_request(s); !r) return std::unexpected(r.error());
      return MutableByteSpan{};
    case F::AtomicResponse: {
      const auto& a = std::get<rdmap::AtomicResponse>(s.body);
      if (orq_.empty() || !orq_.front().atomic || orq_.front().request_id != a.request_id)
        return fail(Errc::RdmapUnexpectedOpcode,
                    "RFC 7306 §4.2.2: an Atomic Response answers the oldest atomic request",
                    fmt::format("response to request {} not outstanding", a.request_id));
      return MutableByteSpan{};  // completed in rx_message_end(), once the CRC is good
    }
    case F::Terminate:
      return MutableByteSpan{};
    case F::Write:
    case F::ReadResponse:
      break;
  }
  return fail(Errc::RdmapUnexpectedOpcode, "RFC 5040 §4.2: opcode not expected here",
              std::string(rdmap::opcode_name(h.opcode)));
}

// One segment of a Send-family message (RFC 5040 §4.6, RFC 5041 §5.3): the first (MO 0)
// consumes the next receive WQE, and each lands in that WQE's buffer at its MO, directly when
// one SGE holds it, through the bounce buffer otherwise (scattered in rx_end).
Result<MutableByteSpan> QueuePair::rx_send_segment(const ddp::Segment& s, std::size_t len,
                                                   ByteSpan head_payload, Delivery how) {
  const auto& h = s.hdr;
  if (expects_peer_rtr_send() && h.msn == Msn{1} && len == 0 && h.last) {
    rx_.fpdu.peer_rtr = true;
    return MutableByteSpan{};
  }
  if (h.mo.value() == 0) {
    if (!take_rqe())
      return fail(Errc::DdpUntaggedNoBuffer,
                  "RFC 5041 §7.2: an untagged message needs a posted receive buffer",
                  fmt::format("Send MSN {} arrived with no receive WR posted", h.msn.value()));
    if (auto r = resolve_recv_buffer(dev_.memory(), init_.pd, rx_.send.rqe, rx_.send.buffer); !r) {
      // RFC 5041 §7.2 local error (as siw): this receive WR ends with a protection error.
      rx_.send.error = WcStatus::LocProtErr;
      return std::unexpected(r.error());
    }
  }
  if (!rx_.send.active)
    return fail(Errc::DdpUntaggedInvalidMo, "RFC 5041 §5.3: a continuation needs its message",
                fmt::format("MO {} without a first segment", h.mo.value()));
  if (rx_.send.revoked)
    return fail(Errc::DdpLocalCatastrophic, "RFC 5041 §7.2: the receive buffer must be usable",
                fmt::format("receive WR {}: a region of its buffer was deregistered while "
                            "the message arrived",
                            rx_.send.rqe.wr_id));
  const std::uint64_t mo = h.mo.value();
  // RFC 5041 §5.3: MO is 32 bits; a message never extends past 2^32 - 1 (no wrap).
  if (mo + len > 0xFFFFFFFFull) {
    rx_.send.error = WcStatus::LocLenErr;
    return fail(
        Errc::DdpUntaggedTooLong, "RFC 5041 §5.3: an untagged message ends below MO 2^32",
        fmt::format("Send MSN {} at MO {} + {} octets passes 4 GiB", h.msn.value(), mo, len));
  }
  if (auto fits = rx_.send.buffer.check_fits(mo, len, h.msn, rx_.send.rqe.wr_id); !fits) {
    rx_.send.error = WcStatus::LocLenErr;
    return std::unexpected(fits.error());
  }
  rx_.send.placed = static_cast<std::uint32_t>(mo + len);
  if (how == Delivery::AlreadyPlaced) return MutableByteSpan{};
  if (auto direct = rx_.send.buffer.contiguous(mo, len)) {
    if (!head_payload.empty())
      std::memcpy(direct->data(), head_payload.data(), head_payload.size());
    return direct->subspan(head_payload.size());
  }
  rx_.fpdu.bounce.assign(head_payload.begin(), head_payload.end());
  rx_.fpdu.bounce.resize(len);
  rx_.fpdu.bounce_mo = static_cast<std::uint32_t>(mo);
  return MutableByteSpan(rx_.fpdu.bounce).subspan(head_payload.size());
}

// A Read Request or Atomic Request, checked on its head: the IRD, and the memory it names.
// RFC 5044 §6.2: nothing reaches RDMAP before the CRC is checked, so the request is only
// validated here; rx_message_end() queues the Read or executes the atomic.
Result<void> QueuePair::rx_check_request(const ddp::Segment& s) {
  const auto& h = s.hdr;
  const auto& st = *setup_;
  auto& mem = dev_.memory();
  // RFC 5040 §6.3 / RFC 6581: no more outstanding Read (and atomic) requests than our IRD.
  const std::uint16_t ird = st.initiator ? st.params.initiator_ird : st.params.responder_ird;
  TxLock tl(tx_mu_);
  std::size_t outstanding = irq_.size();
  if (tx_.cur && (tx_.cur->kind == TxKind::ReadResponse || tx_.cur->kind == TxKind::AtomicResponse))
    ++outstanding;
  if (outstanding >= ird)
    return fail(Errc::RdmapCatastrophicStream,
                "RFC 5040 §6.3 / RFC 6581 §6: outstanding Read Requests must not exceed IRD",
                fmt::format("{} MSN {} with {} already outstanding, IRD {}",
                            rdmap::opcode_name(h.opcode), h.msn.value(), outstanding, ird));
  if (s.info().family == rdmap::MessageFamily::ReadRequest) {
    const auto& rr = std::get<rdmap::ReadRequest>(s.body);
    IrqEntry e{false, rr.sink_stag, rr.sink_to, {}, {}, rr.src_stag, false};
    if (rr.size > 0) {
      auto p =
          mem.check_remote(rr.src_stag, init_.pd, rr.src_to.value(), rr.size, kRemoteRead, false);
      if (!p) return std::unexpected(p.error());
      e.src = ByteSpan(*p, rr.size);
    }
    rx_.fpdu.pending_irq = e;
    return {};
  }
  const auto& a = std::get<rdmap::AtomicRequest>(s.body);
  if (a.to.value() % 8 != 0)
    return fail(Errc::RdmapBaseBounds, "RFC 7306 §5: the atomic target must be 8-octet aligned",
                fmt::format("TO 0x{:x}", a.to.value()));
  auto p = mem.check_remote(a.stag, init_.pd, a.to.value(), 8, kRemoteAtomic, false);
  if (!p) return std::unexpected(p.error());
  rx_.fpdu.atomic_word = reinterpret_cast<std::uint64_t*>(*p);
  return {};
}

void QueuePair::rx_end(const mpa::FpduTrailer& t, Delivery how) {
  if (t.crc == mpa::CrcStatus::Bad || closed_) return;  // the framing error follows
  if (state_.load() != QpState::Rts) return;            // draining after a Terminate
  if (!rx_.fpdu.error && rx_.send.active && rx_.send.revoked && !rx_.fpdu.seg.hdr.tagged &&
      rx_.fpdu.seg.hdr.qn.value() == rdmap::kQnSend)
    rx_.fpdu.error =
        WireError{Errc::DdpLocalCatastrophic, "RFC 5041 §7.2: the receive buffer must be usable",
                  fmt::format("receive WR {}: a region of its buffer was deregistered "
                              "while the message arrived",
                              rx_.send.rqe.wr_id)};
  if (rx_.fpdu.error) {
    fatal(*rx_.fpdu.error, rx_.fpdu.raw_ddp, rx_.fpdu.raw_rdmap, rx_.fpdu.ulpdu_length);
    return;
  }
  // (an FPDU released from beyond a hole was reported when it was placed)
  if (rx_.opts.observer && how == Delivery::InOrder && !rx_.fpdu.peer_rtr)
    rx_event(RxEvent{.kind = RxEvent::Kind::Placed,
                     .offset = t.offset,
                     .end = t.offset + t.wire_length,
                     .text =
                         [&] {
                           // describe() counts the octets it was shown: the head only, here.
                           auto d = ddp::describe(rx_.fpdu.seg);
                           return d.substr(0, d.rfind(" len ")) +
                                  fmt::format(" len {}", rx_.fpdu.payload_len);
                         }(),
                     .hdr = rx_.fpdu.seg.hdr,
                     .payload = static_cast<std::uint32_t>(rx_.fpdu.payload_len)});
  if (!rx_.fpdu.bounce.empty()) rx_.send.buffer.scatter(rx_.fpdu.bounce_mo, rx_.fpdu.bounce);
  if (!rx_.fpdu.seg.hdr.last) return;
  if (auto r = rx_message_end(how); !r)
    fatal(r.error(), rx_.fpdu.raw_ddp, rx_.fpdu.raw_rdmap, rx_.fpdu.ulpdu_length);
}

// The last segment (L=1) of a message is delivered: what the message does beyond placement
// happens now, in stream order (RFC 5040 §5.3, RFC 5041 §5.4).
Result<void> QueuePair::rx_message_end(Delivery how) {
  if (rx_.fpdu.peer_rtr) return {};  // nothing to complete
  const auto& seg = rx_.fpdu.seg;
  using F = rdmap::MessageFamily;
  const F family = seg.info().family;
  // Immediate Data reports the length of the Write it follows (RFC 7306 §4.3: Write with
  // Immediate is a Write and then the Immediate Data message); any other message between them
  // means it stands alone.
  if (family != F::Write && family != F::ImmediateData) rx_.last_write_len = 0;
  switch (family) {
    case F::Write:
      rx_.last_write_len = rx_.cur_write_len;
      rx_.cur_write_len = 0;
      return {};
    case F::ReadResponse:
      return rx_read_response_end();
    case F::Send:
    case F::ImmediateData:
      return complete_receive();
    case F::Terminate:
      rx_terminate_received(std::get<rdmap::Terminate>(seg.body));
      return {};
    case F::ReadRequest: {
      TxLock tl(tx_mu_);
      irq_.push_back(*rx_.fpdu.pending_irq);
    }
      // Released from beyond a hole, the doorbell is reported once for the hole (Released).
      if (how == Delivery::InOrder && rx_.opts.observer)
        rx_event(
            RxEvent{.kind = RxEvent::Kind::Doorbell,
                    .read_requests = 1,
                    .text = fmt::format("Read Request MSN {} queued, {} octets from STag 0x{:08x}",
                                        seg.hdr.msn.value(), rx_.fpdu.pending_irq->src.size(),
                                        std::get<rdmap::ReadRequest>(seg.body).src_stag.value()),
                    .hdr = seg.hdr});
      ring_doorbell();
      return {};
    case F::AtomicRequest:
      execute_atomic(std::get<rdmap::AtomicRequest>(seg.body));
      return {};
    case F::AtomicResponse:
      rx_atomic_response_end();
      return {};
  }
  return {};
}

// RFC 5040 §4.5: the last Read Response segment completes the oldest Read.
Result<void> QueuePair::rx_read_response_end() {
  auto e = orq_.front();
  if (e.received != e.size)
    return fail(Errc::DdpTaggedBaseBounds,
                "RFC 5040 §4.5: the Read Response carries the whole requested size",
                fmt::format("{} of {} octets", e.received, e.size));
  orq_.pop_front();
  if (e.sq_index != kNoSqIndex) complete_sq(e.sq_index, WcStatus::Success, e.size);
  if (rx_.opts.observer)  // (no formatting on the data path without one)
    rx_event(RxEvent{.kind = RxEvent::Kind::Completion,
                     .text = fmt::format("RDMA Read of {} octets into STag 0x{:08x} complete",
                                         e.size, e.sink.value()),
                     .hdr = rx_.fpdu.seg.hdr});
  ring_doorbell();
  return {};
}

Wc QueuePair::recv_completion(std::uint64_t wr_id, WcStatus status, WcOpcode opcode) const {
  Wc wc;
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.qp_num = qp_num_;
  return wc;
}

// The receive WQE a Send or Immediate Data message consumed completes with its last segment
// (RFC 5040 §5.3, RFC 7306 §4.3); a Send with Invalidate first invalidates the STag it names
// (RFC 5040 §5.4). A Solicited Event variant asks the CQ to notify.
Result<void> QueuePair::complete_receive() {
  const auto& seg = rx_.fpdu.seg;
  const auto& info = seg.info();
  const bool immediate = info.family == rdmap::MessageFamily::ImmediateData;
  Wc wc = recv_completion(rx_.send.rqe.wr_id, WcStatus::Success,
                          immediate ? WcOpcode::RecvRdmaWithImm : WcOpcode::Recv);
  if (immediate) {
    wc.byte_len = rx_.last_write_len;
    wc.imm_data = static_cast<std::uint32_t>(std::get<std::uint64_t>(seg.body) >> 32);
    wc.wc_flags = kWcWithImm;
    rx_.last_write_len = 0;
  } else {
    wc.byte_len = rx_.send.placed;
  }
  if (info.invalidate) {
    const STag inv{seg.hdr.rsvd_ulp};
    if (!dev_.memory().invalidate(inv, init_.pd)) {
      rx_.send.active = false;
      wc.status = WcStatus::RemInvReqErr;
      recv_push(wc);
      return fail(
          Errc::RdmapOpCannotInvalidate,
          "RFC 5040 §7.4: Send with Invalidate names an STag that can be invalidated",
          fmt::format("STag 0x{:08x} is not a valid STag of this stream's PD", inv.value()));
    }
    wc.wc_flags |= kWcWithInv;
    wc.invalidated_rkey = inv;
  }
  rx_.send.active = false;
  recv_push(wc, info.solicited);
  if (rx_.opts.observer && !immediate)
    rx_event(RxEvent{.kind = RxEvent::Kind::Completion,
                     .text = fmt::format("{} MSN {} received: {} octets, receive WR {}",
                                         rdmap::opcode_name(seg.hdr.opcode), seg.hdr.msn.value(),
                                         wc.byte_len, wc.wr_id),
                     .hdr = seg.hdr});
  return {};
}

// RFC 7306 §4.2.1: the atomic runs on the 64-bit target (host byte order in memory) and its
// original value goes back in an Atomic Response, queued behind earlier Read Responses.
void QueuePair::execute_atomic(const rdmap::AtomicRequest& a) {
  std::uint64_t* word = rx_.fpdu.atomic_word;
  std::uint64_t old = __atomic_load_n(word, __ATOMIC_SEQ_CST), next = old;
  do {
    switch (static_cast<rdmap::AtomicOp>(a.op)) {
      case rdmap::AtomicOp::FetchAdd:
        next = masked_add(old, a.add_swap_data, a.add_swap_mask);
        break;
      case rdmap::AtomicOp::Swap:
        next = (old & ~a.add_swap_mask) | (a.add_swap_data & a.add_swap_mask);
        break;
      case rdmap::AtomicOp::CompareSwap:
        next = ((old ^ a.compare_data) & a.compare_mask) == 0
                   ? (old & ~a.add_swap_mask) | (a.add_swap_data & a.add_swap_mask)
                   : old;
        break;
    }
  } while (
      !__atomic_compare_exchange_n(word, &old, next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  TxLock tl(tx_mu_);
  irq_.push_back(IrqEntry{
      true, STag{0}, TaggedOffset{0}, {}, rdmap::AtomicResponse{a.request_id, old}, a.stag, false});
  ring_doorbell();
}

// RFC 7306 §4.2.2: the response carries the original value for the oldest atomic's WR.
void QueuePair::rx_atomic_response_end() {
  const auto& a = std::get<rdmap::AtomicResponse>(rx_.fpdu.seg.body);
  auto e = orq_.front();
  orq_.pop_front();
  if (e.result_revoked || !e.result) {
    local_fatal(e.sq_index, WcStatus::LocProtErr,
                "the atomic's result buffer was deregistered before its response arrived");
    return;
  }
  std::memcpy(e.result, &a.original_value, 8);
  complete_sq(e.sq_index, WcStatus::Success, 8);
  ring_doorbell();  // a fenced WR or one held by the ORD may go now
}

void QueuePair::rx_framing_error(const WireError& e) {
  fatal(e);
}

}  // namespace iwarp::rnic
