// Out-of-order placement with completions deferred per TCP hole (seed 004).
//
// A whole FPDU found beyond a hole (mpa::SegmentReceiver) is checked and placed at once:
// a Write at its STag and TO, a Read Response into the sink of the Read it answers, a Send
// segment into the receive WQE its MSN selects, at its MO; a Read Request is checked and
// waits for the read queue's doorbell. What its delivery needs (the headers, the receive WQE)
// goes into the hole ledger, under the hole before it. When the in-order point reaches the
// FPDU, it is delivered exactly as one read in order would be (rx_head/rx_end without moving
// data), so completions keep stream order: the Sends' CQEs, the Read WRs' completions and the
// Read Requests' doorbell all come when the hole closes, as many as were held.
//
// Anything else beyond a hole (Immediate Data, atomics, Terminate, Sends with no receive WQE
// posted yet, an SRQ) waits in the segment receiver and goes through the stream in order. An
// invalid FPDU is never placed; its Terminate comes in stream order when its hole closes.
#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <cstring>
#include <future>

#include "common/log.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic {

namespace {
spdlog::logger& logger() {
  return log::layer("rnic");
}
using rdmap::Opcode;
}  // namespace

void QueuePair::rx_event(RxEvent e) {
  if (!rx_opts_.observer) return;
  e.qp_num = qp_num_;
  rx_opts_.observer->on_event(e);
}

