// rnic soak: a bounded soak between two processes. The client keeps --qps connections busy with
// mixed operations of random sizes, each verified (an RDMA Write read back by an RDMA Read, a
// Send the server echoes, an atomic fetch-add whose result must count up), and every
// --kill-every seconds tears one connection down with work requests still in flight, then opens
// it again. Every few seconds both sides print what they did, their resident memory and open
// descriptors; errors other than the deliberate kills make the exit status 1.
//
// The server listens on one port per connection slot (--port P: P .. P+QPS-1; --port 0 picks
// them and --port-file lists them), all on one emulated device; a slot whose connection ends
// listens again. A zero-length Send with Immediate Data kBye from the client ends a slot for
// good; the server exits when every slot has ended so, or when a slot waits longer than
// --idle-timeout for its client.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <latch>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/process_probes.hpp"
#include "common/bytes.hpp"
#include "tools/app_options.hpp"
#include "tools/commands.hpp"
#include "tools/explain_printer.hpp"

namespace iwarp::tools {

namespace {

using namespace verbs;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint32_t kBye = 0xB1E5;  // Immediate Data of the client's last Send on a slot
constexpr std::size_t kAdvert = 28;     // mem addr, rkey, len; counter addr, rkey (big-endian)
constexpr std::size_t kMaxSoakSize = 16u << 20;
constexpr int kMaxQps = 256;
constexpr std::uint64_t kMaxSoakMemory = 1ull << 30;  // server buffers: qps x max-size x 3
constexpr int kMaxErrorsShown = 20;

struct SoakOptions {
  bool server = false;
  std::string client;
  std::string bind = "127.0.0.1";
  int port = 7190;
  std::string port_file;
  int qps = 8;
  int seconds = 60;
  double kill_every = 5;
  double rate = 0;  // client: operations per second per connection, 0 unpaced
  std::size_t max_size = 256u << 10;
  std::uint64_t seed = 1;
  int report = 5;
  int idle_timeout = 30;
  AppOptions app;
};

// Counters both sides print.
struct Totals {
  std::atomic<std::uint64_t> ops{0}, octets{0}, errors{0}, kills{0}, connects{0}, open{0};
};

// A connection, counted as made and as open while it lasts.
struct Opened {
  explicit Opened(Totals& totals) : t(totals) {
    t.connects++;
    t.open++;
  }
  ~Opened() { t.open--; }
  Opened(const Opened&) = delete;
  Opened& operator=(const Opened&) = delete;
  Totals& t;
};

// The data of one operation: 8 octets per word of splitmix64(seed + word), so that no two
// operations (64-bit random seeds) and no two offsets of one operation look alike.
std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
void fill(std::uint8_t* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t j = 0; j * 8 < n; ++j) {
    const std::uint64_t w = mix(seed + j);
    for (std::size_t b = 0; b < 8 && j * 8 + b < n; ++b)
      p[j * 8 + b] = static_cast<std::uint8_t>(w >> (8 * b));
  }
}
long long first_wrong(const std::uint8_t* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t j = 0; j * 8 < n; ++j) {
    const std::uint64_t w = mix(seed + j);
    for (std::size_t b = 0; b < 8 && j * 8 + b < n; ++b)
      if (p[j * 8 + b] != static_cast<std::uint8_t>(w >> (8 * b)))
        return static_cast<long long>(j * 8 + b);
  }
  return -1;
}

std::string human(std::uint64_t n) {
  if (n >= (1ull << 30)) return fmt::format("{:.2f} GiB", n / double(1ull << 30));
  if (n >= (1ull << 20)) return fmt::format("{:.1f} MiB", n / double(1ull << 20));
  return fmt::format("{:.1f} KiB", n / 1024.0);
}

// Prints a line every `every` seconds until `stop`, and the last one when it is set.
class Reporter {
 public:
  Reporter(const char* side, const Totals& t, int every, std::atomic<bool>& stop)
      : side_(side), t_(t), every_(every), stop_(stop), start_(Clock::now()) {}
  void run() {
    auto next = start_ + std::chrono::seconds(every_);
    while (!stop_.load()) {
      std::this_thread::sleep_for(100ms);
      if (Clock::now() >= next) {
        line();
        next += std::chrono::seconds(every_);
      }
    }
  }
  void line() const {
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start_);
    print_lines(fmt::format(
        "{}: t={}s open {} connects {} ops {} verified {} errors {} kills {} rss_kib {} fds {}",
        side_, secs.count(), t_.open.load(), t_.connects.load(), t_.ops.load(),
        human(t_.octets.load()), t_.errors.load(), t_.kills.load(), bench::vm_rss() / 1024,
        bench::open_fds()));
  }

 private:
  const char* side_;
  const Totals& t_;
  int every_;
  std::atomic<bool>& stop_;
  Clock::time_point start_;
};

