#include "rnic/connection_manager.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "common/log.hpp"
#include "ddp/segment.hpp"
#include "ddp/terminate.hpp"
#include "mpa/fpdu.hpp"
#include "rnic/segment_tap.hpp"

namespace iwarp::rnic {

namespace {
// The largest receive buffer TCP autotuning may reach here (/proc/sys/net/ipv4/tcp_rmem's third
// value; 6 MiB, Linux's default, when it cannot be read).
int tcp_rmem_max() {
  int lo = 0, def = 0, hi = 6 << 20;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/tcp_rmem", "r")) {
    if (std::fscanf(f, "%d %d %d", &lo, &def, &hi) != 3) hi = 6 << 20;
    std::fclose(f);
  }
  return hi;
}

// The engine's sockets must not leak into a program's exec()ed children: a child that kept a
// connection's socket open would keep the peer from ever seeing it close (asio opens them
// without SOCK_CLOEXEC).
void set_cloexec(int fd) {
  if (fd < 0) return;
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

// CmOptions::llp_timeout on a connection's socket: TCP_USER_TIMEOUT (unacknowledged data and
// zero-window probes, Linux aborts with ETIMEDOUT once it has passed), and keepalive for an idle
// connection: the first probe after half of it, then every quarter; with TCP_USER_TIMEOUT set,
// Linux drops the connection when a probe is out and the timeout has passed since the peer
// last answered. 0 leaves the kernel's defaults.
void set_llp_timeout(int fd, std::chrono::milliseconds t) {
  if (fd < 0 || t.count() <= 0) return;
  // At most kMaxLlpTimeout: its keepalive idle time (1800 s) stays below Linux's TCP_KEEPIDLE
  // limit (32767 s).
  const unsigned ms = static_cast<unsigned>(std::min(t, kMaxLlpTimeout).count());
  const int on = 1, cnt = 4;
  const int idle = std::max(1, static_cast<int>(ms / 2000)),
            intvl = std::max(1, static_cast<int>(ms / 4000));
  const bool ok = ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms) == 0 &&
                  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) == 0 &&
                  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) == 0 &&
                  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl) == 0 &&
                  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt) == 0;
  if (!ok)
    log::layer("cm").warn("the LLP timeout ({} ms) could not be set on a connection: {}", ms,
                          std::strerror(errno));
}
}  // namespace

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {
spdlog::logger& cm_logger() {
  return log::layer("cm");
}
}  // namespace

std::string_view to_string(CmEventType t) {
  switch (t) {
    case CmEventType::ConnectRequest:
      return "CONNECT_REQUEST";
    case CmEventType::Established:
      return "ESTABLISHED";
    case CmEventType::Rejected:
      return "REJECTED";
    case CmEventType::Unreachable:
      return "UNREACHABLE";
    case CmEventType::ConnectError:
      return "CONNECT_ERROR";
    case CmEventType::Disconnected:
      return "DISCONNECTED";
    case CmEventType::AddrResolved:
      return "ADDR_RESOLVED";
    case CmEventType::RouteResolved:
      return "ROUTE_RESOLVED";
  }
  return "?";
}

EventChannel::EventChannel(bool nonblocking_fd) : q_(std::make_shared<Queue>()) {
  q_->fd = ::eventfd(0, EFD_CLOEXEC | (nonblocking_fd ? EFD_NONBLOCK : 0));
  if (q_->fd < 0) throw std::runtime_error("eventfd failed for an event channel");
}
EventChannel::~EventChannel() {
  std::deque<CmEvent> dropped;  // destroyed after the lock: they may hold the last id
  std::lock_guard l(q_->mu);
  q_->closed = true;
  dropped.swap(q_->events);
  ::close(q_->fd);
  q_->fd = -1;
}

void EventChannel::push(CmEvent e) {
  q_->push(std::move(e));
}

void EventChannel::set_filter(std::function<bool(const CmEvent&)> keep) {
  std::lock_guard l(q_->mu);
  q_->keep = std::move(keep);
}

void EventChannel::purge(const CmId* id) {
  auto dropped = q_->take_events_of(id);  // destroyed after the lock
}

void EventChannel::purge_if(const std::function<bool(const CmEvent&)>& drop) {
  auto dropped = q_->take_if(drop);
}

std::deque<CmEvent> EventChannel::Queue::take_events_of(const CmId* id) {
  return take_if([id](const CmEvent& e) { return e.id.get() == id; });
}

std::deque<CmEvent> EventChannel::Queue::take_if(const std::function<bool(const CmEvent&)>& pick) {
  std::deque<CmEvent> out;
  std::lock_guard l(mu);
  const bool had = !events.empty();
  for (auto it = events.begin(); it != events.end();) {
    if (pick(*it)) {
      out.push_back(std::move(*it));
      it = events.erase(it);
    } else {
      ++it;
    }
  }
  // The eventfd counts while events are queued: drained when this emptied the queue.
  if (had && events.empty() && fd >= 0) {
    std::uint64_t v;
    [[maybe_unused]] auto n = ::read(fd, &v, sizeof v);
  }
  return out;
}