mpa::OooVerdict QueuePair::rx_ooo(const mpa::OooFpdu& f, const mpa::Hole& hole) {
  using V = mpa::OooVerdict;
  if (closed_ || state_.load() != QpState::Rts) return V::Wait;
  auto seg = ddp::parse_segment(f.ulpdu);
  if (!seg) {
    rx_event(RxEvent{.kind = RxEvent::Kind::DeferredError,
                     .offset = f.offset,
                     .end = f.offset + f.wire_length,
                     .beyond_hole = true,
                     .text = seg.error().to_string()});
    std::lock_guard l(mu_);
    ooo_errors_.insert(f.offset);
    return V::Invalid;
  }
  const auto& h = seg->hdr;
  const std::size_t len = seg->payload.size();
  Deferred d;
  d.offset = f.offset;
  d.wire_length = f.wire_length;
  d.ulpdu_length = f.ulpdu_length;
  d.head.assign(f.ulpdu.begin(), f.ulpdu.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                       f.ulpdu.size(), mpa::kFpduHeadSize)));
  d.last = h.last;
  auto& mem = dev_.memory();
  const std::string what = ddp::describe(*seg);
  auto invalid = [&](const WireError& e) {
    rx_event(RxEvent{.kind = RxEvent::Kind::DeferredError,
                     .offset = f.offset,
                     .end = f.offset + f.wire_length,
                     .beyond_hole = true,
                     .text = fmt::format("{}: {}; its Terminate waits for hole [{}, {})", what,
                                         e.to_string(), hole.begin, hole.end)});
    std::lock_guard l(mu_);
    ooo_errors_.insert(f.offset);
    return V::Invalid;
  };
  auto wait = [&](std::string_view why) {
    rx_event(RxEvent{.kind = RxEvent::Kind::Deferred,
                     .offset = f.offset,
                     .end = f.offset + f.wire_length,
                     .beyond_hole = true,
                     .text = fmt::format("{}: {}", what, why)});
    return V::Wait;
  };
  // The payload, scattered over `dst` (consecutive pieces of the target).
  switch (h.op()) {
    case Opcode::Write: {
      d.kind = Deferred::Kind::Write;
      if (len > 0) {
        // RFC 5041 §7.2: the STag, its rights and the range are checked before any octet moves.
        auto p = mem.check_remote(h.stag, init_.pd, h.to.value(), len, kRemoteWrite, true);
        if (!p) return invalid(p.error());
        std::memcpy(*p, seg->payload.data(), len);
      }
      break;
    }
    case Opcode::ReadResponse: {
      d.kind = Deferred::Kind::ReadResponse;
      // RFC 5040 §4.5: the response lands in the sink of an outstanding Read; which one is
      // known from its STag and TO (one match, else it waits for the stream).
      const OrqEntry* match = nullptr;
      int matches = 0;
      for (const auto& e : orq_)
        if (!e.atomic && e.sink == h.stag && h.to.value() >= e.sink_to &&
            h.to.value() + len <= e.sink_to + e.size) {
          match = &e;
          ++matches;
        }
      if (matches != 1) return wait("no single outstanding Read it answers yet");
      (void)match;
      if (len > 0) {
        auto p = mem.check_remote(h.stag, init_.pd, h.to.value(), len, kRemoteWrite, true);
        if (!p) return invalid(p.error());
        std::memcpy(*p, seg->payload.data(), len);
      }
      break;
    }
    case Opcode::Send:
    case Opcode::SendSe:
    case Opcode::SendInvalidate:
    case Opcode::SendSeInvalidate: {
      d.kind = Deferred::Kind::Send;
      if (init_.srq) return wait("receive WQEs come from a shared receive queue");
      if (h.qn.value() != rdmap::kQnSend) return wait("not the Send queue");
      const auto& st = *setup_;
      // RFC 5041 §5.3: the MSN selects the receive WQE. The message in progress (its head
      // read, perhaps its last FPDU cut by the hole) holds a WQE already; the first WQE still
      // queued serves the MSN after it, or the next MSN the stream expects.
      const std::uint32_t expected =
          rx_send_.active ? rx_send_.msn + 1 : rx_checker_.expected_msn(rdmap::kQnSend).value();
      const bool in_progress = rx_send_.active && h.msn.value() == rx_send_.msn;
      const std::uint32_t ahead = h.msn.value() - expected;
      if (!in_progress && ahead > 1u << 20) return wait("MSN already delivered");
      const bool rtr_first = !st.initiator && st.params.peer_to_peer &&
                             st.params.rtr == mpa::RtrType::Send && expected == 1 &&
                             !rx_first_fpdu_seen_;
      if (!in_progress && rtr_first && ahead == 0) return wait("may be the peer-to-peer RTR");
      std::vector<Sge> sges;
      std::uint64_t wr_id = 0;
      if (in_progress) {
        // The message in progress: its WQE is taken already.
        std::uint64_t cap = 0;
        for (auto s : rx_send_.sges) cap += s.size();
        if (h.mo.value() + len > cap)
          return invalid(WireError{Errc::DdpUntaggedTooLong,
                                   "RFC 5041 §7.2: the message must fit the posted receive buffer",
                                   fmt::format("MO {} + {} octets, receive WR {} has {}",
                                               h.mo.value(), len, rx_send_.rqe.wr_id, cap)});
        std::uint64_t base = 0, mo = h.mo.value();
        ByteSpan src = seg->payload;
        for (auto s : rx_send_.sges) {
          if (src.empty()) break;
          if (mo < base + s.size()) {
            const std::size_t n = std::min<std::size_t>(src.size(), base + s.size() - mo);
            std::memcpy(s.data() + (mo - base), src.data(), n);
            src = src.subspan(n);
            mo += n;
          }
          base += s.size();
        }
        d.wr_id = rx_send_.rqe.wr_id;
        break;
      }
      const std::size_t index = ahead - (rtr_first ? 1 : 0);
      {
        std::lock_guard l(mu_);
        if (index >= rq_.size()) return wait("its receive WQE is not posted yet");
        sges = rq_[index].sg_list;
        wr_id = rq_[index].wr_id;
      }
      // Resolve the WQE's buffers; a bad one is reported in order (as a local error).
      std::vector<MutableByteSpan> bufs;
      std::uint64_t cap = 0;
      for (const auto& s : sges) {
        if (s.length == 0) continue;
        auto p = mem.check_local(s.lkey, init_.pd, s.addr, s.length, kLocalWrite);
        if (!p) return wait("its receive WQE's buffer is not writable (reported in order)");
        bufs.emplace_back(*p, s.length);
        cap += s.length;
      }
      if (h.mo.value() + len > cap) return wait("longer than its receive WQE (reported in order)");
      std::uint64_t base = 0, mo = h.mo.value();
      ByteSpan src = seg->payload;
      for (auto b : bufs) {
        if (src.empty()) break;
        if (mo < base + b.size()) {
          const std::size_t n = std::min<std::size_t>(src.size(), base + b.size() - mo);
          std::memcpy(b.data() + (mo - base), src.data(), n);
          src = src.subspan(n);
          mo += n;
        }
        base += b.size();
      }
      d.wr_id = wr_id;
      break;
    }
    case Opcode::ReadRequest: {
      d.kind = Deferred::Kind::ReadRequest;
      if (h.qn.value() != rdmap::kQnReadReq) return wait("not the Read Request queue");
      // RFC 5040 §7.4.1: the source must be readable; the Read Response waits for the
      // doorbell that rings when the hole closes.
      const auto& rr = std::get<rdmap::ReadRequest>(seg->body);
      if (rr.size > 0) {
        auto p =
            mem.check_remote(rr.src_stag, init_.pd, rr.src_to.value(), rr.size, kRemoteRead, false);
        if (!p) return invalid(p.error());
      }
      break;
    }
    default:
      return wait(
          "waits for the stream (only Writes, Read Requests and Responses and Sends "
          "are placed beyond a hole)");
  }
  logger().debug("QP {}: placed {} beyond hole [{}, {})", qp_num_, what, hole.begin, hole.end);
  rx_event(RxEvent{.kind = RxEvent::Kind::Placed,
                   .offset = f.offset,
                   .end = f.offset + f.wire_length,
                   .beyond_hole = true,
                   .text = fmt::format("{} beyond hole [{}, {})", what, hole.begin, hole.end)});
  {
    std::lock_guard l(mu_);
    ++stats_.ooo_placed;
    ledger_.emplace(d.offset, std::move(d));
  }
  return V::Placed;
}

