// A process's end of the buffer-enlargement protocol: one emulated device, one completion
// channel and one connection-event channel shared by all its connections (so a node holds
// thousands of idle connections with one socket each), listen/connect/accept with the
// protocol's hello in the MPA private data, and progress() that drives every connection.
// Built on the verbs shim's public API only (verbs_shim/verbs.hpp, rdma_cm.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <expected>
#include <memory>
#include <string>
#include <vector>

#include "enlarge/allocator.hpp"
#include "enlarge/connection.hpp"
#include "enlarge/options.hpp"

namespace iwarp::enlarge {

class Node {
 public:
  // Fails with the reason when the options are out of range. With opts.tune_malloc, sets the
  // process's malloc for large messages first (enlarge/allocator.hpp).
  static std::expected<std::unique_ptr<Node>, std::string> create(Options opts);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Listens on host:port (0 picks a port). Returns the port.
  std::expected<std::uint16_t, std::string> listen(const std::string& host, std::uint16_t port);
  // Starts a connection; it is Established (or Failed) after some progress().
  Connection* connect_async(const std::string& host, std::uint16_t port);
  // Connects and waits for it to be established.
  std::expected<Connection*, std::string> connect(
      const std::string& host, std::uint16_t port,
      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // The next connection a peer made to this node's listener, once established.
  std::expected<Connection*, std::string> accept(std::chrono::milliseconds timeout);

  // Waits up to `timeout` for completions or connection events, and handles all there are
  // (with Options::busy_poll, polling for up to that long first: enlarge/options.hpp).
  void progress(std::chrono::milliseconds timeout);

  // Blocking conveniences over post/try_recv and progress.
  std::expected<void, std::string> flush(Connection& c, std::chrono::milliseconds timeout);
  std::expected<Received, std::string> recv(Connection& c, std::chrono::milliseconds timeout);

  std::size_t size() const { return conns_.size(); }
  Connection& at(std::size_t i) { return *conns_[i]; }
  // Registered bytes over all connections.
  std::uint64_t registered_bytes() const;
  const Options& options() const { return opts_; }
  verbs::ibv_context* context() { return ctx_; }
  // What create() did to the process's malloc (null: tune_malloc was off).
  const AllocatorTuning* allocator() const { return allocator_; }

 private:
  explicit Node(Options opts);
  bool spin(std::chrono::steady_clock::time_point until);  // busy polling (Options::busy_poll)
  void pump_timers();
  verbs::rdma_cm_id* handle_cm_event(verbs::rdma_cm_event* ev);
  void handle_connection_event(Connection& c, verbs::rdma_cm_event* ev);
  verbs::rdma_cm_id* accept_request(verbs::rdma_cm_event* ev);
  verbs::rdma_conn_param conn_param() const;
  std::string mode_mismatch(const Hello& peer, const char* who, const char* us) const;

  Options opts_;
  verbs::ibv_context* ctx_ = nullptr;
  verbs::ibv_comp_channel* channel_ = nullptr;
  verbs::rdma_event_channel* ech_ = nullptr;
  verbs::rdma_cm_id* listen_id_ = nullptr;
  std::vector<std::unique_ptr<Connection>> conns_;
  std::deque<Connection*> accepted_;
  std::vector<Connection*> credit_waiting_;  // held back a Credit at the last progress()
  std::uint64_t next_id_ = 1;
  Bytes hello_;
  const AllocatorTuning* allocator_ = nullptr;
  // Busy polling spins only while the node is busy: after max(this, busy_poll) without a
  // completion or a connection event it blocks at once, until the next one.
  static constexpr std::chrono::milliseconds kSpinIdle{2};
  std::chrono::steady_clock::time_point last_activity_ = std::chrono::steady_clock::now();
};

}  // namespace iwarp::enlarge