// The first kMaxErrorsShown errors are printed; all are counted.
void error_line(Totals& t, const std::string& s) {
  if (t.errors.fetch_add(1) < kMaxErrorsShown) print_lines(s);
}

// ---------------------------------------------------------------- server

// One slot's memory; it outlives every endpoint the slot makes (the engine may touch it until
// the endpoint's QP is destroyed).
struct ServerSlot {
  explicit ServerSlot(std::size_t max)
      : mem(max),
        counter(8),
        in{std::vector<std::uint8_t>(max), std::vector<std::uint8_t>(max)},
        ctl(kAdvert) {}
  std::vector<std::uint8_t> mem, counter;
  std::vector<std::uint8_t> in[2];
  std::vector<std::uint8_t> ctl;
};

struct ServerRun {
  const SoakOptions& o;
  ibv_context* ctx;
  Totals& t;
  std::atomic<bool> failed{false};
};

// Slot `i`: listens on `port` (0: the kernel picks, and the slot keeps that port), counts
// `listening` down once it listens (or cannot), then serves its client's connections one after
// another until the client's bye.
void server_slot(ServerRun& run, int i, std::uint16_t& port, std::latch& listening) {
  const SoakOptions& o = run.o;
  ServerSlot s(o.max_size);
  bool first = true;
  struct CountDown {
    std::latch& l;
    bool& first;
    ~CountDown() {
      if (first) l.count_down();
    }
  } count_down{listening, first};
  for (;;) {
    ibv_mr *mem_mr = nullptr, *ctr_mr = nullptr, *ctl_mr = nullptr, *in_mr[2] = {};
    auto eo = endpoint_options(o.app);
    eo.on_qp_created = [&](Endpoint& ep) {
      const int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
      mem_mr = ep.reg(s.mem.data(), s.mem.size(), remote);
      std::memset(s.counter.data(), 0, 8);
      ctr_mr = ep.reg(s.counter.data(), 8, remote | IBV_ACCESS_REMOTE_ATOMIC);
      ctl_mr = ep.reg(s.ctl.data(), s.ctl.size(), 0);
      for (int k = 0; k < 2; ++k)
        in_mr[k] = ep.reg(s.in[k].data(), s.in[k].size(), IBV_ACCESS_LOCAL_WRITE);
      post_one_recv(ep.qp(), s.in[0].data(), static_cast<std::uint32_t>(s.in[0].size()),
                    in_mr[0]->lkey, 0);
    };
    Endpoint ep(eo, run.ctx);
    auto p = ep.listen(o.bind, port);
    if (!p) {
      error_line(run.t, fmt::format("server: slot {}: cannot listen on {}:{}: {}", i, o.bind, port,
                                    p.error()));
      run.failed = true;
      return;
    }
    if (first) {  // the port is written once, before the main thread reads it
      port = *p;
      first = false;
      listening.count_down();
    }
    // Waits in short steps, so that a failure elsewhere ends the wait.
    const auto deadline = Clock::now() + std::chrono::seconds(o.idle_timeout);
    std::expected<void, std::string> a;
    while (!run.failed) {
      a = ep.accept_one(500ms);
      if (a || ep.id() || Clock::now() >= deadline) break;
    }
    if (run.failed) return;  // the server failed elsewhere: this slot ends too
    if (!a) {
      error_line(
          run.t,
          fmt::format("server: slot {} (port {}): {}", i, port,
                      ep.id() ? a.error() : fmt::format("no client within {} s", o.idle_timeout)));
      if (ep.id()) continue;  // that client failed its connection; listen again
      run.failed = true;
      return;
    }
    // One connection per slot: a client that reconnects before this one has ended is refused
    // and tries again, rather than waiting in a queue nobody accepts from.
    ep.stop_listening();
    const Opened opened(run.t);
    // The advertisement: where the client may Write, Read and add.
    store_be64(s.ctl.data(), reinterpret_cast<std::uint64_t>(s.mem.data()));
    store_be32(s.ctl.data() + 8, mem_mr->rkey);
    store_be32(s.ctl.data() + 12, static_cast<std::uint32_t>(s.mem.size()));
    store_be64(s.ctl.data() + 16, reinterpret_cast<std::uint64_t>(s.counter.data()));
    store_be32(s.ctl.data() + 24, ctr_mr->rkey);
    auto send = [&](const void* buf, std::uint32_t n, ibv_mr* mr,
                    std::optional<std::uint32_t> imm) {
      if (post_one(ep.qp(), {.op = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
                             .addr = buf,
                             .len = n,
                             .lkey = mr->lkey,
                             .imm = imm.value_or(0)}) != 0)
        return false;
      auto wc = ep.wait(ep.send_cq());
      return wc && wc->status == IBV_WC_SUCCESS;
    };
    // The client's hello first (RFC 5044 §7.1.2: the responder sends no FPDU before the
    // initiator's first), then the advertisement.
    {
      auto hello = ep.wait(ep.recv_cq());
      if (!hello || hello->status != IBV_WC_SUCCESS) continue;  // killed at once
      post_one_recv(ep.qp(), s.in[0].data(), static_cast<std::uint32_t>(s.in[0].size()),
                    in_mr[0]->lkey, 0);
    }
    if (!send(s.ctl.data(), kAdvert, ctl_mr, std::nullopt)) continue;
    int cur = 0;
    bool bye = false;
    auto idle_since = Clock::now();
    for (;;) {
      if (run.failed) return;  // the server failed elsewhere (its connection ends with it)
      auto wc = ep.wait(ep.recv_cq());
      if (!wc) {
        // A wait that timed out on a live connection: the client is slow, not gone.
        if (ibv_query_qp_state(ep.qp()) == IBV_QPS_ERR) break;
        if (Clock::now() - idle_since > std::chrono::seconds(o.idle_timeout)) {
          error_line(run.t, fmt::format("server: slot {}: nothing from the client in {} s", i,
                                        o.idle_timeout));
          run.failed = true;
          return;
        }
        continue;
      }
      idle_since = Clock::now();
      if (wc->status != IBV_WC_SUCCESS) break;  // the connection ended (killed): flushed
      const bool is_bye = (wc->wc_flags & IBV_WC_WITH_IMM) && wc->imm_data == kBye;
      // The next receive first, then the echo of this one (the client sends its next message
      // only after the echo, so two buffers suffice).
      const int next = 1 - cur;
      post_one_recv(ep.qp(), s.in[next].data(), static_cast<std::uint32_t>(s.in[next].size()),
                    in_mr[next]->lkey, 0);
      if (!send(s.in[cur].data(), wc->byte_len, in_mr[cur],
                is_bye ? std::optional<std::uint32_t>(kBye) : std::nullopt))
        break;
      run.t.ops++;
      run.t.octets += wc->byte_len;
      cur = next;
      if (is_bye) {
        bye = true;
        ep.wait_event(RDMA_CM_EVENT_DISCONNECTED);
        break;
      }
    }
    if (bye) return;
  }
}

