// Protection domains, memory regions, completion channels and queues, shared receive queues and
// queue pairs of the drop-in libibverbs, and the data-path operations the inline verbs reach
// through ibv_context.ops (post_send, post_recv, post_srq_recv, poll_cq, req_notify_cq). Each
// call translates rdma-core's structs to the engine's (rnic/) and back; the engine does the
// work, as it does for the C++ verbs shim.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "rnic/device.hpp"
#include "rnic/queue_pair.hpp"
#include "rnic/segment_report.hpp"
#include "rnic/verbs_translation.hpp"
#include "verbs_abi/context.hpp"
#include "verbs_abi/settings.hpp"
#include "verbs_abi/unsupported.hpp"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

namespace iwarp::verbs_abi {

namespace {

std::atomic<std::uint32_t> next_handle{1};
std::atomic<int> pds{0}, cqs{0}, qps{0}, mrs{0}, srqs{0};

// QP numbers to QPs, for conn_param->qp_num.
std::mutex qp_table_mu;
// Never destroyed: a program thread may still post or destroy while exit() runs.
std::unordered_map<std::uint32_t, Qp*>& qp_table = *new std::unordered_map<std::uint32_t, Qp*>;

rnic::Device& dev() {
  return *engine();  // every object exists only after ibv_open_device started the engine
}

// Counts an object against a device limit; false (ENOMEM) when the limit is reached.
bool take(std::atomic<int>& n, std::uint32_t max) {
  if (n.fetch_add(1) >= static_cast<int>(max)) {
    --n;
    errno = ENOMEM;
    return false;
  }
  return true;
}

// rdma-core access flags this RNIC honours; IBV_ACCESS_OPTIONAL_RANGE bits are hints a device
// may ignore (perftest asks for relaxed ordering), anything else is refused.
constexpr int kAccessSupported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// Whether [addr, addr + len) is mapped, readable, and writable if `write` (from
// /proc/self/maps). The kernel pins a region for the device and refuses (EFAULT) what it cannot
// pin; the engine instead reads and writes the process's memory directly, so a region it may
// not write would let a peer's RDMA Write crash the process.
bool mapped(std::uintptr_t addr, std::size_t len, bool write) {
  if (len == 0) return true;
  if (addr + len < addr) return false;
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (!f) return true;  // no procfs: nothing to check against
  std::uintptr_t covered = addr;
  const std::uintptr_t end = addr + len;
  char line[512];
  while (covered < end && std::fgets(line, sizeof line, f)) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3) continue;
    if (hi <= covered) continue;
    if (lo > covered) break;  // a gap
    if (perms[0] != 'r' || (write && perms[1] != 'w')) break;
    covered = hi;
  }
  std::fclose(f);
  return covered >= end;
}

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, std::uint64_t iova, int access) {
  if (!pd || (!addr && length)) {
    errno = EINVAL;
    return nullptr;
  }
  access &= ~IBV_ACCESS_OPTIONAL_RANGE;
  if (access & ~kAccessSupported) {
    if (access & IBV_ACCESS_MW_BIND)
      report_unsupported("ibv_reg_mr", "memory windows (IBV_ACCESS_MW_BIND) are not supported");
    else if (access & IBV_ACCESS_ON_DEMAND)
      report_unsupported("ibv_reg_mr", "on-demand paging (IBV_ACCESS_ON_DEMAND) is not supported");
    else
      report_unsupported("ibv_reg_mr", "an access flag beyond local/remote read/write/atomic");
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // As the kernel: remote write or atomic access needs local write.
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL;
    return nullptr;
  }
  const bool write =
      access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  if (!mapped(reinterpret_cast<std::uintptr_t>(addr), length, write)) {
    errno = EFAULT;
    return nullptr;
  }
  if (!take(mrs, kMaxMr)) return nullptr;
  auto* p = impl<Pd>(pd);
  auto* mr = new Mr;
  std::memset(&mr->pub, 0, sizeof mr->pub);
  mr->pd = p;
  const STag s = dev().memory().register_region(p->handle, addr, length, iova,
                                                static_cast<std::uint32_t>(access));
  mr->pub.context = pd->context;
  mr->pub.pd = pd;
  mr->pub.addr = addr;
  mr->pub.length = length;
  mr->pub.handle = next_handle++;
  mr->pub.lkey = mr->pub.rkey = s.value();  // iWARP: one STag for both
  ++p->users;
  return &mr->pub;
}