void EventChannel::Queue::push(CmEvent e) {
  std::lock_guard l(mu);
  if (closed) return;  // the application destroyed the channel: nobody is listening
  if (keep && !keep(e)) return;
  events.push_back(std::move(e));
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
}

std::optional<CmEvent> EventChannel::try_get() {
  std::lock_guard l(q_->mu);
  if (q_->events.empty()) return std::nullopt;
  CmEvent e = std::move(q_->events.front());
  q_->events.pop_front();
  if (q_->events.empty()) {
    std::uint64_t v;
    [[maybe_unused]] auto n = ::read(q_->fd, &v, sizeof v);
  }
  return e;
}

std::optional<CmEvent> EventChannel::get(std::optional<std::chrono::milliseconds> timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(std::chrono::hours(0));
  for (;;) {
    if (auto e = try_get()) return e;
    int ms = -1;
    if (timeout) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      ms = static_cast<int>(left.count());
    }
    pollfd p{q_->fd, POLLIN, 0};
    if (::poll(&p, 1, ms) < 0 && errno != EINTR) return std::nullopt;
  }
}

// Shared by a listener and the ids it accepted: the connections in the MPA exchange, and what
// was reported of accept failures and refusals.
struct CmId::Listener {
  std::atomic<std::uint64_t> accepted{0}, evicted{0}, refused{0}, accept_errors{0};
  std::atomic<std::size_t> pending{0};
  // Engine thread: the accepted connections that have not sent their MPA Request, oldest
  // first; failures and resets not logged yet, and when they last were.
  std::list<std::weak_ptr<CmId>> awaiting;
  std::uint64_t errors_unlogged = 0, resets_unlogged = 0;
  std::chrono::steady_clock::time_point errors_logged{}, resets_logged{};
};

CmId::CmId(Device& dev, std::shared_ptr<EventChannel::Queue> ch, CmOptions opts)
    : dev_(dev), ch_(std::move(ch)), opts_(std::move(opts)), timer_(dev.io()) {}

CmId::~CmId() {
  if (holds_slot_ && listener_) --listener_->pending;
}

void CmId::finish_exchange() {
  finished_ = true;
  stop_awaiting();
  if (holds_slot_) {
    holds_slot_ = false;
    --listener_->pending;
  }
}

void CmId::stop_awaiting() {
  if (!awaiting_) return;
  listener_->awaiting.erase(*awaiting_);
  awaiting_.reset();
}

void CmId::evict() {
  finish_exchange();
  timer_.cancel();
  boost::system::error_code ec;
  if (sock_ && sock_->is_open()) {
    sock_->set_option(asio::socket_base::linger(true, 0), ec);
    sock_->close(ec);  // the read in progress ends (operation_aborted) and sees finished_
  }
  if (tap_) tap_->on_close(true);
}

ListenerStats CmId::listener_stats() const {
  ListenerStats st;
  if (!listener_ || !acceptor_) return st;
  st.accepted = listener_->accepted.load();
  st.evicted = listener_->evicted.load();
  st.refused = listener_->refused.load();
  st.accept_errors = listener_->accept_errors.load();
  st.pending = listener_->pending.load();
  return st;
}

std::size_t CmId::max_private_data() const {
  auto req = request();
  const bool enhanced = req ? req->enhanced : opts_.policy.revision >= 2;
  return mpa::kMaxPrivateData - (enhanced ? mpa::kEnhancedPrefixSize : 0);
}

std::shared_ptr<CmId> CmId::create(Device& dev, EventChannel& ch, CmOptions opts) {
  return std::shared_ptr<CmId>(new CmId(dev, ch.q_, std::move(opts)));
}

std::shared_ptr<QueuePair> CmId::qp() const {
  std::lock_guard l(mu_);
  return qp_;
}

std::string CmId::peer() const {
  std::lock_guard l(mu_);
  return peer_;
}

std::optional<mpa::MpaFrame> CmId::request() const {
  std::lock_guard l(mu_);
  return request_;
}

void CmId::emit(CmEventType t, std::string detail, Bytes pdata) {
  if (t == CmEventType::ConnectError || t == CmEventType::Rejected || t == CmEventType::Unreachable)
    failed_ = true;
  CmEvent e;
  e.type = t;
  e.id = shared_from_this();
  e.detail = std::move(detail);
  e.private_data = std::move(pdata);
  cm_logger().info("{} {}{}{}", peer(), to_string(t), e.detail.empty() ? "" : ": ", e.detail);
  ch_->push(std::move(e));
}

std::size_t CmId::emss() {
  if (opts_.emss) return opts_.emss;
  int mss = 0;
  socklen_t len = sizeof mss;
  if (::getsockopt(sock_->native_handle(), IPPROTO_TCP, TCP_MAXSEG, &mss, &len) != 0 || mss <= 0)
    return 1448;
  return static_cast<std::size_t>(mss);
}

