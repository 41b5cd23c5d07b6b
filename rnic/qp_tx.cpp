// Transmit engine: work requests, Read Responses, atomic responses and Terminates become DDP
// segments (RFC 5041 §5) framed as FPDUs (RFC 5044 §4). The engine runs on a doorbell; every
// FPDU it can build goes into one gather write (headers and trailers from an arena, payload
// straight from the registered memory), so many small WRs cost one system call.
#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "common/log.hpp"
#include "mpa/crc32c.hpp"
#include "rnic/engine_log.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic {

namespace {
constexpr std::size_t kBatchBytes = 1u << 20;  // payload per gather write
constexpr std::size_t kMaxIov = 1000;          // below IOV_MAX (1024)
using rdmap::Opcode;
}  // namespace

std::size_t QueuePair::mulpdu() const {
  std::size_t m = mpa::mulpdu(setup_->emss, tx_.framing->config().markers);
  return std::min<std::size_t>(m, mpa::kMaxUlpduLength);
}

void QueuePair::complete_sq(std::uint64_t index, WcStatus status, std::uint32_t byte_len,
                            std::uint32_t vendor_err) {
  {
    std::lock_guard l(mu_);
    if (!mark_sq_done(index, status, byte_len, vendor_err)) return;
  }
  retire_sq();
}