int post_send_op(ibv_qp* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  auto* qp = impl<Qp>(q);
  int err = 0;
  bool posted = false;
  for (; wr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > qp->cap.max_send_sge ||
        (wr->num_sge && !wr->sg_list)) {
      err = EINVAL;
    } else {
      switch (wr->opcode) {
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
        case IBV_WR_SEND:
        case IBV_WR_SEND_WITH_IMM:
        case IBV_WR_RDMA_READ:
        case IBV_WR_ATOMIC_CMP_AND_SWP:
        case IBV_WR_ATOMIC_FETCH_AND_ADD:
        case IBV_WR_LOCAL_INV:
        case IBV_WR_SEND_WITH_INV:
          break;
        case IBV_WR_BIND_MW:
          report_unsupported("ibv_post_send", "memory windows (IBV_WR_BIND_MW) are not supported");
          err = EINVAL;
          break;
        default:
          report_unsupported("ibv_post_send",
                             "an opcode other than Send/Write/Read/atomics/"
                             "invalidate");
          err = EINVAL;
      }
    }
    if (!err) {
      rnic::SendWr r = rnic::send_wr_from_ibv(*wr);
      r.flags = wr->send_flags &
                (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE);
      if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM || wr->opcode == IBV_WR_SEND_WITH_IMM)
        r.imm_data = ntohl(wr->imm_data);  // big-endian on the C ABI
      if (wr->opcode == IBV_WR_SEND_WITH_INV || wr->opcode == IBV_WR_LOCAL_INV)
        r.invalidate_rkey = STag{wr->invalidate_rkey};
      std::string why;
      err = qp->qp->post_send(r, &why, false);
      // A program's mistake says what it was, once per distinct reason (a full queue,
      // ENOMEM, is ordinary back-pressure and says nothing).
      if (err == EINVAL) report_unsupported("ibv_post_send", why.c_str());
    }
    if (err) {
      if (bad) *bad = wr;
      break;
    }
    posted = true;
  }
  if (posted) qp->qp->ring_doorbell();
  return err;
}

int post_recv_op(ibv_qp* q, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  auto* qp = impl<Qp>(q);
  for (; wr; wr = wr->next) {
    int err = 0;
    if (qp->srq)
      err = EINVAL;  // receives go to the SRQ
    else if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > qp->cap.max_recv_sge ||
             (wr->num_sge && !wr->sg_list))
      err = EINVAL;
    else {
      std::string why;
      err = qp->qp->post_recv(rnic::recv_wr_from_ibv(*wr), &why);
      if (err == EINVAL) report_unsupported("ibv_post_recv", why.c_str());
    }
    if (err) {
      if (bad) *bad = wr;
      return err;
    }
  }
  return 0;
}

int post_srq_recv_op(ibv_srq* s, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  auto* srq = impl<Srq>(s);
  for (; wr; wr = wr->next) {
    int err = 0;
    if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > srq->attr.max_sge ||
        (wr->num_sge && !wr->sg_list))
      err = EINVAL;
    else {
      std::string why;
      err = srq->srq->post_recv(rnic::recv_wr_from_ibv(*wr), &why);
      if (err == EINVAL) report_unsupported("ibv_post_srq_recv", why.c_str());
    }
    if (err) {
      if (bad) *bad = wr;
      return err;
    }
  }
  return 0;
}

// Busy polling (perftest's latency tests poll an empty CQ in a tight loop): every
// RNIC_POLL_YIELD-th empty poll in a row on a thread yields the CPU (sched_yield), so that on a
// machine with few cores the spinning program does not starve the engine thread that must
// receive what it waits for (settings.hpp; 0 turns it off).
unsigned poll_yield_every() {
  return settings().poll_yield;
}

int poll_cq_op(ibv_cq* c, int num_entries, ibv_wc* wc) {
  thread_local unsigned empty_polls = 0;
  if (num_entries <= 0) return 0;
  if (!wc) return -1;
  auto* cq = impl<Cq>(c);
  rnic::Wc buf[32];
  int total = 0;
  while (total < num_entries) {
    const int want = std::min(num_entries - total, 32);
    // Only the first chunk may run the engine (busy polling): a poll that got completions
    // returns them.
    const int n =
        cq->cq->poll(std::span<rnic::Wc>(buf, static_cast<std::size_t>(want)), total == 0);
    for (int i = 0; i < n; ++i) {
      const rnic::Wc& w = buf[i];
      ibv_wc& o = wc[total + i];
      std::memset(&o, 0, sizeof o);
      rnic::fill_ibv_wc(w, o);
      // imm_data and invalidated_rkey share a union; immediate data is big-endian.
      if (w.wc_flags & rnic::kWcWithInv)
        o.invalidated_rkey = w.invalidated_rkey.value();
      else if (w.wc_flags & rnic::kWcWithImm)
        o.imm_data = htonl(w.imm_data);
      o.src_qp = w.qp_num;
    }
    total += n;
    if (n < want) break;
  }
  if (total > 0) {
    empty_polls = 0;
  } else if (const unsigned every = poll_yield_every(); every > 0 && ++empty_polls >= every) {
    empty_polls = 0;
    sched_yield();
  }
  return total;
}