void CmId::arm_timer(std::chrono::milliseconds t, std::string what) {
  timer_.expires_after(t);
  timer_.async_wait(
      [self = shared_from_this(), what = std::move(what), t](const boost::system::error_code& ec) {
        if (ec || self->finished_) return;
        self->finish_exchange();
        boost::system::error_code ignored;
        if (self->sock_) self->sock_->close(ignored);
        self->emit(CmEventType::ConnectError,
                   fmt::format("{} within {} ms; connection closed", what, t.count()));
      });
}

int CmId::listen(const std::string& addr, std::uint16_t port, std::string* why) {
  if (int e = bind(addr, port, why)) return e;
  return listen(why);
}

int CmId::bind(const std::string& addr, std::uint16_t port, std::string* why, bool queue_now) {
  boost::system::error_code ec;
  auto a = asio::ip::make_address(addr, ec);
  if (ec) {
    if (why) *why = fmt::format("'{}' is not an IP address", addr);
    return EINVAL;
  }
  if (acceptor_) {
    if (why) *why = "the id is bound already";
    return EINVAL;
  }
  acceptor_.emplace(dev_.io());
  tcp::endpoint ep(a, port);
  acceptor_->open(ep.protocol(), ec);
  if (!ec) set_cloexec(acceptor_->native_handle());
  if (!ec) acceptor_->set_option(tcp::acceptor::reuse_address(true), ec);
  // "::" takes IPv4 too, as the kernel's rdma_cm binds a wildcard IPv6 address.
  if (!ec && a.is_v6()) acceptor_->set_option(asio::ip::v6_only(false), ec);
  if (!ec) acceptor_->bind(ep, ec);
  if (!ec && queue_now) {
    acceptor_->listen(asio::socket_base::max_listen_connections, ec);
    backlog_ = !ec;
  }
  if (ec) {
    if (why) *why = fmt::format("cannot bind {}:{}: {}", addr, port, ec.message());
    const int err = ec == asio::error::address_in_use  ? EADDRINUSE
                    : ec == asio::error::access_denied ? EACCES
                                                       : EADDRNOTAVAIL;
    acceptor_.reset();
    return err;
  }
  std::lock_guard l(mu_);
  peer_ = fmt::format("listen {}:{}", addr, acceptor_->local_endpoint().port());
  return 0;
}

int CmId::listen(std::string* why) {
  if (!acceptor_) {
    if (why) *why = "listen needs a bound id";
    return EINVAL;
  }
  if (listener_) return 0;  // listening already
  boost::system::error_code ec;
  if (!backlog_) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    if (why) *why = fmt::format("cannot listen on {}: {}", peer(), ec.message());
    return EADDRINUSE;
  }
  listener_ = std::make_shared<Listener>();
  asio::post(dev_.io(), [self = shared_from_this()] { self->do_accept_loop(); });
  return 0;
}

void CmId::stop_listening() {
  if (!acceptor_) return;
  // Bounded; once the engine has stopped the acceptor is closed from here.
  dev_.run_and_wait(
      [self = shared_from_this()] {
        boost::system::error_code ig;
        if (self->acceptor_) self->acceptor_->close(ig);
      },
      std::chrono::seconds(5));
}

std::uint16_t CmId::local_port() const {
  if (acceptor_) return acceptor_->local_endpoint().port();
  if (sock_) {
    boost::system::error_code ec;
    auto ep = sock_->local_endpoint(ec);
    if (!ec) return ep.port();
  }
  return 0;
}

tcp::endpoint CmId::local_endpoint() const {
  boost::system::error_code ec;
  if (sock_) {
    auto ep = sock_->local_endpoint(ec);
    if (!ec) return ep;
  }
  if (acceptor_) {
    auto ep = acceptor_->local_endpoint(ec);
    if (!ec) return ep;
  }
  return {};
}

tcp::endpoint CmId::remote_endpoint() const {
  boost::system::error_code ec;
  if (sock_) {
    auto ep = sock_->remote_endpoint(ec);
    if (!ec) return ep;
  }
  return {};
}

void CmId::migrate(EventChannel& ch) {
  // ch_ is read by the engine thread when it emits; change it there.
  dev_.run_and_wait(
      [self = shared_from_this(), q = ch.q_] {
        // Events still queued on the old channel move along (as the kernel's ucma_move_events).
        auto moved = self->ch_->take_events_of(self.get());
        self->ch_ = q;
        for (auto& e : moved) q->push(std::move(e));
      },
      std::chrono::seconds(5));
}

void CmId::do_accept_loop() {
  acceptor_->async_accept(
      [self = shared_from_this()](const boost::system::error_code& ec, tcp::socket s) {
        if (ec == asio::error::operation_aborted || !self->acceptor_->is_open()) return;
        if (ec) return self->on_accept_error(ec);
        self->on_tcp_accepted(std::move(s));
        self->do_accept_loop();
      });
}

