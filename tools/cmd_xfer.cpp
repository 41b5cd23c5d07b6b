// rnic xfer: every RDMA operation between two processes, each checked byte for byte, or one
// deliberate protection error to watch the Terminate it causes. The client drives; the server
// answers small control messages and checks what landed in its memory. Both sides print what
// happened, and exit 0 only when everything they saw is what the RFCs require.
//
// Control messages are Sends of a 32-octet header (big-endian): command, size, seed, offset,
// result, then free text. Every buffer the server exposes is surrounded by guard pages filled
// with a pattern that is checked at the end: no octet outside a registered region may change.
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/log.hpp"
#include "replay/replayer.hpp"
#include "tools/app_options.hpp"
#include "tools/commands.hpp"
#include "tools/explain_printer.hpp"
#include "tools/live_ladder.hpp"

namespace iwarp::tools {

namespace {

using namespace verbs;

constexpr std::size_t kCtl = 256;  // control message buffer
constexpr std::uint8_t kGuard = 0xA5;

enum Cmd : std::uint32_t {
  kHello = 1,
  kAdvert,       // server -> client: the regions it exposes
  kExpectSend,   // the next message is data: size, seed
  kCheckWrite,   // verify the good region: size, seed, offset
  kPrepRead,     // fill the good region with size octets of seed
  kExpectImm,    // the next message is Immediate Data after a Write: size, seed (imm)
  kCheckAtomic,  // report the counter
  kFault,        // the client is about to commit fault `size`; arm for it
  kBye,
  kResult,  // server -> client: result 0 ok, else text
};

struct Ctl {
  std::uint32_t cmd = 0;
  std::uint64_t size = 0, seed = 0, offset = 0;
  std::uint32_t result = 0;
  std::string text;
};

void put(const Ctl& c, std::uint8_t* p) {
  std::memset(p, 0, kCtl);
  store_be32(p, c.cmd);
  store_be64(p + 4, c.size);
  store_be64(p + 12, c.seed);
  store_be64(p + 20, c.offset);
  store_be32(p + 28, c.result);
  std::memcpy(p + 32, c.text.data(), std::min(c.text.size(), kCtl - 33));
}

Ctl get(const std::uint8_t* p) {
  Ctl c{load_be32(p),      load_be64(p + 4),  load_be64(p + 12),
        load_be64(p + 20), load_be32(p + 28), {}};
  c.text.assign(reinterpret_cast<const char*>(p + 32),
                strnlen(reinterpret_cast<const char*>(p + 32), kCtl - 33));
  return c;
}

std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t i) {
  return static_cast<std::uint8_t>(seed * 131 + i * 7 + (i >> 8) * 13 + (i >> 16));
}
void fill(std::uint8_t* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = pattern_byte(seed, i);
}
// The offset of the first wrong octet, or -1.
long long check(const std::uint8_t* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != pattern_byte(seed, i)) return static_cast<long long>(i);
  return -1;
}

// A buffer with a guard page on each side (filled with kGuard, checked later).
class Guarded {
 public:
  explicit Guarded(std::size_t size) : size_(size) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    guard_ = page;
    total_ = guard_ * 2 + ((size + page - 1) / page) * page;
    base_ = static_cast<std::uint8_t*>(
        mmap(nullptr, total_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) throw std::runtime_error("mmap failed");
    std::memset(base_, kGuard, total_);
  }
  ~Guarded() { munmap(base_, total_); }
  std::uint8_t* data() const { return base_ + guard_; }
  std::size_t size() const { return size_; }
  // True when every octet outside [data, data + size) still holds the guard pattern.
  bool guards_intact() const {
    for (std::size_t i = 0; i < total_; ++i) {
      if (i >= guard_ && i < guard_ + size_) continue;
      if (base_[i] != kGuard) return false;
    }
    return true;
  }

 private:
  std::uint8_t* base_ = nullptr;
  std::size_t size_, guard_ = 0, total_ = 0;
};

struct Region {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t len = 0;
};

// The faults a client can commit on purpose.
const std::map<std::string, std::string> kFaults = {
    {"write-no-remote-write", "RDMA Write to a region registered without REMOTE_WRITE"},
    {"write-out-of-bounds", "RDMA Write running past the end of a region"},
    {"unknown-stag", "RDMA Write to an STag that was never registered"},
    {"stale-key", "RDMA Write with a valid STag index but an old key"},
    {"read-beyond-ird", "more RDMA Reads outstanding than the responder's IRD"},
    {"send-no-recv", "a Send when the peer has no receive posted"},
    {"send-too-long", "a Send larger than the posted receive buffer"},
    {"invalidated-stag", "Send with Invalidate, then an RDMA Write to the invalidated STag"},
    {"pd-mismatch", "RDMA Write to a region of another protection domain"},
};