bool QueuePair::mark_sq_done(std::uint64_t index, WcStatus status, std::uint32_t byte_len,
                             std::uint32_t vendor_err) {
  {
    auto& e = sq_[index % sq_.size()];
    if (e.done) return false;
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
  return true;
}

// Send-queue completions leave in posting order (a later Send that went out before an earlier
// Read's response arrived waits for it), as the verbs specification requires. They go to the CQ
// as one batch, under mu_: the engine and a posting thread (a batch sent without the engine,
// see docs/progress-model.md) both retire, and neither may overtake the other's completions.
void QueuePair::retire_sq() {
  std::lock_guard l(mu_);
  retired_.clear();
  while (sq_head_ < sq_next_) {
    auto& e = sq_[sq_head_ % sq_.size()];
    if (!e.done) break;
    if (e.signaled || e.wc.status != WcStatus::Success) retired_.push_back(e.wc);
    ++sq_head_;
  }
  if (retired_.empty()) return;
  const std::size_t n = init_.send_cq->push(std::span<const Wc>(retired_));
  if (n < retired_.size())
    logger().error("QP {}: send CQ overflow, {} completions lost (the first: WR {})", qp_num_,
                   retired_.size() - n, retired_[n].wr_id);
}

// The payload of a Send or Write: its inline copy, or its local SGEs resolved now, so a region
// deregistered after posting is caught. Reads and atomics carry no payload.
bool QueuePair::resolve_send_sges(std::uint64_t index, TxMsg& m, bool posting) {
  const SendWr& wr = sq_[index % sq_.size()].wr;
  std::uint64_t total = 0;
  if (!wr.inline_data.empty()) {
    m.data.push_back(ByteSpan(wr.inline_data));
    total = wr.inline_data.size();
  } else if (wr.opcode != WrOpcode::RdmaRead && wr.opcode != WrOpcode::AtomicCmpAndSwp &&
             wr.opcode != WrOpcode::AtomicFetchAndAdd) {
    for (const auto& s : wr.sg_list) {
      if (s.length == 0) continue;  // zero-length SGEs are not checked (as siw)
      auto p = dev_.memory().check_local(s.lkey, init_.pd, s.addr, s.length, 0);
      if (!p && posting) return false;
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
  // RFC 5041 §5.3: the MO is 32 bits.
  if (total > 0xFFFFFFFFu && posting) return false;
  if (total > 0xFFFFFFFFu) {
    local_fatal(index, WcStatus::LocLenErr, "message larger than 4 GiB");
    return false;
  }
  m.total = total;
  return true;
}

bool QueuePair::start_sq_wqe(std::uint64_t index, TxMsg& m, bool resolved) {
  const SendWr& wr = sq_[index % sq_.size()].wr;
  m.kind = TxKind::Sq;
  m.sq_index = index;
  if (!resolved && !resolve_send_sges(index, m)) return false;
  auto untagged = [&](Opcode op, std::uint32_t inval = 0) {
    m.hdr = ddp::untagged_header(op, QueueNumber{rdmap::kQnSend}, next_msn(rdmap::kQnSend),
                                 MessageOffset{0}, true, inval);
  };
  const bool se = wr.flags & kSendSolicited;
  switch (wr.opcode) {
    case WrOpcode::Send:
      untagged(se ? Opcode::SendSe : Opcode::Send);
      break;
    case WrOpcode::SendWithInv:
      untagged(se ? Opcode::SendSeInvalidate : Opcode::SendInvalidate, wr.invalidate_rkey.value());
      break;
    case WrOpcode::SendWithImm:
      untagged(se ? Opcode::ImmediateDataSe : Opcode::ImmediateData);
      ByteWriter(m.body).be64(std::uint64_t{wr.imm_data} << 32);
      break;
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
    case WrOpcode::RdmaRead:
      return start_read(index, m);
    case WrOpcode::AtomicCmpAndSwp:
    case WrOpcode::AtomicFetchAndAdd:
      return start_atomic(index, m);
    case WrOpcode::LocalInv: {
      // Copied first: once complete_sq() retires the slot, post_send() may reuse it.
      const STag inv = wr.invalidate_rkey;
      if (!dev_.memory().invalidate(inv, init_.pd)) {
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

// An RDMA Read Request (RFC 5040 §4.4); the Read waits in the ORD for its response.
bool QueuePair::start_read(std::uint64_t index, TxMsg& m) {
  const SendWr& wr = sq_[index % sq_.size()].wr;
  // iWARP: the sink of a Read is written by the peer's Read Response, a tagged message, so
  // its region needs REMOTE_WRITE as well as LOCAL_WRITE.
  STag sink{0};
  TaggedOffset sink_to{0};
  if (!wr.sg_list.empty() && wr.sg_list[0].length > 0) {
    const auto& s = wr.sg_list[0];
    auto p =
        dev_.memory().check_local(s.lkey, init_.pd, s.addr, s.length, kLocalWrite | kRemoteWrite);
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
    sink_to = TaggedOffset{s.addr};
  } else {
    sink = STag{1};  // zero-length Read: the STag is not looked at (like siw's RTR)
  }
  const std::uint32_t size = wr.sg_list.empty() ? 0 : wr.sg_list[0].length;
  m.hdr = ddp::untagged_header(Opcode::ReadRequest, QueueNumber{rdmap::kQnReadReq},
                               next_msn(rdmap::kQnReadReq), MessageOffset{0}, true);
  rdmap::ReadRequest rr{sink, sink_to, size, wr.rkey, TaggedOffset{wr.remote_addr}};
  rr.encode(m.body);
  m.total = 0;
  orq_.push_back(OrqEntry{index, false, sink, sink_to, size, 0, 0, nullptr});
  return true;
}

// An Atomic Request (RFC 7306 §4.2.1); it waits in the ORD for its Atomic Response.
bool QueuePair::start_atomic(std::uint64_t index, TxMsg& m) {
  const SendWr& wr = sq_[index % sq_.size()].wr;
  const auto& s = wr.sg_list[0];
  auto p = dev_.memory().check_local(s.lkey, init_.pd, s.addr, 8, kLocalWrite);
  if (!p) {
    local_fatal(index, WcStatus::LocProtErr,
                fmt::format("WR {}: atomic result SGE lkey 0x{:08x} is not writable", wr.wr_id,
                            s.lkey.value()));
    return false;
  }
  m.hdr = ddp::untagged_header(Opcode::AtomicRequest, QueueNumber{rdmap::kQnReadReq},
                               next_msn(rdmap::kQnReadReq), MessageOffset{0}, true);
  rdmap::AtomicRequest a;
  a.request_id = ++tx_.atomic_request_id;
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
  orq_.push_back(OrqEntry{index, true, STag{0}, TaggedOffset{0}, 8, 0, a.request_id, *p});
  return true;
}

bool QueuePair::next_message(TxMsg& m) {
  // A Terminate goes out whatever the gate; the RTR waits for it like any FPDU (the
  // first-FPDU delay holds it back too).
  if (!tx_.priority.empty() && (tx_.priority.front().kind == TxKind::Terminate || !tx_.gated)) {
    m = std::move(tx_.priority.front());
    tx_.priority.pop_front();
    return true;
  }
  if (state_.load() != QpState::Rts || tx_.gated) return false;
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
                                   next_msn(rdmap::kQnAtomicResp), MessageOffset{0});
      e.atomic_resp.encode(m.body);
    } else {
      m.kind = TxKind::ReadResponse;
      m.hdr = ddp::tagged_header(Opcode::ReadResponse, e.sink, e.sink_to);
      if (!e.src.empty()) m.data.push_back(e.src);
      m.total = e.src.size();
    }
    return true;
  }
  for (;;) {
    std::uint64_t index;
    WrOpcode opcode;
    bool ord_zero = false;
    {
      // One lock for the look at the queue and the take (each pair cost about 55 instructions
      // per WR, docs/instructions.md). The slot belongs to us until the WR completes; what is
      // needed after start_sq_wqe() (which may complete it, and so free the slot) is copied.
      std::lock_guard l(mu_);
      if (sq_next_ == sq_tail_) return false;
      index = sq_next_;
      opcode = sq_[index % sq_.size()].wr.opcode;
      const bool fenced = sq_[index % sq_.size()].wr.flags & kSendFence;
      const bool is_read = opcode == WrOpcode::RdmaRead || opcode == WrOpcode::AtomicCmpAndSwp ||
                           opcode == WrOpcode::AtomicFetchAndAdd;
      // RFC 5040 §5.5 fence: wait until every earlier Read and atomic has completed.
      if (fenced && !orq_.empty()) return false;
      // RFC 6581 §6 / RFC 5040 §6.3: no more outstanding Reads than the negotiated ORD.
      if (is_read && !setup_->ignore_ord) {
        const std::uint16_t ord = negotiated_ord();
        // The responder granted IRD 0: no Read can ever go. It is failed below rather than
        // left to wait forever.
        ord_zero = ord == 0;
        if (!ord_zero && orq_.size() >= ord) return false;
      }
      ++sq_next_;
    }
    if (ord_zero) {
      local_fatal(index, WcStatus::LocQpOpErr,
                  fmt::format("WR {} ({}): the connection's ORD is 0 (the responder's IRD is 0), "
                              "so no RDMA Read or atomic can be sent (RFC 6581 §6)",
                              sq_[index % sq_.size()].wr.wr_id, to_string(opcode)));
      return false;
    }
    m = TxMsg{};
    if (!start_sq_wqe(index, m)) return false;
    if (opcode == WrOpcode::LocalInv) continue;
    return true;
  }
}

// A posting thread takes only what needs no engine: a Send or Write (any variant) whose SGEs
// resolve now and that no fence holds. Anything else stays where it is, untouched (no MSN
// taken, nothing failed), for the engine, which also reports every error.
QueuePair::Posted QueuePair::next_posted(TxMsg& m) {
  std::uint64_t index;
  {
    std::lock_guard l(mu_);
    if (sq_next_ == sq_tail_) return Posted::Empty;
    index = sq_next_;
  }
  // The slot is ours (tx_mu_) until the WR completes; post_send() fills only slots beyond
  // sq_tail_.
  const SendWr& wr = sq_[index % sq_.size()].wr;
  switch (wr.opcode) {
    case WrOpcode::Send:
    case WrOpcode::SendWithInv:
    case WrOpcode::SendWithImm:
    case WrOpcode::RdmaWrite:
    case WrOpcode::RdmaWriteWithImm:
      break;
    default:
      return Posted::NeedsEngine;
  }
  if (wr.flags & kSendFence) return Posted::NeedsEngine;  // the ORQ is the engine's
  m = TxMsg{};
  if (!resolve_send_sges(index, m, true)) return Posted::NeedsEngine;
  {
    std::lock_guard l(mu_);
    ++sq_next_;
  }
  start_sq_wqe(index, m, true);  // a Send or Write never fails once its SGEs resolved
  return Posted::Got;
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

  if (tx_.arena_used == tx_.arena.size()) tx_.arena.emplace_back();
  Bytes& hb = tx_.arena[tx_.arena_used++];
  hb.clear();
  hb.resize(mpa::kUlpduLengthSize);
  h.encode(hb);
  hb.insert(hb.end(), m.body.begin(), m.body.end());
  const std::size_t ulpdu_len = overhead + n;

  // The payload pieces of this segment, straight from registered memory.
  std::size_t first_iov = tx_.iov.size();
  std::size_t skip = m.off, need = n;
  boost::container::small_vector<ByteSpan, 4> pieces;
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
  if (!tx_.framing->config().markers) {
    store_be16(hb.data(), static_cast<std::uint16_t>(ulpdu_len));
    const std::size_t pad = mpa::pad_length(ulpdu_len);
    if (tx_.arena_used == tx_.arena.size()) tx_.arena.emplace_back();
    Bytes& tr = tx_.arena[tx_.arena_used++];
    tr.assign(pad + mpa::kCrcSize, 0);
    if (tx_.framing->config().crc) {
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
    if (tx_.arena_used == tx_.arena.size()) tx_.arena.emplace_back();
    Bytes& out = tx_.arena[tx_.arena_used++];
    out.clear();
    auto r = tx_.framing->encode(ulpdu, out);
    if (!r) {
      logger().error("QP {}: {}", qp_num_, r.error().to_string());
      tx_.iov.resize(first_iov);
      tx_.iov_user.resize(first_iov);
      m.off = m.total;
      return;
    }
    push_iov(out, false);
    wire = out.size();
  }
  m.off += n;
  m.started = true;
  tx_.batch_bytes += wire;
  if (wire && tap_wire_.tap) tx_.fpdu_ends.push_back(tx_.batch_bytes);  // only a capture needs them
  ++stats_.fpdus_sent;
  stats_.bytes_sent += wire;
}

void QueuePair::push_iov(ByteSpan b, bool user) {
  tx_.iov.emplace_back(b.data(), b.size());
  tx_.iov_user.push_back(user);
}

void QueuePair::tx_begin_batch() {
  tx_.arena_used = 0;
  tx_.iov.clear();
  tx_.iov_user.clear();
  tx_.iov_pos = 0;
  tx_.detached.clear();
  tx_.fpdu_ends.clear();
  tx_.batch_bytes = 0;
  tx_.batch_wrs.clear();
}

bool QueuePair::tx_build(bool posting) {
  tx_.building = true;
  bool terminate_sent = false, needs_engine = false;
  while (tx_.batch_bytes < kBatchBytes && tx_.iov.size() + 8 < kMaxIov && !terminate_sent) {
    if (!tx_.cur) {
      TxMsg m;
      if (posting) {
        const Posted p = next_posted(m);
        if (p != Posted::Got) {
          needs_engine = p == Posted::NeedsEngine;
          break;
        }
      } else if (!next_message(m)) {
        // next_message() may have failed the QP: its Terminate is queued now and goes in
        // this batch, behind what was built before the bad WR.
        if (!tx_.priority.empty() && tx_.priority.front().kind == TxKind::Terminate) continue;
        break;
      }
      tx_.cur = std::move(m);
    }
    TxMsg& m = *tx_.cur;
    if (!m.started || m.off < m.total) append_fpdu(m);
    if (m.off < m.total) continue;
    if (m.then_imm) {
      // Write with Immediate: the Write is out; the Immediate Data message follows.
      TxMsg imm;
      imm.kind = m.kind;
      imm.sq_index = m.sq_index;
      imm.hdr = *m.then_imm;
      imm.hdr.msn = next_msn(rdmap::kQnSend);
      ByteWriter(imm.body).be64(m.imm);
      tx_.cur = std::move(imm);
      continue;
    }
    if (m.kind == TxKind::Sq) {
      const auto op = sq_[m.sq_index % sq_.size()].wr.opcode;
      if (op != WrOpcode::RdmaRead && op != WrOpcode::AtomicCmpAndSwp &&
          op != WrOpcode::AtomicFetchAndAdd)
        tx_.batch_wrs.push_back(m.sq_index);
    }
    terminate_sent = m.kind == TxKind::Terminate;  // nothing follows a Terminate (RFC 5040 §5.6)
    tx_.cur.reset();
  }
  tx_.building = false;
  if (terminate_sent) tx_.priority.clear();
  // A batch full before the queue was empty: the engine goes on once it is out.
  return needs_engine || tx_.cur.has_value() || (posting && tx_.batch_bytes >= kBatchBytes) ||
         (posting && tx_.iov.size() + 8 >= kMaxIov);
}

void QueuePair::tx_kick() {
  TxLock l(tx_mu_);
  // Not re-entrant: an error found while the batch is built (a bad lkey, say) queues its
  // Terminate through fatal(), which calls here again; the loop in tx_build() picks it up.
  if (tx_.writing || tx_.building || closed_ || !transport_) return;
  tx_begin_batch();
  tx_build(false);
  if (tx_.iov.empty()) {
    if (closing_after_tx_) enter_error(closed_reason_);
    return;
  }
  tx_.writing = true;
  ++stats_.tx_batches;
  if (tap_wire_.tap) {
    Bytes all;
    all.reserve(tx_.batch_bytes);
    for (const auto& b : tx_.iov) {
      auto* p = static_cast<const std::uint8_t*>(b.data());
      all.insert(all.end(), p, p + b.size());
    }
    tap_wire_.tap->on_fpdus(true, all, tx_.fpdu_ends);
  }
  tx_write();
}

// The posting thread's transmitter (docs/progress-model.md). It runs only when it gets the
// transmit lock at once and finds the send side idle: nothing being built or written, no
// Terminate, RTR or Read/atomic response waiting, no gate, no capture or simulation. Then the
// batch is built and written here, non-blocking, and its WRs complete from here. A WR only the
// engine may start, or a socket that would block, hands the rest to the engine.
bool QueuePair::tx_now() {
  if (state_.load() != QpState::Rts || dev_.on_engine_thread()) return false;
  TxLock l(tx_mu_, std::try_to_lock);
  if (!l.owns_lock()) return false;
  if (closed_ || !transport_ || !transport_->can_write_now() || tap_wire_.tap || tap_wire_.shaper ||
      tx_.gated || tx_.writing || tx_.building || tx_.cur || !tx_.priority.empty() ||
      !irq_.empty() || state_.load() != QpState::Rts)
    return false;
  tx_begin_batch();
  const bool more = tx_build(true);
  if (tx_.iov.empty()) return !more;
  tx_.writing = true;
  ++stats_.tx_batches;
  ++stats_.posted_inline_batches;
  stats_.posted_inline_wrs += tx_.batch_wrs.size();
  while (tx_.iov_pos < tx_.iov.size()) {
    boost::system::error_code ec;
    const std::size_t n = transport_->write_now(
        std::span(tx_.iov).subspan(tx_.iov_pos,
                                   std::min<std::size_t>(tx_.iov.size() - tx_.iov_pos, kMaxIov)),
        ec);
    if (ec) {
      // No room (or a broken stream): the engine writes the rest, waiting for room on the
      // socket, and reports any error; it alone may wait on the socket or fail the QP.
      ++stats_.inline_handoffs;
      boost::asio::post(dev_.io(), [self = shared_from_this()] {
        TxLock el(self->tx_mu_);
        if (self->closed_ || !self->tx_.writing) return;
        self->tx_write();
      });
      return true;  // tx_write() kicks the transmitter once the batch is out
    }
    tx_advance(n);
  }
  tx_.writing = false;
  tx_batch_done();
  return !more;
}

void QueuePair::tx_advance(std::size_t n) {
  while (n > 0 && tx_.iov_pos < tx_.iov.size()) {
    const std::size_t b = tx_.iov[tx_.iov_pos].size();
    if (n >= b) {
      n -= b;
      ++tx_.iov_pos;
    } else {
      tx_.iov[tx_.iov_pos] += n;
      n = 0;
    }
  }
}

void QueuePair::tx_batch_done() {
  // RFC 5040 §5 (as siw): a Send or Write completes once handed to the LLP.
  if (tx_.batch_wrs.empty()) return;
  {
    std::lock_guard l(mu_);
    for (auto i : tx_.batch_wrs) {
      const auto& e = sq_[i % sq_.size()];
      std::uint64_t t = e.wr.inline_data.size();
      for (const auto& sge : e.wr.sg_list) t += sge.length;
      mark_sq_done(i, WcStatus::Success, static_cast<std::uint32_t>(t), 0);
    }
  }
  tx_.batch_wrs.clear();
  retire_sq();
}

// Writes what the socket takes now; waits for room otherwise. Registered memory is read only
// here, synchronously under the transmit lock (on the engine thread, or a posting thread in
// tx_now()): between two calls no I/O request holds a span of it (see Transport), so
// deregistration can copy the unsent rest away (tx_detach).
void QueuePair::tx_write() {
  TxLock l(tx_mu_);
  while (tx_.iov_pos < tx_.iov.size()) {
    boost::system::error_code ec;
    std::size_t n = transport_->write_some(
        std::span(tx_.iov).subspan(tx_.iov_pos,
                                   std::min<std::size_t>(tx_.iov.size() - tx_.iov_pos, kMaxIov)),
        ec);
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) {
      transport_->async_wait_writable(
          [self = shared_from_this()](const boost::system::error_code& e) {
            TxLock el(self->tx_mu_);
            if (e) {
              self->tx_.writing = false;
              if (e != boost::asio::error::operation_aborted && !self->closed_)
                self->enter_error({QpClosed::Cause::PeerClosed,
                                   fmt::format("connection lost while sending: {}", llp_error(e))});
              return;
            }
            if (self->closed_) return;
            self->tx_write();
          });
      return;
    }
    if (ec) {
      tx_.writing = false;
      // The peer may have closed after a Terminate that is already in our receive buffer:
      // read what is there first, so the QP reports the Terminate rather than the broken pipe.
      boost::asio::post(dev_.io(), [self = shared_from_this(), ec] {
        if (self->closed_) return;
        self->rx_drain();
        if (!self->closed_)
          self->enter_error({QpClosed::Cause::PeerClosed,
                             fmt::format("connection lost while sending: {}", llp_error(ec))});
      });
      return;
    }
    tx_advance(n);
  }
  tx_.writing = false;
  tx_batch_done();
  tx_kick();
}

void QueuePair::tx_detach(const std::function<bool(const std::uint8_t*, std::size_t)>& touches) {
  TxLock l(tx_mu_);
  // The unsent rest of the batch keeps its octets, copied out of registered memory, so the
  // stream stays whole while the memory is no longer ours to read.
  for (std::size_t i = tx_.iov_pos; i < tx_.iov.size(); ++i) {
    if (!tx_.iov_user[i]) continue;
    auto* p = static_cast<const std::uint8_t*>(tx_.iov[i].data());
    if (!touches(p, tx_.iov[i].size())) continue;
    tx_.detached.emplace_back(p, p + tx_.iov[i].size());
    tx_.iov[i] = boost::asio::const_buffer(tx_.detached.back().data(), tx_.detached.back().size());
    tx_.iov_user[i] = false;
  }
}

}  // namespace iwarp::rnic