void CmId::on_accept_error(const boost::system::error_code& ec) {
  auto& l = *listener_;
  ++l.accept_errors;
  ++l.errors_unlogged;
  // ECONNABORTED: that one connection was reset before we took it; the next may be fine. Any
  // other failure (EMFILE, ENFILE, ENOBUFS, ENOMEM above all) leaves the connection queued, so
  // trying again at once fails again at once: wait, and let timeouts free descriptors.
  const bool transient = ec == asio::error::connection_aborted;
  const auto now = std::chrono::steady_clock::now();
  if (now - l.errors_logged >= kAcceptLogInterval) {
    cm_logger().warn(
        "{}: accept failed: {} ({} failure(s) since the last report){}", peer(), ec.message(),
        l.errors_unlogged,
        transient ? "" : fmt::format("; trying again every {} ms", opts_.accept_backoff.count()));
    l.errors_unlogged = 0;
    l.errors_logged = now;
  }
  if (transient) return do_accept_loop();
  // The listener has no MPA exchange of its own: its timer is free for this.
  timer_.expires_after(opts_.accept_backoff);
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
    if (e || !self->acceptor_ || !self->acceptor_->is_open()) return;
    self->do_accept_loop();
  });
}

void CmId::read_frame(mpa::FrameKind kind, std::function<void(Result<mpa::MpaFrame>)> done) {
  frame_buf_.assign(mpa::kFrameHeaderSize, 0);
  auto self = shared_from_this();
  asio::async_read(
      *sock_, asio::buffer(frame_buf_),
      [self, kind, done = std::move(done)](const boost::system::error_code& ec, std::size_t n) {
        self->frame_octets_ = n;
        if (ec) {
          if (self->finished_) return;
          return done(fail(
              Errc::MpaTcpLost, "RFC 5044 §7.1: the MPA frame must arrive",
              fmt::format("connection ended before the MPA {}: {}",
                          kind == mpa::FrameKind::Request ? "Request" : "Reply", ec.message())));
        }
        auto size = mpa::frame_size_from_header(self->frame_buf_);
        if (!size || *size > mpa::kFrameHeaderSize + mpa::kMaxPrivateData) {
          // Let the frame decoder say exactly what is wrong with the header.
          return done(mpa::decode_frame(self->frame_buf_, kind));
        }
        self->frame_buf_.resize(*size);
        asio::async_read(
            *self->sock_,
            asio::buffer(self->frame_buf_.data() + mpa::kFrameHeaderSize,
                         *size - mpa::kFrameHeaderSize),
            [self, kind, done](const boost::system::error_code& ec2, std::size_t) {
              if (ec2) {
                if (self->finished_) return;
                return done(
                    fail(Errc::MpaTcpLost, "RFC 5044 §7.1: the MPA frame must arrive",
                         fmt::format("connection ended inside the MPA frame: {}", ec2.message())));
              }
              if (self->tap_) self->tap_->on_data(false, self->frame_buf_);
              done(mpa::decode_frame(self->frame_buf_, kind));
            });
      });
}

void CmId::on_tcp_accepted(tcp::socket s) {
  boost::system::error_code ec;
  auto& lst = *listener_;
  auto remote = s.remote_endpoint(ec);
  const std::string from =
      ec ? std::string("?") : fmt::format("{}:{}", remote.address().to_string(), remote.port());
  if (lst.pending.load() >= opts_.max_pending_mpa) {
    // Every slot of the MPA exchange is taken. The oldest connection that has not sent its
    // Request goes to make room (a real client sends its Request at once, so idle connections
    // cannot lock it out); when every slot holds a Request the application has not answered,
    // the new connection goes. Either is reset at once, with no event.
    std::shared_ptr<CmId> victim;
    while (!victim && !lst.awaiting.empty()) {
      victim = lst.awaiting.front().lock();
      if (!victim) lst.awaiting.pop_front();
    }
    ++lst.resets_unlogged;
    const auto now = std::chrono::steady_clock::now();
    const bool log_now = now - lst.resets_logged >= kAcceptLogInterval;
    if (log_now) {
      cm_logger().warn(
          "{}: {} connections are in the MPA exchange, the most allowed: reset {} ({} reset "
          "since the last report)",
          peer(), lst.pending.load(),
          victim ? fmt::format("{}, which sent no MPA Request, to make room for {}", victim->peer(),
                               from)
                 : fmt::format("the new connection from {}", from),
          lst.resets_unlogged);
      lst.resets_unlogged = 0;
      lst.resets_logged = now;
    }
    if (!victim) {
      ++lst.refused;
      s.set_option(asio::socket_base::linger(true, 0), ec);
      s.close(ec);
      return;
    }
    ++lst.evicted;
    victim->evict();
  }
  ++lst.accepted;
  ++lst.pending;
  auto child = std::shared_ptr<CmId>(new CmId(dev_, ch_, opts_));
  child->listener_ = listener_;
  child->parent_ = weak_from_this();
  child->holds_slot_ = true;
  lst.awaiting.push_back(child);
  child->awaiting_ = std::prev(lst.awaiting.end());
  s.set_option(tcp::no_delay(true), ec);
  set_cloexec(s.native_handle());
  set_llp_timeout(s.native_handle(), opts_.llp_timeout);
  child->sock_.emplace(std::move(s));
  {
    std::lock_guard l(child->mu_);
    child->peer_ = fmt::format("{}:{}", remote.address().to_string(), remote.port());
  }
  if (opts_.tap) {
    TapInfo ti{child->sock_->local_endpoint(ec), remote, false, child->emss()};
    child->tap_ = opts_.tap(ti);
  }
  cm_logger().debug("TCP connection from {}", child->peer());
  // RFC 5044 §7.1: the responder waits a bounded time for the MPA Request.
  child->arm_timer(opts_.mpa_timeout, "no MPA Request arrived");
  child->read_frame(mpa::FrameKind::Request, [child](Result<mpa::MpaFrame> f) {
    if (child->finished_) return;
    if (!f) {
      child->finish_exchange();
      child->timer_.cancel();
      boost::system::error_code ignored;
      child->sock_->close(ignored);
      child->emit(CmEventType::ConnectError,
                  fmt::format("bad MPA Request, connection closed: {}", f.error().to_string()));
      return;
    }
    child->timer_.cancel();
    child->stop_awaiting();
    {
      std::lock_guard l(child->mu_);
      child->request_ = *f;
    }
    CmEvent e;
    e.type = CmEventType::ConnectRequest;
    e.id = child;
    e.private_data = f->private_data;
    if (f->params) {
      e.peer_ird = f->params->ird;
      e.peer_ord = f->params->ord;
    }
    e.detail = mpa::describe(*f);
    cm_logger().info("{} CONNECT_REQUEST: {}", child->peer(), e.detail);
    // The application must accept or reject within the MPA timeout.
    child->timer_.expires_after(child->opts_.mpa_timeout * 2);
    child->timer_.async_wait([child](const boost::system::error_code& ec2) {
      if (ec2 || child->finished_) return;
      child->finish_exchange();
      boost::system::error_code ignored;
      child->sock_->close(ignored);
      cm_logger().warn("{}: connect request neither accepted nor rejected in time; closed",
                       child->peer());
    });
    child->ch_->push(std::move(e));
  });
}