struct XferOptions {
  bool server = false;
  std::string client;
  std::string bind = "127.0.0.1";
  int port = 7175;
  std::string port_file;
  std::vector<std::size_t> sizes{0, 1, 4095, 4096, 65537, 1u << 20, 16u << 20};
  std::vector<std::string> ops{"send", "write", "read", "write-imm", "atomic"};
  std::string fault;
  bool unsafe_ignore_ord = false;
  int loop = 0;  // client: then keep Writing this many MiB (for kill tests)
  bool verbose = false;
  bool explain = false;
  std::string ladder;  // --ladder OUT.svg
  std::string html;    // --html OUT.html
  std::shared_ptr<LadderRecorder> recorder;
  AppOptions app;
};

// With --explain, every QP the endpoint starts reports to a printer for `side`.
void add_explainer(const XferOptions& o, EndpointOptions& eo, const char* side) {
  make_explainer(o.explain, eo, side);
  if (o.recorder) o.recorder->attach(eo);  // --ladder
}

int say_fail(const char* side, const std::string& s) {
  print_lines(fmt::format("{}: FAIL {}", side, s));
  return 1;
}

// ---------------------------------------------------------------- server

// The server's memory: the regions it advertises (each between guard pages), the receive slot
// for the client's commands and data, its replies, and a second protection domain.
struct ServerRegions {
  explicit ServerRegions(std::size_t max)
      : good(max),
        noremote(4096),
        otherpd(4096),
        inval(4096),
        slot(max + kCtl),
        counter(8),
        ctl_out(kCtl) {}
  Guarded good, noremote, otherpd, inval, slot, counter;
  std::vector<std::uint8_t> ctl_out;
  ibv_mr *good_mr = nullptr, *noremote_mr = nullptr, *otherpd_mr = nullptr, *inval_mr = nullptr,
         *slot_mr = nullptr, *ctl_mr = nullptr, *counter_mr = nullptr;
  ibv_pd* pd2 = nullptr;

  void register_all(Endpoint& ep) {
    const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    good_mr = ep.reg(good.data(), good.size(), all);
    noremote_mr =
        ep.reg(noremote.data(), noremote.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    inval_mr = ep.reg(inval.data(), inval.size(), all);
    slot_mr = ep.reg(slot.data(), slot.size(), IBV_ACCESS_LOCAL_WRITE);
    ctl_mr = ep.reg(ctl_out.data(), ctl_out.size(), 0);
    counter_mr = ep.reg(counter.data(), 8, all | IBV_ACCESS_REMOTE_ATOMIC);
    pd2 = ibv_alloc_pd(ep.ctx());
    otherpd_mr = ibv_reg_mr(pd2, otherpd.data(), otherpd.size(), all);
    std::memset(counter.data(), 0, 8);
    post_slot(ep, static_cast<std::uint32_t>(slot.size()));
  }
  int post_slot(Endpoint& ep, std::uint32_t len) {
    return post_one_recv(ep.qp(), slot.data(), len, slot_mr->lkey);
  }
  int post_whole_slot(Endpoint& ep) {
    return post_slot(ep, static_cast<std::uint32_t>(slot.size()));
  }
  // The advertisement: every region, as text "name addr rkey len" per line.
  std::string advertisement() const {
    std::string adv;
    auto add = [&](const char* n, ibv_mr* mr, std::size_t len) {
      adv +=
          fmt::format("{} {} {} {}\n", n, reinterpret_cast<std::uint64_t>(mr->addr), mr->rkey, len);
    };
    add("good", good_mr, good.size());
    add("noremote", noremote_mr, noremote.size());
    add("otherpd", otherpd_mr, otherpd.size());
    add("inval", inval_mr, inval.size());
    add("counter", counter_mr, 8);
    return adv;
  }
  bool guards_intact() const {
    return good.guards_intact() && noremote.guards_intact() && otherpd.guards_intact() &&
           inval.guards_intact() && slot.guards_intact() && counter.guards_intact();
  }
};

// The server's connection: its regions, its replies and the client's next message.
struct ServerConnection {
  ServerRegions& r;
  Endpoint& ep;

