// Transmit engine: work requests, Read Responses, atomic responses and Terminates become DDP
// segments (RFC 5041 §5) framed as FPDUs (RFC 5044 §4). The engine runs on a doorbell; every
// FPDU it can build goes into one gather write (headers and trailers from an arena, payload
// straight from the registered memory), so many small WRs cost one system call.
#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "common/log.hpp"
#include "mpa/crc32c.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic {

namespace {
spdlog::logger& logger() {
  return log::layer("rnic");
}
constexpr std::size_t kBatchBytes = 1u << 20;  // payload per gather write
constexpr std::size_t kMaxIov = 1000;          // below IOV_MAX (1024)
using rdmap::Opcode;
}  // namespace

std::size_t QueuePair::mulpdu() const {
  std::size_t m = mpa::mulpdu(setup_->emss, tx_framing_->config().markers);
  return std::min<std::size_t>(m, mpa::kMaxUlpduLength);
}

void QueuePair::complete_sq(std::uint64_t index, WcStatus status, std::uint32_t byte_len,
                            std::uint32_t vendor_err) {
  {
    std::lock_guard l(mu_);
    auto& e = sq_[index % sq_.size()];
    if (e.done) return;
    e.done = true;
    e.wc.wr_id = e.wr.wr_id;
    e.wc.status = status;
    e.wc.byte_len = byte_len;
    e.wc.vendor_err = vendor_err;
    e.wc.qp_num = qp_num_;
    switch (e.wr.opcode) {
      case WrOpcode::RdmaWrite:
      case WrOpcode::RdmaWriteWithImm:
        e.wc.opcode = WcOpcode::RdmaWrite;
        break;
      case WrOpcode::RdmaRead:
        e.wc.opcode = WcOpcode::RdmaRead;
        break;
      case WrOpcode::AtomicCmpAndSwp:
        e.wc.opcode = WcOpcode::CompSwap;
        break;
      case WrOpcode::AtomicFetchAndAdd:
        e.wc.opcode = WcOpcode::FetchAdd;
        break;
      case WrOpcode::LocalInv:
        e.wc.opcode = WcOpcode::LocalInv;
        break;
      default:
        e.wc.opcode = WcOpcode::Send;
        break;
    }
  }
  retire_sq();
}

// Send-queue completions leave in posting order (a later Send that went out before an earlier
// Read's response arrived waits for it), as the verbs specification requires.
void QueuePair::retire_sq() {
  std::vector<Wc> out;
  {
    std::lock_guard l(mu_);
    while (sq_head_ < sq_next_) {
      auto& e = sq_[sq_head_ % sq_.size()];
      if (!e.done) break;
      if (e.signaled || e.wc.status != WcStatus::Success) out.push_back(e.wc);
      ++sq_head_;
    }
  }
  for (const auto& wc : out)
    if (!init_.send_cq->push(wc))
      logger().error("QP {}: send CQ overflow, completion of WR {} lost", qp_num_, wc.wr_id);
}

