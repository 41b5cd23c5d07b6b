#include "bench/enlarge_bench_write.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "bench/enlarge_bench_support.hpp"
#include "verbs_shim/endpoint.hpp"

namespace iwarp::bench {

using namespace iwarp::verbs;

namespace {
constexpr int kOutstanding = 16;  // Writes in flight during the stream
constexpr int kNotes = 8;         // receives posted for the Sends that announce Writes
}  // namespace

struct WritePair::State {
  // The buffers outlive the endpoints, which unregister them.
  std::vector<std::uint8_t> csrc, cdst, sdst;
  std::uint8_t cnote[kNotes] = {}, snote[kNotes] = {}, note = 'n';
  std::unique_ptr<Endpoint> server, client;
  ibv_mr *csrc_mr = nullptr, *cdst_mr = nullptr, *sdst_mr = nullptr;
  ibv_mr *cnote_mr = nullptr, *snote_mr = nullptr, *note_mr_c = nullptr, *note_mr_s = nullptr;
  std::uint32_t unreaped_c = 0, unreaped_s = 0;  // signaled WRs whose completions wait
  bool busy_poll = false;
  std::chrono::milliseconds timeout{10000};

  // The next completion of `cq`: sleeping on the channel, or polling it (busy_poll: the polls
  // of an unarmed CQ run the device's receive path on this thread).
  std::expected<ibv_wc, std::string> next(Endpoint& e, ibv_cq* cq) {
    if (!busy_poll) return e.wait(cq);
    const auto deadline = Clock::now() + timeout;
    ibv_wc wc{};
    while (ibv_poll_cq(cq, 1, &wc) == 0) {
      if (stop.load())
        return std::unexpected(server_error.empty() ? std::string("stopped") : server_error);
      if (Clock::now() > deadline)
        return std::unexpected(fmt::format("no completion within {} ms", timeout.count()));
    }
    return wc;
  }

  // Reaps the send completions of one side, requiring success.
  std::expected<void, std::string> reap(Endpoint& e, std::uint32_t& unreaped, std::uint32_t keep) {
    ibv_wc wc[32];
    while (unreaped > keep) {
      int k = ibv_poll_cq(e.send_cq(), 32, wc);
      if (k == 0) {
        auto w = next(e, e.send_cq());
        if (!w) return std::unexpected(w.error());
        wc[0] = *w;
        k = 1;
      }
      for (int i = 0; i < k; ++i)
        if (wc[i].status != IBV_WC_SUCCESS)
          return std::unexpected(std::string("RDMA Write: completion ") +
                                 ibv_wc_status_str(wc[i].status));
      unreaped -= static_cast<std::uint32_t>(k);
    }
    return {};
  }
  // Waits for one announcing Send at `e` and reposts its receive.
  std::expected<void, std::string> await_note(Endpoint& e, std::uint8_t* notes, ibv_mr* mr) {
    auto w = next(e, e.recv_cq());
    if (!w) return std::unexpected(w.error());
    if (w->status != IBV_WC_SUCCESS)
      return std::unexpected(std::string("receive: ") + ibv_wc_status_str(w->status));
    const auto i = static_cast<std::size_t>(w->wr_id);
    if (post_one_recv(e.qp(), notes + i, 1, mr->lkey, i) != 0)
      return std::unexpected("ibv_post_recv: " + ibv_last_error());
    return {};
  }
  std::expected<void, std::string> write(Endpoint& e, const std::uint8_t* src, ibv_mr* smr,
                                         std::uint64_t size, const std::uint8_t* dst, ibv_mr* dmr,
                                         std::uint32_t& unreaped) {
    if (post_one(e.qp(), {.op = IBV_WR_RDMA_WRITE,
                          .addr = src,
                          .len = static_cast<std::uint32_t>(size),
                          .lkey = smr->lkey,
                          .remote_addr = reinterpret_cast<std::uint64_t>(dst),
                          .rkey = dmr->rkey}) != 0)
      return std::unexpected("ibv_post_send (RDMA Write): " + ibv_last_error());
    ++unreaped;
    return {};
  }
  std::expected<void, std::string> announce(Endpoint& e, ibv_mr* mr, std::uint32_t& unreaped) {
    if (post_one(e.qp(), {.addr = &note, .len = 1, .lkey = mr->lkey}) != 0)
      return std::unexpected("ibv_post_send (Send): " + ibv_last_error());
    ++unreaped;
    return {};
  }
  // Busy polling: the server side runs on a thread of its own, as the enlarge schemes' servers
  // do (one thread polling both devices in turn would leave each engine parked for the other's
  // polls). It answers each note with a Write of echo_size and a note (0: it only counts).
  std::thread server_thread;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> echo_size{0}, notes_seen{0};
  std::atomic<bool> active{false};  // a Write cell runs: the server thread spins
  std::string server_error;         // read after notes_seen or after the join

