// One connection of the buffer-enlargement protocol (seeds 000-002), over the verbs shim's
// public API only: its own protection domain, CQ and QP, a small pre-registered buffer of
// receive and send slots, and, when a message needs it, an enlarged buffer on each side for
// this connection alone.
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
#include "enlarge/options.hpp"
#include "enlarge/wire_format.hpp"
#include "verbs_shim/rdma_cm.hpp"
#include "verbs_shim/verbs.hpp"

namespace iwarp::enlarge {

// What a connection has done, for tests, the demo and the benchmark.
struct Stats {
  std::uint64_t messages_sent = 0, messages_received = 0;
  std::uint64_t bytes_sent = 0, bytes_received = 0;
  std::uint64_t pieces_sent = 0, pieces_received = 0;
  std::uint64_t bulk_writes = 0, bulk_bytes = 0;  // RDMA Writes into the peer's buffer
  std::uint64_t most_writes_unanswered = 0;       // the ring's deepest: Writes awaiting Ready
  std::uint64_t enlarge_requests = 0;             // EnlargeReq sent
  std::uint64_t enlargements = 0;                 // EnlargeAck received (sender side)
  std::uint64_t refusals = 0;                     // EnlargeNak received
  std::uint64_t releases_sent = 0;                // idle shrink (sender side)
  std::uint64_t buffers_provisioned = 0;          // receiver side: enlarged buffers made
  std::uint64_t buffers_freed = 0;                // receiver side: enlarged buffers freed
  std::uint64_t refusals_sent = 0;                // receiver side: EnlargeNak sent
  std::uint64_t small_freed = 0;                  // small buffers unregistered and freed
  std::uint64_t credit_messages = 0;
  std::uint64_t registrations = 0, deregistrations = 0;
  std::uint64_t peak_registered = 0;
};

struct Received {
  std::uint32_t seq = 0;
  Bytes data;
};

// The hello each side puts in the MPA private data (12 octets: "ENLG", version, mode, slot
// size be32, receive slots be16): protocol version, slot size, receive slots and mode, so each side
// knows how much the other's slots hold and how many credits it starts with.
struct Hello {
  std::uint32_t slot_size = 0;
  std::uint32_t recv_slots = 0;
  Mode mode = Mode::Enlarge;
};
Bytes encode_hello(const Hello& h);
std::expected<Hello, std::string> decode_hello(ByteSpan b);

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
  std::uint64_t registered_bytes() const { return registered_; }
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
  void drain_cq();  // handles every completion on the CQ
  void pump();      // sends what can go, runs the idle timer
  bool wants_pump() const;
  void disconnect();
  // Teardown in the verbs order: QP and id, then MRs (with the device stopped: CQ and PD).
  void destroy_qp_and_id();
  void destroy_rest();
  verbs::ibv_cq* cq() const { return cq_; }
  bool server_side = false;  // made by accepting a connection request

 private:
  struct Region {
    std::uint32_t rid = 0;
    std::unique_ptr<std::uint8_t[]> mem;
    std::size_t bytes = 0;
    // Two registrations of one allocation: the data area (remote write only on a receiver's
    // enlarged buffer) and the slots (local only), so an STag given to the peer never covers
    // posted receives or staged Sends.
    verbs::ibv_mr* data_mr = nullptr;
    verbs::ibv_mr* slot_mr = nullptr;
    std::size_t data_bytes = 0;  // bulk data area at the start
    std::uint32_t slots = 0;     // slot_size_ each, after the data area
    std::vector<std::uint32_t> free_slots;
    std::uint32_t busy = 0;         // slots posted or in flight, and RDMA Writes from it
    std::uint32_t recv_posted = 0;  // of those, receives posted (consumed only by messages)
    bool retired = false;           // no new use; freed once busy drops to 0
    bool small = false;             // the connection's original small buffer
    std::uint8_t* slot(std::uint32_t i) {
      return mem.get() + data_bytes + std::size_t{i} * slot_size;
    }
    std::uint32_t slot_size = 0;
  };
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
  struct Remote {
    std::uint64_t to = 0;
    std::uint32_t stag = 0;
    std::uint32_t size = 0;
  };
  struct Assembly {
    std::uint32_t seq = 0;
    std::uint32_t total = 0;
    Bytes data;
    std::uint32_t got = 0;
  };