bool QueuePair::start_sq_wqe(std::uint64_t index, TxMsg& m) {
  const SendWr& wr = sq_[index % sq_.size()].wr;
  auto& mem = dev_.memory();
  m.kind = TxKind::Sq;
  m.sq_index = index;
  // Resolve the local SGEs now, so a region deregistered after posting is caught.
  std::uint64_t total = 0;
  if (!wr.inline_data.empty()) {
    m.data.push_back(ByteSpan(wr.inline_data));
    total = wr.inline_data.size();
  } else if (wr.opcode != WrOpcode::RdmaRead && wr.opcode != WrOpcode::AtomicCmpAndSwp &&
             wr.opcode != WrOpcode::AtomicFetchAndAdd) {
    for (const auto& s : wr.sg_list) {
      if (s.length == 0) continue;  // zero-length SGEs are not checked (as siw)
      auto p = mem.check_local(s.lkey, init_.pd, s.addr, s.length, 0);
      if (!p) {
        local_fatal(index, WcStatus::LocProtErr,
                    fmt::format("WR {} ({}): local SGE lkey 0x{:08x} [0x{:x}, +{}) is not "
                                "usable: {}",
                                wr.wr_id, to_string(wr.opcode), s.lkey.value(), s.addr, s.length,
                                p.error() == LocalFault::Bounds       ? "outside the region"
                                : p.error() == LocalFault::PdMismatch ? "region in another PD"
                                                                      : "no such valid STag"));
        return false;
      }
      m.data.push_back(ByteSpan(*p, s.length));
      total += s.length;
    }
  }
  if (total > 0xFFFFFFFFu) {
    local_fatal(index, WcStatus::LocLenErr, "message larger than 4 GiB");
    return false;
  }
  m.total = total;
  auto untagged = [&](Opcode op, std::uint32_t qn, std::uint32_t inval = 0) {
    m.hdr = ddp::untagged_header(op, QueueNumber{qn}, Msn{++tx_msn_[qn]}, MessageOffset{0}, true,
                                 inval);
  };
  const bool se = wr.flags & kSendSolicited;
  switch (wr.opcode) {
    case WrOpcode::Send:
      untagged(se ? Opcode::SendSe : Opcode::Send, rdmap::kQnSend);
      break;
    case WrOpcode::SendWithInv:
      untagged(se ? Opcode::SendSeInvalidate : Opcode::SendInvalidate, rdmap::kQnSend,
               wr.invalidate_rkey.value());
      break;
    case WrOpcode::SendWithImm: {
      untagged(se ? Opcode::ImmediateDataSe : Opcode::ImmediateData, rdmap::kQnSend);
      ByteWriter(m.body).be64(std::uint64_t{wr.imm_data} << 32);
      break;
    }
    case WrOpcode::RdmaWrite:
    case WrOpcode::RdmaWriteWithImm:
      m.hdr = ddp::tagged_header(Opcode::Write, wr.rkey, TaggedOffset{wr.remote_addr});
      if (wr.opcode == WrOpcode::RdmaWriteWithImm) {
        // RFC 7306 §4.3: the Immediate Data message follows the Write on the same stream.
        m.then_imm = ddp::untagged_header(se ? Opcode::ImmediateDataSe : Opcode::ImmediateData,
                                          QueueNumber{rdmap::kQnSend}, Msn{0}, MessageOffset{0});
        m.imm = std::uint64_t{wr.imm_data} << 32;
      }
      break;
    case WrOpcode::RdmaRead: {
      // iWARP: the sink of a Read is written by the peer's Read Response, a tagged message, so
      // its region needs REMOTE_WRITE as well as LOCAL_WRITE.
      STag sink{0};
      std::uint64_t sink_to = 0;
      if (!wr.sg_list.empty() && wr.sg_list[0].length > 0) {
        const auto& s = wr.sg_list[0];
        auto p = mem.check_local(s.lkey, init_.pd, s.addr, s.length, kLocalWrite | kRemoteWrite);
        if (!p) {
          local_fatal(index, WcStatus::LocProtErr,
                      fmt::format("WR {} (RDMA_READ): sink lkey 0x{:08x} [0x{:x}, +{}) is not "
                                  "usable{}",
                                  wr.wr_id, s.lkey.value(), s.addr, s.length,
                                  p.error() == LocalFault::AccessRights
                                      ? ": an iWARP Read sink needs LOCAL_WRITE and REMOTE_WRITE"
                                  : p.error() == LocalFault::Bounds     ? ": outside the region"
                                  : p.error() == LocalFault::PdMismatch ? ": region in another PD"
                                                                        : ": no such valid STag"));
          return false;
        }
        sink = s.lkey;
        sink_to = s.addr;
      } else {
        sink = STag{1};  // zero-length Read: the STag is not looked at (like siw's RTR)
      }
      const std::uint32_t size = wr.sg_list.empty() ? 0 : wr.sg_list[0].length;
      untagged(Opcode::ReadRequest, rdmap::kQnReadReq);
      rdmap::ReadRequest rr{sink, TaggedOffset{sink_to}, size, wr.rkey,
                            TaggedOffset{wr.remote_addr}};
      rr.encode(m.body);
      m.total = 0;
      orq_.push_back(OrqEntry{index, false, sink, sink_to, size, 0, 0, nullptr});
      break;
    }
    case WrOpcode::AtomicCmpAndSwp:
    case WrOpcode::AtomicFetchAndAdd: {
      const auto& s = wr.sg_list[0];
      auto p = mem.check_local(s.lkey, init_.pd, s.addr, 8, kLocalWrite);
      if (!p) {
        local_fatal(index, WcStatus::LocProtErr,
                    fmt::format("WR {}: atomic result SGE lkey 0x{:08x} is not writable", wr.wr_id,
                                s.lkey.value()));
        return false;
      }
      untagged(Opcode::AtomicRequest, rdmap::kQnReadReq);
      rdmap::AtomicRequest a;
      a.request_id = ++atomic_request_id_;
      a.stag = wr.rkey;
      a.to = TaggedOffset{wr.remote_addr};
      if (wr.opcode == WrOpcode::AtomicFetchAndAdd) {
        a.op = static_cast<std::uint8_t>(rdmap::AtomicOp::FetchAdd);
        a.add_swap_data = wr.compare_add;
        a.add_swap_mask = 0;  // plain 64-bit add: no field boundaries
      } else {
        a.op = static_cast<std::uint8_t>(rdmap::AtomicOp::CompareSwap);
        a.add_swap_data = wr.swap;
        a.add_swap_mask = ~std::uint64_t{0};
        a.compare_data = wr.compare_add;
        a.compare_mask = ~std::uint64_t{0};
      }
      a.encode(m.body);
      m.total = 0;
      m.data.clear();
      orq_.push_back(OrqEntry{index, true, STag{0}, 0, 8, 0, a.request_id, *p});
      break;
    }
    case WrOpcode::LocalInv: {
      // Copied first: once complete_sq() retires the slot, post_send() may reuse it.
      const STag inv = wr.invalidate_rkey;
      if (!mem.invalidate(inv, init_.pd)) {
        local_fatal(
            index, WcStatus::LocProtErr,
            fmt::format("LOCAL_INV of STag 0x{:08x}: not a valid STag of this PD", inv.value()));
        return false;
      }
      complete_sq(index, WcStatus::Success);
      return true;  // nothing to transmit
    }
  }
  return true;
}