int req_notify_cq_op(ibv_cq* c, int solicited_only) {
  return impl<Cq>(c)->cq->req_notify(solicited_only != 0);
}

}  // namespace

void fill_ops(ibv_context_ops* ops) {
  ops->poll_cq = poll_cq_op;
  ops->req_notify_cq = req_notify_cq_op;
  ops->post_send = post_send_op;
  ops->post_recv = post_recv_op;
  ops->post_srq_recv = post_srq_recv_op;
}

void forget_verbs_after_fork() {
  new (&qp_table_mu) std::mutex;
  new (&qp_table) std::unordered_map<std::uint32_t, Qp*>;  // the parent's QPs: leaked
}

Qp* qp_by_num(std::uint32_t num) {
  std::lock_guard l(qp_table_mu);
  auto it = qp_table.find(num);
  return it == qp_table.end() ? nullptr : it->second;
}

}  // namespace iwarp::verbs_abi

using namespace iwarp;
using namespace iwarp::verbs_abi;

extern "C" {

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  if (!context) {
    errno = EINVAL;
    return nullptr;
  }
  if (!take(pds, kMaxPd)) return nullptr;
  auto* pd = new Pd;
  std::memset(&pd->pub, 0, sizeof pd->pub);
  pd->pub.context = context;
  pd->pub.handle = next_handle++;
  pd->handle = dev().memory().alloc_pd();
  return &pd->pub;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  if (!pd) return fail(EINVAL);
  auto* p = impl<Pd>(pd);
  if (p->users.load() > 0) return fail(EBUSY);  // MRs, QPs or SRQs still in it
  delete p;
  --pds;
  return 0;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return reg_mr(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr), access);
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, std::uint64_t iova, int access) {
  return reg_mr(pd, addr, length, iova, access);
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, std::uint64_t iova,
                         unsigned int access) {
  return reg_mr(pd, addr, length, iova, static_cast<int>(access));
}

