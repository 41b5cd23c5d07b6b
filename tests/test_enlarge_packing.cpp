// The buffer-enlargement protocol's economy of Sends, over real sockets (two nodes in this
// process on 127.0.0.1): small messages queued together share one Send (a Bundle), reposted
// receive slots ride back in the headers of the messages going the other way rather than in
// Credits of their own, and a large message streams through the enlarged ring with several
// Writes unanswered at once (docs/enlarge.md, "Packing and credits").
#include <gtest/gtest.h>

#include <optional>
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

struct Pair {
  std::unique_ptr<Node> server;
  std::unique_ptr<Node> client;
  Connection* s = nullptr;
  Connection* c = nullptr;
  explicit Pair(const Options& o = {})
      : server(std::move(*Node::create(o))), client(std::move(*Node::create(o))) {
    const std::uint16_t port = *server->listen("127.0.0.1", 0);
    c = client->connect_async("127.0.0.1", port);
    drive([&] {
      if (!s) {
        if (auto a = server->accept(0ms)) s = *a;
      }
      return s && c->state() != Connection::State::Connecting;
    });
    EXPECT_EQ(c->state(), Connection::State::Established) << c->error();
  }
  template <class Pred>
  bool drive(Pred done, std::chrono::milliseconds limit = 20s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      server->progress(1ms);
      client->progress(1ms);
    }
    return true;
  }
};

// 300 small messages posted at once: they leave in far fewer Sends than messages, each Send
// carrying what was queued when a slot was free, and arrive intact and in order.
TEST(EnlargePacking, SmallMessagesQueuedTogetherShareSends) {
  Pair p;
  ASSERT_NE(p.s, nullptr);
  std::vector<Bytes> sent;
  for (int i = 0; i < 300; ++i) {
    sent.push_back(pattern(static_cast<std::size_t>(i % 5 == 0 ? 0 : 20 + i % 90), 10 + i));
    ASSERT_TRUE(p.c->post(sent.back()));
  }
  std::vector<Received> got;
  ASSERT_TRUE(p.drive([&] {
    while (auto r = p.s->try_recv()) got.push_back(std::move(*r));
    return got.size() == sent.size() || p.s->state() == Connection::State::Failed;
  })) << got.size();
  ASSERT_EQ(got.size(), sent.size()) << p.s->error();
  for (std::size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(got[i].seq, i + 1);
    EXPECT_EQ(got[i].data, sent[i]) << i;
  }
  const Stats& cs = p.c->stats();
  // One Send per message would be 300 (and as many receive slots consumed at the server).
  EXPECT_LT(cs.sends, 300u / 4) << "sends " << cs.sends;
  EXPECT_GT(cs.bundles, 0u);
  EXPECT_EQ(p.s->stats().sends_received, cs.sends);
  EXPECT_EQ(p.s->stats().messages_received, 300u);
}

