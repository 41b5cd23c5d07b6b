#include "replay/replayer.hpp"

#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <chrono>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>

#include "common/log.hpp"
#include "replay/timeline_spool.hpp"
#include "rnic/device.hpp"
#include "rnic/transport.hpp"

namespace iwarp::replay {

std::string Permutation::describe() const {
  return fmt::format("{},split={}", wire.describe(), split);
}

std::string_view event_name(rnic::RxEvent::Kind k) {
  using K = rnic::RxEvent::Kind;
  switch (k) {
    case K::Placed:
      return "placed";
    case K::Deferred:
      return "deferred";
    case K::DeferredError:
      return "deferred-error";
    case K::HoleOpened:
      return "hole-opened";
    case K::HoleClosed:
      return "hole-closed";
    case K::Released:
      return "released";
    case K::Completion:
      return "completion";
    case K::Doorbell:
      return "doorbell";
    case K::TerminateSent:
      return "terminate-sent";
    case K::TerminateReceived:
      return "terminate-received";
    case K::Violation:
      return "violation";
    case K::Duplicate:
      return "duplicate";
  }
  return "?";
}

Counts& Counts::operator+=(const Counts& o) {
  placed_in_order += o.placed_in_order;
  placed_beyond_hole += o.placed_beyond_hole;
  deferred += o.deferred;
  deferred_errors += o.deferred_errors;
  holes_opened += o.holes_opened;
  holes_closed += o.holes_closed;
  releases += o.releases;
  released_sends += o.released_sends;
  released_read_responses += o.released_read_responses;
  released_read_requests += o.released_read_requests;
  released_writes += o.released_writes;
  completions += o.completions;
  doorbells += o.doorbells;
  terminates_sent += o.terminates_sent;
  terminates_received += o.terminates_received;
  violations += o.violations;
  duplicates += o.duplicates;
  return *this;
}

std::uint64_t ConnectionResult::unexpected() const {
  std::uint64_t n = 0;
  for (const auto& f : terminates_sent) n += !f.expected;
  for (const auto& f : violations) n += !f.expected;
  return n;
}

namespace {

using mpa::Direction;
using rnic::RxEvent;

constexpr std::uint32_t kAllAccess =
    rnic::kLocalWrite | rnic::kRemoteWrite | rnic::kRemoteRead | rnic::kRemoteAtomic;
constexpr std::uint64_t kReadWrId = 1ull << 32;
constexpr std::uint64_t kAtomicWrId = 2ull << 32;
// The zero-length receive the peer-to-peer RTR Send takes (RecvPlan::rtr); its CQE is left out.
constexpr std::uint64_t kRtrWrId = 3ull << 32;
constexpr auto kEngineTimeout = std::chrono::seconds(60);

std::uint64_t fnv1a(std::uint64_t h, ByteSpan b) {
  for (auto c : b) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}
std::uint64_t fnv1a_u64(std::uint64_t h, std::uint64_t v) {
  std::uint8_t b[8];
  store_be64(b, v);
  return fnv1a(h, b);
}
constexpr std::uint64_t kFnvBasis = 0xcbf29ce484222325ull;

// What both endpoints' engine threads write into.
struct Shared {
  std::mutex mu;
  std::vector<TimelineEntry> timeline;  // the first `keep` events
  std::size_t keep = SIZE_MAX;
  std::uint64_t events = 0;             // all of them
  Counts counts;                        // of all of them
  std::vector<TimelineEntry> findings;  // every Terminate sent or received and violation
  std::optional<std::string> closed[2];
  std::shared_ptr<TimelineSpool> spool;  // the events past `keep` (ReplayOptions::spool_timeline)
};

// The capture frame being injected, as the engine thread of one endpoint sees it.
struct Context {
  std::uint64_t frame = 0, time_us = 0;
};

class Recorder final : public rnic::RxObserver {
 public:
  Recorder(std::shared_ptr<Shared> shared, std::shared_ptr<Context> ctx, Side side)
      : shared_(std::move(shared)), ctx_(std::move(ctx)), side_(side) {}
  void on_event(const RxEvent& e) override;

 private:
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<Context> ctx_;
  Side side_;
};

// Re-cuts a segment into two overlapping pieces, now and then.
class Splitter {
 public:
  Splitter(double p, std::uint64_t seed) : p_(p), rng_(seed) {}
  void push(sim::WireSegment s, const sim::SegmentOut& out) {
    if (p_ <= 0 || s.payload.size() < 2 || std::uniform_real_distribution<>(0, 1)(rng_) >= p_) {
      out(std::move(s));
      return;
    }
    const std::size_t n = s.payload.size();
    const std::size_t cut = 1 + rng_() % (n - 1);
    const std::size_t overlap = std::min<std::size_t>(rng_() % 9, n - cut);
    const auto at = [&](std::size_t i) {
      return s.payload.begin() + static_cast<std::ptrdiff_t>(i);
    };
    sim::WireSegment a{s.seq, Bytes(at(0), at(cut + overlap))};
    sim::WireSegment b{s.seq + static_cast<std::uint32_t>(cut), Bytes(at(cut), s.payload.end())};
    ++count_;
    out(std::move(a));
    out(std::move(b));
  }
  std::uint64_t count() const { return count_; }

