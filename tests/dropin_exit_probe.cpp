// A program on the drop-in libibverbs.so.1/librdmacm.so.1 that exits without tearing anything
// down, as rping, perftest and qperf do, while the engine may be busy (an engine running on in
// destroyed objects crashed programs now and then: SIGSEGV after their last line). With
// RNIC_LOG=rnic=debug the library says on stderr when it stops its engine at exit (after the
// program's own at-exit handlers and static destructors, as the library is finalized).
//
//   dropin_exit_probe idle      open the device, create a CQ, exit
//   dropin_exit_probe busy      connect two QPs of this process over 127.0.0.1 and exit while a
//                               thread keeps posting RDMA Writes and Sends on them
//   dropin_exit_probe teardown  connect, then exit: the program's own at-exit handler
//                               (registered first) disconnects and waits for DISCONNECTED, as
//                               on hardware (status 4 when no event comes within 3 s)
//   dropin_exit_probe chanrace N  N times: a listener that accepted a TCP connection is
//                               destroyed, the connection's MPA Request arrives, the channel is
//                               destroyed (status 5 when an iteration makes no progress: the
//                               engine's event filter and the channel's destruction deadlocked)
#include <arpa/inet.h>
#include <dirent.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

// Names of this process's threads that are the emulated RNIC's engine.
int engine_threads() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name == "rnic-engine") ++n;
  }
  closedir(d);
  return n;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "dropin_exit_probe: %s failed: %s\n", what, std::strerror(errno));
  _exit(2);
}

rdma_cm_event* next(rdma_event_channel* ch, rdma_cm_event_type want) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev) != 0) die("rdma_get_cm_event");
  if (ev->event != want) {
    std::fprintf(stderr, "dropin_exit_probe: %s, expected %s\n", rdma_event_str(ev->event),
                 rdma_event_str(want));
    _exit(2);
  }
  return ev;
}

int idle() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n < 1) die("ibv_get_device_list");
  ibv_context* ctx = ibv_open_device(list[0]);
  if (!ctx) die("ibv_open_device");
  if (!ibv_create_cq(ctx, 4, nullptr, nullptr, 0)) die("ibv_create_cq");
  if (engine_threads() != 1) {
    std::fprintf(stderr, "dropin_exit_probe: no engine thread named rnic-engine\n");
    return 2;
  }
  std::exit(0);
}

rdma_event_channel* teardown_channel = nullptr;
rdma_cm_id* teardown_id = nullptr;

void teardown_at_exit() {
  if (!teardown_id) return;
  rdma_disconnect(teardown_id);
  pollfd p{teardown_channel->fd, POLLIN, 0};
  if (::poll(&p, 1, 3000) <= 0) {
    std::fprintf(stderr, "dropin_exit_probe: no CM event within 3 s of rdma_disconnect at exit\n");
    _exit(4);
  }
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(teardown_channel, &ev) != 0 || ev->event != RDMA_CM_EVENT_DISCONNECTED) {
    std::fprintf(stderr, "dropin_exit_probe: expected DISCONNECTED at exit\n");
    _exit(4);
  }
  rdma_ack_cm_event(ev);
}

// A listener of `ch` on 127.0.0.1 at a port the system picks; `a` gets its address.
rdma_cm_id* listen_on_loopback(rdma_event_channel* ch, sockaddr_in& a) {
  rdma_cm_id* listener = nullptr;
  if (!ch || rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP)) die("rdma_create_id");
  a = sockaddr_in{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&a))) die("rdma_bind_addr");
  if (rdma_listen(listener, 4)) die("rdma_listen");
  a.sin_port = rdma_get_src_port(listener);
  return listener;
}

struct Connected {
  rdma_cm_id* client = nullptr;
  rdma_cm_id* server = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<char>* buf = nullptr;
};

