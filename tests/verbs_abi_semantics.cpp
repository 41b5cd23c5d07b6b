// The drop-in libibverbs.so.1 / librdmacm.so.1 (verbs_abi/) through their C ABI, as an
// unmodified program sees them: this binary is compiled against the system's
// <infiniband/verbs.h> and <rdma/rdma_cma.h> and linked to the drop-in libraries. What the
// programs depend on: channel fds with read() semantics (blocking, O_NONBLOCK -> EAGAIN, a
// signal -> EINTR, poll()able, cancellable), an engine thread that never takes the program's
// signals and survives fork(), rdma_accept returning with a QP that can send, a disconnect that
// flushes posted receives and fires the completion event, and rdma-core's error codes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

// Soft RNR is opt-in (RNIC_RNR_WAIT_MS, read once per process): on for this binary, for
// SendWaitsBrieflyForAReceive; nothing else here sends without a receive.
const int kRnrWaitSet = setenv("RNIC_RNR_WAIT_MS", "1000", 0);

void no_op(int) {}

// A handler without SA_RESTART, as qperf installs its SIGALRM handler.
void install_interrupting(int sig) {
  struct sigaction sa {};
  sa.sa_handler = no_op;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  ASSERT_EQ(sigaction(sig, &sa, nullptr), 0);
}

struct Device {
  ibv_context* ctx = nullptr;
  Device() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list && n == 1) ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
  }
  ~Device() {
    if (ctx) ibv_close_device(ctx);
  }
};

// Fails the test if `f` has not returned within `limit` (it then hangs the thread, so the test
// binary's timeout ends it).
template <class F>
auto bounded(std::chrono::milliseconds limit, F f) {
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(5ms);
    if (!done) {
      ADD_FAILURE() << "a call did not return within " << limit.count() << " ms";
      std::fflush(nullptr);
      std::abort();
    }
  });
  auto r = f();
  done = true;
  watchdog.join();
  return r;
}

TEST(VerbsAbi, OneIwarpDeviceWithAnActiveEthernetPort) {
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(n, 1);
  EXPECT_EQ(list[1], nullptr);
  EXPECT_STREQ(ibv_get_device_name(list[0]), "rnic0");
  EXPECT_EQ(list[0]->node_type, IBV_NODE_RNIC);
  EXPECT_EQ(list[0]->transport_type, IBV_TRANSPORT_IWARP);
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx, &a), 0);
  EXPECT_EQ(a.max_qp_rd_atom, 128);  // rnic::DeviceLimits::max_ird
  EXPECT_EQ(a.phys_port_cnt, 1);
  ibv_port_attr p{};
  ASSERT_EQ(ibv_query_port(ctx, 1, &p), 0);  // the inline verb, through verbs_context
  EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_NE(ibv_query_port(ctx, 2, &p), 0);
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
  EXPECT_EQ(gid.raw[10], 0xff);  // ::ffff:a.b.c.d
  EXPECT_NE(ibv_query_gid(ctx, 1, 1, &gid), 0);
  ibv_close_device(ctx);
}

