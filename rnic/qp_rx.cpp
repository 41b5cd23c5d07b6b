// Receive engine: reads the MPA stream, and for each DDP segment checks it (RFC 5041 §7.2,
// RFC 5040 §7.4) and places its payload directly: tagged segments into the STag's region at
// their TO, untagged Sends into the receive WQE at their MO. Large payloads are read from the
// socket straight into the target memory (FpduReader::direct_window). Completions follow the
// last segment of each message, in stream order (RFC 5040 §5.3 / RFC 5041 §5.4).
#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <cstring>

#include "common/log.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic {

namespace {
spdlog::logger& logger() {
  return log::layer("rnic");
}
// The receive staging buffer starts small (an idle connection holds little) and doubles
// whenever a read fills it, up to the largest.
constexpr std::size_t kRxBufferFirst = 16 * 1024;
constexpr std::size_t kRxBufferMax = 256 * 1024;
constexpr std::size_t kDirectMin = 4096;  // smaller runs are cheaper through the buffer
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
  MutableByteSpan on_fpdu_head(const mpa::FpduHead& h) override { return qp_.rx_head(h); }
  void on_fpdu_end(const mpa::FpduTrailer& t) override { qp_.rx_end(t); }
  void on_framing_error(const WireError& e) override { qp_.rx_framing_error(e); }

 private:
  QueuePair& qp_;
};

QueuePair::~QueuePair() = default;

// The segment path's visitor: the in-order stream goes through the FpduReader, FPDUs beyond a
// hole to rx_ooo, and the in-order point reaching one of those to rx_release.
class QueuePair::SegVisitor : public mpa::SegmentVisitor {
 public:
  explicit SegVisitor(QueuePair& qp) : qp_(qp) {}
  void on_stream(ByteSpan bytes) override {
    if (!qp_.closed_) qp_.rx_reader_->feed(bytes, *qp_.rx_sink_);
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
  rx_sink_ = std::make_shared<RxSink>(*this);
  seg_visitor_ = std::make_shared<SegVisitor>(*this);
  seg_rx_.emplace(rx_reader_->config(), rx_opts_.stream_start);
  if (rx_opts_.wire) {
    const std::size_t mss = setup_ ? setup_->emss : 1448;
    wire_.emplace(*rx_opts_.wire, rx_reader_->config(), mss, rx_opts_.stream_start);
    logger().info("QP {}: receiving through a simulated impaired wire ({}, MSS {})", qp_num_,
                  rx_opts_.wire->describe(), rx_opts_.wire->mss ? rx_opts_.wire->mss : mss);
  }
  rx_buf_.resize(kRxBufferFirst);
  if (!leftover.empty()) rx_data(leftover);
  rx_read();
}

// The tap gets received bytes cut at FPDU boundaries (without markers the length field finds
// them), so a capture's segments each start with an FPDU, as RFC 5044 §8 has senders cut them
// (and as Wireshark's dissector expects); the socket's reads cut anywhere.
void QueuePair::tap_inbound(ByteSpan data) {
  if (rx_reader_->config().markers) return tap_->on_data(false, data);
  rx_tap_buf_.insert(rx_tap_buf_.end(), data.begin(), data.end());
  std::vector<std::size_t> ends;
  std::size_t pos = 0;
  while (rx_tap_buf_.size() - pos >= mpa::kUlpduLengthSize) {
    const std::size_t n = mpa::fpdu_length(load_be16(&rx_tap_buf_[pos]));
    if (rx_tap_buf_.size() - pos < n) break;
    pos += n;
    ends.push_back(pos);
  }
  if (pos == 0) return;
  tap_->on_fpdus(false, ByteSpan(rx_tap_buf_.data(), pos), ends);
  rx_tap_buf_.erase(rx_tap_buf_.begin(), rx_tap_buf_.begin() + static_cast<std::ptrdiff_t>(pos));
}

void QueuePair::rx_data(ByteSpan data) {
  if (tap_) tap_inbound(data);
  {
    std::lock_guard l(mu_);
    stats_.bytes_received += data.size();
  }
  if (wire_) {
    // A simulation: the stream is cut into segments again and presented out of order.
    wire_->push(data, [this](WireSegment s) { rx_segment(s.seq, s.payload); });
    arm_wire_flush();
    return;
  }
  rx_segment(seg_rx_->next_seq(), data);
}

void QueuePair::rx_segment(TcpSeq seq, ByteSpan payload) {
  if (closed_) return;
  seg_rx_->receive(seq, payload, *seg_visitor_);
  if (fin_seq_) rx_check_fin();
}

void QueuePair::arm_wire_flush() {
  if (!wire_->holding() || closed_) return;
  // Held segments arrive at the latest 2 ms after the stream pauses (a retransmission).
  if (!wire_flush_) wire_flush_.emplace(dev_.io());
  wire_flush_->expires_after(std::chrono::milliseconds(2));
  wire_flush_->async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->closed_) return;
    self->wire_->flush([&](WireSegment s) { self->rx_segment(s.seq, s.payload); });
  });
}