void CmId::start_qp(const mpa::ConnectionParams& negotiated, bool initiator) {
  mpa::ConnectionParams params = negotiated;
  if (!params.enhanced) {
    // MPA v1 (or v2 without RFC 6581 IRD/ORD) negotiates no IRD/ORD: each side keeps its own.
    params.initiator_ird = params.responder_ird = ird_;
    params.initiator_ord = params.responder_ord = ord_;
  }
  StreamSetup st;
  st.params = params;
  st.initiator = initiator;
  st.emss = emss();
  st.ignore_ord = opts_.ignore_ord;
  if (initiator) st.first_fpdu_delay = opts_.first_fpdu_delay;
  st.close_timeout = opts_.close_timeout;
  auto qp = this->qp();
  started_ = true;
  std::weak_ptr<CmId> weak = shared_from_this();
  auto on_closed = [weak](const QpClosed& c) {
    auto self = weak.lock();
    if (!self || self->disconnected_) return;
    self->disconnected_ = true;
    self->emit(CmEventType::Disconnected, c.detail);
  };
  if (initiator && params.peer_to_peer) qp->send_rtr(params.rtr);
  // The QP is RTS before ESTABLISHED is reported, so the application can post at once; a
  // first-FPDU delay only holds transmission back (StreamSetup::first_fpdu_delay).
  RxOptions rx;
  rx.shaper = opts_.rx_shaper;
  rx.observer = opts_.rx_observer;
  rx.beyond_holes = opts_.beyond_holes;
  rx.direct_min = opts_.direct_min;
  // The real-segment mode: the socket's octets are numbered from the peer's ISN + 1 + the MPA
  // frame it sent (RFC 5044 §7.1: FPDUs follow the frame), so that they line up with the
  // segments the tap reads off the wire.
  std::optional<std::pair<tcp::endpoint, tcp::endpoint>> tapped;
  if (opts_.segment_tap) {
    boost::system::error_code e1, e2;
    const auto remote = sock_->remote_endpoint(e1);
    const auto local = sock_->local_endpoint(e2);
    const auto isn = e1 || e2 ? std::nullopt : opts_.segment_tap->peer_isn(remote, local);
    if (!isn) {
      cm_logger().warn(
          "{}: the segment tap on {} saw no SYN of this connection: it is received from the "
          "socket's stream only",
          peer(), opts_.segment_tap->ifname());
    } else {
      rx.stream_start = *isn + 1 + static_cast<std::uint32_t>(frame_buf_.size());
      rx.shaper = opts_.segment_tap->socket_numbering();
      // The window TCP advertises never exceeds the receive buffer, which the kernel may grow
      // up to tcp_rmem's maximum (Linux reports sizes doubled, as it accounts them); 64 KiB
      // more for what is in flight as the window moves.
      boost::asio::socket_base::receive_buffer_size rcvbuf;
      boost::system::error_code e3;
      sock_->get_option(rcvbuf, e3);
      const int rb = std::max(e3 ? 0 : rcvbuf.value(), tcp_rmem_max());
      rx.tap_window = static_cast<std::uint32_t>(std::clamp(rb, 64 << 10, 1 << 30)) + (64u << 10);
      tapped.emplace(remote, local);
    }
  }
  qp->start(std::make_unique<SocketTransport>(std::move(*sock_)), st, {}, tap_, on_closed,
            std::move(rx));
  sock_.reset();
  if (tapped) opts_.segment_tap->attach(tapped->first, tapped->second, qp);
}