TEST(VerbsAbi, CompletionChannelHasReadSemantics) {
  Device d;
  ASSERT_NE(d.ctx, nullptr);
  ibv_comp_channel* ch = ibv_create_comp_channel(d.ctx);
  ASSERT_NE(ch, nullptr);
  ibv_cq* cq = ibv_create_cq(d.ctx, 4, nullptr, ch, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_GE(cq->cqe, 4);
  ibv_cq* got = nullptr;
  void* ctx = nullptr;
  // Non-blocking: EAGAIN at once.
  const int fl = fcntl(ch->fd, F_GETFL);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(ch, &got, &ctx), -1);
  EXPECT_EQ(errno, EAGAIN);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fl), 0);
  // Blocking: a signal interrupts the wait with EINTR (qperf's SIGALRM).
  install_interrupting(SIGALRM);
  const pthread_t self = pthread_self();
  std::thread killer([self] {
    std::this_thread::sleep_for(100ms);
    pthread_kill(self, SIGALRM);
  });
  errno = 0;
  const int r = bounded(5000ms, [&] { return ibv_get_cq_event(ch, &got, &ctx); });
  const int err = errno;
  killer.join();
  EXPECT_EQ(r, -1);
  EXPECT_EQ(err, EINTR);
  // A thread blocked in it can be cancelled (rping stops its CQ thread so).
  pthread_t waiter;
  struct Args {
    ibv_comp_channel* ch;
  } args{ch};
  ASSERT_EQ(pthread_create(
                &waiter, nullptr,
                [](void* p) -> void* {
                  auto* a = static_cast<Args*>(p);
                  ibv_cq* c;
                  void* x;
                  ibv_get_cq_event(a->ch, &c, &x);
                  return nullptr;
                },
                &args),
            0);
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(pthread_cancel(waiter), 0);
  void* ret = nullptr;
  bounded(5000ms, [&] { return pthread_join(waiter, &ret); });
  EXPECT_EQ(ret, PTHREAD_CANCELED);
  // Nothing is readable without an event.
  pollfd pf{ch->fd, POLLIN, 0};
  EXPECT_EQ(poll(&pf, 1, 0), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);  // a CQ still uses it
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST(VerbsAbi, CmEventChannelHasReadSemantics) {
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_event* ev = nullptr;
  const int fl = fcntl(ch->fd, F_GETFL);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
  errno = 0;
  EXPECT_EQ(rdma_get_cm_event(ch, &ev), -1);
  EXPECT_EQ(errno, EAGAIN);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fl), 0);
  install_interrupting(SIGALRM);
  const pthread_t self = pthread_self();
  std::thread killer([self] {
    std::this_thread::sleep_for(100ms);
    pthread_kill(self, SIGALRM);
  });
  errno = 0;
  const int r = bounded(5000ms, [&] { return rdma_get_cm_event(ch, &ev); });
  const int err = errno;
  killer.join();
  EXPECT_EQ(r, -1);
  EXPECT_EQ(err, EINTR);
  // An event makes the fd readable, and the call returns it.
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(9);
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), 0);
  pollfd pf{ch->fd, POLLIN, 0};
  EXPECT_EQ(poll(&pf, 1, 2000), 1);
  ASSERT_EQ(rdma_get_cm_event(ch, &ev), 0);
  EXPECT_EQ(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  EXPECT_EQ(ev->id, id);
  EXPECT_NE(id->verbs, nullptr);
  rdma_ack_cm_event(ev);
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
}

// Every thread the library started blocks the signals a program relies on getting itself.
TEST(VerbsAbi, EngineThreadBlocksSignals) {
  Device d;
  ASSERT_NE(d.ctx, nullptr);
  const std::string main_tid = std::to_string(getpid());
  std::vector<std::string> others;
  DIR* dir = opendir("/proc/self/task");
  ASSERT_NE(dir, nullptr);
  while (dirent* e = readdir(dir))
    if (e->d_name[0] != '.' && main_tid != e->d_name) others.emplace_back(e->d_name);
  closedir(dir);
  ASSERT_FALSE(others.empty()) << "no engine thread";
  for (const auto& tid : others) {
    std::ifstream f("/proc/self/task/" + tid + "/status");
    std::string line;
    std::uint64_t blocked = 0;
    while (std::getline(f, line))
      if (line.rfind("SigBlk:", 0) == 0) blocked = std::stoull(line.substr(7), nullptr, 16);
    for (int sig : {SIGALRM, SIGINT, SIGTERM, SIGUSR1, SIGPIPE, SIGCHLD})
      EXPECT_TRUE(blocked & (1ull << (sig - 1))) << "thread " << tid << " takes signal " << sig;
  }
}