  bool reply(std::uint32_t result, std::string text) {
    put(Ctl{kResult, 0, 0, 0, result, std::move(text)}, r.ctl_out.data());
    if (post_one(ep.qp(), {.addr = r.ctl_out.data(), .len = kCtl, .lkey = r.ctl_mr->lkey}) != 0)
      return false;
    auto wc = ep.wait(ep.send_cq());
    return wc && wc->status == IBV_WC_SUCCESS;
  }
  std::expected<ibv_wc, std::string> next() {
    auto wc = ep.wait(ep.recv_cq());
    if (!wc) return std::unexpected(wc.error());
    if (wc->status != IBV_WC_SUCCESS)
      return std::unexpected(
          fmt::format("receive completed with {}", ibv_wc_status_str(wc->status)));
    return wc;
  }
  void advertise() {
    const std::string adv = r.advertisement();
    r.post_whole_slot(ep);
    put(Ctl{kAdvert, 0, 0, 0, 0, {}}, r.ctl_out.data());
    std::memcpy(r.ctl_out.data() + 32, adv.data(), std::min(adv.size(), kCtl - 33));
    post_one(ep.qp(), {.addr = r.ctl_out.data(), .len = kCtl, .lkey = r.ctl_mr->lkey, .flags = 0});
  }
};

// What one checked command found: result 0 and "ok", or 1 and what was wrong.
struct Verdict {
  std::uint32_t result = 0;
  std::string text = "ok";
  void wrong(std::string why) {
    result = 1;
    text = std::move(why);
  }
};

// A Send or a Write with Immediate the client is about to make: a receive for it, "ready",
// then its completion.
std::expected<ibv_wc, std::string> receive_data(ServerConnection& sc) {
  sc.r.post_whole_slot(sc.ep);
  sc.reply(0, "ready");
  return sc.next();
}

// The checked commands (every command but hello, bye and fault).
std::expected<Verdict, std::string> check_command(ServerConnection& sc, const Ctl& c) {
  ServerRegions& r = sc.r;
  Verdict v;
  switch (c.cmd) {
    case kExpectSend: {
      auto d = receive_data(sc);
      if (!d) return std::unexpected(d.error());
      long long bad = d->byte_len != c.size ? 0 : check(r.slot.data(), c.size, c.seed);
      if (d->byte_len != c.size || bad >= 0)
        v.wrong(
            fmt::format("Send of {}: byte_len {}, first wrong octet {}", c.size, d->byte_len, bad));
      break;
    }
    case kCheckWrite:
      if (long long bad = check(r.good.data() + c.offset, c.size, c.seed); bad >= 0)
        v.wrong(fmt::format("Write of {}: first wrong octet {}", c.size, bad));
      break;
    case kPrepRead:
      fill(r.good.data(), c.size, c.seed);
      break;
    case kExpectImm: {
      auto d = receive_data(sc);
      if (!d) return std::unexpected(d.error());
      long long bad = check(r.good.data(), c.size, c.seed);
      if (d->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(d->wc_flags & IBV_WC_WITH_IMM) ||
          d->imm_data != static_cast<std::uint32_t>(c.seed) || d->byte_len != c.size || bad >= 0)
        v.wrong(
            fmt::format("Write with Immediate of {}: opcode {} imm {} byte_len {} wrong octet {}",
                        c.size, ibv_wc_opcode_str(d->opcode), d->imm_data, d->byte_len, bad));
      break;
    }
    case kCheckAtomic: {
      std::uint64_t value;
      std::memcpy(&value, r.counter.data(), 8);
      if (value != c.seed) v.wrong(fmt::format("counter is {}, expected {}", value, c.seed));
      break;
    }
    default:
      v.wrong(fmt::format("unknown command {}", c.cmd));
  }
  return v;
}

// The client announced a fault: the receives it needs, "armed", then the end of the connection
// it must cause.
void arm_fault(ServerConnection& sc, const std::string& fault) {
  if (fault == "send-too-long") {
    // A small receive, and the client's Send will not fit.
    sc.r.post_slot(sc.ep, 16);
  } else if (fault == "invalidated-stag") {
    sc.r.post_whole_slot(sc.ep);
    sc.r.post_whole_slot(sc.ep);
  } else if (fault != "send-no-recv") {
    sc.r.post_whole_slot(sc.ep);
  }
  sc.reply(0, "armed");
  // The connection must now end: wait for that, not for a command.
  auto ev = sc.ep.wait_event(RDMA_CM_EVENT_DISCONNECTED);
  print_lines("server: " +
              (ev ? "DISCONNECTED: " + ev->detail : "the connection did not end: " + ev.error()));
}

// After a fault: the receive completions the connection's end produced, and the QP's state.
void report_fault_end(Endpoint& ep) {
  for (;;) {
    ibv_wc wc;
    if (ibv_poll_cq(ep.recv_cq(), 1, &wc) != 1) break;
    print_lines(fmt::format(
        "server: receive WR completion {}, {} octets{}", ibv_wc_status_str(wc.status), wc.byte_len,
        wc.wc_flags & IBV_WC_WITH_INV
            ? fmt::format(" (Send with Invalidate: STag 0x{:08x} invalidated)", wc.invalidated_rkey)
            : ""));
  }
  print_lines(fmt::format("server: QP {}: {}",
                          ibv_query_qp_state(ep.qp()) == IBV_QPS_ERR ? "ERROR" : "not in ERROR",
                          ep.qp()->qp->error_reason()));
}

// The guard pages, and for a Write the server must have refused, its target region.
bool report_regions(const ServerRegions& r, const std::string& fault) {
  const bool guards = r.guards_intact();
  print_lines(fmt::format("server: guard pages {}", guards ? "intact" : "CHANGED"));
  if (fault == "write-no-remote-write" || fault == "pd-mismatch") {
    const std::uint8_t* target = fault == "pd-mismatch" ? r.otherpd.data() : r.noremote.data();
    const bool untouched =
        check(target, 0, 0) < 0 &&
        std::all_of(target, target + 4096, [](std::uint8_t b) { return b == kGuard; });
    print_lines(fmt::format("server: target region {}", untouched ? "untouched" : "CHANGED"));
  }
  return guards;
}

// Serves the client's commands until bye or a fault. Returns the fault ("" for none) and the
// number of failed checks, or the exit code when the connection failed.
std::expected<std::pair<std::string, int>, int> serve_commands(const XferOptions& o,
                                                               ServerConnection& sc) {
  int failures = 0;
  for (;;) {
    auto wc = sc.next();
    if (!wc)
      return std::unexpected(
          say_fail("server", wc.error() + " (" + sc.ep.qp()->qp->error_reason() + ")"));
    Ctl c = get(sc.r.slot.data());
    if (c.cmd == kBye) {
      sc.r.post_whole_slot(sc.ep);
      sc.reply(0, "bye");
      return std::pair{std::string(), failures};
    }
    if (c.cmd == kHello) {
      sc.advertise();
      continue;
    }
    if (c.cmd == kFault) {
      arm_fault(sc, c.text);
      return std::pair{c.text, failures};
    }
    auto v = check_command(sc, c);
    if (!v) return std::unexpected(say_fail("server", v.error()));
    sc.r.post_whole_slot(sc.ep);
    if (v->result) ++failures;
    if (o.verbose || v->result) print_lines("server: " + v->text);
    if (!sc.reply(v->result, v->text))
      return std::unexpected(say_fail("server", "reply failed: " + sc.ep.qp()->qp->error_reason()));
  }
}

int run_server(const XferOptions& o) {
  std::size_t max = 4096;
  for (auto s : o.sizes) max = std::max(max, s);
  ServerRegions regions(max);
  auto eo = endpoint_options(o.app);
  add_explainer(o, eo, "server");
  eo.on_qp_created = [&](Endpoint& ep) { regions.register_all(ep); };
  Endpoint ep(eo);
  // The second PD and its region are not the endpoint's: release them on every way out,
  // before the endpoint's device goes.
  struct Release {
    ibv_mr*& mr;
    ibv_pd*& pd;
    ~Release() {
      if (mr) ibv_dereg_mr(mr);
      if (pd) ibv_dealloc_pd(pd);
    }
  } release{regions.otherpd_mr, regions.pd2};
  auto port = ep.listen(o.bind, static_cast<std::uint16_t>(o.port));
  if (!port) return say_fail("server", port.error());
  print_lines(fmt::format("server: listening on {}:{}", o.bind, *port));
  if (!o.port_file.empty()) {
    std::ofstream(o.port_file + ".tmp") << *port << "\n";
    std::rename((o.port_file + ".tmp").c_str(), o.port_file.c_str());
  }
  if (auto a = ep.accept_one(); !a) return say_fail("server", a.error());
  print_lines("server: connected, " + describe_params(*ep.params()));

  ServerConnection sc{regions, ep};
  auto served = serve_commands(o, sc);
  if (!served) return served.error();
  const auto& [fault, failures] = *served;
  if (!fault.empty())
    report_fault_end(ep);
  else
    ep.wait_event(RDMA_CM_EVENT_DISCONNECTED);
  if (!report_regions(regions, fault)) return 1;
  if (!fault.empty()) return ibv_query_qp_state(ep.qp()) == IBV_QPS_ERR ? 0 : 1;
  if (auto s = describe_segment_path(o.app, ep, "server: "); !s.empty()) print_lines(s);
  print_lines(failures ? "server: FAIL" : "server: all checks passed");
  return failures ? 1 : 0;
}

// ---------------------------------------------------------------- client

struct Client {
  Client(const XferOptions& opts, Endpoint& endpoint) : o(opts), ep(endpoint) {}
  const XferOptions& o;
  Endpoint& ep;
  std::vector<std::uint8_t> ctl_in = std::vector<std::uint8_t>(kCtl),
                            ctl_out = std::vector<std::uint8_t>(kCtl);
  std::vector<std::uint8_t> data;
  ibv_mr *in_mr = nullptr, *out_mr = nullptr, *data_mr = nullptr;
  std::map<std::string, Region> regions;