// Two ids of this process connected on `ch` over 127.0.0.1, one PD, one CQ, a 1 MiB region
// (never freed, like the malloc()ed buffers of rping and perftest: a static object built after
// the engine started would be destroyed while the engine may still place into it), and
// `recvs` receives of 4 KiB posted on the server's QP.
Connected connect_pair(rdma_event_channel* ch, int recvs) {
  Connected c;
  sockaddr_in a;
  listen_on_loopback(ch, a);
  if (rdma_create_id(ch, &c.client, nullptr, RDMA_PS_TCP)) die("rdma_create_id");
  if (rdma_resolve_addr(c.client, nullptr, reinterpret_cast<sockaddr*>(&a), 1000))
    die("rdma_resolve_addr");
  rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
  if (rdma_resolve_route(c.client, 1000)) die("rdma_resolve_route");
  rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  ibv_pd* pd = ibv_alloc_pd(c.client->verbs);
  c.cq = ibv_create_cq(c.client->verbs, 4096, nullptr, nullptr, 0);
  c.buf = new std::vector<char>(1 << 20, 'x');
  c.mr = ibv_reg_mr(pd, c.buf->data(), c.buf->size(),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!pd || !c.cq || !c.mr) die("ibv_alloc_pd/ibv_create_cq/ibv_reg_mr");
  ibv_qp_init_attr ia{};
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 1024;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  ia.send_cq = ia.recv_cq = c.cq;
  if (rdma_create_qp(c.client, pd, &ia)) die("rdma_create_qp");
  rdma_conn_param cp{};
  cp.initiator_depth = cp.responder_resources = 4;
  if (rdma_connect(c.client, &cp)) die("rdma_connect");
  rdma_cm_event* req = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  c.server = req->id;
  rdma_ack_cm_event(req);
  if (rdma_create_qp(c.server, pd, &ia)) die("rdma_create_qp (server)");
  ibv_sge rsge{reinterpret_cast<uintptr_t>(c.buf->data()), 4096, c.mr->lkey};
  for (int i = 0; i < recvs; ++i) {
    ibv_recv_wr rw{};
    rw.sg_list = &rsge;
    rw.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(c.server->qp, &rw, &bad)) die("ibv_post_recv");
  }
  if (rdma_accept(c.server, nullptr)) die("rdma_accept");
  rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
  rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
  return c;
}

int teardown() {
  std::atexit(teardown_at_exit);  // before the library's engine starts
  teardown_channel = rdma_create_event_channel();
  if (!teardown_channel) die("rdma_create_event_channel");
  teardown_id = connect_pair(teardown_channel, 0).client;
  std::exit(0);
}

int chanrace(int iters) {
  std::atomic<int> progress{0};
  std::thread([&] {
    for (int last = -1;; last = progress.load()) {
      std::this_thread::sleep_for(std::chrono::seconds(10));
      if (progress.load() == last) {
        std::fprintf(stderr, "dropin_exit_probe: no progress for 10 s at iteration %d\n", last);
        _exit(5);
      }
    }
  }).detach();
  static const char req[20] = {'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R', 'e', 'q',
                               ' ', 'F', 'r', 'a', 'm', 'e', 0,   1,   0,   0};
  for (int i = 0; i < iters; ++i) {
    rdma_event_channel* ch = rdma_create_event_channel();
    sockaddr_in a;
    rdma_cm_id* listener = listen_on_loopback(ch, a);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a)) die("connect");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the engine accepts it
    rdma_destroy_id(listener);
    [[maybe_unused]] const auto sent = ::send(fd, req, sizeof req, MSG_NOSIGNAL);
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds((i * 13) % 300);
    while (std::chrono::steady_clock::now() < until) {
    }
    rdma_destroy_event_channel(ch);
    ::close(fd);
    progress = i + 1;
  }
  _exit(0);
}

int busy() {
  Connected c = connect_pair(rdma_create_event_channel(), 1024);
  rdma_cm_id* client = c.client;
  ibv_cq* cq = c.cq;
  ibv_mr* mr = c.mr;
  std::vector<char>& buf = *c.buf;
  // Writes of 64 KiB and small Sends, unsignaled but every 64th, the CQ drained as it goes:
  // the engine is transmitting, placing and completing when the program exits.
  std::atomic<bool> go{true};
  std::thread poster([&] {
    std::uint64_t k = 0;
    while (go.load(std::memory_order_relaxed)) {
      ibv_sge s{reinterpret_cast<uintptr_t>(buf.data()), (k % 2) ? 64u : 65536u, mr->lkey};
      ibv_send_wr w{};
      w.sg_list = &s;
      w.num_sge = 1;
      w.opcode = (k % 2) ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
      w.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf.data()) + 65536;
      w.wr.rdma.rkey = mr->rkey;
      w.send_flags = (k % 64 == 0) ? IBV_SEND_SIGNALED : 0;
      ibv_send_wr* bad = nullptr;
      if (ibv_post_send(client->qp, &w, &bad) == 0) ++k;
      ibv_wc wc[16];
      ibv_poll_cq(cq, 16, wc);
    }
  });
  poster.detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::exit(0);  // connections up, the thread posting, nothing torn down
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "idle") return idle();
  if (mode == "busy") return busy();
  if (mode == "teardown") return teardown();
  if (mode == "chanrace" && argc > 2) return chanrace(std::atoi(argv[2]));
  std::fprintf(stderr, "usage: dropin_exit_probe idle|busy\n");
  return 2;
}
