// Out-of-order placement: data beyond a TCP hole is placed at once, its completions deferred
// until the hole closes.
//
// A whole FPDU found beyond a hole (mpa::SegmentReceiver) is checked and placed at once:
// a Write at its STag and TO, a Read Response into the sink of the Read it answers, a Send
// segment into the receive WQE its MSN selects, at its MO; a Read Request is checked and
// waits for the read queue's doorbell. What its delivery needs (the headers, the receive WQE)
// goes into the hole ledger, under the hole before it. When the in-order point reaches the
// FPDU, it is delivered exactly as one read in order would be (rx_head/rx_end with
// Delivery::AlreadyPlaced: nothing moves again), so completions keep stream order: the Sends' CQEs,
// the Read WRs' completions and the Read Requests' doorbell all come when the hole closes, as many
// as were held.
//
// Anything else beyond a hole (Immediate Data, atomics, Terminate, Sends with no receive WQE
// posted yet, an SRQ) waits in the segment receiver and goes through the stream in order. An
// invalid FPDU is never placed; its Terminate comes in stream order when its hole closes.
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "common/log.hpp"
#include "rnic/engine_log.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic {

namespace {
// How long hole_report() and segment_stats() wait for the engine (which is busy only during a
// bounded RNR wait); an answer that does not come in time is an empty one.
constexpr std::chrono::milliseconds kInspectBound{5000};
// What one FPDU placed beyond a hole adds to the counts its hole reports (RxEvent::Released,
// HoleInfo): each Write segment and Read Request, and each Send and Read Response message by
// its last FPDU (the one that completes it).
template <class Placed, class Counts>
void count_deferred(const Placed& d, Counts& c) {
  using F = rdmap::MessageFamily;
  switch (d.family) {
    case F::Write:
      ++c.writes;
      break;
    case F::ReadResponse:
      if (d.last) ++c.read_responses;
      break;
    case F::Send:
      if (d.last) ++c.sends;
      break;
    case F::ReadRequest:
      ++c.read_requests;
      break;
    default:
      break;
  }
}
}  // namespace

void QueuePair::rx_event(RxEvent e) {
  if (!rx_.opts.observer) return;
  e.qp_num = qp_num_;
  rx_.opts.observer->on_event(e);
}

mpa::OooVerdict QueuePair::rx_ooo(const mpa::OooFpdu& f, const mpa::Hole& hole) {
  using V = mpa::OooVerdict;
  if (closed_ || state_.load() != QpState::Rts) return V::Wait;
  auto seg = ddp::parse_segment(f.ulpdu);
  auto event = [&](RxEvent::Kind kind, std::string text,
                   std::optional<TermCode> term = std::nullopt) {
    rx_event(RxEvent{.kind = kind,
                     .offset = f.offset,
                     .end = f.offset + f.wire_length,
                     .beyond_hole = true,
                     .text = std::move(text),
                     .hdr = seg ? std::optional(seg->hdr) : std::nullopt,
                     .term = term,
                     .payload = seg ? static_cast<std::uint32_t>(seg->payload.size()) : 0});
  };
  if (!seg) {
    event(RxEvent::Kind::DeferredError, seg.error().to_string(), term_code(seg.error().code));
    std::lock_guard l(mu_);
    ooo_.errors.insert(f.offset);
    return V::Invalid;
  }
  Deferred d;
  d.family = seg->info().family;
  d.offset = f.offset;
  d.wire_length = f.wire_length;
  d.ulpdu_length = f.ulpdu_length;
  d.head.assign(f.ulpdu.begin(), f.ulpdu.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                       f.ulpdu.size(), mpa::kFpduHeadSize)));
  d.last = seg->hdr.last;
  const std::string what = ddp::describe(*seg);
  const OooStep step = ooo_place(*seg, d);
  switch (step.verdict) {
    case V::Invalid: {
      event(RxEvent::Kind::DeferredError,
            fmt::format("{}: {}; its Terminate waits for hole [{}, {})", what,
                        step.error->to_string(), hole.begin, hole.end),
            term_code(step.error->code));
      std::lock_guard l(mu_);
      ooo_.errors.insert(f.offset);
      return V::Invalid;
    }
    case V::Wait:
      event(RxEvent::Kind::Deferred, fmt::format("{}: {}", what, step.wait_reason));
      return V::Wait;
    case V::Placed:
      break;
  }
  logger().debug("QP {}: placed {} beyond hole [{}, {})", qp_num_, what, hole.begin, hole.end);
  event(RxEvent::Kind::Placed, fmt::format("{} beyond hole [{}, {})", what, hole.begin, hole.end));
  {
    std::lock_guard l(mu_);
    ++stats_.ooo_placed;
    ooo_.placed.emplace(d.offset, std::move(d));
  }
  return V::Placed;
}

