#include "verbs_shim/verbs.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <vector>

#include "rnic/device.hpp"
#include "rnic/queue_pair.hpp"
#include "rnic/verbs_translation.hpp"

namespace iwarp::verbs {

namespace {
thread_local std::string last_error;

int refuse(int err, std::string why) {
  last_error = std::move(why);
  errno = err;
  return err;
}
}  // namespace

const std::string& ibv_last_error() {
  return last_error;
}
void set_last_error(std::string why) {
  last_error = std::move(why);
}

const char* ibv_wc_status_str(ibv_wc_status s) {
  // The same words libibverbs prints.
  switch (s) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_LEN_ERR:
      return "local length error";
    case IBV_WC_LOC_QP_OP_ERR:
      return "local QP operation error";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case IBV_WC_BAD_RESP_ERR:
      return "bad response error";
    case IBV_WC_LOC_ACCESS_ERR:
      return "local access error";
    case IBV_WC_REM_INV_REQ_ERR:
      return "remote invalid request error";
    case IBV_WC_REM_ACCESS_ERR:
      return "remote access error";
    case IBV_WC_REM_OP_ERR:
      return "remote operation error";
    case IBV_WC_FATAL_ERR:
      return "fatal error";
    case IBV_WC_GENERAL_ERR:
      return "general error";
  }
  return "unknown";
}

const char* ibv_wc_opcode_str(ibv_wc_opcode op) {
  return rnic::to_string(static_cast<rnic::WcOpcode>(op)).data();
}

ibv_context* ibv_open_device(const char* name) {
  auto* ctx = new ibv_context;
  ctx->name = name ? name : "rnic0";
  ctx->dev = std::make_unique<rnic::Device>(ctx->name);
  return ctx;
}

int ibv_close_device(ibv_context* ctx) {
  delete ctx;
  return 0;
}

int rnic_set_busy_poll(ibv_context* ctx, bool on) {
  if (!ctx || !ctx->dev) return EINVAL;
  ctx->dev->set_busy_poll(on);
  return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* ctx) {
  auto* pd = new ibv_pd;
  pd->context = ctx;
  pd->handle = ctx->dev->memory().alloc_pd();
  return pd;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  if (!pd) return refuse(EINVAL, "ibv_dealloc_pd: no PD");
  if (int n = pd->users.load(); n > 0)
    return refuse(EBUSY, fmt::format("ibv_dealloc_pd: {} MRs, QPs or SRQs still use the PD", n));
  delete pd;
  return 0;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, std::size_t length, int access) {
  if (!pd || (!addr && length)) {
    refuse(EINVAL, "ibv_reg_mr: no PD or no memory");
    return nullptr;
  }
  auto* mr = new ibv_mr;
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = length;
  const STag s = pd->context->dev->memory().register_region(pd->handle, addr, length,
                                                            reinterpret_cast<std::uint64_t>(addr),
                                                            static_cast<std::uint32_t>(access));
  mr->lkey = mr->rkey = s.value();
  ++pd->users;
  return mr;
}

int ibv_dereg_mr(ibv_mr* mr) {
  if (!mr) return refuse(EINVAL, "ibv_dereg_mr: no MR");
  // Returns once the engine no longer reads or writes the region (a transfer into it that
  // is under way ends in an error), so the caller may free the memory right after.
  if (mr->context->dev) mr->context->dev->deregister(STag{mr->lkey});
  --mr->pd->users;
  delete mr;
  return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* ctx) {
  auto* ch = new ibv_comp_channel;
  ch->context = ctx;
  return ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* ch) {
  if (!ch) return refuse(EINVAL, "ibv_destroy_comp_channel: no channel");
  if (int n = ch->cqs.load(); n > 0)
    return refuse(EBUSY, fmt::format("ibv_destroy_comp_channel: {} CQs still use the channel", n));
  delete ch;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel,
                      int /*comp_vector*/) {
  if (cqe < 1 || static_cast<std::uint32_t>(cqe) > ctx->dev->limits().max_cqe) {
    refuse(EINVAL, "ibv_create_cq: cqe out of range");
    return nullptr;
  }
  auto* cq = new ibv_cq;
  cq->context = ctx;
  cq->channel = channel;
  cq->cq_context = cq_context;
  cq->cqe = cqe;
  cq->cq = std::make_shared<rnic::CompletionQueue>(static_cast<std::size_t>(cqe),
                                                   channel ? &channel->ch : nullptr, cq);
  cq->cq->set_device(ctx->dev.get());
  if (channel) ++channel->cqs;
  return cq;
}