int ibv_dereg_mr(ibv_mr* mr) {
  if (!mr) return fail(EINVAL);
  auto* m = impl<Mr>(mr);
  // Returns once the engine no longer reads or writes the region, so the program may free it
  // (a transfer into it still under way ends in a Terminate to the peer).
  dev().deregister(STag{mr->lkey});
  --m->pd->users;
  delete m;
  --mrs;
  return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  if (!context) {
    errno = EINVAL;
    return nullptr;
  }
  CompChannel* ch = nullptr;
  try {
    ch = new CompChannel;
  } catch (const std::exception&) {
    errno = EMFILE;
    return nullptr;
  }
  ch->pub.context = context;
  ch->pub.fd = ch->ch.fd();
  ch->pub.refcnt = 0;
  return &ch->pub;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (!channel) return fail(EINVAL);
  auto* ch = impl<CompChannel>(channel);
  if (ch->cqs.load() > 0) return fail(EBUSY);
  delete ch;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                      int comp_vector) {
  const rnic::DeviceLimits lim;
  if (!context || cqe < 1 || static_cast<std::uint32_t>(cqe) > lim.max_cqe || comp_vector < 0 ||
      comp_vector >= context->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  if (!take(cqs, kMaxCq)) return nullptr;
  auto* ch = channel ? impl<CompChannel>(channel) : nullptr;
  auto* cq = new Cq;
  std::memset(&cq->pub, 0, sizeof cq->pub);
  // As rdma-core's providers, at least the entries asked for (a power of two).
  std::size_t depth = std::bit_ceil(static_cast<std::size_t>(cqe));
  cq->cq = std::make_shared<rnic::CompletionQueue>(depth, ch ? &ch->ch : nullptr, cq);
  cq->cq->set_device(engine());
  cq->channel = ch;
  cq->pub.context = context;
  cq->pub.channel = channel;
  cq->pub.cq_context = cq_context;
  cq->pub.handle = next_handle++;
  cq->pub.cqe = static_cast<int>(depth);
  ::pthread_mutex_init(&cq->pub.mutex, nullptr);
  ::pthread_cond_init(&cq->pub.cond, nullptr);
  if (ch) {
    ++ch->cqs;
    ++channel->refcnt;
  }
  return &cq->pub;
}

int ibv_resize_cq(ibv_cq* cq, int) {
  if (!cq) return fail(EINVAL);
  report_unsupported("ibv_resize_cq", "CQs cannot be resized (as with siw)");
  return fail(EOPNOTSUPP);
}

int ibv_destroy_cq(ibv_cq* c) {
  if (!c) return fail(EINVAL);
  auto* cq = impl<Cq>(c);
  if (cq->qps.load() > 0) return fail(EBUSY);
  // Every event taken must be acknowledged first (ibv_ack_cq_events), checked atomically with
  // taking the CQ's queued events off the channel, so no ibv_get_cq_event can hand out this CQ
  // after it is freed. The engine (which may hold the CQ a little longer through a QP) signals
  // nothing after this.
  if (!cq->cq->detach_channel_if_acked()) return fail(EBUSY);
  if (cq->channel) {
    --cq->channel->cqs;
    --cq->channel->pub.refcnt;
  }
  ::pthread_mutex_destroy(&c->mutex);
  ::pthread_cond_destroy(&c->cond);
  delete cq;
  --cqs;
  return 0;
}

// rdma-core's semantics are those of read() on the channel's fd: it blocks, fails with EAGAIN
// when the program made the fd non-blocking, and with EINTR when a signal arrives (qperf ends
// each test with SIGALRM that way). The wait is poll(), a cancellation point, with no lock held
// (rping cancels its CQ thread in it).
int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  if (!channel || !cq) return fail_neg(EINVAL);
  auto* ch = impl<CompChannel>(channel);
  for (;;) {
    if (auto* c = ch->ch.try_take()) {
      auto* owner = static_cast<Cq*>(c->context());
      *cq = &owner->pub;
      if (cq_context) *cq_context = owner->pub.cq_context;
      return 0;
    }
    const int flags = ::fcntl(channel->fd, F_GETFL);
    if (flags < 0) return -1;
    if (flags & O_NONBLOCK) return fail_neg(EAGAIN);
    pollfd p{channel->fd, POLLIN, 0};
    if (::poll(&p, 1, -1) < 0) return -1;  // errno: EINTR when a signal came
  }
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (cq) impl<Cq>(cq)->cq->ack_events(nevents);
}

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  const rnic::DeviceLimits lim;
  if (!pd || !attr || attr->attr.max_wr < 1 || attr->attr.max_wr > lim.max_qp_wr ||
      attr->attr.max_sge > lim.max_sge) {
    errno = EINVAL;
    return nullptr;
  }
  if (!take(srqs, kMaxSrq)) return nullptr;
  auto* p = impl<Pd>(pd);
  auto* s = new Srq;
  std::memset(&s->pub, 0, sizeof s->pub);
  s->attr = attr->attr;
  s->attr.max_sge = std::max(attr->attr.max_sge, 1u);
  s->srq = std::make_shared<rnic::SharedReceiveQueue>(p->handle, s->attr.max_wr, s->attr.max_sge);
  s->pd = p;
  s->pub.context = pd->context;
  s->pub.srq_context = attr->srq_context;
  s->pub.pd = pd;
  s->pub.handle = next_handle++;
  ::pthread_mutex_init(&s->pub.mutex, nullptr);
  ::pthread_cond_init(&s->pub.cond, nullptr);
  attr->attr = s->attr;
  ++p->users;
  return &s->pub;
}

int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  if (!srq || !attr) return fail(EINVAL);
  auto* s = impl<Srq>(srq);
  if (mask & IBV_SRQ_MAX_WR) {
    report_unsupported("ibv_modify_srq", "an SRQ cannot be resized (as with siw)");
    return fail(EOPNOTSUPP);
  }
  // The limit is kept (and reported by ibv_query_srq); the emulated device raises no async
  // events, so IBV_EVENT_SRQ_LIMIT_REACHED never comes.
  if (mask & IBV_SRQ_LIMIT) s->attr.srq_limit = attr->srq_limit;
  return 0;
}

int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  if (!srq || !attr) return fail(EINVAL);
  *attr = impl<Srq>(srq)->attr;
  return 0;
}

