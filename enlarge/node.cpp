#include "enlarge/node.hpp"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>

#include "common/log.hpp"

namespace iwarp::enlarge {

using namespace iwarp::verbs;

namespace {
spdlog::logger& node_log() {
  return log::layer("enlarge");
}
using Clock = std::chrono::steady_clock;
std::chrono::milliseconds left_until(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}
}  // namespace

std::expected<std::unique_ptr<Node>, std::string> Node::create(Options opts) {
  if (auto why = validate(opts); !why.empty()) return std::unexpected(why);
  const AllocatorTuning* tuning = opts.tune_malloc ? &keep_large_blocks_in_heap() : nullptr;
  auto node = std::unique_ptr<Node>(new Node(std::move(opts)));
  node->allocator_ = tuning;
  return node;
}

Node::Node(Options opts) : opts_(std::move(opts)) {
  ctx_ = ibv_open_device("rnic0");
  if (opts_.busy_poll.count() > 0) rnic_set_busy_poll(ctx_, true);
  channel_ = ibv_create_comp_channel(ctx_);
  ech_ = rdma_create_event_channel(ctx_);
  hello_ = encode_hello(Hello{opts_.slot_size, opts_.recv_slots, opts_.mode});
}

Node::~Node() {
  for (auto& c : conns_) c->destroy_qp_and_id();
  if (listen_id_) rdma_destroy_id(listen_id_);
  rdma_destroy_event_channel(ech_);
  // Closing the device stops its engine, which may still touch the CQs: CQs and PDs go after.
  ibv_close_device(ctx_);
  for (auto& c : conns_) c->destroy_rest();
  conns_.clear();
  ibv_destroy_comp_channel(channel_);
}

std::uint64_t Node::registered_bytes() const {
  std::uint64_t n = 0;
  for (const auto& c : conns_) n += c->registered_bytes();
  return n;
}

std::expected<std::uint16_t, std::string> Node::listen(const std::string& host,
                                                       std::uint16_t port) {
  if (listen_id_) return std::unexpected("this node already listens");
  rdma_create_id(ech_, &listen_id_, nullptr);
  rdma_set_mpa(listen_id_, opts_.cm);
  rdma_bind_addr(listen_id_, host, port);
  if (rdma_listen(listen_id_, 1024) != 0)
    return std::unexpected(fmt::format("cannot listen on {}:{}: {}", host, port, ibv_last_error()));
  return rdma_get_src_port(listen_id_);
}

Connection* Node::connect_async(const std::string& host, std::uint16_t port) {
  conns_.push_back(std::make_unique<Connection>(ctx_, channel_, opts_, next_id_++));
  Connection* c = conns_.back().get();
  rdma_cm_id* id = nullptr;
  rdma_create_id(ech_, &id, c);
  rdma_set_mpa(id, opts_.cm);
  id->context = c;
  // Address and route resolve at once here; the QP is made on ROUTE_RESOLVED.
  rdma_resolve_addr(id, host, port, 2000);
  return c;
}

std::expected<Connection*, std::string> Node::connect(const std::string& host, std::uint16_t port,
                                                      std::chrono::milliseconds timeout) {
  Connection* c = connect_async(host, port);
  const auto deadline = Clock::now() + timeout;
  while (c->state() == Connection::State::Connecting) {
    if (Clock::now() >= deadline)
      return std::unexpected(
          fmt::format("no connection to {}:{} within {} ms", host, port, timeout.count()));
    progress(std::min(left_until(deadline), std::chrono::milliseconds(100)));
  }
  if (c->state() != Connection::State::Established)
    return std::unexpected(fmt::format("cannot connect to {}:{}: {}", host, port, c->error()));
  return c;
}

std::expected<Connection*, std::string> Node::accept(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (accepted_.empty()) {
    if (Clock::now() >= deadline)
      return std::unexpected(fmt::format("no connection within {} ms", timeout.count()));
    progress(std::min(left_until(deadline), std::chrono::milliseconds(100)));
  }
  Connection* c = accepted_.front();
  accepted_.pop_front();
  return c;
}

// The hello in the MPA private data (RFC 5044 §7.1); IRD and ORD of 1, as the protocol uses
// no RDMA Read.
rdma_conn_param Node::conn_param() const {
  rdma_conn_param p;
  p.private_data = hello_.data();
  p.private_data_len = static_cast<std::uint16_t>(hello_.size());
  p.responder_resources = 1;
  p.initiator_depth = 1;
  return p;
}

// Both sides run one mode: a peer whose hello names another is refused ("" when they match).
std::string Node::mode_mismatch(const Hello& peer, const char* who, const char* us) const {
  if (peer.mode == opts_.mode) return "";
  return fmt::format("{} runs the {} mode, {} {}", who, to_string(peer.mode), us,
                     to_string(opts_.mode));
}

// Returns an id to destroy once the event is acknowledged (librdmacm waits in
// rdma_destroy_id for its events' acknowledgements), or nullptr.
rdma_cm_id* Node::accept_request(rdma_cm_event* ev) {
  auto hello = decode_hello(ev->private_data_storage);
  if (hello) {
    if (auto why = mode_mismatch(*hello, "the peer", "this node"); !why.empty())
      hello = std::unexpected(why);
  }
  if (!hello) {
    node_log().warn("rejected a connection: {}", hello.error());
    rdma_reject(ev->id, nullptr, 0);
    return ev->id;
  }
  conns_.push_back(std::make_unique<Connection>(ctx_, channel_, opts_, next_id_++));
  Connection* c = conns_.back().get();
  c->server_side = true;
  c->set_peer(*hello);
  if (auto why = c->setup(ev->id); !why.empty()) {
    node_log().warn("rejected a connection: {}", why);
    rdma_reject(ev->id, nullptr, 0);
    c->fail(why, /*disconnect=*/false);
    return nullptr;
  }
  const rdma_conn_param p = conn_param();
  if (rdma_accept(ev->id, &p) != 0) c->fail("rdma_accept failed: " + ibv_last_error());
  return nullptr;
}

rdma_cm_id* Node::handle_cm_event(rdma_cm_event* ev) {
  if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) return accept_request(ev);
  auto* c = ev->id ? static_cast<Connection*>(ev->id->context) : nullptr;
  if (!c) {
    // An id made for a connection that failed before it was offered to us.
    return ev->id && ev->id != listen_id_ ? ev->id : nullptr;
  }
  handle_connection_event(*c, ev);
  return nullptr;
}