int ibv_destroy_cq(ibv_cq* cq) {
  if (!cq) return refuse(EINVAL, "ibv_destroy_cq: no CQ");
  if (int n = cq->qps.load(); n > 0)
    return refuse(EBUSY, fmt::format("ibv_destroy_cq: {} QPs still complete into the CQ", n));
  if (unsigned n = cq->cq->events_unacked(); n > 0)
    return refuse(EBUSY, fmt::format("ibv_destroy_cq: {} completion events were not acknowledged "
                                     "(ibv_ack_cq_events)",
                                     n));
  // Events of this CQ still queued on the channel go with it; nothing is signalled after.
  cq->cq->detach_channel();
  if (cq->channel) --cq->channel->cqs;
  delete cq;
  return 0;
}

ibv_wc to_ibv_wc(const rnic::Wc& w) {
  ibv_wc wc;
  rnic::fill_ibv_wc(w, wc);
  wc.imm_data = w.imm_data;  // host order in the shim
  wc.invalidated_rkey = w.invalidated_rkey.value();
  return wc;
}

int ibv_poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  if (num_entries <= 0) return 0;
  rnic::Wc buf[32];
  int total = 0;
  while (total < num_entries) {
    const int want = std::min(num_entries - total, 32);
    // Only the first chunk may run the engine (busy polling).
    const int n =
        cq->cq->poll(std::span<rnic::Wc>(buf, static_cast<std::size_t>(want)), total == 0);
    for (int i = 0; i < n; ++i) wc[total + i] = to_ibv_wc(buf[i]);
    total += n;
    if (n < want) break;
  }
  return total;
}

int ibv_req_notify_cq(ibv_cq* cq, int solicited_only) {
  return cq->cq->req_notify(solicited_only != 0);
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  auto* c = channel->ch.wait();
  if (!c) return refuse(EAGAIN, "no completion event");
  auto* owner = static_cast<ibv_cq*>(c->context());
  *cq = owner;
  if (cq_context) *cq_context = owner->cq_context;
  return 0;
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned nevents) {
  cq->cq->ack_events(nevents);
}

ibv_srq* ibv_create_srq(ibv_pd* pd, std::uint32_t max_wr, std::uint32_t max_sge) {
  auto* s = new ibv_srq;
  s->context = pd->context;
  s->pd = pd;
  s->srq = std::make_shared<rnic::SharedReceiveQueue>(pd->handle, max_wr, max_sge);
  ++pd->users;
  return s;
}

