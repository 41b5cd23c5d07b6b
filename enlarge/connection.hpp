// One connection of the buffer-enlargement protocol, over the verbs shim's public API only:
// its own protection domain, CQ and QP, a small pre-registered buffer of receive and send
// slots, and, when a message needs it, an enlarged buffer on each side for this connection
// alone.
//
// Sender: each message (or each element of an iovec) is compared with the threshold. Below
// it, its bytes are copied into a pre-registered send slot and sent (Piece). Above it, the
// sender asks for a larger buffer (EnlargeReq); the receiver allocates and registers one and
// answers with its TO, STag and size (EnlargeAck); the sender provisions its own larger
// registered buffer, copies the data into it, RDMA Writes it to the receiver's buffer and
// then says so with a Done (completion by message, never by polling the data). The receiver
// copies the data to the message's destination and answers Ready. A refusal (EnlargeNak)
// sends the data in pieces. Messages leave in the order they were posted; both directions
// run independently. Flow control: the receiver's posted slots are credits, returned in
// every message's header (and by a Credit message when nothing else goes).
//
// The class is a façade over the pieces: Buffers (registered memory and the slots), Credits
// (flow control), PeerRing (the sender's view of the peer's buffer) and Reassembly (the
// receiver's message assembly). connection.cpp holds the lifecycle, Sends and completions,
// connection_send.cpp the sending side, connection_receive.cpp the receiving side.
//
// Not thread-safe: a Node and its connections are driven from one thread (Node::progress).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/bytes.hpp"
#include "enlarge/buffers.hpp"
#include "enlarge/credits.hpp"
#include "enlarge/options.hpp"
#include "enlarge/peer_ring.hpp"
#include "enlarge/reassembly.hpp"
#include "enlarge/stats.hpp"
#include "enlarge/wire_format.hpp"
#include "verbs_shim/rdma_cm.hpp"
#include "verbs_shim/verbs.hpp"

namespace iwarp::enlarge {

class Connection {
 public:
  enum class State : std::uint8_t { Connecting, Established, Closed, Failed };

  Connection(verbs::ibv_context* ctx, verbs::ibv_comp_channel* channel, const Options& opts,
             std::uint64_t id);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Queues a message made of the iovec's elements (one message at the receiver). Returns its
  // sequence number, or why it cannot be sent.
  std::expected<std::uint32_t, std::string> post(std::vector<Bytes> iov);
  std::expected<std::uint32_t, std::string> post(ByteSpan message);
  // The next message received in full, in order.
  std::optional<Received> try_recv();

  // Nothing queued or in flight on the sending side.
  bool tx_idle() const;
  std::size_t tx_queued() const { return queue_.size(); }
  State state() const { return state_; }
  const std::string& error() const { return error_; }
  std::uint64_t id() const { return id_; }
  const Stats& stats() const { return stats_; }
  // Bytes this connection has registered now (small buffers and enlarged ones).
  std::uint64_t registered_bytes() const { return buffers_.registered(); }
  // The receiver's enlarged buffer size (0: none) and the peer's buffer this side writes to.
  std::uint32_t rx_enlarged_size() const;
  std::uint32_t tx_enlarged_size() const { return remote_ ? remote_->size : 0; }
  bool small_buffer_registered() const;
  verbs::ibv_pd* pd() const { return pd_; }
  const Options& options() const { return opts_; }
  // Each protocol step, in words ("tx EnlargeReq seq=3 size=65536 credits=0"), for timelines.
  std::function<void(const std::string&)> on_event;

  // Node side.
  std::string setup(verbs::rdma_cm_id* id);  // PD, CQ, QP, small buffer, receives; "" or why
  void set_peer(const Hello& h);
  void set_established();
  void fail(std::string why, bool disconnect = true);
  void set_closed(std::string why);
  // Handles every completion on the CQ, then sends what can go (always, or with
  // `only_if_any` only when there was a completion). Whether there was one.
  bool drain_cq(bool only_if_any = false);
  // Sends what can go, runs the idle timer. With `defer_credit`, reposted slots that nothing
  // carried back wait (credit_waiting()) for the next message, or for the node's next
  // progress() call, rather than going in a Credit of their own at once.
  void pump(bool defer_credit = false);
  bool wants_pump() const;
  bool credit_waiting() const { return credit_waiting_; }
  void disconnect();
  // Teardown in the verbs order: QP and id, then MRs (with the device stopped: CQ and PD).
  void destroy_qp_and_id();
  void destroy_rest();
  verbs::ibv_cq* cq() const { return cq_; }
  bool server_side = false;  // made by accepting a connection request

 private:
  using Region = Buffers::Region;
  struct Outgoing {
    std::uint32_t seq = 0;
    // Shared with Rendezvous writes, which read the source in place until they complete.
    std::shared_ptr<std::vector<Bytes>> iov;
    std::uint32_t total = 0;
    std::size_t elem = 0;  // cursor: element, offset in it, offset in the message
    std::size_t elem_off = 0;
    std::uint32_t msg_off = 0;
    bool empty_sent = false;              // a 0-byte message goes as one empty Piece
    std::size_t refused_elem = SIZE_MAX;  // the element an enlargement was refused for
  };
  struct Remote {  // the peer's buffer this side writes to
    std::uint64_t to = 0;
    std::uint32_t stag = 0;
    std::uint32_t size = 0;
  };
  struct RdvSource {
    verbs::ibv_mr* mr = nullptr;
    std::shared_ptr<std::vector<Bytes>> keep;  // the message, alive until the Write completes
  };

