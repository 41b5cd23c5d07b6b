// rnic ping: the rping exchange of librdmacm's example, over the emulated RNIC. Per ping the
// client fills a buffer and advertises it with a Send (address, STag, size, big-endian as in
// rping's struct rping_rdma_info); the server RDMA Reads it and answers with a Send; the client
// advertises a second, empty buffer; the server RDMA Writes the data back into it and answers;
// the client checks the two buffers are equal. Speaks to real rping on siw (same messages).
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <thread>

#include "common/log.hpp"
#include "tools/app_options.hpp"
#include "tools/commands.hpp"
#include "tools/explain_printer.hpp"
#include "tools/live_ladder.hpp"

namespace iwarp::tools {

namespace {

using namespace verbs;

struct PingOptions {
  bool server = false;
  std::string client;
  std::string bind = "0.0.0.0";
  int port = 7174;
  int count = 10;
  std::size_t size = 64;
  std::size_t max_size = std::size_t{16} << 20;
  bool verbose = false;
  bool quiet = false;
  bool explain = false;
  std::string fault;
  std::string ladder;  // --ladder OUT.svg
  std::string html;    // --html OUT.html
  std::shared_ptr<LadderRecorder> recorder;
  AppOptions app;
};

// rping's struct rping_rdma_info: buf (be64), rkey (be32), size (be32).
struct Advert {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0, size = 0;
};
constexpr std::size_t kAdvertSize = 16;
constexpr std::size_t kMaxPing = std::size_t{1} << 30;  // --size and --max-size at most

void encode(const Advert& a, std::uint8_t* p) {
  store_be64(p, a.addr);
  store_be32(p + 8, a.rkey);
  store_be32(p + 12, a.size);
}
Advert decode(const std::uint8_t* p) {
  return {load_be64(p), load_be32(p + 8), load_be32(p + 12)};
}

// Waits for one completion and checks it; on failure says what and where. With --explain, the
// completion of a Send or Write `wr` is explained (a Read's completion the receive engine
// reports itself, when the last Read Response lands).
std::expected<ibv_wc, std::string> expect_wc(Endpoint& ep, ibv_cq* cq, const char* what,
                                             ExplainPrinter* x = nullptr,
                                             const OneWr* wr = nullptr) {
  auto wc = ep.wait(cq);
  if (wc && x && wr && wr->op != IBV_WR_RDMA_READ) x->completed(*wr, *wc);
  if (!wc) {
    std::string why = wc.error();
    if (ep.qp() && !ep.qp()->qp->error_reason().empty())
      why += " (" + ep.qp()->qp->error_reason() + ")";
    return std::unexpected(fmt::format("{}: {}", what, why));
  }
  if (wc->status != IBV_WC_SUCCESS) {
    std::string why = ep.qp() ? ep.qp()->qp->error_reason() : std::string();
    return std::unexpected(fmt::format("{}: completion {}{}{}", what, ibv_wc_status_str(wc->status),
                                       why.empty() ? "" : " - ", why));
  }
  return wc;
}

// A refused post ends the program with the reason (caught by the subcommand's runner).
struct PostFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Posts one work request (explained first with --explain) and returns it.
OneWr post1(Endpoint& ep, ExplainPrinter* x, ibv_wr_opcode op, ibv_mr* mr, void* addr,
            std::uint32_t len, std::uint64_t raddr = 0, std::uint32_t rkey = 0) {
  const OneWr wr{
      .op = op, .addr = addr, .len = len, .lkey = mr->lkey, .remote_addr = raddr, .rkey = rkey};
  if (x) x->posted(wr);
  if (post_one(ep.qp(), wr) != 0) throw PostFailed(ibv_last_error());
  return wr;
}

void post_recv1(Endpoint& ep, ibv_mr* mr, void* addr, std::uint32_t len) {
  if (post_one_recv(ep.qp(), addr, len, mr->lkey) != 0) throw PostFailed(ibv_last_error());
}

int fail_with(const std::string& side, const std::string& msg) {
  print_lines("rnic ping " + side + ": " + msg, std::cerr);
  return 1;
}

// --fault no-recv (server): no receive is posted for the client's sink advertisement, so its
// Send must be answered with a Terminate (DDP untagged 0x02, no buffer) and both sides end.
int suffer_fault(Endpoint& ep) {
  print_lines("fault: no receive posted for the client's next Send");
  auto ev = ep.wait_event(RDMA_CM_EVENT_DISCONNECTED);
  if (!ev) return fail_with("server", "the connection did not end: " + ev.error());
  const std::string why = ep.qp()->qp->error_reason();
  const bool err = ibv_query_qp_state(ep.qp()) == IBV_QPS_ERR;
  print_lines(fmt::format("QP {}: {}", err ? "ERROR" : "not in ERROR", why));
  return err && why.starts_with("sent Terminate") ? 0 : 1;
}

int run_server(const PingOptions& o) {
  std::vector<std::uint8_t> recv_buf(kAdvertSize), send_buf(kAdvertSize), rdma_buf(o.size);
  ibv_mr *recv_mr = nullptr, *send_mr = nullptr, *rdma_mr = nullptr;
  auto eo = endpoint_options(o.app);
  const auto explainer = make_explainer(o.explain, eo, "server");
  if (o.recorder) o.recorder->attach(eo);  // --ladder
  ExplainPrinter* x = explainer.get();
  eo.on_qp_created = [&](Endpoint& ep) {
    recv_mr = ep.reg(recv_buf.data(), recv_buf.size(), IBV_ACCESS_LOCAL_WRITE);
    send_mr = ep.reg(send_buf.data(), send_buf.size(), 0);
    // iWARP: the sink of an RDMA Read needs REMOTE_WRITE.
    rdma_mr =
        ep.reg(rdma_buf.data(), rdma_buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    post_recv1(ep, recv_mr, recv_buf.data(), kAdvertSize);
  };
  Endpoint ep(eo);
  auto port = ep.listen(o.bind, static_cast<std::uint16_t>(o.port));
  if (!port) return fail_with("server", *&port.error());
  if (!o.quiet) print_lines(fmt::format("server listening on {}:{}", o.bind, *port));
  if (auto a = ep.accept_one(); !a) return fail_with("server", a.error());
  if (!o.quiet)
    print_lines(
        fmt::format("connection from {}: {}", ep.id()->cm->peer(), describe_params(*ep.params())));
  int pings = 0;
  // Goodput: from the first advertisement to the last go-ahead's completion, the octets read from
  // the client (the same number is written back); what the placement benchmark's siw arm reports.
  std::chrono::steady_clock::time_point t0{}, t1{};
  double octets_read = 0;
  for (;;) {
    auto wc = ep.wait(ep.recv_cq());
    if (!wc || wc->status != IBV_WC_SUCCESS) break;  // the client is done (or gone)
    if (pings == 0) t0 = std::chrono::steady_clock::now();
    Advert src = decode(recv_buf.data());
    if (src.size > rdma_buf.size()) {
      // A client with larger pings: the buffer grows to what it advertised, up to --max-size
      // (a size from the wire sizes nothing beyond that).
      if (src.size > o.max_size)
        return fail_with("server",
                         src.size > kMaxPing
                             ? fmt::format("client advertised {} octets, over --max-size {} "
                                           "and over the largest ping ({})",
                                           src.size, o.max_size, kMaxPing)
                             : fmt::format("client advertised {} octets, over --max-size {} "
                                           "(start the server with --max-size {})",
                                           src.size, o.max_size, src.size));
      // Before the memory goes: once deregistered the engine no longer touches it.
      if (!ep.dereg(rdma_mr)) return fail_with("server", "cannot deregister the ping buffer");
      rdma_buf.assign(src.size, 0);
      rdma_mr = ep.reg(rdma_buf.data(), rdma_buf.size(),
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      if (!rdma_mr)
        return fail_with("server",
                         fmt::format("cannot register {} octets for the client's pings", src.size));
      if (!o.quiet)
        print_lines(
            fmt::format("server: buffer grown to {} octets for the client's pings", src.size));
    }
    post1(ep, x, IBV_WR_RDMA_READ, rdma_mr, rdma_buf.data(), src.size, src.addr, src.rkey);
    if (auto r = expect_wc(ep, ep.send_cq(), "RDMA Read of the client's buffer"); !r)
      return fail_with("server", r.error());
    if (o.verbose)
      print_lines("server ping data: " +
                  std::string(reinterpret_cast<char*>(rdma_buf.data()),
                              strnlen(reinterpret_cast<char*>(rdma_buf.data()), src.size)));
    if (o.fault != "no-recv") post_recv1(ep, recv_mr, recv_buf.data(), kAdvertSize);
    encode({reinterpret_cast<std::uint64_t>(rdma_buf.data()), rdma_mr->rkey, src.size},
           send_buf.data());
    const auto go1 = post1(ep, x, IBV_WR_SEND, send_mr, send_buf.data(), kAdvertSize);
    if (auto r = expect_wc(ep, ep.send_cq(), "go-ahead Send", x, &go1); !r)
      return fail_with("server", r.error());
    if (o.fault == "no-recv") return suffer_fault(ep);
    if (auto r = expect_wc(ep, ep.recv_cq(), "the client's sink advertisement"); !r)
      return fail_with("server", r.error());
    Advert sink = decode(recv_buf.data());
    post_recv1(ep, recv_mr, recv_buf.data(), kAdvertSize);
    const auto wrt = post1(ep, x, IBV_WR_RDMA_WRITE, rdma_mr, rdma_buf.data(),
                           std::min(sink.size, src.size), sink.addr, sink.rkey);
    if (auto r = expect_wc(ep, ep.send_cq(), "RDMA Write into the client's sink", x, &wrt); !r)
      return fail_with("server", r.error());
    const auto go2 = post1(ep, x, IBV_WR_SEND, send_mr, send_buf.data(), kAdvertSize);
    if (auto r = expect_wc(ep, ep.send_cq(), "go-ahead Send", x, &go2); !r)
      return fail_with("server", r.error());
    ++pings;
    octets_read += src.size;
    t1 = std::chrono::steady_clock::now();
  }
  if (auto s = describe_segment_path(o.app, ep, "server: "); !s.empty()) print_lines(s);
  if (!o.quiet) {
    const double secs = std::chrono::duration<double>(t1 - t0).count();
    print_lines(pings > 0 && secs > 0
                    ? fmt::format("server done: {} pings served in {:.3f} s: {:.1f} MB/s read "
                                  "from the client (and written back)",
                                  pings, secs, octets_read / secs / 1e6)
                    : fmt::format("server done: {} pings served", pings));
  }
  return pings > 0 ? 0 : 1;
}

// --fault unknown-stag: an RDMA Write to an STag the server never advertised (rping's server
// advertises none), then a Send behind it. The server must answer with a Terminate (DDP tagged
// invalid STag) and both sides end in ERROR; this side reports what it received.
int commit_fault(Endpoint& ep, ExplainPrinter* x, ibv_mr* mr, void* buf) {
  print_lines("fault: RDMA Write of 16 octets to STag 0x00dead00, never advertised");
  const OneWr posted[] = {post1(ep, x, IBV_WR_RDMA_WRITE, mr, buf, 16, 0, 0x00dead00u),
                          post1(ep, x, IBV_WR_SEND, mr, buf, 16)};
  auto ev = ep.wait_event(RDMA_CM_EVENT_DISCONNECTED);
  if (!ev) return fail_with("client", "the connection did not end: " + ev.error());
  print_lines("DISCONNECTED: " + ev->detail);
  ibv_wc wc;
  for (std::size_t n = 0; ibv_poll_cq(ep.send_cq(), 1, &wc) == 1; ++n) {
    print_lines(fmt::format(
        "send WR completion {} ({}){}", ibv_wc_status_str(wc.status), ibv_wc_opcode_str(wc.opcode),
        wc.vendor_err ? fmt::format(" Terminate {}/{}/0x{:02x}", wc.vendor_err >> 16,
                                    (wc.vendor_err >> 8) & 0xff, wc.vendor_err & 0xff)
                      : ""));
    // In post order (RFC 5040 §5.3): the n-th completion is the n-th work request's.
    if (x && n < std::size(posted)) x->completed(posted[n], wc);
  }
  const std::string why = ep.qp()->qp->error_reason();
  const bool err = ibv_query_qp_state(ep.qp()) == IBV_QPS_ERR;
  print_lines(fmt::format("QP {}: {}", err ? "ERROR" : "not in ERROR", why));
  return err && why.starts_with("peer sent Terminate") ? 0 : 1;
}

int run_client(const PingOptions& o) {
  std::vector<std::uint8_t> recv_buf(kAdvertSize), send_buf(kAdvertSize), start_buf(o.size),
      rdma_buf(o.size);
  ibv_mr *recv_mr = nullptr, *send_mr = nullptr, *start_mr = nullptr, *rdma_mr = nullptr;
  auto eo = endpoint_options(o.app);
  const auto explainer = make_explainer(o.explain, eo, "client");
  if (o.recorder) o.recorder->attach(eo);  // --ladder
  ExplainPrinter* x = explainer.get();
  eo.on_qp_created = [&](Endpoint& ep) {
    recv_mr = ep.reg(recv_buf.data(), recv_buf.size(), IBV_ACCESS_LOCAL_WRITE);
    send_mr = ep.reg(send_buf.data(), send_buf.size(), 0);
    start_mr = ep.reg(start_buf.data(), start_buf.size(), IBV_ACCESS_REMOTE_READ);
    rdma_mr =
        ep.reg(rdma_buf.data(), rdma_buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  };
  Endpoint ep(eo);
  if (auto c = ep.connect(o.client, static_cast<std::uint16_t>(o.port)); !c)
    return fail_with("client", fmt::format("connecting to {}:{}: {}", o.client, o.port, c.error()));
  if (!o.quiet)
    print_lines(
        fmt::format("connected to {}: {}", ep.id()->cm->peer(), describe_params(*ep.params())));
  if (o.fault == "unknown-stag") return commit_fault(ep, x, send_mr, send_buf.data());
  double total_us = 0;
  for (int i = 0; i < o.count; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    // rping's pattern: "rdma-ping-N: " then a rotating run of printable characters.
    std::string head = fmt::format("rdma-ping-{}: ", i);
    for (std::size_t k = 0; k < o.size; ++k)
      start_buf[k] = k < head.size() ? static_cast<std::uint8_t>(head[k])
                                     : static_cast<std::uint8_t>(65 + (k + i) % 57);
    if (o.size > 0) start_buf[o.size - 1] = 0;
    std::fill(rdma_buf.begin(), rdma_buf.end(), 0);
    post_recv1(ep, recv_mr, recv_buf.data(), kAdvertSize);
    encode({reinterpret_cast<std::uint64_t>(start_buf.data()), start_mr->rkey,
            static_cast<std::uint32_t>(o.size)},
           send_buf.data());
    const auto src_ad = post1(ep, x, IBV_WR_SEND, send_mr, send_buf.data(), kAdvertSize);
    if (auto r = expect_wc(ep, ep.send_cq(), "Send of the source advertisement", x, &src_ad); !r)
      return fail_with("client", r.error());
    if (auto r = expect_wc(ep, ep.recv_cq(), "the server's go-ahead after its Read"); !r)
      return fail_with("client", r.error());
    post_recv1(ep, recv_mr, recv_buf.data(), kAdvertSize);
    encode({reinterpret_cast<std::uint64_t>(rdma_buf.data()), rdma_mr->rkey,
            static_cast<std::uint32_t>(o.size)},
           send_buf.data());
    const auto sink_ad = post1(ep, x, IBV_WR_SEND, send_mr, send_buf.data(), kAdvertSize);
    if (auto r = expect_wc(ep, ep.send_cq(), "Send of the sink advertisement", x, &sink_ad); !r)
      return fail_with("client", r.error());
    if (auto r = expect_wc(ep, ep.recv_cq(), "the server's go-ahead after its Write"); !r)
      return fail_with("client", r.error());
    if (start_buf != rdma_buf) {
      std::size_t at = 0;
      while (start_buf[at] == rdma_buf[at]) ++at;
      return fail_with("client",
                       fmt::format("ping {}: data differs at octet {} of {}", i, at, o.size));
    }
    total_us +=
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (o.verbose)
      print_lines("ping data: " +
                  std::string(reinterpret_cast<char*>(start_buf.data()),
                              strnlen(reinterpret_cast<char*>(start_buf.data()), o.size)));
  }
  if (!o.quiet)
    print_lines(
        fmt::format("{} pings of {} octets verified, {:.1f} us average round trip "
                    "(Send, Read, Send, Write, Send)",
                    o.count, o.size, o.count ? total_us / o.count : 0.0));
  if (auto s = describe_segment_path(o.app, ep); !s.empty()) print_lines(s);
  rdma_disconnect(ep.id());
  ep.wait_event(RDMA_CM_EVENT_DISCONNECTED);
  return 0;
}

}  // namespace

Runner add_ping_command(CLI::App& app) {
  auto o = std::make_shared<PingOptions>();
  auto* sub = app.add_subcommand(
      "ping",
      "The rping exchange over the emulated RNIC: Send, RDMA Read, Send, RDMA Write, verify.\n"
      "Run one side with --server and the other with --client ADDR. Interoperates with\n"
      "librdmacm's rping (for example on Linux siw).");
  add_peer_options(*sub, o->server, o->client, o->bind, o->port, "Listen for one client",
                   "TCP port");
  sub->add_option("--count,-C", o->count, "Pings to run")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  sub->add_option("--size,-S", o->size,
                  "Octets per ping (client); the server's starting buffer, which grows to what\n"
                  "the client advertises, up to --max-size")
      ->check(CLI::Range(std::size_t{1}, kMaxPing))
      ->capture_default_str();
  sub->add_option("--max-size", o->max_size,
                  "Server: the largest ping it grows its buffer to (a larger advertisement ends\n"
                  "the run with an error)")
      ->check(CLI::Range(std::size_t{1}, kMaxPing))
      ->capture_default_str();
  sub->add_flag("--verbose,-v", o->verbose, "Print each ping's data");
  sub->add_flag("--quiet,-q", o->quiet, "Print only errors");
  sub->add_flag("--explain", o->explain,
                "Print each event as it happens: the Sends, RDMA Reads and Writes this side\n"
                "posts and their completions, and what its receive engine reports (placements,\n"
                "completions, doorbells, Terminates), each line starting \"server:\" or\n"
                "\"client:\" and followed by an indented sentence \"why: ...\" saying what it\n"
                "means in RDMA terms and the RFC rule behind it (some 15 events a ping on each\n"
                "side: use a small --count)");
  sub->add_option("--fault", o->fault,
                  "A protection error on purpose:\n"
                  "  unknown-stag (client): an RDMA Write to an STag the server never advertised\n"
                  "  no-recv (server): no receive posted for the client's second Send")
      ->check(CLI::IsMember({"unknown-stag", "no-recv"}));
  sub->add_option("--ladder", o->ladder,
                  "Write the ladder (message sequence) diagram of the run as SVG: the messages of\n"
                  "this side's capture (--pcap, or a temporary one) and, beside them on this\n"
                  "side's column, what its receive engine did (placements, CQEs, doorbells,\n"
                  "Terminates), numbered in order (docs/ladder.md)");
  add_html_option(*sub, o->html);
  add_app_options(*sub, o->app);
  return [o, sub]() -> int {
    if (!o->server && o->client.empty()) {
      std::cerr << "rnic ping: give --server or --client ADDR (see rnic ping --help)\n";
      return 2;
    }
    (void)sub;
    if (!o->fault.empty() && (o->fault == "no-recv") != o->server) {
      std::cerr << "rnic ping: --fault " << o->fault << " is for the "
                << (o->server ? "client" : "server") << " side\n";
      return 2;
    }
    try {
      if (o->ladder.empty() && o->html.empty()) return o->server ? run_server(*o) : run_client(*o);
      return run_with_views("ping", o->ladder, o->html, o->server, o->app, o->recorder,
                            [&] { return o->server ? run_server(*o) : run_client(*o); });
    } catch (const PostFailed& e) {
      return fail_with(o->server ? "server" : "client", e.what());
    }
  };
}

}  // namespace iwarp::tools
