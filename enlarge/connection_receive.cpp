// The receiving side of a connection: pieces and Write parts assembled into messages, and the
// receiver's decisions on the sender's enlargement requests (provision a buffer, refuse, free
// it when the sender releases it).
#include <fmt/format.h>

#include <algorithm>

#include "enlarge/connection.hpp"
#include "enlarge/connection_detail.hpp"

namespace iwarp::enlarge {

using namespace detail;

void Connection::deliver_part(std::uint32_t seq, std::uint32_t total, std::uint32_t offset,
                              ByteSpan data) {
  auto completed = assembly_.add(seq, total, offset, data);
  if (!completed) return protocol_error(completed.error());
  if (*completed) {
    stats_.messages_received++;
    stats_.bytes_received += total;
  }
}

// The receiver allocates and registers a buffer for this connection alone, during the
// communication phase, and answers with its TO, STag and size; when it cannot (budget or
// registration), it refuses and the sender sends the data in pieces.
void Connection::on_enlarge_req(std::uint32_t seq, const EnlargeReq& r) {
  // The sender has one EnlargeReq outstanding at a time: it asks again only after the answer
  // (a Bundle of requests would make this side register buffer after buffer).
  if (answer_pending_)
    return protocol_error(
        fmt::format("EnlargeReq for seq {} before the previous one was answered", seq));
  answer_pending_ = true;
  // This side's limit decides, whatever the request says (both sides run one mode: the
  // hello of a peer in another mode is refused).
  const bool rendezvous = opts_.mode == Mode::Rendezvous;
  const std::uint32_t size = rendezvous ? std::min({r.size, kMaxRendezvous, opts_.max_message})
                                        : std::min(r.size, opts_.max_enlarged);
  std::string why;
  const std::uint32_t slots =
      opts_.free_small && !rendezvous ? opts_.recv_slots + opts_.send_slots : 0;
  auto* n = buffers_.add(size, slots, /*remote_write=*/true, &why);
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
  // A still larger message: the previous buffer is unregistered and freed.
  if (buffers_.replace_role(&buffers_.rx_bulk, n)) stats_.buffers_freed++;
  event(fmt::format("provisioned a {}-byte buffer (stag {:#010x}) for seq {}", size,
                    n->data_mr->rkey, seq));
  control_.push_back(Message{
      .credits = 0,
      .seq = seq,
      .body = EnlargeAck{size, n->data_mr->rkey, reinterpret_cast<std::uint64_t>(n->mem.get())}});
}

// The receiver copies the written data from its provisioned buffer to the message's
// destination, then says that part of the buffer is free again (Ready).
void Connection::on_done(std::uint32_t seq, const Done& d) {
  stats_.dones_received++;
  auto* b = buffers_.get(buffers_.rx_bulk);
  if (!b) return protocol_error(fmt::format("Done for seq {} with no enlarged buffer", seq));
  if (std::uint64_t{d.at} + d.length > b->data_bytes)
    return protocol_error(
        fmt::format("Done of {} bytes at {} of a {}-byte buffer", d.length, d.at, b->data_bytes));
  deliver_part(seq, d.total, d.offset, ByteSpan(b->mem.get() + d.at, d.length));
  if (state_ != State::Established) return;
  if (peer_.mode == Mode::Rendezvous) {
    // One buffer per message: freed once copied out.
    const std::uint32_t old = buffers_.rx_bulk;
    buffers_.rx_bulk = 0;
    buffers_.release_if_unused(old);
    stats_.buffers_freed++;
    return;
  }
  // Readys still waiting to go are merged.
  if (!control_.empty() && control_.back().type() == MsgType::Ready) {
    std::get<Ready>(control_.back().body).count++;
    control_.back().seq = seq;
  } else {
    control_.push_back(Message{.credits = 0, .seq = seq, .body = Ready{1}});
  }
}

// The sender no longer uses the enlarged buffer: the receiver unregisters and frees it.
void Connection::on_release(const Release& r) {
  auto* b = buffers_.get(buffers_.rx_bulk);
  if (!b || b->data_mr->rkey != r.stag)
    return protocol_error(
        fmt::format("Release of stag {:#010x}, which is not this side's buffer", r.stag));
  buffers_.drop_role(&buffers_.rx_bulk);
  stats_.buffers_freed++;
  event("the peer released its enlarged buffer (idle)");
}

// The peer frees a buffer in which it posted receives: it needs that many messages to consume
// them. At most twice its receive slots, so a Cycle cannot make this side queue without limit.
void Connection::on_cycle(const Cycle& c) {
  const auto n = std::min(c.count, 2 * peer_.recv_slots);
  owed_credits_ = std::min(owed_credits_ + n, 2 * peer_.recv_slots);
}

}  // namespace iwarp::enlarge