bool QueuePair::next_message(TxMsg& m) {
  // A Terminate goes out whatever the gate; the RTR waits for it like any FPDU (the
  // first-FPDU delay holds it back too).
  if (!tx_priority_.empty() && (tx_priority_.front().kind == TxKind::Terminate || !tx_gated_)) {
    m = std::move(tx_priority_.front());
    tx_priority_.pop_front();
    return true;
  }
  if (state_.load() != QpState::Rts || tx_gated_) return false;
  // RFC 5040 §6.3: Read Responses (and atomic responses) go out in the order of the requests.
  if (!irq_.empty()) {
    IrqEntry e = irq_.front();
    irq_.pop_front();
    if (e.revoked) {
      // Its source region was deregistered before the response could go (RFC 5040 §7.4:
      // the Read's source STag is no longer valid).
      fatal(WireError{Errc::RdmapInvalidStag,
                      "RFC 5040 §4.4: a Read Request's source must stay registered",
                      fmt::format("the source of a queued Read Response (STag 0x{:08x}) was "
                                  "deregistered before it was sent",
                                  e.src_stag.value())});
      return false;
    }
    if (e.atomic) {
      m.kind = TxKind::AtomicResponse;
      m.hdr = ddp::untagged_header(Opcode::AtomicResponse, QueueNumber{rdmap::kQnAtomicResp},
                                   Msn{++tx_msn_[rdmap::kQnAtomicResp]}, MessageOffset{0});
      e.atomic_resp.encode(m.body);
    } else {
      m.kind = TxKind::ReadResponse;
      m.hdr = ddp::tagged_header(Opcode::ReadResponse, e.sink, TaggedOffset{e.sink_to});
      if (!e.src.empty()) m.data.push_back(e.src);
      m.total = e.src.size();
    }
    return true;
  }
  for (;;) {
    std::uint64_t index;
    {
      std::lock_guard l(mu_);
      if (sq_next_ == sq_tail_) return false;
      index = sq_next_;
    }
    // The slot belongs to us until the WR completes; what is needed after start_sq_wqe()
    // (which may complete it, and so free the slot) is copied here.
    const WrOpcode opcode = sq_[index % sq_.size()].wr.opcode;
    const bool fenced = sq_[index % sq_.size()].wr.flags & kSendFence;
    const bool is_read = opcode == WrOpcode::RdmaRead || opcode == WrOpcode::AtomicCmpAndSwp ||
                         opcode == WrOpcode::AtomicFetchAndAdd;
    // RFC 5040 §5.5 fence: wait until every earlier Read and atomic has completed.
    if (fenced && !orq_.empty()) return false;
    // RFC 6581 §6 / RFC 5040 §6.3: no more outstanding Reads than the negotiated ORD.
    if (is_read && !setup_->ignore_ord) {
      const std::uint16_t ord = negotiated_ord();
      if (ord == 0) {
        // The responder granted IRD 0: no Read can ever go. Fail it rather than wait forever.
        {
          std::lock_guard l(mu_);
          ++sq_next_;
        }
        local_fatal(index, WcStatus::LocQpOpErr,
                    fmt::format("WR {} ({}): the connection's ORD is 0 (the responder's IRD is 0), "
                                "so no RDMA Read or atomic can be sent (RFC 6581 §6)",
                                sq_[index % sq_.size()].wr.wr_id, to_string(opcode)));
        return false;
      }
      if (orq_.size() >= ord) return false;
    }
    {
      std::lock_guard l(mu_);
      ++sq_next_;
    }
    m = TxMsg{};
    if (!start_sq_wqe(index, m)) return false;
    if (opcode == WrOpcode::LocalInv) continue;
    return true;
  }
}

