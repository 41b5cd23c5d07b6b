// rnic stat (docs/stat.md): each emulated RNIC answers a query for its live state on an
// abstract Unix socket, served on its engine thread. Over real sockets: an in-process connected
// pair asked with the client function and with the real `rnic stat` binary, `rnic ping`
// processes asked while they run, a process without an RNIC, and clients that connect and
// never ask or never read while traffic goes on.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "endpoint_pair.hpp"
#include "process_support.hpp"
#include "raw_peer.hpp"
#include "rnic/device.hpp"
#include "rnic/stat_client.hpp"
#include "rnic/stat_server.hpp"
#include "rx_harness.hpp"
#include "verbs_shim/verbs.hpp"

namespace iwarp {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using test::Process;
using namespace verbs;

const std::string& address_of(verbs::Endpoint& e) {
  return e.ctx()->dev->stat_address();
}

json ask(const std::string& name) {
  auto r = rnic::query_stat_socket(name, 2000ms);
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  if (!r) return {};
  auto j = json::parse(*r, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << *r;
  return j;
}

std::uint64_t counter(const json& qp, const char* layer, const char* name) {
  return qp.at("counters").at(layer).at(name).get<std::uint64_t>();
}

// A raw client of a stat socket that sends and reads only what it is told to.
int raw_connect(const std::string& name) {
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

// Sends over the pair `n` times (client -> server), each received and completed.
void sends(testing::Pair& p, int n, std::vector<std::uint8_t>& sbuf, ibv_mr* smr,
           std::vector<std::uint8_t>& rbuf, ibv_mr* rmr) {
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(verbs::post_one_recv(p.server->qp(), rbuf.data(), 64, rmr->lkey, 1), 0);
    ASSERT_EQ(
        verbs::post_one(p.client->qp(),
                        {.op = IBV_WR_SEND, .addr = sbuf.data(), .len = 64, .lkey = smr->lkey}),
        0);
    auto rc = p.server->wait(p.server->recv_cq());
    ASSERT_TRUE(rc) << rc.error();
    ASSERT_EQ(rc->status, IBV_WC_SUCCESS);
    auto sc = p.client->wait(p.client->send_cq());
    ASSERT_TRUE(sc) << sc.error();
    ASSERT_EQ(sc->status, IBV_WC_SUCCESS);
  }
}

TEST(Stat, ConnectedPairShowsItsQpRegionAndCountersThatMove) {
  // (Before the endpoints: receives posted into `rbuf` stay posted until the queue pair goes.)
  std::vector<std::uint8_t> sbuf(4096, 0x5a), rbuf(8192);
  auto p = testing::connect_pair();
  ASSERT_TRUE(p.server && p.client && p.server->qp() && p.client->qp());
  ASSERT_FALSE(address_of(*p.server).empty());
  auto* smr = p.client->reg(sbuf.data(), sbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  auto* rmr =
      p.server->reg(rbuf.data(), rbuf.size(),
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(smr && rmr);

  const json before = ask(address_of(*p.server));
  ASSERT_EQ(before.at("queue_pairs").size(), 1u) << before.dump(2);
  const json& q0 = before["queue_pairs"][0];
  EXPECT_EQ(q0.at("state"), "RTS");
  EXPECT_EQ(q0.at("qp_num"), p.server->qp()->qp_num);
  EXPECT_EQ(q0.at("role"), "responder");
  EXPECT_TRUE(q0.at("peer").get<std::string>().starts_with("127.0.0.1:")) << q0.dump();
  EXPECT_EQ(q0.at("ord").at("limit"), 16);
  EXPECT_EQ(q0.at("ird").at("limit"), 16);
  EXPECT_TRUE(q0.at("holes").empty());
  EXPECT_EQ(before.at("pid"), ::getpid());
  // The server's region, with what it allows.
  bool found = false;
  for (const auto& m : before.at("memory_regions"))
    if (m.at("stag") == fmt::format("0x{:x}", rmr->rkey)) {
      found = true;
      EXPECT_EQ(m.at("length"), 8192);
      EXPECT_EQ(m.at("access"), json({"local_write", "remote_write", "remote_read"}));
    }
  EXPECT_TRUE(found) << before.at("memory_regions").dump();
  ASSERT_FALSE(before.at("completion_queues").empty());

  // Traffic moves the counters and the receive queue shows what is posted.
  ASSERT_NO_FATAL_FAILURE(sends(p, 20, sbuf, smr, rbuf, rmr));
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(verbs::post_one_recv(p.server->qp(), rbuf.data(), 64, rmr->lkey, 100 + i), 0);
  const json after = ask(address_of(*p.server));
  ASSERT_EQ(after.at("queue_pairs").size(), 1u);
  const json& q1 = after["queue_pairs"][0];
  EXPECT_GE(counter(q1, "mpa", "fpdus_received"), counter(q0, "mpa", "fpdus_received") + 20);
  EXPECT_GE(counter(q1, "mpa", "bytes_received"), counter(q0, "mpa", "bytes_received") + 20 * 64);
  EXPECT_EQ(q1.at("recv_queue").at("used"), 3);
  EXPECT_EQ(counter(q1, "rdmap", "terminates_sent"), 0u);
  EXPECT_GT(after.at("engine").at("stat_queries").get<int>(),
            before.at("engine").at("stat_queries").get<int>());
  const json client = ask(address_of(*p.client));
  ASSERT_EQ(client.at("queue_pairs").size(), 1u);
  EXPECT_EQ(client["queue_pairs"][0].at("role"), "initiator");
  EXPECT_GE(counter(client["queue_pairs"][0], "mpa", "fpdus_sent"), 20u);

  // The real binary finds both devices of this process.
  Process stat({"stat", std::to_string(::getpid()), "--json", "--compact"}, "stat_self");
  ASSERT_EQ(stat.wait(30s), 0) << stat.output();
  auto all = json::parse(stat.output(), nullptr, false);
  ASSERT_FALSE(all.is_discarded()) << stat.output();
  EXPECT_EQ(all.at("pid"), ::getpid());
  int rts = 0;
  for (const auto& d : all.at("devices"))
    for (const auto& q : d.at("queue_pairs")) rts += q.at("state") == "RTS";
  EXPECT_GE(rts, 2) << stat.output();
  // And its text summary names the QP and the region.
  Process text({"stat", std::to_string(::getpid())}, "stat_self_text");
  ASSERT_EQ(text.wait(30s), 0) << text.output();
  EXPECT_NE(text.output().find(fmt::format("QP {} RTS", p.server->qp()->qp_num)), std::string::npos)
      << text.output();
  EXPECT_NE(text.output().find(fmt::format("MR STag 0x{:x}", rmr->rkey)), std::string::npos)
      << text.output();
}

// Sends beyond a TCP hole (segments fed in a scripted order): the hole is listed with its
// offsets and the receive WRs whose completions wait for it; once it closes, none is open and
// the deferred completions show as released. An unanswered Read shows in ORD use.
TEST(Stat, OpenHolesListWhatWaitsOnThem) {
  rnic::rx_harness::Harness h;
  for (std::uint64_t i = 0; i < 4; ++i) h.post_recv(200 + i, i * 8192, 8192);
  const Bytes m1(10, 1), m2(5000, 2), m3(1, 3), m4(8192, 4);
  const auto s0 = h.send(1, m1);
  const auto s1 = h.send(2, ByteSpan(m2).first(1400), 0, false);
  const auto s2 = h.send(2, ByteSpan(m2).subspan(1400), 1400, true);
  const auto s3 = h.send(3, m3);
  const auto s4 = h.send(4, m4);
  h.inject_all({s4, s2, s3, s1});
  const auto report = h.qp->hole_report();
  ASSERT_EQ(report.size(), 1u);
  const std::string name = h.dev.stat_address();
  const json j = ask(name);
  ASSERT_EQ(j.at("queue_pairs").size(), 1u) << j.dump(2);
  const json& q = j["queue_pairs"][0];
  ASSERT_EQ(q.at("holes").size(), 1u) << q.dump(2);
  const json& hole = q["holes"][0];
  EXPECT_EQ(hole.at("begin"), report[0].hole.begin);
  EXPECT_EQ(hole.at("end"), report[0].hole.end);
  EXPECT_EQ(hole.at("waiting").at("sends"), 3);
  EXPECT_EQ(hole.at("waiting").at("send_wr_ids"), json({201, 202, 203}));
  EXPECT_NE(hole.at("summary").get<std::string>().find("held back: 3 Send completion(s)"),
            std::string::npos)
      << hole.dump();
  EXPECT_EQ(counter(q, "ddp", "placed_beyond_hole"), 4u);
  EXPECT_GE(counter(q, "tcp", "holes_opened"), 1u);
  EXPECT_EQ(counter(q, "tcp", "out_of_order_segments"), 4u);
  EXPECT_EQ(j.at("engine").at("totals").at("open_holes"), 1);
  EXPECT_EQ(q.at("recv_queue").at("used"), 4);  // the WQEs stay posted until their CQEs go
  h.inject_all({s0});
  const json after = ask(name);
  const json& q2 = after.at("queue_pairs").at(0);
  EXPECT_TRUE(q2.at("holes").empty()) << q2.dump(2);
  EXPECT_EQ(counter(q2, "tcp", "holes_closed"), counter(q2, "tcp", "holes_opened"));
  EXPECT_EQ(counter(q2, "ddp", "deferred_released"), 4u);
  // An RDMA Read the peer has not answered uses one of the negotiated ORD (8).
  EXPECT_EQ(q2.at("ord"), json({{"limit", 8}, {"in_use", 0}}));
  h.post_read(300, 0, 64, STag{0x1234}, 0);
  h.settle();
  const json reading = ask(name);
  EXPECT_EQ(reading.at("queue_pairs").at(0).at("ord"), json({{"limit", 8}, {"in_use", 1}}));
}

// A protection error: the side that found it counts the Terminate it sent and says why it left
// RTS; the other side counts the one it received.
TEST(Stat, TerminatesAreCountedWithTheReason) {
  auto p = testing::connect_pair();
  ASSERT_TRUE(p.server && p.client && p.server->qp() && p.client->qp());
  std::vector<std::uint8_t> sbuf(64, 7), rbuf(64);
  auto* smr = p.client->reg(sbuf.data(), sbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  auto* rmr = p.server->reg(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);  // no remote write
  ASSERT_TRUE(smr && rmr);
  ASSERT_EQ(
      verbs::post_one(p.client->qp(), {.op = IBV_WR_RDMA_WRITE,
                                       .addr = sbuf.data(),
                                       .len = 64,
                                       .lkey = smr->lkey,
                                       .remote_addr = reinterpret_cast<std::uint64_t>(rbuf.data()),
                                       .rkey = rmr->rkey}),
      0);
  auto wc = p.client->wait(p.client->send_cq());
  ASSERT_TRUE(wc) << wc.error();
  json server, client;
  for (int i = 0; i < 100; ++i) {
    server = ask(address_of(*p.server));
    client = ask(address_of(*p.client));
    if (counter(client["queue_pairs"][0], "rdmap", "terminates_received") == 1) break;
    std::this_thread::sleep_for(20ms);
  }
  const json& s = server.at("queue_pairs").at(0);
  const json& c = client.at("queue_pairs").at(0);
  EXPECT_EQ(counter(s, "rdmap", "terminates_sent"), 1u) << s.dump(2);
  EXPECT_EQ(counter(s, "rdmap", "terminates_received"), 0u);
  EXPECT_EQ(counter(s, "mpa", "crc_errors"), 0u);
  EXPECT_EQ(counter(c, "rdmap", "terminates_received"), 1u) << c.dump(2);
  EXPECT_NE(s.at("state"), "RTS");
  EXPECT_TRUE(s.at("error").get<std::string>().starts_with("sent Terminate")) << s.dump(2);
  EXPECT_TRUE(c.at("error").get<std::string>().starts_with("peer sent Terminate")) << c.dump(2);
  EXPECT_EQ(server.at("engine").at("totals").at("terminates_sent"), 1);
}

// RFC 5044 §6: an FPDU whose CRC does not match ends the stream with a Terminate; the MPA
// layer counts the CRC error, RDMAP the Terminate.
TEST(Stat, CrcErrorsAreCounted) {
  verbs::EndpointOptions so;
  std::vector<std::uint8_t> rbuf(64);
  so.on_qp_created = [&](verbs::Endpoint& ep) {
    auto* mr = ep.reg(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
    verbs::post_one_recv(ep.qp(), rbuf.data(), 64, mr->lkey, 1);
  };
  verbs::Endpoint server(so);
  auto port = server.listen("127.0.0.1", 0);
  ASSERT_TRUE(port) << port.error();
  std::expected<void, std::string> accepted;
  std::thread t([&] { accepted = server.accept_one(); });
  mpa::Policy pol;
  pol.crc = mpa::CrcPolicy::Required;
  testing::RawPeer peer(*port, pol);
  t.join();
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(accepted) << accepted.error();
  ddp::Segment seg;
  seg.hdr = ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{1}, MessageOffset{0});
  const Bytes payload(32, 0x33);
  seg.payload = payload;
  Bytes wire = peer.fpdu(seg);
  wire.back() ^= 0x01;
  ASSERT_TRUE(peer.write(wire));
  json j;
  for (int i = 0; i < 200; ++i) {
    j = ask(address_of(server));
    if (!j.at("queue_pairs").empty() &&
        counter(j["queue_pairs"][0], "rdmap", "terminates_sent") > 0)
      break;
    std::this_thread::sleep_for(10ms);
  }
  const json& q = j.at("queue_pairs").at(0);
  EXPECT_EQ(counter(q, "mpa", "crc_errors"), 1u) << q.dump(2);
  EXPECT_EQ(counter(q, "rdmap", "terminates_sent"), 1u);
  EXPECT_EQ(q.at("mpa").at("crc"), true);
  EXPECT_EQ(j.at("engine").at("totals").at("crc_errors"), 1);
}

TEST(Stat, ProcessWithoutAnRnicIsOneLineAndExit2) {
  pid_t sleeper = -1;
  char arg0[] = "sleep", arg1[] = "30";
  char* argv[] = {arg0, arg1, nullptr};
  ASSERT_EQ(posix_spawnp(&sleeper, "sleep", nullptr, nullptr, argv, environ), 0);
  Process stat({"stat", std::to_string(sleeper)}, "stat_none");
  const int code = stat.wait(30s);
  ::kill(sleeper, SIGKILL);
  ::waitpid(sleeper, nullptr, 0);
  EXPECT_EQ(code, 2);
  EXPECT_EQ(stat.output(), fmt::format("rnic stat: no emulated RNIC in process {} (is it running "
                                       "under rnic run?)\n",
                                       sleeper));
  // No such process at all (above the largest pid_max Linux allows).
  Process none({"stat", "4194305"}, "stat_nopid");
  EXPECT_EQ(none.wait(30s), 2);
  EXPECT_EQ(none.output(), "rnic stat: no process 4194305\n");
  Process bad({"stat", "x12"}, "stat_badpid");
  EXPECT_EQ(bad.wait(30s), 2);
  const std::string said = bad.output();
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << said;
}

// A name that is not UTF-8 (a device named so, as a program's own name cut by the kernel at 15
// octets can be) is answered with the bad octets replaced: gathering the state must never throw
// on the engine thread, which would stop the engine and every connection of the device.
TEST(Stat, NamesThatAreNotUtf8DoNotStopTheEngine) {
  rnic::Device dev("rnic\xc3", 1);
  ASSERT_FALSE(dev.stat_address().empty());
  auto r = rnic::query_stat_socket(dev.stat_address(), 5000ms);
  ASSERT_TRUE(r) << r.error().message;
  auto j = json::parse(*r, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << *r;
  EXPECT_EQ(j.at("device").get<std::string>(), "rnic\xef\xbf\xbd");  // U+FFFD
  // The engine still runs: a second query is answered and work posted to it runs.
  EXPECT_TRUE(dev.engine_running());
  EXPECT_TRUE(rnic::query_stat_socket(dev.stat_address(), 5000ms));
  bool ran = false;
  EXPECT_TRUE(dev.run_and_wait([&] { ran = true; }, 5000ms));
  EXPECT_TRUE(ran);
}

// Abstract socket names have no owner: another program may take the name of a process (even
// before the process exists) and answer for it. `rnic stat` checks who listens (SO_PEERCRED)
// and refuses to read a stranger's answer.
TEST(Stat, AStrangerHoldingTheNameIsNotBelieved) {
  pid_t sleeper = -1;
  char arg0[] = "sleep", arg1[] = "30";
  char* argv[] = {arg0, arg1, nullptr};
  ASSERT_EQ(posix_spawnp(&sleeper, "sleep", nullptr, nullptr, argv, environ), 0);
  // This test process takes the sleeper's name and answers with a forged document.
  const std::string name = rnic::stat_socket_name(sleeper, 0);
  int l = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(l, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), len), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(l, 4), 0);
  std::thread forger([l, sleeper] {
    for (int i = 0; i < 2; ++i) {
      const int c = ::accept(l, nullptr, nullptr);
      if (c < 0) return;
      char buf[64];
      (void)::read(c, buf, sizeof buf);
      const std::string doc =
          fmt::format(R"({{"pid":{},"device":"forged","queue_pairs":[]}})", sleeper) + "\n";
      (void)::send(c, doc.data(), doc.size(), MSG_NOSIGNAL);  // the client may be gone
      ::close(c);
    }
  });
  auto r = rnic::query_stat(sleeper, 5000ms);
  Process stat({"stat", "--json", std::to_string(sleeper)}, "stat_forged");
  const int code = stat.wait(30s);
  ::shutdown(l, SHUT_RDWR);
  ::close(l);
  forger.join();
  ::kill(sleeper, SIGKILL);
  ::waitpid(sleeper, nullptr, 0);
  ASSERT_FALSE(r) << "a forged answer was taken: " << (*r)[0];
  EXPECT_NE(r.error().message.find(fmt::format("held by process {}, not {}", ::getpid(), sleeper)),
            std::string::npos)
      << r.error().message;
  EXPECT_EQ(code, 2);
  EXPECT_EQ(stat.output().find("forged"), std::string::npos) << stat.output();
}

// Clients that connect and never ask, or ask and never read, hold nothing up: traffic goes on,
// extra clients are turned away, the silent ones are cut after the bounds, and queries work
// again.
TEST(Stat, SilentClientsDoNotStallTheEngine) {
  auto p = testing::connect_pair();
  ASSERT_TRUE(p.server && p.client && p.server->qp() && p.client->qp());
  std::vector<std::uint8_t> sbuf(4096, 1), rbuf(4096);
  auto* smr = p.client->reg(sbuf.data(), sbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  auto* rmr = p.server->reg(rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(smr && rmr);
  // Enough regions that the answer (some 500 kB) is more than a socket buffer holds.
  for (int i = 0; i < 4000; ++i) ASSERT_NE(p.server->reg(rbuf.data(), 64, 0), nullptr);
  const std::string name = address_of(*p.server);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int> silent;
  for (int i = 0; i < rnic::kStatMaxClients - 1; ++i) {
    silent.push_back(raw_connect(name));
    ASSERT_GE(silent.back(), 0);
  }
  // One asks and never reads its answer: the engine's write of it waits, the engine does not.
  silent.push_back(raw_connect(name));
  ASSERT_GE(silent.back(), 0);
  ASSERT_EQ(::send(silent.back(), "stat\n", 5, MSG_NOSIGNAL), 5);
  std::this_thread::sleep_for(200ms);  // the answer is under way
  // Every slot is taken: the next query is turned away at once, not queued.
  auto busy = rnic::query_stat_socket(name, 1000ms);
  if (std::chrono::steady_clock::now() - t0 < rnic::kStatRequestBound - 300ms) {
    ASSERT_FALSE(busy);
    EXPECT_EQ(busy.error().kind, rnic::StatError::Kind::NoAnswer) << busy.error().message;
  }
  // Traffic goes on meanwhile.
  ASSERT_NO_FATAL_FAILURE(sends(p, 200, sbuf, smr, rbuf, rmr));
  // The silent ones are cut after the bounds; queries are answered again.
  std::this_thread::sleep_for(rnic::kStatWriteBound + 500ms -
                              (std::chrono::steady_clock::now() - t0));
  const json j = ask(name);
  ASSERT_EQ(j.at("queue_pairs").size(), 1u);
  EXPECT_GE(counter(j["queue_pairs"][0], "mpa", "fpdus_received"), 200u);
  EXPECT_EQ(j.at("engine").at("memory_regions"), 4001);
  int cut = 0;
  for (int s : silent) {
    char b[65536];
    ssize_t n;
    while ((n = ::recv(s, b, sizeof b, MSG_DONTWAIT)) > 0) {
    }
    cut += n == 0 || (n < 0 && errno == ECONNRESET);
    ::close(s);
  }
  EXPECT_EQ(cut, rnic::kStatMaxClients);
}

// A process running `rnic ping` answers while it works: its QP in RTS, counters that move.
// A process that ends while `rnic stat --watch` asks it: a child listens as an emulated RNIC
// would (@rnic-stat-PID-0), answers one query, then takes the next and closes it unanswered
// and exits. The watch must see a process that ended (exit 0), not an error.
TEST(Stat, WatchOfAProcessThatEndsWhileAskedEndsWell) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    // Only system calls here (no allocation after fork).
    char name[64];
    const int n = std::snprintf(name, sizeof name, "rnic-stat-%d-0", static_cast<int>(::getpid()));
    const int l = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, name, static_cast<std::size_t>(n));
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
    if (l < 0 || ::bind(l, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(l, 4) != 0)
      ::_exit(3);
    (void)!::write(ready[1], "r", 1);
    const char doc[] = "{\"device\":\"rnic0\",\"program\":\"fake\"}\n";
    char req[64];
    int c = ::accept(l, nullptr, nullptr);
    (void)!::read(c, req, sizeof req);
    (void)!::write(c, doc, sizeof doc - 1);
    ::close(c);
    c = ::accept(l, nullptr, nullptr);  // the next query: closed unanswered, and the process ends
    ::close(c);
    ::_exit(0);
  }
  ::close(ready[1]);
  char r;
  ASSERT_EQ(::read(ready[0], &r, 1), 1);
  ::close(ready[0]);
  Process watch({"stat", std::to_string(child), "--watch", "0.2", "--json", "--compact"},
                "stat_watch_ends");
  EXPECT_EQ(watch.wait(30s), 0) << watch.output();
  EXPECT_NE(watch.output().find("\"program\":\"fake\""), std::string::npos) << watch.output();
  int st = 0;
  ::waitpid(child, &st, 0);
}

TEST(Stat, PingProcessesAnswerWhileTheyRun) {
  const std::string port = test::free_port();
  ASSERT_FALSE(port.empty());
  Process srv({"ping", "--server", "--bind", "127.0.0.1", "--port", port}, "stat_ping_server");
  ASSERT_TRUE(srv.wait_for_output("listening")) << srv.output();
  Process cli({"ping", "--client", "127.0.0.1", "--port", port, "--count", "100000000", "--quiet"},
              "stat_ping_client");
  auto query = [&](pid_t pid) {
    Process stat({"stat", std::to_string(pid), "--json"}, "stat_ping");
    EXPECT_EQ(stat.wait(30s), 0) << stat.output();
    auto j = json::parse(stat.output(), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << stat.output();
    return j;
  };
  // Wait for the connection.
  json first;
  for (int i = 0; i < 200; ++i) {
    first = query(srv.pid());
    if (!first.is_discarded() && !first["devices"].empty() &&
        !first["devices"][0]["queue_pairs"].empty() &&
        first["devices"][0]["queue_pairs"][0]["state"] == "RTS" &&
        counter(first["devices"][0]["queue_pairs"][0], "mpa", "fpdus_received") > 0)
      break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_FALSE(first.is_discarded());
  ASSERT_FALSE(first["devices"][0]["queue_pairs"].empty()) << first.dump(2);
  const json& q0 = first["devices"][0]["queue_pairs"][0];
  EXPECT_EQ(q0.at("state"), "RTS");
  EXPECT_FALSE(first["devices"][0].at("memory_regions").empty());
  std::this_thread::sleep_for(200ms);
  const json second = query(srv.pid());
  ASSERT_FALSE(second["devices"][0]["queue_pairs"].empty()) << second.dump(2);
  EXPECT_GT(counter(second["devices"][0]["queue_pairs"][0], "mpa", "fpdus_received"),
            counter(q0, "mpa", "fpdus_received"));
  const json c = query(cli.pid());
  ASSERT_FALSE(c["devices"][0]["queue_pairs"].empty()) << c.dump(2);
  EXPECT_EQ(c["devices"][0]["queue_pairs"][0].at("role"), "initiator");
  // --watch asks again until the process ends, then exits 0.
  Process watch({"stat", std::to_string(cli.pid()), "--watch", "0.1", "--json", "--compact"},
                "stat_watch");
  auto documents = [&] {
    int n = 0;
    std::istringstream lines(watch.output());
    for (std::string line; std::getline(lines, line);)
      n += !json::parse(line, nullptr, false).is_discarded();
    return n;
  };
  // The client goes once the watch has answered twice (bounded): a fixed 500 ms once let a slow
  // start under ASan find the client already killed (exit 2, "no emulated RNIC in process").
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (documents() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  cli.kill();
  EXPECT_EQ(watch.wait(30s), 0) << watch.output();
  EXPECT_GE(documents(), 2) << watch.output();
  srv.kill();
}

}  // namespace
}  // namespace iwarp