  void serve() {
    // Spins while a Write cell runs (`active`, set by run()). Between them (the other schemes'
    // cells) it arms the CQ, which hands the engine back to its thread, and looks once a
    // millisecond, so that it takes no CPU from them and leaves no engine parked for it.
    bool armed = false;
    while (!stop.load()) {
      ibv_wc wc{};
      if (ibv_poll_cq(server->recv_cq(), 1, &wc) == 0) {
        if (!active.load()) {
          if (!armed) ibv_req_notify_cq(server->recv_cq(), 0);
          armed = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        } else {
          armed = false;  // (an armed CQ's event ends the arm; the engine thread runs till then)
        }
        continue;
      }
      armed = false;  // a completion came: the arm, if any, ended with its event
      std::expected<void, std::string> r;
      if (wc.status != IBV_WC_SUCCESS) {
        r = std::unexpected(std::string("receive: ") + ibv_wc_status_str(wc.status));
      } else if (const auto i = static_cast<std::size_t>(wc.wr_id);
                 post_one_recv(server->qp(), snote + i, 1, snote_mr->lkey, i) != 0) {
        r = std::unexpected("ibv_post_recv: " + ibv_last_error());
      } else if (const std::uint64_t size = echo_size.load(); size > 0) {
        r = write(*server, sdst.data(), sdst_mr, size, cdst.data(), cdst_mr, unreaped_s);
        if (r) r = announce(*server, note_mr_s, unreaped_s);
        if (r) r = reap(*server, unreaped_s, 0);
      }
      if (!r) {
        server_error = "server: " + r.error();
        stop = true;
      }
      notes_seen.fetch_add(1);
    }
  }
  // Busy polling: waits until the server thread has seen `n` notes in all.
  std::expected<void, std::string> await_server(std::uint64_t n) {
    const auto deadline = Clock::now() + timeout;
    while (notes_seen.load() < n) {
      if (stop.load())
        return std::unexpected(server_error.empty() ? std::string("stopped") : server_error);
      if (Clock::now() > deadline)
        return std::unexpected(fmt::format("no note within {} ms", timeout.count()));
    }
    if (!server_error.empty()) return std::unexpected(server_error);
    return {};
  }
  ~State() {
    stop = true;
    if (server_thread.joinable()) server_thread.join();
  }