int ibv_destroy_srq(ibv_srq* srq) {
  if (!srq) return fail(EINVAL);
  auto* s = impl<Srq>(srq);
  if (s->qps.load() > 0) return fail(EBUSY);
  --s->pd->users;
  ::pthread_mutex_destroy(&srq->mutex);
  ::pthread_cond_destroy(&srq->cond);
  delete s;
  --srqs;
  return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  const rnic::DeviceLimits lim;
  if (!pd || !attr) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->qp_type != IBV_QPT_RC) {
    report_unsupported("ibv_create_qp",
                       "only reliable-connected QPs (IBV_QPT_RC) exist on iWARP; UD, UC, XRC "
                       "and raw packet QPs are not supported");
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!attr->send_cq || !attr->recv_cq) {
    errno = EINVAL;
    return nullptr;
  }
  auto& cap = attr->cap;
  if (cap.max_send_wr > lim.max_qp_wr || cap.max_recv_wr > lim.max_qp_wr ||
      cap.max_send_sge > lim.max_sge || cap.max_recv_sge > lim.max_sge ||
      cap.max_inline_data > lim.max_inline_data) {
    errno = EINVAL;
    return nullptr;
  }
  if (!take(qps, kMaxQp)) return nullptr;
  auto* p = impl<Pd>(pd);
  auto* scq = impl<Cq>(attr->send_cq);
  auto* rcq = impl<Cq>(attr->recv_cq);
  auto* srq = attr->srq ? impl<Srq>(attr->srq) : nullptr;
  // What the QP really has, written back as rdma-core's providers do (at least one of each).
  ibv_qp_cap actual = cap;
  actual.max_send_wr = std::max(cap.max_send_wr, 1u);
  actual.max_recv_wr = srq ? 0 : std::max(cap.max_recv_wr, 1u);
  actual.max_send_sge = std::max(cap.max_send_sge, 1u);
  actual.max_recv_sge = srq ? 0 : std::max(cap.max_recv_sge, 1u);
  actual.max_inline_data = cap.max_inline_data;
  rnic::QpInit init;
  init.pd = p->handle;
  init.send_cq = scq->cq.get();
  init.recv_cq = rcq->cq.get();
  init.srq = srq ? srq->srq : nullptr;
  init.caps = {actual.max_send_wr, std::max(actual.max_recv_wr, 1u), actual.max_send_sge,
               std::max(actual.max_recv_sge, 1u), actual.max_inline_data};
  init.sq_sig_all = attr->sq_sig_all != 0;
  init.keep_alive = {scq->cq, rcq->cq};
  init.rnr_wait = settings().rnr_wait;
  auto* qp = new Qp;
  std::memset(&qp->pub, 0, sizeof qp->pub);
  qp->qp = std::make_shared<rnic::QueuePair>(dev(), init);
  dev().track(qp->qp);  // rnic stat lists it from now on
  qp->pd = p;
  qp->send_cq = scq;
  qp->recv_cq = rcq;
  qp->srq = srq;
  qp->cap = actual;
  qp->sq_sig_all = init.sq_sig_all;
  qp->pub.context = pd->context;
  qp->pub.qp_context = attr->qp_context;
  qp->pub.pd = pd;
  qp->pub.send_cq = attr->send_cq;
  qp->pub.recv_cq = attr->recv_cq;
  qp->pub.srq = attr->srq;
  qp->pub.handle = next_handle++;
  qp->pub.qp_num = qp->qp->qp_num();
  qp->pub.state = IBV_QPS_RESET;
  qp->pub.qp_type = IBV_QPT_RC;
  ::pthread_mutex_init(&qp->pub.mutex, nullptr);
  ::pthread_cond_init(&qp->pub.cond, nullptr);
  cap = actual;
  ++p->users;
  ++scq->qps;
  ++rcq->qps;
  if (srq) ++srq->qps;
  {
    std::lock_guard l(qp_table_mu);
    qp_table[qp->pub.qp_num] = qp;
  }
  return &qp->pub;
}

