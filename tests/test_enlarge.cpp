// The buffer-enlargement protocol (seeds 000-002) over the verbs shim, two nodes in this
// process talking over 127.0.0.1: every phase, iovec thresholds, refusal, both directions.
#include <gtest/gtest.h>

#include <random>

#include "enlarge/node.hpp"

namespace iwarp::enlarge {
namespace {

using namespace std::chrono_literals;

Bytes pattern(std::size_t n, std::uint32_t seed) {
  Bytes b(n);
  std::mt19937 g(seed);
  for (auto& x : b) x = static_cast<std::uint8_t>(g());
  return b;
}

// Two nodes, driven from this thread alternately (each has its own device engine).
struct Pair {
  std::unique_ptr<Node> server, client;
  std::vector<Connection*> s, c;  // accepted / connected, index-aligned

  explicit Pair(Options so = {}, Options co = {}, int connections = 1) {
    server = std::move(*Node::create(so));
    client = std::move(*Node::create(co));
    const std::uint16_t port = *server->listen("127.0.0.1", 0);
    for (int i = 0; i < connections; ++i) {
      Connection* cc = client->connect_async("127.0.0.1", port);
      Connection* sc = nullptr;
      drive([&] {
        if (!sc) {
          auto a = server->accept(0ms);
          if (a) sc = *a;
        }
        return sc && cc->state() != Connection::State::Connecting;
      });
      EXPECT_EQ(cc->state(), Connection::State::Established) << cc->error();
      s.push_back(sc);
      c.push_back(cc);
    }
  }
  template <class Pred>
  bool drive(Pred done, std::chrono::milliseconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      server->progress(1ms);
      client->progress(1ms);
    }
    return true;
  }
  // Drives until `to` has `n` messages, returning them.
  std::vector<Received> collect(Connection* to, std::size_t n) {
    std::vector<Received> out;
    drive([&] {
      while (auto r = to->try_recv()) out.push_back(std::move(*r));
      return out.size() >= n || to->state() == Connection::State::Failed;
    });
    return out;
  }
};

TEST(Enlarge, SmallMessageGoesEagerInOneSlot) {
  Pair p;
  const auto before = p.s[0]->registered_bytes();
  auto msg = pattern(500, 1);
  ASSERT_TRUE(p.c[0]->post(msg));
  auto got = p.collect(p.s[0], 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].data, msg);
  EXPECT_EQ(p.c[0]->stats().pieces_sent, 1u);
  EXPECT_EQ(p.c[0]->stats().enlarge_requests, 0u);
  EXPECT_EQ(p.s[0]->registered_bytes(), before);
}

TEST(Enlarge, LargeMessageEnlargesAndArrivesIntact) {
  Pair p;
  auto msg = pattern(70000, 2);
  ASSERT_TRUE(p.c[0]->post(msg));
  auto got = p.collect(p.s[0], 1);
  ASSERT_EQ(got.size(), 1u) << p.s[0]->error() << p.c[0]->error();
  EXPECT_EQ(got[0].data, msg);
  EXPECT_EQ(p.c[0]->stats().enlargements, 1u);
  EXPECT_EQ(p.c[0]->stats().bulk_writes, 1u);
  EXPECT_GE(p.s[0]->rx_enlarged_size(), 70000u);
}

}  // namespace
}  // namespace iwarp::enlarge