  // Client writes `size` and announces it; the server writes it back and announces it.
  std::expected<void, std::string> round_trip(std::uint64_t size) {
    if (busy_poll) {
      echo_size = size;
      const std::uint64_t seen = notes_seen.load();
      if (auto r = write(*client, csrc.data(), csrc_mr, size, sdst.data(), sdst_mr, unreaped_c); !r)
        return r;
      if (auto r = announce(*client, note_mr_c, unreaped_c); !r) return r;
      if (auto r = await_note(*client, cnote, cnote_mr); !r) return r;
      if (auto r = await_server(seen + 1); !r) return r;
      return reap(*client, unreaped_c, 0);
    }
    if (auto r = write(*client, csrc.data(), csrc_mr, size, sdst.data(), sdst_mr, unreaped_c); !r)
      return r;
    if (auto r = announce(*client, note_mr_c, unreaped_c); !r) return r;
    if (auto r = await_note(*server, snote, snote_mr); !r) return r;
    if (auto r = write(*server, sdst.data(), sdst_mr, size, cdst.data(), cdst_mr, unreaped_s); !r)
      return r;
    if (auto r = announce(*server, note_mr_s, unreaped_s); !r) return r;
    if (auto r = await_note(*client, cnote, cnote_mr); !r) return r;
    if (auto r = reap(*client, unreaped_c, 0); !r) return r;
    return reap(*server, unreaped_s, 0);
  }
};

WritePair::WritePair(std::unique_ptr<State> s) : s_(std::move(s)) {}
WritePair::~WritePair() = default;

std::expected<std::unique_ptr<WritePair>, std::string> WritePair::start(
    const rnic::CmOptions& cm, std::uint64_t max_size, std::chrono::milliseconds timeout,
    bool busy_poll) {
  auto s = std::make_unique<State>();
  s->busy_poll = busy_poll;
  s->timeout = timeout;
  EndpointOptions o;
  o.cm = cm;
  o.cap.max_send_wr = 2 * kOutstanding + 4;
  o.cap.max_recv_wr = kNotes;
  o.cq_depth = 256;
  o.timeout = timeout;
  s->server = std::make_unique<Endpoint>(o);
  s->client = std::make_unique<Endpoint>(o);
  auto port = s->server->listen(kHost, 0);
  if (!port) return std::unexpected("write: " + port.error());
  std::expected<void, std::string> accepted;
  std::thread t([&] { accepted = s->server->accept_one(); });
  auto r = s->client->connect(kHost, *port);
  t.join();
  if (!r) return std::unexpected("write: connecting: " + r.error());
  if (!accepted) return std::unexpected("write: accepting: " + accepted.error());

  const auto n = static_cast<std::size_t>(std::max<std::uint64_t>(max_size, 1));
  s->csrc.assign(n, 'W');
  s->cdst.assign(n, 0);
  s->sdst.assign(n, 0);
  const int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  s->csrc_mr = s->client->reg(s->csrc.data(), n, IBV_ACCESS_LOCAL_WRITE);
  s->cdst_mr = s->client->reg(s->cdst.data(), n, remote);
  s->sdst_mr = s->server->reg(s->sdst.data(), n, remote);
  s->cnote_mr = s->client->reg(s->cnote, kNotes, IBV_ACCESS_LOCAL_WRITE);
  s->snote_mr = s->server->reg(s->snote, kNotes, IBV_ACCESS_LOCAL_WRITE);
  s->note_mr_c = s->client->reg(&s->note, 1, IBV_ACCESS_LOCAL_WRITE);
  s->note_mr_s = s->server->reg(&s->note, 1, IBV_ACCESS_LOCAL_WRITE);
  if (!s->csrc_mr || !s->cdst_mr || !s->sdst_mr || !s->cnote_mr || !s->snote_mr || !s->note_mr_c ||
      !s->note_mr_s)
    return std::unexpected("write: ibv_reg_mr: " + ibv_last_error());
  for (std::size_t i = 0; i < kNotes; ++i)
    if (post_one_recv(s->client->qp(), s->cnote + i, 1, s->cnote_mr->lkey, i) != 0 ||
        post_one_recv(s->server->qp(), s->snote + i, 1, s->snote_mr->lkey, i) != 0)
      return std::unexpected("write: ibv_post_recv: " + ibv_last_error());
  if (busy_poll) {
    rnic_set_busy_poll(s->server->ctx(), true);
    rnic_set_busy_poll(s->client->ctx(), true);
    s->server_thread = std::thread([st = s.get()] { st->serve(); });
  }
  return std::unique_ptr<WritePair>(new WritePair(std::move(s)));
}

std::expected<SpeedCell, std::string> WritePair::run(std::uint64_t size, const SpeedBudget& b) {
  State& s = *s_;
  SpeedCell cell;
  cell.scheme = "write";
  cell.size = size;
  if (size > s.csrc.size())
    return std::unexpected(
        fmt::format("write: {} bytes is more than the {} registered", size, s.csrc.size()));
  auto fail = [&](const std::string& what, const std::string& why) {
    return std::unexpected(fmt::format("write, {} bytes, {}: {}", size, what, why));
  };
  // Busy polling: the server thread spins for this cell, and naps again after it.
  struct Active {
    std::atomic<bool>& a;
    explicit Active(std::atomic<bool>& x) : a(x) { a = true; }
    ~Active() { a = false; }
  } active(s.active);
  for (std::size_t i = 0; i < b.warmup; ++i)
    if (auto r = s.round_trip(size); !r) return fail("warm-up", r.error());
  std::vector<double> us;
  const auto lat_start = Clock::now();
  while (us.size() < b.max_iterations &&
         (us.size() < b.min_iterations || seconds_since(lat_start) < b.latency_s)) {
    const auto t0 = Clock::now();
    if (auto r = s.round_trip(size); !r) return fail("latency", r.error());
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::ranges::sort(us);
  cell.latency_us = us[us.size() / 2];
  cell.latency_iterations = us.size();

  std::uint64_t sent = 0;
  const auto t0 = Clock::now();
  for (;;) {
    if (auto r = s.write(*s.client, s.csrc.data(), s.csrc_mr, size, s.sdst.data(), s.sdst_mr,
                         s.unreaped_c);
        !r)
      return fail("stream", r.error());
    ++sent;
    if (auto r = s.reap(*s.client, s.unreaped_c, kOutstanding - 1); !r)
      return fail("stream", r.error());
    if (sent >= b.min_messages &&
        (seconds_since(t0) >= b.stream_s || (sent + 1) * size >= b.max_bytes))
      break;
  }
  s.echo_size = 0;  // (busy polling) the server thread only counts the stream's note
  const std::uint64_t seen = s.notes_seen.load();
  if (auto r = s.announce(*s.client, s.note_mr_c, s.unreaped_c); !r)
    return fail("stream", r.error());
  if (auto r =
          s.busy_poll ? s.await_server(seen + 1) : s.await_note(*s.server, s.snote, s.snote_mr);
      !r)
    return fail("stream", r.error());
  const double secs = seconds_since(t0);
  if (auto r = s.reap(*s.client, s.unreaped_c, 0); !r) return fail("stream", r.error());
  cell.stream_messages = sent;
  cell.mbps = static_cast<double>(sent * size) / secs / 1e6;
  return cell;
}

}  // namespace iwarp::bench
