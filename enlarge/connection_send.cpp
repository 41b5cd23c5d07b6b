// The sending side of a connection: messages queued by post() leave in order, each element in
// pieces through the send slots or, above the threshold, through an RDMA Write into a buffer
// the receiver provisioned (the enlarge mode keeps and reuses it; the Rendezvous mode asks
// for one per message); and the answers to the enlargement requests this side made.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "enlarge/connection.hpp"
#include "enlarge/connection_detail.hpp"
#include "verbs_shim/endpoint.hpp"

namespace iwarp::enlarge {

using namespace iwarp::verbs;
using namespace detail;

namespace {
// A message is cut to fill what is left of a Send only when at least this much data fits.
constexpr std::uint32_t kMinSplitPiece = 64;
// A Write of at least this much has its Done posted right behind it, alone if need be.
constexpr std::size_t kEarlyDoneBytes = 32 * 1024;
}  // namespace

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

// What one Piece holds: the smaller of the two sides' slots, less the Piece header.
std::uint32_t Connection::piece_capacity() const {
  const std::uint32_t slot = std::min(opts_.slot_size, peer_.slot_size);
  return slot - static_cast<std::uint32_t>(kPieceHeaderBytes);
}

std::uint32_t Connection::threshold() const {
  return opts_.threshold ? opts_.threshold : piece_capacity();
}

void Connection::refuse_head() {
  if (!queue_.empty()) queue_.front().refused_elem = queue_.front().elem;
  refused_until_ = std::chrono::steady_clock::now() + opts_.refusal_backoff;
}

// The threshold applies to each iovec element on its own, not to the whole message; an
// element refused an enlargement goes in pieces, and so do later ones during the back-off.
bool Connection::element_is_bulk(const Outgoing& o) const {
  if (opts_.mode == Mode::Pieces || peer_.mode == Mode::Pieces) return false;
  if ((*o.iov)[o.elem].size() <= threshold()) return false;
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
  // Gathers from this element and the small ones after it, up to what a slot holds; into the
  // Send being filled when the rest of the message fits there, or when a good part of a slot
  // is left (the rest goes in the next Send).
  const std::uint32_t room = open_piece_room();
  const std::uint32_t rest = o.total - o.msg_off;
  const std::uint32_t cap =
      room >= rest || room >= kMinSplitPiece ? std::min(room, rest) : piece_capacity();
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
  return opts_.mode == Mode::Rendezvous ? send_rendezvous(o) : send_enlarged(o);
}

// Asks the receiver for a buffer of `size` bytes (one EnlargeReq outstanding at a time).
bool Connection::request_buffer(std::uint32_t seq, std::uint32_t size) {
  if (!send_message(Message{.credits = 0, .seq = seq, .body = EnlargeReq{size}})) return false;
  awaiting_ack_ = true;
  requested_ = size;
  stats_.enlarge_requests++;
  return true;
}

// A part of the element was written and announced by a Done.
void Connection::finish_bulk_part(Outgoing& o, std::size_t chunk) {
  stats_.bulk_writes++;
  stats_.bulk_bytes += chunk;
  o.elem_off += chunk;
  o.msg_off += static_cast<std::uint32_t>(chunk);
}

// Rendezvous (the scheme the protocol is measured against): one buffer per message at the
// receiver, the source registered in place, both freed after the Write.
bool Connection::send_rendezvous(Outgoing& o) {
  const std::size_t remaining = (*o.iov)[o.elem].size() - o.elem_off;
  if (!remote_) {
    if (awaiting_ack_) return false;
    const auto want =
        static_cast<std::uint32_t>(std::min<std::size_t>({remaining, kMaxRendezvous, peer_cap_}));
    return request_buffer(o.seq, want);
  }
  if (!token_ || !can_send(false)) return false;
  const std::size_t chunk = std::min<std::size_t>(remaining, remote_->size);
  if (opts_.budget && !opts_.budget->try_charge(chunk)) {
    // This side cannot register the source: pieces, and the peer's buffer goes back.
    event(fmt::format("cannot register {} bytes of the message: over the budget; pieces", chunk));
    control_.push_back(Message{.credits = 0, .seq = 0, .body = Release{remote_->stag}});
    remote_.reset();
    token_ = false;
    refuse_head();
    return true;
  }
  return write_from_source(o, chunk);
}

// Registers `chunk` bytes of the source in place (already charged to the budget), RDMA
// Writes them to the peer's buffer and announces them with a Done.
bool Connection::write_from_source(Outgoing& o, std::size_t chunk) {
  std::uint8_t* src = (*o.iov)[o.elem].data() + o.elem_off;
  auto* mr = ibv_reg_mr(pd_, src, chunk, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) {
    if (opts_.budget) opts_.budget->release(chunk);
    fail("ibv_reg_mr of the message: " + ibv_last_error());
    return false;
  }
  buffers_.count_registration(chunk);
  const std::uint64_t key = next_rdv_++;
  rdv_mrs_[key] = RdvSource{mr, o.iov};
  if (post_one(qp_, {.op = IBV_WR_RDMA_WRITE,
                     .addr = src,
                     .len = static_cast<std::uint32_t>(chunk),
                     .lkey = mr->lkey,
                     .remote_addr = remote_->to,
                     .rkey = remote_->stag,
                     .flags = IBV_SEND_SIGNALED,
                     .wr_id = make_rdv_wr_id(key),
                     .imm = 0,
                     .compare_add = 0,
                     .swap = 0}) != 0) {
    fail("ibv_post_send (RDMA Write): " + ibv_last_error());
    return false;
  }
  if (on_event)
    event(fmt::format("tx RDMA Write len={} stag={:#010x} to={:#x} (source registered in place)",
                      chunk, remote_->stag, remote_->to));
  if (!send_message(
          Message{.credits = 0,
                  .seq = o.seq,
                  .body = Done{o.total, o.msg_off, static_cast<std::uint32_t>(chunk), 0}}))
    return done_lost();
  remote_.reset();
  token_ = false;
  finish_bulk_part(o, chunk);
  return true;
}

// The callers checked that the Done can go (in the open Send, or a new one): a Write whose
// Done could not follow would leave the peer's message with a gap it reports much later.
bool Connection::done_lost() {
  fail("internal: the Done of an RDMA Write found no Send to go in");
  return false;
}

// The Rendezvous source's Write completed: its registration goes.
void Connection::release_rendezvous_source(std::uint64_t key) {
  auto it = rdv_mrs_.find(key);
  if (it == rdv_mrs_.end()) return;
  stats_.deregistrations++;
  unregister_source(it->second.mr);
  rdv_mrs_.erase(it);
}

void Connection::unregister_source(ibv_mr* mr) {
  if (opts_.budget) opts_.budget->release(mr->length);
  buffers_.count_deregistration(mr->length);
  ibv_dereg_mr(mr);
}

// The enlarge mode: the sender asks the receiver for a larger buffer when the element does not
// fit the one it has, and otherwise writes the element through it.
bool Connection::send_enlarged(Outgoing& o) {
  const std::size_t remaining = (*o.iov)[o.elem].size() - o.elem_off;
  // The largest buffer worth asking for: ours, or less when the peer granted less before.
  const std::uint32_t cap = std::min(opts_.max_enlarged, peer_cap_);
  const auto want = static_cast<std::uint32_t>(std::min<std::size_t>(remaining, cap));
  if (awaiting_ack_) return false;  // a larger buffer is on its way: nothing goes meanwhile
  if (!remote_ || remote_->size < want) {
    // Room for `depth` of these at once, and at least twice the old buffer, so a stream of
    // growing messages does not ask every time.
    std::uint64_t size = std::max<std::uint64_t>(std::uint64_t{want} * opts_.depth,
                                                 remote_ ? 2ull * remote_->size : 0);
    size = std::clamp<std::uint64_t>(size, std::min(opts_.min_enlarged, cap), cap);
    return request_buffer(o.seq, static_cast<std::uint32_t>(size));
  }
  // The Done must be able to go right behind the Write: in the Send being filled, or a new one.
  if (!fits_open_send(kHeaderBytes + 16) && !can_send(false)) return false;
  // The send queue holds the Sends of the send slots and this many Writes (setup()).
  if (writes_in_flight_ >= opts_.send_slots + 4) return false;
  auto* b = buffers_.get(buffers_.tx_bulk);
  // An element larger than the buffer goes in halves, so that one half is copied out while
  // the next is written.
  const std::size_t size = std::min<std::size_t>(remote_->size, b->data_bytes);
  const std::size_t chunk = remaining <= size ? remaining : std::max<std::size_t>(size / 2, 1);
  std::uint32_t at = 0;
  if (!ring_.place(chunk, size, &at)) {
    // Multiple phases: a stream that fills the ring while more waits behind asks for one twice
    // as large (up to the cap); the receiver answers the Dones written so far first.
    if (queue_.size() > 1 && remote_->size < cap && can_send(false)) {
      growing_ = true;
      return request_buffer(
          o.seq, static_cast<std::uint32_t>(std::min<std::uint64_t>(cap, 2ull * remote_->size)));
    }
    return false;
  }
  return write_chunk(o, b, at, chunk);
}

// The sender copies the data from the source into its own larger registered buffer, then RDMA
// Writes it to the same offset of the receiver's buffer.
bool Connection::write_chunk(Outgoing& o, Region* b, std::uint32_t at, std::size_t chunk) {
  std::memcpy(b->mem.get() + at, (*o.iov)[o.elem].data() + o.elem_off, chunk);
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
  ring_.push(at, static_cast<std::uint32_t>(chunk));
  stats_.most_writes_unanswered =
      std::max<std::uint64_t>(stats_.most_writes_unanswered, ring_.unanswered());
  if (on_event)
    event(fmt::format("tx RDMA Write len={} stag={:#010x} to={:#x}", chunk, remote_->stag,
                      remote_->to + at));
  // Completion by message: the Done follows the Write on the same QP, and RDMAP completes it
  // only after the Write is placed (RFC 5040 §5.5), so the receiver never polls data.
  // The Dones of the Writes posted in one go share a Send (a Bundle), posted behind them; a
  // large chunk's Done goes at once, so the receiver copies it out while the next is written.
  if (!send_message(
          Message{.credits = 0,
                  .seq = o.seq,
                  .body = Done{o.total, o.msg_off, static_cast<std::uint32_t>(chunk), at}}))
    return done_lost();
  if (chunk >= kEarlyDoneBytes) flush_send();
  last_bulk_ = std::chrono::steady_clock::now();
  finish_bulk_part(o, chunk);
  return true;
}

void Connection::on_enlarge_ack(const EnlargeAck& a) {
  if (!awaiting_ack_) return protocol_error("EnlargeAck without an EnlargeReq");
  if (a.size == 0 || a.size > requested_)
    return protocol_error(
        fmt::format("EnlargeAck of {} bytes for a request of {}", a.size, requested_));
  awaiting_ack_ = false;
  growing_ = false;
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
    return protocol_error(
        fmt::format("EnlargeAck while {} Done(s) are unanswered", ring_.unanswered()));
  // The sender provisions and registers its own larger buffer for this connection too.
  std::string why;
  const std::uint32_t slots = opts_.free_small ? opts_.recv_slots + opts_.send_slots : 0;
  auto* n = buffers_.add(a.size, slots, /*remote_write=*/false, &why);
  if (!n) {
    event("cannot provision the sending side's buffer: " + why + "; releasing the peer's");
    control_.push_back(Message{.credits = 0, .seq = 0, .body = Release{a.stag}});
    remote_.reset();
    stats_.refusals++;
    refuse_head();
    // The peer freed its previous buffer for this one: ours has nothing to pair with.
    buffers_.drop_role(&buffers_.tx_bulk);
    return;
  }
  buffers_.replace_role(&buffers_.tx_bulk, n);
  remote_ = Remote{a.to, a.stag, a.size};
  ring_.restart();
  last_bulk_ = std::chrono::steady_clock::now();
}

void Connection::on_enlarge_nak() {
  if (!awaiting_ack_) return protocol_error("EnlargeNak without an EnlargeReq");
  awaiting_ack_ = false;
  stats_.refusals++;
  if (growing_ && remote_) {
    // Only a larger ring was refused: the one there is still carries the data; ask no more.
    growing_ = false;
    peer_cap_ = remote_->size;
    return;
  }
  refuse_head();
}

void Connection::on_ready(const Ready& r) {
  stats_.readys_received++;
  if (!ring_.answer(r.count))
    return protocol_error(
        fmt::format("Ready for {} Done(s) while {} are unanswered", r.count, ring_.unanswered()));
}

// A sender that has not written through its enlarged buffer for idle_shrink releases it: the
// receiver unregisters and frees its side, and this side its own.
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
  buffers_.drop_role(&buffers_.tx_bulk);
}

}  // namespace iwarp::enlarge