// A message too large for what is left of a Send is cut: the rest goes in the next Send, and
// small and large (enlarged) messages still interleave in order.
TEST(EnlargePacking, MixedSizesKeepOrderAcrossSends) {
  Pair p;
  ASSERT_NE(p.s, nullptr);
  std::vector<Bytes> sent;
  std::mt19937 g(7);
  for (int i = 0; i < 200; ++i) {
    const int k = std::uniform_int_distribution<int>(0, 9)(g);
    const std::size_t n = k < 6   ? std::uniform_int_distribution<std::size_t>(0, 300)(g)
                          : k < 9 ? std::uniform_int_distribution<std::size_t>(301, 1008)(g)
                                  : std::uniform_int_distribution<std::size_t>(1009, 30000)(g);
    sent.push_back(pattern(n, 500 + i));
    ASSERT_TRUE(p.c->post(sent.back()));
  }
  std::vector<Received> got;
  ASSERT_TRUE(p.drive([&] {
    while (auto r = p.s->try_recv()) got.push_back(std::move(*r));
    return got.size() == sent.size() || p.s->state() == Connection::State::Failed;
  }));
  ASSERT_EQ(got.size(), sent.size()) << p.s->error();
  for (std::size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(got[i].data, sent[i]) << i;
  EXPECT_LT(p.c->stats().sends, 200u);
}

// Slots go up to 1 MiB, but a Bundle record's length is 2 octets: a message over 65,535
// octets is a Send of its own, never a record (its length cut to 16 bits, the receiver would
// read the rest of its data as records an application could forge). 70,000-octet Pieces and
// small messages posted faster than credits return leave packed wherever they may.
TEST(EnlargePacking, MessagesOverARecordsLengthInLargeSlotsGoAlone) {
  Options o;
  o.slot_size = 128 * 1024;
  Pair p(o);
  ASSERT_NE(p.s, nullptr);
  std::vector<Bytes> sent;
  for (std::uint32_t i = 0; i < 8; ++i) {
    sent.push_back(pattern(70000, 2 * i));
    sent.push_back(pattern(100, 2 * i + 1));
  }
  for (auto& b : sent) ASSERT_TRUE(p.c->post(b));
  std::vector<Received> got;
  ASSERT_TRUE(p.drive([&] {
    while (auto r = p.s->try_recv()) got.push_back(std::move(*r));
    return got.size() == sent.size() || p.s->state() == Connection::State::Failed;
  }));
  ASSERT_EQ(got.size(), sent.size()) << p.s->error();
  for (std::size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(got[i].data, sent[i]) << i;
  EXPECT_EQ(p.c->stats().bulk_writes, 0u);  // below the threshold: all in Pieces
}

// Requests one way, an answer to each the other way: the server's answers carry its reposted
// slots back, so it sends (almost) no Credit of its own; the old rule (a Credit as soon as two
// slots were reposted, before the application could answer) sent one every few requests.
TEST(EnlargePacking, CreditsRideOnTheAnswers) {
  Pair p;
  ASSERT_NE(p.s, nullptr);
  constexpr int kRequests = 400;
  int posted = 0, answered = 0, received = 0;
  ASSERT_TRUE(p.drive([&] {
    // The client keeps up to 8 requests outstanding.
    while (posted < kRequests && posted - received < 8) {
      if (!p.c->post(pattern(40, static_cast<std::uint32_t>(posted)))) return true;
      ++posted;
    }
    while (auto r = p.s->try_recv()) {
      if (!p.s->post(pattern(24, 9000 + r->seq))) return true;
      ++answered;
    }
    while (auto r = p.c->try_recv()) {
      EXPECT_EQ(r->data, pattern(24, 9000 + r->seq));
      ++received;
    }
    return received == kRequests;
  }));
  EXPECT_EQ(answered, kRequests);
  EXPECT_LE(p.s->stats().credit_messages, 2u) << "server sends " << p.s->stats().sends;
  // The client answers nothing: after its last request its reposted slots go in Credits.
  EXPECT_LT(p.c->stats().credit_messages, kRequests / 20u);
}

// Medium messages queued together go through the ring several at once, and the Dones of the
// Writes posted in one go share a Send: fewer Sends than Writes (one Done per Send before).
TEST(EnlargePacking, DonesOfWritesPostedTogetherShareASend) {
  Pair p;
  ASSERT_NE(p.s, nullptr);
  std::vector<Bytes> sent;
  for (int i = 0; i < 60; ++i) {
    sent.push_back(pattern(3000, 300 + i));
    ASSERT_TRUE(p.c->post(sent.back()));
  }
  std::vector<Received> got;
  ASSERT_TRUE(p.drive([&] {
    while (auto r = p.s->try_recv()) got.push_back(std::move(*r));
    return got.size() == sent.size() || p.s->state() == Connection::State::Failed;
  }));
  ASSERT_EQ(got.size(), sent.size()) << p.s->error();
  for (std::size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(got[i].data, sent[i]) << i;
  const Stats& cs = p.c->stats();
  EXPECT_EQ(cs.bulk_writes, 60u);
  EXPECT_EQ(p.s->stats().dones_received, 60u);
  EXPECT_LT(cs.sends, cs.bulk_writes / 2) << "sends " << cs.sends;
  EXPECT_GE(cs.most_writes_unanswered, 3u);
}

// Multiple phases: a stream of 4,000-byte messages fills the first ring (room for four) while
// more wait behind, so the sender asks for twice the ring, and again, up to the maximum; every
// message arrives intact and in order through the rings.
TEST(EnlargePacking, AStreamThatFillsTheRingGrowsIt) {
  Pair p;
  ASSERT_NE(p.s, nullptr);
  std::vector<Bytes> sent;
  for (int i = 0; i < 150; ++i) {
    sent.push_back(pattern(4000, 700 + i));
    ASSERT_TRUE(p.c->post(sent.back()));
  }
  std::vector<Received> got;
  ASSERT_TRUE(p.drive([&] {
    while (auto r = p.s->try_recv()) got.push_back(std::move(*r));
    return got.size() == sent.size() || p.s->state() == Connection::State::Failed;
  }));
  ASSERT_EQ(got.size(), sent.size()) << p.s->error() << p.c->error();
  for (std::size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(got[i].data, sent[i]) << i;
  EXPECT_GE(p.c->stats().enlarge_requests, 2u);
  EXPECT_GT(p.s->rx_enlarged_size(), 16000u);  // more than the first ring (4 x 4,000)
  EXPECT_LE(p.s->rx_enlarged_size(), 200000u);
  EXPECT_EQ(p.s->stats().buffers_freed + 1, p.s->stats().buffers_provisioned);
  // A single message of the same size, alone, asks once.
  Pair q;
  ASSERT_NE(q.s, nullptr);
  ASSERT_TRUE(q.c->post(pattern(4000, 1)));
  ASSERT_TRUE(q.drive([&] { return q.s->try_recv().has_value(); }));
  EXPECT_EQ(q.c->stats().enlarge_requests, 1u);
  EXPECT_EQ(q.s->rx_enlarged_size(), 16000u);
}

// A message of 1 MiB goes through the 200,000-byte enlarged buffer in many parts without a
// round trip per part: several Writes are unanswered at once, the receiver answers the Dones
// in fewer Readys than there were Writes, and no Send carries nothing but credits.
TEST(EnlargePacking, LargeMessageStreamsWithoutARoundTripPerPart) {
  Pair p;
  ASSERT_NE(p.s, nullptr);
  const Bytes big = pattern(1 << 20, 77);
  ASSERT_TRUE(p.c->post(big));
  std::optional<Received> got;
  ASSERT_TRUE(p.drive([&] {
    got = p.s->try_recv();
    return got.has_value() || p.s->state() == Connection::State::Failed;
  }));
  ASSERT_TRUE(got) << p.s->error();
  EXPECT_EQ(got->data, big);
  const Stats& cs = p.c->stats();
  const Stats& ss = p.s->stats();
  EXPECT_GE(cs.bulk_writes, 10u);  // 1 MiB through halves of 200,000 bytes
  EXPECT_EQ(ss.dones_received, cs.bulk_writes);
  EXPECT_GE(cs.most_writes_unanswered, 2u);
  EXPECT_LE(cs.readys_received, cs.bulk_writes);
  EXPECT_EQ(ss.credit_messages, 0u);  // the Readys carry the server's credits back
}

}  // namespace
}  // namespace iwarp::enlarge