void QueuePair::append_fpdu(TxMsg& m) {
  const std::size_t overhead = m.hdr.size() + m.body.size();
  const std::size_t room = mulpdu() - overhead;
  const std::size_t n = std::min(room, m.total - m.off);
  ddp::DdpHeader h = m.hdr;
  h.last = m.off + n == m.total ? m.hdr.last : false;
  if (h.tagged)
    h.to = TaggedOffset{m.hdr.to.value() + m.off};
  else
    h.mo = MessageOffset{static_cast<std::uint32_t>(m.off)};

  if (arena_used_ == arena_.size()) arena_.emplace_back();
  Bytes& hb = arena_[arena_used_++];
  hb.clear();
  hb.resize(mpa::kUlpduLengthSize);
  h.encode(hb);
  hb.insert(hb.end(), m.body.begin(), m.body.end());
  const std::size_t ulpdu_len = overhead + n;

  // The payload pieces of this segment, straight from registered memory.
  std::size_t first_iov = iov_.size();
  std::size_t skip = m.off, need = n;
  std::vector<ByteSpan> pieces;
  for (auto d : m.data) {
    if (need == 0) break;
    if (skip >= d.size()) {
      skip -= d.size();
      continue;
    }
    const std::size_t take = std::min(need, d.size() - skip);
    pieces.push_back(d.subspan(skip, take));
    skip = 0;
    need -= take;
  }

  std::size_t wire = 0;
  if (!tx_framing_->config().markers) {
    store_be16(hb.data(), static_cast<std::uint16_t>(ulpdu_len));
    const std::size_t pad = mpa::pad_length(ulpdu_len);
    if (arena_used_ == arena_.size()) arena_.emplace_back();
    Bytes& tr = arena_[arena_used_++];
    tr.assign(pad + mpa::kCrcSize, 0);
    if (tx_framing_->config().crc) {
      // RFC 5044 §6.2: CRC over ULPDU_Length, ULPDU and PAD, sent least significant octet first.
      mpa::Crc32c crc;
      crc.update(hb);
      for (auto p : pieces) crc.update(p);
      crc.update(ByteSpan(tr.data(), pad));
      store_le32(tr.data() + pad, crc.value());
    }
    push_iov(hb, false);
    for (auto p : pieces) push_iov(p, m.kind == TxKind::Sq || m.kind == TxKind::ReadResponse);
    push_iov(tr, false);
    wire = hb.size() + n + tr.size();
  } else {
    // With markers the FPDU is assembled by the MPA encoder, which places them.
    std::vector<ByteSpan> ulpdu{ByteSpan(hb).subspan(mpa::kUlpduLengthSize)};
    ulpdu.insert(ulpdu.end(), pieces.begin(), pieces.end());
    if (arena_used_ == arena_.size()) arena_.emplace_back();
    Bytes& out = arena_[arena_used_++];
    out.clear();
    auto r = tx_framing_->encode(ulpdu, out);
    if (!r) {
      logger().error("QP {}: {}", qp_num_, r.error().to_string());
      iov_.resize(first_iov);
      iov_user_.resize(first_iov);
      m.off = m.total;
      return;
    }
    push_iov(out, false);
    wire = out.size();
  }
  m.off += n;
  m.started = true;
  batch_bytes_ += wire;
  if (wire && tap_) fpdu_ends_.push_back(batch_bytes_);  // only a capture needs them
  std::lock_guard l(mu_);
  ++stats_.fpdus_sent;
  stats_.bytes_sent += wire;
}

