// Connection management in the manner of librdmacm: listen, connect, accept, reject and
// disconnect, with private data and IRD/ORD, over TCP with the MPA Request/Reply exchange of
// RFC 5044 §7.1 and RFC 6581 (revision, CRC, markers, peer-to-peer RTR). Events arrive on an
// event channel a consumer can block on: connect request, established, rejected, unreachable,
// connect error, disconnected. A peer that never finishes the MPA exchange is timed out.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "mpa/negotiation.hpp"
#include "rnic/cm_events.hpp"
#include "rnic/cm_options.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic {

// Where a connection runs, for a wire tap (pcap recording).
struct TapInfo {
  boost::asio::ip::tcp::endpoint local, remote;
  bool initiator = true;
  std::size_t emss = 0;
};

// What a listener did with the connections it accepted (any thread).
struct ListenerStats {
  std::uint64_t accepted = 0;       // TCP connections taken into the MPA exchange
  std::uint64_t evicted = 0;        // reset, Request-less, to make room for a new one
  std::uint64_t refused = 0;        // new ones reset: every slot held an unanswered Request
  std::uint64_t accept_errors = 0;  // failed accept calls (each EMFILE retry counts)
  std::size_t pending = 0;          // in the MPA exchange now
};

class CmId : public std::enable_shared_from_this<CmId> {
 public:
  static std::shared_ptr<CmId> create(Device& dev, EventChannel& ch, CmOptions opts = {});
  ~CmId();

  // Binds and listens (synchronously, so errors come back here). Port 0 picks one.
  int listen(const std::string& addr, std::uint16_t port, std::string* why);
  // The same in two steps, as rdma_bind_addr and rdma_listen: bind() takes the address at once
  // (so local_port() tells the port picked for 0), listen() then accepts connections.
  // With queue_now the socket listens at once, so that TCP connections arriving between bind()
  // and listen() wait in the kernel's backlog instead of being refused: qperf's server sends
  // its port to the client between rdma_bind_addr and rdma_listen.
  int bind(const std::string& addr, std::uint16_t port, std::string* why, bool queue_now = false);
  int listen(std::string* why);
  // Stops a listener (rdma_destroy_id): when this returns the port is free for another one;
  // connections it accepted live on. Any thread but the engine's; bounded.
  void stop_listening();
  // The listener this id came from (for an id from a ConnectRequest), if it still exists.
  std::shared_ptr<CmId> listener_id() const { return parent_.lock(); }
  // The connection attempt failed (CONNECT_ERROR, REJECTED or UNREACHABLE was reported).
  bool failed() const { return failed_.load(); }
  std::uint16_t local_port() const;
  // The connection's addresses (any thread); a default endpoint while there is no connection.
  boost::asio::ip::tcp::endpoint local_endpoint() const;
  boost::asio::ip::tcp::endpoint remote_endpoint() const;
  // Later events of this id go to `ch` (rdma_migrate_id). Any thread but the engine's; events
  // already queued stay where they are.
  void migrate(EventChannel& ch);
  // Starts the TCP connect and the MPA exchange; the outcome comes as an event.
  void connect(const std::string& host, std::uint16_t port, std::shared_ptr<QueuePair> qp,
               const ConnParam& param);
  // For an id from a ConnectRequest event.
  int accept(std::shared_ptr<QueuePair> qp, const ConnParam& param, std::string* why = nullptr);
  int reject(ByteSpan private_data, std::string* why = nullptr);
  // Once connected: a graceful close. During the MPA exchange (after connect or accept): the
  // QP is not started when the exchange completes; the connection is closed and the id gets
  // DISCONNECTED (or REJECTED / CONNECT_ERROR when the exchange failed anyway). A QP that left
  // IDLE/RTR otherwise meanwhile (moved to ERROR) is not started either: CONNECT_ERROR, as siw
  // reports a Reply for a QP past RTR.
  void disconnect();
  // The most private data our MPA frame can carry: 512 octets, less RFC 6581's 4 octets of
  // IRD/ORD when the frame is enhanced.
  std::size_t max_private_data() const;
  ListenerStats listener_stats() const;  // for a listener (zeros otherwise)

  std::shared_ptr<QueuePair> qp() const;
  const CmOptions& options() const { return opts_; }
  Device& device() { return dev_; }
  std::string peer() const;  // "127.0.0.1:7174"
  // The peer's MPA Request (for an id from a ConnectRequest).
  std::optional<mpa::MpaFrame> request() const;

