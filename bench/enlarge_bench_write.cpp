#include "bench/enlarge_bench_write.hpp"

#include <fmt/format.h>

#include <algorithm>
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

  // Reaps the send completions of one side, requiring success.
  std::expected<void, std::string> reap(Endpoint& e, std::uint32_t& unreaped, std::uint32_t keep) {
    ibv_wc wc[32];
    while (unreaped > keep) {
      int k = ibv_poll_cq(e.send_cq(), 32, wc);
      if (k == 0) {
        auto w = e.wait(e.send_cq());
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
    auto w = e.wait(e.recv_cq());
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
  // Client writes `size` and announces it; the server writes it back and announces it.
  std::expected<void, std::string> round_trip(std::uint64_t size) {
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
    const rnic::CmOptions& cm, std::uint64_t max_size, std::chrono::milliseconds timeout) {
  auto s = std::make_unique<State>();
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
  if (auto r = s.announce(*s.client, s.note_mr_c, s.unreaped_c); !r)
    return fail("stream", r.error());
  if (auto r = s.await_note(*s.server, s.snote, s.snote_mr); !r) return fail("stream", r.error());
  const double secs = seconds_since(t0);
  if (auto r = s.reap(*s.client, s.unreaped_c, 0); !r) return fail("stream", r.error());
  cell.stream_messages = sent;
  cell.mbps = static_cast<double>(sent * size) / secs / 1e6;
  return cell;
}

}  // namespace iwarp::bench