void QueuePair::push_iov(ByteSpan b, bool user) {
  iov_.emplace_back(b.data(), b.size());
  iov_user_.push_back(user);
}

void QueuePair::tx_kick() {
  // Not re-entrant: an error found while the batch is built (a bad lkey, say) queues its
  // Terminate through fatal(), which calls here again; the loop below picks it up.
  if (writing_ || tx_building_ || closed_ || !transport_) return;
  tx_building_ = true;
  arena_used_ = 0;
  iov_.clear();
  iov_user_.clear();
  iov_pos_ = 0;
  tx_detached_.clear();
  fpdu_ends_.clear();
  batch_bytes_ = 0;
  tx_batch_wrs_.clear();
  bool terminate_sent = false;
  while (batch_bytes_ < kBatchBytes && iov_.size() + 8 < kMaxIov && !terminate_sent) {
    if (!tx_cur_) {
      TxMsg m;
      if (!next_message(m)) {
        // next_message() may have failed the QP: its Terminate is queued now and goes in
        // this batch, behind what was built before the bad WR.
        if (!tx_priority_.empty() && tx_priority_.front().kind == TxKind::Terminate) continue;
        break;
      }
      tx_cur_ = std::move(m);
    }
    TxMsg& m = *tx_cur_;
    if (!m.started || m.off < m.total) append_fpdu(m);
    if (m.off < m.total) continue;
    if (m.then_imm) {
      // Write with Immediate: the Write is out; the Immediate Data message follows.
      TxMsg imm;
      imm.kind = m.kind;
      imm.sq_index = m.sq_index;
      imm.hdr = *m.then_imm;
      imm.hdr.msn = Msn{++tx_msn_[rdmap::kQnSend]};
      ByteWriter(imm.body).be64(m.imm);
      tx_cur_ = std::move(imm);
      continue;
    }
    if (m.kind == TxKind::Sq) {
      const auto op = sq_[m.sq_index % sq_.size()].wr.opcode;
      if (op != WrOpcode::RdmaRead && op != WrOpcode::AtomicCmpAndSwp &&
          op != WrOpcode::AtomicFetchAndAdd)
        tx_batch_wrs_.push_back(m.sq_index);
    }
    terminate_sent = m.kind == TxKind::Terminate;  // nothing follows a Terminate (RFC 5040 §5.6)
    tx_cur_.reset();
  }
  tx_building_ = false;
  if (terminate_sent) tx_priority_.clear();
  if (iov_.empty()) {
    if (closing_after_tx_) enter_error(closed_reason_);
    return;
  }
  writing_ = true;
  {
    std::lock_guard l(mu_);
    ++stats_.tx_batches;
  }
  if (tap_) {
    Bytes all;
    all.reserve(batch_bytes_);
    for (const auto& b : iov_) {
      auto* p = static_cast<const std::uint8_t*>(b.data());
      all.insert(all.end(), p, p + b.size());
    }
    tap_->on_fpdus(true, all, fpdu_ends_);
  }
  tx_write();
}

