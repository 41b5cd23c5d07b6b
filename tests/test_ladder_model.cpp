// The ladder library on its own over the committed captures: the model's limit on what it
// holds, message grouping across DDP segments, opcode names, XML escaping, local events
// attached beside their message.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>

#include "ladder/filter.hpp"
#include "ladder/layout.hpp"
#include "ladder/local_events.hpp"
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

namespace {

// Local events go after the message whose segments span their frame (the DDP key picking
// among messages of that frame), consecutive placements merge, frame 0 goes after the MPA
// exchange, and the model's limit holds for them too.
TEST(LadderModel, LocalEventsGoBesideTheirMessage) {
  const auto path = kTraces + "generated/mpa2_p2p_write.pcap";
  auto m = build_model(path, Filter{});
  ASSERT_TRUE(m) << m.error();
  ASSERT_FALSE(m->connections.empty());
  auto& c = m->connections[0];
  // A message of several segments, from the capture.
  const Event* multi = nullptr;
  for (const auto& e : c.events)
    if (e.kind == Event::Kind::Message && e.msg.segments > 1 && !e.msg.tagged) {
      multi = &e;
      break;
    }
  ASSERT_NE(multi, nullptr);
  // attach_local_events() rebuilds c.events: `multi` does not outlive it, its values do.
  const auto msg_frame = multi->frame, last = multi->msg.last_frame;
  const auto msg_dir = multi->dir;
  ASSERT_GT(last, msg_frame);
  const bool to_initiator = multi->dir == iwarp::mpa::Direction::FromResponder;
  const MessageKey key{.tagged = false, .qn = multi->msg.qn, .msn = multi->msg.msn};
  std::vector<LocalInput> in;
  for (int i = 0; i < 2; ++i)
    in.push_back({.at_initiator = to_initiator,
                  .message_dir = multi->dir,
                  .frame = last,
                  .key = key,
                  .stream_offset = {},
                  .category = "placed",
                  .text = "placed in order"});
  in.push_back({.at_initiator = to_initiator,
                .message_dir = multi->dir,
                .frame = last,
                .key = key,
                .stream_offset = {},
                .category = "hole-closed",
                .text = "hole closed"});
  in.push_back({.at_initiator = true,
                .message_dir = iwarp::mpa::Direction::FromInitiator,
                .frame = 0,
                .key = {},
                .stream_offset = {},
                .category = "wqe-posted",
                .text = "receive WQEs posted"});
  const auto before = c.events.size();
  EXPECT_EQ(attach_local_events(*m, c.index, in), 4u);
  ASSERT_EQ(c.events.size(), before + 3);  // the two placements drawn once
  std::size_t at = SIZE_MAX, posted = SIZE_MAX, first_msg = SIZE_MAX;
  for (std::size_t i = 0; i < c.events.size(); ++i) {
    const auto& e = c.events[i];
    if (e.kind == Event::Kind::Message && first_msg == SIZE_MAX) first_msg = i;
    if (e.kind == Event::Kind::Message && e.frame == msg_frame && e.dir == msg_dir) at = i;
    if (e.kind == Event::Kind::Local && e.local.category == "wqe-posted") posted = i;
  }
  ASSERT_NE(at, SIZE_MAX);
  ASSERT_LT(at + 2, c.events.size());
  EXPECT_EQ(c.events[at + 1].local.category, "placed");
  EXPECT_EQ(c.events[at + 1].local.count, 2u);
  EXPECT_EQ(c.events[at + 1].local.of_event, at);
  EXPECT_EQ(c.events[at + 2].local.category, "hole-closed");
  EXPECT_EQ(c.events[at + 2].local.at_initiator, to_initiator);
  EXPECT_EQ(posted + 1, first_msg);  // after the MPA Reply, before the first message
  EXPECT_EQ(c.events[posted - 1].kind, Event::Kind::Mpa);
  // Drawn: one local group per local event, tied to the message's frame.
  auto page = layout(*m, {.collapse = false, .max_rows = 0, .page = 1});
  ASSERT_TRUE(page);
  const auto svg = render_svg(*m, *page);
  EXPECT_NE(svg.find(fmt::format("<g class=\"local placed\" data-side=\"{}\" data-frame=\"{}\" "
                                 "data-count=\"2\" data-seq=\"0\" data-of-frame=\"{}\">",
                                 to_initiator ? "initiator" : "responder", last, msg_frame)),
            std::string::npos);
  // The limit: a model that is full takes none and says so.
  auto full = build_model(path, Filter{});
  ASSERT_TRUE(full);
  EXPECT_EQ(attach_local_events(*full, full->connections[0].index, in, events(*full)), 0u);
  ASSERT_EQ(full->notes.size(), 1u);
  EXPECT_NE(full->notes[0].find("4 local event(s) of c0 not drawn"), std::string::npos);
}

}  // namespace
