// The connection manager at its limits and at the edges of the MPA exchange
// (rnic/connection_manager, verbs_shim/rdma_cm):
//  * a listener out of file descriptors backs off instead of spinning (kAcceptBackoff), logs a
//    bounded number of lines, and accepts again once descriptors come back;
//  * at most max_pending_mpa connections sit in the MPA exchange; more are closed at once;
//  * a peer's private data (up to 512 octets) and IRD/ORD (14 bits) reach the application
//    whole: 300 octets and 256 are not cut to 8 bits;
//  * rdma_disconnect (or a move to ERROR) during the MPA exchange is not undone by the Reply.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process_support.hpp"
#include "raw_peer.hpp"
#include "rnic/connection_manager.hpp"  // the engine behind the endpoint
#include "tests/sanitizers.hpp"
#include "verbs_shim/endpoint.hpp"

using namespace iwarp;
using namespace iwarp::verbs;
using namespace std::chrono_literals;

// The sanitizers' runtime needs descriptors of its own (UBSan's vptr check opens a pipe to
// probe memory, and reports an invalid vptr when it cannot): a process that runs out of them
// fails in the sanitizer, not in the code under test. The descriptor tests skip there.
#if IWARP_TEST_ASAN || IWARP_TEST_UBSAN
#define IWARP_TEST_SANITIZED 1
#endif

namespace {

void skip_if_sanitized() {
#ifdef IWARP_TEST_SANITIZED
  GTEST_SKIP() << "the sanitizer runtime itself fails when the process runs out of descriptors";
#endif
}

// An idle TCP connection to 127.0.0.1:port (it never sends anything); -1 on failure.
int idle_connection(std::uint16_t port) {
  return iwarp::testing::connect_loopback(port);
}

// True when the peer closed or reset `fd` within `t`.
bool closed_by_peer(int fd, std::chrono::milliseconds t) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(t.count())) <= 0) return false;
  char b;
  const auto n = ::recv(fd, &b, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

double cpu_seconds(const rusage& r) {
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

template <class Pred>
bool wait_until(Pred p, std::chrono::milliseconds limit = 5000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!p()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// One side over the rdma_cm calls directly: device, PD, CQ, event channel, id.
struct Side {
  ibv_context* ctx = ibv_open_device("rnic-cm-limits");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  rdma_event_channel* ch = rdma_create_event_channel(ctx);
  rdma_cm_id* id = nullptr;
  std::vector<rdma_cm_id*> accepted;

  Side() { rdma_create_id(ch, &id, nullptr); }
  ~Side() {
    for (auto* a : accepted) {
      if (a->qp) rdma_destroy_qp(a);
      rdma_destroy_id(a);
    }
    if (id->qp) rdma_destroy_qp(id);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ch);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
  }
  int make_qp(rdma_cm_id* on) {
    ibv_qp_init_attr attr;
    attr.send_cq = attr.recv_cq = cq;
    return rdma_create_qp(on, pd, &attr);
  }
  std::uint16_t listen(const rnic::CmOptions& opts = {}) {
    rdma_set_mpa(id, opts);
    rdma_bind_addr(id, "127.0.0.1", 0);
    EXPECT_EQ(rdma_listen(id, 16), 0) << ibv_last_error();
    return rdma_get_src_port(id);
  }
  // Resolves and makes the QP; the caller connects.
  void prepare(std::uint16_t port, const rnic::CmOptions& opts = {}) {
    rdma_set_mpa(id, opts);
    rdma_resolve_addr(id, "127.0.0.1", port, 1000);
    EXPECT_EQ(next(), RDMA_CM_EVENT_ADDR_RESOLVED);
    rdma_resolve_route(id, 1000);
    EXPECT_EQ(next(), RDMA_CM_EVENT_ROUTE_RESOLVED);
    EXPECT_EQ(make_qp(id), 0);
  }
  // The next event's type (-1: none within `t`); `keep` receives it when given (to ack).
  int next(std::chrono::milliseconds t = 5000ms, rdma_cm_event** keep = nullptr) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch, &ev, static_cast<int>(t.count())) != 0) return -1;
    const int type = ev->event;
    if (keep)
      *keep = ev;
    else
      rdma_ack_cm_event(ev);
    return type;
  }
  // Server: the next CONNECT_REQUEST, skipping (and destroying the ids of) connections that
  // failed before theirs.
  // The next connect request, acked, with a QP made for it and accepted with `p`.
  void accept_next(rdma_conn_param* p) {
    auto* ev = next_request();
    ASSERT_NE(ev, nullptr);
    rdma_cm_id* cid = ev->id;
    rdma_ack_cm_event(ev);
    ASSERT_EQ(make_qp(cid), 0);
    ASSERT_EQ(rdma_accept(cid, p), 0) << ibv_last_error();
  }
  rdma_cm_event* next_request(std::chrono::milliseconds t = 10000ms) {
    const auto deadline = std::chrono::steady_clock::now() + t;
    while (std::chrono::steady_clock::now() < deadline) {
      rdma_cm_event* ev = nullptr;
      if (rdma_get_cm_event(ch, &ev, 100) != 0) continue;
      if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        accepted.push_back(ev->id);
        return ev;
      }
      if (ev->event == RDMA_CM_EVENT_CONNECT_ERROR && ev->id && ev->id != id)
        rdma_destroy_id(ev->id);
      rdma_ack_cm_event(ev);
    }
    return nullptr;
  }
  rnic::ListenerStats stats() const { return id->cm->listener_stats(); }
};