void QueuePair::rx_read() {
  if (closed_ || !transport_ || rx_reader_->failed()) return;
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
  for (int i = 0; i < kReadsPerWakeup; ++i) {
    if (closed_ || rx_reader_->failed()) return;
    boost::system::error_code ec;
    auto win = rx_reader_->direct_window();
    if (win.size() >= kDirectMin && !wire_ && !seg_rx_->has_holes()) {
      const std::size_t n = transport_->read_some(win, ec);
      if (!ec) {
        if (tap_) tap_inbound(ByteSpan(win.data(), n));
        {
          std::lock_guard l(mu_);
          stats_.bytes_received += n;
          ++stats_.direct_reads;
        }
        seg_rx_->advance(n);
        rx_reader_->commit_direct(n, *rx_sink_);
        continue;
      }
    } else {
      const std::size_t n = transport_->read_some(MutableByteSpan(rx_buf_), ec);
      if (!ec) {
        rx_data(ByteSpan(rx_buf_.data(), n));
        if (n == rx_buf_.size() && n < kRxBufferMax) rx_buf_.resize(std::min(2 * n, kRxBufferMax));
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
  if (tx_cur_)
    for (const auto& d : tx_cur_->data)
      if (touches(d.data(), d.size())) {
        if (tx_cur_->kind == TxKind::Sq)
          failed_wr = tx_cur_->sq_index;
        else
          failed_response = true;
        break;
      }
  // Receive: the FPDU being placed there stops placing (its rest is discarded and it ends in a
  // Terminate), a receive WR whose buffer it was fails, a pending Read Request or atomic fails.
  if (rx_reader_ && touches(rx_reader_->destination().data(), rx_reader_->destination().size())) {
    rx_reader_->drop_destination();
    if (!rx_.error)
      rx_.error =
          WireError{rx_.seg.hdr.tagged ? Errc::DdpTaggedInvalidStag : Errc::DdpLocalCatastrophic,
                    "RFC 5041 §7.2: placement needs a valid STag for the whole segment",
                    why + ", with its FPDU half placed"};
  }
  if (rx_send_.active)
    for (auto sge : rx_send_.sges)
      if (touches(sge.data(), sge.size())) {
        rx_send_.revoked = true;
        rx_send_.sges.clear();
        rx_send_.error = WcStatus::LocProtErr;
        break;
      }
  if (rx_.atomic_word && touches(reinterpret_cast<const std::uint8_t*>(rx_.atomic_word), 8)) {
    rx_.atomic_word = nullptr;
    if (!rx_.error)
      rx_.error = WireError{Errc::RdmapInvalidStag,
                            "RFC 7306 §5: the atomic target's STag must be valid", why};
  }
  if (rx_.pending_irq && !rx_.pending_irq->atomic &&
      touches(rx_.pending_irq->src.data(), rx_.pending_irq->src.size())) {
    rx_.pending_irq.reset();
    if (!rx_.error)
      rx_.error = WireError{Errc::RdmapInvalidStag,
                            "RFC 5040 §4.4: the Read's source STag must be valid", why};
  }
  if (failed_wr) {
    tx_cur_.reset();
    local_fatal(*failed_wr, WcStatus::LocProtErr,
                fmt::format("{}: its work request was still being sent", why));
  } else if (failed_response) {
    tx_cur_.reset();
    fatal(WireError{Errc::RdmapInvalidStag,
                    "RFC 5040 §4.4: a Read Request's source must stay registered",
                    why + ", with its Read Response half sent"});
  }
}

void QueuePair::on_rx_error(const boost::system::error_code& ec) {
  if (ec == boost::asio::error::operation_aborted || closed_) return;
  // What the simulated wire still holds arrived before the end of the stream.
  if (wire_) wire_->flush([this](WireSegment s) { rx_segment(s.seq, s.payload); });
  if (closed_) return;
  if (ec == boost::asio::error::eof)
    enter_error({QpClosed::Cause::PeerClosed, "the peer closed the connection"});
  else
    enter_error({QpClosed::Cause::PeerClosed, fmt::format("connection lost: {}", ec.message())});
}

bool QueuePair::take_rqe() {
  std::optional<RecvWr> wr;
  if (init_.srq) {
    wr = init_.srq->take(init_.rnr_wait);
  } else {
    std::unique_lock l(mu_);
    // QpInit::rnr_wait: give the application a bounded chance to post the receive.
    if (rq_.empty() && init_.rnr_wait.count() > 0)
      rq_posted_.wait_for(l, init_.rnr_wait, [&] { return !rq_.empty() || rnr_abort_; });
    if (!rq_.empty()) {
      wr = std::move(rq_.front());
      rq_.pop_front();
    }
  }
  if (!wr) return false;
  rx_send_ = RxSend{};
  rx_send_.active = true;
  rx_send_.msn = rx_.seg.hdr.msn.value();
  rx_send_.rqe = std::move(*wr);
  return true;
}

MutableByteSpan QueuePair::rx_head(const mpa::FpduHead& h) {
  rx_.error.reset();
  rx_.seg = ddp::Segment{};
  rx_.pending_irq.reset();
  rx_.atomic_word = nullptr;
  if (state_.load() != QpState::Rts) return {};  // after a Terminate nothing more is placed
  rx_.bounce.clear();
  rx_.ulpdu_length = h.ulpdu_length;
  rx_.raw_ddp.assign(h.head.begin(),
                     h.head.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(
                                          h.head.size(), h.head.size() >= 1 && (h.head[0] & 0x80)
                                                             ? ddp::kTaggedHeaderSize
                                                             : ddp::kUntaggedHeaderSize)));
  rx_.raw_rdmap.clear();
  {
    std::lock_guard l(mu_);
    ++stats_.fpdus_received;
  }
  if (!rx_first_fpdu_seen_) {
    rx_first_fpdu_seen_ = true;
    if (tx_gated_) {
      tx_gated_ = false;
      ring_doorbell();
    }
  }
  auto seg = ddp::parse_segment(h.head);
  if (!seg) {
    rx_.error = seg.error();
    return {};
  }
  rx_.seg = *seg;
  const std::size_t payload_len = h.ulpdu_length - seg->hdr.size() - seg->info().body_size;
  rx_.payload_len = payload_len;
  if (seg->hdr.op() == Opcode::ReadRequest)
    rx_.raw_rdmap.assign(h.head.begin() + ddp::kUntaggedHeaderSize,
                         h.head.begin() + ddp::kUntaggedHeaderSize + rdmap::kReadRequestBodySize);
  if (auto c = rx_checker_.check(seg->hdr, payload_len); !c) {
    rx_.error = c.error();
    return {};
  }
  auto dest = seg->hdr.tagged ? rx_tagged(*seg, payload_len, seg->payload)
                              : rx_untagged(*seg, payload_len, seg->payload);
  if (!dest) {
    rx_.error = dest.error();
    return {};
  }
  return *dest;
}

Result<MutableByteSpan> QueuePair::rx_tagged(const ddp::Segment& s, std::size_t len,
                                             ByteSpan head_payload) {
  auto& mem = dev_.memory();
  const auto& h = s.hdr;
  std::uint8_t* p = nullptr;
  if (h.op() == Opcode::ReadResponse) {
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
    if (h.to.value() != e.sink_to + e.received || e.received + len > e.size)
      return fail(Errc::DdpTaggedBaseBounds,
                  "RFC 5040 §4.5: Read Response data lies inside the requested sink range",
                  fmt::format("TO 0x{:x} + {} outside [0x{:x}, +{})", h.to.value(), len, e.sink_to,
                              e.size));
    e.received += static_cast<std::uint32_t>(len);
  } else {
    rx_cur_write_len_ += static_cast<std::uint32_t>(len);
  }
  // RFC 5041 §7.2 (and siw): a zero-length tagged segment is not checked against any STag.
  if (len == 0) return MutableByteSpan{};
  auto r = mem.check_remote(h.stag, init_.pd, h.to.value(), len, kRemoteWrite, true);
  if (!r) return std::unexpected(r.error());
  p = *r;
  if (rx_placed_mode_) return MutableByteSpan{};  // placed already, beyond a hole
  if (!head_payload.empty()) std::memcpy(p, head_payload.data(), head_payload.size());
  return MutableByteSpan(p + head_payload.size(), len - head_payload.size());
}

Result<MutableByteSpan> QueuePair::rx_untagged(const ddp::Segment& s, std::size_t len,
                                               ByteSpan head_payload) {
  auto& mem = dev_.memory();
  const auto& h = s.hdr;
  const auto& st = *setup_;
  switch (h.op()) {
    case Opcode::Send:
    case Opcode::SendSe:
    case Opcode::SendInvalidate:
    case Opcode::SendSeInvalidate: {
      // RFC 6581 §4: in peer-to-peer mode a zero-length Send may be the initiator's RTR.
      if (!st.initiator && st.params.peer_to_peer && st.params.rtr == mpa::RtrType::Send &&
          h.msn.value() == 1 && len == 0 && h.last) {
        rx_.seg.hdr.opcode = 0xF;  // marks the RTR: nothing to complete
        return MutableByteSpan{};
      }
      if (h.mo.value() == 0) {
        if (!take_rqe())
          return fail(Errc::DdpUntaggedNoBuffer,
                      "RFC 5041 §7.2: an untagged message needs a posted receive buffer",
                      fmt::format("Send MSN {} arrived with no receive WR posted", h.msn.value()));
        for (const auto& sge : rx_send_.rqe.sg_list) {
          if (sge.length == 0) continue;
          auto p = mem.check_local(sge.lkey, init_.pd, sge.addr, sge.length, kLocalWrite);
          if (!p) {
            // RFC 5041 §7.2 local error (as siw): this receive WR ends with a protection error.
            rx_send_.error = WcStatus::LocProtErr;
            return fail(Errc::DdpLocalCatastrophic,
                        "RFC 5041 §7.2: the receive buffer must be usable",
                        fmt::format("receive WR {}: lkey 0x{:08x} is not writable local memory",
                                    rx_send_.rqe.wr_id, sge.lkey.value()));
          }
          rx_send_.sges.emplace_back(*p, sge.length);
          rx_send_.capacity += sge.length;
        }
      }
      if (!rx_send_.active)
        return fail(Errc::DdpUntaggedInvalidMo, "RFC 5041 §5.3: a continuation needs its message",
                    fmt::format("MO {} without a first segment", h.mo.value()));
      if (rx_send_.revoked)
        return fail(Errc::DdpLocalCatastrophic, "RFC 5041 §7.2: the receive buffer must be usable",
                    fmt::format("receive WR {}: a region of its buffer was deregistered while "
                                "the message arrived",
                                rx_send_.rqe.wr_id));
      const std::uint64_t mo = h.mo.value();
      // RFC 5041 §5.3: MO is 32 bits; a message never extends past 2^32 - 1 (no wrap).
      if (mo + len > 0xFFFFFFFFull) {
        rx_send_.error = WcStatus::LocLenErr;
        return fail(
            Errc::DdpUntaggedTooLong, "RFC 5041 §5.3: an untagged message ends below MO 2^32",
            fmt::format("Send MSN {} at MO {} + {} octets passes 4 GiB", h.msn.value(), mo, len));
      }
      if (mo + len > rx_send_.capacity) {
        rx_send_.error = WcStatus::LocLenErr;
        return fail(Errc::DdpUntaggedTooLong,
                    "RFC 5041 §7.2: the message must fit the posted receive buffer",
                    fmt::format("Send MSN {} needs at least {} octets, receive WR {} has {}",
                                h.msn.value(), mo + len, rx_send_.rqe.wr_id, rx_send_.capacity));
      }
      rx_send_.placed = static_cast<std::uint32_t>(mo + len);
      if (rx_placed_mode_) return MutableByteSpan{};  // placed already, beyond a hole
      // Find the SGE holding [mo, mo + len): one SGE means direct placement.
      std::uint64_t base = 0;
      for (auto sge : rx_send_.sges) {
        if (mo >= base && mo + len <= base + sge.size()) {
          auto* p = sge.data() + (mo - base);
          if (!head_payload.empty()) std::memcpy(p, head_payload.data(), head_payload.size());
          return MutableByteSpan(p + head_payload.size(), len - head_payload.size());
        }
        base += sge.size();
      }
      rx_.bounce.assign(head_payload.begin(), head_payload.end());
      rx_.bounce.resize(len);
      rx_.bounce_mo = static_cast<std::uint32_t>(mo);
      return MutableByteSpan(rx_.bounce).subspan(head_payload.size());
    }
    case Opcode::ImmediateData:
    case Opcode::ImmediateDataSe:
      if (!take_rqe())
        return fail(Errc::DdpUntaggedNoBuffer,
                    "RFC 7306 §4.3: Immediate Data consumes a posted receive buffer",
                    fmt::format("Immediate Data MSN {} with no receive WR posted", h.msn.value()));
      return MutableByteSpan{};
    case Opcode::ReadRequest:
    case Opcode::AtomicRequest: {
      // RFC 5040 §6.3 / RFC 6581: no more outstanding Read (and atomic) requests than our IRD.
      const std::uint16_t ird = st.initiator ? st.params.initiator_ird : st.params.responder_ird;
      std::size_t outstanding = irq_.size();
      if (tx_cur_ &&
          (tx_cur_->kind == TxKind::ReadResponse || tx_cur_->kind == TxKind::AtomicResponse))
        ++outstanding;
      if (outstanding >= ird)
        return fail(Errc::RdmapCatastrophicStream,
                    "RFC 5040 §6.3 / RFC 6581 §6: outstanding Read Requests must not exceed IRD",
                    fmt::format("{} MSN {} with {} already outstanding, IRD {}",
                                rdmap::opcode_name(h.opcode), h.msn.value(), outstanding, ird));
      // RFC 5044 §6.2: nothing reaches RDMAP before the CRC is checked, so the request is only
      // validated here; rx_message_end() queues the Read or executes the atomic.
      if (h.op() == Opcode::ReadRequest) {
        const auto& rr = std::get<rdmap::ReadRequest>(s.body);
        IrqEntry e{false, rr.sink_stag, rr.sink_to.value(), {}, {}, rr.src_stag, false};
        if (rr.size > 0) {
          auto p = mem.check_remote(rr.src_stag, init_.pd, rr.src_to.value(), rr.size, kRemoteRead,
                                    false);
          if (!p) return std::unexpected(p.error());
          e.src = ByteSpan(*p, rr.size);
        }
        rx_.pending_irq = e;
      } else {
        const auto& a = std::get<rdmap::AtomicRequest>(s.body);
        if (a.to.value() % 8 != 0)
          return fail(Errc::RdmapBaseBounds,
                      "RFC 7306 §5: the atomic target must be 8-octet aligned",
                      fmt::format("TO 0x{:x}", a.to.value()));
        auto p = mem.check_remote(a.stag, init_.pd, a.to.value(), 8, kRemoteAtomic, false);
        if (!p) return std::unexpected(p.error());
        rx_.atomic_word = reinterpret_cast<std::uint64_t*>(*p);
      }
      return MutableByteSpan{};
    }
    case Opcode::AtomicResponse: {
      const auto& a = std::get<rdmap::AtomicResponse>(s.body);
      if (orq_.empty() || !orq_.front().atomic || orq_.front().request_id != a.request_id)
        return fail(Errc::RdmapUnexpectedOpcode,
                    "RFC 7306 §4.2.2: an Atomic Response answers the oldest atomic request",
                    fmt::format("response to request {} not outstanding", a.request_id));
      return MutableByteSpan{};  // completed in rx_message_end(), once the CRC is good
    }
    case Opcode::Terminate:
      return MutableByteSpan{};
    default:
      return fail(Errc::RdmapUnexpectedOpcode, "RFC 5040 §4.2: opcode not expected here",
                  std::string(rdmap::opcode_name(h.opcode)));
  }
}

void QueuePair::rx_end(const mpa::FpduTrailer& t) {
  if (t.crc == mpa::CrcStatus::Bad || closed_) return;  // the framing error follows
  if (state_.load() != QpState::Rts) return;            // draining after a Terminate
  if (!rx_.error && rx_send_.active && rx_send_.revoked && !rx_.seg.hdr.tagged &&
      rx_.seg.hdr.qn.value() == rdmap::kQnSend)
    rx_.error =
        WireError{Errc::DdpLocalCatastrophic, "RFC 5041 §7.2: the receive buffer must be usable",
                  fmt::format("receive WR {}: a region of its buffer was deregistered "
                              "while the message arrived",
                              rx_send_.rqe.wr_id)};
  if (rx_.error) {
    fatal(*rx_.error, rx_.raw_ddp, rx_.raw_rdmap, rx_.ulpdu_length);
    return;
  }
  // (0xF marks the peer-to-peer RTR Send: no opcode to describe)
  if (rx_opts_.observer && !rx_placed_mode_ && rx_.seg.hdr.opcode != 0xF)
    rx_event(RxEvent{.kind = RxEvent::Kind::Placed,
                     .offset = t.offset,
                     .end = t.offset + t.wire_length,
                     .text = [&] {
                       // describe() counts the octets it was shown: the head only, here.
                       auto d = ddp::describe(rx_.seg);
                       return d.substr(0, d.rfind(" len ")) +
                              fmt::format(" len {}", rx_.payload_len);
                     }()});
  if (!rx_.bounce.empty()) {
    // Scatter the bounced payload over the receive SGEs.
    std::uint64_t base = 0, mo = rx_.bounce_mo;
    ByteSpan src(rx_.bounce);
    for (auto sge : rx_send_.sges) {
      if (src.empty()) break;
      if (mo < base + sge.size()) {
        const std::size_t at = mo - base;
        const std::size_t n = std::min(src.size(), sge.size() - at);
        std::memcpy(sge.data() + at, src.data(), n);
        src = src.subspan(n);
        mo += n;
      }
      base += sge.size();
    }
  }
  if (!rx_.seg.hdr.last) return;
  if (auto r = rx_message_end(); !r) fatal(r.error(), rx_.raw_ddp, rx_.raw_rdmap, rx_.ulpdu_length);
}

Result<void> QueuePair::rx_message_end() {
  const auto& h = rx_.seg.hdr;
  if (h.opcode == 0xF) return {};  // the peer-to-peer RTR Send
  // Immediate Data reports the length of the Write it follows (RFC 7306 §4.3: Write with
  // Immediate is a Write and then the Immediate Data message); any other message between them
  // means it stands alone.
  if (h.op() != Opcode::Write && h.op() != Opcode::ImmediateData &&
      h.op() != Opcode::ImmediateDataSe)
    rx_last_write_len_ = 0;
  switch (h.op()) {
    case Opcode::Write:
      rx_last_write_len_ = rx_cur_write_len_;
      rx_cur_write_len_ = 0;
      return {};
    case Opcode::ReadResponse: {
      auto e = orq_.front();
      if (e.received != e.size)
        return fail(Errc::DdpTaggedBaseBounds,
                    "RFC 5040 §4.5: the Read Response carries the whole requested size",
                    fmt::format("{} of {} octets", e.received, e.size));
      orq_.pop_front();
      if (e.sq_index != ~std::uint64_t{0}) complete_sq(e.sq_index, WcStatus::Success, e.size);
      if (rx_opts_.observer)  // (no formatting on the data path without one)
        rx_event(RxEvent{.kind = RxEvent::Kind::Completion,
                         .text = fmt::format("RDMA Read of {} octets into STag 0x{:08x} complete",
                                             e.size, e.sink.value())});
      ring_doorbell();
      return {};
    }
    case Opcode::Send:
    case Opcode::SendSe:
    case Opcode::SendInvalidate:
    case Opcode::SendSeInvalidate: {
      Wc wc;
      wc.wr_id = rx_send_.rqe.wr_id;
      wc.opcode = WcOpcode::Recv;
      wc.byte_len = rx_send_.placed;
      wc.qp_num = qp_num_;
      if (rx_.seg.info().invalidate) {
        // RFC 5040 §5.4: invalidate the STag named in the header once the message is placed.
        const STag inv{h.rsvd_ulp};
        if (!dev_.memory().invalidate(inv, init_.pd)) {
          rx_send_.active = false;
          wc.status = WcStatus::RemInvReqErr;
          init_.recv_cq->push(wc);
          return fail(
              Errc::RdmapOpCannotInvalidate,
              "RFC 5040 §7.4: Send with Invalidate names an STag that can be invalidated",
              fmt::format("STag 0x{:08x} is not a valid STag of this stream's PD", inv.value()));
        }
        wc.wc_flags |= kWcWithInv;
        wc.invalidated_rkey = inv;
      }
      rx_send_.active = false;
      if (!init_.recv_cq->push(wc, rx_.seg.info().solicited))
        logger().error("QP {}: receive CQ overflow, completion of WR {} lost", qp_num_, wc.wr_id);
      if (rx_opts_.observer)
        rx_event(RxEvent{.kind = RxEvent::Kind::Completion,
                         .text = fmt::format("{} MSN {} received: {} octets, receive WR {}",
                                             rdmap::opcode_name(h.opcode), h.msn.value(),
                                             wc.byte_len, wc.wr_id)});
      return {};
    }
    case Opcode::ImmediateData:
    case Opcode::ImmediateDataSe: {
      Wc wc;
      wc.wr_id = rx_send_.rqe.wr_id;
      wc.opcode = WcOpcode::RecvRdmaWithImm;
      wc.byte_len = rx_last_write_len_;
      wc.imm_data = static_cast<std::uint32_t>(std::get<std::uint64_t>(rx_.seg.body) >> 32);
      wc.wc_flags = kWcWithImm;
      wc.qp_num = qp_num_;
      rx_send_.active = false;
      rx_last_write_len_ = 0;
      init_.recv_cq->push(wc, rx_.seg.info().solicited);
      return {};
    }
    case Opcode::Terminate:
      rx_terminate_received(std::get<rdmap::Terminate>(rx_.seg.body));
      return {};
    case Opcode::ReadRequest:
      irq_.push_back(*rx_.pending_irq);
      // Released from beyond a hole, the doorbell is reported once for the hole (Released).
      if (!rx_placed_mode_ && rx_opts_.observer)
        rx_event(RxEvent{
            .kind = RxEvent::Kind::Doorbell,
            .read_requests = 1,
            .text = fmt::format("Read Request MSN {} queued, {} octets from STag 0x{:08x}",
                                h.msn.value(), rx_.pending_irq->src.size(),
                                std::get<rdmap::ReadRequest>(rx_.seg.body).src_stag.value())});
      ring_doorbell();
      return {};
    case Opcode::AtomicRequest: {
      const auto& a = std::get<rdmap::AtomicRequest>(rx_.seg.body);
      // The 64-bit target is in host byte order in memory.
      std::uint64_t* word = rx_.atomic_word;
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
      } while (!__atomic_compare_exchange_n(word, &old, next, false, __ATOMIC_SEQ_CST,
                                            __ATOMIC_SEQ_CST));
      irq_.push_back(
          IrqEntry{true, STag{0}, 0, {}, rdmap::AtomicResponse{a.request_id, old}, a.stag, false});
      ring_doorbell();
      return {};
    }
    case Opcode::AtomicResponse: {
      const auto& a = std::get<rdmap::AtomicResponse>(rx_.seg.body);
      auto e = orq_.front();
      orq_.pop_front();
      if (e.result_revoked || !e.result) {
        local_fatal(e.sq_index, WcStatus::LocProtErr,
                    "the atomic's result buffer was deregistered before its response arrived");
        return {};
      }
      std::memcpy(e.result, &a.original_value, 8);
      complete_sq(e.sq_index, WcStatus::Success, 8);
      ring_doorbell();  // a fenced WR or one held by the ORD may go now
      return {};
    }
    default:
      return {};
  }
}

void QueuePair::rx_framing_error(const WireError& e) {
  fatal(e);
}

}  // namespace iwarp::rnic