// Places one FPDU found beyond a hole if its message family allows it now: every check that
// in-order delivery makes before an octet moves is made here too (RFC 5041 §7.2), and what
// cannot be decided yet waits for the stream.
QueuePair::OooStep QueuePair::ooo_place(const ddp::Segment& s, Deferred& d) {
  const auto& h = s.hdr;
  const std::size_t len = s.payload.size();
  auto& mem = dev_.memory();
  using F = rdmap::MessageFamily;
  switch (d.family) {
    case F::ReadResponse: {
      // RFC 5040 §4.5: the response lands in the sink of an outstanding Read; which one is
      // known from its STag and TO (one match, else it waits for the stream).
      const auto matches = std::count_if(orq_.begin(), orq_.end(), [&](const OrqEntry& e) {
        return !e.atomic && e.sink == h.stag && h.to.value() >= e.sink_to.value() &&
               h.to.value() + len <= e.sink_to.value() + e.size;
      });
      if (matches != 1) return OooStep::wait("no single outstanding Read it answers yet");
      [[fallthrough]];
    }
    case F::Write:
      if (len > 0) {
        // RFC 5041 §7.2: the STag, its rights and the range are checked before any octet moves.
        auto p = mem.check_remote(h.stag, init_.pd, h.to.value(), len, kRemoteWrite, true);
        if (!p) return OooStep::invalid(p.error());
        std::memcpy(*p, s.payload.data(), len);
      }
      return {};
    case F::Send:
      return ooo_place_send(s, d);
    case F::ReadRequest: {
      if (h.qn.value() != rdmap::kQnReadReq) return OooStep::wait("not the Read Request queue");
      // RFC 5040 §7.4.1: the source must be readable; the Read Response waits for the
      // doorbell that rings when the hole closes.
      const auto& rr = std::get<rdmap::ReadRequest>(s.body);
      if (rr.size > 0) {
        auto p =
            mem.check_remote(rr.src_stag, init_.pd, rr.src_to.value(), rr.size, kRemoteRead, false);
        if (!p) return OooStep::invalid(p.error());
      }
      return {};
    }
    default:
      return OooStep::wait(
          "waits for the stream (only Writes, Read Requests and Responses and Sends "
          "are placed beyond a hole)");
  }
}

// A Send segment beyond a hole goes into the receive WQE its MSN selects, at its MO. A WQE that
// is not posted yet, or whose buffer is unusable or too short, leaves the segment to the stream,
// where the error is reported in order.
QueuePair::OooStep QueuePair::ooo_place_send(const ddp::Segment& s, Deferred& d) {
  const auto& h = s.hdr;
  const std::uint64_t mo = h.mo.value();
  if (init_.srq) return OooStep::wait("receive WQEs come from a shared receive queue");
  if (h.qn.value() != rdmap::kQnSend) return OooStep::wait("not the Send queue");
  const RqeForMsn rqe = rqe_for_msn(h.msn);
  switch (rqe.kind) {
    case RqeForMsn::Kind::AlreadyDelivered:
      return OooStep::wait("MSN already delivered");
    case RqeForMsn::Kind::MaybePeerRtr:
      return OooStep::wait("may be the peer-to-peer RTR");
    case RqeForMsn::Kind::InProgress: {
      // The message in progress: its WQE is taken already.
      const auto& buffer = rx_.send.buffer;
      if (auto fits = buffer.check_fits(mo, s.payload.size(), h.msn, rx_.send.rqe.wr_id); !fits)
        return OooStep::invalid(fits.error());
      buffer.scatter(mo, s.payload);
      d.wr_id = rx_.send.rqe.wr_id;
      return {};
    }
    case RqeForMsn::Kind::Queued:
      break;
  }
  RecvWr wr;
  {
    std::lock_guard l(mu_);
    if (rqe.queued_index >= rq_.size()) return OooStep::wait("its receive WQE is not posted yet");
    wr = rq_[rqe.queued_index];
  }
  RecvBuffer buffer;
  if (!resolve_recv_buffer(dev_.memory(), init_.pd, wr, buffer))
    return OooStep::wait("its receive WQE's buffer is not writable (reported in order)");
  if (!buffer.check_fits(mo, s.payload.size(), h.msn, wr.wr_id))
    return OooStep::wait("longer than its receive WQE (reported in order)");
  buffer.scatter(mo, s.payload);
  d.wr_id = wr.wr_id;
  return {};
}