void CmId::connect(const std::string& host, std::uint16_t port, std::shared_ptr<QueuePair> qp,
                   const ConnParam& param) {
  {
    std::lock_guard l(mu_);
    qp_ = std::move(qp);
    peer_ = fmt::format("{}:{}", host, port);
  }
  asio::post(dev_.io(), [self = shared_from_this(), host, port, param] {
    self->start_connect(host, port, param);
  });
}

void CmId::start_connect(const std::string& host, std::uint16_t port, const ConnParam& param) {
  if (param.private_data.size() > max_private_data()) {
    finish_exchange();
    return emit(CmEventType::ConnectError,
                fmt::format("{} octets of private data; the MPA Request carries at most {}",
                            param.private_data.size(), max_private_data()));
  }
  boost::system::error_code ec;
  tcp::resolver resolver(dev_.io());
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) {
    finish_exchange();
    return emit(CmEventType::Unreachable,
                fmt::format("cannot resolve '{}': {}", host, ec.message()));
  }
  sock_.emplace(dev_.io());
  timer_.expires_after(opts_.connect_timeout);
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
    if (e || self->finished_) return;
    self->finish_exchange();
    boost::system::error_code ignored;
    self->sock_->close(ignored);
    self->emit(CmEventType::Unreachable, fmt::format("TCP connect timed out after {} ms",
                                                     self->opts_.connect_timeout.count()));
  });
  try_tcp_connect(endpoints, param, std::chrono::steady_clock::now() + opts_.connect_retry);
}

void CmId::try_tcp_connect(const tcp::resolver::results_type& endpoints, const ConnParam& param,
                           std::chrono::steady_clock::time_point retry_until) {
  if (finished_) return;
  retry_ = ConnectRetry{endpoints, param, retry_until};
  asio::async_connect(
      *sock_, endpoints,
      [self = shared_from_this(), endpoints, param, retry_until](
          const boost::system::error_code& cerr, const tcp::endpoint& ep) {
        if (self->finished_) return;
        // A refused connection is tried again for CmOptions::connect_retry (a
        // server that is between two listeners, as perftest's is), each attempt on
        // a fresh socket.
        if ((cerr == asio::error::connection_refused || cerr == asio::error::connection_reset) &&
            std::chrono::steady_clock::now() < retry_until) {
          auto t =
              std::make_shared<asio::steady_timer>(self->dev_.io(), std::chrono::milliseconds(20));
          t->async_wait(
              [t, self, endpoints, param, retry_until](const boost::system::error_code& e) {
                if (!e) self->try_tcp_connect(endpoints, param, retry_until);
              });
          return;
        }
        if (cerr) {
          self->finish_exchange();
          self->timer_.cancel();
          return self->emit(CmEventType::Unreachable,
                            fmt::format("TCP connect: {}", cerr.message()));
        }
        self->send_mpa_request(ep, param);
      });
}

void CmId::send_mpa_request(const tcp::endpoint& ep, const ConnParam& param) {
  boost::system::error_code ig;
  set_cloexec(sock_->native_handle());
  sock_->set_option(tcp::no_delay(true), ig);
  set_llp_timeout(sock_->native_handle(), opts_.llp_timeout);
  {
    std::lock_guard l(mu_);
    peer_ = fmt::format("{}:{}", ep.address().to_string(), ep.port());
  }
  if (opts_.tap) tap_ = opts_.tap(TapInfo{sock_->local_endpoint(ig), ep, true, emss()});
  mpa::Policy pol = opts_.policy;
  // Kept for MPA v1, which negotiates no IRD/ORD (see start_qp), as accept() does.
  pol.ird = ird_ = param.responder_resources;
  pol.ord = ord_ = param.initiator_depth;
  auto req = mpa::make_request(pol, param.private_data);
  auto bytes = std::make_shared<Bytes>(req.encode());
  if (tap_) tap_->on_data(true, *bytes);
  arm_timer(opts_.mpa_timeout, "no MPA Reply arrived");
  asio::async_write(
      *sock_, asio::buffer(*bytes),
      [self = shared_from_this(), bytes, pol, req](const boost::system::error_code& we,
                                                   std::size_t) {
        if (we) {
          if (self->finished_) return;
          // Reset while the Request goes: nobody took it (see on_mpa_reply).
          if ((we == asio::error::connection_reset || we == asio::error::broken_pipe) &&
              self->retry_ && std::chrono::steady_clock::now() < self->retry_->until)
            return self->retry_connect();
          self->finish_exchange();
          self->timer_.cancel();
          return self->emit(CmEventType::ConnectError,
                            fmt::format("sending the MPA Request: {}", we.message()));
        }
        self->read_frame(mpa::FrameKind::Reply, [self, pol, req](Result<mpa::MpaFrame> f) {
          self->on_mpa_reply(pol, req, std::move(f));
        });
      });
}

