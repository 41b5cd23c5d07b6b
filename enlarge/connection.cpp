#include "enlarge/connection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/log.hpp"
#include "verbs_shim/endpoint.hpp"

namespace iwarp::enlarge {

using namespace iwarp::verbs;

namespace {
// wr_id: kind in the top byte, region id, slot index.
constexpr std::uint64_t kRecv = 1, kSend = 2, kWrite = 3, kRdvWrite = 4;
std::uint64_t make_wr_id(std::uint64_t kind, std::uint32_t rid, std::uint32_t slot) {
  return kind << 56 | std::uint64_t{rid} << 16 | slot;
}
std::uint64_t wr_kind(std::uint64_t id) {
  return id >> 56;
}
std::uint32_t wr_rid(std::uint64_t id) {
  return static_cast<std::uint32_t>((id >> 16) & 0xffffffffffULL);
}
std::uint32_t wr_slot(std::uint64_t id) {
  return static_cast<std::uint32_t>(id & 0xffff);
}

spdlog::logger& lg() {
  return log::layer("enlarge");
}

constexpr std::uint8_t kHelloMagic[4] = {'E', 'N', 'L', 'G'};
constexpr std::size_t kHelloBytes = 12;
// The largest buffer a Rendezvous receiver registers for one message.
constexpr std::uint32_t kMaxRendezvous = 256u << 20;
}  // namespace

const char* to_string(Mode m) {
  switch (m) {
    case Mode::Enlarge:
      return "enlarge";
    case Mode::Pieces:
      return "pieces";
    case Mode::Rendezvous:
      return "rendezvous";
  }
  return "?";
}

std::string validate(const Options& o) {
  if (o.slot_size < 64 || o.slot_size > (1u << 20))
    return fmt::format("slot size {} is outside 64 B-1 MiB (the protocol's sizes: 100-2,000)",
                       o.slot_size);
  if (o.recv_slots < 4 || o.recv_slots > 1024)
    return fmt::format("{} receive slots: 4-1024 (credits need at least 4)", o.recv_slots);
  if (o.send_slots < 2 || o.send_slots > 1024)
    return fmt::format("{} send slots: 2-1024", o.send_slots);
  if (o.min_enlarged == 0 || o.min_enlarged > o.max_enlarged)
    return fmt::format("enlarged sizes {}-{}: need 0 < min <= max", o.min_enlarged, o.max_enlarged);
  if (o.depth < 1 || o.depth > 64) return fmt::format("depth {}: 1-64", o.depth);
  if (o.free_small && o.mode != Mode::Enlarge)
    return "freeing the small buffer goes with the enlarge mode only";
  return "";
}

Bytes encode_hello(const Hello& h) {
  Bytes b(kHelloBytes, 0);
  std::memcpy(b.data(), kHelloMagic, 4);
  b[4] = kVersion;
  b[5] = static_cast<std::uint8_t>(h.mode);
  store_be32(b.data() + 6, h.slot_size);
  store_be16(b.data() + 10, static_cast<std::uint16_t>(h.recv_slots));
  return b;
}

std::expected<Hello, std::string> decode_hello(ByteSpan b) {
  if (b.size() < kHelloBytes || std::memcmp(b.data(), kHelloMagic, 4) != 0)
    return std::unexpected(fmt::format(
        "private data of {} octets is not a buffer-enlargement hello (\"ENLG\" + 8 octets)",
        b.size()));
  if (b[4] != kVersion)
    return std::unexpected(fmt::format("hello version {} (this side speaks {})", b[4], kVersion));
  if (b[5] > 2) return std::unexpected(fmt::format("hello mode {} is not 0-2", b[5]));
  Hello h;
  h.mode = static_cast<Mode>(b[5]);
  h.slot_size = load_be32(b.data() + 6);
  h.recv_slots = load_be16(b.data() + 10);
  if (h.slot_size < kPieceHeaderBytes + 1 || h.slot_size < kMaxControlBytes || h.recv_slots < 4)
    return std::unexpected(fmt::format("hello slot size {} / {} receive slots is too small",
                                       h.slot_size, h.recv_slots));
  return h;
}

Connection::Connection(ibv_context* ctx, ibv_comp_channel* channel, const Options& opts,
                       std::uint64_t id)
    : ctx_(ctx), channel_(channel), opts_(opts), id_(id) {}

Connection::~Connection() = default;

void Connection::event(const std::string& what) {
  lg().debug("conn {}: {}", id_, what);
  if (on_event) on_event(what);
}

Connection::Region* Connection::region(std::uint32_t rid) {
  auto it = regions_.find(rid);
  return it == regions_.end() ? nullptr : it->second.get();
}

Connection::Region* Connection::new_region(std::size_t data_bytes, std::uint32_t slots,
                                           bool remote_write, std::string* why) {
  const std::size_t bytes = data_bytes + std::size_t{slots} * opts_.slot_size;
  if (opts_.budget && !opts_.budget->try_charge(bytes)) {
    *why = fmt::format("registering {} bytes would pass the budget ({} of {} used)", bytes,
                       opts_.budget->used(), opts_.budget->limit());
    return nullptr;
  }
  auto r = std::make_unique<Region>();
  r->rid = next_rid_++;
  r->mem = std::make_unique_for_overwrite<std::uint8_t[]>(bytes);
  r->bytes = bytes;
  r->data_bytes = data_bytes;
  r->slots = slots;
  r->slot_size = opts_.slot_size;
  // A receiver's enlarged buffer takes the peer's RDMA Writes; everything else is local.
  if (data_bytes)
    r->data_mr = ibv_reg_mr(pd_, r->mem.get(), data_bytes,
                            IBV_ACCESS_LOCAL_WRITE | (remote_write ? IBV_ACCESS_REMOTE_WRITE : 0));
  if (slots)
    r->slot_mr =
        ibv_reg_mr(pd_, r->mem.get() + data_bytes, bytes - data_bytes, IBV_ACCESS_LOCAL_WRITE);
  if ((data_bytes && !r->data_mr) || (slots && !r->slot_mr)) {
    *why = fmt::format("ibv_reg_mr of {} bytes failed: {}", bytes, ibv_last_error());
    if (r->data_mr) ibv_dereg_mr(r->data_mr);
    if (r->slot_mr) ibv_dereg_mr(r->slot_mr);
    if (opts_.budget) opts_.budget->release(bytes);
    return nullptr;
  }
  for (std::uint32_t i = slots; i-- > 0;) r->free_slots.push_back(i);
  registered_ += bytes;
  stats_.registrations++;
  stats_.peak_registered = std::max(stats_.peak_registered, registered_);
  auto* raw = r.get();
  regions_.emplace(raw->rid, std::move(r));
  return raw;
}

void Connection::retire(Region* r) {
  r->retired = true;
  // Posted receives cannot be taken back: ask the peer for as many messages as it takes to
  // consume them (receives complete in the order they were posted).
  if (r->recv_posted > 0 && state_ == State::Established)
    control_.push_back(Message{.credits = 0, .seq = 0, .body = Cycle{r->recv_posted}});
  maybe_free(r);
}

void Connection::deregister(Region& r) {
  if (r.data_mr) ibv_dereg_mr(r.data_mr);
  if (r.slot_mr) ibv_dereg_mr(r.slot_mr);
  r.data_mr = r.slot_mr = nullptr;
  if (opts_.budget) opts_.budget->release(r.bytes);
  registered_ -= r.bytes;
}

void Connection::maybe_free(Region* r) {
  if (!r->retired || r->busy != 0) return;
  deregister(*r);
  stats_.deregistrations++;
  if (r->small) stats_.small_freed++;
  event(fmt::format("unregistered and freed the {} of {} bytes",
                    r->small ? "small buffer" : "enlarged buffer", r->bytes));
  regions_.erase(r->rid);
}

// A region no pointer names any more is retired (freed when its last use completes).
void Connection::release_if_unused(std::uint32_t rid) {
  if (rid == 0 || rid == rx_slots_rid_ || rid == tx_slots_rid_ || rid == rx_bulk_rid_ ||
      rid == tx_bulk_rid_)
    return;
  if (auto* r = region(rid); r && !r->retired) retire(r);
}

// free_small policy: the first enlarged buffer takes the connection's slots, and the small
// buffer is unregistered and freed once its posted receives have completed (claims 6, 18).
void Connection::adopt_slots(Region* n) {
  if (!opts_.free_small || n->slots == 0) return;
  for (auto* ptr : {&rx_slots_rid_, &tx_slots_rid_}) {
    auto* cur = region(*ptr);
    if (cur && cur->small) {
      const std::uint32_t old = *ptr;
      *ptr = n->rid;
      release_if_unused(old);
    }
  }
}

// The slots live in `old`, which is going: move them to another enlarged buffer that has
// slots, or to a new small buffer (an idle connection shrinks back).
void Connection::relocate_slots_from(std::uint32_t old) {
  if (rx_slots_rid_ != old && tx_slots_rid_ != old) return;
  std::uint32_t target = 0;
  for (std::uint32_t rid : {rx_bulk_rid_, tx_bulk_rid_})
    if (rid && rid != old && region(rid)->slots > 0) target = rid;
  if (!target) {
    std::string why;
    auto* s = new_region(0, opts_.recv_slots + opts_.send_slots, false, &why);
    if (!s) {
      event("keeps its slots in the enlarged buffer: " + why);
      return;
    }
    s->small = true;
    target = s->rid;
    event(fmt::format("registered a new small buffer of {} bytes", s->bytes));
  }
  if (rx_slots_rid_ == old) rx_slots_rid_ = target;
  if (tx_slots_rid_ == old) tx_slots_rid_ = target;
}

std::string Connection::setup(rdma_cm_id* id) {
  cm_id_ = id;
  id->context = this;
  pd_ = ibv_alloc_pd(ctx_);
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
  auto* small = new_region(0, opts_.recv_slots + opts_.send_slots, false, &why);
  if (!small) return "cannot register the small buffer: " + why;
  small->small = true;
  rx_slots_rid_ = tx_slots_rid_ = small->rid;
  for (std::uint32_t i = 0; i < opts_.recv_slots; ++i)
    if (!post_recv_slot()) return "cannot post the receive slots: " + ibv_last_error();
  return "";
}

void Connection::set_peer(const Hello& h) {
  peer_ = h;
  credits_ = h.recv_slots;
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
  for (auto& [rid, r] : regions_) deregister(*r);
  regions_.clear();
  for (auto& [k, src] : rdv_mrs_) {
    if (opts_.budget) opts_.budget->release(src.mr->length);
    registered_ -= src.mr->length;
    ibv_dereg_mr(src.mr);
  }
  rdv_mrs_.clear();
}

void Connection::destroy_rest() {
  if (cq_) ibv_destroy_cq(cq_);
  cq_ = nullptr;
  if (pd_) ibv_dealloc_pd(pd_);
  pd_ = nullptr;
}

std::uint32_t Connection::rx_enlarged_size() const {
  auto it = regions_.find(rx_bulk_rid_);
  return it == regions_.end() ? 0 : static_cast<std::uint32_t>(it->second->data_bytes);
}

bool Connection::small_buffer_registered() const {
  return std::ranges::any_of(regions_, [](const auto& kv) { return kv.second->small; });
}

std::uint32_t Connection::piece_capacity() const {
  const std::uint32_t slot = std::min(opts_.slot_size, peer_.slot_size);
  return slot - static_cast<std::uint32_t>(kPieceHeaderBytes);
}

std::uint32_t Connection::threshold() const {
  return opts_.threshold ? opts_.threshold : piece_capacity();
}

bool Connection::post_recv_slot() {
  auto* r = region(rx_slots_rid_);
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
  if (tx_slots_busy_ >= opts_.send_slots) return {nullptr, 0};
  auto* r = region(tx_slots_rid_);
  if (!r || r->free_slots.empty()) return {nullptr, 0};
  const std::uint32_t i = r->free_slots.back();
  r->free_slots.pop_back();
  return {r, i};
}

// RFC-style flow control: the last credit is kept for a Credit message, so two sides that
// both ran out can always tell each other they reposted.
bool Connection::can_send(bool is_credit) const {
  if (state_ != State::Established) return false;
  if (credits_ < (is_credit ? 1u : 2u)) return false;
  if (tx_slots_busy_ >= opts_.send_slots) return false;
  auto it = regions_.find(tx_slots_rid_);
  return it != regions_.end() && !it->second->free_slots.empty();
}

bool Connection::send_message(const Message& msg, bool is_credit) {
  if (!can_send(is_credit)) return false;
  auto [r, i] = take_send_slot();
  Message m = msg;
  m.credits = static_cast<std::uint16_t>(std::min<std::uint32_t>(to_return_, 0xffff));
  const std::size_t n = encoded_size(m);
  if (n > std::min(opts_.slot_size, peer_.slot_size)) {
    r->free_slots.push_back(i);
    fail(fmt::format("internal: a {}-octet message does not fit a slot", n));
    return false;
  }
  encode(m, MutableByteSpan(r->slot(i), n));
  r->busy++;
  tx_slots_busy_++;
  if (post_one(qp_, {.op = IBV_WR_SEND,
                     .addr = r->slot(i),
                     .len = static_cast<std::uint32_t>(n),
                     .lkey = r->slot_mr->lkey,
                     .remote_addr = 0,
                     .rkey = 0,
                     .flags = IBV_SEND_SIGNALED,
                     .wr_id = make_wr_id(kSend, r->rid, i),
                     .imm = 0,
                     .compare_add = 0,
                     .swap = 0}) != 0) {
    r->busy--;
    tx_slots_busy_--;
    r->free_slots.push_back(i);
    fail("ibv_post_send: " + ibv_last_error());
    return false;
  }
  to_return_ -= m.credits;
  credits_--;
  if (m.type() == MsgType::Credit) stats_.credit_messages++;
  if (m.type() != MsgType::Piece || on_event) event("tx " + describe(m));
  return true;
}

std::expected<std::uint32_t, std::string> Connection::post(std::vector<Bytes> iov) {
  if (state_ == State::Failed || state_ == State::Closed)
    return std::unexpected(error_.empty() ? std::string("connection closed") : error_);
  std::uint64_t total = 0;
  for (const auto& e : iov) total += e.size();
  if (total > 0xffffffffULL)
    return std::unexpected(
        fmt::format("message of {} bytes: the protocol carries up to 4 GiB - 1", total));
  Outgoing o;
  const std::uint32_t seq = next_seq_++;
  o.seq = seq;
  o.iov = std::make_shared<std::vector<Bytes>>(std::move(iov));
  o.total = static_cast<std::uint32_t>(total);
  queue_.push_back(std::move(o));
  pump();
  return seq;
}

std::expected<std::uint32_t, std::string> Connection::post(ByteSpan message) {
  std::vector<Bytes> iov;
  iov.emplace_back(message.begin(), message.end());
  return post(std::move(iov));
}

std::optional<Received> Connection::try_recv() {
  if (delivered_.empty()) return std::nullopt;
  Received r = std::move(delivered_.front());
  delivered_.pop_front();
  return r;
}

bool Connection::tx_idle() const {
  return queue_.empty() && control_.empty() && tx_slots_busy_ == 0 && writes_in_flight_ == 0 &&
         rdv_mrs_.empty();
}

bool Connection::wants_pump() const {
  if (state_ != State::Established) return false;
  return !queue_.empty() || !control_.empty() || to_return_ >= credit_threshold() ||
         (opts_.idle_shrink.count() > 0 && remote_);
}

std::uint32_t Connection::credit_threshold() const {
  return std::max(2u, opts_.recv_slots / 2);
}

void Connection::pump() {
  if (state_ != State::Established) return;
  while (!control_.empty()) {
    // Only a Credit that returns credits may use the last one (see can_send).
    const bool returns = control_.front().type() == MsgType::Credit && to_return_ > 0;
    if (!send_message(control_.front(), returns)) break;
    control_.pop_front();
  }
  if (control_.empty()) {
    while (!queue_.empty() && state_ == State::Established && pump_one()) {
    }
    maybe_shrink();
  }
  // Nothing else carried the reposted slots back (nothing else could go, or nothing was
  // waiting): say it on its own. This may use the last credit, so it goes even when control
  // messages wait for a second one: two sides both down to one credit still make progress.
  if (to_return_ >= credit_threshold())
    send_message(Message{.credits = 0, .seq = 0, .body = Credit{}}, true);
}

void Connection::refuse_head() {
  if (!queue_.empty()) queue_.front().refused_elem = queue_.front().elem;
  refused_until_ = std::chrono::steady_clock::now() + opts_.refusal_backoff;
}

void Connection::reclaim() {
  if (reclaimed_ || (state_ != State::Closed && state_ != State::Failed) || !rdv_mrs_.empty())
    return;
  for (const auto& [rid, r] : regions_)
    if (r->busy != 0) return;  // flushed completions still to come
  for (auto& [rid, r] : regions_) deregister(*r);
  regions_.clear();
  rx_slots_rid_ = tx_slots_rid_ = rx_bulk_rid_ = tx_bulk_rid_ = 0;
  reclaimed_ = true;
  event("over: every buffer unregistered and freed");
}

bool Connection::element_is_bulk(const Outgoing& o) const {
  if (opts_.mode == Mode::Pieces || peer_.mode == Mode::Pieces) return false;
  if ((*o.iov)[o.elem].size() <= threshold()) return false;  // claims 3-4: per element
  if (o.refused_elem == o.elem) return false;
  return std::chrono::steady_clock::now() >= refused_until_;
}

bool Connection::pump_one() {
  Outgoing& o = queue_.front();
  while (o.elem < o.iov->size() && o.elem_off == (*o.iov)[o.elem].size()) {
    o.elem++;
    o.elem_off = 0;
  }
  if (o.elem == o.iov->size() && (o.total > 0 || o.empty_sent)) {
    stats_.messages_sent++;
    stats_.bytes_sent += o.total;
    queue_.pop_front();
    return true;
  }
  if (o.total == 0) {
    // An empty message is one empty Piece.
    if (!send_message(Message{.credits = 0, .seq = o.seq, .body = Piece{0, 0, {}}})) return false;
    stats_.pieces_sent++;
    o.empty_sent = true;
    return true;
  }
  return element_is_bulk(o) ? send_bulk(o) : send_piece(o);
}

bool Connection::send_piece(Outgoing& o) {
  // Gathers from this element and the small ones after it, up to what a slot holds.
  const std::uint32_t cap = piece_capacity();
  ByteSpan data;
  std::size_t elem = o.elem, off = o.elem_off, taken = 0;
  scratch_.clear();
  while (elem < o.iov->size() && taken < cap) {
    const Bytes& e = (*o.iov)[elem];
    if (off == e.size()) {
      elem++;
      off = 0;
      continue;
    }
    if (elem != o.elem && e.size() > threshold() && opts_.mode != Mode::Pieces &&
        peer_.mode != Mode::Pieces)
      break;  // a large element after small ones: it goes its own way
    const std::size_t n = std::min<std::size_t>(cap - taken, e.size() - off);
    scratch_.insert(scratch_.end(), e.begin() + static_cast<std::ptrdiff_t>(off),
                    e.begin() + static_cast<std::ptrdiff_t>(off + n));
    taken += n;
    off += n;
  }
  data = scratch_;
  if (!send_message(Message{.credits = 0, .seq = o.seq, .body = Piece{o.total, o.msg_off, data}}))
    return false;
  stats_.pieces_sent++;
  o.elem = elem;
  o.elem_off = off;
  o.msg_off += static_cast<std::uint32_t>(taken);
  return true;
}

bool Connection::send_bulk(Outgoing& o) {
  Bytes& e = (*o.iov)[o.elem];
  const std::size_t remaining = e.size() - o.elem_off;
  if (opts_.mode == Mode::Rendezvous) {
    if (!remote_) {
      if (awaiting_ack_) return false;
      const auto want =
          static_cast<std::uint32_t>(std::min<std::size_t>({remaining, kMaxRendezvous, peer_cap_}));
      if (!send_message(Message{.credits = 0, .seq = o.seq, .body = EnlargeReq{want}}))
        return false;
      awaiting_ack_ = true;
      requested_ = want;
      stats_.enlarge_requests++;
      return true;
    }
    if (!token_ || !can_send(false)) return false;
    const std::size_t chunk = std::min<std::size_t>(remaining, remote_->size);
    // Register-per-message: the source itself, in place.
    if (opts_.budget && !opts_.budget->try_charge(chunk)) {
      // This side cannot register the source: pieces, and the peer's buffer goes back.
      event(fmt::format("cannot register {} bytes of the message: over the budget; pieces", chunk));
      control_.push_back(Message{.credits = 0, .seq = 0, .body = Release{remote_->stag}});
      remote_.reset();
      token_ = false;
      refuse_head();
      return true;
    }
    auto* mr = ibv_reg_mr(pd_, e.data() + o.elem_off, chunk, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) {
      if (opts_.budget) opts_.budget->release(chunk);
      fail("ibv_reg_mr of the message: " + ibv_last_error());
      return false;
    }
    registered_ += chunk;
    stats_.registrations++;
    stats_.peak_registered = std::max(stats_.peak_registered, registered_);
    const std::uint64_t key = next_rdv_++;
    rdv_mrs_[key] = RdvSource{mr, o.iov};
    if (post_one(qp_, {.op = IBV_WR_RDMA_WRITE,
                       .addr = e.data() + o.elem_off,
                       .len = static_cast<std::uint32_t>(chunk),
                       .lkey = mr->lkey,
                       .remote_addr = remote_->to,
                       .rkey = remote_->stag,
                       .flags = IBV_SEND_SIGNALED,
                       .wr_id = kRdvWrite << 56 | key,
                       .imm = 0,
                       .compare_add = 0,
                       .swap = 0}) != 0) {
      fail("ibv_post_send (RDMA Write): " + ibv_last_error());
      return false;
    }
    if (on_event)
      event(fmt::format("tx RDMA Write len={} stag={:#010x} to={:#x} (source registered in place)",
                        chunk, remote_->stag, remote_->to));
    send_message(Message{.credits = 0,
                         .seq = o.seq,
                         .body = Done{o.total, o.msg_off, static_cast<std::uint32_t>(chunk), 0}});
    remote_.reset();
    token_ = false;
    stats_.bulk_writes++;
    stats_.bulk_bytes += chunk;
    o.elem_off += chunk;
    o.msg_off += static_cast<std::uint32_t>(chunk);
    return true;
  }

  // The largest buffer worth asking for: ours, or less when the peer granted less before.
  const std::uint32_t cap = std::min(opts_.max_enlarged, peer_cap_);
  const auto want = static_cast<std::uint32_t>(std::min<std::size_t>(remaining, cap));
  if (!remote_ || remote_->size < want) {
    if (awaiting_ack_) return false;
    // Room for `depth` of these at once, and at least twice the old buffer, so a stream of
    // growing messages does not ask every time.
    std::uint64_t size = std::max<std::uint64_t>(std::uint64_t{want} * opts_.depth,
                                                 remote_ ? 2ull * remote_->size : 0);
    size = std::clamp<std::uint64_t>(size, std::min(opts_.min_enlarged, cap), cap);
    if (!send_message(Message{
            .credits = 0, .seq = o.seq, .body = EnlargeReq{static_cast<std::uint32_t>(size)}}))
      return false;
    awaiting_ack_ = true;
    requested_ = static_cast<std::uint32_t>(size);
    stats_.enlarge_requests++;
    return true;
  }
  if (!can_send(false)) return false;
  auto* b = region(tx_bulk_rid_);
  // The peer's buffer is used as a ring: chunks go at successive offsets and each Ready frees
  // the oldest, so several Writes are in flight. An element larger than the buffer goes in
  // halves, so that one half is copied out while the next is written.
  const std::size_t size = std::min<std::size_t>(remote_->size, b->data_bytes);
  const std::size_t chunk = remaining <= size ? remaining : std::max<std::size_t>(size / 2, 1);
  std::uint32_t at = 0;
  if (!ring_place(chunk, size, &at)) return false;
  // Claim 7: copy from the source into the larger registered buffer, then RDMA Write it.
  std::memcpy(b->mem.get() + at, e.data() + o.elem_off, chunk);
  if (post_one(qp_, {.op = IBV_WR_RDMA_WRITE,
                     .addr = b->mem.get() + at,
                     .len = static_cast<std::uint32_t>(chunk),
                     .lkey = b->data_mr->lkey,
                     .remote_addr = remote_->to + at,
                     .rkey = remote_->stag,
                     .flags = IBV_SEND_SIGNALED,
                     .wr_id = make_wr_id(kWrite, b->rid, 0),
                     .imm = 0,
                     .compare_add = 0,
                     .swap = 0}) != 0) {
    fail("ibv_post_send (RDMA Write): " + ibv_last_error());
    return false;
  }
  b->busy++;
  writes_in_flight_++;
  ring_.push_back(Chunk{at, static_cast<std::uint32_t>(chunk)});
  ring_head_ = at + static_cast<std::uint32_t>(chunk);
  stats_.most_writes_unanswered =
      std::max<std::uint64_t>(stats_.most_writes_unanswered, ring_.size());
  if (on_event)
    event(fmt::format("tx RDMA Write len={} stag={:#010x} to={:#x}", chunk, remote_->stag,
                      remote_->to + at));
  // Completion by message: the Done follows the Write on the same QP, and RDMAP completes it
  // only after the Write is placed (RFC 5040 §5.5), so the receiver never polls data.
  send_message(Message{.credits = 0,
                       .seq = o.seq,
                       .body = Done{o.total, o.msg_off, static_cast<std::uint32_t>(chunk), at}});
  last_bulk_ = std::chrono::steady_clock::now();
  stats_.bulk_writes++;
  stats_.bulk_bytes += chunk;
  o.elem_off += chunk;
  o.msg_off += static_cast<std::uint32_t>(chunk);
  return true;
}

// Where a chunk of n bytes goes in the peer's buffer of `size` bytes, if it fits now: after
// the newest chunk, or at the start when the end is too short and the start is free.
bool Connection::ring_place(std::size_t n, std::size_t size, std::uint32_t* at) const {
  if (ring_.empty()) {
    *at = 0;
    return n <= size;
  }
  const std::size_t oldest = ring_.front().at;
  if (ring_head_ > oldest) {  // free: [head, size) and [0, oldest)
    if (ring_head_ + n <= size) {
      *at = ring_head_;
      return true;
    }
    *at = 0;
    return n <= oldest;
  }
  *at = ring_head_;  // wrapped: free [head, oldest)
  return ring_head_ + n <= oldest;
}

void Connection::maybe_shrink() {
  if (opts_.mode != Mode::Enlarge || opts_.idle_shrink.count() == 0 || !remote_ || !ring_.empty() ||
      awaiting_ack_ || writes_in_flight_ > 0 || !queue_.empty())
    return;
  if (std::chrono::steady_clock::now() - last_bulk_ < opts_.idle_shrink) return;
  if (!send_message(Message{.credits = 0, .seq = 0, .body = Release{remote_->stag}})) return;
  stats_.releases_sent++;
  event(fmt::format("idle for {} ms: released the peer's {}-byte buffer", opts_.idle_shrink.count(),
                    remote_->size));
  remote_.reset();
  const std::uint32_t old = tx_bulk_rid_;
  tx_bulk_rid_ = 0;
  relocate_slots_from(old);
  release_if_unused(old);
}

void Connection::deliver_part(std::uint32_t seq, std::uint32_t total, std::uint32_t offset,
                              ByteSpan data) {
  if (!assembly_) {
    if (seq != expected_rx_seq_)
      return protocol_error(fmt::format("message seq {} where {} was next", seq, expected_rx_seq_));
    if (offset != 0)
      return protocol_error(fmt::format("message seq {} starts at offset {}", seq, offset));
    if (total > opts_.max_message)
      return protocol_error(fmt::format("message seq {} of {} bytes: this side takes at most {}",
                                        seq, total, opts_.max_message));
    assembly_ = Assembly{};
    assembly_->seq = seq;
    assembly_->total = total;
    // Grows with the data that arrives, so a claimed total alone allocates little.
    assembly_->data.reserve(std::min<std::uint32_t>(total, 1u << 20));
  } else if (assembly_->seq != seq || assembly_->total != total || offset != assembly_->got) {
    return protocol_error(fmt::format(
        "part of seq {} (total {}, offset {}) while seq {} (total {}) expects offset {}", seq,
        total, offset, assembly_->seq, assembly_->total, assembly_->got));
  }
  // Parts arrive at exactly the next offset (checked above), so they append.
  assembly_->data.insert(assembly_->data.end(), data.begin(), data.end());
  assembly_->got += static_cast<std::uint32_t>(data.size());
  if (assembly_->got == total) {
    stats_.messages_received++;
    stats_.bytes_received += total;
    delivered_.push_back(Received{assembly_->seq, std::move(assembly_->data)});
    assembly_.reset();
    expected_rx_seq_++;
  }
}

void Connection::on_enlarge_req(std::uint32_t seq, const EnlargeReq& r) {
  // This side's limit decides, whatever the request says (both sides run one mode: the
  // hello of a peer in another mode is refused).
  const bool rendezvous = opts_.mode == Mode::Rendezvous;
  const std::uint32_t size = rendezvous ? std::min({r.size, kMaxRendezvous, opts_.max_message})
                                        : std::min(r.size, opts_.max_enlarged);
  // Claims 000/15-17, 001/15-17: allocate and register during the communication phase,
  // for this connection only.
  std::string why;
  const std::uint32_t slots =
      opts_.free_small && !rendezvous ? opts_.recv_slots + opts_.send_slots : 0;
  auto* n = new_region(size, slots, /*remote_write=*/true, &why);
  if (!n) {
    const bool budget = why.find("budget") != std::string::npos;
    const std::uint64_t avail = opts_.budget ? opts_.budget->available() : 0;
    control_.push_back(Message{
        .credits = 0,
        .seq = seq,
        .body =
            EnlargeNak{budget ? NakReason::Budget : NakReason::Register,
                       static_cast<std::uint32_t>(std::min<std::uint64_t>(avail, 0xffffffff))}});
    stats_.refusals_sent++;
    event(fmt::format("refused a {}-byte buffer: {}", size, why));
    return;
  }
  stats_.buffers_provisioned++;
  const std::uint32_t old = rx_bulk_rid_;
  rx_bulk_rid_ = n->rid;
  adopt_slots(n);
  if (old) {
    // A still larger message: the previous buffer is unregistered and freed.
    relocate_slots_from(old);
    release_if_unused(old);
    stats_.buffers_freed++;
  }
  event(fmt::format("provisioned a {}-byte buffer (stag {:#010x}) for seq {}", size,
                    n->data_mr->rkey, seq));
  control_.push_back(Message{
      .credits = 0,
      .seq = seq,
      .body = EnlargeAck{size, n->data_mr->rkey, reinterpret_cast<std::uint64_t>(n->mem.get())}});
}

void Connection::on_enlarge_ack(const EnlargeAck& a) {
  if (!awaiting_ack_) return protocol_error("EnlargeAck without an EnlargeReq");
  if (a.size == 0 || a.size > requested_)
    return protocol_error(
        fmt::format("EnlargeAck of {} bytes for a request of {}", a.size, requested_));
  awaiting_ack_ = false;
  stats_.enlargements++;
  // Less than asked: the peer's largest. Later data goes through it in parts.
  if (a.size < requested_) peer_cap_ = a.size;
  if (opts_.mode == Mode::Rendezvous) {
    remote_ = Remote{a.to, a.stag, a.size};
    token_ = true;
    return;
  }
  // The receiver answers every Done before it acts on a later EnlargeReq (it frees the old
  // buffer then), so nothing written to the old buffer is still unanswered.
  if (!ring_.empty())
    return protocol_error(fmt::format("EnlargeAck while {} Done(s) are unanswered", ring_.size()));
  // Claim 001/1: the sender provisions and registers its own larger buffer for this
  // connection.
  std::string why;
  const std::uint32_t slots = opts_.free_small ? opts_.recv_slots + opts_.send_slots : 0;
  auto* n = new_region(a.size, slots, /*remote_write=*/false, &why);
  if (!n) {
    event("cannot provision the sending side's buffer: " + why + "; releasing the peer's");
    control_.push_back(Message{.credits = 0, .seq = 0, .body = Release{a.stag}});
    remote_.reset();
    stats_.refusals++;
    refuse_head();
    // The peer freed its previous buffer for this one: ours has nothing to pair with.
    const std::uint32_t old = tx_bulk_rid_;
    tx_bulk_rid_ = 0;
    relocate_slots_from(old);
    release_if_unused(old);
    return;
  }
  const std::uint32_t old = tx_bulk_rid_;
  tx_bulk_rid_ = n->rid;
  adopt_slots(n);
  if (old) {
    relocate_slots_from(old);
    release_if_unused(old);
  }
  remote_ = Remote{a.to, a.stag, a.size};
  ring_head_ = 0;
  last_bulk_ = std::chrono::steady_clock::now();
}

void Connection::on_done(std::uint32_t seq, const Done& d) {
  auto* b = region(rx_bulk_rid_);
  if (!b) return protocol_error(fmt::format("Done for seq {} with no enlarged buffer", seq));
  if (std::uint64_t{d.at} + d.length > b->data_bytes)
    return protocol_error(
        fmt::format("Done of {} bytes at {} of a {}-byte buffer", d.length, d.at, b->data_bytes));
  // Claim 000/19: copy the data from the provisioned buffer to its destination.
  deliver_part(seq, d.total, d.offset, ByteSpan(b->mem.get() + d.at, d.length));
  if (state_ != State::Established) return;
  if (peer_.mode == Mode::Rendezvous) {
    const std::uint32_t old = rx_bulk_rid_;
    rx_bulk_rid_ = 0;
    release_if_unused(old);
    stats_.buffers_freed++;
    return;
  }
  // Copied out: that part of the buffer is free. Readys still waiting to go are merged.
  if (!control_.empty() && control_.back().type() == MsgType::Ready) {
    std::get<Ready>(control_.back().body).count++;
    control_.back().seq = seq;
  } else {
    control_.push_back(Message{.credits = 0, .seq = seq, .body = Ready{1}});
  }
}

void Connection::on_release(const Release& r) {
  auto* b = region(rx_bulk_rid_);
  if (!b || b->data_mr->rkey != r.stag)
    return protocol_error(
        fmt::format("Release of stag {:#010x}, which is not this side's buffer", r.stag));
  const std::uint32_t old = rx_bulk_rid_;
  rx_bulk_rid_ = 0;
  relocate_slots_from(old);
  release_if_unused(old);
  stats_.buffers_freed++;
  event("the peer released its enlarged buffer (idle)");
}

void Connection::handle(const Message& m) {
  credits_ += m.credits;
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
      if (!awaiting_ack_) return protocol_error("EnlargeNak without an EnlargeReq");
      awaiting_ack_ = false;
      stats_.refusals++;
      refuse_head();
      return;
    case MsgType::Done:
      return on_done(m.seq, std::get<Done>(m.body));
    case MsgType::Ready: {
      const std::uint32_t n = std::get<Ready>(m.body).count;
      if (n > ring_.size())
        return protocol_error(
            fmt::format("Ready for {} Done(s) while {} are unanswered", n, ring_.size()));
      ring_.erase(ring_.begin(), ring_.begin() + n);
      return;
    }
    case MsgType::Release:
      return on_release(std::get<Release>(m.body));
    case MsgType::Credit:
      return;
    case MsgType::Cycle: {
      const auto n = std::min(std::get<Cycle>(m.body).count, 2 * peer_.recv_slots);
      for (std::uint32_t i = 0; i < n; ++i)
        control_.push_back(Message{.credits = 0, .seq = 0, .body = Credit{}});
      return;
    }
  }
}