Bytes octets(std::size_t n, std::uint8_t seed) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(seed + i * 7);
  return b;
}

// Runs `rnic args...` with RLIMIT_NOFILE lowered to `nofile`, output to `out`.
pid_t spawn_limited(rlim_t nofile, const std::vector<std::string>& args, const std::string& out) {
  std::vector<std::string> full{IWARP_RNIC_BIN};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) ::_exit(126);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(fd);
    rlimit r{nofile, nofile};
    if (::setrlimit(RLIMIT_NOFILE, &r) != 0) ::_exit(126);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

// The issue: with `ulimit -n 40` and 60 idle TCP connections, `rnic ping --server` re-armed
// accept at once on EMFILE, burning a core and logging about 2 million lines in 5 s.
TEST(CmLimits, ServerOutOfDescriptorsNeitherSpinsNorFloodsTheLog) {
  skip_if_sanitized();
  if (::testing::Test::IsSkipped()) return;
  const std::string port = test::free_port();
  ASSERT_FALSE(port.empty());
  const std::string out =
      ::testing::TempDir() + "cm_limits_emfile_" + std::to_string(::getpid()) + ".out";
  const pid_t pid =
      spawn_limited(40, {"ping", "--server", "--bind", "127.0.0.1", "--port", port}, out);
  ASSERT_GT(pid, 0);
  struct Reaper {
    pid_t pid;
    rusage ru{};
    bool done = false;
    void reap() {
      if (done) return;
      ::kill(pid, SIGKILL);
      int st = 0;
      ::wait4(pid, &st, 0, &ru);
      done = true;
    }
    ~Reaper() { reap(); }
  } child{pid};
  ASSERT_TRUE(
      wait_until([&] { return read_file(out).find("listening") != std::string::npos; }, 20000ms))
      << read_file(out);
  std::vector<int> idle;
  for (int i = 0; i < 60; ++i) {
    const int s = idle_connection(static_cast<std::uint16_t>(std::stoi(port)));
    ASSERT_GE(s, 0) << "connection " << i;
    idle.push_back(s);
  }
  // Well within the 5 s MPA timeout: the accepted ones still hold their descriptors.
  std::this_thread::sleep_for(3s);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, WNOHANG), 0) << "the server died: " << read_file(out);
  child.reap();
  for (int s : idle) ::close(s);
  const std::string log = read_file(out);
  const double cpu = cpu_seconds(child.ru);
  EXPECT_LT(cpu, 0.5) << "the server used " << cpu << " s of CPU in 3 s";
  EXPECT_GE(count(log, "accept failed"), 1u) << log.substr(0, 2000);
  EXPECT_LE(count(log, "accept failed"), 5u) << log.substr(0, 2000);  // once a second at most
  EXPECT_LT(count(log, "\n"), 50u) << log.substr(0, 2000);
  EXPECT_LT(log.size(), 20000u);
  if (!::testing::Test::HasFailure()) std::remove(out.c_str());
}