void Node::handle_connection_event(Connection& conn, rdma_cm_event* ev) {
  Connection* c = &conn;
  switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      rdma_resolve_route(ev->id, 2000);
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      if (auto why = c->setup(ev->id); !why.empty()) return c->fail(why);
      const rdma_conn_param p = conn_param();
      if (rdma_connect(ev->id, &p) != 0) c->fail("rdma_connect failed");
      return;
    }
    case RDMA_CM_EVENT_ESTABLISHED: {
      const bool client = !c->server_side;
      if (client) {
        auto hello = decode_hello(ev->private_data_storage);
        if (!hello) return c->fail("the server's reply: " + hello.error());
        if (auto why = mode_mismatch(*hello, "the server", "this side"); !why.empty())
          return c->fail(why);
        c->set_peer(*hello);
      }
      c->set_established();
      if (!client) accepted_.push_back(c);
      c->pump();
      return;
    }
    case RDMA_CM_EVENT_DISCONNECTED:
      c->drain_cq();  // what arrived before the disconnect is delivered first
      return c->set_closed("the peer disconnected" + (ev->detail.empty() ? "" : ": " + ev->detail));
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return c->fail(fmt::format("{}{}", rdma_event_str(ev->event),
                                 ev->detail.empty() ? "" : ": " + ev->detail));
    default:
      return;
  }
}