  void post_ctl_recv() { post_one_recv(ep.qp(), ctl_in.data(), kCtl, in_mr->lkey); }
  int post(ibv_wr_opcode op, void* addr, std::uint32_t len, std::uint32_t lkey,
           std::uint64_t raddr = 0, std::uint32_t rkey = 0, std::uint32_t imm = 0,
           unsigned flags = IBV_SEND_SIGNALED) {
    int r = post_one(ep.qp(), {.op = op,
                               .addr = addr,
                               .len = len,
                               .lkey = lkey,
                               .remote_addr = raddr,
                               .rkey = rkey,
                               .flags = flags,
                               .wr_id = static_cast<std::uint64_t>(op),
                               .imm = imm});
    if (r) print_lines(fmt::format("client: {}", ibv_last_error()));
    return r;
  }
  std::expected<ibv_wc, std::string> done(ibv_cq* cq, const char* what) {
    auto wc = ep.wait(cq);
    if (!wc)
      return std::unexpected(
          fmt::format("{}: {} ({})", what, wc.error(), ep.qp()->qp->error_reason()));
    if (wc->status != IBV_WC_SUCCESS)
      return std::unexpected(fmt::format("{}: {} ({})", what, ibv_wc_status_str(wc->status),
                                         ep.qp()->qp->error_reason()));
    return wc;
  }
  // Sends a command and waits for the server's result.
  std::expected<Ctl, std::string> command(const Ctl& c) {
    post_ctl_recv();
    put(c, ctl_out.data());
    post(IBV_WR_SEND, ctl_out.data(), kCtl, out_mr->lkey);
    if (auto w = done(ep.send_cq(), "command Send"); !w) return std::unexpected(w.error());
    if (auto w = done(ep.recv_cq(), "server reply"); !w) return std::unexpected(w.error());
    return get(ctl_in.data());
  }