 private:
  CmId(Device& dev, std::shared_ptr<EventChannel::Queue> ch, CmOptions opts);
  struct Listener;
  void do_accept_loop();
  void on_accept_error(const boost::system::error_code& ec);
  void on_tcp_accepted(boost::asio::ip::tcp::socket s);
  // The exchange has an outcome (engine thread): a listener's slot is given back.
  void finish_exchange();
  // An accepted connection's MPA Request arrived (or it ended): it can no longer be evicted.
  void stop_awaiting();
  // Resets an accepted connection that sent no MPA Request, to make room (engine thread).
  void evict();
  // Engine thread: why the QP must not be started now (the id was disconnected, or the QP left
  // IDLE/RTR), or nullopt.
  std::optional<std::string> qp_gone() const;
  // Closes the connection instead of starting the QP, and says why (DISCONNECTED after
  // rdma_disconnect, else CONNECT_ERROR).
  void abort_exchange(const std::string& why);
  void send_reply(std::shared_ptr<Bytes> reply, mpa::ConnectionParams params);
  // The initiator's steps (engine thread), each continuing the next when its I/O completes:
  // resolve and arm the connect timeout; a TCP connect attempt (refused ones are retried until
  // retry_until); the MPA Request (RFC 5044 §7.1); the Reply's outcome; the QP started.
  void start_connect(const std::string& host, std::uint16_t port, const ConnParam& param);
  void try_tcp_connect(const boost::asio::ip::tcp::resolver::results_type& endpoints,
                       const ConnParam& param, std::chrono::steady_clock::time_point retry_until);
  void send_mpa_request(const boost::asio::ip::tcp::endpoint& ep, const ConnParam& param);
  void retry_connect();
  void on_mpa_reply(const mpa::Policy& pol, const mpa::MpaFrame& req, Result<mpa::MpaFrame> f);
  void establish_initiator(const mpa::ConnectionParams& params, const mpa::MpaFrame& reply);
  void read_frame(mpa::FrameKind kind, std::function<void(Result<mpa::MpaFrame>)> done);
  void arm_timer(std::chrono::milliseconds t, std::string what);
  void emit(CmEventType t, std::string detail, Bytes pdata = {});
  void start_qp(const mpa::ConnectionParams& params, bool initiator);
  void send_and_close(Bytes data);
  std::size_t emss();

  Device& dev_;
  std::shared_ptr<EventChannel::Queue> ch_;
  CmOptions opts_;
  std::optional<boost::asio::ip::tcp::acceptor> acceptor_;
  std::optional<boost::asio::ip::tcp::socket> sock_;
  boost::asio::steady_timer timer_;
  mutable std::mutex mu_;
  std::shared_ptr<QueuePair> qp_;
  std::shared_ptr<WireTap> tap_;
  std::optional<mpa::MpaFrame> request_;
  Bytes frame_buf_;
  std::size_t frame_octets_ = 0;  // octets of the frame being read that arrived
  // What a new TCP attempt needs (initiator): the connection reset before any octet of the
  // MPA Reply is tried again until `until`, like a refused one.
  struct ConnectRetry {
    boost::asio::ip::tcp::resolver::results_type endpoints;
    ConnParam param;
    std::chrono::steady_clock::time_point until;
  };
  std::optional<ConnectRetry> retry_;
  std::string peer_;
  std::uint16_t ird_ = 16, ord_ = 16;  // from ConnParam
  bool finished_ = false;              // the MPA exchange has an outcome
  bool disconnected_ = false;
  bool started_ = false;                // the QP was started (engine thread)
  bool disconnect_requested_ = false;   // disconnect() before the QP was started (engine thread)
  std::shared_ptr<Listener> listener_;  // a listener's, shared with the ids it accepted
  std::weak_ptr<CmId> parent_;          // the listener that accepted this id
  bool backlog_ = false;                // the bound socket listens already (bind's queue_now)
  std::atomic<bool> failed_{false};
  bool holds_slot_ = false;  // counted in listener_->pending (engine thread)
  // In listener_'s list of connections with no MPA Request yet, oldest first (engine thread).
  std::optional<std::list<std::weak_ptr<CmId>>::iterator> awaiting_;
};

}  // namespace iwarp::rnic