// RFC 5041 §5.3: the n-th Send on queue 0 consumes the n-th receive WQE. The message in progress
// (its head read, perhaps its last FPDU cut by the hole) holds a WQE already; the first WQE still
// queued serves the MSN after it, or the next MSN the stream expects. MSNs compare modulo 2^32:
// one more than 2^20 behind is taken as delivered already.
QueuePair::RqeForMsn QueuePair::rqe_for_msn(Msn msn) const {
  using K = RqeForMsn::Kind;
  if (rx_.send.active && msn == rx_.send.msn) return {K::InProgress, 0};
  const Msn expected =
      rx_.send.active ? rx_.send.msn.next() : rx_.checker.expected_msn(rdmap::kQnSend);
  const std::uint32_t ahead = msn.since(expected);
  if (ahead > 1u << 20) return {K::AlreadyDelivered, 0};
  // RFC 6581 §4: before the first FPDU, MSN 1 may be the RTR, which consumes no WQE.
  const bool rtr_first = expects_peer_rtr_send() && expected == Msn{1} && !rx_.first_fpdu_seen;
  if (rtr_first && ahead == 0) return {K::MaybePeerRtr, 0};
  return {K::Queued, ahead - (rtr_first ? 1u : 0u)};
}

void QueuePair::rx_release(std::uint64_t offset, std::uint32_t wire_length) {
  std::optional<Deferred> d;
  {
    std::lock_guard l(mu_);
    if (auto it = ooo_.placed.find(offset); it != ooo_.placed.end()) {
      d = std::move(it->second);
      ooo_.placed.erase(it);
      ++stats_.released;
    }
  }
  if (closed_ || state_.load() != QpState::Rts || !d) return;
  if (!rx_.reader->skip_fpdu(offset, wire_length)) {
    fatal(WireError{Errc::MpaMarkerError,
                    "RFC 5044 §8: FPDUs found beyond a TCP hole start where the stream's FPDUs do",
                    fmt::format("FPDU placed at stream offset {} is not on the stream's FPDU "
                                "boundary (at {})",
                                offset, rx_.reader->position())});
    return;
  }
  count_deferred(*d, ooo_.released);
  // Delivered as if read in order now, with its data already in place.
  rx_head(mpa::FpduHead{offset, d->ulpdu_length, d->head}, Delivery::AlreadyPlaced);
  mpa::FpduTrailer t;
  t.offset = offset;
  t.wire_length = wire_length;
  t.crc = rx_.reader->config().crc ? mpa::CrcStatus::Good : mpa::CrcStatus::NotChecked;
  rx_end(t, Delivery::AlreadyPlaced);
}

void QueuePair::rx_hole_closed(const mpa::Hole& h, bool first) {
  RxEvent e{.kind = RxEvent::Kind::HoleClosed, .offset = h.begin, .end = h.end, .text = {}};
  if (!first) {
    e.text = "what waited on it now waits on the hole before it";
    rx_event(e);
    return;
  }
  rx_event(e);
  RxEvent r = ooo_.released;
  ooo_.released = RxEvent{};
  r.kind = RxEvent::Kind::Released;
  r.offset = h.begin;
  r.end = h.end;
  r.text = fmt::format(
      "hole [{}, {}) closed: {} Send CQE(s) to the CQ, {} Read WR completion(s), {} Read "
      "Request(s) to the read queue with one doorbell, {} Write segment(s) delivered",
      h.begin, h.end, r.sends, r.read_responses, r.read_requests, r.writes);
  {
    std::lock_guard l(mu_);
    ooo_.errors.erase(ooo_.errors.begin(), ooo_.errors.lower_bound(rx_.segments->in_order()));
  }
  if (r.sends || r.read_responses || r.read_requests || r.writes) rx_event(r);
}

