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
  c.returned(3);
  EXPECT_EQ(c.peer_slots(), 4u);
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
  c.send_posted();
  EXPECT_TRUE(c.send_slot_free());
  c.send_posted();
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
  h[4] = kVersion + 1;
  EXPECT_NE(decode_hello(h).error().find("version"), std::string::npos);
  h.resize(kHelloBytes - 1);
  EXPECT_FALSE(decode_hello(h));
}

}  // namespace
}  // namespace iwarp::enlarge