int run_server(const SoakOptions& o) {
  ibv_context* ctx = ibv_open_device("rnic0");
  if (!ctx) {
    std::cerr << "rnic soak: server: cannot open the emulated device\n";
    return 1;
  }
  Totals t;
  ServerRun run{o, ctx, t};
  std::vector<std::uint16_t> ports;
  for (int i = 0; i < o.qps; ++i)
    ports.push_back(o.port == 0 ? 0 : static_cast<std::uint16_t>(o.port + i));
  std::latch listening(o.qps);
  std::vector<std::jthread> slots;
  for (int i = 0; i < o.qps; ++i)
    slots.emplace_back(
        [&, i] { server_slot(run, i, ports[static_cast<std::size_t>(i)], listening); });
  listening.wait();
  if (run.failed) {
    print_lines("server: FAIL (see above)");
    slots.clear();
    ibv_close_device(ctx);
    return 1;
  }
  if (!o.port_file.empty()) {
    const std::string tmp = o.port_file + ".tmp";
    std::ofstream out(tmp);
    for (auto p : ports) out << p << "\n";
    out.close();
    if (!out || std::rename(tmp.c_str(), o.port_file.c_str()) != 0) {
      std::remove(tmp.c_str());
      std::cerr << "rnic soak: --port-file " << o.port_file << ": cannot write it\n";
      run.failed = true;  // the slots stop waiting for clients
      slots.clear();
      ibv_close_device(ctx);
      return 1;
    }
  }
  print_lines(fmt::format(
      "server: {} slots on {} ports {}{}", o.qps, o.bind,
      fmt::join(ports.begin(), ports.begin() + std::min<std::size_t>(ports.size(), 8), ", "),
      ports.size() > 8 ? ", ..." : ""));
  std::atomic<bool> stop{false};
  Reporter rep("server", t, o.report, stop);
  std::thread reporter([&] { rep.run(); });
  slots.clear();  // joins: each slot ends with its client's bye (or an error)
  stop = true;
  reporter.join();
  rep.line();
  ibv_close_device(ctx);
  const bool ok = !run.failed && t.errors == 0;
  print_lines(ok ? "server: every slot ended with the client's bye, no errors"
                 : "server: FAIL (see above)");
  return ok ? 0 : 1;
}