  Region* new_region(std::size_t data_bytes, std::uint32_t slots, bool remote_write,
                     std::string* why);
  void deregister(Region& r);
  void reclaim();      // a connection that is over gives back all it registered
  void refuse_head();  // the head element goes in pieces; back off for the next ones
  void retire(Region* r);
  void maybe_free(Region* r);
  Region* region(std::uint32_t rid);
  bool post_recv_slot();
  // A send slot from the current send-slot region, or nullptr.
  std::pair<Region*, std::uint32_t> take_send_slot();
  bool send_message(const Message& m, bool is_credit = false);
  bool can_send(bool is_credit) const;
  void handle(const Message& m);
  void complete(const verbs::ibv_wc& wc);
  void release_if_unused(std::uint32_t rid);
  void adopt_slots(Region* n);
  void relocate_slots_from(std::uint32_t old);
  std::uint32_t credit_threshold() const;
  void deliver_part(std::uint32_t seq, std::uint32_t total, std::uint32_t offset, ByteSpan data);
  void on_enlarge_req(std::uint32_t seq, const EnlargeReq& r);
  void on_enlarge_ack(const EnlargeAck& a);
  void on_done(std::uint32_t seq, const Done& d);
  void on_release(const Release& r);
  bool pump_one();  // one step of the head message; false when blocked
  bool element_is_bulk(const Outgoing& o) const;
  bool send_piece(Outgoing& o);
  bool send_bulk(Outgoing& o);
  bool ring_place(std::size_t n, std::size_t size, std::uint32_t* at) const;
  void maybe_shrink();
  void protocol_error(std::string why);
  void event(const std::string& what);
  std::uint32_t piece_capacity() const;
  std::uint32_t threshold() const;

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
  std::uint64_t registered_ = 0;

  std::map<std::uint32_t, std::unique_ptr<Region>> regions_;
  std::uint32_t next_rid_ = 1;
  std::uint32_t rx_slots_rid_ = 0;  // where receive slots are posted from
  std::uint32_t tx_slots_rid_ = 0;  // where send slots are taken from
  std::uint32_t rx_bulk_rid_ = 0;   // the enlarged receive buffer (0: none)
  std::uint32_t tx_bulk_rid_ = 0;   // the sender's own larger buffer (0: none)

  Hello peer_;
  std::uint32_t credits_ = 0;    // receive slots the peer has posted for us
  std::uint32_t to_return_ = 0;  // our slots reposted since we last said so
  std::deque<Message> control_;  // control messages waiting for a slot or credit
  std::uint32_t tx_slots_busy_ = 0;
  Bytes scratch_;  // a Piece gathered from several small iovec elements

  std::deque<Outgoing> queue_;
  std::uint32_t next_seq_ = 1;
  std::optional<Remote> remote_;
  bool token_ = false;  // Rendezvous: the peer's one-message buffer may be written
  // Enlarge: the peer's buffer as a ring of written, unanswered chunks (oldest first).
  struct Chunk {
    std::uint32_t at = 0, len = 0;
  };
  std::deque<Chunk> ring_;
  std::uint32_t ring_head_ = 0;  // where the newest chunk ends
  bool awaiting_ack_ = false;
  std::uint32_t requested_ = 0;          // the size the outstanding EnlargeReq asked for
  std::uint32_t peer_cap_ = 0xffffffff;  // the largest buffer the peer grants
  bool reclaimed_ = false;
  std::uint32_t writes_in_flight_ = 0;
  std::chrono::steady_clock::time_point refused_until_{};
  std::chrono::steady_clock::time_point last_bulk_{};

  struct RdvSource {
    verbs::ibv_mr* mr = nullptr;
    std::shared_ptr<std::vector<Bytes>> keep;  // the message, alive until the Write completes
  };
  std::map<std::uint64_t, RdvSource> rdv_mrs_;  // Rendezvous: sources registered in place
  std::uint64_t next_rdv_ = 1;

  std::vector<verbs::ibv_wc> early_;  // receives completed before ESTABLISHED was handled
  std::optional<Assembly> assembly_;
  std::uint32_t expected_rx_seq_ = 1;
  std::deque<Received> delivered_;
};

}  // namespace iwarp::enlarge