  std::expected<std::string, std::string> op(const std::string& name, std::size_t n,
                                             std::uint64_t seed) {
    const auto& good = regions["good"];
    auto u32 = static_cast<std::uint32_t>(n);
    if (name == "send") {
      auto r = command({kExpectSend, n, seed, 0, 0, {}});
      if (!r) return std::unexpected(r.error());
      post_ctl_recv();
      fill(data.data(), n, seed);
      post(IBV_WR_SEND, data.data(), u32, data_mr->lkey);
      if (auto w = done(ep.send_cq(), "Send"); !w) return std::unexpected(w.error());
      if (auto w = done(ep.recv_cq(), "server reply"); !w) return std::unexpected(w.error());
      auto c = get(ctl_in.data());
      if (c.result) return std::unexpected(c.text);
      return "ok";
    }
    if (name == "write") {
      fill(data.data(), n, seed);
      post(IBV_WR_RDMA_WRITE, data.data(), u32, data_mr->lkey, good.addr, good.rkey);
      if (auto w = done(ep.send_cq(), "RDMA Write"); !w) return std::unexpected(w.error());
      // RFC 5040 §5.5: the Send that follows is delivered after the Write is placed.
      auto r = command({kCheckWrite, n, seed, 0, 0, {}});
      if (!r) return std::unexpected(r.error());
      if (r->result) return std::unexpected(r->text);
      return "ok";
    }
    if (name == "read") {
      auto r = command({kPrepRead, n, seed, 0, 0, {}});
      if (!r) return std::unexpected(r.error());
      std::memset(data.data(), 0, n);
      post(IBV_WR_RDMA_READ, data.data(), u32, data_mr->lkey, good.addr, good.rkey);
      auto w = done(ep.send_cq(), "RDMA Read");
      if (!w) return std::unexpected(w.error());
      if (w->byte_len != n) return std::unexpected(fmt::format("Read byte_len {}", w->byte_len));
      if (auto bad = check(data.data(), n, seed); bad >= 0)
        return std::unexpected(fmt::format("Read data wrong at octet {}", bad));
      return "ok";
    }
    if (name == "write-imm") {
      auto r = command({kExpectImm, n, seed & 0xFFFFFFFF, 0, 0, {}});
      if (!r) return std::unexpected(r.error());
      post_ctl_recv();
      fill(data.data(), n, seed & 0xFFFFFFFF);
      post(IBV_WR_RDMA_WRITE_WITH_IMM, data.data(), u32, data_mr->lkey, good.addr, good.rkey,
           static_cast<std::uint32_t>(seed));
      if (auto w = done(ep.send_cq(), "RDMA Write with Immediate"); !w)
        return std::unexpected(w.error());
      if (auto w = done(ep.recv_cq(), "server reply"); !w) return std::unexpected(w.error());
      auto c = get(ctl_in.data());
      if (c.result) return std::unexpected(c.text);
      return "ok";
    }
    if (name == "atomic") {
      // Fetch-add n + 1, then compare-and-swap it to seed; the originals must chain.
      const auto& ctr = regions["counter"];
      auto* res = data.data();
      std::uint64_t before = 0;
      OneWr wr{.op = IBV_WR_ATOMIC_FETCH_AND_ADD,
               .addr = res,
               .len = 8,
               .lkey = data_mr->lkey,
               .remote_addr = ctr.addr,
               .rkey = ctr.rkey,
               .compare_add = n + 1};
      post_one(ep.qp(), wr);
      auto w = done(ep.send_cq(), "atomic fetch-add");
      if (!w) return std::unexpected(w.error());
      std::memcpy(&before, res, 8);
      wr.op = IBV_WR_ATOMIC_CMP_AND_SWP;
      wr.compare_add = before + n + 1;
      wr.swap = seed;
      post_one(ep.qp(), wr);
      w = done(ep.send_cq(), "atomic compare-and-swap");
      if (!w) return std::unexpected(w.error());
      std::uint64_t seen;
      std::memcpy(&seen, res, 8);
      if (seen != before + n + 1)
        return std::unexpected(
            fmt::format("compare-and-swap saw {}, expected {}", seen, before + n + 1));
      auto r = command({kCheckAtomic, 0, seed, 0, 0, {}});
      if (!r) return std::unexpected(r.error());
      if (r->result) return std::unexpected(r->text);
      return "ok";
    }
    return std::unexpected("unknown operation " + name);
  }
};

int run_fault(Client& c, const std::string& fault) {
  auto armed = c.command({kFault, 0, 0, 0, 0, fault});
  if (!armed) return say_fail("client", armed.error());
  const auto& good = c.regions["good"];
  const auto& data = c.data;
  (void)data;
  print_lines(fmt::format("client: committing fault '{}': {}", fault, kFaults.at(fault)));
  auto* buf = c.data.data();
  const auto lkey = c.data_mr->lkey;
  if (fault == "write-no-remote-write")
    c.post(IBV_WR_RDMA_WRITE, buf, 64, lkey, c.regions["noremote"].addr,
           c.regions["noremote"].rkey);
  else if (fault == "write-out-of-bounds")
    c.post(IBV_WR_RDMA_WRITE, buf, 64, lkey, good.addr + good.len - 10, good.rkey);
  else if (fault == "unknown-stag")
    c.post(IBV_WR_RDMA_WRITE, buf, 64, lkey, good.addr, good.rkey ^ 0x00FFFF00u);
  else if (fault == "stale-key")
    c.post(IBV_WR_RDMA_WRITE, buf, 64, lkey, good.addr, good.rkey ^ 0x01u);
  else if (fault == "pd-mismatch")
    c.post(IBV_WR_RDMA_WRITE, buf, 64, lkey, c.regions["otherpd"].addr, c.regions["otherpd"].rkey);
  else if (fault == "send-no-recv" || fault == "send-too-long")
    c.post(IBV_WR_SEND, buf, 1000, lkey);
  else if (fault == "read-beyond-ird")
    for (int i = 0; i < 8; ++i) c.post(IBV_WR_RDMA_READ, buf, 65536, lkey, good.addr, good.rkey);
  else if (fault == "invalidated-stag") {
    c.post(IBV_WR_SEND_WITH_INV, buf, 8, lkey, 0, c.regions["inval"].rkey);
    c.post(IBV_WR_RDMA_WRITE, buf, 64, lkey, c.regions["inval"].addr, c.regions["inval"].rkey);
  }
  // A Send after the fault: it must complete flushed (or fail), never succeed at the peer.
  c.post(IBV_WR_SEND, c.ctl_out.data(), 16, c.out_mr->lkey);
  auto ev = c.ep.wait_event(RDMA_CM_EVENT_DISCONNECTED);
  if (!ev) return say_fail("client", "expected the connection to end: " + ev.error());
  print_lines("client: DISCONNECTED: " + ev->detail);
  for (;;) {
    ibv_wc wc;
    if (ibv_poll_cq(c.ep.send_cq(), 1, &wc) != 1) break;
    print_lines(fmt::format("client: send WR completion {} ({}){}", ibv_wc_status_str(wc.status),
                            ibv_wc_opcode_str(wc.opcode),
                            wc.vendor_err
                                ? fmt::format(" Terminate {}/{}/0x{:02x}", wc.vendor_err >> 16,
                                              (wc.vendor_err >> 8) & 0xff, wc.vendor_err & 0xff)
                                : ""));
  }
  print_lines(fmt::format("client: QP {}: {}",
                          ibv_query_qp_state(c.ep.qp()) == IBV_QPS_ERR ? "ERROR" : "not in ERROR",
                          c.ep.qp()->qp->error_reason()));
  return ibv_query_qp_state(c.ep.qp()) == IBV_QPS_ERR ? 0 : 1;
}

int run_client(const XferOptions& o) {
  std::size_t max = 4096;
  for (auto s : o.sizes) max = std::max(max, s);
  auto eo = endpoint_options(o.app);
  add_explainer(o, eo, "client");
  eo.cm.ignore_ord = o.unsafe_ignore_ord;
  std::vector<std::uint8_t> data(max + 1000);
  std::vector<std::uint8_t> ctl_in(kCtl), ctl_out(kCtl);
  ibv_mr *in_mr = nullptr, *out_mr = nullptr, *data_mr = nullptr;
  eo.on_qp_created = [&](Endpoint& ep) {
    in_mr = ep.reg(ctl_in.data(), kCtl, IBV_ACCESS_LOCAL_WRITE);
    out_mr = ep.reg(ctl_out.data(), kCtl, 0);
    data_mr = ep.reg(data.data(), data.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  };
  Endpoint ep(eo);
  if (auto r = ep.connect(o.client, static_cast<std::uint16_t>(o.port)); !r)
    return say_fail("client", fmt::format("connecting to {}:{}: {}", o.client, o.port, r.error()));
  print_lines("client: connected, " + describe_params(*ep.params()));
  Client c(o, ep);
  c.ctl_in.swap(ctl_in);
  c.ctl_out.swap(ctl_out);
  c.data.swap(data);
  // However this returns, the registered buffers go back to the vectors declared before `ep`,
  // so they outlive it: its destruction flushes work requests that may still point into them
  // (a failed or timed-out run returns with Writes posted).
  struct GiveBack {
    Client& c;
    std::vector<std::uint8_t>&in, &out, &d;
    ~GiveBack() {
      c.ctl_in.swap(in);
      c.ctl_out.swap(out);
      c.data.swap(d);
    }
  } give_back{c, ctl_in, ctl_out, data};
  c.in_mr = in_mr;
  c.out_mr = out_mr;
  c.data_mr = data_mr;
  // Hello, and the server's advertisement of its regions.
  auto adv = c.command({kHello, 0, 0, 0, 0, {}});
  if (!adv) return say_fail("client", adv.error());
  std::istringstream in(std::string(reinterpret_cast<char*>(c.ctl_in.data() + 32)));
  std::string name;
  Region r;
  while (in >> name >> r.addr >> r.rkey >> r.len) c.regions[name] = r;
  if (!c.regions.count("good")) return say_fail("client", "no advertisement from the server");

  if (!o.fault.empty()) return run_fault(c, o.fault);

  int failures = 0, passed = 0;
  std::uint64_t seed = 1;
  for (const auto& opname : o.ops) {
    for (auto n : o.sizes) {
      if (opname == "atomic" && n > 1) continue;  // size does not matter: once is enough
      const auto t0 = std::chrono::steady_clock::now();
      auto res = c.op(opname, n, seed++);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!res) {
        ++failures;
        print_lines(fmt::format("client: {:<10} {:>9} octets  FAIL {}", opname, n, res.error()));
        if (ibv_query_qp_state(ep.qp()) == IBV_QPS_ERR) return 1;
      } else {
        ++passed;
        if (o.verbose)
          print_lines(fmt::format("client: {:<10} {:>9} octets  ok  {:.2f} ms", opname, n, ms));
      }
    }
  }
  const auto loop_t0 = std::chrono::steady_clock::now();
  const std::size_t loop_write = std::min<std::size_t>(max, 1u << 20);
  for (int i = 0; i < o.loop; ++i) {
    // Writes of 1 MiB, for tests that kill a process mid-transfer.
    for (int k = 0; k < 16; ++k)
      c.post(IBV_WR_RDMA_WRITE, c.data.data(), static_cast<std::uint32_t>(loop_write),
             data_mr->lkey, c.regions["good"].addr, c.regions["good"].rkey);
    int flushed = 0;
    for (int k = 0; k < 16; ++k) {
      auto wc = ep.wait(ep.send_cq());
      if (!wc) return say_fail("client", "write loop: " + wc.error());
      if (wc->status == IBV_WC_WR_FLUSH_ERR)
        ++flushed;
      else if (wc->status != IBV_WC_SUCCESS)
        return say_fail("client", ibv_wc_status_str(wc->status));
    }
    if (flushed) {
      print_lines(fmt::format("client: connection lost ({}); {} outstanding WRs flushed",
                              ep.qp()->qp->error_reason(), flushed));
      return 3;
    }
    if (i == 0) print_lines("client: write loop running");
  }
  if (o.loop > 0) {
    // The Writes' completions say only that TCP took them; a Read behind them is answered once
    // the server has placed them all (RFC 5040 §5.5: a Read Request is processed in order
    // after the Writes before it), so the time to its completion is the goodput's.
    c.post(IBV_WR_RDMA_READ, c.data.data(), 1, data_mr->lkey, c.regions["good"].addr,
           c.regions["good"].rkey);
    auto wc = ep.wait(ep.send_cq());
    if (!wc || wc->status != IBV_WC_SUCCESS)
      return say_fail("client", "write loop: the Read after it: " +
                                    (wc ? std::string(ibv_wc_status_str(wc->status)) : wc.error()));
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_t0).count();
    const double octets = 16.0 * static_cast<double>(loop_write) * o.loop;
    print_lines(fmt::format(
        "client: write loop: {} x 16 Writes of {} octets placed in the server's memory in "
        "{:.3f} s: {:.1f} MB/s goodput",
        o.loop, loop_write, s, octets / s / 1e6));
  }
  if (auto s = describe_segment_path(o.app, ep, "client: "); !s.empty()) print_lines(s);
  auto bye = c.command({kBye, 0, 0, 0, 0, {}});
  rdma_disconnect(ep.id());
  ep.wait_event(RDMA_CM_EVENT_DISCONNECTED);
  print_lines(fmt::format("client: {} operations verified, {} failed", passed, failures));
  return failures ? 1 : 0;
}

}  // namespace