// ---------------------------------------------------------------- client

// One slot's memory; it outlives every endpoint the slot makes (a killed connection's Write and
// Read are still posted on it when the endpoint goes).
struct ClientSlot {
  explicit ClientSlot(std::size_t max) : src(max), dst(max), atom(8), ctl(kAdvert) {}
  std::vector<std::uint8_t> src, dst, atom, ctl;
  std::atomic<bool> kill{false};
};

struct ClientRun {
  const SoakOptions& o;
  ibv_context* ctx;
  Totals& t;
  Clock::time_point end;
  std::vector<std::uint16_t> ports;
  std::vector<std::unique_ptr<ClientSlot>> slots;
  std::atomic<int> byes{0};
  std::atomic<bool> give_up{false};
};

// The server's advertisement: its region and counter for this connection.
struct Remote {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0, len = 0;
  std::uint64_t ctr_addr = 0;
  std::uint32_t ctr_rkey = 0;
};

// The slot's current connection: endpoint, registrations, what the server advertised.
struct Conn {
  std::unique_ptr<Endpoint> ep;
  ibv_mr *src = nullptr, *dst = nullptr, *atom = nullptr, *ctl = nullptr;
  Remote r;
  std::uint64_t added = 0;  // fetch-adds so far: the counter's value

  std::expected<ibv_wc, std::string> done(ibv_cq* cq, const char* what, ibv_wc_opcode want) {
    auto wc = ep->wait(cq);
    if (!wc) return std::unexpected(fmt::format("{}: {}", what, wc.error()));
    if (wc->status != IBV_WC_SUCCESS)
      return std::unexpected(fmt::format("{}: completion {} ({})", what,
                                         ibv_wc_status_str(wc->status),
                                         ep->qp()->qp->error_reason()));
    if (wc->opcode != want)
      return std::unexpected(
          fmt::format("{}: completion of a {}", what, ibv_wc_opcode_str(wc->opcode)));
    return wc;
  }
};