int ibv_destroy_srq(ibv_srq* srq) {
  if (!srq) return refuse(EINVAL, "ibv_destroy_srq: no SRQ");
  --srq->pd->users;
  delete srq;
  return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  const auto& lim = pd->context->dev->limits();
  if (!attr->send_cq || !attr->recv_cq) {
    refuse(EINVAL, "ibv_create_qp: send_cq and recv_cq are required");
    return nullptr;
  }
  if (attr->qp_type != IBV_QPT_RC) {
    refuse(EINVAL, "ibv_create_qp: iWARP has reliable-connected QPs only (IBV_QPT_RC)");
    return nullptr;
  }
  if (attr->cap.max_send_wr > lim.max_qp_wr || attr->cap.max_recv_wr > lim.max_qp_wr ||
      attr->cap.max_send_sge > lim.max_sge || attr->cap.max_recv_sge > lim.max_sge ||
      attr->cap.max_inline_data > lim.max_inline_data) {
    refuse(EINVAL, "ibv_create_qp: capabilities beyond the device limits");
    return nullptr;
  }
  rnic::QpInit init;
  init.pd = pd->handle;
  init.send_cq = attr->send_cq->cq.get();
  init.recv_cq = attr->recv_cq->cq.get();
  init.srq = attr->srq ? attr->srq->srq : nullptr;
  init.caps = {attr->cap.max_send_wr, attr->cap.max_recv_wr, attr->cap.max_send_sge,
               attr->cap.max_recv_sge, attr->cap.max_inline_data};
  init.sq_sig_all = attr->sq_sig_all != 0;
  init.keep_alive = {attr->send_cq->cq, attr->recv_cq->cq};
  auto* qp = new ibv_qp;
  qp->context = pd->context;
  qp->qp_context = attr->qp_context;
  qp->pd = pd;
  qp->send_cq = attr->send_cq;
  qp->recv_cq = attr->recv_cq;
  qp->srq = attr->srq;
  qp->qp = std::make_shared<rnic::QueuePair>(*pd->context->dev, init);
  pd->context->dev->track(qp->qp);  // rnic stat lists it from now on
  qp->qp_num = qp->qp->qp_num();
  ++pd->users;
  ++attr->send_cq->qps;
  ++attr->recv_cq->qps;
  return qp;
}

int ibv_destroy_qp(ibv_qp* qp) {
  if (!qp) return EINVAL;
  auto st = qp->qp->state();
  if (st != rnic::QpState::Idle && st != rnic::QpState::Error) {
    qp->qp->modify_to_error();
    // As in libibverbs the QP is gone when this returns: wait (bounded) until the engine has
    // taken it to ERROR, which flushes it and drops the reference a connected QP holds to
    // itself. A device closed right after would otherwise never run that, and leak the QP.
    qp->context->dev->run_and_wait([] {}, std::chrono::seconds(2));
  }
  --qp->pd->users;
  --qp->send_cq->qps;
  --qp->recv_cq->qps;
  delete qp;
  return 0;
}

ibv_qp_state ibv_query_qp_state(ibv_qp* qp) {
  return static_cast<ibv_qp_state>(rnic::ibv_qp_state_value(qp->qp->state()));
}

int ibv_modify_qp_to_err(ibv_qp* qp) {
  qp->qp->modify_to_error();
  return 0;
}

rnic::SendWr to_send_wr(const ibv_send_wr& w) {
  rnic::SendWr r = rnic::send_wr_from_ibv(w);
  r.flags = w.send_flags;
  r.imm_data = w.imm_data;  // host order in the shim
  r.invalidate_rkey = STag{w.invalidate_rkey};
  return r;
}

rnic::RecvWr to_recv_wr(const ibv_recv_wr& w) {
  return rnic::recv_wr_from_ibv(w);
}

int ibv_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  // The whole chain goes into the send queue first, then one doorbell: one batch on the wire.
  int err = 0;
  bool posted = false;
  for (; wr; wr = wr->next) {
    std::string why;
    if (wr->num_sge < 0) {
      err = refuse(EINVAL, "ibv_post_send: num_sge is negative");
    } else if (int e = qp->qp->post_send(to_send_wr(*wr), &why, false); e) {
      err = refuse(e, "ibv_post_send: " + why);
    }
    if (err) {
      if (bad_wr) *bad_wr = wr;
      break;
    }
    posted = true;
  }
  if (posted) qp->qp->ring_doorbell();
  return err;
}

int ibv_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  for (; wr; wr = wr->next) {
    std::string why;
    if (int e = qp->qp->post_recv(to_recv_wr(*wr), &why); e) {
      if (bad_wr) *bad_wr = wr;
      return refuse(e, "ibv_post_recv: " + why);
    }
  }
  return 0;
}

int ibv_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  for (; wr; wr = wr->next) {
    std::string why;
    if (int e = srq->srq->post_recv(to_recv_wr(*wr), &why); e) {
      if (bad_wr) *bad_wr = wr;
      return refuse(e, "ibv_post_srq_recv: " + why);
    }
  }
  return 0;
}

}  // namespace iwarp::verbs