// A new TCP attempt in 20 ms, on a fresh connection (the initiator's retry_ is set).
void CmId::retry_connect() {
  boost::system::error_code ig;
  sock_->close(ig);
  if (tap_) tap_.reset();
  auto t = std::make_shared<asio::steady_timer>(dev_.io(), std::chrono::milliseconds(20));
  t->async_wait([t, self = shared_from_this(), r = *retry_](const boost::system::error_code& e) {
    if (!e) self->try_tcp_connect(r.endpoints, r.param, r.until);
  });
}

void CmId::on_mpa_reply(const mpa::Policy& pol, const mpa::MpaFrame& req, Result<mpa::MpaFrame> f) {
  if (finished_) return;
  if (!f && f.error().code == Errc::MpaTcpLost && frame_octets_ == 0 && retry_ &&
      std::chrono::steady_clock::now() < retry_->until) {
    // Reset before any octet of a Reply: nobody took the Request. Behind a forwarder (QEMU's
    // slirp, a NAT) a server between two listeners (perftest's) looks like this instead of a
    // refused connect, so it is tried again the same way, on a fresh connection.
    return retry_connect();
  }
  finish_exchange();
  timer_.cancel();
  if (!f) {
    boost::system::error_code ig;
    sock_->close(ig);
    return emit(CmEventType::ConnectError, fmt::format("bad MPA Reply: {}", f.error().to_string()));
  }
  auto out = mpa::finish_initiator(pol, req, *f);
  switch (out.kind) {
    case mpa::Outcome::Kind::Established:
      return establish_initiator(out.params, *f);
    case mpa::Outcome::Kind::Rejected: {
      boost::system::error_code ig;
      sock_->close(ig);
      return emit(
          CmEventType::Rejected,
          out.error ? out.error->to_string() : std::string("the responder rejected the connection"),
          f->private_data);
    }
    case mpa::Outcome::Kind::Terminated: {
      // RFC 5044 §7.1 / RFC 6581 §7: the initiator answers an unacceptable Reply with a
      // Terminate carrying the LLP error, then closes.
      const auto& err = *out.error;
      ddp::Segment s;
      s.hdr = ddp::untagged_header(rdmap::Opcode::Terminate, QueueNumber{rdmap::kQnTerminate},
                                   Msn{1}, MessageOffset{0});
      s.body = rdmap::make_terminate(err.code);
      Bytes ulpdu, fpdu;
      ddp::encode_segment(s, ulpdu);
      mpa::FpduEncoder enc(out.params.framing_to_responder());
      if (enc.encode(ulpdu, fpdu)) send_and_close(std::move(fpdu));
      return emit(CmEventType::ConnectError, err.to_string());
    }
  }
}

void CmId::establish_initiator(const mpa::ConnectionParams& params, const mpa::MpaFrame& reply) {
  // Disconnected or moved to ERROR while the Reply was on its way: the QP stays where the
  // application put it.
  if (auto why = qp_gone()) return abort_exchange(*why);
  start_qp(params, true);
  CmEvent e;
  e.type = CmEventType::Established;
  e.id = shared_from_this();
  e.private_data = reply.private_data;
  e.params = params;
  if (reply.params) {
    e.peer_ird = reply.params->ird;
    e.peer_ord = reply.params->ord;
  }
  e.detail = mpa::describe(params);
  cm_logger().info("{} ESTABLISHED: {}", peer(), e.detail);
  ch_->push(std::move(e));
}

void CmId::send_and_close(Bytes data) {
  auto buf = std::make_shared<Bytes>(std::move(data));
  if (tap_) tap_->on_data(true, *buf);
  asio::async_write(
      *sock_, asio::buffer(*buf),
      [self = shared_from_this(), buf](const boost::system::error_code&, std::size_t) {
        boost::system::error_code ig;
        self->sock_->shutdown(tcp::socket::shutdown_both, ig);
        self->sock_->close(ig);
        if (self->tap_) self->tap_->on_close(true);
      });
}