void QueuePair::receive_segment(TcpSeq seq, Bytes payload,
                                std::shared_ptr<std::atomic<std::int64_t>> pending) {
  // Taken off `pending` when the last copy of the handler goes: run or dropped.
  std::shared_ptr<void> done;
  if (pending)
    done = std::shared_ptr<void>(nullptr,
                                 [pending, n = static_cast<std::int64_t>(payload.size()) +
                                               kPendingSegmentOverhead](void*) { *pending -= n; });
  const bool tapped = pending != nullptr;
  boost::asio::post(dev_.io(), [self = shared_from_this(), seq, p = std::move(payload),
                                done = std::move(done), tapped] {
    if (self->closed_ || !self->rx_.segments) return;
    if (tapped) {
      // A live tap's copy of octets the socket also delivers (counted there). The kernel drops
      // a segment beyond its receive window; so does the segment path: nothing beyond the
      // window's reach of the in-order point is taken from the tap.
      const auto window = self->rx_.opts.tap_window;
      const TcpSeq end = seq + static_cast<std::uint32_t>(p.size());
      if (window != 0 && end - self->rx_.segments->next_seq() > static_cast<std::int32_t>(window))
        return;
    } else {
      self->stats_.bytes_received += p.size();
    }
    self->rx_segment(seq, p);
  });
}

void QueuePair::receive_segment_on_engine(TcpSeq seq, ByteSpan payload) {
  if (!dev_.on_engine_thread())
    throw std::logic_error("QueuePair::receive_segment_on_engine: not on the engine thread");
  if (closed_ || !rx_.segments) return;
  stats_.bytes_received += payload.size();
  rx_segment(seq, payload);
}

void QueuePair::receive_fin(TcpSeq seq) {
  boost::asio::post(dev_.io(), [self = shared_from_this(), seq] {
    if (self->closed_ || !self->rx_.segments) return;
    self->rx_.fin_seq = seq;
    self->rx_check_fin();
  });
}

void QueuePair::rx_check_fin() {
  // The FIN counts once every octet before it has arrived (RFC 793 §3.5).
  if (!rx_.fin_seq || closed_ || rx_.segments->next_seq() - *rx_.fin_seq < 0) return;
  enter_error({QpClosed::Cause::PeerClosed, "the peer closed the connection"});
}

std::vector<HoleInfo> QueuePair::hole_report() const {
  auto out = std::make_shared<std::vector<HoleInfo>>();
  auto self = std::const_pointer_cast<QueuePair>(shared_from_this());
  const bool ran = dev_.run_and_wait(
      [self, out] {
        if (!self->rx_.segments) return;
        const auto holes = self->rx_.segments->holes();
        std::lock_guard l(self->mu_);
        for (std::size_t i = 0; i < holes.size(); ++i) {
          HoleInfo hi;
          hi.hole = holes[i];
          const std::uint64_t until = i + 1 < holes.size() ? holes[i + 1].begin : ~std::uint64_t{0};
          for (auto it = self->ooo_.placed.lower_bound(holes[i].end);
               it != self->ooo_.placed.end() && it->first < until; ++it) {
            const auto& d = it->second;
            ++hi.placed_fpdus;
            count_deferred(d, hi);
            if (d.family == rdmap::MessageFamily::Send && d.last) hi.send_wr_ids.push_back(d.wr_id);
          }
          for (auto it = self->ooo_.errors.lower_bound(holes[i].end);
               it != self->ooo_.errors.end() && *it < until; ++it)
            ++hi.deferred_errors;
          out->push_back(std::move(hi));
        }
      },
      kInspectBound);
  // A busy engine (a bounded RNR wait) did not answer in time: nothing to report now.
  return ran ? std::move(*out) : std::vector<HoleInfo>{};
}

mpa::SegmentReceiver::Stats QueuePair::segment_stats() const {
  auto out = std::make_shared<mpa::SegmentReceiver::Stats>();
  auto self = std::const_pointer_cast<QueuePair>(shared_from_this());
  const bool ran = dev_.run_and_wait(
      [self, out] {
        if (self->rx_.segments) *out = self->rx_.segments->stats();
      },
      kInspectBound);
  return ran ? *out : mpa::SegmentReceiver::Stats{};
}

QueuePair::HoleTiming QueuePair::hole_timing() const {
  auto out = std::make_shared<HoleTiming>();
  auto self = std::const_pointer_cast<QueuePair>(shared_from_this());
  const bool ran = dev_.run_and_wait(
      [self, out] {
        const auto& c = self->rx_.hole_clock;
        *out = HoleTiming{c.samples(), c.untracked(), c.not_kept()};
      },
      kInspectBound);
  return ran ? std::move(*out) : HoleTiming{};
}

}  // namespace iwarp::rnic