int ibv_query_qp(ibv_qp* q, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr) {
  if (!q || !attr) return fail(EINVAL);
  (void)attr_mask;  // everything is filled in, as rdma-core's providers do
  auto* qp = impl<Qp>(q);
  std::memset(attr, 0, sizeof *attr);
  attr->qp_state = q->state == IBV_QPS_RESET && qp->qp->state() == rnic::QpState::Idle
                       ? IBV_QPS_RESET
                       : to_ibv_state(qp->qp->state());
  attr->cur_qp_state = attr->qp_state;
  attr->path_mtu = IBV_MTU_4096;
  attr->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  attr->cap = qp->cap;
  attr->port_num = 1;
  if (auto s = qp->qp->setup()) {
    const auto& p = s->params;
    const bool ini = s->initiator;
    attr->max_rd_atomic =
        static_cast<std::uint8_t>(std::min<int>(ini ? p.initiator_ord : p.responder_ord, 255));
    attr->max_dest_rd_atomic =
        static_cast<std::uint8_t>(std::min<int>(ini ? p.initiator_ird : p.responder_ird, 255));
  }
  if (init_attr) {
    std::memset(init_attr, 0, sizeof *init_attr);
    init_attr->qp_context = q->qp_context;
    init_attr->send_cq = q->send_cq;
    init_attr->recv_cq = q->recv_cq;
    init_attr->srq = q->srq;
    init_attr->cap = qp->cap;
    init_attr->qp_type = IBV_QPT_RC;
    init_attr->sq_sig_all = qp->sq_sig_all;
  }
  return 0;
}

// An iWARP QP is connected by the CM (rdma_connect/rdma_accept), which moves it to RTS; what a
// program may do here: ERR (flush), RESET/INIT before the connection, and the RTR/RTS steps of
// rdma_init_qp_attr (no-ops). IB addressing (an address vector, a destination QP number) cannot
// connect it.
int ibv_modify_qp(ibv_qp* q, ibv_qp_attr* attr, int attr_mask) {
  if (!q || !attr) return fail(EINVAL);
  auto* qp = impl<Qp>(q);
  if (attr_mask & (IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_ALT_PATH)) {
    report_unsupported("ibv_modify_qp",
                       "iWARP QPs are connected by the CM (rdma_connect/rdma_accept), not by "
                       "an address vector and destination QP number");
    return fail(EINVAL);
  }
  if (!(attr_mask & IBV_QP_STATE)) return 0;  // attributes alone (min_rnr_timer, ...): kept as is
  const auto st = qp->qp->state();
  switch (attr->qp_state) {
    case IBV_QPS_ERR:
      qp->qp->modify_to_error();
      q->state = IBV_QPS_ERR;
      return 0;
    case IBV_QPS_RESET:
    case IBV_QPS_INIT:
      if (st == rnic::QpState::Error) {
        report_unsupported("ibv_modify_qp",
                           "a QP in ERROR cannot be reset and used again: create a new one");
        return fail(EOPNOTSUPP);
      }
      if (st != rnic::QpState::Idle) return fail(EINVAL);
      q->state = attr->qp_state;
      return 0;
    case IBV_QPS_RTR:
    case IBV_QPS_RTS:
      q->state = attr->qp_state;
      return 0;
    case IBV_QPS_SQD:
      // RFC 5040 §5.6 CLOSING: a graceful close of the connection.
      if (st == rnic::QpState::Rts) qp->qp->disconnect();
      return 0;
    default:
      return fail(EINVAL);
  }
}

int ibv_destroy_qp(ibv_qp* q) {
  if (!q) return fail(EINVAL);
  auto* qp = impl<Qp>(q);
  const auto st = qp->qp->state();
  if (st != rnic::QpState::Error) {
    // Also an IDLE QP: a connection being made for it then ends instead of starting it.
    qp->qp->modify_to_error();
    // As in rdma-core the QP is gone when this returns: wait (bounded) until the engine has
    // taken it to ERROR and flushed it.
    dev().run_and_wait([] {}, std::chrono::seconds(2));
  }
  // The real-segment mode (RNIC_REAL_SEGMENTS): what this connection's segment path saw, for the
  // program's user (docs/beyond-holes.md), now that it receives no more; a QP that never
  // received is not worth a line.
  if (segment_tap() && qp->qp->stats().bytes_received > 0) {
    const auto& s = settings();
    const auto text = rnic::describe_segment_path(
        *qp->qp, fmt::format("real TCP segments on {}", s.real_segments), s.cm.beyond_holes,
        fmt::format("rnic verbs: {} qp {}: ", program_name(), q->qp_num));
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  {
    std::lock_guard l(qp_table_mu);
    qp_table.erase(q->qp_num);
  }
  --qp->pd->users;
  --qp->send_cq->qps;
  --qp->recv_cq->qps;
  if (qp->srq) --qp->srq->qps;
  ::pthread_mutex_destroy(&q->mutex);
  ::pthread_cond_destroy(&q->cond);
  delete qp;
  --qps;
  return 0;
}

}  // extern "C"