// qperf's server forks a child per test and only the child uses verbs; a parent that had
// started the engine goes on working too.
TEST(VerbsAbi, ForkedChildGetsItsOwnEngine) {
  Device d;
  ASSERT_NE(d.ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(d.ctx);
  ASSERT_NE(pd, nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Device c;
    if (!c.ctx) _exit(2);
    ibv_pd* cpd = ibv_alloc_pd(c.ctx);
    if (!cpd) _exit(3);
    std::vector<char> buf(4096);
    ibv_mr* mr = ibv_reg_mr(cpd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    if (!mr || ibv_dereg_mr(mr) != 0) _exit(4);  // deregistration needs a live engine thread
    _exit(0);
  }
  int st = 0;
  bounded(10000ms, [&] { return waitpid(pid, &st, 0); });
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  std::vector<char> buf(4096);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);  // an MR is still in it; the PD stays usable
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST(VerbsAbi, UnsupportedFeaturesFailCleanly) {
  Device d;
  ASSERT_NE(d.ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(d.ctx);
  ibv_cq* cq = ibv_create_cq(d.ctx, 8, nullptr, nullptr, 0);
  ASSERT_TRUE(pd && cq);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_UD;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd, &ia), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_ah_attr ah{};
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd, &ah), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  std::vector<char> buf(64);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND),
            nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // Remote write without local write is refused, as by the kernel.
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // Optional access bits (relaxed ordering, as perftest passes) are hints.
  ibv_mr* mr = ibv_reg_mr_iova2(pd, buf.data(), buf.size(), reinterpret_cast<uintptr_t>(buf.data()),
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->lkey, mr->rkey);
  // A full send queue refuses more (rdma-core: ENOMEM), with bad_wr at the first refused WR.
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 2;
  ibv_qp* qp = ibv_create_qp(pd, &ia);
  ASSERT_NE(qp, nullptr);
  EXPECT_GE(ia.cap.max_send_wr, 2u);
  ibv_qp_attr qa{};
  qa.qp_state = IBV_QPS_RTR;
  qa.dest_qp_num = 7;
  EXPECT_EQ(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN), EINVAL);  // no IB addressing
  qa.min_rnr_timer = 12;
  EXPECT_EQ(ibv_modify_qp(qp, &qa, IBV_QP_MIN_RNR_TIMER), 0);  // perftest, qperf
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  errno = 0;
  EXPECT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_UDP), -1);
  EXPECT_EQ(errno, EPROTONOSUPPORT);
  rdma_destroy_event_channel(ch);
}

// A connection between two ids of this process, through the C ABI.
struct Pair {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* listener = nullptr;
  rdma_cm_id* server = nullptr;
  rdma_cm_id* client = nullptr;
  ibv_comp_channel* cc = nullptr;
  ibv_cq* server_cq = nullptr;
  ibv_cq* client_cq = nullptr;
  ibv_pd* pd = nullptr;
  std::vector<char> buf = std::vector<char>(4096, 'x');
  ibv_mr* mr = nullptr;

  rdma_cm_event* next(rdma_cm_event_type want) {
    rdma_cm_event* ev = nullptr;
    if (bounded(10000ms, [&] { return rdma_get_cm_event(ch, &ev); }) != 0) return nullptr;
    EXPECT_EQ(ev->event, want) << rdma_event_str(ev->event) << " status " << ev->status;
    return ev;
  }

  void connect() {
    ASSERT_EQ(rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP), 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&a)), 0);
    const std::uint16_t port = ntohs(rdma_get_src_port(listener));  // port 0: picked at bind
    ASSERT_NE(port, 0);
    ASSERT_EQ(rdma_listen(listener, 4), 0);
    ASSERT_EQ(rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP), 0);
    a.sin_port = htons(port);
    ASSERT_EQ(rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&a), 1000), 0);
    rdma_ack_cm_event(next(RDMA_CM_EVENT_ADDR_RESOLVED));
    ASSERT_EQ(rdma_resolve_route(client, 1000), 0);
    rdma_ack_cm_event(next(RDMA_CM_EVENT_ROUTE_RESOLVED));
    pd = ibv_alloc_pd(client->verbs);
    cc = ibv_create_comp_channel(client->verbs);
    client_cq = ibv_create_cq(client->verbs, 16, nullptr, cc, 0);
    server_cq = ibv_create_cq(client->verbs, 16, nullptr, cc, 0);
    mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_TRUE(pd && cc && client_cq && server_cq && mr);
    ibv_qp_init_attr ia{};
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    ia.qp_type = IBV_QPT_RC;
    ia.send_cq = ia.recv_cq = client_cq;
    ASSERT_EQ(rdma_create_qp(client, pd, &ia), 0);
    rdma_conn_param cp{};
    cp.initiator_depth = cp.responder_resources = 4;
    ASSERT_EQ(rdma_connect(client, &cp), 0);
    rdma_cm_event* req = next(RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_NE(req, nullptr);
    server = req->id;
    EXPECT_EQ(req->listen_id, listener);
    rdma_ack_cm_event(req);
    ia.send_cq = ia.recv_cq = server_cq;
    ASSERT_EQ(rdma_create_qp(server, pd, &ia), 0);
  }

  ~Pair() {
    for (rdma_cm_id* id : {client, server})
      if (id) {
        if (id->qp) rdma_destroy_qp(id);
        rdma_destroy_id(id);
      }
    if (listener) rdma_destroy_id(listener);
    if (mr) ibv_dereg_mr(mr);
    if (client_cq) ibv_destroy_cq(client_cq);
    if (server_cq) ibv_destroy_cq(server_cq);
    if (cc) ibv_destroy_comp_channel(cc);
    if (pd) ibv_dealloc_pd(pd);
    rdma_destroy_event_channel(ch);
  }
};

