// The buffer-enlargement connection's pieces on their own: flow-control credits, the sender's
// ring over the peer's enlarged buffer, the receiver's message assembly and the hello codec.
#include <gtest/gtest.h>

#include "enlarge/credits.hpp"
#include "enlarge/peer_ring.hpp"
#include "enlarge/reassembly.hpp"
#include "enlarge/wire_format.hpp"

namespace iwarp::enlarge {
namespace {

TEST(EnlargeCredits, TheLastCreditIsKeptForACreditMessage) {
  Credits c(/*send_slots=*/2);
  c.start(2);
  EXPECT_TRUE(c.allow(/*is_credit=*/false));
  c.sent(0);
  EXPECT_FALSE(c.allow(false));
  EXPECT_TRUE(c.allow(true));
  EXPECT_TRUE(c.returned(1));
  EXPECT_EQ(c.peer_slots(), 2u);
}

// Only slots this side's Sends consumed come back: a claim of more is refused, nothing counted.
TEST(EnlargeCredits, MoreReturnedThanSentIsRefused) {
  Credits c(4);
  c.start(4);
  EXPECT_FALSE(c.returned(1));  // nothing sent yet
  c.sent(0);
  c.sent(0);
  EXPECT_EQ(c.outstanding(), 2u);
  EXPECT_FALSE(c.returned(3));
  EXPECT_EQ(c.peer_slots(), 2u);
  EXPECT_TRUE(c.returned(2));
  EXPECT_EQ(c.peer_slots(), 4u);
  EXPECT_EQ(c.outstanding(), 0u);
  EXPECT_FALSE(c.returned(0xffffffff));
}

TEST(EnlargeCredits, RepostedSlotsAreCarriedBackByTheNextSend) {
  Credits c(2);
  c.start(4);
  c.reposted();
  c.reposted();
  EXPECT_EQ(c.to_carry(), 2u);
  c.sent(c.to_carry());
  EXPECT_EQ(c.unannounced(), 0u);
  EXPECT_EQ(c.peer_slots(), 3u);
}

TEST(EnlargeCredits, SendsInFlightAreBoundedByTheSendSlots) {
  Credits c(2);
  c.send_started();
  EXPECT_TRUE(c.send_slot_free());
  c.send_started();
  EXPECT_FALSE(c.send_slot_free());
  c.send_completed();
  EXPECT_TRUE(c.send_slot_free());
}

TEST(EnlargePeerRing, ChunksGoAfterTheNewestAndWrapToTheFreedStart) {
  PeerRing r;
  std::uint32_t at = 99;
  ASSERT_TRUE(r.place(400, 1000, &at));
  EXPECT_EQ(at, 0u);
  r.push(at, 400);
  ASSERT_TRUE(r.place(400, 1000, &at));
  EXPECT_EQ(at, 400u);
  r.push(at, 400);
  EXPECT_FALSE(r.place(400, 1000, &at));  // 200 left at the end, the start still unanswered
  ASSERT_TRUE(r.answer(1));
  ASSERT_TRUE(r.place(400, 1000, &at));
  EXPECT_EQ(at, 0u);
  r.push(at, 400);
  EXPECT_FALSE(r.place(1, 1000, &at));  // wrapped: [400, 400) is all that is free
  EXPECT_EQ(r.unanswered(), 2u);
}

TEST(EnlargePeerRing, AReadyForMoreChunksThanWrittenIsRefused) {
  PeerRing r;
  r.push(0, 10);
  EXPECT_FALSE(r.answer(2));
  EXPECT_EQ(r.unanswered(), 1u);
  EXPECT_TRUE(r.answer(1));
  EXPECT_TRUE(r.empty());
}

TEST(EnlargeReassembly, PartsAtTheNextOffsetMakeOneMessageInOrder) {
  Reassembly a(1000);
  const Bytes one = {1, 2, 3}, two = {4, 5};
  auto r = a.add(1, 5, 0, one);
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r);
  EXPECT_FALSE(a.pop());
  r = a.add(1, 5, 3, two);
  ASSERT_TRUE(r);
  EXPECT_TRUE(*r);
  auto m = a.pop();
  ASSERT_TRUE(m);
  EXPECT_EQ(m->seq, 1u);
  EXPECT_EQ(m->data, (Bytes{1, 2, 3, 4, 5}));
}

TEST(EnlargeReassembly, GapsWrongSequenceAndOversizedMessagesAreProtocolErrors) {
  Reassembly a(100);
  const Bytes d = {1};
  EXPECT_FALSE(a.add(2, 1, 0, d));    // seq 1 is next
  EXPECT_FALSE(a.add(1, 5, 2, d));    // a message starts at offset 0
  EXPECT_FALSE(a.add(1, 101, 0, d));  // over the largest message
  ASSERT_TRUE(a.add(1, 5, 0, d));
  EXPECT_FALSE(a.add(1, 5, 3, d));  // offset 1 is next
}

TEST(EnlargeWire, HelloWithTooFewReceiveSlotsOrTooSmallSlotsIsRefused) {
  Bytes h = encode_hello(Hello{1024, kMinRecvSlots - 1, Mode::Enlarge});
  EXPECT_NE(decode_hello(h).error().find("too small"), std::string::npos);
  h = encode_hello(Hello{static_cast<std::uint32_t>(kMaxControlBytes - 1), 4, Mode::Enlarge});
  EXPECT_FALSE(decode_hello(h));
  h = encode_hello(Hello{1024, 4, Mode::Enlarge});
  h[4] = kHelloVersion + 1;
  EXPECT_NE(decode_hello(h).error().find("version"), std::string::npos);
  h.resize(kHelloBytes - 1);
  EXPECT_FALSE(decode_hello(h));
}

// A Bundle: several messages in one Send, each a 2-octet length and the message; only the
// Bundle's header returns credits.
TEST(EnlargeWire, BundleCarriesSeveralMessagesAndRoundTrips) {
  const Bytes data = {1, 2, 3, 4, 5};
  Bundle b;
  b.messages.push_back(Message{.credits = 0, .seq = 4, .body = Piece{5, 0, data}});
  b.messages.push_back(Message{.credits = 0, .seq = 5, .body = Piece{0, 0, {}}});
  b.messages.push_back(Message{.credits = 0, .seq = 3, .body = Ready{2}});
  const Message m{.credits = 3, .seq = 0, .body = b};
  const Bytes wire = encode(m);
  ASSERT_EQ(wire.size(), kHeaderBytes + (2 + 21) + (2 + 16) + (2 + 12));
  EXPECT_EQ(wire[1], static_cast<std::uint8_t>(MsgType::Bundle));
  EXPECT_EQ(wire[8], 0);  // first record's length, big-endian
  EXPECT_EQ(wire[9], 21);
  EXPECT_EQ(wire[10], kVersion);  // then the Piece itself
  auto back = decode(wire);
  ASSERT_TRUE(back) << back.error().what;
  ASSERT_EQ(back->type(), MsgType::Bundle);
  const auto& inner = std::get<Bundle>(back->body).messages;
  ASSERT_EQ(inner.size(), 3u);
  EXPECT_EQ(back->credits, 3u);
  EXPECT_EQ(describe(inner[0]), describe(b.messages[0]));
  EXPECT_EQ(describe(inner[2]), describe(b.messages[2]));
  EXPECT_EQ(encode(*back), wire);
}

TEST(EnlargeWire, BadBundlesSayWhatIsWrong) {
  auto err = [](Bytes w) {
    auto m = decode(w);
    return m ? std::string("decoded") : m.error().what;
  };
  const Bytes header = {kVersion, 10, 0, 0, 0, 0, 0, 0};
  EXPECT_NE(err(header).find("Bundle of no messages"), std::string::npos);
  Bytes cut = header;
  cut.push_back(0);
  EXPECT_NE(err(cut).find("cut inside its length"), std::string::npos);
  Bytes past = header;
  for (std::uint8_t x : std::initializer_list<std::uint8_t>{0, 9, kVersion, 8, 0, 0, 0, 0, 0, 0})
    past.push_back(x);
  EXPECT_NE(err(past).find("runs past the end"), std::string::npos);
  Bytes credits = header;
  for (std::uint8_t x : std::initializer_list<std::uint8_t>{0, 8, kVersion, 8, 0, 1, 0, 0, 0, 0})
    credits.push_back(x);
  EXPECT_NE(err(credits).find("returns 1 credits"), std::string::npos);
  Bytes nested = header;
  nested.insert(nested.end(), {0, 18});
  nested.insert(nested.end(), header.begin(), header.end());
  nested.insert(nested.end(), {0, 8, kVersion, 8, 0, 0, 0, 0, 0, 0});
  EXPECT_NE(err(nested).find("is a Bundle"), std::string::npos);
  Bytes bad_inner = header;
  bad_inner.insert(bad_inner.end(), {0, 8, kVersion, 42, 0, 0, 0, 0, 0, 0});
  EXPECT_NE(err(bad_inner).find("unknown message type 42"), std::string::npos);
}

// A version-1 hello (no Bundles) is refused, so Bundles only go to peers that take them.
TEST(EnlargeWire, HelloVersionOneIsRefused) {
  Bytes h = encode_hello(Hello{1024, 4, Mode::Enlarge});
  EXPECT_EQ(h[4], kHelloVersion);
  h[4] = 1;
  EXPECT_NE(decode_hello(h).error().find("hello version 1"), std::string::npos);
}

}  // namespace
}  // namespace iwarp::enlarge
