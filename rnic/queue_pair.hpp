// A reliable-connected queue pair (RFC 5040 §5): send and receive queues of work requests, the
// outbound and inbound read queues (ORD/IRD, RFC 5040 §6.3, RFC 6581), the state machine, and
// the transmit and receive engines that turn work requests into DDP segments on an MPA stream
// and received segments into placement and completions. Transmit is in qp_tx.cpp, receive in
// qp_rx.cpp, errors (Terminate and flush) in qp_error.cpp.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/container/small_vector.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/wire_error.hpp"
#include "ddp/rdmap_headers.hpp"
#include "ddp/segment.hpp"
#include "ddp/segmentation.hpp"
#include "mpa/fpdu_reader.hpp"
#include "mpa/negotiation.hpp"
#include "mpa/segment_receiver.hpp"
#include "rnic/completion_queue.hpp"
#include "rnic/device.hpp"
#include "rnic/hole_clock.hpp"
#include "rnic/qp_types.hpp"
#include "rnic/recv_buffer.hpp"
#include "rnic/rx_observer.hpp"
#include "rnic/rx_segment_shaper.hpp"
#include "rnic/segment_input.hpp"
#include "rnic/transport.hpp"
#include "rnic/work_request.hpp"

namespace iwarp::rnic {

struct QpLiveState;  // rnic/live_state.hpp

// A socket error as a QP's error reason says it; a timeout names the LLP timeout that caused it
// (CmOptions::llp_timeout).
std::string llp_error(const boost::system::error_code& ec);

class SharedReceiveQueue {
 public:
  SharedReceiveQueue(PdHandle pd, std::uint32_t max_wr, std::uint32_t max_sge)
      : pd_(pd), max_wr_(max_wr), max_sge_(max_sge) {}
  // 0, or an errno value with `why` filled in.
  int post_recv(const RecvWr& wr, std::string* why);
  // The oldest receive WR; with a wait, blocks up to it for one to be posted (see
  // QpInit::rnr_wait).
  std::optional<RecvWr> take(std::chrono::milliseconds wait = std::chrono::milliseconds(0));
  std::size_t size() const;
  PdHandle pd() const { return pd_; }