int poll_one(ibv_cq* cq, ibv_wc* wc) {
  return bounded(10000ms, [&] {
    int n = 0;
    while ((n = ibv_poll_cq(cq, 1, wc)) == 0) std::this_thread::sleep_for(100us);
    return n;
  });
}

// perftest's control connection posts a Send right after rdma_accept, before ESTABLISHED.
TEST(VerbsAbi, AcceptReturnsWithAQpThatCanSend) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(p.connect());
  ibv_sge sge{reinterpret_cast<uintptr_t>(p.buf.data()), 64, p.mr->lkey};
  ibv_recv_wr rw[2]{};
  for (int i = 0; i < 2; ++i) {
    rw[i].wr_id = static_cast<std::uint64_t>(i + 1);
    rw[i].sg_list = &sge;
    rw[i].num_sge = 1;
    rw[i].next = i == 0 ? &rw[1] : nullptr;
  }
  ibv_recv_wr* bad_r = nullptr;
  ASSERT_EQ(ibv_post_recv(p.client->qp, rw, &bad_r), 0);
  ASSERT_EQ(rdma_accept(p.server, nullptr), 0);
  // A Send, then RFC 7306 Immediate Data (which carries no payload on iWARP).
  ibv_send_wr sw[2]{};
  sw[0].wr_id = 2;
  sw[0].sg_list = &sge;
  sw[0].num_sge = 1;
  sw[0].opcode = IBV_WR_SEND;
  sw[0].send_flags = IBV_SEND_SIGNALED;
  sw[0].next = &sw[1];
  sw[1].wr_id = 3;
  sw[1].opcode = IBV_WR_SEND_WITH_IMM;
  sw[1].imm_data = htonl(0x01020304);
  sw[1].send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.server->qp, sw, &bad), 0) << strerror(errno);
  ibv_wc wc{};
  ASSERT_EQ(poll_one(p.client_cq, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 64u);
  ASSERT_EQ(poll_one(p.client_cq, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 0x01020304u);  // big-endian on the C ABI
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(poll_one(p.server_cq, &wc), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  // Both sides see ESTABLISHED.
  rdma_ack_cm_event(p.next(RDMA_CM_EVENT_ESTABLISHED));
  rdma_ack_cm_event(p.next(RDMA_CM_EVENT_ESTABLISHED));
}

// rping's CQ thread ends only on a flushed receive: a disconnect must flush the posted
// receives and fire the armed CQ's event.
TEST(VerbsAbi, DisconnectFlushesReceivesAndFiresTheEvent) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(p.connect());
  ASSERT_EQ(rdma_accept(p.server, nullptr), 0);
  rdma_ack_cm_event(p.next(RDMA_CM_EVENT_ESTABLISHED));
  rdma_ack_cm_event(p.next(RDMA_CM_EVENT_ESTABLISHED));
  ibv_sge sge{reinterpret_cast<uintptr_t>(p.buf.data()), 64, p.mr->lkey};
  ibv_recv_wr rw{};
  rw.wr_id = 77;
  rw.sg_list = &sge;
  rw.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_recv(p.server->qp, &rw, &bad), 0);
  ASSERT_EQ(ibv_req_notify_cq(p.server_cq, 0), 0);
  ASSERT_EQ(rdma_disconnect(p.client), 0);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(bounded(10000ms, [&] { return ibv_get_cq_event(p.cc, &ev_cq, &ev_ctx); }), 0);
  EXPECT_EQ(ev_cq, p.server_cq);
  ibv_ack_cq_events(ev_cq, 1);
  ibv_wc wc{};
  ASSERT_EQ(poll_one(p.server_cq, &wc), 1);
  EXPECT_EQ(wc.wr_id, 77u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  rdma_ack_cm_event(p.next(RDMA_CM_EVENT_DISCONNECTED));
  rdma_ack_cm_event(p.next(RDMA_CM_EVENT_DISCONNECTED));
  EXPECT_EQ(rdma_disconnect(p.server), 0);  // again, after the peer left: 0
}

// iWARP has no RNR NAK; qperf's rc_bw keeps Sends in flight and re-posts receives as it polls.
// With RNIC_RNR_WAIT_MS a Send that finds no receive waits for one to be posted.
TEST(VerbsAbi, SendWaitsBrieflyForAReceive) {
  ASSERT_EQ(kRnrWaitSet, 0);
  Pair p;
  ASSERT_NO_FATAL_FAILURE(p.connect());
  ASSERT_EQ(rdma_accept(p.server, nullptr), 0);
  rdma_ack_cm_event(p.next(RDMA_CM_EVENT_ESTABLISHED));
  rdma_ack_cm_event(p.next(RDMA_CM_EVENT_ESTABLISHED));
  ibv_sge sge{reinterpret_cast<uintptr_t>(p.buf.data()), 64, p.mr->lkey};
  ibv_send_wr sw{};
  sw.wr_id = 5;
  sw.sg_list = &sge;
  sw.num_sge = 1;
  sw.opcode = IBV_WR_SEND;
  sw.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.client->qp, &sw, &bad), 0);
  std::this_thread::sleep_for(200ms);  // the Send has arrived by now, with no receive posted
  ibv_recv_wr rw{};
  rw.wr_id = 6;
  rw.sg_list = &sge;
  rw.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  ASSERT_EQ(ibv_post_recv(p.server->qp, &rw, &bad_r), 0);
  ibv_wc wc{};
  ASSERT_EQ(poll_one(p.server_cq, &wc), 1);
  EXPECT_EQ(wc.wr_id, 6u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(poll_one(p.client_cq, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
}

// qperf's server sends its port (bound to 0) to the client before it calls rdma_listen: a
// connection that comes in between waits in the backlog instead of being refused.
TEST(VerbsAbi, ConnectionsBetweenBindAndListenWait) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&sa)), 0);
  sa.sin_port = rdma_get_src_port(id);
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  EXPECT_EQ(connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0) << strerror(errno);
  close(s);
  ASSERT_EQ(rdma_listen(id, 0), 0);
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
}