// Connects slot `i` (a fresh endpoint per attempt: the server's slot may still be listening
// again after a kill) and reads the advertisement.
std::expected<Conn, std::string> open_conn(ClientRun& run, ClientSlot& s, int i) {
  const SoakOptions& o = run.o;
  const auto deadline = Clock::now() + std::chrono::seconds(o.idle_timeout);
  for (;;) {
    Conn c;
    auto eo = endpoint_options(o.app);
    eo.on_qp_created = [&](Endpoint& ep) {
      c.src = ep.reg(s.src.data(), s.src.size(), 0);
      // An iWARP Read sink is written by the peer's Read Responses: REMOTE_WRITE too.
      c.dst = ep.reg(s.dst.data(), s.dst.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      c.atom = ep.reg(s.atom.data(), 8, IBV_ACCESS_LOCAL_WRITE);
      c.ctl = ep.reg(s.ctl.data(), s.ctl.size(), IBV_ACCESS_LOCAL_WRITE);
      post_one_recv(ep.qp(), s.ctl.data(), kAdvert, c.ctl->lkey);
    };
    c.ep = std::make_unique<Endpoint>(eo, run.ctx);
    auto ok = c.ep->connect(o.client, run.ports[static_cast<std::size_t>(i)]);
    if (!ok) {
      if (Clock::now() >= deadline || run.give_up)
        return std::unexpected(
            fmt::format("cannot connect within {} s: {}", o.idle_timeout, ok.error()));
      c.ep.reset();
      std::this_thread::sleep_for(50ms);
      continue;
    }
    // A zero-length hello (the responder speaks after the initiator, RFC 5044 §7.1.2).
    if (post_one(c.ep->qp(),
                 {.op = IBV_WR_SEND, .addr = s.src.data(), .len = 0, .lkey = c.src->lkey}) != 0)
      return std::unexpected("post: " + ibv_last_error());
    if (auto h = c.done(c.ep->send_cq(), "hello", IBV_WC_SEND); !h)
      return std::unexpected(h.error());
    auto adv = c.done(c.ep->recv_cq(), "the server's advertisement", IBV_WC_RECV);
    if (!adv) return std::unexpected(adv.error());
    if (adv->byte_len != kAdvert)
      return std::unexpected(
          fmt::format("the server's advertisement has {} octets", adv->byte_len));
    c.r = {load_be64(s.ctl.data()), load_be32(s.ctl.data() + 8), load_be32(s.ctl.data() + 12),
           load_be64(s.ctl.data() + 16), load_be32(s.ctl.data() + 24)};
    if (c.r.len < o.max_size)
      return std::unexpected(
          fmt::format("the server's region has {} octets, --max-size is {}", c.r.len, o.max_size));
    return c;
  }
}

// One random operation, verified. Returns the octets verified.
std::expected<std::uint64_t, std::string> one_op(Conn& c, ClientSlot& s, std::mt19937_64& rng,
                                                 std::size_t max) {
  // Sizes spread over every power of two up to max (0 included).
  const int bits = std::bit_width(max);
  const std::uint64_t cap = std::min<std::uint64_t>(max, (1ull << (rng() % (bits + 1))) - 1);
  const auto n = static_cast<std::uint32_t>(rng() % (cap + 1));
  const std::uint64_t seed = rng();
  Endpoint& ep = *c.ep;
  switch (rng() % 3) {
    case 0: {  // RDMA Write, then an RDMA Read of the same octets (RFC 5040 §5.5: in order)
      const std::uint64_t off = rng() % (c.r.len - n + 1);
      fill(s.src.data(), n, seed);
      std::memset(s.dst.data(), 0, n);
      if (post_one(ep.qp(), {.op = IBV_WR_RDMA_WRITE,
                             .addr = s.src.data(),
                             .len = n,
                             .lkey = c.src->lkey,
                             .remote_addr = c.r.addr + off,
                             .rkey = c.r.rkey}) != 0 ||
          post_one(ep.qp(), {.op = IBV_WR_RDMA_READ,
                             .addr = s.dst.data(),
                             .len = n,
                             .lkey = c.dst->lkey,
                             .remote_addr = c.r.addr + off,
                             .rkey = c.r.rkey}) != 0)
        return std::unexpected("post: " + ibv_last_error());
      if (auto w = c.done(ep.send_cq(), "RDMA Write", IBV_WC_RDMA_WRITE); !w)
        return std::unexpected(w.error());
      if (auto w = c.done(ep.send_cq(), "RDMA Read", IBV_WC_RDMA_READ); !w)
        return std::unexpected(w.error());
      if (auto bad = first_wrong(s.dst.data(), n, seed); bad >= 0)
        return std::unexpected(
            fmt::format("RDMA Write of {} at offset {} read back wrong at octet {}", n, off, bad));
      return n;
    }
    case 1: {  // Send, echoed by the server
      fill(s.src.data(), n, seed);
      std::memset(s.dst.data(), 0, n);
      if (post_one_recv(ep.qp(), s.dst.data(), static_cast<std::uint32_t>(s.dst.size()),
                        c.dst->lkey) != 0 ||
          post_one(ep.qp(),
                   {.op = IBV_WR_SEND, .addr = s.src.data(), .len = n, .lkey = c.src->lkey}) != 0)
        return std::unexpected("post: " + ibv_last_error());
      if (auto w = c.done(ep.send_cq(), "Send", IBV_WC_SEND); !w) return std::unexpected(w.error());
      auto e = c.done(ep.recv_cq(), "the server's echo", IBV_WC_RECV);
      if (!e) return std::unexpected(e.error());
      if (e->byte_len != n)
        return std::unexpected(fmt::format("Send of {} echoed with {} octets", n, e->byte_len));
      if (auto bad = first_wrong(s.dst.data(), n, seed); bad >= 0)
        return std::unexpected(fmt::format("Send of {} echoed wrong at octet {}", n, bad));
      return n;
    }
    default: {  // atomic fetch-add: the original value counts the adds so far
      if (post_one(ep.qp(), {.op = IBV_WR_ATOMIC_FETCH_AND_ADD,
                             .addr = s.atom.data(),
                             .len = 8,
                             .lkey = c.atom->lkey,
                             .remote_addr = c.r.ctr_addr,
                             .rkey = c.r.ctr_rkey,
                             .compare_add = 1}) != 0)
        return std::unexpected("post: " + ibv_last_error());
      if (auto w = c.done(ep.send_cq(), "atomic fetch-add", IBV_WC_FETCH_ADD); !w)
        return std::unexpected(w.error());
      std::uint64_t before;
      std::memcpy(&before, s.atom.data(), 8);
      if (before != c.added)
        return std::unexpected(fmt::format("fetch-add returned {}, expected {}", before, c.added));
      ++c.added;
      return 8;
    }
  }
}

// The slot's last message: a zero-length Send with Immediate Data kBye, echoed, then a
// disconnect.
std::expected<void, std::string> say_bye(Conn& c, ClientSlot& s) {
  Endpoint& ep = *c.ep;
  if (post_one_recv(ep.qp(), s.dst.data(), static_cast<std::uint32_t>(s.dst.size()), c.dst->lkey) !=
          0 ||
      post_one(ep.qp(), {.op = IBV_WR_SEND_WITH_IMM,
                         .addr = s.src.data(),
                         .len = 0,
                         .lkey = c.src->lkey,
                         .imm = kBye}) != 0)
    return std::unexpected("post: " + ibv_last_error());
  if (auto w = c.done(ep.send_cq(), "bye", IBV_WC_SEND); !w) return std::unexpected(w.error());
  // A lone Immediate Data message completes as RECV_RDMA_WITH_IMM here (RFC 7306 §4.3 does not
  // tell it from one after a zero-length Write).
  auto e = c.done(ep.recv_cq(), "the server's bye", IBV_WC_RECV_RDMA_WITH_IMM);
  if (!e) return std::unexpected(e.error());
  if (!(e->wc_flags & IBV_WC_WITH_IMM) || e->imm_data != kBye)
    return std::unexpected("the server answered bye with something else");
  rdma_disconnect(ep.id());
  if (auto d = ep.wait_event(RDMA_CM_EVENT_DISCONNECTED); !d) return std::unexpected(d.error());
  return {};
}

void client_slot(ClientRun& run, int i) {
  const SoakOptions& o = run.o;
  ClientSlot& s = *run.slots[static_cast<std::size_t>(i)];
  std::mt19937_64 rng(o.seed * 1000003u + static_cast<std::uint64_t>(i));
  const auto fail = [&](const std::string& what) {
    error_line(run.t, fmt::format("client: slot {}: {}", i, what));
    if (run.t.errors > 100) run.give_up = true;
  };
  while (!run.give_up) {
    auto c = open_conn(run, s, i);
    if (!c) {
      fail(c.error());
      run.give_up = true;  // the server is gone
      return;
    }
    const Opened opened(run.t);
    bool broken = false;
    // --rate: the operations of this connection keep to a schedule of one every 1/rate
    // seconds from its opening (a late one is not made up for by a burst past the schedule).
    const auto interval =
        o.rate > 0 ? std::chrono::ceil<Clock::duration>(std::chrono::duration<double>(1.0 / o.rate))
                   : Clock::duration::zero();
    auto due = Clock::now();
    while (Clock::now() < run.end && !run.give_up) {
      if (o.rate > 0) {
        // Sleep in steps of at most 50 ms, so a kill or the end is seen while waiting.
        while (Clock::now() < due && Clock::now() < run.end && !run.give_up && !s.kill.load())
          std::this_thread::sleep_for(std::min<Clock::duration>(due - Clock::now(), 50ms));
        if (Clock::now() >= run.end || run.give_up) break;
        due = std::max(due + interval, Clock::now());
      }
      if (s.kill.exchange(false)) {
        // Killed: a large Write and Read posted, and the connection torn down under them.
        const auto n = static_cast<std::uint32_t>(o.max_size);
        post_one(c->ep->qp(), {.op = IBV_WR_RDMA_WRITE,
                               .addr = s.src.data(),
                               .len = n,
                               .lkey = c->src->lkey,
                               .remote_addr = c->r.addr,
                               .rkey = c->r.rkey});
        post_one(c->ep->qp(), {.op = IBV_WR_RDMA_READ,
                               .addr = s.dst.data(),
                               .len = n,
                               .lkey = c->dst->lkey,
                               .remote_addr = c->r.addr,
                               .rkey = c->r.rkey});
        run.t.kills++;
        broken = true;
        break;
      }
      auto r = one_op(*c, s, rng, o.max_size);
      if (!r) {
        fail(r.error());
        broken = true;
        break;
      }
      run.t.ops++;
      run.t.octets += *r;
    }
    if (broken) continue;  // the endpoint goes here, with whatever it still had posted
    if (run.give_up) return;
    if (auto b = say_bye(*c, s); !b) {
      fail(b.error());
      continue;
    }
    run.byes++;
    return;
  }
}

// The ports of the server's slots: --port-file (waited for up to 10 s) or --port + i.
std::expected<std::vector<std::uint16_t>, std::string> client_ports(const SoakOptions& o) {
  std::vector<std::uint16_t> ports;
  if (o.port_file.empty()) {
    for (int i = 0; i < o.qps; ++i) {
      if (o.port + i > 65535) return std::unexpected("--port + --qps goes past port 65535");
      ports.push_back(static_cast<std::uint16_t>(o.port + i));
    }
    return ports;
  }
  const auto deadline = Clock::now() + 10s;
  while (!std::filesystem::exists(o.port_file) && Clock::now() < deadline)
    std::this_thread::sleep_for(50ms);
  std::ifstream in(o.port_file);
  if (!in) return std::unexpected("--port-file " + o.port_file + ": cannot read it");
  for (long p; static_cast<int>(ports.size()) < o.qps && in >> p;) {
    if (p < 1 || p > 65535)
      return std::unexpected(fmt::format("--port-file {}: {} is not a port", o.port_file, p));
    ports.push_back(static_cast<std::uint16_t>(p));
  }
  if (static_cast<int>(ports.size()) < o.qps)
    return std::unexpected(
        fmt::format("--port-file {}: {} ports for --qps {}", o.port_file, ports.size(), o.qps));
  return ports;
}

int run_client(const SoakOptions& o) {
  auto ports = client_ports(o);
  if (!ports) {
    std::cerr << "rnic soak: " << ports.error() << "\n";
    return 2;
  }
  ibv_context* ctx = ibv_open_device("rnic0");
  if (!ctx) {
    std::cerr << "rnic soak: client: cannot open the emulated device\n";
    return 1;
  }
  Totals t;
  ClientRun run{o, ctx, t, Clock::now() + std::chrono::seconds(o.seconds), std::move(*ports), {}};
  for (int i = 0; i < o.qps; ++i) run.slots.push_back(std::make_unique<ClientSlot>(o.max_size));
  print_lines(fmt::format(
      "client: {} connections to {} for {} s, sizes 0..{} octets, a kill every {} s, seed {}{}",
      o.qps, o.client, o.seconds, o.max_size, o.kill_every, o.seed,
      o.rate > 0 ? fmt::format(", at most {} operations a second per connection", o.rate)
                 : std::string()));
  std::atomic<bool> stop{false};
  Reporter rep("client", t, o.report, stop);
  std::thread reporter([&] { rep.run(); });
  {
    std::vector<std::jthread> slots;
    for (int i = 0; i < o.qps; ++i) slots.emplace_back([&, i] { client_slot(run, i); });
    // The kills: one random slot every --kill-every seconds.
    std::mt19937_64 rng(o.seed);
    if (o.kill_every > 0) {
      const auto every =
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.kill_every));
      for (auto next = Clock::now() + every; next < run.end && !run.give_up; next += every) {
        while (Clock::now() < next && !run.give_up) std::this_thread::sleep_for(50ms);
        if (next < run.end) run.slots[rng() % static_cast<std::size_t>(o.qps)]->kill = true;
      }
    }
  }
  stop = true;
  reporter.join();
  rep.line();
  run.slots.clear();
  ibv_close_device(ctx);
  const bool ok = t.errors == 0 && run.byes == o.qps;
  print_lines(ok ? fmt::format("client: {} operations, {} verified, {} kills, no errors",
                               t.ops.load(), human(t.octets.load()), t.kills.load())
                 : fmt::format("client: FAIL: {} errors, {} of {} slots ended cleanly",
                               t.errors.load(), run.byes.load(), o.qps));
  return ok ? 0 : 1;
}