// Writes what the socket takes now; waits for room otherwise. Registered memory is read only
// here, synchronously on the engine thread: between two calls no I/O request holds a span of
// it (see Transport), so deregistration can copy the unsent rest away (tx_detach).
void QueuePair::tx_write() {
  while (iov_pos_ < iov_.size()) {
    boost::system::error_code ec;
    std::size_t n = transport_->write_some(
        std::span(iov_).subspan(iov_pos_, std::min<std::size_t>(iov_.size() - iov_pos_, kMaxIov)),
        ec);
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) {
      transport_->async_wait_writable(
          [self = shared_from_this()](const boost::system::error_code& e) {
            if (e) {
              self->writing_ = false;
              if (e != boost::asio::error::operation_aborted && !self->closed_)
                self->enter_error({QpClosed::Cause::PeerClosed,
                                   fmt::format("connection lost while sending: {}", e.message())});
              return;
            }
            if (self->closed_) return;
            self->tx_write();
          });
      return;
    }
    if (ec) {
      writing_ = false;
      // The peer may have closed after a Terminate that is already in our receive buffer:
      // read what is there first, so the QP reports the Terminate rather than the broken pipe.
      boost::asio::post(dev_.io(), [self = shared_from_this(), ec] {
        if (self->closed_) return;
        self->rx_drain();
        if (!self->closed_)
          self->enter_error({QpClosed::Cause::PeerClosed,
                             fmt::format("connection lost while sending: {}", ec.message())});
      });
      return;
    }
    while (n > 0 && iov_pos_ < iov_.size()) {
      const std::size_t b = iov_[iov_pos_].size();
      if (n >= b) {
        n -= b;
        ++iov_pos_;
      } else {
        iov_[iov_pos_] += n;
        n = 0;
      }
    }
  }
  writing_ = false;
  // RFC 5040 §5 (as siw): a Send or Write completes once handed to the LLP.
  auto done = std::move(tx_batch_wrs_);
  tx_batch_wrs_.clear();
  for (auto i : done) {
    std::uint32_t len;
    {
      std::lock_guard l(mu_);
      const auto& e = sq_[i % sq_.size()];
      std::uint64_t t = e.wr.inline_data.size();
      for (const auto& sge : e.wr.sg_list) t += sge.length;
      len = static_cast<std::uint32_t>(t);
    }
    complete_sq(i, WcStatus::Success, len);
  }
  tx_kick();
}

void QueuePair::tx_detach(const std::function<bool(const std::uint8_t*, std::size_t)>& touches) {
  // The unsent rest of the batch keeps its octets, copied out of registered memory, so the
  // stream stays whole while the memory is no longer ours to read.
  for (std::size_t i = iov_pos_; i < iov_.size(); ++i) {
    if (!iov_user_[i]) continue;
    auto* p = static_cast<const std::uint8_t*>(iov_[i].data());
    if (!touches(p, iov_[i].size())) continue;
    tx_detached_.emplace_back(p, p + iov_[i].size());
    iov_[i] = boost::asio::const_buffer(tx_detached_.back().data(), tx_detached_.back().size());
    iov_user_[i] = false;
  }
}

}  // namespace iwarp::rnic
