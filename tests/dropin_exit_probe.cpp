// A program on the drop-in libibverbs.so.1/librdmacm.so.1 that exits without tearing anything
// down, as rping, perftest and qperf do, while the engine may be busy. Its first at-exit
// handler (registered before the library starts its engine, so it runs after the library's
// own) fails the exit with status 3 when the engine thread ("rnic-engine") is still running
// then: from that point on the process's static objects are destroyed, and an engine running
// in them crashed programs now and then (SIGSEGV after their last line).
//
//   dropin_exit_probe idle   open the device, create a CQ, exit
//   dropin_exit_probe busy   connect two QPs of this process over 127.0.0.1 and exit while a
//                            thread keeps posting RDMA Writes and Sends on them
#include <arpa/inet.h>
#include <dirent.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
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

void check_at_exit() {
  const int n = engine_threads();
  if (n != 0) {
    std::fprintf(stderr, "dropin_exit_probe: %d engine thread(s) still running at exit\n", n);
    std::fflush(stderr);
    _exit(3);
  }
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

int busy() {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id *listener = nullptr, *client = nullptr, *server = nullptr;
  if (!ch || rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP)) die("rdma_create_id");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (rdma_bind_addr(listener, reinterpret_cast<sockaddr*>(&a))) die("rdma_bind_addr");
  if (rdma_listen(listener, 4)) die("rdma_listen");
  a.sin_port = rdma_get_src_port(listener);
  if (rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP)) die("rdma_create_id");
  if (rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr*>(&a), 1000))
    die("rdma_resolve_addr");
  rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
  if (rdma_resolve_route(client, 1000)) die("rdma_resolve_route");
  rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  ibv_pd* pd = ibv_alloc_pd(client->verbs);
  ibv_cq* cq = ibv_create_cq(client->verbs, 4096, nullptr, nullptr, 0);
  // Never freed, like the malloc()ed buffers of rping and perftest: a static object built
  // after the engine started is destroyed before the library's at-exit handler stops it (the
  // engine would then place into freed memory).
  auto& buf = *new std::vector<char>(1 << 20, 'x');
  ibv_mr* mr =
      ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!pd || !cq || !mr) die("ibv_alloc_pd/ibv_create_cq/ibv_reg_mr");
  ibv_qp_init_attr ia{};
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 1024;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  ia.send_cq = ia.recv_cq = cq;
  if (rdma_create_qp(client, pd, &ia)) die("rdma_create_qp");
  rdma_conn_param cp{};
  cp.initiator_depth = cp.responder_resources = 4;
  if (rdma_connect(client, &cp)) die("rdma_connect");
  rdma_cm_event* req = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  server = req->id;
  rdma_ack_cm_event(req);
  if (rdma_create_qp(server, pd, &ia)) die("rdma_create_qp (server)");
  ibv_sge rsge{reinterpret_cast<uintptr_t>(buf.data()), 4096, mr->lkey};
  for (int i = 0; i < 1024; ++i) {
    ibv_recv_wr rw{};
    rw.sg_list = &rsge;
    rw.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(server->qp, &rw, &bad)) die("ibv_post_recv");
  }
  if (rdma_accept(server, nullptr)) die("rdma_accept");
  rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
  rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
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
  std::atexit(check_at_exit);  // before the library's: runs after it
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "idle") return idle();
  if (mode == "busy") return busy();
  std::fprintf(stderr, "usage: dropin_exit_probe idle|busy\n");
  return 2;
}
