// The emulated RNIC against raw TCP on the same loopback, in the same run: bulk RDMA Write
// throughput against a plain socket stream, small-Send message rate against small TCP writes,
// and Send ping-pong latency against a TCP ping-pong. Each line prints both and their ratio, so
// the numbers mean something on a shared, noisy machine. Best of --reps runs each.
//
// Memory the RNIC may touch is handled as an application must: every region is deregistered
// before its buffer is freed, and a buffer is freed only when no work request or posted receive
// can still reach it (the peer's engine places Writes on its own thread: a Write's send
// completion says only that TCP took the data).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <thread>

#include "rnic/device.hpp"
#include "verbs_shim/endpoint.hpp"

using namespace iwarp;
using namespace iwarp::verbs;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A connected pair of TCP sockets on 127.0.0.1 with TCP_NODELAY.
std::pair<int, int> tcp_pair() {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(l, 1);
  socklen_t len = sizeof a;
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
  int s = accept(l, nullptr, nullptr);
  close(l);
  int one = 1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return {c, s};
}

// `spin`: never sleep in the kernel, retry a non-blocking read (the busy-polling baseline).
void read_exact(int fd, char* p, std::size_t n, bool spin = false) {
  while (n) {
    ssize_t r = spin ? recv(fd, p, n, MSG_DONTWAIT) : read(fd, p, n);
    if (spin && r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (r <= 0) return;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
}
void write_exact(int fd, const char* p, std::size_t n) {
  while (n) {
    ssize_t r = write(fd, p, n);
    if (r <= 0) return;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
}

// Raw TCP: `total` octets written in `chunk`-octet writes, read on another thread.
double tcp_stream(std::size_t total, std::size_t chunk) {
  auto [c, s] = tcp_pair();
  std::vector<char> out(chunk, 'x'), in(1 << 20);
  auto t0 = Clock::now();
  std::thread rd([&, s = s] {
    std::size_t got = 0;
    while (got < total) {
      ssize_t r = read(s, in.data(), in.size());
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
  });
  for (std::size_t sent = 0; sent < total; sent += chunk) write_exact(c, out.data(), chunk);
  rd.join();
  double t = seconds_since(t0);
  close(c);
  close(s);
  return t;
}

// Raw TCP ping-pong of `size` octets, `n` round trips; `spin`: both sides spin on non-blocking
// reads instead of sleeping in read().
double tcp_pingpong(std::size_t size, int n, bool spin = false) {
  auto [c, s] = tcp_pair();
  std::vector<char> a(size, 'a'), b(size);
  std::thread echo([&, s = s] {
    std::vector<char> buf(size);
    for (int i = 0; i < n; ++i) {
      read_exact(s, buf.data(), size, spin);
      write_exact(s, buf.data(), size);
    }
  });
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    write_exact(c, a.data(), size);
    read_exact(c, b.data(), size, spin);
  }
  double t = seconds_since(t0);
  echo.join();
  close(c);
  close(s);
  return t;
}

// A registered region, deregistered when it goes out of scope: declare it after its buffer, so
// that it goes first.
class Mr {
 public:
  Mr(Endpoint& e, void* addr, std::size_t len, int access)
      : mr_(ibv_reg_mr(e.pd(), addr, len, access)) {
    if (!mr_) throw std::runtime_error("ibv_reg_mr failed");
  }
  ~Mr() { ibv_dereg_mr(mr_); }
  Mr(const Mr&) = delete;
  Mr& operator=(const Mr&) = delete;
  ibv_mr* operator->() const { return mr_; }

 private:
  ibv_mr* mr_;
};

// Waits for the next completion on `cq` and requires it to be a success.
ibv_wc wait_ok(Endpoint& e, ibv_cq* cq, const char* what) {
  auto wc = e.wait(cq);
  if (!wc) throw std::runtime_error(std::string(what) + ": " + wc.error());
  if (wc->status != IBV_WC_SUCCESS)
    throw std::runtime_error(std::string(what) + ": completion with status " +
                             ibv_wc_status_str(wc->status));
  return *wc;
}

// Polls up to `n` completions from `cq`, requiring each to be a success.
int poll_ok(ibv_cq* cq, int n, ibv_wc* wc, const char* what) {
  const int k = ibv_poll_cq(cq, n, wc);
  for (int i = 0; i < k; ++i)
    if (wc[i].status != IBV_WC_SUCCESS)
      throw std::runtime_error(std::string(what) + ": completion with status " +
                               ibv_wc_status_str(wc[i].status));
  return k;
}

struct RnicPair {
  std::unique_ptr<Endpoint> server, client;
  // `crc`: MPA CRC32c on (the client asks, RFC 5044 §7.1); off otherwise.
  explicit RnicPair(bool crc = false) {
    EndpointOptions o;
    o.cm.policy.crc = crc ? mpa::CrcPolicy::Required : mpa::CrcPolicy::Off;
    o.cap.max_send_wr = 1024;
    o.cap.max_recv_wr = 1024;
    o.cq_depth = 8192;
    server = std::make_unique<Endpoint>(o);
    client = std::make_unique<Endpoint>(o);
    auto port = server->listen("127.0.0.1", 0);
    std::thread t([&] { (void)server->accept_one(); });
    auto r = client->connect("127.0.0.1", *port);
    t.join();
    if (!r) throw std::runtime_error(r.error());
    if (!client->params() || client->params()->crc != crc)
      throw std::runtime_error("RnicPair: CRC was not negotiated as asked");
  }
};

// RNIC: `total` octets as RDMA Writes of `chunk` octets, up to 16 outstanding, measured to the
// placement of the last octet at the server: a Send follows the Writes, and its receive
// completion at the server means every Write before it was placed (RDMAP ordering, RFC 5040
// §5.5: a Send completes only after the messages before it on the stream). The Writes' own
// send completions say only that TCP took the data, while the server's engine may still be
// writing into `dst`.
double rnic_write(RnicPair& p, std::size_t total, std::size_t chunk) {
  std::vector<char> src(chunk, 'x'), dst(chunk);
  char done_src = 'd', done_dst = 0;
  const Mr smr(*p.client, src.data(), src.size(), 0);
  const Mr dmr(*p.server, dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  const Mr done_smr(*p.client, &done_src, 1, 0);
  const Mr done_dmr(*p.server, &done_dst, 1, IBV_ACCESS_LOCAL_WRITE);
  if (post_one_recv(p.server->qp(), &done_dst, 1, done_dmr->lkey) != 0)
    throw std::runtime_error("rnic_write: ibv_post_recv failed");
  const OneWr wr{.op = IBV_WR_RDMA_WRITE,
                 .addr = src.data(),
                 .len = static_cast<std::uint32_t>(chunk),
                 .lkey = smr->lkey,
                 .remote_addr = reinterpret_cast<std::uint64_t>(dst.data()),
                 .rkey = dmr->rkey};
  const std::size_t n = total / chunk;
  std::size_t posted = 0, done = 0;
  auto t0 = Clock::now();
  ibv_wc wc[16];
  // n Writes, then the Send (all signaled): n + 1 send completions.
  while (done < n + 1) {
    while (posted < n && posted - done < 16) {
      if (post_one(p.client->qp(), wr) != 0)
        throw std::runtime_error("rnic_write: ibv_post_send (Write) failed");
      ++posted;
    }
    if (posted == n) {
      if (post_one(p.client->qp(), {.addr = &done_src, .len = 1, .lkey = done_smr->lkey}) != 0)
        throw std::runtime_error("rnic_write: ibv_post_send (Send) failed");
      ++posted;
    }
    // Sleep on the completion channel rather than spin: this machine may have 2 cores, and
    // both RNIC engines need one.
    int k = poll_ok(p.client->send_cq(), 16, wc, "rnic_write");
    if (k == 0) {
      wait_ok(*p.client, p.client->send_cq(), "rnic_write");
      k = 1;
    }
    done += static_cast<std::size_t>(k);
  }
  // The last Write is placed once the Send behind it is received: measure to that point.
  wait_ok(*p.server, p.server->recv_cq(), "rnic_write: the Send after the Writes");
  double t = seconds_since(t0);
  return t;  // every Write placed, every WR complete: the regions go, then the buffers
}

// RNIC: `n` Sends of `size` octets in chains of 64, each received. Exactly as many receives are
// posted as Sends arrive, so none is left posted into `dst` when it is freed (a receive left
// behind would take the next run's first Send into freed memory).
double rnic_sends(RnicPair& p, std::size_t size, int n) {
  constexpr int kChain = 64;
  std::vector<char> src(size, 'y'), dst(size * kChain * 2);
  const Mr smr(*p.client, src.data(), src.size(), 0);
  const Mr dmr(*p.server, dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE);
  std::vector<ibv_sge> rs(kChain * 2);
  std::vector<ibv_recv_wr> rw(kChain * 2);
  for (int i = 0; i < kChain * 2; ++i) {
    rs[i] = {reinterpret_cast<std::uint64_t>(&dst[i * size]), static_cast<std::uint32_t>(size),
             dmr->lkey};
    rw[i].sg_list = &rs[i];
    rw[i].num_sge = 1;
  }
  std::vector<ibv_sge> ss(kChain);
  std::vector<ibv_send_wr> sw(kChain);
  for (int i = 0; i < kChain; ++i) {
    ss[i] = {reinterpret_cast<std::uint64_t>(src.data()), static_cast<std::uint32_t>(size),
             smr->lkey};
    sw[i].sg_list = &ss[i];
    sw[i].num_sge = 1;
    sw[i].opcode = IBV_WR_SEND;
    sw[i].send_flags = i + 1 == kChain ? IBV_SEND_SIGNALED : 0u;
    sw[i].next = i + 1 < kChain ? &sw[i + 1] : nullptr;
  }
  auto post_recvs = [&](int half) {
    for (int i = 0; i < kChain; ++i) {
      ibv_recv_wr one = rw[half * kChain + i];
      one.next = nullptr;
      ibv_recv_wr* bad;
      if (ibv_post_recv(p.server->qp(), &one, &bad) != 0)
        throw std::runtime_error("rnic_sends: ibv_post_recv failed");
    }
  };
  const int chains = n / kChain;
  if (chains > 0) post_recvs(0);
  int received = 0;
  auto t0 = Clock::now();
  ibv_wc wc[64];
  for (int c = 0; c < chains; ++c) {
    // The next chain's receives go in while this one lands (none after the last chain).
    if (c + 1 < chains) post_recvs((c + 1) % 2);
    ibv_send_wr* bad;
    if (ibv_post_send(p.client->qp(), sw.data(), &bad) != 0)
      throw std::runtime_error("rnic_sends: ibv_post_send failed");
    // Wait for this chain to land before the next (receives must be there first).
    const int want = (c + 1) * kChain;
    while (received < want) {
      int k = poll_ok(p.server->recv_cq(), 64, wc, "rnic_sends: receive");
      if (k == 0) {
        wait_ok(*p.server, p.server->recv_cq(), "rnic_sends: receive");
        k = 1;
      }
      received += k;
    }
    // The chain's one signaled Send.
    if (poll_ok(p.client->send_cq(), 1, wc, "rnic_sends: send") == 0)
      wait_ok(*p.client, p.client->send_cq(), "rnic_sends: send");
  }
  double t = seconds_since(t0);
  return t;  // no receive is left posted and no Send outstanding: the regions go, then dst
}

// Raw TCP: `n` writes of `size` octets in bursts of 64 (one write each), read on another thread.
double tcp_small(std::size_t size, int n) {
  auto [c, s] = tcp_pair();
  std::vector<char> out(size, 'y'), in(1 << 16);
  const std::size_t total = size * static_cast<std::size_t>(n);
  auto t0 = Clock::now();
  std::thread rd([&, s = s] {
    std::size_t got = 0;
    while (got < total) {
      ssize_t r = read(s, in.data(), in.size());
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
  });
  for (int i = 0; i < n; ++i) write_exact(c, out.data(), size);
  rd.join();
  double t = seconds_since(t0);
  close(c);
  close(s);
  return t;
}

// Spins on ibv_poll_cq (as perftest does) for the next completion, at most 10 s.
ibv_wc spin_ok(ibv_cq* cq, const char* what) {
  const auto end = Clock::now() + std::chrono::seconds(10);
  ibv_wc wc;
  while (Clock::now() < end) {
    if (poll_ok(cq, 1, &wc, what) == 1) return wc;
  }
  throw std::runtime_error(std::string(what) + ": no completion within 10 s");
}

// RNIC: Send ping-pong of `size` octets. Each side posts a receive only for a message still to
// come, so none is left posted into the buffers when they are freed. `spin`: both sides spin on
// their CQs with busy polling on (the polling thread receives), instead of blocking on the
// completion channel.
double rnic_pingpong(RnicPair& p, std::size_t size, int n, bool spin = false) {
  p.server->ctx()->dev->set_busy_poll(spin);
  p.client->ctx()->dev->set_busy_poll(spin);
  auto next = [spin](Endpoint& e, ibv_cq* cq, const char* what) {
    return spin ? spin_ok(cq, what) : wait_ok(e, cq, what);
  };
  std::vector<char> a(size, 'a'), b(size), c(size);
  const Mr amr(*p.client, a.data(), size, 0);
  const Mr bmr(*p.client, b.data(), size, IBV_ACCESS_LOCAL_WRITE);
  const Mr cmr(*p.server, c.data(), size, IBV_ACCESS_LOCAL_WRITE);
  const auto len = static_cast<std::uint32_t>(size);
  auto post_recv = [&](Endpoint& e, char* buf, const Mr& mr) {
    if (post_one_recv(e.qp(), buf, len, mr->lkey) != 0)
      throw std::runtime_error("rnic_pingpong: ibv_post_recv failed");
  };
  auto send = [&](Endpoint& e, char* buf, const Mr& mr) {
    if (post_one(e.qp(), {.addr = buf, .len = len, .lkey = mr->lkey, .flags = 0}) != 0)
      throw std::runtime_error("rnic_pingpong: ibv_post_send failed");
  };
  // Block on the completion channel (as the TCP side blocks in read).
  std::string echo_error;
  std::thread echo([&] {
    try {
      for (int i = 0; i < n; ++i) {
        next(*p.server, p.server->recv_cq(), "rnic_pingpong: server receive");
        if (i + 1 < n) post_recv(*p.server, c.data(), cmr);
        send(*p.server, c.data(), cmr);
      }
    } catch (const std::exception& e) {
      echo_error = e.what();
    }
  });
  if (n > 0) post_recv(*p.server, c.data(), cmr);
  auto t0 = Clock::now();
  std::string error;
  try {
    for (int i = 0; i < n; ++i) {
      post_recv(*p.client, b.data(), bmr);
      send(*p.client, a.data(), amr);
      next(*p.client, p.client->recv_cq(), "rnic_pingpong: client receive");
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  double t = seconds_since(t0);
  echo.join();
  if (!error.empty()) throw std::runtime_error(error);
  if (!echo_error.empty()) throw std::runtime_error(echo_error);
  // The server's last reply was received, so its transmitter is done with `c`.
  return t;
}

double best(int reps, const std::function<double()>& f) {
  double b = 1e30;
  for (int i = 0; i < reps; ++i) b = std::min(b, f());
  return b;
}

int run(int reps, std::size_t mib, int messages, int pingpongs) {
  const std::size_t total = mib << 20;
  std::printf("%-44s %14s %14s %8s\n", "measurement", "rnic", "raw TCP", "ratio");
  auto line = [](const char* what, double rnic, double tcp, const char* unit, bool higher_better) {
    std::printf("%-44s %10.1f %-3s %10.1f %-3s %7.2fx\n", what, rnic, unit, tcp, unit,
                higher_better ? rnic / tcp : tcp / rnic);
  };
  {
    RnicPair p, crc(true);
    for (std::size_t chunk : {std::size_t{64} << 10, std::size_t{1} << 20}) {
      const double r = best(reps, [&] { return rnic_write(p, total, chunk); });
      const double t = best(reps, [&] { return tcp_stream(total, chunk); });
      char what[80];
      std::snprintf(what, sizeof what, "bulk, %zu KiB RDMA Writes vs writes (MB/s)", chunk >> 10);
      line(what, total / r / 1e6, total / t / 1e6, "", true);
    }
    // Issue 15: CRC costs at most 5 %: the same Writes with CRC32c on against off, same run
    // (the "raw TCP" column is the CRC-off run here).
    // On and off alternate, so that the machine's drift does not favour either.
    for (std::size_t chunk : {std::size_t{64} << 10, std::size_t{1} << 20}) {
      double on = 1e30, off = 1e30;
      for (int i = 0; i < reps; ++i) {
        on = std::min(on, rnic_write(crc, total, chunk));
        off = std::min(off, rnic_write(p, total, chunk));
      }
      char what[80];
      std::snprintf(what, sizeof what, "bulk, %zu KiB Writes, CRC on vs off (MB/s)", chunk >> 10);
      line(what, total / on / 1e6, total / off / 1e6, "", true);
    }
  }
  {
    const int n = messages;
    RnicPair q;
    const double r = best(reps, [&] { return rnic_sends(q, 64, n); });
    const double t = best(reps, [&] { return tcp_small(64, n); });
    line("64-octet Sends vs 64-octet writes (k msg/s)", n / r / 1e3, n / t / 1e3, "", true);
  }
  {
    const int n = pingpongs;
    RnicPair q;
    const double r = best(reps, [&] { return rnic_pingpong(q, 64, n); });
    const double t = best(reps, [&] { return tcp_pingpong(64, n); });
    line("64-octet ping-pong round trip (us)", r / n * 1e6, t / n * 1e6, "", false);
    const double rs = best(reps, [&] { return rnic_pingpong(q, 64, n, true); });
    const double ts = best(reps, [&] { return tcp_pingpong(64, n, true); });
    line("64-octet ping-pong, both spinning (us)", rs / n * 1e6, ts / n * 1e6, "", false);
  }
  std::printf(
      "ratio: rnic relative to raw TCP (above 1 is better than raw TCP); in the CRC rows, CRC on\n"
      "relative to CRC off.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rnic_bench: the emulated RNIC against raw TCP on the same loopback, same run"};
  int reps = 5;
  std::size_t mib = 256;
  int messages = 64 * 1000, pingpongs = 5000;
  app.add_option("--reps", reps, "Runs per measurement (the best is kept)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--mib", mib, "MiB moved per bulk measurement")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  app.add_option("--messages", messages,
                 "64-octet Sends per message-rate measurement (a multiple of 64)")
      ->capture_default_str()
      ->check(CLI::Range(64, 1 << 30));
  app.add_option("--pingpongs", pingpongs, "Round trips per ping-pong measurement")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  CLI11_PARSE(app, argc, argv);
  messages -= messages % 64;
  try {
    return run(reps, mib, messages, pingpongs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rnic_bench: %s\n", e.what());
    return 1;
  }
}
