// `rnic replay` reads the capture with payloads_in_file: the plan's steps keep where each
// payload lies in the file (Step::file_offset), and the replay reads it back when it injects the
// step. Its replay must be the one of a capture held in memory, report for report, on every
// capture of the corpus (Atomic Responses renumbered, with their CRCs recomputed, included), in
// capture order and in a seeded disorder.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "replay/replay_plan.hpp"
#include "replay/replay_report.hpp"
#include "replay/replayer.hpp"
#include "trace/pcap_reader.hpp"
#include "trace/trace_decoder.hpp"

namespace iwarp::replay {
namespace {

std::vector<std::string> corpus() {
  std::vector<std::string> files;
  for (const char* dir : {"pcap_traces/generated", "pcap_traces/siw"})
    for (const auto& e :
         std::filesystem::directory_iterator(std::string(IWARP_SOURCE_DIR) + "/" + dir))
      if (e.path().extension() == ".pcap") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(StreamingReplay, PlanThatReadsTheFileReplaysAsTheOneInMemory) {
  const auto files = corpus();
  ASSERT_GE(files.size(), 20u);
  std::size_t in_file = 0, held = 0, planned = 0;
  for (const auto& path : files) {
    SCOPED_TRACE(path);
    auto cap = trace::read_capture(path);
    ASSERT_TRUE(cap) << cap.error();
    auto on_disk = trace::read_capture(path, {.payloads_in_file = true});
    ASSERT_TRUE(on_disk) << on_disk.error();
    ASSERT_TRUE(on_disk->file);
    // Every payload of the corpus (pcap files, no IP fragments) stays in the file.
    for (const auto& f : on_disk->flows)
      for (const auto& dir : f.dir)
        for (const auto& s : dir) EXPECT_TRUE(s.payload.empty());
    auto copying = make_plan(*cap);
    auto taking = make_plan(*on_disk);
    ASSERT_EQ(copying.has_value(), taking.has_value());
    if (!copying) {
      EXPECT_EQ(copying.error(), taking.error());
      continue;
    }
    ++planned;
    for (const auto& c : taking->connections) {
      std::map<std::uint64_t, const trace::TcpSegment*> captured;  // by frame
      for (const auto& dir : cap->flows[c.flow].dir)
        for (const auto& s : dir) captured[s.frame] = &s;
      for (const auto& st : c.steps) {
        if (st.kind != Step::Kind::Segment) continue;
        if (st.file_offset != trace::kNotInFile) {
          ++in_file;
          EXPECT_TRUE(st.payload.empty());
        } else {
          // A step holds its payload only when renumbering patched it.
          ++held;
          ASSERT_TRUE(captured.contains(st.frame));
          EXPECT_NE(st.payload, captured[st.frame]->payload) << "frame " << st.frame;
        }
      }
    }
    for (std::size_t i = 0; i < copying->connections.size(); ++i) {
      const auto &a = copying->connections[i], &b = taking->connections[i];
      ASSERT_EQ(a.steps.size(), b.steps.size());
      trace::PayloadReader reader(b.file);
      for (std::size_t k = 0; k < a.steps.size(); ++k)
        ASSERT_EQ(a.payload_of(a.steps[k], nullptr), b.payload_of(b.steps[k], &reader)) << k;
    }
    for (const std::optional<Permutation>& order :
         {std::optional<Permutation>{}, std::optional<Permutation>{Permutation{}}}) {
      ReplayOptions o;
      o.permutation = order;
      const auto a = replay(*copying, o);
      const auto b = replay(*taking, o);
      EXPECT_EQ(to_json(*copying, a, order, std::nullopt, true).dump(),
                to_json(*taking, b, order, std::nullopt, true).dump());
    }
  }
  EXPECT_GE(planned, 15u);
  EXPECT_GT(in_file, 1000u);  // the corpus's segments are read from the file
  EXPECT_GT(held, 0u);        // (the corpus has renumbered Atomic Responses)
}

// The learning pass decodes each direction as it becomes contiguous, in capture order. A
// capture that shows the initiator's first FPDUs before the MPA Reply (two hosts' captures
// merged with skewed clocks) has them held by the decoder until the Reply fixes their framing,
// then decoded as if they came after it: the same endpoints are learned. Bounded: past
// max_held octets held, that direction is not learned further, and nothing else breaks.
TEST(StreamingReplay, InitiatorOctetsBeforeTheReplyAreLearnedOnceItComes) {
  const auto path = std::string(IWARP_SOURCE_DIR) + "/pcap_traces/generated/mpa2_p2p_read_crc.pcap";
  auto cap = trace::read_capture(path);
  ASSERT_TRUE(cap) << cap.error();
  const auto in_order = make_plan(*cap);
  ASSERT_TRUE(in_order) << in_order.error();
  // The Reply is the responder's first segment with data; it now comes after the initiator's
  // third (its Request, then two with FPDUs).
  auto& flow = cap->flows.at(0);
  trace::TcpSegment* reply = nullptr;
  for (auto& sg : flow.dir[1])
    if (!sg.payload.empty()) {
      reply = &sg;
      break;
    }
  ASSERT_NE(reply, nullptr);
  std::vector<const trace::TcpSegment*> initiator;
  for (const auto& sg : flow.dir[0])
    if (!sg.payload.empty()) initiator.push_back(&sg);
  ASSERT_GE(initiator.size(), 4u);
  ASSERT_LT(reply->frame, initiator[1]->frame);
  reply->frame = initiator[2]->frame;  // (equal frames: the initiator's segment sorts first)
  const auto late = make_plan(*cap);
  ASSERT_TRUE(late) << late.error();
  const auto &a = in_order->connections.at(0), &b = late->connections.at(0);
  EXPECT_EQ(a.fpdus[0], b.fpdus[0]);
  EXPECT_EQ(a.fpdus[1], b.fpdus[1]);
  for (int e = 0; e < 2; ++e) {
    SCOPED_TRACE(e);
    ASSERT_EQ(a.ep[e].recvs.size(), b.ep[e].recvs.size());
    for (std::size_t k = 0; k < a.ep[e].recvs.size(); ++k)
      EXPECT_EQ(a.ep[e].recvs[k].size, b.ep[e].recvs[k].size);
    ASSERT_EQ(a.ep[e].regions.size(), b.ep[e].regions.size());
    for (std::size_t k = 0; k < a.ep[e].regions.size(); ++k) {
      EXPECT_EQ(a.ep[e].regions[k].stag, b.ep[e].regions[k].stag);
      EXPECT_EQ(a.ep[e].regions[k].end_to, b.ep[e].regions[k].end_to);
    }
    EXPECT_EQ(a.ep[e].reads.size(), b.ep[e].reads.size());
    EXPECT_EQ(a.ep[e].atomics.size(), b.ep[e].atomics.size());
  }
  EXPECT_EQ(a.notes, b.notes);
  // With 64 octets held at most, the initiator's direction stops where its held octets pass
  // 64 (and the responder's FPDUs captured before its Reply lie beyond a gap past 64 octets):
  // each a finding; less is learned, and the replay runs all the same.
  PlanLimits tiny;
  tiny.max_held = 64;
  const auto bounded = make_plan(*cap, tiny);
  ASSERT_TRUE(bounded) << bounded.error();
  const auto& c = bounded->connections.at(0);
  EXPECT_LT(c.fpdus[0], a.fpdus[0]);
  EXPECT_LT(c.fpdus[1], a.fpdus[1]);
  bool before_reply = false, beyond_gap = false;
  for (const auto& l : c.limits) {
    EXPECT_EQ(l.limit, "kMaxHeldBeyondGap");
    before_reply |= l.text.starts_with("I>R: more than 64 octets arrived before the MPA Reply");
    beyond_gap |= l.text.starts_with("R>I: ") && l.text.find("beyond a gap") != std::string::npos;
  }
  EXPECT_TRUE(before_reply) << ::testing::PrintToString(c.limits.size());
  EXPECT_TRUE(beyond_gap);
  const auto r = replay(*bounded, {});
  EXPECT_EQ(r.connections.size(), 1u);
}

// Keeping only the first events of the timeline (what the text report prints) changes nothing
// else: the same counts, Terminates and violations, the same event count, the same text.
TEST(StreamingReplay, BoundedTimelineKeepsTheFirstEventsAndEveryFinding) {
  for (const char* name :
       {"pcap_traces/generated/mpa2_crc.pcap", "pcap_traces/siw/netem_reorder.pcap",
        "pcap_traces/generated/mpa1_crc_markers.pcap"}) {
    SCOPED_TRACE(name);
    auto cap = trace::read_capture(std::string(IWARP_SOURCE_DIR) + "/" + name);
    ASSERT_TRUE(cap) << cap.error();
    auto plan = make_plan(*cap);
    ASSERT_TRUE(plan) << plan.error();
    const auto all = replay(*plan, {});
    ReplayOptions few;
    few.timeline_keep = 3;
    const auto some = replay(*plan, few);
    ASSERT_EQ(all.connections.size(), some.connections.size());
    std::size_t findings = 0;
    for (std::size_t i = 0; i < all.connections.size(); ++i) {
      const auto &a = all.connections[i], &b = some.connections[i];
      ASSERT_GT(a.timeline.size(), 3u);
      EXPECT_EQ(a.timeline_events, a.timeline.size());
      EXPECT_EQ(b.timeline.size(), 3u);
      EXPECT_EQ(b.timeline_events, a.timeline.size());
      for (std::size_t k = 0; k < 3; ++k)
        EXPECT_EQ(format_event(a.timeline[k], 0), format_event(b.timeline[k], 0));
      findings += a.terminates_sent.size() + a.terminates_received.size() + a.violations.size();
    }
    EXPECT_EQ(to_json(*plan, all, std::nullopt, std::nullopt, false).dump(),
              to_json(*plan, some, std::nullopt, std::nullopt, false).dump());
    ReportOptions ro;
    ro.timeline_limit = 3;
    EXPECT_EQ(format_text(*plan, all, std::nullopt, std::nullopt, ro),
              format_text(*plan, some, std::nullopt, std::nullopt, ro));
    if (std::string(name).find("generated") != std::string::npos) {
      EXPECT_GT(findings, 0u);  // the generated conversation ends with a Terminate
    }
  }
}

// The steps each StepSource::ReadAgain connection of `plan` makes as the file is read again
// (read_steps_again, as the replay reads them), with their payloads; none for the others.
std::vector<std::vector<Step>> steps_read_again(const Plan& plan) {
  std::vector<std::vector<Step>> all;
  for (const auto& c : plan.connections) {
    std::vector<Step> made;
    if (c.read_again) {
      EXPECT_NO_THROW(read_steps_again(c, [&](Step&& st, ByteSpan payload) {
        st.payload.assign(payload.begin(), payload.end());
        made.push_back(std::move(st));
      }));
    }
    all.push_back(std::move(made));
  }
  return all;
}

// `rnic replay` without --permute or --html keeps no step: it makes them as it reads the file
// a second time. They must be the steps a plan that keeps them holds, one for one (the
// renumbered Atomic Responses' patched payloads, the posts of Reads and atomics before the
// segment that carried them, FINs), and the replay the same report for report, on every
// capture of the corpus, whole and with frames dropped.
TEST(StreamingReplay, StepsMadeAsTheFileIsReadAgainAreTheKeptOnes) {
  const auto files = corpus();
  ASSERT_GE(files.size(), 20u);
  std::size_t planned = 0, compared = 0, posts = 0, patched = 0, fins = 0, kept_too = 0;
  for (const auto& path : files) {
    for (const std::vector<std::uint64_t>& drop :
         {std::vector<std::uint64_t>{}, std::vector<std::uint64_t>{5, 7, 8, 20, 21, 22}}) {
      SCOPED_TRACE(path + (drop.empty() ? "" : " (frames dropped)"));
      auto cap = trace::read_capture(path, {.payloads_in_file = true});
      ASSERT_TRUE(cap) << cap.error();
      if (!drop.empty()) {
        // (Some frames of a short capture are no segment: --drop refuses those.)
        std::vector<std::uint64_t> there;
        for (const auto f : drop) {
          auto copy = *cap;
          if (drop_frames(copy, {f})) there.push_back(f);
        }
        ASSERT_TRUE(drop_frames(*cap, there));
        EXPECT_EQ(cap->left_out, there);
      }
      const auto kept = make_plan(*cap);
      const auto again = make_plan(*cap, {}, StepSource::ReadAgain);
      ASSERT_EQ(kept.has_value(), again.has_value());
      if (!kept) continue;
      ++planned;
      ASSERT_EQ(kept->connections.size(), again->connections.size());
      const auto made = steps_read_again(*again);
      // (The connection with the most segments is always read again.)
      EXPECT_TRUE(std::any_of(again->connections.begin(), again->connections.end(),
                              [](const ConnectionPlan& c) { return c.read_again; }));
      for (std::size_t i = 0; i < kept->connections.size(); ++i) {
        const auto &a = kept->connections[i], &b = again->connections[i];
        EXPECT_FALSE(a.read_again);
        if (!b.read_again) {
          // (Past the budget: this connection keeps its steps.)
          ++kept_too;
          EXPECT_EQ(a.steps.size(), b.steps.size());
          continue;
        }
        EXPECT_TRUE(b.steps.empty());
        EXPECT_TRUE(b.setup.empty());
        EXPECT_EQ(a.step_count, a.steps.size());
        EXPECT_EQ(a.step_count, b.step_count);
        EXPECT_EQ(a.segments(), b.segments());
        EXPECT_EQ(a.setup_segments, b.setup_segments);
        EXPECT_EQ(a.first_time_us, b.first_time_us);
        EXPECT_EQ(a.notes, b.notes);
        EXPECT_EQ(a.cut_short, b.cut_short);
        ASSERT_EQ(made[i].size(), a.steps.size());
        trace::PayloadReader reader(a.file);
        for (std::size_t k = 0; k < a.steps.size(); ++k) {
          SCOPED_TRACE(k);
          const auto &x = a.steps[k], &y = made[i][k];
          ASSERT_EQ(x.kind, y.kind);
          EXPECT_EQ(x.dir, y.dir);
          EXPECT_EQ(x.side, y.side);
          EXPECT_EQ(x.frame, y.frame);
          EXPECT_EQ(x.time_us, y.time_us);
          EXPECT_EQ(x.seq, y.seq);
          EXPECT_EQ(x.offset, y.offset);
          EXPECT_EQ(x.item, y.item);
          EXPECT_TRUE(y.tagged.empty());
          if (x.kind == Step::Kind::Segment) {
            ASSERT_EQ(a.payload_of(x, &reader), y.payload);
            // (A kept step holds its payload when the renumbering patched it: the plan read
            // again patches it as it comes.)
            if (x.file_offset == trace::kNotInFile) {
              ++patched;
              EXPECT_FALSE(b.patches[index(x.dir)].empty());
            }
          }
          if (x.kind == Step::Kind::PostRead || x.kind == Step::Kind::PostAtomic) ++posts;
          if (x.kind == Step::Kind::Fin) ++fins;
        }
        compared += a.steps.size();
      }
      ReplayOptions o;
      const auto ra = replay(*kept, o);
      const auto rb = replay(*again, o);
      EXPECT_EQ(to_json(*kept, ra, std::nullopt, std::nullopt, true).dump(),
                to_json(*again, rb, std::nullopt, std::nullopt, true).dump());
      ReportOptions text;
      text.timeline_all = true;
      EXPECT_EQ(format_text(*kept, ra, std::nullopt, std::nullopt, text),
                format_text(*again, rb, std::nullopt, std::nullopt, text));
      // A disorder needs the kept steps' tagged ranges.
      o.permutation = Permutation{};
      EXPECT_THROW(replay(*again, o), std::invalid_argument);
    }
  }
  EXPECT_GE(planned, 30u);
  EXPECT_GT(kept_too, 0u);  // (a capture of many connections side by side: some keep theirs)
  EXPECT_GT(compared, 2000u);
  EXPECT_GT(posts, 0u);    // (the corpus has RDMA Reads and atomics)
  EXPECT_GT(patched, 0u);  // (and renumbered Atomic Responses)
  EXPECT_GT(fins, 0u);
}

// Each connection read again reads the file again up to its last frame: within kRescanBudget
// (twice the capture's frames), the ones with the most segments first; the others keep their
// steps, and so does a capture held in memory (a pipe's).
TEST(StreamingReplay, ReadingAgainStaysWithinItsBudget) {
  const auto path = std::string(IWARP_SOURCE_DIR) + "/pcap_traces/siw/rping_lo.pcap";
  auto cap = trace::read_capture(path, {.payloads_in_file = true});
  ASSERT_TRUE(cap) << cap.error();
  ASSERT_EQ(cap->flows.size(), 1u);
  ASSERT_EQ(kRescanBudget, 2u);
  const auto one = cap->flows.front();
  // The connection's last segment is near the capture's end: copies of it (side by side
  // through the whole capture), two are read again.
  std::uint64_t last = 0;
  for (const auto& dir : one.dir)
    for (const auto& s : dir) last = std::max(last, s.frame);
  ASSERT_GT(3 * last, 2 * cap->frames);
  for (std::size_t n = 1; n <= 4; ++n) {
    SCOPED_TRACE(n);
    cap->flows.assign(n, one);
    const auto plan = make_plan(*cap, {}, StepSource::ReadAgain);
    ASSERT_TRUE(plan) << plan.error();
    ASSERT_EQ(plan->connections.size(), n);
    // (As many segments each: the first two, in capture order.)
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(plan->connections[i].read_again, i < 2) << i;
      EXPECT_EQ(plan->connections[i].steps.empty(), i < 2) << i;
    }
    // (The copies are not in the file: only the plans are looked at.)
  }
  auto held = trace::read_capture(path);
  ASSERT_TRUE(held) << held.error();
  const auto plan = make_plan(*held, {}, StepSource::ReadAgain);
  ASSERT_TRUE(plan) << plan.error();
  EXPECT_FALSE(plan->connections.at(0).read_again);
  EXPECT_FALSE(plan->connections.at(0).steps.empty());
}

// The replay checks that reading the file again makes the steps the first read learned (their
// number, and a digest of their segments: a file that changed unseen would not): a plan that
// expects one step more, or other segments, is refused in one line.
TEST(StreamingReplay, AFileThatReadsAgainDifferentlyIsRefused) {
  const auto path = std::string(IWARP_SOURCE_DIR) + "/pcap_traces/siw/rping_lo.pcap";
  auto cap = trace::read_capture(path, {.payloads_in_file = true});
  ASSERT_TRUE(cap) << cap.error();
  for (const bool count : {true, false}) {
    SCOPED_TRACE(count ? "a step more" : "other segments");
    auto plan = make_plan(*cap, {}, StepSource::ReadAgain);
    ASSERT_TRUE(plan) << plan.error();
    EXPECT_NO_THROW(replay(*plan, {}));
    auto& c = plan->connections.at(0);
    ASSERT_TRUE(c.read_again);
    const auto learned = c.step_count;
    if (count)
      ++c.step_count;
    else
      ++c.step_digest;
    try {
      replay(*plan, {});
      ADD_FAILURE() << "no error";
    } catch (const trace::CaptureChanged& e) {
      EXPECT_EQ(std::string(e.what()),
                fmt::format("{}: the file changed while it was being read (connection c0 read "
                            "again makes {} step(s), {} when it was learned{})",
                            path, learned, c.step_count, count ? "" : ", from other segments"));
    }
  }
}

// The learning pass learns each FPDU as it is decoded, and names the segment that first carried
// it from the octets not decoded yet. Checked against the rule itself, on every capture of the
// corpus: the first segment in capture order (with payload, past the MPA frames) whose stream
// octets overlap the FPDU's, found here from `rnic decode`'s records and the capture's
// segments. The frames the plan gives each RDMA Read, atomic and Terminate of the capture (where
// their posts go, and what the report names) are those.
TEST(StreamingReplay, EachFpduIsFirstCarriedByTheFirstSegmentOverlappingIt) {
  std::size_t checked = 0;
  for (const auto& path : corpus()) {
    SCOPED_TRACE(path);
    auto cap = trace::read_capture(path);
    ASSERT_TRUE(cap) << cap.error();
    const auto plan = make_plan(*cap);
    if (!plan) continue;
    const auto rep = trace::decode_capture(*cap);
    for (const auto& c : plan->connections) {
      const auto& flow = cap->flows[c.flow];
      // Per direction, in stream order: the FPDUs' first frames and what they are.
      struct Seen {
        std::uint64_t frame;
        const trace::Record* r;
      };
      std::vector<Seen> fpdus[2];
      for (const auto& r : rep.records) {
        if (r.flow != c.flow || r.kind != trace::Record::Kind::Fpdu || !r.ddp) continue;
        const int d = index(r.dir);
        std::uint64_t first = 0;
        for (const auto& sg : flow.dir[d]) {
          const std::int64_t off = sg.seq - c.stream_seq[d];
          const std::int64_t end = off + static_cast<std::int64_t>(sg.size());
          if (sg.size() == 0 || end <= static_cast<std::int64_t>(c.mpa_length[d])) continue;
          if (end > static_cast<std::int64_t>(r.offset) &&
              std::max<std::int64_t>(off, 0) < static_cast<std::int64_t>(r.offset + r.length) &&
              (first == 0 || sg.frame < first))
            first = sg.frame;
        }
        fpdus[d].push_back({first, &r});
      }
      // (Only where `rnic decode` found the FPDUs the learning pass did.)
      if (fpdus[0].size() != c.fpdus[0] || fpdus[1].size() != c.fpdus[1]) continue;
      std::vector<std::uint64_t> terminates;
      std::map<std::uint32_t, std::uint64_t> reads[2];  // per issuer, by MSN
      std::vector<std::uint64_t> atomics[2];            // per issuer, in order
      for (int d = 0; d < 2; ++d)
        for (const auto& [frame, r] : fpdus[d]) {
          const auto op = r->ddp->op();
          if (op == rdmap::Opcode::Terminate) terminates.push_back(frame);
          if (op == rdmap::Opcode::ReadRequest) reads[d].emplace(r->ddp->msn.value(), frame);
          if (op == rdmap::Opcode::AtomicRequest) atomics[d].push_back(frame);
        }
      ASSERT_EQ(c.terminates.size(), terminates.size());
      for (std::size_t i = 0; i < terminates.size(); ++i, ++checked)
        EXPECT_EQ(c.terminates[i].frame, terminates[i]) << "Terminate " << i;
      for (int e = 0; e < 2; ++e) {
        for (const auto& rd : c.ep[e].reads) {
          if (rd.rebuilt) continue;
          ASSERT_TRUE(reads[e].contains(rd.msn)) << rd.msn;
          EXPECT_EQ(rd.frame, reads[e][rd.msn]) << "Read MSN " << rd.msn;
          ++checked;
        }
        std::size_t k = 0;
        for (const auto& at : c.ep[e].atomics) {
          if (at.rebuilt) continue;
          ASSERT_LT(k, atomics[e].size());
          EXPECT_EQ(at.frame, atomics[e][k++]) << "atomic " << k;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 50u);
}

}  // namespace
}  // namespace iwarp::replay