// perftest's connect retry uses an id it destroyed: an error, not a crash.
TEST(VerbsAbi, DestroyedIdIsRefused) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_destroy_id(id), 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(9);
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  errno = 0;
  EXPECT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_destroy_id(id), -1);
  auto* bogus = reinterpret_cast<rdma_cm_id*>(0x5550000f0cc6);  // what perftest passed
  EXPECT_EQ(rdma_connect(bogus, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
  rdma_destroy_event_channel(ch);
}

// The kernel pins a region and refuses what it cannot pin (EFAULT); the engine writes the
// process's memory itself, so a region it may not write must be refused, or a peer's RDMA Write
// would crash the process.
TEST(VerbsAbi, RegistrationOfMemoryThatCannotBeWrittenFails) {
  Device d;
  ASSERT_NE(d.ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(d.ctx);
  ASSERT_NE(pd, nullptr);
  const long page = sysconf(_SC_PAGESIZE);
  void* ro =
      mmap(nullptr, static_cast<size_t>(page), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, ro, static_cast<size_t>(page),
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
            nullptr);
  EXPECT_EQ(errno, EFAULT);
  ibv_mr* readable = ibv_reg_mr(pd, ro, static_cast<size_t>(page), IBV_ACCESS_REMOTE_READ);
  EXPECT_NE(readable, nullptr);  // read-only access to read-only memory is fine
  if (readable) ibv_dereg_mr(readable);
  std::vector<char> small(4096);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, small.data(), 1ull << 40, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  munmap(ro, static_cast<size_t>(page));
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// A connection that goes away before its MPA Request never becomes an event: the channel's fd
// must not turn readable with nothing for rdma_get_cm_event to return.
TEST(VerbsAbi, HalfMadeConnectionsMakeNoEvents) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&sa)), 0);
  ASSERT_EQ(rdma_listen(id, 8), 0);
  sa.sin_port = rdma_get_src_port(id);
  for (int i = 0; i < 20; ++i) {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    if (i % 2) {
      ASSERT_EQ(write(s, "garbage, not an MPA Request......", 33), 33);
    }
    close(s);
  }
  pollfd pf{ch->fd, POLLIN, 0};
  EXPECT_EQ(poll(&pf, 1, 500), 0) << "the channel is readable with no event for the program";
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
}

