// The connection's lifecycle, the Sends both directions share, and completion handling.
#include "enlarge/connection.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "enlarge/connection_detail.hpp"
#include "verbs_shim/endpoint.hpp"

namespace iwarp::enlarge {

using namespace iwarp::verbs;
using namespace detail;

Connection::Connection(ibv_context* ctx, ibv_comp_channel* channel, const Options& opts,
                       std::uint64_t id)
    : ctx_(ctx),
      channel_(channel),
      opts_(opts),
      id_(id),
      buffers_(opts_, stats_),
      credits_(opts.send_slots),
      assembly_(opts.max_message) {
  buffers_.on_event = [this](const std::string& what) { event(what); };
  // Receives posted in a buffer being freed complete only when messages consume them: ask the
  // peer for that many Credits.
  buffers_.on_retire_with_receives = [this](std::uint32_t posted) {
    if (state_ == State::Established)
      control_.push_back(Message{.credits = 0, .seq = 0, .body = Cycle{posted}});
  };
}

Connection::~Connection() = default;

void Connection::event(const std::string& what) {
  lg().debug("conn {}: {}", id_, what);
  if (on_event) on_event(what);
}

std::string Connection::setup(rdma_cm_id* id) {
  cm_id_ = id;
  id->context = this;
  pd_ = ibv_alloc_pd(ctx_);
  buffers_.set_pd(pd_);
  const int depth = static_cast<int>(opts_.recv_slots + 2 * opts_.send_slots + 8);
  cq_ = ibv_create_cq(ctx_, depth, this, channel_, 0);
  ibv_qp_init_attr attr;
  attr.send_cq = attr.recv_cq = cq_;
  attr.cap.max_send_wr = 2 * opts_.send_slots + 4;
  attr.cap.max_recv_wr = opts_.recv_slots;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  if (int e = rdma_create_qp(id, pd_, &attr); e)
    return fmt::format("cannot create the QP: {}", ibv_last_error());
  qp_ = id->qp;
  ibv_req_notify_cq(cq_, 0);
  std::string why;
  auto* small = buffers_.add_small(&why);
  if (!small) return "cannot register the small buffer: " + why;
  buffers_.rx_slots = buffers_.tx_slots = small->rid;
  for (std::uint32_t i = 0; i < opts_.recv_slots; ++i)
    if (!post_recv_slot()) return "cannot post the receive slots: " + ibv_last_error();
  return "";
}

void Connection::set_peer(const Hello& h) {
  peer_ = h;
  credits_.start(h.recv_slots);
}

void Connection::set_established() {
  if (state_ != State::Connecting) return;
  state_ = State::Established;
  event(fmt::format("established: peer slots {} x {} bytes, peer mode {}", peer_.recv_slots,
                    peer_.slot_size, to_string(peer_.mode)));
  auto early = std::move(early_);
  early_.clear();
  for (const auto& wc : early) complete(wc);
  // RFC 5044 §7.1.2: the responder sends no FPDU before the initiator's first. An initiator
  // with nothing to say says so (a Credit returning nothing), so a server can send first.
  if (!server_side && queue_.empty())
    control_.push_back(Message{.credits = 0, .seq = 0, .body = Credit{}});
}

void Connection::fail(std::string why, bool disconnect) {
  if (state_ == State::Failed || state_ == State::Closed) return;
  state_ = State::Failed;
  error_ = std::move(why);
  lg().warn("conn {}: {}", id_, error_);
  event("failed: " + error_);
  if (qp_) ibv_modify_qp_to_err(qp_);
  if (cm_id_ && disconnect) rdma_disconnect(cm_id_);
  reclaim();
}

void Connection::protocol_error(std::string why) {
  fail("protocol error from the peer: " + why);
}

void Connection::set_closed(std::string why) {
  if (state_ == State::Failed || state_ == State::Closed) return;
  state_ = State::Closed;
  error_ = std::move(why);
  event("closed: " + error_);
  // Flush what is still posted, so every buffer can be given back (reclaim).
  if (qp_) ibv_modify_qp_to_err(qp_);
  reclaim();
}

void Connection::disconnect() {
  if (cm_id_ && state_ != State::Failed) rdma_disconnect(cm_id_);
  set_closed("closed by this side");
}

void Connection::destroy_qp_and_id() {
  if (cm_id_) {
    if (cm_id_->qp) rdma_destroy_qp(cm_id_);
    rdma_destroy_id(cm_id_);
    cm_id_ = nullptr;
    qp_ = nullptr;
  }
  buffers_.deregister_all();
  for (auto& [k, src] : rdv_mrs_) unregister_source(src.mr);
  rdv_mrs_.clear();
}

void Connection::destroy_rest() {
  if (cq_) ibv_destroy_cq(cq_);
  cq_ = nullptr;
  if (pd_) ibv_dealloc_pd(pd_);
  pd_ = nullptr;
}

void Connection::reclaim() {
  if (reclaimed_ || (state_ != State::Closed && state_ != State::Failed) || !rdv_mrs_.empty())
    return;
  if (!buffers_.all_idle()) return;  // flushed completions still to come
  buffers_.deregister_all();
  reclaimed_ = true;
  event("over: every buffer unregistered and freed");
}

std::uint32_t Connection::rx_enlarged_size() const {
  const auto* r = buffers_.get(buffers_.rx_bulk);
  return r ? static_cast<std::uint32_t>(r->data_bytes) : 0;
}

bool Connection::small_buffer_registered() const {
  return buffers_.small_registered();
}

std::optional<Received> Connection::try_recv() {
  return assembly_.pop();
}

bool Connection::tx_idle() const {
  return queue_.empty() && control_.empty() && owed_credits_ == 0 &&
         credits_.sends_in_flight() == 0 && writes_in_flight_ == 0 && rdv_mrs_.empty();
}

bool Connection::wants_pump() const {
  if (state_ != State::Established) return false;
  return !queue_.empty() || !control_.empty() || owed_credits_ > 0 ||
         credits_.unannounced() >= credit_threshold() || (opts_.idle_shrink.count() > 0 && remote_);
}

// Reposted slots are announced on their own (a Credit) once half the receive slots are.
std::uint32_t Connection::credit_threshold() const {
  return std::max(2u, opts_.recv_slots / 2);
}

bool Connection::post_recv_slot() {
  auto* r = buffers_.get(buffers_.rx_slots);
  if (!r || r->free_slots.empty()) {
    fail("internal: no free receive slot");
    return false;
  }
  const std::uint32_t i = r->free_slots.back();
  r->free_slots.pop_back();
  r->busy++;
  r->recv_posted++;
  if (post_one_recv(qp_, r->slot(i), opts_.slot_size, r->slot_mr->lkey,
                    make_wr_id(kRecv, r->rid, i)) != 0) {
    r->busy--;
    r->recv_posted--;
    r->free_slots.push_back(i);
    fail("ibv_post_recv: " + ibv_last_error());
    return false;
  }
  return true;
}

std::pair<Connection::Region*, std::uint32_t> Connection::take_send_slot() {
  if (!credits_.send_slot_free()) return {nullptr, 0};
  auto* r = buffers_.get(buffers_.tx_slots);
  if (!r || r->free_slots.empty()) return {nullptr, 0};
  const std::uint32_t i = r->free_slots.back();
  r->free_slots.pop_back();
  // Busy from now on, not from its posting: while the Send is being filled, pump() may give up
  // the buffer's role (maybe_shrink drops tx_bulk, where the slots may live), and a retired
  // buffer is freed only once nothing in it is busy.
  r->busy++;
  // The Send being filled counts against the Sends in flight from now on too: can_send() then
  // says whether a further Send can start while it is open, so a caller that checked it can
  // post the open one and start the next (the Done behind a Write relies on this).
  credits_.send_started();
  return {r, i};
}

bool Connection::can_send(bool is_credit) const {
  if (state_ != State::Established) return false;
  if (!credits_.allow(is_credit) || !credits_.send_slot_free()) return false;
  const auto* r = buffers_.get(buffers_.tx_slots);
  return r && !r->free_slots.empty();
}

// Messages that are queued when a slot is free share it (Nagle-free: a Send never waits to
// fill up; pump() posts whatever it gathered). The records go from octet kHeaderBytes of the
// slot; the first one's message sits at kHeaderBytes + 2, where it is posted from when it stays
// alone.
bool Connection::send_message(const Message& msg, bool is_credit, bool alone) {
  const std::size_t cap = std::min(opts_.slot_size, peer_.slot_size);
  const std::size_t n = encoded_size(msg);
  if (open_ && !alone) {
    // The Send being filled returns every unannounced credit in its header: a Credit in it
    // would add nothing.
    if (msg.type() == MsgType::Credit) return true;
    // A Send opened for a Credit alone takes the message instead (its header returns them).
    if (open_->credit_only && n <= cap) {
      Region* r = open_->r;
      const std::uint32_t slot = open_->slot;
      open_.reset();
      start_send(r, slot, msg, /*alone=*/false);
      return true;
    }
    if (!open_->whole && n <= kMaxRecordBytes &&
        kHeaderBytes + open_->used + kRecordLengthBytes + n <= cap) {
      std::uint8_t* at = open_->r->slot(open_->slot) + kHeaderBytes + open_->used;
      store_be16(at, static_cast<std::uint16_t>(n));
      Message m = msg;
      m.credits = 0;
      encode(m, MutableByteSpan(at + kRecordLengthBytes, n));
      open_->used += kRecordLengthBytes + n;
      open_->count++;
      if (m.type() != MsgType::Piece || on_event) open_->events.push_back(describe(m));
      return true;
    }
  }
  if (open_) flush_send();
  if (!can_send(is_credit)) return false;
  if (n > cap) {
    fail(fmt::format("internal: a {}-octet message does not fit a slot", n));
    return false;
  }
  auto [r, i] = take_send_slot();
  credits_.reserve();
  start_send(r, i, msg, alone);
  return true;
}

// `msg` is the first message of a new Send in slot `i` of `r` (slot and credit taken).
void Connection::start_send(Region* r, std::uint32_t i, const Message& msg, bool alone) {
  const std::size_t n = encoded_size(msg);
  open_ = OpenSend{.r = r,
                   .slot = i,
                   .used = 0,
                   .count = 1,
                   .whole = false,
                   .credit_only = msg.type() == MsgType::Credit && !alone,
                   .events = {}};
  Message m = msg;
  m.credits = 0;
  if (alone || n > kMaxRecordBytes || kHeaderBytes + kRecordLengthBytes + n > opts_.slot_size) {
    // Too large to be a record (in this side's slot, or for its 2-octet length), or meant
    // alone: it is the whole Send.
    encode(m, MutableByteSpan(r->slot(i), n));
    open_->used = n;
    open_->whole = true;
  } else {
    std::uint8_t* at = r->slot(i) + kHeaderBytes;
    store_be16(at, static_cast<std::uint16_t>(n));
    encode(m, MutableByteSpan(at + kRecordLengthBytes, n));
    open_->used = kRecordLengthBytes + n;
  }
  if (m.type() != MsgType::Piece || on_event) open_->events.push_back(describe(m));
}

void Connection::flush_send() {
  if (!open_) return;
  OpenSend o = std::move(*open_);
  open_.reset();
  Region* r = o.r;
  const std::uint16_t carry = credits_.to_carry();
  std::uint8_t* addr = r->slot(o.slot);
  std::size_t len = o.used;
  if (o.whole) {
    store_be16(addr + 2, carry);
  } else if (o.count == 1) {
    addr += kHeaderBytes + kRecordLengthBytes;
    len -= kRecordLengthBytes;
    store_be16(addr + 2, carry);
  } else {
    addr[0] = kVersion;
    addr[1] = static_cast<std::uint8_t>(MsgType::Bundle);
    store_be16(addr + 2, carry);
    store_be32(addr + 4, 0);
    len += kHeaderBytes;
  }
  const auto type = static_cast<MsgType>(addr[1]);
  if (post_one(qp_, {.op = IBV_WR_SEND,
                     .addr = addr,
                     .len = static_cast<std::uint32_t>(len),
                     .lkey = r->slot_mr->lkey,
                     .remote_addr = 0,
                     .rkey = 0,
                     .flags = IBV_SEND_SIGNALED,
                     .wr_id = make_wr_id(kSend, r->rid, o.slot),
                     .imm = 0,
                     .compare_add = 0,
                     .swap = 0}) != 0) {
    r->busy--;
    credits_.send_completed();
    r->free_slots.push_back(o.slot);
    fail("ibv_post_send: " + ibv_last_error());
    return;
  }
  credits_.carried_back(carry);
  stats_.sends++;
  if (type == MsgType::Credit) stats_.credit_messages++;
  if (type == MsgType::Bundle) {
    stats_.bundles++;
    if (on_event) event(fmt::format("tx Bundle of {} messages credits={}", o.count, carry));
    for (const auto& e : o.events) event("tx " + e);
  } else if (!o.events.empty()) {
    // describe() saw credits 0: the header carries what was unannounced at posting.
    std::string e = o.events.front();
    if (const auto k = e.rfind(" credits="); k != std::string::npos) e.resize(k);
    event(fmt::format("tx {} credits={}", e, carry));
  }
}

bool Connection::fits_open_send(std::size_t n) const {
  if (!open_ || open_->whole) return false;
  // A Credit alone gives its place to the message, which may then be the whole Send.
  if (!open_->credit_only && n > kMaxRecordBytes) return false;
  const std::size_t cap = std::min(opts_.slot_size, peer_.slot_size);
  return kHeaderBytes + (open_->credit_only ? 0 : open_->used) + kRecordLengthBytes + n <= cap;
}

std::uint32_t Connection::open_piece_room() const {
  if (!open_ || open_->whole) return 0;
  const std::size_t cap = std::min(opts_.slot_size, peer_.slot_size);
  const std::size_t used = kHeaderBytes + (open_->credit_only ? 0 : open_->used) +
                           kRecordLengthBytes + kPieceHeaderBytes;
  if (used >= cap) return 0;
  std::size_t room = cap - used;
  // Appended, the Piece is a record: its length must fit 2 octets.
  if (!open_->credit_only) room = std::min(room, kMaxRecordBytes - kPieceHeaderBytes);
  return static_cast<std::uint32_t>(room);
}

void Connection::pump(bool defer_credit) {
  if (state_ != State::Established) return;
  while (!control_.empty()) {
    // Only a Credit that returns credits may use the last one (see Credits::allow).
    const bool returns = control_.front().type() == MsgType::Credit && credits_.unannounced() > 0;
    if (!send_message(control_.front(), returns)) break;
    const auto type = control_.front().type();
    if (type == MsgType::EnlargeAck || type == MsgType::EnlargeNak) answer_pending_ = false;
    control_.pop_front();
  }
  while (owed_credits_ > 0 && control_.empty()) {
    if (!send_message(Message{.credits = 0, .seq = 0, .body = Credit{}}, credits_.unannounced() > 0,
                      /*alone=*/true))
      break;
    owed_credits_--;
  }
  if (control_.empty() && owed_credits_ == 0) {
    while (!queue_.empty() && state_ == State::Established && pump_one()) {
    }
    // Down to the last credit, which only a Send returning credits may use: a Send that
    // returns them may as well carry what is queued too (it stays one that returns credits).
    if (!queue_.empty() && !open_ && state_ == State::Established && credits_.unannounced() > 0 &&
        !credits_.allow(false) &&
        send_message(Message{.credits = 0, .seq = 0, .body = Credit{}}, true)) {
      while (!queue_.empty() && state_ == State::Established && open_ && pump_one()) {
      }
    }
    maybe_shrink();
  }
  // Nothing else carried the reposted slots back (nothing else could go, or nothing was
  // waiting): say it on its own. This may use the last credit, so it goes even when control
  // messages wait for a second one: two sides both down to one credit still make progress.
  // (A Send being filled carries them in its header instead.) Held back when completions were
  // just handled: the application may answer before the node's next progress() and carry
  // them (Node::progress sends what is still waiting first thing).
  credit_waiting_ = false;
  if (state_ == State::Established && credits_.unannounced() >= credit_threshold()) {
    if (defer_credit && !open_)
      credit_waiting_ = true;
    else
      send_message(Message{.credits = 0, .seq = 0, .body = Credit{}}, true);
  }
  if (state_ == State::Established) flush_send();
  if (open_) {  // the connection failed while filling it: the slot goes back unused
    Region* r = open_->r;
    r->free_slots.push_back(open_->slot);
    open_.reset();
    credits_.send_completed();
    r->busy--;
    buffers_.maybe_free(r);
    reclaim();
  }
}

void Connection::handle(const Message& m) {
  if (!credits_.returned(m.credits))
    return protocol_error(fmt::format("{} returns {} credits while {} Sends hold the peer's slots",
                                      to_string(m.type()), m.credits, credits_.outstanding()));
  switch (m.type()) {
    case MsgType::Piece: {
      const auto& p = std::get<Piece>(m.body);
      stats_.pieces_received++;
      return deliver_part(m.seq, p.total, p.offset, p.data);
    }
    case MsgType::EnlargeReq:
      return on_enlarge_req(m.seq, std::get<EnlargeReq>(m.body));
    case MsgType::EnlargeAck:
      return on_enlarge_ack(std::get<EnlargeAck>(m.body));
    case MsgType::EnlargeNak:
      return on_enlarge_nak();
    case MsgType::Done:
      return on_done(m.seq, std::get<Done>(m.body));
    case MsgType::Ready:
      return on_ready(std::get<Ready>(m.body));
    case MsgType::Release:
      return on_release(std::get<Release>(m.body));
    case MsgType::Credit:
      return;
    case MsgType::Cycle:
      return on_cycle(std::get<Cycle>(m.body));
    case MsgType::Bundle:
      for (const auto& inner : std::get<Bundle>(m.body).messages) {
        if (state_ != State::Established && state_ != State::Closed) return;
        if (inner.type() != MsgType::Piece || on_event) event("rx " + describe(inner));
        handle(inner);
      }
      return;
  }
}

bool Connection::drain_cq(bool only_if_any) {
  ibv_wc wcs[32];
  bool any = false;
  for (;;) {
    const int n = ibv_poll_cq(cq_, 32, wcs);
    if (n <= 0) break;
    any = true;
    for (int k = 0; k < n; ++k) complete(wcs[k]);
  }
  if (any || !only_if_any) {
    pump(/*defer_credit=*/true);
    reclaim();
  }
  return any;
}

void Connection::complete(const ibv_wc& wc) {
  const std::uint64_t kind = wr_kind(wc.wr_id);
  // The peer may send as soon as its side is established, and its first message can complete
  // here before our ESTABLISHED event is handled (and, on the client, before the peer's hello
  // is known): keep it until then.
  if (state_ == State::Connecting && kind == kRecv && wc.status == IBV_WC_SUCCESS) {
    early_.push_back(wc);
    return;
  }
  // Flushed work requests follow a disconnect (or an error already reported): the
  // connection is closed, not broken. Any other error status is the connection's failure.
  if (wc.status == IBV_WC_WR_FLUSH_ERR && state_ == State::Established)
    set_closed("the connection closed (work requests flushed)");
  else if (wc.status != IBV_WC_SUCCESS && state_ == State::Established)
    fail(fmt::format("{} completion: {} (vendor_err {:#x})",
                     kind == kRecv ? "receive" : (kind == kSend ? "send" : "RDMA Write"),
                     ibv_wc_status_str(wc.status), wc.vendor_err));
  if (kind == kRdvWrite) return release_rendezvous_source(wr_rdv_key(wc.wr_id));
  auto* r = buffers_.get(wr_rid(wc.wr_id));
  if (!r) return;
  if (kind == kRecv) return complete_recv(wc);
  if (kind == kSend) {
    credits_.send_completed();
    r->free_slots.push_back(wr_slot(wc.wr_id));
  } else if (kind == kWrite) {
    writes_in_flight_--;
  }
  r->busy--;
  buffers_.maybe_free(r);
}

// A receive slot's message is handled and the slot reposted (from the current receive-slot
// buffer, which handling may have changed).
void Connection::complete_recv(const ibv_wc& wc) {
  auto* r = buffers_.get(wr_rid(wc.wr_id));
  // A message that arrived before the disconnect was seen is still delivered.
  if (wc.status == IBV_WC_SUCCESS && (state_ == State::Established || state_ == State::Closed)) {
    auto m = decode(ByteSpan(r->slot(wr_slot(wc.wr_id)), wc.byte_len));
    if (!m) {
      protocol_error(m.error().what);
    } else {
      stats_.sends_received++;
      if (m->type() == MsgType::Bundle) {
        if (on_event)
          event(fmt::format("rx Bundle of {} messages credits={}",
                            std::get<Bundle>(m->body).messages.size(), m->credits));
      } else if (m->type() != MsgType::Piece || on_event) {
        event("rx " + describe(*m));
      }
      handle(*m);
    }
  }
  r = buffers_.get(wr_rid(wc.wr_id));  // handling may have moved the slots, never freed this one
  r->busy--;
  r->recv_posted--;
  r->free_slots.push_back(wr_slot(wc.wr_id));
  buffers_.maybe_free(r);
  if (state_ == State::Established && post_recv_slot()) credits_.reposted();
}

}  // namespace iwarp::enlarge