Runner add_xfer_command(CLI::App& app) {
  auto o = std::make_shared<XferOptions>();
  auto* sub = app.add_subcommand(
      "xfer",
      "Every RDMA operation (Send, Write, Read, Write with Immediate, atomics) between two\n"
      "processes at several sizes, each verified byte for byte; or, with --fault, one\n"
      "deliberate protection error and the Terminate it must cause. Run --server, then --client.");
  add_peer_options(*sub, o->server, o->client, o->bind, o->port, "Serve one client",
                   "TCP port (0: any; see --port-file)");
  sub->add_option("--port-file", o->port_file, "Server: write the port it listens on to this file");
  sub->add_option("--sizes", o->sizes, "Message sizes in octets (both sides need the same largest)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--ops", o->ops, "Operations: send, write, read, write-imm, atomic")
      ->delimiter(',')
      ->check(CLI::IsMember({"send", "write", "read", "write-imm", "atomic"}))
      ->capture_default_str();
  std::string faults;
  for (const auto& [k, v] : kFaults) faults += "\n  " + k + ": " + v;
  sub->add_option("--fault", o->fault, "Client: commit one protection error on purpose:" + faults)
      ->check(CLI::IsMember([] {
        std::vector<std::string> v;
        for (const auto& [k, _] : kFaults) v.push_back(k);
        return v;
      }()));
  sub->add_flag(
      "--unsafe-ignore-ord", o->unsafe_ignore_ord,
      "Client: send more RDMA Reads than the negotiated ORD (to test a peer's IRD check)");
  sub->add_option("--loop", o->loop,
                  "Client: afterwards post 16 Writes of the largest --sizes (at most 1 MiB) this\n"
                  "many times, then print the goodput (kill tests, the placement benchmark)");
  sub->add_flag("--verbose,-v", o->verbose, "Print every operation");
  sub->add_flag("--explain", o->explain,
                "Print each event this side's receive engine reports (placements, completions,\n"
                "doorbells, holes with --wire, Terminates) as it happens, each followed by an\n"
                "indented sentence starting \"why:\" saying what it means in RDMA terms and the\n"
                "RFC rule behind it (one line per FPDU received: use small --sizes)");
  sub->add_option("--ladder", o->ladder,
                  "Write the ladder (message sequence) diagram of the run as SVG: the messages of\n"
                  "this side's capture (--pcap, or a temporary one) and, beside them on this\n"
                  "side's column, what its receive engine did (placements, holes with --wire,\n"
                  "CQEs, doorbells, Terminates), numbered in order (docs/ladder.md)");
  add_html_option(*sub, o->html);
  add_app_options(*sub, o->app);
  return [o]() -> int {
    if (!o->server && o->client.empty()) {
      std::cerr << "rnic xfer: give --server or --client ADDR (see rnic xfer --help)\n";
      return 2;
    }
    try {
      if (o->ladder.empty() && o->html.empty()) return o->server ? run_server(*o) : run_client(*o);
      return run_with_views("xfer", o->ladder, o->html, o->server, o->app, o->recorder,
                            [&] { return o->server ? run_server(*o) : run_client(*o); });
    } catch (const std::exception& e) {
      std::cerr << "rnic xfer: " << e.what() << "\n";
      return 2;
    }
  };
}

}  // namespace iwarp::tools