// rping's CM thread still holds an event of an id main destroys: the id stays valid until the
// event is acknowledged.
TEST(VerbsAbi, DestroyWithAnUnackedEventKeepsTheIdUntilTheAck) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  int ctx_value = 42;
  ASSERT_EQ(rdma_create_id(ch, &id, &ctx_value, RDMA_PS_TCP), 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(9);
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), 0);
  rdma_cm_event* ev = nullptr;
  ASSERT_EQ(bounded(5000ms, [&] { return rdma_get_cm_event(ch, &ev); }), 0);
  ASSERT_EQ(rdma_destroy_id(id), 0);
  EXPECT_EQ(*static_cast<int*>(ev->id->context), 42);  // still the id's memory
  EXPECT_EQ(rdma_ack_cm_event(ev), 0);
  rdma_destroy_event_channel(ch);
}

TEST(VerbsAbi, MigrateMovesQueuedEvents) {
  rdma_event_channel* a = rdma_create_event_channel();
  rdma_event_channel* b = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(a, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(9);
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000), 0);
  ASSERT_EQ(rdma_migrate_id(id, b), 0);
  EXPECT_EQ(id->channel, b);
  pollfd pf{a->fd, POLLIN, 0};
  EXPECT_EQ(poll(&pf, 1, 100), 0);
  rdma_cm_event* ev = nullptr;
  ASSERT_EQ(bounded(5000ms, [&] { return rdma_get_cm_event(b, &ev); }), 0);
  EXPECT_EQ(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  rdma_ack_cm_event(ev);
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(a);
  rdma_destroy_event_channel(b);
}

// The engine's sockets must not outlive a killed program in an exec()ed child of it.
TEST(VerbsAbi, ConnectionSocketsAreCloseOnExec) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(p.connect());
  ASSERT_EQ(rdma_accept(p.server, nullptr), 0);
  rdma_ack_cm_event(p.next(RDMA_CM_EVENT_ESTABLISHED));
  rdma_ack_cm_event(p.next(RDMA_CM_EVENT_ESTABLISHED));
  int sockets = 0;
  DIR* dir = opendir("/proc/self/fd");
  ASSERT_NE(dir, nullptr);
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    char target[256] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(link.c_str(), target, sizeof target - 1) <= 0) continue;
    if (std::strncmp(target, "socket:", 7) != 0) continue;
    ++sockets;
    EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC) << "socket fd " << fd << " is inherited by exec";
  }
  closedir(dir);
  EXPECT_GE(sockets, 3);  // the listener and both ends
  // A second rdma_connect on a connected id is refused, as by rdma-core.
  errno = 0;
  EXPECT_EQ(rdma_connect(p.client, nullptr), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST(VerbsAbi, ExportedQueryPortFillsTheCompatStruct) {
  Device d;
  ASSERT_NE(d.ctx, nullptr);
  ibv_port_attr a{};
  std::memset(&a, 0xab, sizeof a);
  // The exported function, as a program built without the inline wrapper reaches it.
  using Fn = int (*)(ibv_context*, uint8_t, ibv_port_attr*);
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "ibv_query_port"));
  ASSERT_NE(fn, nullptr);
  ASSERT_EQ(fn(d.ctx, 1, &a), 0);
  EXPECT_EQ(a.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(a.link_layer, IBV_LINK_LAYER_ETHERNET);
}