void QueuePair::rx_release(std::uint64_t offset, std::uint32_t wire_length) {
  std::optional<Deferred> d;
  {
    std::lock_guard l(mu_);
    if (auto it = ledger_.find(offset); it != ledger_.end()) {
      d = std::move(it->second);
      ledger_.erase(it);
      ++stats_.released;
    }
  }
  if (closed_ || state_.load() != QpState::Rts || !d) return;
  if (!rx_reader_->skip_fpdu(offset, wire_length)) {
    fatal(WireError{Errc::MpaMarkerError,
                    "RFC 5044 §8: FPDUs found beyond a TCP hole start where the stream's FPDUs do",
                    fmt::format("FPDU placed at stream offset {} is not on the stream's FPDU "
                                "boundary (at {})",
                                offset, rx_reader_->position())});
    return;
  }
  switch (d->kind) {
    case Deferred::Kind::Write:
      ++rx_released_.writes;
      break;
    case Deferred::Kind::ReadResponse:
      if (d->last) ++rx_released_.read_responses;
      break;
    case Deferred::Kind::Send:
      if (d->last) ++rx_released_.sends;
      break;
    case Deferred::Kind::ReadRequest:
      ++rx_released_.read_requests;
      break;
  }
  // Delivered as if read in order now, with its data already in place.
  rx_placed_mode_ = true;
  rx_head(mpa::FpduHead{offset, d->ulpdu_length, d->head});
  mpa::FpduTrailer t;
  t.offset = offset;
  t.wire_length = wire_length;
  t.crc = rx_reader_->config().crc ? mpa::CrcStatus::Good : mpa::CrcStatus::NotChecked;
  rx_end(t);
  rx_placed_mode_ = false;
}