  // connection.cpp: both directions.
  void reclaim();  // a connection that is over gives back all it registered
  bool post_recv_slot();
  // A send slot from the current send-slot buffer, or nullptr.
  std::pair<Region*, std::uint32_t> take_send_slot();
  // Adds `m` to the Send being filled, or posts that one and starts a new Send (a slot and a
  // credit) with it; false when no Send can start. `alone`: `m` must be a Send of its own
  // (a Credit answering a Cycle consumes one receive).
  bool send_message(const Message& m, bool is_credit = false, bool alone = false);
  // Posts the Send being filled: one message as itself, several as a Bundle.
  void flush_send();
  void start_send(Region* r, std::uint32_t slot, const Message& m, bool alone);
  // Whether a message of `n` octets still fits the Send being filled.
  bool fits_open_send(std::size_t n) const;
  // Data bytes a Piece appended to the Send being filled could carry (0: none open).
  std::uint32_t open_piece_room() const;
  bool can_send(bool is_credit) const;
  void handle(const Message& m);
  void complete(const verbs::ibv_wc& wc);
  void complete_recv(const verbs::ibv_wc& wc);
  std::uint32_t credit_threshold() const;
  void protocol_error(std::string why);
  void event(const std::string& what);

  // connection_send.cpp: the sending side.
  bool pump_one();  // one step of the head message; false when blocked
  bool element_is_bulk(const Outgoing& o) const;
  bool send_piece(Outgoing& o);
  bool send_bulk(Outgoing& o);
  bool send_rendezvous(Outgoing& o);
  bool write_from_source(Outgoing& o, std::size_t chunk);
  bool send_enlarged(Outgoing& o);
  bool write_chunk(Outgoing& o, Region* b, std::uint32_t at, std::size_t chunk);
  bool done_lost();
  bool request_buffer(std::uint32_t seq, std::uint32_t size);
  void finish_bulk_part(Outgoing& o, std::size_t chunk);
  void refuse_head();  // the head element goes in pieces; back off for the next ones
  void on_enlarge_ack(const EnlargeAck& a);
  void on_enlarge_nak();
  void on_ready(const Ready& r);
  void release_rendezvous_source(std::uint64_t key);
  void unregister_source(verbs::ibv_mr* mr);  // budget and count included
  void maybe_shrink();
  std::uint32_t piece_capacity() const;
  std::uint32_t threshold() const;

  // connection_receive.cpp: the receiving side.
  void deliver_part(std::uint32_t seq, std::uint32_t total, std::uint32_t offset, ByteSpan data);
  void on_enlarge_req(std::uint32_t seq, const EnlargeReq& r);
  void on_done(std::uint32_t seq, const Done& d);
  void on_release(const Release& r);
  void on_cycle(const Cycle& c);

  // Both directions.
  verbs::ibv_context* ctx_;
  verbs::ibv_comp_channel* channel_;
  Options opts_;
  std::uint64_t id_;
  State state_ = State::Connecting;
  std::string error_;
  verbs::rdma_cm_id* cm_id_ = nullptr;
  verbs::ibv_pd* pd_ = nullptr;
  verbs::ibv_cq* cq_ = nullptr;
  verbs::ibv_qp* qp_ = nullptr;
  Stats stats_;
  Buffers buffers_;
  Credits credits_;
  Hello peer_;
  std::deque<Message> control_;     // control messages waiting for a slot or credit
  std::uint32_t owed_credits_ = 0;  // Credits the peer's Cycle asked for, each a Send
  bool credit_waiting_ = false;     // a standalone Credit was held back (pump(true))
  // The Send being filled (several messages pack into one slot): records are written from
  // octet kHeaderBytes of the slot, so a Bundle header fits in front of them at the end.
  struct OpenSend {
    Region* r = nullptr;
    std::uint32_t slot = 0;
    std::size_t used = 0;  // octets of records written after the Bundle header's place
    std::uint32_t count = 0;
    bool whole = false;        // one message written at octet 0: nothing more fits
    bool credit_only = false;  // holds one Credit, which the next message replaces
    std::vector<std::string> events;
  };
  std::optional<OpenSend> open_;
  bool reclaimed_ = false;

  // The sending side.
  Bytes scratch_;  // a Piece gathered from several small iovec elements
  std::deque<Outgoing> queue_;
  std::uint32_t next_seq_ = 1;
  std::optional<Remote> remote_;
  bool token_ = false;  // Rendezvous: the peer's one-message buffer may be written
  PeerRing ring_;       // Enlarge: the peer's buffer as a ring of unanswered chunks
  bool awaiting_ack_ = false;
  bool growing_ = false;         // the outstanding EnlargeReq asks for a larger ring for a stream
  std::uint32_t requested_ = 0;  // the size the outstanding EnlargeReq asked for
  std::uint32_t peer_cap_ = 0xffffffff;  // the largest buffer the peer grants
  std::uint32_t writes_in_flight_ = 0;
  std::chrono::steady_clock::time_point refused_until_{};
  std::chrono::steady_clock::time_point last_bulk_{};
  std::map<std::uint64_t, RdvSource> rdv_mrs_;  // Rendezvous: sources registered in place
  std::uint64_t next_rdv_ = 1;

  // The receiving side.
  bool answer_pending_ = false;       // an EnlargeReq's EnlargeAck or EnlargeNak is not posted yet
  std::vector<verbs::ibv_wc> early_;  // receives completed before ESTABLISHED was handled
  Reassembly assembly_;
};

}  // namespace iwarp::enlarge