// A number that is 0 or within [lo, hi] (--kill-every, --rate); anything else is refused with
// `message`. `desc` is what --help shows.
CLI::Validator zero_or_between(double lo, double hi, std::string message, std::string desc) {
  return CLI::Validator(
      [lo, hi, message = std::move(message)](std::string& v) -> std::string {
        double x = -1;
        try {
          x = std::stod(v);
        } catch (const std::exception&) {
        }
        return x == 0 || (x >= lo && x <= hi) ? "" : message;
      },
      std::move(desc));
}

}  // namespace

Runner add_soak_command(CLI::App& app) {
  auto o = std::make_shared<SoakOptions>();
  auto* sub = app.add_subcommand(
      "soak",
      "A bounded soak between two processes: --qps connections with mixed operations of\n"
      "random sizes (RDMA Write read back by RDMA Read, Sends the server echoes, atomic\n"
      "fetch-adds), each verified; one connection killed with work in flight and reopened\n"
      "every --kill-every seconds; both sides print operations, octets verified, errors,\n"
      "resident memory and open descriptors every --report seconds. Run --server, then\n"
      "--client (scripts/soak.sh runs both and judges the figures).");
  add_peer_options(*sub, o->server, o->client, o->bind, o->port,
                   "Serve --qps connection slots until the client ends each",
                   "First TCP port: slot i uses PORT+i (server: 0 lets the kernel pick each;\n"
                   "see --port-file)");
  sub->add_option("--port-file", o->port_file,
                  "Server: write the slots' ports here, one per line; client: read them from here");
  sub->add_option("--qps", o->qps, "Connections (queue pairs), the same on both sides")
      ->check(CLI::Range(1, kMaxQps))
      ->capture_default_str();
  sub->add_option("--seconds", o->seconds, "Client: how long to run")
      ->check(CLI::Range(1, 7 * 24 * 3600))
      ->capture_default_str();
  sub->add_option("--kill-every", o->kill_every,
                  "Client: tear one random connection down (work requests in flight) and reopen\n"
                  "it every this many seconds (0: never)")
      ->check(zero_or_between(0.1, 3600, "0 (never) or 0.1 .. 3600 seconds", "0 or 0.1..3600"))
      ->capture_default_str();
  sub->add_option("--rate", o->rate,
                  "Client: at most this many operations a second on each connection (0: as fast\n"
                  "as they complete); a paced soak leaves the machine's cores to other work")
      ->check(zero_or_between(0.1, 1e6, "0 (unpaced) or 0.1 .. 1000000", "0 or 0.1..1e6"))
      ->capture_default_str();
  sub->add_option("--max-size", o->max_size,
                  "Largest message in octets (sizes are spread over every power of two below it;\n"
                  "the same on both sides)")
      ->check(CLI::Range(std::size_t{8}, kMaxSoakSize))
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Client: seed of the random operations, sizes and kills")
      ->capture_default_str();
  sub->add_option("--report", o->report, "Print the figures every this many seconds")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  sub->add_option("--idle-timeout", o->idle_timeout,
                  "Seconds a slot waits for its peer (a connection, a message) before it fails")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  add_app_options(*sub, o->app);
  return [o]() -> int {
    if (!o->server && o->client.empty()) {
      std::cerr << "rnic soak: give --server or --client ADDR (see rnic soak --help)\n";
      return 2;
    }
    if (o->port != 0 && o->port + o->qps - 1 > 65535) {
      std::cerr << "rnic soak: --port " << o->port << " with --qps " << o->qps
                << " goes past port 65535\n";
      return 2;
    }
    // The memory each side sets aside: the server 3 buffers of --max-size per slot, the client 2.
    if (static_cast<std::uint64_t>(o->qps) * o->max_size * 3 > kMaxSoakMemory) {
      std::cerr << "rnic soak: --qps " << o->qps << " x --max-size " << o->max_size
                << " needs more than " << (kMaxSoakMemory >> 20)
                << " MiB of buffers on the server (3 per connection): use fewer or smaller\n";
      return 2;
    }
    if (!o->server && o->port == 0 && o->port_file.empty()) {
      std::cerr << "rnic soak: the client needs --port or --port-file\n";
      return 2;
    }
    return o->server ? run_server(*o) : run_client(*o);
  };
}

}  // namespace iwarp::tools
