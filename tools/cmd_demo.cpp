// rnic demo: one command that starts two RNIC processes on this host (a server and a client,
// talking over 127.0.0.1) and walks through Send, RDMA Write, RDMA Read, Send with Invalidate,
// an atomic, and a deliberate protection error, each side printing what it did and what its
// completions said. The parent prints both sides' lines as they come, labelled, and can leave
// both sides' captures behind (--pcap-dir) for rnic decode or Wireshark.
#include <fcntl.h>
#include <fmt/color.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "tools/app_options.hpp"
#include "tools/capture_views.hpp"
#include "tools/commands.hpp"
#include "tools/explain_printer.hpp"

extern char** environ;

namespace iwarp::tools {

namespace {

using namespace verbs;

struct DemoOptions {
  std::string role;  // "", "server" or "client" (the children)
  int port = 0;
  std::string port_file;
  std::string pcap_dir;
  std::string ladder, html;  // --ladder OUT.svg, --html OUT.html (tools/capture_views.hpp)
  bool color = true;
  bool explain = false;
  AppOptions app;
};

// One line on stdout, flushed at once so the parent shows the two sides interleaved in time
// (under the lock the --explain printer shares with the receive engine's thread).
void say(const std::string& s) {
  print_lines(s);
}

std::string show(const ibv_wc& wc) {
  std::string s = fmt::format("{} {}", ibv_wc_opcode_str(wc.opcode), ibv_wc_status_str(wc.status));
  if (wc.status == IBV_WC_SUCCESS) s += fmt::format(", {} octets", wc.byte_len);
  if (wc.wc_flags & IBV_WC_WITH_INV)
    s += fmt::format(", invalidated STag 0x{:08x}", wc.invalidated_rkey);
  if (wc.wc_flags & IBV_WC_WITH_IMM) s += fmt::format(", immediate 0x{:08x}", wc.imm_data);
  return s;
}

struct Side {
  Endpoint& ep;
  ExplainPrinter* x = nullptr;  // --explain
  std::deque<OneWr> posted{};   // send WRs not completed yet, in post order (as they complete)
  ibv_mr* mr(void* p, std::size_t n, int acc) { return ep.reg(p, n, acc); }
  int send(ibv_wr_opcode op, void* p, std::uint32_t n, std::uint32_t lkey, std::uint64_t raddr = 0,
           std::uint32_t rkey = 0, std::uint64_t add = 0) {
    const OneWr wr{.op = op,
                   .addr = p,
                   .len = n,
                   .lkey = lkey,
                   .remote_addr = raddr,
                   .rkey = rkey,
                   .compare_add = add};
    if (x) x->posted(wr);
    posted.push_back(wr);
    const int rc = post_one(ep.qp(), wr);
    if (rc != 0) posted.pop_back();  // refused: no completion will come for it
    return rc;
  }
  // With --explain, a send WR's completion: a Send's or Write's, and any that failed (a Read's
  // or atomic's success the receive engine reports itself, as the response lands).
  void explain_completion(const ibv_wc& wc) {
    if (posted.empty()) return;
    const OneWr wr = posted.front();
    posted.pop_front();
    const bool by_engine = wr.op == IBV_WR_RDMA_READ || wr.op == IBV_WR_ATOMIC_FETCH_AND_ADD ||
                           wr.op == IBV_WR_ATOMIC_CMP_AND_SWP;
    if (x && (wc.status != IBV_WC_SUCCESS || !by_engine)) x->completed(wr, wc);
  }
  int recv(void* p, std::uint32_t n, std::uint32_t lkey) {
    return post_one_recv(ep.qp(), p, n, lkey);
  }
  std::optional<ibv_wc> wait(ibv_cq* cq) {
    auto wc = ep.wait(cq);
    if (!wc) {
      say("  ! " + wc.error());
      return std::nullopt;
    }
    if (cq == ep.send_cq()) explain_completion(*wc);
    return *wc;
  }
};

// The server: exposes a buffer for Writes and Reads, a counter for atomics, and a buffer the
// client may invalidate with Send with Invalidate.
int run_server(const DemoOptions& o) {
  // Every buffer a work request may point into is declared before the endpoint, so it outlives
  // the endpoint's QP, which may still place into it (a receive) or read it (a Send) when a step
  // fails and this returns early.
  std::vector<char> msg(256), buf(4096), inval(4096), msg2(256), out;
  std::uint64_t counter = 41;
  ibv_mr *msg_mr = nullptr, *buf_mr = nullptr, *inval_mr = nullptr, *ctr_mr = nullptr;
  auto eo = endpoint_options(o.app);
  const auto explainer = make_explainer(o.explain, eo, "");  // the parent labels the lines
  eo.private_data = Bytes{'w', 'e', 'l', 'c', 'o', 'm', 'e'};
  eo.on_qp_created = [&](Endpoint& ep) {
    Side s{ep};
    const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    msg_mr = s.mr(msg.data(), msg.size(), IBV_ACCESS_LOCAL_WRITE);
    buf_mr = s.mr(buf.data(), buf.size(), rw);
    inval_mr = s.mr(inval.data(), inval.size(), rw);
    ctr_mr = s.mr(&counter, 8, rw | IBV_ACCESS_REMOTE_ATOMIC);
    s.recv(msg.data(), 256, msg_mr->lkey);
  };
  Endpoint ep(eo);
  Side s{ep, explainer.get()};
  auto port = ep.listen("127.0.0.1", static_cast<std::uint16_t>(o.port));
  if (!port) return say("cannot listen: " + port.error()), 1;
  if (!o.port_file.empty()) {
    std::ofstream(o.port_file + ".tmp") << *port << "\n";
    std::filesystem::rename(o.port_file + ".tmp", o.port_file);
  }
  say(fmt::format("listening on 127.0.0.1:{}", *port));
  if (auto a = ep.accept_one(); !a) return say(a.error()), 1;
  say(fmt::format("connection accepted; the client's private data: \"{}\"",
                  std::string(ep.peer_private_data().begin(), ep.peer_private_data().end())));
  say("  " + describe_params(*ep.params()));

  // 1. The client's first Send.
  auto wc = s.wait(ep.recv_cq());
  if (!wc) return 1;
  say(fmt::format("1. receive completion: {}: \"{}\"", show(*wc),
                  std::string(msg.data(), wc->byte_len)));
  // 2. Tell the client where the regions are (one Send). Receives for the client's next two
  // Sends go up first: the client sends them back to back.
  auto* msg2_mr = ep.reg(msg2.data(), msg2.size(), IBV_ACCESS_LOCAL_WRITE);
  s.recv(msg.data(), 256, msg_mr->lkey);
  s.recv(msg2.data(), 256, msg2_mr->lkey);
  // Fixed width (95 octets: 20-digit addresses, 10-digit STags), so the Send's length is the
  // same every run whatever the addresses and keys (the client reads it with sscanf).
  std::string adv = fmt::format("{:020} {:010} {:020} {:010} {:020} {:010}",
                                reinterpret_cast<std::uint64_t>(buf.data()), buf_mr->rkey,
                                reinterpret_cast<std::uint64_t>(inval.data()), inval_mr->rkey,
                                reinterpret_cast<std::uint64_t>(&counter), ctr_mr->rkey);
  out.assign(adv.begin(), adv.end());
  auto* out_mr = ep.reg(out.data(), out.size(), 0);
  std::strcpy(buf.data(), "data the server put in its buffer");
  say(fmt::format(
      "2. advertising buffer STag 0x{:08x}, invalidatable STag 0x{:08x}, counter STag 0x{:08x} "
      "(counter = {})",
      buf_mr->rkey, inval_mr->rkey, ctr_mr->rkey, counter));
  s.send(IBV_WR_SEND, out.data(), static_cast<std::uint32_t>(out.size()), out_mr->lkey);
  if (!s.wait(ep.send_cq())) return 1;
  // 3.-5. Writes, Reads and atomics need nothing from the server's CPU: wait for the next Send.
  wc = s.wait(ep.recv_cq());
  if (!wc) return 1;
  say(fmt::format("5. receive completion: {}: \"{}\"", show(*wc),
                  std::string(msg.data(), wc->byte_len)));
  say(fmt::format("   the buffer now reads \"{}\" and the counter is {} (no server CPU involved)",
                  buf.data(), counter));
  // 6. Send with Invalidate.
  wc = s.wait(ep.recv_cq());
  if (!wc) return 1;
  say(fmt::format("6. receive completion: {}: \"{}\"", show(*wc),
                  std::string(msg2.data(), wc->byte_len)));
  // 7. The client now Writes to the invalidated STag: our RNIC must refuse and terminate.
  auto ev = ep.wait_event(RDMA_CM_EVENT_DISCONNECTED);
  say(fmt::format("7. connection ended: {}", ev ? ev->detail : ev.error()));
  say(fmt::format(
      "   the invalidated buffer is untouched: {}",
      std::all_of(inval.begin(), inval.end(), [](char c) { return c == 0; }) ? "yes" : "NO"));
  ibv_wc f;
  while (ibv_poll_cq(ep.recv_cq(), 1, &f) == 1) say("   receive WR flushed: " + show(f));
  return 0;
}

int run_client(const DemoOptions& o) {
  std::vector<char> msg(256), mine(4096), readbuf(4096);
  std::uint64_t atomic_result = 0;
  ibv_mr *msg_mr = nullptr, *mine_mr = nullptr, *read_mr = nullptr, *res_mr = nullptr;
  auto eo = endpoint_options(o.app);
  const auto explainer = make_explainer(o.explain, eo, "");  // the parent labels the lines
  eo.private_data = Bytes{'h', 'e', 'l', 'l', 'o'};
  eo.on_qp_created = [&](Endpoint& ep) {
    Side s{ep};
    msg_mr = s.mr(msg.data(), msg.size(), IBV_ACCESS_LOCAL_WRITE);
    mine_mr = s.mr(mine.data(), mine.size(), 0);
    // iWARP: the sink of an RDMA Read needs REMOTE_WRITE.
    read_mr =
        s.mr(readbuf.data(), readbuf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    res_mr = s.mr(&atomic_result, 8, IBV_ACCESS_LOCAL_WRITE);
  };
  Endpoint ep(eo);
  Side s{ep, explainer.get()};
  if (auto c = ep.connect("127.0.0.1", static_cast<std::uint16_t>(o.port)); !c)
    return say(c.error()), 1;
  say(fmt::format("connected; the server's private data: \"{}\"",
                  std::string(ep.peer_private_data().begin(), ep.peer_private_data().end())));
  say("  " + describe_params(*ep.params()));
  // 1. Send (the initiator speaks first, RFC 5044 §7.1).
  s.recv(msg.data(), 256, msg_mr->lkey);
  std::strcpy(mine.data(), "hello over iWARP");
  s.send(IBV_WR_SEND, mine.data(), 16, mine_mr->lkey);
  auto wc = s.wait(ep.send_cq());
  if (!wc) return 1;
  say("1. Send \"hello over iWARP\": " + show(*wc));
  // 2. The advertisement.
  wc = s.wait(ep.recv_cq());
  if (!wc) return 1;
  std::uint64_t buf = 0, inval = 0, ctr = 0;
  std::uint32_t buf_key = 0, inval_key = 0, ctr_key = 0;
  std::sscanf(std::string(msg.data(), wc->byte_len).c_str(), "%lu %u %lu %u %lu %u", &buf, &buf_key,
              &inval, &inval_key, &ctr, &ctr_key);
  say(fmt::format("2. received the server's regions: buffer STag 0x{:08x}, counter STag 0x{:08x}",
                  buf_key, ctr_key));
  // 3. RDMA Read of the server's buffer.
  s.send(IBV_WR_RDMA_READ, readbuf.data(), 64, read_mr->lkey, buf, buf_key);
  wc = s.wait(ep.send_cq());
  if (!wc) return 1;
  say(fmt::format("3. RDMA Read of 64 octets: {}: \"{}\"", show(*wc), readbuf.data()));
  // 4. RDMA Write into it, and a fetch-and-add on the counter.
  std::strcpy(mine.data(), "written by the client with RDMA Write");
  s.send(IBV_WR_RDMA_WRITE, mine.data(), 38, mine_mr->lkey, buf, buf_key);
  wc = s.wait(ep.send_cq());
  if (!wc) return 1;
  say("4. RDMA Write of 38 octets: " + show(*wc));
  s.send(IBV_WR_ATOMIC_FETCH_AND_ADD, &atomic_result, 8, res_mr->lkey, ctr, ctr_key, 1);
  wc = s.wait(ep.send_cq());
  if (!wc) return 1;
  say(fmt::format("   atomic fetch-and-add 1: {}: the counter was {}", show(*wc), atomic_result));
  // 5. A Send: delivered only after the Write is placed (RFC 5040 §5.5 ordering).
  std::strcpy(mine.data(), "look at your buffer");
  s.send(IBV_WR_SEND, mine.data(), 19, mine_mr->lkey);
  if (!(wc = s.wait(ep.send_cq()))) return 1;
  say("5. Send \"look at your buffer\": " + show(*wc));
  // 6. Send with Invalidate: the server's RNIC invalidates that STag on receipt.
  std::strcpy(mine.data(), "invalidate it");
  s.send(IBV_WR_SEND_WITH_INV, mine.data(), 13, mine_mr->lkey, 0, inval_key);
  if (!(wc = s.wait(ep.send_cq()))) return 1;
  say(fmt::format("6. Send with Invalidate of STag 0x{:08x}: {}", inval_key, show(*wc)));
  // 7. The deliberate protection error: a Write to the STag just invalidated.
  say(fmt::format("7. RDMA Write to the invalidated STag 0x{:08x} (a protection error, on purpose)",
                  inval_key));
  s.send(IBV_WR_RDMA_WRITE, mine.data(), 13, mine_mr->lkey, inval, inval_key);
  s.send(IBV_WR_SEND, mine.data(), 13, mine_mr->lkey);  // posted behind it: must be flushed
  auto ev = ep.wait_event(RDMA_CM_EVENT_DISCONNECTED);
  say(fmt::format("   connection ended: {}", ev ? ev->detail : ev.error()));
  ibv_wc f;
  while (ibv_poll_cq(ep.send_cq(), 1, &f) == 1) {
    say("   send WR completion: " + show(f));
    s.explain_completion(f);
  }
  say("   (an iWARP Send or Write completes once TCP has taken it, as with siw: the peer's "
      "Terminate");
  say("    is how the failed Write is reported, and it ends the connection)");
  say(fmt::format("   QP state: {}", ibv_query_qp_state(ep.qp()) == IBV_QPS_ERR ? "ERROR" : "?"));
  return 0;
}

// The parent: two children, their lines labelled and coloured as they arrive.
int run_parent(const DemoOptions& o, const std::string& self) {
  // --ladder and --html: the demo's connection as the client captured it, replayed after the
  // run; paths that cannot be written are said before anything starts.
  const bool views = !o.ladder.empty() || !o.html.empty();
  CaptureViews cv{.html = o.html,
                  .ladder = o.ladder,
                  .heading = "rnic demo: the demo's connection (the client's capture), replayed",
                  .file = o.pcap_dir.empty()
                              ? "the demo's connection (its captures not kept: --pcap-dir DIR "
                                "keeps them)"
                              : (std::filesystem::path(o.pcap_dir) / "demo-client.pcap").string()};
  if (auto c = check_view_paths(cv); !c) return std::cerr << "rnic demo: " << c.error() << "\n", 2;
  auto dir = std::filesystem::temp_directory_path() / fmt::format("rnic-demo-{}", getpid());
  std::filesystem::create_directories(dir);
  const std::string port_file = (dir / "port").string();
  // Where the children write their captures: --pcap-dir, or (for the views only) the
  // temporary directory, removed at the end.
  const std::string capdir = !o.pcap_dir.empty() ? o.pcap_dir : views ? dir.string() : "";
  auto spawn = [&](std::vector<std::string> args, int& out_fd) -> pid_t {
    int p[2];
    if (pipe(p) != 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    out_fd = p[0];
    return pid;
  };
  auto common = [&](const char* role) {
    std::vector<std::string> a{
        self,          "demo",          "--role",
        role,          "--mpa-rev",     std::to_string(o.app.mpa_rev),
        "--crc",       o.app.crc,       "--markers",
        o.app.markers, "--llp-timeout", std::to_string(o.app.llp_timeout_ms)};
    if (o.explain) a.push_back("--explain");
    if (!capdir.empty()) {
      a.push_back("--pcap");
      a.push_back((std::filesystem::path(capdir) / fmt::format("demo-{}.pcap", role)).string());
    }
    return a;
  };
  if (!o.pcap_dir.empty()) std::filesystem::create_directories(o.pcap_dir);
  std::cout
      << "rnic demo: starting two emulated RNIC processes on this host (server and client, over "
         "127.0.0.1)\n"
      << std::endl;
  int sfd = -1, cfd = -1;
  auto sargs = common("server");
  sargs.push_back("--port-file");
  sargs.push_back(port_file);
  pid_t spid = spawn(sargs, sfd);
  if (spid < 0) return std::cerr << "rnic demo: cannot start the server process\n", 1;
  for (int i = 0; i < 200 && !std::filesystem::exists(port_file); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!std::filesystem::exists(port_file)) {
    kill(spid, SIGKILL);
    return std::cerr << "rnic demo: the server process did not start listening\n", 1;
  }
  std::string port;
  std::ifstream(port_file) >> port;
  auto cargs = common("client");
  cargs.push_back("--port");
  cargs.push_back(port);
  pid_t cpid = spawn(cargs, cfd);
  struct Stream {
    int fd;
    std::string label;
    fmt::color color;
    std::string buf;
  };
  std::vector<Stream> streams{
      {sfd, fmt::format("server pid {:<6}", spid), fmt::color::steel_blue, {}},
      {cfd, fmt::format("client pid {:<6}", cpid), fmt::color::dark_orange, {}}};
  const bool color = o.color && isatty(1);
  auto emit = [&](Stream& s, const std::string& line) {
    if (color)
      std::cout << fmt::format(fg(s.color), "[{}]", s.label) << " " << line << "\n";
    else
      std::cout << "[" << s.label << "] " << line << "\n";
    std::cout.flush();
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::any_of(streams.begin(), streams.end(), [](auto& s) { return s.fd >= 0; })) {
    std::vector<pollfd> pf;
    for (auto& s : streams)
      if (s.fd >= 0) pf.push_back({s.fd, POLLIN, 0});
    if (std::chrono::steady_clock::now() > deadline) {
      std::cerr << "rnic demo: the demo did not finish within 30 s; stopping it\n";
      kill(spid, SIGKILL);
      kill(cpid, SIGKILL);
      break;
    }
    if (poll(pf.data(), pf.size(), 200) <= 0) continue;
    for (auto& p : pf) {
      if (!(p.revents & (POLLIN | POLLHUP))) continue;
      auto& s =
          *std::find_if(streams.begin(), streams.end(), [&](auto& x) { return x.fd == p.fd; });
      // All that is waiting, not a fixed 4 KiB: a child writes an event and its "why:" line in
      // one write (atomic on a pipe), and reading it whole keeps the two together, with no line
      // of the other side between them. The pipe holds at most 64 KiB by default.
      int avail = 0;
      if (ioctl(s.fd, FIONREAD, &avail) != 0 || avail < 4096) avail = 4096;
      std::string b(static_cast<std::size_t>(std::min(avail, 1 << 20)), '\0');
      ssize_t n = read(s.fd, b.data(), b.size());
      if (n <= 0) {
        if (!s.buf.empty()) emit(s, s.buf);
        close(s.fd);
        s.fd = -1;
        continue;
      }
      s.buf.append(b.data(), static_cast<std::size_t>(n));
      for (std::size_t nl; (nl = s.buf.find('\n')) != std::string::npos;) {
        emit(s, s.buf.substr(0, nl));
        s.buf.erase(0, nl + 1);
      }
    }
  }
  int sst = 0, cst = 0;
  waitpid(spid, &sst, 0);
  waitpid(cpid, &cst, 0);
  const bool ok =
      WIFEXITED(sst) && WEXITSTATUS(sst) == 0 && WIFEXITED(cst) && WEXITSTATUS(cst) == 0;
  // The views are written however the run went (a failed run is when one helps most).
  bool views_ok = true;
  const auto client_capture = (std::filesystem::path(capdir) / "demo-client.pcap").string();
  if (views && !std::filesystem::exists(client_capture)) {
    std::cerr << "rnic demo: no views written: the client captured nothing (it made no "
                 "connection)\n";
    views_ok = false;
  } else if (views) {
    if (auto w = write_capture_views(client_capture, cv); !w) {
      std::cerr << "rnic demo: " << w.error() << "\n";
      views_ok = false;
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::cout << "\n"
            << (ok ? "rnic demo: both sides finished as expected" : "rnic demo: a side FAILED")
            << "\n";
  if (!o.pcap_dir.empty())
    std::cout << fmt::format(
        "captures: {0}/demo-client.pcap and {0}/demo-server.pcap "
        "(try: rnic decode {0}/demo-client.pcap)\n",
        o.pcap_dir);
  if (views && views_ok) {
    if (!o.ladder.empty()) std::cout << "ladder: " << o.ladder << "\n";
    if (!o.html.empty()) std::cout << "HTML view: " << o.html << " (open it in a browser)\n";
  }
  return !ok ? 1 : views_ok ? 0 : 2;
}

}  // namespace

Runner add_demo_command(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  auto* sub = app.add_subcommand(
      "demo",
      "Start two emulated RNIC processes on this host and walk through Send, RDMA Write, RDMA\n"
      "Read, an atomic, Send with Invalidate and a deliberate protection error (which ends in a\n"
      "Terminate), printing what happens on each side.");
  sub->add_option("--role", o->role, "Internal: run one side (server or client)")
      ->check(CLI::IsMember({"server", "client"}))
      ->group("");
  sub->add_option("--port", o->port, "Internal: the server's port")->group("");
  sub->add_option("--port-file", o->port_file, "Internal: where the server writes its port")
      ->group("");
  sub->add_option("--pcap-dir", o->pcap_dir, "Write each side's capture into this directory");
  sub->add_flag("!--no-color", o->color, "Plain labels, no colours");
  sub->add_option("--ladder", o->ladder,
                  "Also write the ladder (message sequence) diagram of the demo's connection as\n"
                  "SVG: the client's capture replayed through the stack after the run, with what\n"
                  "each side's emulated RNIC did beside each message (docs/ladder.md)")
      ->type_name("OUT.svg");
  sub->add_option("--html", o->html,
                  "Also write the HTML view of the demo's connection (one self-contained page:\n"
                  "click a message for its headers, bytes, meaning and the queue pairs' state;\n"
                  "docs/html-view.md), from the client's capture replayed after the run")
      ->type_name("OUT.html");
  sub->add_flag("--explain", o->explain,
                "After each step, print what each side posted, its completion, and every event\n"
                "its receive engine reported (placements, completions, doorbells, the\n"
                "Terminate), each followed by an indented sentence \"why: ...\" saying what it\n"
                "means in RDMA terms and the RFC rule behind it; lines keep their side's label");
  add_app_options(*sub, o->app);
  return [o]() -> int {
    if (o->role == "server") return run_server(*o);
    if (o->role == "client") return run_client(*o);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return std::cerr << "rnic demo: cannot find its own executable\n", 2;
    self[n] = 0;
    return run_parent(*o, self);
  };
}

}  // namespace iwarp::tools