void Connection::drain_cq() {
  ibv_wc wcs[32];
  for (;;) {
    const int n = ibv_poll_cq(cq_, 32, wcs);
    if (n <= 0) break;
    for (int k = 0; k < n; ++k) complete(wcs[k]);
  }
  pump();
  reclaim();
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
  if (kind == kRdvWrite) {
    auto it = rdv_mrs_.find(wc.wr_id & ((1ULL << 56) - 1));
    if (it != rdv_mrs_.end()) {
      if (opts_.budget) opts_.budget->release(it->second.mr->length);
      registered_ -= it->second.mr->length;
      stats_.deregistrations++;
      ibv_dereg_mr(it->second.mr);
      rdv_mrs_.erase(it);
    }
    return;
  }
  auto* r = region(wr_rid(wc.wr_id));
  if (!r) return;
  if (kind == kRecv) {
    // A message that arrived before the disconnect was seen is still delivered.
    if (wc.status == IBV_WC_SUCCESS && (state_ == State::Established || state_ == State::Closed)) {
      auto m = decode(ByteSpan(r->slot(wr_slot(wc.wr_id)), wc.byte_len));
      if (!m) {
        protocol_error(m.error().what);
      } else {
        if (m->type() != MsgType::Piece || on_event) event("rx " + describe(*m));
        handle(*m);
      }
    }
    r = region(wr_rid(wc.wr_id));  // handling may have moved the slots, never freed this one
    r->busy--;
    r->recv_posted--;
    r->free_slots.push_back(wr_slot(wc.wr_id));
    maybe_free(r);
    if (state_ == State::Established && post_recv_slot()) to_return_++;
    return;
  }
  if (kind == kSend) {
    tx_slots_busy_--;
    r->free_slots.push_back(wr_slot(wc.wr_id));
  } else if (kind == kWrite) {
    writes_in_flight_--;
  }
  r->busy--;
  maybe_free(r);
}

}  // namespace iwarp::enlarge