void Node::progress(std::chrono::milliseconds timeout) {
  const auto entry = Clock::now();
  // The idle-shrink timer needs a look now and then even with no traffic. (The refusal
  // back-off needs none: data waits for nothing while it runs, it goes in pieces.)
  const bool timers = opts_.idle_shrink.count() > 0;
  if (timers) timeout = std::min(timeout, std::chrono::milliseconds(5));
  // Credits held back at the last call that the application did not carry back with a
  // message since: they go now, in a Credit of their own if need be.
  auto waiting = std::move(credit_waiting_);
  credit_waiting_.clear();
  for (auto* c : waiting)
    if (c->credit_waiting()) c->pump();
  const auto deadline = entry + std::max(timeout, std::chrono::milliseconds(0));
  if (opts_.busy_poll.count() > 0) {
    // Polls (one pass at least) for up to busy_poll within the timeout, but not past
    // max(kSpinIdle, busy_poll) after the last completion or connection event: an idle node
    // blocks at once. It may: every CQ is armed or has an event waiting on the channel (setup
    // arms each CQ, a CQ's arm ends only by raising an event, and the blocking path below
    // re-arms every CQ whose event it takes), so the channel wakes it for whatever comes.
    const auto now = Clock::now();
    const auto busy_for = std::max<Clock::duration>(kSpinIdle, opts_.busy_poll);
    if (now - last_activity_ < busy_for &&
        spin(std::max(now,
                      std::min({entry + opts_.busy_poll, deadline, last_activity_ + busy_for})))) {
      last_activity_ = Clock::now();
      if (timers) pump_timers();
      return;
    }
  }
  // What is left of the timeout (busy polling took some of it), to the nanosecond.
  const auto left = std::max(Clock::duration::zero(), deadline - Clock::now());
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(left);
  const timespec ts{static_cast<time_t>(secs.count()),
                    static_cast<long>(std::chrono::nanoseconds(left - secs).count())};
  pollfd fds[2] = {{channel_->fd(), POLLIN, 0}, {ech_->fd(), POLLIN, 0}};
  ::ppoll(fds, 2, &ts, nullptr);
  // Completion events: arm, then drain (a completion between the two raises a new event).
  std::vector<Connection*> ready;
  for (;;) {
    pollfd p{channel_->fd(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) break;
    ibv_cq* cq = nullptr;
    void* cq_ctx = nullptr;
    if (ibv_get_cq_event(channel_, &cq, &cq_ctx) != 0) break;
    ibv_ack_cq_events(cq, 1);
    ready.push_back(static_cast<Connection*>(cq_ctx));
  }
  std::ranges::sort(ready);
  ready.erase(std::unique(ready.begin(), ready.end()), ready.end());
  if (!ready.empty()) last_activity_ = Clock::now();
  for (auto* c : ready) {
    ibv_req_notify_cq(c->cq(), 0);
    c->drain_cq();
    if (c->credit_waiting()) credit_waiting_.push_back(c);
  }
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ech_, &ev, 0) != 0) break;
    last_activity_ = Clock::now();
    rdma_cm_id* dead = handle_cm_event(ev);
    rdma_ack_cm_event(ev);
    if (dead) rdma_destroy_id(dead);
  }
  if (timers) pump_timers();
}

void Node::pump_timers() {
  // By index: pump() may run on_event, which may start a connection.
  for (std::size_t i = 0; i < conns_.size(); ++i)
    if (conns_[i]->wants_pump()) conns_[i]->pump();
}

// Busy polling: polls every connection's CQ (an unarmed CQ found empty makes this thread run
// the device's receive path) and the connection events, until something happened or `until`.
// Then, before the caller blocks, arms every CQ (which hands the engine back to its thread)
// and polls once more, so a completion that came in between is not left waiting for an event
// that was never asked for. Whether anything happened.
bool Node::spin(Clock::time_point until) {
  const auto handle = [&] {
    bool any = false;
    // By index: a completion's handling may run on_event, which may start a connection.
    for (std::size_t i = 0; i < conns_.size(); ++i) {
      Connection* c = conns_[i].get();
      if (!c->cq()) continue;
      if (c->drain_cq(/*only_if_any=*/true)) {
        any = true;
        if (c->credit_waiting()) credit_waiting_.push_back(c);
      }
    }
    rdma_cm_event* ev = nullptr;
    while (rdma_get_cm_event(ech_, &ev, 0) == 0) {
      any = true;
      rdma_cm_id* dead = handle_cm_event(ev);
      rdma_ack_cm_event(ev);
      if (dead) rdma_destroy_id(dead);
    }
    return any;
  };
  do {
    if (handle()) return true;
  } while (Clock::now() < until);
  for (std::size_t i = 0; i < conns_.size(); ++i)
    if (conns_[i]->cq()) ibv_req_notify_cq(conns_[i]->cq(), 0);
  return handle();
}

std::expected<void, std::string> Node::flush(Connection& c, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!c.tx_idle()) {
    if (c.state() == Connection::State::Failed || c.state() == Connection::State::Closed)
      return std::unexpected(c.error());
    if (Clock::now() >= deadline)
      return std::unexpected(fmt::format("connection {}: {} message(s) still queued after {} ms",
                                         c.id(), c.tx_queued(), timeout.count()));
    progress(std::min(left_until(deadline), std::chrono::milliseconds(100)));
  }
  return {};
}

std::expected<Received, std::string> Node::recv(Connection& c, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (auto r = c.try_recv()) return std::move(*r);
    if (c.state() == Connection::State::Failed || c.state() == Connection::State::Closed)
      return std::unexpected(c.error());
    if (Clock::now() >= deadline)
      return std::unexpected(
          fmt::format("connection {}: no message within {} ms", c.id(), timeout.count()));
    progress(std::min(left_until(deadline), std::chrono::milliseconds(100)));
  }
}

}  // namespace iwarp::enlarge
