// The sentences rnic ping and demo --explain print for their own side's work requests: one per
// RDMAP opcode a consumer's work request goes out as (trace/explain.hpp's opcode table), with
// the request's values, and for its completion on the send CQ.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "trace/explain.hpp"

namespace iwarp::trace {
namespace {

constexpr std::uint32_t kStag = 0x1a2b3c04;
constexpr std::uint64_t kTo = 0x2000;

PostedWork work(std::uint8_t op) {
  return {.opcode = op, .length = 1234, .stag = kStag, .to = kTo};
}

TEST(ExplainPosted, EveryOpcodeAConsumerPostsHasItsOwnSentenceWithItsValues) {
  std::set<std::string> seen;
  for (std::uint8_t op : {0x0, 0x1, 0x3, 0x4, 0x5, 0x6, 0x8, 0x9, 0xA}) {
    const auto s = explain_posted(work(op));
    SCOPED_TRACE(s);
    EXPECT_TRUE(s.starts_with(op == 0x0   ? "RDMA Write posted"
                              : op == 0x1 ? "RDMA Read posted"
                              : op == 0xA ? "atomic posted"
                                          : std::string(rdmap::opcode_name(op)) + " posted"));
    EXPECT_NE(s.find("(RFC "), std::string::npos);
    EXPECT_TRUE(seen.insert(s).second) << "shared with another opcode";
    const bool tagged_or_atomic = op == 0x0 || op == 0x1 || op == 0xA;
    const bool invalidates = op == 0x4 || op == 0x6;
    const auto has = [&](const char* v) { return s.find(v) != std::string::npos; };
    // Immediate Data carries no payload, an atomic 8 octets: no length of theirs to say.
    EXPECT_TRUE(op == 0xA || op == 0x8 || op == 0x9 || has("1234 octets"));
    EXPECT_TRUE(!tagged_or_atomic || has("TO 0x2000"));
    EXPECT_TRUE(!(tagged_or_atomic || invalidates) || has("STag 0x1a2b3c04"));
    EXPECT_TRUE(tagged_or_atomic || has("receive WQE"));
  }
}

TEST(ExplainPosted, MessagesTheRnicSendsItselfAreNoWorkRequest) {
  for (std::uint8_t op : {0x2, 0x7, 0xB, 0xC, 0xF})
    EXPECT_NE(explain_posted(work(op)).find("no work request a consumer posts"), std::string::npos)
        << int(op);
}

TEST(ExplainPosted, CompletionsSayWhenAndWhy) {
  for (std::uint8_t op : {0x0, 0x3, 0x4, 0x8}) {
    const auto s = explain_work_completion(work(op), true);
    EXPECT_NE(s.find("once TCP has taken all of it"), std::string::npos) << s;
    EXPECT_NE(s.find(rdmap::opcode_name(op)), std::string::npos) << s;
  }
  EXPECT_NE(explain_work_completion(work(0x1), true).find("last Read Response"), std::string::npos);
  EXPECT_NE(explain_work_completion(work(0xA), true).find("Atomic Response"), std::string::npos);
  const auto flushed = explain_work_completion(work(0x3), false);
  EXPECT_NE(flushed.find("Send work request completes in error"), std::string::npos) << flushed;
  EXPECT_NE(flushed.find("flushed (RFC 5040 §4.8)"), std::string::npos) << flushed;
}

}  // namespace
}  // namespace iwarp::trace