 private:
  mutable std::mutex mu_;
  std::condition_variable posted_;
  PdHandle pd_;
  std::uint32_t max_wr_, max_sge_;
  std::deque<RecvWr> q_;
};

// Sees every octet a connection sends and receives (for pcap recording). Called on the engine
// thread.
class WireTap {
 public:
  virtual ~WireTap() = default;
  virtual void on_data(bool outbound, ByteSpan data) = 0;
  // What the QP sends, with where each FPDU ends in `data`, so a capture can cut TCP segments
  // at FPDU boundaries as RFC 5044 §8 asks of a sender (and as Wireshark expects).
  virtual void on_fpdus(bool outbound, ByteSpan data, std::span<const std::size_t> /*ends*/) {
    on_data(outbound, data);
  }
  virtual void on_close(bool outbound) = 0;
};

struct QpInit {
  PdHandle pd = 0;
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  std::shared_ptr<SharedReceiveQueue> srq;
  QpCaps caps;
  bool sq_sig_all = false;
  // Owners of the CQs above (and anything else the QP must not outlive), held as long as the
  // QP object lives: the engine may still complete into them after the application let go.
  std::vector<std::shared_ptr<void>> keep_alive;
  // Receiver-not-ready emulation, local and invisible on the wire: a Send that finds no receive
  // WR waits this long for the application to post one before it is the DDP error of RFC 5041
  // §7.2 (a Terminate). iWARP has no RNR NAK; programs written for InfiniBand (qperf's rc_bw
  // keeps 1024 Sends in flight and re-posts receives as it polls) count on one. The wait holds
  // the engine thread, so every QP of the device pauses meanwhile, and a peer can make it wait
  // this long per Send: 0 (the default), opt-in for benchmarks that need it (the drop-in's
  // RNIC_RNR_WAIT_MS / rnic run --rnr-wait, at most 5000).
  std::chrono::milliseconds rnr_wait{0};
};

// What the connection manager hands a QP when the MPA exchange is done.
struct StreamSetup {
  mpa::ConnectionParams params;
  bool initiator = true;
  std::size_t emss = 1448;  // effective MSS of the socket; sets MULPDU (RFC 5044 §4.1)
  // Testing aid: send more RDMA Reads than the negotiated ORD allows, so a peer's IRD
  // enforcement can be exercised. Never set in normal use.
  bool ignore_ord = false;
  // Initiator: hold every FPDU (the RTR too) this long after entering RTS (see
  // CmOptions::first_fpdu_delay). Work requests posted meanwhile wait in the send queue.
  std::chrono::milliseconds first_fpdu_delay{0};
  // How long a Terminate or a disconnect may wait for a peer that takes nothing (a zero
  // window) before the stream is aborted and the close reported (see kCloseTimeout).
  std::chrono::milliseconds close_timeout = kCloseTimeout;
};

// How the receive side gets its TCP segments: the receive engine works on TCP segments, in any
// order, so data beyond a hole can be placed before the hole closes (qp_ooo.cpp).
struct RxOptions {
  // Sequence number of the first octet after the MPA frame (a replay's segments carry real
  // sequence numbers; a live socket's stream is numbered from here).
  TcpSeq stream_start{0};
  // Live only: makes what re-cuts the received stream into segments (a simulation; none: each
  // read is one in-order segment).
  RxShaperFactory shaper;
  std::shared_ptr<RxObserver> observer;  // timeline events (engine thread)
  // Live segment tap only: octets a tapped segment may reach beyond the in-order point (the
  // socket's receive buffer, which bounds the window TCP advertises); 0: no bound.
  std::uint32_t tap_window = 0;
  // What the segment path does beyond a hole; Discard only with tap_window set (a live segment
  // tap: the socket brings the octets again), Hold otherwise.
  BeyondHoles beyond_holes = BeyondHoles::Place;
  // Payload runs of at least this many octets are read straight into their target
  // (kDirectReadMin; kNoDirectReads: none). Live sockets only.
  std::size_t direct_min = kDirectReadMin;
};

// Why a connection ended, reported once to the connection manager.
struct QpClosed {
  enum class Cause : std::uint8_t {
    LocalDisconnect,
    PeerClosed,
    TerminateSent,
    TerminateReceived,
    LocalError
  };
  Cause cause;
  std::string detail;
};

class QueuePair : public std::enable_shared_from_this<QueuePair>,
                  public MemoryUser,
                  public SegmentInput {
 public:
  QueuePair(Device& dev, const QpInit& init);
  ~QueuePair();

  // Verbs side, any thread. Return 0 or an errno value, with `why` saying what was wrong.
  // With ring = false the WR waits in the ring for the next doorbell (ring_doorbell()), so a
  // chain of WRs goes out as one batch. When the send side is idle the posting thread sends
  // the batch itself (docs/progress-model.md); otherwise the doorbell wakes the engine.
  int post_send(const SendWr& wr, std::string* why = nullptr, bool ring = true);
  void ring_doorbell();
  int post_recv(const RecvWr& wr, std::string* why = nullptr);

  std::uint32_t qp_num() const { return qp_num_; }
  QpState state() const { return state_.load(); }
  PdHandle pd() const { return init_.pd; }
  const QpCaps& caps() const { return init_.caps; }
  // The last error that took the QP out of RTS, in words (empty while none).
  std::string error_reason() const;
  // The negotiated IRD/ORD and framing, once connected.
  std::optional<StreamSetup> setup() const;

  // Connection manager side (engine thread). Enters RTS on `sock`; `rx_leftover` holds octets
  // read past the MPA frame. The QP keeps a reference to itself while connected.
  void start(std::unique_ptr<Transport> transport, const StreamSetup& setup, Bytes rx_leftover,
             std::shared_ptr<WireTap> tap, std::function<void(const QpClosed&)> on_closed,
             RxOptions rx = {});
  // Segments without a socket (replay, fuzzing): see SegmentInput.
  void receive_segment(TcpSeq seq, Bytes payload,
                       std::shared_ptr<std::atomic<std::int64_t>> pending = {}) override;
  void receive_segment_on_engine(TcpSeq seq, ByteSpan payload) override;
  void receive_fin(TcpSeq seq) override;
  std::vector<HoleInfo> hole_report() const override;
  mpa::SegmentReceiver::Stats segment_stats() const override;
  // The time from each TCP hole closing to the octets beyond it delivered (HoleClock), and
  // the runs not timed; asked of the engine like segment_stats().
  struct HoleTiming {
    std::vector<HoleClock::Sample> samples;
    std::uint64_t untracked = 0, not_kept = 0;
  };
  HoleTiming hole_timing() const;
  // The responder in peer-to-peer mode expects the initiator's RTR first (RFC 6581 §4); the
  // initiator sends it. Called by the CM with the negotiated RTR type.
  void send_rtr(mpa::RtrType type);
  // rdma_disconnect: CLOSING, then the socket is shut down once queued data has gone.
  void disconnect();
  // ibv_modify_qp(ERR): flush everything and close.
  void modify_to_error();

  struct Stats {
    std::uint64_t fpdus_sent = 0, fpdus_received = 0, bytes_sent = 0, bytes_received = 0;
    std::uint64_t doorbells = 0, tx_batches = 0, direct_reads = 0;
    // Batches a posting thread built and wrote itself (no doorbell, no engine), the work
    // requests in them, and those of them the socket did not take whole (the engine wrote the
    // rest once there was room).
    std::uint64_t posted_inline_batches = 0, posted_inline_wrs = 0, inline_handoffs = 0;
    std::uint64_t ooo_placed = 0, released = 0;
    std::uint64_t crc_errors = 0, terminates_sent = 0, terminates_received = 0;
  };
  Stats stats() const;
  // What it holds now, for `rnic stat` (engine thread; qp_stat.cpp).
  QpLiveState live_state() const;

  // Engine thread, from Device::deregister(): `r` is leaving the memory table. Whatever this QP
  // still holds of it stops being used before this returns (see MemoryUser).
  void revoke(const MemoryRegion& r) override;

 private:
  class RxSink;
  friend class RxSink;
  class SegVisitor;
  friend class SegVisitor;

  // --- send queue ---
  struct SqEntry {
    SendWr wr;
    bool signaled = false;
    bool done = false;
    Wc wc;
  };
  enum class TxKind : std::uint8_t { Sq, ReadResponse, AtomicResponse, Terminate, Rtr };
  struct TxMsg {
    TxKind kind = TxKind::Sq;
    std::uint64_t sq_index = 0;  // TxKind::Sq
    ddp::DdpHeader hdr;
    Bytes body;  // RDMAP body after the DDP header (Read Request, atomics ...)
    boost::container::small_vector<ByteSpan, 4> data;  // payload pieces (up to 4 inside)
    std::size_t total = 0, off = 0;
    bool started = false;
    std::optional<ddp::DdpHeader> then_imm;  // Write with Immediate: the Immediate Data to follow
    std::uint64_t imm = 0;
  };
  // The send-queue index of a Read that no work request asked for (the peer-to-peer RTR).
  static constexpr std::uint64_t kNoSqIndex = ~std::uint64_t{0};
  struct OrqEntry {
    std::uint64_t sq_index;  // kNoSqIndex: the RTR's zero-length Read
    bool atomic;
    STag sink{0};
    TaggedOffset sink_to{0};
    std::uint32_t size = 0, received = 0;
    std::uint32_t request_id = 0;
    std::uint8_t* result = nullptr;  // atomics: where the original value goes
    bool result_revoked = false;     // that memory was deregistered while the atomic was out
  };
  struct IrqEntry {
    bool atomic;
    STag sink{0};
    TaggedOffset sink_to{0};
    ByteSpan src;
    rdmap::AtomicResponse atomic_resp;
    STag src_stag{0};
    bool revoked = false;  // `src` was deregistered before the response went out
  };

  // --- transmit engine (engine thread, qp_tx.cpp) ---
  void tx_kick();
  void tx_write();
  // The doorbell proper: the engine runs tx_kick() soon.
  void engine_doorbell();
  // A posting thread sends what the send queue holds itself, when the send side is idle and
  // nothing needs the engine (docs/progress-model.md). False: ring the engine's doorbell.
  bool tx_now();
  // What the next send-queue WR is for a posting thread: one it may send, none, or one only
  // the engine may start (left untouched: no MSN taken, nothing failed).
  enum class Posted : std::uint8_t { Got, Empty, NeedsEngine };
  Posted next_posted(TxMsg& m);
  void tx_begin_batch();
  // Builds FPDUs into the batch; `posting`: on a posting thread (next_posted(), never an
  // error path). Returns true when it stopped with something left that needs the engine.
  bool tx_build(bool posting);
  // Drops what the socket took (`n` octets) from the front of the batch.
  void tx_advance(std::size_t n);
  // The batch is out: its Sends and Writes complete, as one CQ batch.
  void tx_batch_done();
  void push_iov(ByteSpan b, bool user);
  // Copies the unsent octets of the batch that lie in registered memory `touches` selects into
  // QP-owned buffers (the memory is going away; the stream keeps its octets).
  void tx_detach(const std::function<bool(const std::uint8_t*, std::size_t)>& touches);
  std::uint16_t negotiated_ord() const {
    return setup_->initiator ? setup_->params.initiator_ord : setup_->params.responder_ord;
  }
  // RFC 5041 §5.3: the MSN of the next message sent on untagged queue `qn` (the first is 1).
  Msn next_msn(std::uint32_t qn) {
    tx_.msn[qn] = tx_.msn[qn].next();
    return tx_.msn[qn];
  }
  void arm_close_timer();
  bool next_message(TxMsg& m);  // false when nothing can go now
  bool start_sq_wqe(std::uint64_t index, TxMsg& m, bool resolved = false);
  // `posting`: on a posting thread, a failure changes nothing (the engine fails the WR).
  bool resolve_send_sges(std::uint64_t index, TxMsg& m, bool posting = false);
  bool start_read(std::uint64_t index, TxMsg& m);
  bool start_atomic(std::uint64_t index, TxMsg& m);
  void append_fpdu(TxMsg& m);
  void complete_sq(std::uint64_t index, WcStatus status, std::uint32_t byte_len = 0,
                   std::uint32_t vendor_err = 0);
  // complete_sq() without the retiring, mu_ held; false when it was done already.
  bool mark_sq_done(std::uint64_t index, WcStatus status, std::uint32_t byte_len,
                    std::uint32_t vendor_err);
  void retire_sq();
  std::size_t mulpdu() const;

  // --- receive engine (engine thread, qp_rx.cpp) ---
  void rx_start(Bytes leftover);
  void rx_read();
  void rx_drain();
  void rx_data(ByteSpan data);                    // octets read from the transport
  void rx_segment(TcpSeq seq, ByteSpan payload);  // one TCP segment into the segment path
  void rx_check_fin();
  void arm_shaper_flush();
  void on_rx_error(const boost::system::error_code& ec);

  // How an FPDU reaches rx_head/rx_end: read in stream order with its payload still to be
  // placed, or released from the out-of-order ledger with its payload placed already (beyond
  // a hole, qp_ooo.cpp). Everything else about its delivery is the same.
  enum class Delivery : std::uint8_t { InOrder, AlreadyPlaced };
  MutableByteSpan rx_head(const mpa::FpduHead& h, Delivery how);
  void rx_end(const mpa::FpduTrailer& t, Delivery how);
  void rx_framing_error(const WireError& e);
  Result<MutableByteSpan> rx_tagged(const ddp::Segment& s, std::size_t payload_len,
                                    ByteSpan head_payload, Delivery how);
  Result<MutableByteSpan> rx_untagged(const ddp::Segment& s, std::size_t payload_len,
                                      ByteSpan head_payload, Delivery how);
  Result<MutableByteSpan> rx_send_segment(const ddp::Segment& s, std::size_t payload_len,
                                          ByteSpan head_payload, Delivery how);
  Result<void> rx_check_request(const ddp::Segment& s);
  bool expects_peer_rtr_send() const;
  Result<void> rx_message_end(Delivery how);
  Result<void> rx_read_response_end();
  Result<void> complete_receive();
  void execute_atomic(const rdmap::AtomicRequest& a);
  void rx_atomic_response_end();
  // A receive completion with nothing filled in beyond the WR, status and QP (RFC 5040 §5.3).
  Wc recv_completion(std::uint64_t wr_id, WcStatus status, WcOpcode opcode = WcOpcode::Recv) const;
  void rx_terminate_received(const rdmap::Terminate& t);
  bool take_rqe();
  // Receive completions: while a read is processed (rx_drain) they gather and go to the CQ as
  // one batch when it ends (one lock, at most one channel event); otherwise at once.
  void recv_push(const Wc& wc, bool solicited = false);
  void recv_flush();
  // Gathers the receive completions of one stretch of engine work into one CQ push; a nested
  // batch joins the outermost.
  class RecvBatch {
   public:
    explicit RecvBatch(QueuePair& qp) : qp_(qp), outer_(!qp.rx_.batching) {
      qp_.rx_.batching = true;
    }
    ~RecvBatch() {
      if (!outer_) return;
      qp_.recv_flush();
      qp_.rx_.batching = false;
    }
    RecvBatch(const RecvBatch&) = delete;
    RecvBatch& operator=(const RecvBatch&) = delete;

   private:
    QueuePair& qp_;
    bool outer_;
  };

  // --- out-of-order placement (engine thread, qp_ooo.cpp) ---
  // An FPDU placed beyond a hole, as its delivery will need it: the head of its ULPDU (the
  // headers), what kind of message it belongs to, and for a Send the receive WQE it went to.
  struct Deferred {
    rdmap::MessageFamily family = rdmap::MessageFamily::Write;
    std::uint64_t offset = 0;
    std::uint32_t wire_length = 0;
    std::uint16_t ulpdu_length = 0;
    Bytes head;
    bool last = false;
    std::uint64_t wr_id = 0;  // Send: the receive WQE its MSN selected
  };
  // What trying to place one FPDU beyond a hole came to.
  struct OooStep {
    mpa::OooVerdict verdict = mpa::OooVerdict::Placed;
    std::string wait_reason;         // Wait: why it waits for the stream
    std::optional<WireError> error;  // Invalid: what is wrong with it
    static OooStep wait(std::string why) { return {mpa::OooVerdict::Wait, std::move(why), {}}; }
    static OooStep invalid(WireError e) { return {mpa::OooVerdict::Invalid, {}, std::move(e)}; }
  };
  // Which receive WQE a Send found beyond a hole goes to (RFC 5041 §5.3: the MSN selects it).
  struct RqeForMsn {
    enum class Kind : std::uint8_t { InProgress, Queued, AlreadyDelivered, MaybePeerRtr };
    Kind kind = Kind::Queued;
    std::size_t queued_index = 0;  // Queued: index in the receive queue
  };
  // Beyond a TCP hole: place a whole FPDU now if it can be, and keep what its delivery needs
  // in the hole ledger; release it when the in-order point reaches it.
  mpa::OooVerdict rx_ooo(const mpa::OooFpdu& f, const mpa::Hole& hole);
  OooStep ooo_place(const ddp::Segment& s, Deferred& d);
  OooStep ooo_place_send(const ddp::Segment& s, Deferred& d);
  RqeForMsn rqe_for_msn(Msn msn) const;
  void rx_release(std::uint64_t offset, std::uint32_t wire_length);
  void rx_hole_closed(const mpa::Hole& h, bool first);
  void rx_event(RxEvent e);

  // --- errors (qp_error.cpp): Terminate toward the peer, then ERROR with everything flushed ---
  void fatal(const WireError& e, ByteSpan ddp_hdr = {}, ByteSpan rdmap_hdr = {},
             std::uint16_t segment_length = 0);
  void local_fatal(std::uint64_t sq_index, WcStatus status, const std::string& why);
  void enter_error(QpClosed closed);
  void flush_all();
  void close_socket();
  // False (and nothing changes) for a transition legal_transition() forbids.
  bool set_state(QpState s);

  Device& dev_;
  QpInit init_;
  std::uint32_t qp_num_;
  std::atomic<QpState> state_{QpState::Idle};

  // The work queues, shared between the verbs side (any thread) and the engine.
  // Guards the rings (sq_ and its indices, rq_), retired_, rnr_abort_ (rq_posted_ waits on
  // it), ooo_.placed and ooo_.errors, the error reason and setup_.
  mutable std::mutex mu_;
  std::condition_variable rq_posted_;  // a receive WR was posted (QpInit::rnr_wait)
  bool rnr_abort_ = false;             // modify_to_error(): stop waiting for one (under mu_)
  std::vector<SqEntry> sq_;
  std::uint64_t sq_head_ = 0, sq_next_ = 0, sq_tail_ = 0;  // free-running
  std::deque<RecvWr> rq_;
  std::vector<Wc> retired_;  // retire_sq()'s batch (kept for its capacity)
  std::string error_reason_;
  std::optional<StreamSetup> setup_;
  std::atomic<bool> doorbell_pending_{false};
  // The counters stats() reports. Relaxed atomics, no lock: they are bumped on every FPDU,
  // batch and doorbell (a lock pair each cost an 8-octet Send about 55 instructions a time,
  // docs/instructions.md), and a snapshot need not be consistent across counters.
  struct Counter {
    std::atomic<std::uint64_t> v{0};
    void operator+=(std::uint64_t n) { v.fetch_add(n, std::memory_order_relaxed); }
    void operator++() { *this += 1; }
    std::uint64_t load() const { return v.load(std::memory_order_relaxed); }
  };
  struct Counters {
    Counter fpdus_sent, fpdus_received, bytes_sent, bytes_received;
    Counter doorbells, tx_batches, direct_reads;
    Counter posted_inline_batches, posted_inline_wrs, inline_handoffs;
    Counter ooo_placed, released;
    Counter crc_errors, terminates_sent, terminates_received;
  } stats_;
  // Counters and Stats have as many members (stats() must still name each one).
  static_assert(sizeof(Counters) / sizeof(Counter) == sizeof(Stats) / sizeof(std::uint64_t));

  // The transmit lock (docs/progress-model.md): guards tx_ and irq_, and the writes of closed_,
  // transport_ and the tap/shaper, which a posting thread reads. The engine holds it wherever
  // it touches them; a posting thread only ever try_locks it (tx_now()). Recursive: engine
  // paths nest (a bad lkey found while a batch is built fails the QP, which flushes and kicks
  // the transmitter again). Order: tx_mu_, then mu_, then a CQ's and the memory table's locks.
  mutable std::recursive_mutex tx_mu_;
  using TxLock = std::unique_lock<std::recursive_mutex>;

  // The connection's lifetime (engine thread).
  std::shared_ptr<QueuePair> self_;  // alive while connected
  std::unique_ptr<Transport> transport_;
  std::function<void(const QpClosed&)> on_closed_;
  std::optional<boost::asio::steady_timer> close_timer_;
  bool closing_after_tx_ = false;
  QpClosed closed_reason_{QpClosed::Cause::LocalDisconnect, ""};
  bool closed_ = false;

  // The read queues (engine thread): our Reads and atomics waiting for their responses (ORD),
  // the peer's waiting for ours (IRD), RFC 5040 §6.3 / RFC 7306 §5. irq_ changes under
  // tx_mu_ (a posting thread sends only while it is empty).
  std::deque<OrqEntry> orq_;
  std::deque<IrqEntry> irq_;

  // Transmit context (under tx_mu_: the engine, or a posting thread in tx_now()): framing,
  // MSNs, the message being sent and the gather batch on its way to the socket.
  struct TxContext {
    std::optional<mpa::FpduEncoder> framing;
    std::optional<boost::asio::steady_timer> delay;  // StreamSetup::first_fpdu_delay
    std::array<Msn, rdmap::kQueueCount> msn{};       // last MSN sent per queue
    std::uint32_t atomic_request_id = 0;             // last one sent (RFC 7306 §4.2.1)
    std::deque<TxMsg> priority;                      // Terminate, RTR: before anything else
    std::optional<TxMsg> cur;
    bool gated = false;       // MPA v1 responder: hold FPDUs until the initiator's first arrives
    bool writing = false;     // a batch is on its way to the socket (tx_write)
    bool building = false;    // tx_kick() is building a batch (not re-entrant)
    std::deque<Bytes> arena;  // headers and trailers of the batch (stable addresses)
    std::size_t arena_used = 0;
    std::vector<boost::asio::const_buffer> iov;
    std::vector<bool> iov_user;            // iov[i] points into registered memory
    std::size_t iov_pos = 0;               // first iov entry not yet written whole
    std::deque<Bytes> detached;            // copies made by tx_detach() (stable addresses)
    std::vector<std::uint64_t> batch_wrs;  // Sends/Writes that complete when the batch is out
    std::vector<std::size_t> fpdu_ends;    // where each FPDU of the batch ends (for the tap)
    std::size_t batch_bytes = 0;
  } tx_;

  // The FPDU being received, from its head to its trailer.
  struct RxFpdu {
    ddp::Segment seg;
    std::size_t payload_len = 0;
    std::optional<WireError> error;
    Bytes raw_ddp, raw_rdmap;  // the offending headers, for a Terminate
    std::uint16_t ulpdu_length = 0;
    // The peer-to-peer RTR Send (RFC 6581 §4): nothing to place, report or complete.
    bool peer_rtr = false;
    // Untagged payload that spans several receive SGEs lands in a bounce buffer first.
    Bytes bounce;
    std::uint32_t bounce_mo = 0;
    // A validated Read Request / Atomic Request, acted on once the FPDU's CRC is good.
    std::optional<IrqEntry> pending_irq;
    std::uint64_t* atomic_word = nullptr;
  };
  // The Send message in progress and the receive WQE it consumed.
  struct RxSend {
    bool active = false;  // a receive WQE is consumed by the message in progress
    Msn msn{0};           // that message's MSN
    RecvWr rqe;
    RecvBuffer buffer;     // its SGEs resolved (cleared, capacity 0, when revoked)
    bool revoked = false;  // a region of its SGEs was deregistered meanwhile
    std::uint32_t placed = 0;
    // How the receive WR completes when the message fails here (LocLenErr: too long,
    // LocProtErr: its own SGEs are not writable); Success: flushed like the rest.
    WcStatus error = WcStatus::Success;
  };
  // Receive stream (engine thread only; no lock): the segment path, the MPA reader, and the
  // message state across FPDUs.
  struct RxStream {
    RxOptions opts;
    std::optional<mpa::SegmentReceiver> segments;  // TCP segments in, holes tracked
    HoleClock hole_clock;                          // hole closed -> octets beyond it delivered
    std::shared_ptr<SegVisitor> visitor;
    std::optional<mpa::FpduReader> reader;
    std::shared_ptr<RxSink> sink;
    std::optional<TcpSeq> fin_seq;
    ddp::SegmentChecker checker;
    RxFpdu fpdu;
    RxSend send;
    bool first_fpdu_seen = false;
    // Immediate Data reports the length of the Write just before it (RFC 7306 §4.3).
    std::uint32_t last_write_len = 0;
    std::uint32_t cur_write_len = 0;
    // Receive completions gathered while `batching` (recv_push), oldest first.
    bool batching = false;
    bool wcs_solicited = false;
    std::vector<Wc> wcs;
  } rx_;

  // Out-of-order ledger: FPDUs placed beyond a TCP hole whose completions, doorbells and
  // Terminates wait for the hole to close. `placed` and `errors` are written on the engine
  // thread and read by hole_report() under mu_; `released` is engine-thread only.
  struct OooLedger {
    std::map<std::uint64_t, Deferred> placed;  // by stream offset
    std::set<std::uint64_t> errors;            // invalid FPDUs beyond a hole
    RxEvent released;  // what the in-order point let go since the last report
  } ooo_;

  // Capture and simulation (engine thread only): the pcap tap and the receive-side segment
  // shaper (RxOptions::shaper).
  struct TapAndWire {
    std::shared_ptr<WireTap> tap;
    Bytes rx_partial;  // received octets not yet a whole FPDU (for the tap)
    std::unique_ptr<RxSegmentShaper> shaper;
    std::optional<boost::asio::steady_timer> wire_flush;  // flushes the shaper after a pause
  } tap_wire_;
  void tap_inbound(ByteSpan data);
};

}  // namespace iwarp::rnic
