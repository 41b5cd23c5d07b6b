// What an idle connected QP costs its process (issue 15, Scale): 48 QP pairs on two emulated
// RNICs in this process, connected over 127.0.0.1 and carrying one small Send each, then left
// idle. The resident memory the connections added, per QP, stays under a bound. A QP that keeps
// a receive staging buffer of its own (16 KiB, touched as it was filled) crossed it; the staging
// buffer now belongs to the thread that reads (rnic/qp_rx.cpp), one per engine thread. Not
// measured under a sanitizer (its shadow memory is most of the resident set).
#include <gtest/gtest.h>
#include <malloc.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/sanitizers.hpp"
#include "verbs_shim/endpoint.hpp"

using namespace iwarp;
using namespace iwarp::verbs;

namespace {

std::uint64_t vm_rss() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

EndpointOptions small() {
  EndpointOptions o;
  o.cap.max_send_wr = 4;
  o.cap.max_recv_wr = 4;
  o.cap.max_send_sge = 1;
  o.cap.max_recv_sge = 1;
  o.cq_depth = 8;
  return o;
}

}  // namespace

TEST(IdleQpMemory, AnIdleConnectedQpCostsLittleResidentMemory) {
#if IWARP_TEST_ASAN || IWARP_TEST_TSAN
  // As StreamingDecode.RnicDecodeDoesNotLoadTheFile: under TSan an idle QP shows 124 KiB.
  GTEST_SKIP() << "a sanitizer's quarantine and shadow memory make the resident set no measure";
#endif
  constexpr int kPairs = 48;
  // The first pair owns the two devices (engine threads, their stacks, allocator arenas): its
  // cost is the fixed one, not a QP's, so it is made before the first measurement.
  auto first_server = std::make_unique<Endpoint>(small());
  auto first_client = std::make_unique<Endpoint>(small());
  std::vector<std::unique_ptr<Endpoint>> servers, clients;
  std::vector<std::uint8_t> src(64, 0x5a);
  std::vector<std::vector<std::uint8_t>> dst(kPairs + 1, std::vector<std::uint8_t>(64));
  auto connect_one = [&](Endpoint& s, Endpoint& c, std::vector<std::uint8_t>& into) {
    auto port = s.listen("127.0.0.1", 0);
    ASSERT_TRUE(port) << port.error();
    s.options().on_qp_created = [&into](Endpoint& e) {
      auto* mr = e.reg(into.data(), into.size(), IBV_ACCESS_LOCAL_WRITE);
      ASSERT_EQ(post_one_recv(e.qp(), into.data(), 64, mr->lkey, 1), 0);
    };
    std::expected<void, std::string> acc;
    std::thread t([&] { acc = s.accept_one(); });
    auto con = c.connect("127.0.0.1", *port);
    t.join();
    ASSERT_TRUE(con) << con.error();
    ASSERT_TRUE(acc) << acc.error();
    // One Send each way is enough to have each QP's receive path read from its socket.
    auto* mr = c.reg(src.data(), src.size(), 0);
    ASSERT_EQ(
        post_one(c.qp(),
                 {.op = IBV_WR_SEND, .addr = src.data(), .len = 64, .lkey = mr->lkey, .wr_id = 2}),
        0);
    auto wc = s.wait(s.recv_cq());
    ASSERT_TRUE(wc) << wc.error();
    ASSERT_EQ(wc->status, IBV_WC_SUCCESS);
    auto sc = c.wait(c.send_cq());
    ASSERT_TRUE(sc) << sc.error();
  };
  connect_one(*first_server, *first_client, dst[0]);
  if (HasFatalFailure()) return;

  malloc_trim(0);
  const std::uint64_t before = vm_rss();
  for (int i = 0; i < kPairs; ++i) {
    servers.push_back(std::make_unique<Endpoint>(small(), first_server->ctx()));
    clients.push_back(std::make_unique<Endpoint>(small(), first_client->ctx()));
    connect_one(*servers.back(), *clients.back(), dst[static_cast<std::size_t>(i) + 1]);
    if (HasFatalFailure()) return;
  }
  malloc_trim(0);
  const std::uint64_t after = vm_rss();
  const double per_qp = static_cast<double>(after > before ? after - before : 0) / (2.0 * kPairs);
  // Each endpoint here also holds its PD, two CQs of 8, two completion channels, a CM id and
  // event channel and a 64-octet region: all in the figure. Measured on x86-64 glibc (Debian
  // 12): 30.6 KiB per QP with a staging buffer per QP, 14.6 KiB without.
  const double bound = 20.0 * 1024;
  RecordProperty("resident_per_idle_qp", static_cast<int>(per_qp));
  EXPECT_LT(per_qp, bound) << "resident memory per idle QP: " << per_qp / 1024 << " KiB (" << before
                           << " -> " << after << " for " << 2 * kPairs << " QPs)";
  std::printf("resident memory per idle QP: %.1f KiB\n", per_qp / 1024);
}