// perftest's server is between two listeners when its client connects the data connection: a
// refused TCP connect is retried (RNIC_CONNECT_RETRY_MS, default 1000 ms), not reported at once.
TEST(VerbsAbi, RefusedConnectIsRetriedBriefly) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* client = nullptr;
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP), 0);
  // A port nobody listens on yet.
  const int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  socklen_t len = sizeof sa;
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  close(probe);
  ASSERT_EQ(rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&sa), 1000), 0);
  rdma_cm_event* ev = nullptr;
  ASSERT_EQ(rdma_get_cm_event(ch, &ev), 0);
  rdma_ack_cm_event(ev);
  ibv_pd* pd = ibv_alloc_pd(client->verbs);
  ibv_cq* cq = ibv_create_cq(client->verbs, 8, nullptr, nullptr, 0);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 2;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ASSERT_EQ(rdma_create_qp(client, pd, &ia), 0);
  ASSERT_EQ(rdma_connect(client, nullptr), 0);
  std::this_thread::sleep_for(200ms);  // refused meanwhile, and tried again
  ASSERT_EQ(rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&sa)), 0);
  ASSERT_EQ(rdma_listen(listener, 1), 0);
  ASSERT_EQ(bounded(5000ms, [&] { return rdma_get_cm_event(ch, &ev); }), 0);
  EXPECT_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST) << rdma_event_str(ev->event);
  rdma_cm_id* server = ev->id;
  rdma_ack_cm_event(ev);
  EXPECT_EQ(rdma_reject(server, nullptr, 0), 0);
  EXPECT_EQ(rdma_destroy_id(server), 0);
  rdma_destroy_qp(client);
  EXPECT_EQ(rdma_destroy_id(client), 0);
  EXPECT_EQ(rdma_destroy_id(listener), 0);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  rdma_destroy_event_channel(ch);
}

// perftest destroys the listener right after accepting and listens again on the same port.
TEST(VerbsAbi, ListenerPortIsFreeAfterDestroy) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* a = nullptr;
  rdma_cm_id* b = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &a, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(rdma_bind_addr(a, reinterpret_cast<sockaddr*>(&sa)), 0);
  ASSERT_EQ(rdma_listen(a, 1), 0);
  sa.sin_port = rdma_get_src_port(a);
  ASSERT_EQ(rdma_create_id(ch, &b, nullptr, RDMA_PS_TCP), 0);
  errno = 0;
  EXPECT_EQ(rdma_bind_addr(b, reinterpret_cast<sockaddr*>(&sa)), -1);  // a listener holds it
  EXPECT_EQ(errno, EADDRINUSE);
  ASSERT_EQ(rdma_destroy_id(b), 0);
  ASSERT_EQ(rdma_destroy_id(a), 0);
  ASSERT_EQ(rdma_create_id(ch, &b, nullptr, RDMA_PS_TCP), 0);
  ASSERT_EQ(rdma_bind_addr(b, reinterpret_cast<sockaddr*>(&sa)), 0);
  EXPECT_EQ(rdma_listen(b, 1), 0);
  rdma_destroy_id(b);
  rdma_destroy_event_channel(ch);
}

// rping's CM thread asks for its next event while main destroys the channel: a call on a
// destroyed channel waits like a read() that never becomes ready (until a signal: EINTR) and an
// id cannot be made on it, instead of touching freed memory (ASan reports the use after free
// without this).
TEST(VerbsAbi, DestroyedEventChannelIsRefusedNotUsed) {
  install_interrupting(SIGUSR1);
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_destroy_event_channel(ch);
  std::atomic<int> result{0}, err{0};
  std::atomic<bool> returned{false};
  std::thread late([&] {
    rdma_cm_event* ev = nullptr;
    result = rdma_get_cm_event(ch, &ev);
    err = errno;
    returned = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(returned.load()) << "no event can come: the call waits";
  for (int i = 0; i < 100 && !returned; ++i) {
    pthread_kill(late.native_handle(), SIGUSR1);
    std::this_thread::sleep_for(10ms);
  }
  late.join();
  EXPECT_EQ(result.load(), -1);
  EXPECT_EQ(err.load(), EINTR);
  rdma_cm_id* id = nullptr;
  errno = 0;
  EXPECT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), -1);
  EXPECT_EQ(errno, EINVAL);
  // A thread waiting on a channel keeps it: destroyed under it, it still gets the next event.
  rdma_event_channel* ch2 = rdma_create_event_channel();
  rdma_cm_id* id2 = nullptr;
  ASSERT_EQ(rdma_create_id(ch2, &id2, nullptr, RDMA_PS_TCP), 0);
  std::atomic<int> got{0};
  std::thread waiter([&] {
    rdma_cm_event* e = nullptr;
    if (rdma_get_cm_event(ch2, &e) == 0) {
      got = static_cast<int>(e->event) + 1;
      rdma_ack_cm_event(e);
    }
  });
  std::this_thread::sleep_for(50ms);
  rdma_destroy_event_channel(ch2);  // the waiter is inside rdma_get_cm_event, id2 is on it
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(9);
  ASSERT_EQ(rdma_resolve_addr(id2, nullptr, reinterpret_cast<sockaddr*>(&a), 1000), 0);
  bounded(5000ms, [&] {
    waiter.join();
    return 0;
  });
  EXPECT_EQ(got.load(), RDMA_CM_EVENT_ADDR_RESOLVED + 1);
  rdma_destroy_id(id2);  // the last user: the channel goes now
}