 private:
  double p_;
  std::mt19937_64 rng_;
  std::uint64_t count_ = 0;
};

struct Region {
  std::string kind;
  STag stag{0};
  std::uint64_t base_to = 0, length = 0;
  std::vector<std::uint64_t> store;  // 8-octet aligned, so atomics see aligned words
  std::uint8_t* data() { return reinterpret_cast<std::uint8_t*>(store.data()); }
};

struct Endpoint {
  Side side = Side::Initiator;
  std::unique_ptr<rnic::Device> dev;
  rnic::PdHandle pd = 0;
  std::unique_ptr<rnic::CompletionQueue> scq, rcq;
  std::vector<Region> regions;  // capture STags, then receive buffers and atomic results
  STag recv_lkey{0}, atomic_lkey{0};
  std::vector<std::uint64_t> recv_offset;  // per RecvPlan
  std::shared_ptr<Context> ctx = std::make_shared<Context>();
  std::shared_ptr<rnic::QueuePair> qp;
  // The capture's segments go in, and the segment path's outcome comes out, through this
  // narrow view of `qp` only.
  rnic::SegmentInput* input = nullptr;
  std::shared_ptr<std::uint64_t> transmitted = std::make_shared<std::uint64_t>(0);
  EndpointResult result;
  // Segments handed to the engine and not yet waited for (see inject).
  std::uint64_t queued_segments = 0, queued_octets = 0;
  // The segments not handed over yet (flush_batch): their frames, and their octets one after
  // another. A batch handed over is shared by the engine's handler until it has run; drain()
  // takes back the ones the engine has let go of (`spare`, their capacity kept), so that no
  // segment costs an allocation and nothing is freed on the engine thread.
  struct Batch {
    struct Item {
      std::uint64_t frame, time_us;
      TcpSeq seq;
      std::size_t at, length;  // in `octets`
    };
    std::vector<Item> items;
    Bytes octets;
  };
  std::shared_ptr<Batch> batch;  // null: none started
  std::vector<std::shared_ptr<Batch>> handed, spare;
  Endpoint* peer = nullptr;  // the connection's other endpoint
  // Declared last, so destroyed first: the engine thread stops before the queue pair, the CQs
  // and the regions it may still touch are freed (an `rnic stat` query, docs/stat.md, runs on
  // it and reads them), whichever way replay_connection() ends.
  struct StopEngine {
    rnic::Device* dev = nullptr;
    ~StopEngine() {
      if (dev) dev->stop(std::chrono::seconds(5));
    }
  } stop_engine;
};

void run_on_engine(rnic::Device& dev, const std::function<void()>& fn) {
  auto done = std::make_shared<std::promise<void>>();
  auto f = done->get_future();
  // (fn copied: after a timeout the handler may still run, when this frame has gone.)
  boost::asio::post(dev.io(), [fn, done] {
    fn();
    done->set_value();
  });
  if (f.wait_for(kEngineTimeout) != std::future_status::ready)
    throw std::runtime_error(fmt::format("{}: the engine thread did not answer", dev.name()));
}

// Hands the batched segments to the engine: one handler runs them in order, each as the frame
// it came in (the Recorder reads ctx).
void flush_batch(Endpoint& e) {
  if (!e.batch || e.batch->items.empty()) return;
  e.handed.push_back(e.batch);
  // (`qp` keeps the queue pair that `input` views alive while the handler waits.)
  boost::asio::post(e.dev->io(), [ctx = e.ctx, qp = e.qp, input = e.input, b = std::move(e.batch)] {
    for (const auto& s : b->items) {
      ctx->frame = s.frame;
      ctx->time_us = s.time_us;
      input->receive_segment_on_engine(s.seq, ByteSpan(b->octets).subspan(s.at, s.length));
    }
  });
  e.batch.reset();
}

// Waits until the engine has run everything handed to it, batched segments first. The handlers
// have then run and gone, and their buffers are taken back (a buffer still shared, after an
// engine that did not answer, is left to it).
void drain(Endpoint& e) {
  flush_batch(e);
  run_on_engine(*e.dev, [] {});
  for (auto& b : e.handed)
    if (b.use_count() == 1) e.spare.push_back(std::move(b));
  e.handed.clear();
}

void poll_all(Endpoint& e) {
  rnic::Wc wc[64];
  for (int n; (n = e.scq->poll(wc)) > 0;)
    e.result.send_cqes.insert(e.result.send_cqes.end(), wc, wc + n);
  for (int n; (n = e.rcq->poll(wc)) > 0;)
    for (int i = 0; i < n; ++i)
      if (wc[i].wr_id != kRtrWrId || wc[i].status != rnic::WcStatus::Success)
        e.result.recv_cqes.push_back(wc[i]);
}

Region make_region(std::string kind, STag stag, std::uint64_t base_to, std::uint64_t length) {
  Region r;
  r.kind = std::move(kind);
  r.stag = stag;
  r.base_to = base_to;
  r.length = length;
  r.store.assign((length + 7) / 8 + 1, 0);
  return r;
}

void build_endpoint(Endpoint& e, const ConnectionPlan& plan, Side side, std::uint64_t seed) {
  const auto& ep = plan.ep[index(side)];
  e.side = side;
  e.dev = std::make_unique<rnic::Device>(fmt::format("replay-c{}-{}", plan.flow, to_string(side)),
                                         seed);
  e.stop_engine.dev = e.dev.get();
  auto& mem = e.dev->memory();
  e.pd = mem.alloc_pd();
  // Shadow memory at the capture's STags first (so no local registration takes their index).
  for (const auto& rp : ep.regions) {
    const std::uint64_t base = rp.begin_to & ~std::uint64_t{7};
    Region r = make_region("stag", rp.stag, base, rp.end_to - base);
    if (!mem.register_region_at(rp.stag, e.pd, r.data(), r.length, r.base_to, kAllAccess)) {
      e.result.problems.push_back(fmt::format(
          "STag 0x{:08x} ({}) cannot be shadowed at {}: {}", rp.stag.value(), rp.why,
          to_string(side),
          rp.stag.index() == 0 ? "its index is 0" : "another STag with its index is shadowed"));
      continue;
    }
    e.regions.push_back(std::move(r));
  }
  std::uint64_t total = 0;
  for (const auto& r : ep.recvs) {
    e.recv_offset.push_back(total);
    total += r.size;
  }
  if (total > 0) {
    Region r = make_region("receive buffers", STag{0}, 0, total);
    r.stag = mem.register_region(e.pd, r.data(), r.length, 0, rnic::kLocalWrite);
    e.recv_lkey = r.stag;
    e.regions.push_back(std::move(r));
  }
  if (!ep.atomics.empty()) {
    Region r = make_region("atomic results", STag{0}, 0, 8 * ep.atomics.size());
    r.stag = mem.register_region(e.pd, r.data(), r.length, 0, rnic::kLocalWrite);
    e.atomic_lkey = r.stag;
    e.regions.push_back(std::move(r));
  }
  for (const auto& r : e.regions) e.result.shadow_bytes += r.length;

  const std::size_t sends = ep.reads.size() + ep.atomics.size() + 16;
  const std::size_t recvs = ep.recvs.size() + 1;
  e.scq = std::make_unique<rnic::CompletionQueue>(sends + 64, nullptr, nullptr);
  e.rcq = std::make_unique<rnic::CompletionQueue>(recvs + 64, nullptr, nullptr);
  rnic::QpInit init;
  init.pd = e.pd;
  init.send_cq = e.scq.get();
  init.recv_cq = e.rcq.get();
  init.caps.max_send_wr = static_cast<std::uint32_t>(sends);
  init.caps.max_recv_wr = static_cast<std::uint32_t>(recvs);
  init.caps.max_send_sge = 1;
  init.caps.max_recv_sge = 1;
  e.qp = std::make_shared<rnic::QueuePair>(*e.dev, init);
  e.input = e.qp.get();
  for (std::size_t i = 0; i < ep.recvs.size(); ++i) {
    rnic::RecvWr wr;
    wr.wr_id = ep.recvs[i].rtr ? kRtrWrId : ep.recvs[i].msn;
    if (ep.recvs[i].size > 0)
      wr.sg_list.push_back(rnic::Sge{e.recv_offset[i], ep.recvs[i].size, e.recv_lkey});
    std::string why;
    if (e.qp->post_recv(wr, &why) != 0)
      e.result.problems.push_back(
          fmt::format("receive buffer for MSN {} not posted: {}", ep.recvs[i].msn, why));
  }
}

void start_endpoint(Endpoint& e, const ConnectionPlan& plan,
                    const std::shared_ptr<Shared>& shared) {
  rnic::StreamSetup st;
  st.params = plan.params;
  // The emulation answers every Read Request at once and must never hold a Read back: the
  // capture already shows what the real endpoints allowed.
  const std::uint16_t most = e.dev->limits().max_ird;
  st.params.initiator_ird = st.params.responder_ird = most;
  st.params.initiator_ord = st.params.responder_ord = e.dev->limits().max_ord;
  st.initiator = e.side == Side::Initiator;
  st.ignore_ord = true;
  // A peer-to-peer RTR that is a Send (RFC 6581 §4: a zero-length Send, MSN 1) goes to the
  // responder as an ordinary zero-length Send, into the zero-length receive the plan posts for
  // it (RecvPlan::rtr; its CQE is left out): the plan counts it as MSN 1's receive, so the
  // engine must not take it as the RTR it consumes without a receive (rnic/qp_rx.cpp).
  if (!st.initiator && st.params.peer_to_peer && st.params.rtr == mpa::RtrType::Send)
    st.params.rtr = mpa::RtrType::None;
  const Direction rx_dir =
      e.side == Side::Initiator ? Direction::FromResponder : Direction::FromInitiator;
  rnic::RxOptions rx;
  rx.stream_start = plan.full_operation_seq[index(rx_dir)];
  rx.observer = std::make_shared<Recorder>(shared, e.ctx, e.side);
  auto qp = e.qp;
  auto& io = e.dev->io();
  auto transmitted = e.transmitted;
  const Side side = e.side;
  const bool rtr = st.initiator && plan.params.peer_to_peer;
  const auto rtr_type = plan.params.rtr;
  // (By value: after a timeout the handler may still run, when this frame has gone.)
  run_on_engine(*e.dev, [&io, qp, transmitted, shared, side, st, rx, rtr, rtr_type] {
    auto transport = std::make_unique<rnic::NullTransport>(
        io, [transmitted](ByteSpan b) { *transmitted += b.size(); });
    auto on_closed = [shared, side](const rnic::QpClosed& c) {
      std::lock_guard l(shared->mu);
      shared->closed[index(side)] = c.detail;
    };
    // As the connection manager does: the initiator's RTR goes first in peer-to-peer mode.
    if (rtr) qp->send_rtr(rtr_type);
    qp->start(std::move(transport), st, {}, nullptr, on_closed, rx);
  });
}

void post_read(Endpoint& e, const ReadPlan& r, std::size_t i) {
  rnic::SendWr wr;
  wr.wr_id = kReadWrId | i;
  wr.opcode = rnic::WrOpcode::RdmaRead;
  wr.flags = rnic::kSendSignaled;
  if (r.request.size > 0)
    wr.sg_list.push_back(rnic::Sge{r.request.sink_to.value(), r.request.size, r.request.sink_stag});
  wr.remote_addr = r.request.src_to.value();
  wr.rkey = r.request.src_stag;
  std::string why;
  if (e.qp->post_send(wr, &why) != 0)
    e.result.problems.push_back(
        fmt::format("RDMA Read MSN {} (frame {}) not posted: {}", r.msn, r.frame, why));
}

void post_atomic(Endpoint& e, const AtomicPlan& a, std::size_t i) {
  rnic::SendWr wr;
  wr.wr_id = kAtomicWrId | i;
  wr.flags = rnic::kSendSignaled;
  const auto& q = a.request;
  if (q.op == static_cast<std::uint8_t>(rdmap::AtomicOp::FetchAdd)) {
    wr.opcode = rnic::WrOpcode::AtomicFetchAndAdd;
    wr.compare_add = q.add_swap_data;
  } else {
    // Our RNIC has no bare Swap work request; the peer executes the captured request anyway,
    // so a compare-and-swap stands in for it (only this endpoint's CQE opcode shows it).
    wr.opcode = rnic::WrOpcode::AtomicCmpAndSwp;
    wr.compare_add = q.compare_data;
    wr.swap = q.add_swap_data;
  }
  wr.sg_list.push_back(rnic::Sge{8 * i, 8, e.atomic_lkey});
  wr.remote_addr = q.to.value();
  wr.rkey = q.stag;
  std::string why;
  if (e.qp->post_send(wr, &why) != 0)
    e.result.problems.push_back(fmt::format("atomic (frame {}) not posted: {}", a.frame, why));
}

// Segments queued on an endpoint's engine are not waited for one by one (a round trip to the
// engine thread per segment was most of the replay's time): the engine runs them in order, and
// the replay waits for them (drain_pending) before anything that must come after them: a step
// for the other endpoint (the shared timeline keeps capture order), a post, the end. At most
// kMaxQueuedSegments segments or kMaxQueuedOctets octets wait at once, which bounds the memory
// the queue holds.
constexpr std::uint64_t kMaxQueuedSegments = 256;
constexpr std::uint64_t kMaxQueuedOctets = 4u << 20;
// Segments go to the engine in batches (one handler each, flush_batch), handed over once one
// holds kBatchSegments segments or kBatchOctets octets (or more: the segment that crossed it),
// small enough that the engine works on one while the replay reads the next.
constexpr std::size_t kBatchSegments = 16;
constexpr std::size_t kBatchOctets = 256u << 10;

void drain_pending(Endpoint& e) {
  if (e.queued_segments == 0) return;
  drain(e);
  e.queued_segments = 0;
  e.queued_octets = 0;
}

void inject(Endpoint& e, std::uint64_t frame, std::uint64_t time_us, TcpSeq seq, ByteSpan payload) {
  if (e.peer) drain_pending(*e.peer);
  if (!e.batch) {
    if (!e.spare.empty()) {
      e.batch = std::move(e.spare.back());
      e.spare.pop_back();
      e.batch->items.clear();
      e.batch->octets.clear();
    } else {
      e.batch = std::make_shared<Endpoint::Batch>();
      e.batch->items.reserve(kBatchSegments);
      e.batch->octets.reserve(kBatchOctets);
    }
  }
  auto& b = *e.batch;
  b.items.push_back({frame, time_us, seq, b.octets.size(), payload.size()});
  b.octets.insert(b.octets.end(), payload.begin(), payload.end());
  ++e.queued_segments;
  e.queued_octets += payload.size();
  if (b.items.size() >= kBatchSegments || b.octets.size() >= kBatchOctets) flush_batch(e);
  if (e.queued_segments >= kMaxQueuedSegments || e.queued_octets >= kMaxQueuedOctets)
    drain_pending(e);
}

void inject_fin(Endpoint& e, std::uint64_t frame, std::uint64_t time_us, TcpSeq seq) {
  if (e.peer) drain_pending(*e.peer);
  flush_batch(e);
  auto ctx = e.ctx;
  boost::asio::post(e.dev->io(), [ctx, frame, time_us] {
    ctx->frame = frame;
    ctx->time_us = time_us;
  });
  e.input->receive_fin(seq);
  ++e.queued_segments;
  drain_pending(e);
}

void count_event(Counts& c, const RxEvent& e);

void Recorder::on_event(const RxEvent& e) {
  std::lock_guard l(shared_->mu);
  ++shared_->events;
  count_event(shared_->counts, e);
  const TimelineEntry t{ctx_->frame, ctx_->time_us, side_, e};
  if (e.kind == RxEvent::Kind::TerminateSent || e.kind == RxEvent::Kind::Violation ||
      e.kind == RxEvent::Kind::TerminateReceived)
    shared_->findings.push_back(t);
  if (shared_->timeline.size() < shared_->keep)
    shared_->timeline.push_back(t);
  else if (shared_->spool)
    shared_->spool->append(t);
}

// Runs the engines until nothing more happens (doorbells, transmissions, completions).
void settle(Endpoint (&eps)[2], const std::shared_ptr<Shared>& shared) {
  std::uint64_t last = ~std::uint64_t{0};
  int quiet = 0;
  for (int round = 0; round < 200 && quiet < 3; ++round) {
    for (auto& e : eps) {
      drain(e);
      poll_all(e);
    }
    std::uint64_t sig;
    {
      std::lock_guard l(shared->mu);
      sig = shared->events;
    }
    for (auto& e : eps) {
      const auto s = e.qp->stats();
      sig = sig * 31 + s.bytes_sent + s.fpdus_sent + e.result.send_cqes.size() +
            e.result.recv_cqes.size();
    }
    quiet = sig == last ? quiet + 1 : 0;
    last = sig;
  }
}

void count_event(Counts& c, const RxEvent& e) {
  switch (e.kind) {
    case RxEvent::Kind::Placed:
      ++(e.beyond_hole ? c.placed_beyond_hole : c.placed_in_order);
      break;
    case RxEvent::Kind::Deferred:
      ++c.deferred;
      break;
    case RxEvent::Kind::DeferredError:
      ++c.deferred_errors;
      break;
    case RxEvent::Kind::HoleOpened:
      ++c.holes_opened;
      break;
    case RxEvent::Kind::HoleClosed:
      ++c.holes_closed;
      break;
    case RxEvent::Kind::Released:
      ++c.releases;
      c.released_sends += e.sends;
      c.released_read_responses += e.read_responses;
      c.released_read_requests += e.read_requests;
      c.released_writes += e.writes;
      break;
    case RxEvent::Kind::Completion:
      ++c.completions;
      break;
    case RxEvent::Kind::Doorbell:
      ++c.doorbells;
      break;
    case RxEvent::Kind::TerminateSent:
      ++c.terminates_sent;
      break;
    case RxEvent::Kind::TerminateReceived:
      ++c.terminates_received;
      break;
    case RxEvent::Kind::Violation:
      ++c.violations;
      break;
    case RxEvent::Kind::Duplicate:
      ++c.duplicates;
      break;
  }
}

// Whether the trace holds what endpoint `side` found: a Terminate of its own with the same
// cause, or a violation `rnic decode` finds in the direction it receives.
void classify(Finding& f, const ConnectionPlan& plan) {
  for (const auto& t : plan.terminates) {
    if (t.from != f.side) continue;
    const std::string cause = fmt::format("[{}]", describe_term(t.layer, t.etype, t.ecode));
    if (f.text.find(cause) != std::string::npos) {
      f.expected = true;
      f.why = fmt::format("the trace holds the same Terminate from {} (frame {})",
                          to_string(f.side), t.frame);
      return;
    }
  }
  const Direction rx =
      f.side == Side::Initiator ? Direction::FromResponder : Direction::FromInitiator;
  for (const auto& v : plan.trace_violations) {
    if (v.dir != rx) continue;
    f.expected = true;
    f.why =
        fmt::format("the trace itself breaks the protocol there (frame {}: {})", v.frame, v.text);
    return;
  }
  f.why = "not in the trace";
}

// The findings (Terminates and violations, from the timeline) and what the capture cut short.
void finish(ConnectionResult& res, const ConnectionPlan& plan,
            const std::vector<TimelineEntry>& findings) {
  for (const auto& t : findings) {
    const auto& e = t.event;
    if (e.kind == RxEvent::Kind::TerminateSent || e.kind == RxEvent::Kind::Violation) {
      Finding f{t.side, t.frame, e.text, false, {}};
      classify(f, plan);
      (e.kind == RxEvent::Kind::TerminateSent ? res.terminates_sent : res.violations)
          .push_back(std::move(f));
    } else if (e.kind == RxEvent::Kind::TerminateReceived) {
      Finding f{t.side, t.frame, e.text, true, "sent by the peer in the trace"};
      const Side from = t.side == Side::Initiator ? Side::Responder : Side::Initiator;
      for (const auto& pt : plan.terminates)
        if (pt.from == from) {
          f.why = fmt::format("{}'s {} (frame {})", to_string(from), pt.text, pt.frame);
          break;
        }
      res.terminates_received.push_back(std::move(f));
    }
  }
  for (const auto& pt : plan.terminates) {
    bool sent = false;
    for (const auto& f : res.terminates_sent) sent |= f.side == pt.from && f.expected;
    if (!sent)
      res.not_reproduced.push_back(
          fmt::format("{}'s {} (frame {}) is not one the emulation of {} sends", to_string(pt.from),
                      pt.text, pt.frame, to_string(pt.from)));
  }
  res.cut_short = plan.cut_short;
  for (int s = 0; s < 2; ++s)
    for (const auto& h : res.ep[s].holes_open)
      res.cut_short.push_back(fmt::format(
          "a hole never closed at {}: stream octets [{}, {}) never arrived ({} FPDU(s) placed "
          "beyond it; still held for it: {} Send completion(s), {} Read completion(s), {} Read "
          "Request(s))",
          to_string(static_cast<Side>(s)), h.hole.begin, h.hole.end, h.placed_fpdus, h.sends,
          h.read_responses, h.read_requests));
}

// What endpoint e ends with: its queue pair's state and counters, and an image of every
// region (a hash of each, and of all of them together).
void record_endpoint(Endpoint& e, bool keep_memory) {
  auto& r = e.result;
  r.holes_open = e.input->hole_report();
  r.segments = e.input->segment_stats();
  r.qp = e.qp->stats();
  r.state = std::string(rnic::to_string(e.qp->state()));
  r.transmitted = *e.transmitted;
  std::uint64_t h = kFnvBasis;
  for (auto& reg : e.regions) {
    RegionImage img;
    img.kind = reg.kind;
    img.stag = reg.stag;
    img.base_to = reg.base_to;
    const ByteSpan bytes(reg.data(), reg.length);
    img.hash = fnv1a(kFnvBasis, bytes);
    for (auto b : bytes) img.nonzero += b != 0;
    if (keep_memory) img.bytes.assign(bytes.begin(), bytes.end());
    h = fnv1a_u64(h, reg.stag.value());
    h = fnv1a_u64(h, reg.base_to);
    h = fnv1a(h, bytes);
    r.memory.push_back(std::move(img));
  }
  r.memory_hash = h;
}

// The RTR's receive completion is left out of the CQEs; the timeline says what it was.
void name_rtr(TimelineEntry& t) {
  static const std::string rtr_wr = fmt::format("receive WR {}", kRtrWrId);
  if (t.event.kind == RxEvent::Kind::Completion && t.event.text.ends_with(rtr_wr))
    t.event.text =
        "the peer-to-peer RTR (a zero-length Send, MSN 1) taken by the zero-length receive "
        "posted for it; its completion is left out";
}

// The timeline both engines wrote, and how each endpoint's connection closed.
void take_timeline(ConnectionResult& res, Endpoint (&eps)[2], Shared& shared,
                   std::vector<TimelineEntry>& findings) {
  {
    std::lock_guard l(shared.mu);
    res.timeline = std::move(shared.timeline);
    res.timeline_events = shared.events;
    res.counts = shared.counts;
    findings = std::move(shared.findings);
    for (int s = 0; s < 2; ++s) eps[s].result.closed = shared.closed[s];
    // (The events of the tear-down that follows are not the replay's: the spool takes no more.)
    if (shared.spool) {
      const auto run = shared.spool->end_run();
      res.spool_offset = run.offset;
      res.spool_count = run.count;
      res.spool_octets = run.octets;
      res.timeline_spool = std::move(shared.spool);
    }
  }
  for (auto& t : res.timeline) name_rtr(t);
}

// Tear down: every queue pair to ERROR (it drops its self-reference), then the devices; the
// endpoints' results go to `res`.
void tear_down(ConnectionResult& res, Endpoint (&eps)[2]) {
  for (auto& e : eps) e.qp->modify_to_error();
  for (int i = 0; i < 3; ++i)
    for (auto& e : eps) drain(e);
  for (int s = 0; s < 2; ++s) {
    eps[s].input = nullptr;
    eps[s].qp.reset();
    res.ep[s] = std::move(eps[s].result);
  }
}

}  // namespace

namespace {

ConnectionResult replay_one(const ConnectionPlan& plan, const ReplayOptions& opts,
                            std::shared_ptr<TimelineSpool> spool) {
  // (A disorder keeps a segment behind one that wrote the same tagged octets: it needs each
  // segment's tagged ranges, which only kept steps have.)
  if (opts.permutation && plan.read_again)
    throw std::invalid_argument(
        "a replay in a seeded disorder needs a plan that keeps its steps (StepSource::Kept)");
  ConnectionResult res;
  res.flow = plan.flow;
  auto shared = std::make_shared<Shared>();
  shared->keep = opts.timeline_keep;
  if (spool) {
    spool->begin_run();
    shared->spool = std::move(spool);
  }
  Endpoint eps[2];
  const std::uint64_t seed = 0x5eed0000ull + plan.flow;
  build_endpoint(eps[0], plan, Side::Initiator, seed * 2 + 1);
  build_endpoint(eps[1], plan, Side::Responder, seed * 2 + 2);
  eps[0].peer = &eps[1];
  eps[1].peer = &eps[0];
  start_endpoint(eps[0], plan, shared);
  start_endpoint(eps[1], plan, shared);

  // Segments of each direction, optionally disordered on the way.
  std::optional<sim::SegmentDisorder> disorder[2];
  std::optional<Splitter> splitter[2];
  std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> origin[2];  // seq -> frame
  std::uint64_t now_time = 0;
  if (opts.permutation) {
    for (int d = 0; d < 2; ++d) {
      auto w = opts.permutation->wire;
      w.seed = w.seed * 2 + static_cast<std::uint64_t>(d);
      disorder[d].emplace(w);
      splitter[d].emplace(opts.permutation->split, w.seed ^ 0x9e3779b97f4a7c15ull);
    }
  }
  auto deliver = [&](int d) {
    return [&, d](sim::WireSegment s) {
      auto& e = eps[index(receiver_of(static_cast<Direction>(d)))];
      // The frame this octet range came from (the last segment pushed that starts at or
      // before it, by offset from the stream start).
      std::uint64_t frame = 0, time = now_time;
      const auto off = static_cast<std::uint32_t>(s.seq - plan.stream_seq[d]);
      auto it = origin[d].upper_bound(off);
      if (it != origin[d].begin()) {
        --it;
        frame = it->second.first;
        time = it->second.second;
      }
      ++res.segments_injected;
      inject(e, frame, time, s.seq, s.payload);
    };
  };
  const sim::SegmentOut out[2] = {deliver(0), deliver(1)};

  // Causality: whatever an endpoint sends after receiving something may depend on it, so the
  // segments held back in the direction it receives are delivered before it sends again. The
  // disorder stays within what one side sends while the other is silent (a real network
  // cannot delay a segment past the answer it caused).
  // Two messages in flight that write the same tagged octets end with whichever arrives last
  // (RFC 5041 places tagged data as it arrives); a disorder that swapped them would change the
  // outcome, not test the RNIC. So a segment never overtakes an earlier one of its burst that
  // wrote any of the same octets: what is held is delivered first.
  std::vector<TaggedRange> burst[2];
  auto settle_direction = [&](Direction d) {
    const int i = index(d);
    if (disorder[i]) disorder[i]->flush(out[i]);
    burst[i].clear();
  };
  auto overlaps_burst = [&](int d, const std::vector<TaggedRange>& ranges) {
    for (const auto& r : ranges)
      for (const auto& b : burst[d])
        if (r.stag == b.stag && r.begin_to < b.end_to && b.begin_to < r.end_to) return true;
    return false;
  };
  // One step, with its payload (a segment's octets, copied as they are handed over: inject).
  auto run_step = [&](const Step& st, ByteSpan payload) {
    ++res.steps;
    now_time = st.time_us;
    if (st.kind == Step::Kind::Segment || st.kind == Step::Kind::Fin)
      settle_direction(st.dir == Direction::FromInitiator ? Direction::FromResponder
                                                          : Direction::FromInitiator);
    else
      settle_direction(st.side == Side::Initiator ? Direction::FromResponder
                                                  : Direction::FromInitiator);
    switch (st.kind) {
      case Step::Kind::Segment: {
        const int d = index(st.dir);
        if (!disorder[d]) {
          ++res.segments_injected;
          inject(eps[index(receiver_of(st.dir))], st.frame, st.time_us, st.seq, payload);
          break;
        }
        if (overlaps_burst(d, st.tagged)) settle_direction(st.dir);
        burst[d].insert(burst[d].end(), st.tagged.begin(), st.tagged.end());
        origin[d][static_cast<std::uint32_t>(st.seq - plan.stream_seq[d])] = {st.frame, st.time_us};
        splitter[d]->push(sim::WireSegment{st.seq, Bytes(payload.begin(), payload.end())},
                          [&](sim::WireSegment s) { disorder[d]->push(std::move(s), out[d]); });
        break;
      }
      case Step::Kind::Fin:
        inject_fin(eps[index(receiver_of(st.dir))], st.frame, st.time_us, st.seq);
        break;
      case Step::Kind::PostRead: {
        auto& e = eps[index(st.side)];
        for (auto& x : eps) drain_pending(x);
        post_read(e, plan.ep[index(st.side)].reads[st.item], st.item);
        drain(e);
        break;
      }
      case Step::Kind::PostAtomic: {
        auto& e = eps[index(st.side)];
        for (auto& x : eps) drain_pending(x);
        post_atomic(e, plan.ep[index(st.side)].atomics[st.item], st.item);
        drain(e);
        break;
      }
    }
    if (opts.progress) opts.progress(res.steps, plan.step_count);
  };
  // A file that changed since it was read ends the loop; the endpoints are torn down before
  // the error goes up.
  std::exception_ptr failed;
  if (plan.read_again) {
    // The steps are made as the file is read again (payloads in libpcap's frame).
    try {
      read_steps_again(plan, [&](Step&& st, ByteSpan payload) { run_step(st, payload); });
    } catch (const trace::CaptureChanged&) {
      failed = std::current_exception();
    }
  } else {
    // Payloads in the capture file are read as their steps come.
    std::optional<trace::PayloadReader> reader;
    if (plan.file) reader.emplace(plan.file);
    for (const auto& st : plan.steps) {
      Bytes payload;
      if (st.kind == Step::Kind::Segment) {
        try {
          payload = plan.payload_of(st, reader ? &*reader : nullptr);
        } catch (const trace::CaptureChanged&) {
          failed = std::current_exception();
          break;
        }
      }
      run_step(st, payload);
    }
  }
  for (int d = 0; d < 2; ++d)
    if (disorder[d]) {
      disorder[d]->flush(out[d]);
      res.disorder[d] = disorder[d]->stats();
      res.split += splitter[d]->count();
    }
  settle(eps, shared);

  for (auto& e : eps) record_endpoint(e, opts.keep_memory);
  std::vector<TimelineEntry> findings;
  take_timeline(res, eps, *shared, findings);
  tear_down(res, eps);
  if (failed) std::rethrow_exception(failed);
  if (res.timeline_spool && res.timeline_spool->error())
    throw std::runtime_error(*res.timeline_spool->error());
  finish(res, plan, findings);
  return res;
}

}  // namespace

ConnectionResult replay_connection(const ConnectionPlan& plan, const ReplayOptions& opts) {
  return replay_one(plan, opts, opts.spool_timeline ? std::make_shared<TimelineSpool>() : nullptr);
}

void for_each_timeline_event(const ConnectionResult& r,
                             const std::function<void(const TimelineEntry&)>& fn) {
  for (const auto& t : r.timeline) fn(t);
  if (r.timeline_spool)
    r.timeline_spool->for_each({r.spool_offset, r.spool_count, r.spool_octets},
                               [&](TimelineEntry&& t) {
                                 name_rtr(t);
                                 fn(t);
                               });
}

std::uint64_t kept_timeline_events(const ConnectionResult& r) {
  return r.timeline.size() + r.spool_count;
}

ReplayResult replay(const Plan& plan, const ReplayOptions& opts) {
  ReplayResult r;
  const std::uint64_t total = plan.total_steps();
  std::uint64_t base = 0;
  // (One spool for all the connections: one file at most, whatever their number.)
  const auto spool = opts.spool_timeline ? std::make_shared<TimelineSpool>() : nullptr;
  for (const auto& c : plan.connections) {
    ReplayOptions o = opts;
    if (opts.progress)
      o.progress = [&, base](std::uint64_t done, std::uint64_t) {
        opts.progress(base + done, total);
      };
    r.connections.push_back(replay_one(c, o, spool));
    base += c.step_count;
    r.totals += r.connections.back().counts;
    r.unexpected += r.connections.back().unexpected();
  }
  return r;
}

std::vector<std::string> compare(const ConnectionResult& a, const ConnectionResult& b) {
  std::vector<std::string> diff;
  auto wc_text = [](const rnic::Wc& w) {
    return fmt::format(
        "wr_id 0x{:x} {} {} len {} imm 0x{:x} flags 0x{:x} vendor_err 0x{:x} inv 0x{:08x}", w.wr_id,
        rnic::to_string(w.opcode), rnic::to_string(w.status), w.byte_len, w.imm_data, w.wc_flags,
        w.vendor_err, w.invalidated_rkey.value());
  };
  auto cmp_cq = [&](const std::vector<rnic::Wc>& x, const std::vector<rnic::Wc>& y,
                    std::string_view what) {
    if (x.size() != y.size())
      diff.push_back(fmt::format("{}: {} CQEs against {}", what, x.size(), y.size()));
    for (std::size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      const auto tx = wc_text(x[i]), ty = wc_text(y[i]);
      if (tx != ty) {
        diff.push_back(fmt::format("{} CQE #{}: {} against {}", what, i + 1, tx, ty));
        break;
      }
    }
  };
  for (int s = 0; s < 2; ++s) {
    const auto side = to_string(static_cast<Side>(s));
    cmp_cq(a.ep[s].send_cqes, b.ep[s].send_cqes, fmt::format("{} send CQ", side));
    cmp_cq(a.ep[s].recv_cqes, b.ep[s].recv_cqes, fmt::format("{} receive CQ", side));
    if (a.ep[s].memory_hash == b.ep[s].memory_hash) continue;
    const auto& ma = a.ep[s].memory;
    const auto& mb = b.ep[s].memory;
    bool named = false;
    for (std::size_t i = 0; i < std::min(ma.size(), mb.size()); ++i) {
      if (ma[i].hash == mb[i].hash) continue;
      std::string where;
      if (ma[i].bytes.size() == mb[i].bytes.size())
        for (std::size_t k = 0; k < ma[i].bytes.size(); ++k)
          if (ma[i].bytes[k] != mb[i].bytes[k]) {
            where = fmt::format(" first at TO 0x{:x}", ma[i].base_to + k);
            break;
          }
      diff.push_back(fmt::format("{} memory differs: {} STag 0x{:08x}{}", side, ma[i].kind,
                                 ma[i].stag.value(), where));
      named = true;
    }
    if (!named) diff.push_back(fmt::format("{} memory differs", side));
  }
  return diff;
}

}  // namespace iwarp::replay
