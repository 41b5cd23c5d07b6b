// The drop-in libibverbs' objects: each embeds the public rdma-core 44 struct as its first
// member (so the pointer a program holds is the object) and owns the engine object behind it.
// Ownership: the program owns what it created and destroys it with the matching call; the
// engine keeps a QP's CQs alive (QpInit::keep_alive) until it has let go of the QP, so a
// completion the engine pushes after ibv_destroy_cq never lands in freed memory.
//
// The emulated RNIC (rnic::Device, its engine thread "rnic-engine") is one per process, created
// on first use with every signal blocked (process-directed signals such as qperf's SIGALRM
// reach the program's threads), never destroyed (programs exit() with connections up and
// threads inside the library) but stopped at exit once the program's own at-exit handlers and
// static destructors have run (device.cpp), and forgotten in a fork()ed child (its engine
// thread does not exist there).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>

#include "rnic/completion_queue.hpp"
#include "rnic/engine_fwd.hpp"
#include "rnic/memory.hpp"
#include "rnic/qp_types.hpp"

namespace iwarp::verbs_abi {

// The emulated RNIC, started on first use; nullptr (errno set, a line on stderr) when the
// settings are wrong.
rnic::Device* engine();

// The one device ibv_get_device_list reports.
ibv_device* the_device();
// A context librdmacm uses for its ids (opened once, never closed); nullptr with errno set.
ibv_context* shared_context();

// What the device offers (ibv_query_device), filled from the engine's limits.
void device_attr(ibv_device_attr* a);
inline constexpr std::uint32_t kMaxQp = 16384, kMaxCq = 16384, kMaxMr = 1u << 20, kMaxPd = 16384,
                               kMaxSrq = 4096;

struct Context {
  verbs_context vctx;  // vctx.context is what the program holds; must stay first
  int async_fd = -1;   // never signalled: the emulated device raises no async events
};
inline Context* context_of(ibv_context* c) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(c) - offsetof(verbs_context, context));
}

struct Pd {
  ibv_pd pub;
  rnic::PdHandle handle = 0;
  std::atomic<int> users{0};  // MRs, QPs and SRQs in it
};

struct Mr {
  ibv_mr pub;
  Pd* pd = nullptr;
};

struct CompChannel {
  ibv_comp_channel pub;
  rnic::CompletionChannel ch{false};  // blocking fd, as rdma-core's
  std::atomic<int> cqs{0};            // CQs reporting to it
};

struct Cq {
  ibv_cq pub;
  std::shared_ptr<rnic::CompletionQueue> cq;
  CompChannel* channel = nullptr;
  std::atomic<int> qps{0};  // QPs completing into it
};

struct Srq {
  ibv_srq pub;
  std::shared_ptr<rnic::SharedReceiveQueue> srq;
  Pd* pd = nullptr;
  ibv_srq_attr attr{};
  std::atomic<int> qps{0};
};

struct Qp {
  ibv_qp pub;
  std::shared_ptr<rnic::QueuePair> qp;
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  ibv_qp_cap cap{};
  bool sq_sig_all = false;
};

template <class T, class P>
T* impl(P* p) {
  return reinterpret_cast<T*>(p);
}

// The QP with this number (rdma_connect/rdma_accept with conn_param->qp_num), or nullptr.
Qp* qp_by_num(std::uint32_t num);

// fork(): the child starts with no engine and none of the parent's objects; these reset the
// tables (and locks another thread may have held at the fork) of verbs.cpp and cm.cpp.
void forget_verbs_after_fork();
void forget_cm_after_fork();

// ibv_qp_state for an engine state.
ibv_qp_state to_ibv_state(rnic::QpState s);

// A failed verb: sets errno and returns it (the ibv_* convention for int-returning calls).
int fail(int err);
// The same for calls that return -1 (librdmacm, ibv_get_cq_event, ...).
int fail_neg(int err);

}  // namespace iwarp::verbs_abi
