// The ladder library on its own over the committed captures: the model's limit on what it
// holds, message grouping across DDP segments, opcode names, XML escaping.
#include <gtest/gtest.h>

#include <string>

#include "ladder/filter.hpp"
#include "ladder/layout.hpp"
#include "ladder/model.hpp"
#include "ladder/svg_writer.hpp"

namespace {

using namespace iwarp::ladder;

const std::string kTraces = std::string(IWARP_SOURCE_DIR) + "/pcap_traces/";

std::size_t events(const Model& m) {
  std::size_t n = 0;
  for (const auto& c : m.connections) n += c.events.size();
  return n;
}

TEST(LadderModel, HoldsAtMostItsLimitAndSaysWhatItLeftOut) {
  auto all = build_model(kTraces + "siw/rping_lo.pcap", Filter{});
  ASSERT_TRUE(all) << all.error();
  EXPECT_EQ(events(*all), 72u);  // 2 MPA frames and 70 messages
  EXPECT_TRUE(all->notes.empty());
  auto cut = build_model(kTraces + "siw/rping_lo.pcap", Filter{}, 10);
  ASSERT_TRUE(cut) << cut.error();
  EXPECT_EQ(events(*cut), 10u);
  ASSERT_EQ(cut->notes.size(), 1u);
  EXPECT_NE(cut->notes[0].find("62 more event(s) not drawn"), std::string::npos);
  EXPECT_EQ(cut->messages_in_file, 70u);
  // The note is drawn on the page.
  auto page = layout(*cut, {});
  ASSERT_TRUE(page);
  EXPECT_NE(render_svg(*cut, *page).find("62 more event(s) not drawn"), std::string::npos);
}

TEST(LadderModel, MultiSegmentMessagesAreOneMessageWithTheirSegments) {
  // mpa2_crc: a 3000-octet Send with Invalidate in 3 segments, a 5000-octet Write in 4, a
  // 4000-octet Read Response in 3 (see rnic decode's lines for this file).
  auto m = build_model(kTraces + "generated/mpa2_crc.pcap", Filter{});
  ASSERT_TRUE(m) << m.error();
  ASSERT_EQ(m->connections.size(), 1u);
  std::vector<std::tuple<std::string, std::uint64_t, std::uint32_t>> multi;
  for (const auto& e : m->connections[0].events)
    if (e.kind == Event::Kind::Message && e.msg.segments > 1)
      multi.emplace_back(opcode_label(e.msg.opcode), e.msg.length, e.msg.segments);
  const std::vector<std::tuple<std::string, std::uint64_t, std::uint32_t>> want{
      {"Send with Invalidate", 3000, 3}, {"RDMA Write", 5000, 4}, {"RDMA Read Response", 4000, 3}};
  EXPECT_EQ(multi, want);
  // The Terminate's fields come through.
  const auto& last = m->connections[0].events.back();
  ASSERT_TRUE(last.msg.terminate);
  EXPECT_EQ(last.msg.terminate->layer, 1u);
  EXPECT_EQ(last.msg.terminate->etype, 1u);
  EXPECT_EQ(last.msg.terminate->ecode, 0u);
  EXPECT_EQ(last.msg.terminate->meaning, "DDP tagged: invalid STag");
}

TEST(LadderModel, OpcodeNamesShortOrAsDecodePrintsThem) {
  Filter f;
  ASSERT_TRUE(parse_opcodes("write,RDMA Read Response,send_se_inv,Atomic-Request", f));
  EXPECT_FALSE(f.any_opcode);
  EXPECT_FALSE(f.mpa);
  EXPECT_TRUE(f.keeps_opcode(0x0));
  EXPECT_TRUE(f.keeps_opcode(0x2));
  EXPECT_TRUE(f.keeps_opcode(0x6));
  EXPECT_TRUE(f.keeps_opcode(0xA));
  EXPECT_FALSE(f.keeps_opcode(0x3));
  auto bad = parse_opcodes("send,,write", f);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().find("unknown opcode name ''"), std::string::npos);
  EXPECT_EQ(bad.error().find('\n'), std::string::npos);
}

TEST(LadderModel, XmlEscapeCoversTheFiveSpecialCharactersAndControls) {
  EXPECT_EQ(xml_escape("a<b>&\"c'\x01"), "a&lt;b&gt;&amp;&quot;c&apos;?");
}

}  // namespace