int CmId::accept(std::shared_ptr<QueuePair> qp, const ConnParam& param, std::string* why) {
  auto req = request();
  if (!req) {
    if (why) *why = "accept needs an id from a CONNECT_REQUEST event";
    return EINVAL;
  }
  if (!qp) {
    if (why) *why = "accept needs a QP";
    return EINVAL;
  }
  if (const auto st = qp->state(); st != QpState::Idle && st != QpState::Rtr) {
    // As siw_accept: only a QP that has not left IDLE/RTR can be started.
    if (why) *why = fmt::format("accept needs a QP in IDLE or RTR; this one is {}", to_string(st));
    return EINVAL;
  }
  if (param.private_data.size() > max_private_data()) {
    if (why)
      *why = fmt::format("{} octets of private data; the MPA Reply carries at most {}",
                         param.private_data.size(), max_private_data());
    return EINVAL;
  }
  {
    std::lock_guard l(mu_);
    qp_ = std::move(qp);
  }
  asio::post(dev_.io(), [self = shared_from_this(), param, req = *req] {
    if (self->finished_) {
      self->emit(CmEventType::ConnectError, "accept came after the connect request timed out");
      return;
    }
    self->finish_exchange();
    self->timer_.cancel();
    mpa::Policy pol = self->opts_.policy;
    pol.ird = self->ird_ = param.responder_resources;
    pol.ord = self->ord_ = param.initiator_depth;
    auto d = mpa::respond(pol, req, param.private_data);
    Bytes reply = d.reply.encode();
    if (d.outcome.kind != mpa::Outcome::Kind::Established) {
      self->send_and_close(std::move(reply));
      self->emit(CmEventType::ConnectError,
                 fmt::format("our MPA policy refuses this Request; sent a rejecting Reply: {}",
                             d.outcome.error ? d.outcome.error->to_string() : "rejected"));
      return;
    }
    auto buf = std::make_shared<Bytes>(std::move(reply));
    if (self->opts_.reply_delay.count() <= 0) return self->send_reply(buf, d.outcome.params);
    // Testing aid (CmOptions::reply_delay); the accept timeout's timer is free now.
    self->timer_.expires_after(self->opts_.reply_delay);
    self->timer_.async_wait(
        [self, buf, params = d.outcome.params](const boost::system::error_code& ec) {
          if (!ec) self->send_reply(buf, params);
        });
  });
  return 0;
}

void CmId::send_reply(std::shared_ptr<Bytes> buf, mpa::ConnectionParams params) {
  // Disconnected (or the QP moved to ERROR) after accept: no Reply, the QP stays put.
  if (auto why = qp_gone()) return abort_exchange(*why);
  if (tap_) tap_->on_data(true, *buf);
  asio::async_write(
      *sock_, asio::buffer(*buf),
      [self = shared_from_this(), buf, params](const boost::system::error_code& ec, std::size_t) {
        if (ec)
          return self->emit(CmEventType::ConnectError,
                            fmt::format("sending the MPA Reply: {}", ec.message()));
        if (auto why = self->qp_gone()) return self->abort_exchange(*why);
        self->start_qp(params, false);
        CmEvent e;
        e.type = CmEventType::Established;
        e.id = self;
        e.params = params;
        e.detail = mpa::describe(params);
        cm_logger().info("{} ESTABLISHED: {}", self->peer(), e.detail);
        self->ch_->push(std::move(e));
      });
}

std::optional<std::string> CmId::qp_gone() const {
  if (disconnect_requested_) return std::string("disconnected during the MPA exchange");
  auto qp = this->qp();
  if (!qp) return std::string("no QP to start");
  if (const auto st = qp->state(); st != QpState::Idle && st != QpState::Rtr)
    return fmt::format("the QP moved to {} during the MPA exchange", to_string(st));
  return std::nullopt;
}

void CmId::abort_exchange(const std::string& why) {
  boost::system::error_code ig;
  if (sock_ && sock_->is_open()) {
    sock_->shutdown(tcp::socket::shutdown_both, ig);
    sock_->close(ig);
    if (tap_) tap_->on_close(true);
  }
  const std::string detail = fmt::format("{}: the QP was not started; connection closed", why);
  if (disconnect_requested_) {
    if (disconnected_) return;
    disconnected_ = true;
    return emit(CmEventType::Disconnected, detail);
  }
  emit(CmEventType::ConnectError, detail);
}

int CmId::reject(ByteSpan private_data, std::string* why) {
  auto req = request();
  if (!req) {
    if (why) *why = "reject needs an id from a CONNECT_REQUEST event";
    return EINVAL;
  }
  if (private_data.size() > max_private_data()) {
    if (why)
      *why = fmt::format("{} octets of private data; the MPA Reply carries at most {}",
                         private_data.size(), max_private_data());
    return EINVAL;
  }
  Bytes pd(private_data.begin(), private_data.end());
  asio::post(dev_.io(), [self = shared_from_this(), pd, req = *req] {
    if (self->finished_) return;
    self->finish_exchange();
    self->timer_.cancel();
    self->send_and_close(mpa::make_reject(req, pd).encode());
  });
  return 0;
}

void CmId::disconnect() {
  auto qp = this->qp();
  if (!qp) return;  // a request not accepted yet: nothing to disconnect (as the kernel's iWARP CM)
  // Noted before the QP hears of it (both run on the engine thread, in this order), so that an
  // exchange completing after it does not start the QP.
  asio::post(dev_.io(), [self = shared_from_this()] {
    if (!self->started_) self->disconnect_requested_ = true;
  });
  qp->disconnect();
}

}  // namespace iwarp::rnic