// In process: out of descriptors, the listener retries every kAcceptBackoff (a handful of
// failed accept calls a second, no CPU); once descriptors come back it accepts the queued
// connections and a real one connects.
TEST(CmLimits, ListenerOutOfDescriptorsBacksOffAndRecovers) {
  skip_if_sanitized();
  if (::testing::Test::IsSkipped()) return;
  Side server;
  rnic::CmOptions opts;
  opts.mpa_timeout = 30s;  // the idle connections hold their descriptors throughout
  const std::uint16_t port = server.listen(opts);
  ASSERT_NE(port, 0);
  // The client sockets exist before the limit drops (connect needs no new descriptor).
  std::vector<int> idle;
  for (int i = 0; i < 30; ++i) idle.push_back(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  struct Restore {
    rlimit r;
    ~Restore() { ::setrlimit(RLIMIT_NOFILE, &r); }
  } restore{saved};
  // Room for three more descriptors: the listener takes three connections, then EMFILE.
  rlimit low{open_fds() + 3, saved.rlim_max};
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int s : idle) ASSERT_EQ(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_TRUE(wait_until([&] { return server.stats().accept_errors >= 1; }));
  rusage r0{}, r1{};
  ::getrusage(RUSAGE_SELF, &r0);
  const auto errors0 = server.stats().accept_errors;
  std::this_thread::sleep_for(1s);
  ::getrusage(RUSAGE_SELF, &r1);
  const auto errors1 = server.stats().accept_errors;
  ::setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_LT(cpu_seconds(r1) - cpu_seconds(r0), 0.3);
  EXPECT_LE(errors1 - errors0, 1000 / rnic::kAcceptBackoff.count() + 2);
  EXPECT_LT(server.stats().accepted, 30u);
  // Descriptors are back and the idle connections go: all are taken, and end.
  for (int s : idle) ::close(s);
  EXPECT_TRUE(wait_until([&] { return server.stats().accepted == 30; }, 10000ms))
      << server.stats().accepted;
  EXPECT_TRUE(wait_until([&] { return server.stats().pending == 0; }, 10000ms));
  // A real connection.
  std::thread t([&] {
    rdma_conn_param p;
    server.accept_next(&p);
  });
  Endpoint client;
  auto c = client.connect("127.0.0.1", port);
  t.join();
  EXPECT_TRUE(c) << c.error();
}

// At most max_pending_mpa connections sit in the MPA exchange. Past it the oldest one that has
// sent no MPA Request is reset to make room, so idle connections cannot lock a real client
// out; when every slot holds a Request the application has not answered, the new connection is
// reset. Either way at once, and counted.
TEST(CmLimits, ConnectionsPastTheMpaBoundAreResetAtOnce) {
  Side server;
  rnic::CmOptions opts;
  opts.mpa_timeout = 30s;  // nothing times out during the test
  opts.max_pending_mpa = 4;
  const std::uint16_t port = server.listen(opts);
  ASSERT_NE(port, 0);
  std::vector<int> idle;
  for (int i = 0; i < 10; ++i) {
    const int s = idle_connection(port);
    ASSERT_GE(s, 0);
    idle.push_back(s);
  }
  ASSERT_TRUE(wait_until([&] { return server.stats().accepted == 10; }));
  auto st = server.stats();
  EXPECT_EQ(st.evicted, 6u);
  EXPECT_EQ(st.refused, 0u);
  EXPECT_EQ(st.pending, 4u);
  // The six oldest went, at once; the four newest hold every slot.
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(closed_by_peer(idle[i], i < 6 ? 1000ms : 100ms), i < 6) << "connection " << i;

  // A real client while they do: served at once (the oldest idle one makes room).
  {
    std::thread t([&] {
      auto* ev = server.next_request();
      ASSERT_NE(ev, nullptr);
      rdma_cm_id* cid = ev->id;
      rdma_ack_cm_event(ev);
      ASSERT_EQ(server.make_qp(cid), 0);
      rdma_conn_param p;
      ASSERT_EQ(rdma_accept(cid, &p), 0);
    });
    Endpoint client;
    const auto t0 = std::chrono::steady_clock::now();
    auto c = client.connect("127.0.0.1", port);
    t.join();
    EXPECT_TRUE(c) << c.error();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
    EXPECT_TRUE(closed_by_peer(idle[6], 1000ms));
    EXPECT_EQ(server.stats().evicted, 7u);
  }

  // Every slot taken by a Request the application leaves unanswered: nothing to evict, so a
  // new connection is reset at once.
  const Bytes request = mpa::make_request(mpa::Policy{}).encode();
  std::vector<int> askers;
  for (int i = 0; i < 4; ++i) {
    const int s = idle_connection(port);
    ASSERT_GE(s, 0);
    ASSERT_EQ(::send(s, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    askers.push_back(s);
    auto* ev = server.next_request();  // read before the next one comes
    ASSERT_NE(ev, nullptr);
    rdma_ack_cm_event(ev);
  }
  EXPECT_EQ(server.stats().pending, 4u);
  EXPECT_EQ(server.stats().evicted, 10u);  // the last three idle ones made room
  const int late = idle_connection(port);
  ASSERT_GE(late, 0);
  EXPECT_TRUE(closed_by_peer(late, 1000ms));
  EXPECT_TRUE(wait_until([&] { return server.stats().refused == 1; }));
  for (int s : askers) EXPECT_FALSE(closed_by_peer(s, 50ms));
  ::close(late);
  for (int s : askers) ::close(s);
  for (int s : idle) ::close(s);
}

// RFC 5044 §7.1 allows 512 octets of private data (508 beside RFC 6581's IRD/ORD), RFC 6581
// 14-bit IRD and ORD: a peer's 300 octets and IRD/ORD 256 arrive whole, both ways (they were
// cut to 8 bits: 300 octets read as 44, IRD 256 as 0).
TEST(CmPrivateData, ThreeHundredOctetsAndIrdOrd256ArriveWhole) {
  Side server, client;
  const std::uint16_t port = server.listen();
  const Bytes cpd = octets(300, 1), spd = octets(300, 99);
  std::thread t([&] {
    auto* ev = server.next_request();
    ASSERT_NE(ev, nullptr);
    EXPECT_EQ(ev->param.conn.private_data_len, 300);
    ASSERT_NE(ev->param.conn.private_data, nullptr);
    EXPECT_EQ(Bytes(static_cast<const std::uint8_t*>(ev->param.conn.private_data),
                    static_cast<const std::uint8_t*>(ev->param.conn.private_data) +
                        ev->param.conn.private_data_len),
              cpd);
    EXPECT_EQ(ev->param.conn.responder_resources, 256);  // the client's IRD
    EXPECT_EQ(ev->param.conn.initiator_depth, 256);      // the client's ORD
    rdma_cm_id* cid = ev->id;
    rdma_ack_cm_event(ev);
    ASSERT_EQ(server.make_qp(cid), 0);
    rdma_conn_param p;
    p.private_data = spd.data();
    p.private_data_len = static_cast<std::uint16_t>(spd.size());
    p.responder_resources = 256;
    p.initiator_depth = 256;
    ASSERT_EQ(rdma_accept(cid, &p), 0) << ibv_last_error();
    EXPECT_EQ(server.next(), RDMA_CM_EVENT_ESTABLISHED);
  });
  client.prepare(port);
  rdma_conn_param p;
  p.private_data = cpd.data();
  p.private_data_len = static_cast<std::uint16_t>(cpd.size());
  p.responder_resources = 256;
  p.initiator_depth = 256;
  ASSERT_EQ(rdma_connect(client.id, &p), 0) << ibv_last_error();
  rdma_cm_event* ev = nullptr;
  ASSERT_EQ(client.next(5000ms, &ev), RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(ev->param.conn.private_data_len, 300);
  ASSERT_NE(ev->param.conn.private_data, nullptr);
  EXPECT_EQ(Bytes(static_cast<const std::uint8_t*>(ev->param.conn.private_data),
                  static_cast<const std::uint8_t*>(ev->param.conn.private_data) + 300),
            spd);
  EXPECT_EQ(ev->param.conn.responder_resources, 256);  // the server's IRD
  EXPECT_EQ(ev->param.conn.initiator_depth, 256);      // the server's ORD
  ASSERT_TRUE(ev->mpa.has_value());
  EXPECT_EQ(ev->mpa->initiator_ird, 256);
  EXPECT_EQ(ev->mpa->responder_ird, 256);
  EXPECT_EQ(ev->mpa->initiator_ord, 256);
  EXPECT_EQ(ev->mpa->responder_ord, 256);
  rdma_ack_cm_event(ev);
  t.join();
}

// More private data than the frame carries is refused at the call, with the reason.
TEST(CmPrivateData, MoreThanTheFrameCarriesIsRefusedWithTheReason) {
  Side server, client;
  const std::uint16_t port = server.listen();
  client.prepare(port);
  EXPECT_EQ(rdma_max_private_data(client.id), 508u);  // MPA revision 2: IRD/ORD take 4
  const Bytes big = octets(509, 3);
  rdma_conn_param p;
  p.private_data = big.data();
  p.private_data_len = static_cast<std::uint16_t>(big.size());
  EXPECT_EQ(rdma_connect(client.id, &p), EINVAL);
  EXPECT_NE(ibv_last_error().find("at most 508"), std::string::npos) << ibv_last_error();
  // 508 goes through.
  p.private_data_len = 508;
  std::thread t([&] {
    auto* ev = server.next_request();
    ASSERT_NE(ev, nullptr);
    EXPECT_EQ(ev->param.conn.private_data_len, 508);
    rdma_cm_id* cid = ev->id;
    rdma_ack_cm_event(ev);
    EXPECT_EQ(rdma_reject(cid, big.data(), 600), EINVAL);
    EXPECT_EQ(rdma_reject(cid, big.data(), 508), 0) << ibv_last_error();
  });
  ASSERT_EQ(rdma_connect(client.id, &p), 0) << ibv_last_error();
  rdma_cm_event* ev = nullptr;
  ASSERT_EQ(client.next(5000ms, &ev), RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(ev->param.conn.private_data_len, 508);
  rdma_ack_cm_event(ev);
  t.join();
}

namespace {
// A server whose MPA Reply leaves `delay` after it accepts; `accepted` is set then.
struct DelayedServer {
  Side side;
  std::uint16_t port = 0;
  std::atomic<bool> accepted{false};
  std::thread thread;
  rdma_cm_id* conn = nullptr;

  explicit DelayedServer(std::chrono::milliseconds delay) {
    rnic::CmOptions opts;
    opts.reply_delay = delay;
    port = side.listen(opts);
  }
  // Accepts the next request; then `after` runs (on the server's thread).
  void serve(std::function<void(DelayedServer&)> after = {}) {
    thread = std::thread([this, after] {
      auto* ev = side.next_request();
      ASSERT_NE(ev, nullptr);
      conn = ev->id;
      rdma_ack_cm_event(ev);
      ASSERT_EQ(side.make_qp(conn), 0);
      rdma_conn_param p;
      ASSERT_EQ(rdma_accept(conn, &p), 0);
      accepted = true;
      if (after) after(*this);
    });
  }
  ~DelayedServer() {
    if (thread.joinable()) thread.join();
  }
};
}  // namespace

// rdma_disconnect while the Reply is on its way: the QP moves to ERROR and stays there when
// the Reply arrives (it was started again, ERROR -> RTS with a warning); the id gets
// DISCONNECTED, never ESTABLISHED, and the connection is closed.
TEST(CmDisconnect, DuringTheExchangeTheQpStaysInErrorAndDisconnectedComes) {
  DelayedServer server(500ms);
  server.serve();
  Side client;
  client.prepare(server.port);
  rdma_conn_param p;
  ASSERT_EQ(rdma_connect(client.id, &p), 0);
  ASSERT_TRUE(wait_until([&] { return server.accepted.load(); }));
  ASSERT_EQ(rdma_disconnect(client.id), 0);
  EXPECT_TRUE(wait_until([&] { return ibv_query_qp_state(client.id->qp) == IBV_QPS_ERR; }));
  rdma_cm_event* ev = nullptr;
  ASSERT_EQ(client.next(5000ms, &ev), RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_NE(ev->detail.find("not started"), std::string::npos) << ev->detail;
  rdma_ack_cm_event(ev);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(ibv_query_qp_state(client.id->qp), IBV_QPS_ERR);
  EXPECT_EQ(client.next(300ms), -1) << "no other event (ESTABLISHED above all)";
}

// The same with the QP moved to ERROR by the application (ibv_modify_qp): siw refuses a Reply
// for a QP past RTR, and the id gets CONNECT_ERROR.
TEST(CmDisconnect, QpMovedToErrorDuringTheExchangeIsNotStarted) {
  DelayedServer server(500ms);
  server.serve();
  Side client;
  client.prepare(server.port);
  rdma_conn_param p;
  ASSERT_EQ(rdma_connect(client.id, &p), 0);
  ASSERT_TRUE(wait_until([&] { return server.accepted.load(); }));
  ASSERT_EQ(ibv_modify_qp_to_err(client.id->qp), 0);
  EXPECT_TRUE(wait_until([&] { return ibv_query_qp_state(client.id->qp) == IBV_QPS_ERR; }));
  rdma_cm_event* ev = nullptr;
  ASSERT_EQ(client.next(5000ms, &ev), RDMA_CM_EVENT_CONNECT_ERROR);
  EXPECT_NE(ev->detail.find("ERROR"), std::string::npos) << ev->detail;
  rdma_ack_cm_event(ev);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(ibv_query_qp_state(client.id->qp), IBV_QPS_ERR);
}

// The passive side: rdma_disconnect after rdma_accept, before the Reply went out. No Reply is
// sent, the server's QP stays in ERROR and its id gets DISCONNECTED; the client's exchange
// fails (CONNECT_ERROR), it is never told the connection was established.
TEST(CmDisconnect, PassiveSideDisconnectBeforeTheReplyIsNotUndone) {
  DelayedServer server(500ms);
  std::atomic<int> server_event{0};
  std::atomic<bool> server_qp_error{false};
  server.serve([&](DelayedServer& s) {
    ASSERT_EQ(rdma_disconnect(s.conn), 0);
    server_event = s.side.next(5000ms);
    std::this_thread::sleep_for(300ms);
    server_qp_error = ibv_query_qp_state(s.conn->qp) == IBV_QPS_ERR;
  });
  Side client;
  client.prepare(server.port);
  rdma_conn_param p;
  ASSERT_EQ(rdma_connect(client.id, &p), 0);
  EXPECT_EQ(client.next(10000ms), RDMA_CM_EVENT_CONNECT_ERROR);
  server.thread.join();
  EXPECT_EQ(server_event.load(), RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_TRUE(server_qp_error.load());
}

namespace iwarp {
namespace {

// A forwarder on 127.0.0.1 (as QEMU's slirp is in front of the siw VM): it accepts every
// connection at once; the first it resets without reading (the server behind it was between
// two listeners, as perftest's is), the next it forwards both ways to `to`.
struct ResettingForwarder {
  int lfd = -1;
  std::uint16_t port = 0;
  std::thread t;
  std::atomic<int> accepted{0};
  std::atomic<bool> stop{false};
  explicit ResettingForwarder(std::uint16_t to) {
    lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(lfd, 4);
    socklen_t len = sizeof a;
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    t = std::thread([this, to] {
      const int first = ::accept(lfd, nullptr, nullptr);
      ++accepted;
      linger lg{1, 0};  // close() sends a RST
      ::setsockopt(first, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      ::close(first);
      pollfd p{lfd, POLLIN, 0};
      if (::poll(&p, 1, 5000) <= 0) return;
      const int c = ::accept(lfd, nullptr, nullptr);
      ++accepted;
      const int s = testing::connect_loopback(to);
      pollfd fds[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
      char buf[4096];
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (!stop && std::chrono::steady_clock::now() < until && ::poll(fds, 2, 100) >= 0) {
        bool done = false;
        for (int k = 0; k < 2; ++k) {
          if (!(fds[k].revents & (POLLIN | POLLHUP))) continue;
          const auto n = ::read(fds[k].fd, buf, sizeof buf);
          if (n <= 0 || ::write(fds[1 - k].fd, buf, static_cast<std::size_t>(n)) != n) done = true;
        }
        if (done) break;
      }
      ::close(c);
      ::close(s);
    });
  }
  ~ResettingForwarder() {
    stop = true;
    ::shutdown(lfd, SHUT_RDWR);
    if (t.joinable()) t.join();
    ::close(lfd);
  }
};

// The connection is reset before any octet of the MPA Reply (perftest's server between two
// listeners behind QEMU's slirp: siw interop case p2): within connect_retry the initiator tries
// again on a fresh connection and is ESTABLISHED (CONNECT_ERROR "reset by peer" without it).
TEST(CmConnectRetry, ResetBeforeTheReplyIsTriedAgain) {
  Side server, client;
  const std::uint16_t port = server.listen();
  ResettingForwarder fwd(port);
  std::thread t([&] {
    server.accept_next(nullptr);
    EXPECT_EQ(server.next(), RDMA_CM_EVENT_ESTABLISHED);
  });
  rnic::CmOptions opts;
  opts.connect_retry = 2000ms;
  client.prepare(fwd.port, opts);
  ASSERT_EQ(rdma_connect(client.id, nullptr), 0) << ibv_last_error();
  rdma_cm_event* ev = nullptr;
  EXPECT_EQ(client.next(5000ms, &ev), RDMA_CM_EVENT_ESTABLISHED);
  if (ev) rdma_ack_cm_event(ev);
  EXPECT_EQ(fwd.accepted.load(), 2);
  t.join();
}

}  // namespace
}  // namespace iwarp