void QueuePair::rx_hole_closed(const mpa::Hole& h, bool first) {
  RxEvent e{.kind = RxEvent::Kind::HoleClosed, .offset = h.begin, .end = h.end, .text = {}};
  if (!first) {
    e.text = "what waited on it now waits on the hole before it";
    rx_event(e);
    return;
  }
  rx_event(e);
  RxEvent r = rx_released_;
  rx_released_ = RxEvent{};
  r.kind = RxEvent::Kind::Released;
  r.offset = h.begin;
  r.end = h.end;
  r.text = fmt::format(
      "hole [{}, {}) closed: {} Send CQE(s) to the CQ, {} Read WR completion(s), {} Read "
      "Request(s) to the read queue with one doorbell, {} Write segment(s) delivered",
      h.begin, h.end, r.sends, r.read_responses, r.read_requests, r.writes);
  {
    std::lock_guard l(mu_);
    ooo_errors_.erase(ooo_errors_.begin(), ooo_errors_.lower_bound(seg_rx_->in_order()));
  }
  if (r.sends || r.read_responses || r.read_requests || r.writes) rx_event(r);
}

void QueuePair::receive_segment(TcpSeq seq, Bytes payload) {
  boost::asio::post(dev_.io(), [self = shared_from_this(), seq, p = std::move(payload)] {
    if (self->closed_ || !self->seg_rx_) return;
    {
      std::lock_guard l(self->mu_);
      self->stats_.bytes_received += p.size();
    }
    self->rx_segment(seq, p);
  });
}

void QueuePair::receive_fin(TcpSeq seq) {
  boost::asio::post(dev_.io(), [self = shared_from_this(), seq] {
    if (self->closed_ || !self->seg_rx_) return;
    self->fin_seq_ = seq;
    self->rx_check_fin();
  });
}

void QueuePair::rx_check_fin() {
  // The FIN counts once every octet before it has arrived (RFC 793 §3.5).
  if (!fin_seq_ || closed_ || seg_rx_->next_seq() - *fin_seq_ < 0) return;
  enter_error({QpClosed::Cause::PeerClosed, "the peer closed the connection"});
}

std::vector<HoleInfo> QueuePair::hole_report() const {
  std::promise<std::vector<HoleInfo>> done;
  auto fut = done.get_future();
  auto self = std::const_pointer_cast<QueuePair>(shared_from_this());
  auto work = [self, &done] {
    std::vector<HoleInfo> out;
    if (!self->seg_rx_) return done.set_value(out);
    const auto holes = self->seg_rx_->holes();
    std::lock_guard l(self->mu_);
    for (std::size_t i = 0; i < holes.size(); ++i) {
      HoleInfo hi;
      hi.hole = holes[i];
      const std::uint64_t until = i + 1 < holes.size() ? holes[i + 1].begin : ~std::uint64_t{0};
      for (auto it = self->ledger_.lower_bound(holes[i].end);
           it != self->ledger_.end() && it->first < until; ++it) {
        const auto& d = it->second;
        ++hi.placed_fpdus;
        switch (d.kind) {
          case Deferred::Kind::Write:
            ++hi.writes;
            break;
          case Deferred::Kind::ReadResponse:
            if (d.last) ++hi.read_responses;
            break;
          case Deferred::Kind::Send:
            if (d.last) {
              ++hi.sends;
              hi.send_wr_ids.push_back(d.wr_id);
            }
            break;
          case Deferred::Kind::ReadRequest:
            ++hi.read_requests;
            break;
        }
      }
      for (auto it = self->ooo_errors_.lower_bound(holes[i].end);
           it != self->ooo_errors_.end() && *it < until; ++it)
        ++hi.deferred_errors;
      out.push_back(std::move(hi));
    }
    done.set_value(std::move(out));
  };
  if (dev_.on_engine_thread())
    work();
  else
    boost::asio::post(dev_.io(), work);
  return fut.get();
}

mpa::SegmentReceiver::Stats QueuePair::segment_stats() const {
  std::promise<mpa::SegmentReceiver::Stats> done;
  auto fut = done.get_future();
  auto work = [this, &done] {
    done.set_value(seg_rx_ ? seg_rx_->stats() : mpa::SegmentReceiver::Stats{});
  };
  if (dev_.on_engine_thread())
    work();
  else
    boost::asio::post(dev_.io(), work);
  return fut.get();
}

}  // namespace iwarp::rnic