// Runs dropin_exit_probe MODE (with RNIC_CAPTURE_DIR set when `capture_dir` is not empty):
// its exit status, or 128 + the signal that ended it.
// With `err` given, the probe runs with RNIC_LOG=rnic=debug and its stderr goes there.
int run_exit_probe(const char* mode, const std::string& capture_dir = {}, const char* arg = nullptr,
                   std::chrono::milliseconds limit = 20000ms, std::string* err = nullptr) {
  char path[] = "/tmp/rnic-exit-probe-err-XXXXXX";
  const int fd = err ? mkstemp(path) : -1;
  const pid_t pid = fork();
  if (pid == 0) {
    if (!capture_dir.empty()) setenv("RNIC_CAPTURE_DIR", capture_dir.c_str(), 1);
    if (fd >= 0) {
      setenv("RNIC_LOG", "rnic=debug", 1);
      dup2(fd, 2);
    }
    execl(DROPIN_EXIT_PROBE, DROPIN_EXIT_PROBE, mode, arg, static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  const bool ended = bounded(limit, [&] { return waitpid(pid, &status, 0); }) == pid;
  if (fd >= 0) {
    std::ifstream in(path);
    err->assign(std::istreambuf_iterator<char>(in), {});
    ::close(fd);
    ::unlink(path);
  }
  if (!ended) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// exit() stops the engine thread as the library is finalized, so it does not run on while
// the libraries below it are (the library says so with RNIC_LOG=rnic=debug).
TEST(VerbsAbi, ExitStopsTheEngineBeforeStaticsGo) {
  std::string err;
  EXPECT_EQ(run_exit_probe("idle", {}, nullptr, 20000ms, &err), 0) << err;
  EXPECT_NE(err.find("at exit: the engine thread stopped"), std::string::npos) << err;
}

// ... but only after the program's own at-exit cleanup: one that disconnects and waits for
// DISCONNECTED (registered before the first verbs call) still gets it (status 4 otherwise).
TEST(VerbsAbi, ProgramCleanupAtExitStillHasTheEngine) {
  EXPECT_EQ(run_exit_probe("teardown"), 0);
}

// A listener destroyed while the MPA Request of a connection it accepted arrives, then its
// channel destroyed: the engine's event filter (queue lock, then the id table's) and the
// channel's destruction never wait for each other (status 5: an iteration stuck for 10 s).
TEST(VerbsAbi, ChannelDestroyedWhileAnEventArrivesDoesNotDeadlock) {
  EXPECT_EQ(run_exit_probe("chanrace", {}, "1500", 120000ms), 0);
}

// A program that exits with connections up, a thread still posting Writes and Sends, and its
// connections recorded (the capture tap): a clean exit every time, never a signal.
TEST(VerbsAbi, ExitWithTrafficInFlightIsClean) {
  char dir[] = "/tmp/rnic-exit-probe-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(run_exit_probe("busy", i % 2 ? std::string(dir) : std::string()), 0);
  }
  std::system((std::string("rm -rf ") + dir).c_str());
}

}  // namespace
