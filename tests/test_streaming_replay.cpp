// `rnic replay` reads the capture with payloads_in_file: the plan's steps keep where each
// payload lies in the file (Step::file_offset), and the replay reads it back when it injects the
// step. Its replay must be the one of a capture held in memory, report for report, on every
// capture of the corpus (Atomic Responses renumbered, with their CRCs recomputed, included), in
// capture order and in a seeded disorder.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <pcap/pcap.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "replay/replay_plan.hpp"
#include "replay/replay_report.hpp"
#include "replay/replayer.hpp"
#include "tests/corpus_files.hpp"
#include "tests/pipe_writer.hpp"
#include "trace/pcap_reader.hpp"
#include "trace/tcp_reassembly.hpp"
#include "trace/trace_decoder.hpp"
#include "trace/trace_generator.hpp"

namespace iwarp::replay {
namespace {

std::vector<std::string> corpus() {
  return ::testing_support::corpus_captures();
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

// ---- make_plan_from_file: the plan learned as the file is read, not held ----

// A capture's frames, to rewrite (libpcap reads and writes them; Ethernet + IPv4 + TCP only).
struct Frames {
  int link = 0;
  std::vector<std::pair<pcap_pkthdr, std::vector<u_char>>> frames;
};

Frames read_frames(const std::string& path) {
  Frames f;
  char err[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_open_offline(path.c_str(), err);
  EXPECT_NE(p, nullptr) << err;
  if (!p) return f;
  f.link = pcap_datalink(p);
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  while (pcap_next_ex(p, &h, &data) == 1)
    f.frames.push_back({*h, std::vector<u_char>(data, data + h->caplen)});
  pcap_close(p);
  return f;
}

void write_frames(const Frames& f, const std::string& path) {
  pcap_t* p = pcap_open_dead(f.link, 262144);
  ASSERT_NE(p, nullptr);
  pcap_dumper_t* d = pcap_dump_open(p, path.c_str());
  ASSERT_NE(d, nullptr) << pcap_geterr(p);
  for (const auto& [h, data] : f.frames) pcap_dump(reinterpret_cast<u_char*>(d), &h, data.data());
  pcap_dump_close(d);
  pcap_close(p);
}

// Where an Ethernet/IPv4/TCP frame's TCP header and payload start.
struct Tcp {
  std::size_t tcp = 0, payload = 0;
};
Tcp tcp_of(const std::vector<u_char>& fr) {
  EXPECT_GE(fr.size(), 54u);
  EXPECT_EQ(fr[12], 0x08);  // IPv4
  EXPECT_EQ(fr[13], 0x00);
  const std::size_t ip = 14, tcp = ip + (fr[ip] & 0x0f) * 4u;
  return {tcp, tcp + (fr[tcp + 12] >> 4) * 4u};
}
std::uint32_t get32(const std::vector<u_char>& b, std::size_t at) {
  return std::uint32_t{b[at]} << 24 | std::uint32_t{b[at + 1]} << 16 |
         std::uint32_t{b[at + 2]} << 8 | b[at + 3];
}
void put16(std::vector<u_char>& b, std::size_t at, std::uint32_t v) {
  b[at] = static_cast<u_char>(v >> 8);
  b[at + 1] = static_cast<u_char>(v);
}
void put32(std::vector<u_char>& b, std::size_t at, std::uint32_t v) {
  put16(b, at, v >> 16);
  put16(b, at + 2, v & 0xffff);
}
bool is_syn(const std::vector<u_char>& fr) {
  return (fr[tcp_of(fr).tcp + 13] & 0x02) != 0;
}
bool from_port(const std::vector<u_char>& fr, std::uint16_t port) {
  const auto t = tcp_of(fr);
  return (fr[t.tcp] << 8 | fr[t.tcp + 1]) == port;
}

// The two plans of a capture file: make_plan_from_file(), and make_plan() of the capture read
// whole (payloads in the file, steps read again), each as their replay's JSON report and the
// fields of each connection's plan the report does not show.
std::string plan_facts(const Plan& plan) {
  std::string s;
  for (const auto& c : plan.connections) {
    s += fmt::format(
        "c{} again {} steps {} segs {} setup {} digest {:x} last {} first {} seq {}/{} fo {}/{} "
        "len {}/{} fpdus {}/{} fin {}{} rst {} planned {} posts {} patches {}/{} viol {}\n",
        c.flow, c.read_again, c.step_count, c.segment_steps, c.setup_segments, c.step_digest,
        c.last_frame, c.first_time_us, c.stream_seq[0].value(), c.stream_seq[1].value(),
        c.full_operation_seq[0].value(), c.full_operation_seq[1].value(), c.stream_length[0],
        c.stream_length[1], c.fpdus[0], c.fpdus[1], c.fin[0], c.fin[1], c.rst, c.planned_bytes,
        c.posts.size() + c.steps.size(), c.patches[0].size(), c.patches[1].size(),
        c.trace_violations.size());
    for (const auto& v : c.trace_violations)
      s += fmt::format("  violation {} {}\n", v.frame, v.text);
    for (const auto& n : c.notes) s += "  note " + n + "\n";
    for (const auto& n : c.cut_short) s += "  cut " + n + "\n";
    for (const auto& l : c.limits) s += "  limit " + l.text + "\n";
  }
  for (const auto& k : plan.skipped) s += fmt::format("skipped c{}: {}\n", k.flow, k.reason);
  for (const auto& p : plan.problems) s += "problem " + p + "\n";
  return s;
}

struct Both {
  std::expected<Plan, std::string> streamed, whole;
};

// (With `drop`: those frames taken out, as `rnic replay --drop` takes them out: as the file is
// read, and with drop_frames() from the capture read whole.)
Both plan_both(const std::string& path, const std::vector<std::uint64_t>& drop = {}) {
  Both b{make_plan_from_file(path, {}, drop), std::unexpected(std::string("unread"))};
  auto cap = trace::read_capture(path, {.payloads_in_file = true});
  EXPECT_TRUE(cap) << cap.error();
  if (!cap) return b;
  if (!drop.empty())
    if (auto d = drop_frames(*cap, drop); !d) {
      b.whole = std::unexpected(d.error());
      return b;
    }
  b.whole = make_plan(*cap, {}, StepSource::ReadAgain);
  return b;
}

// The same plan, the same replay.
void expect_same(const Both& b) {
  ASSERT_EQ(b.streamed.has_value(), b.whole.has_value())
      << (b.streamed ? b.whole.error() : b.streamed.error());
  if (!b.streamed) {
    EXPECT_EQ(b.streamed.error(), b.whole.error());
    return;
  }
  EXPECT_EQ(plan_facts(*b.streamed), plan_facts(*b.whole));
  const auto x = replay(*b.streamed, {});
  const auto y = replay(*b.whole, {});
  EXPECT_EQ(to_json(*b.streamed, x, std::nullopt, std::nullopt, true).dump(),
            to_json(*b.whole, y, std::nullopt, std::nullopt, true).dump());
}

std::string scratch(const std::string& name) {
  return ::testing::TempDir() + "plan_from_file_" + std::to_string(::getpid()) + "_" + name;
}

// Cuts the first segment that starts with the MPA Request key after its fifth octet, in two
// frames; false when there is none.
bool cut_request_key(Frames& f) {
  for (std::size_t i = 0; i < f.frames.size(); ++i) {
    auto& [h, data] = f.frames[i];
    const auto t = tcp_of(data);
    if (data.size() < t.payload + 16 || data.size() != h.len ||
        std::string(data.begin() + static_cast<std::ptrdiff_t>(t.payload),
                    data.begin() + static_cast<std::ptrdiff_t>(t.payload) + 16) !=
            "MPA ID Req Frame")
      continue;
    auto first = data, second = data;
    first.resize(t.payload + 5);
    second.erase(second.begin() + static_cast<std::ptrdiff_t>(t.payload),
                 second.begin() + static_cast<std::ptrdiff_t>(t.payload) + 5);
    put16(first, 16, static_cast<std::uint32_t>(first.size() - 14));
    put16(second, 16, static_cast<std::uint32_t>(second.size() - 14));
    put32(second, t.tcp + 4, get32(data, t.tcp + 4) + 5);
    pcap_pkthdr h1 = h, h2 = h;
    h1.caplen = h1.len = static_cast<std::uint32_t>(first.size());
    h2.caplen = h2.len = static_cast<std::uint32_t>(second.size());
    f.frames[i] = {h2, std::move(second)};
    f.frames.insert(f.frames.begin() + static_cast<std::ptrdiff_t>(i), {h1, std::move(first)});
    return true;
  }
  return false;
}

// `n` copies of the connection in `src` (its client's port `client`), the k-th with the client's
// port base + k: side by side (each frame n times) or one after the other.
Frames copies(const Frames& src, std::uint16_t client, std::uint16_t base, std::uint16_t n,
              bool side_by_side) {
  Frames out{src.link, {}};
  auto add = [&](const pcap_pkthdr& h, const std::vector<u_char>& data, std::uint16_t k) {
    auto copy = data;
    put16(copy, tcp_of(copy).tcp + (from_port(copy, client) ? 0 : 2), base + k);
    out.frames.push_back({h, std::move(copy)});
  };
  if (side_by_side) {
    for (const auto& [h, data] : src.frames)
      for (std::uint16_t k = 1; k <= n; ++k) add(h, data, k);
  } else {
    for (std::uint16_t k = 1; k <= n; ++k)
      for (const auto& [h, data] : src.frames) add(h, data, k);
  }
  return out;
}

// Every capture of the corpus: the plan learned as the file is read is the one of the capture
// read whole, and so is its replay, report for report.
TEST(PlanFromFile, IsThePlanOfTheCaptureReadWhole) {
  std::size_t planned = 0;
  for (const auto& path : corpus()) {
    SCOPED_TRACE(path);
    const auto b = plan_both(path);
    expect_same(b);
    if (b.streamed) ++planned;
    // (One read learns a capture that starts with its handshake.)
    if (b.streamed &&
        (path.ends_with("rping_lo.pcap") || path.ends_with("mpa2_p2p_read_crc.pcap"))) {
      EXPECT_EQ(b.streamed->learning_reads, 1u);
    }
  }
  EXPECT_GE(planned, 15u);
}

// Four copies of a connection side by side (each frame four times, the client's port 40001 to
// 40004): the two with the most segments are read again within kRescanBudget, the other two
// keep their steps, learned again in a second read that keeps their segments' places in the
// file; each is replayed as the capture read whole replays it.
TEST(PlanFromFile, ConnectionsPastTheBudgetKeepTheirSteps) {
  auto src =
      read_frames(std::string(IWARP_SOURCE_DIR) + "/pcap_traces/generated/mpa2_p2p_read_crc.pcap");
  ASSERT_EQ(src.link, DLT_EN10MB);
  // (Then with the Request's key cut: learned in the second read, within the same budget.)
  for (const bool cut : {false, true}) {
    SCOPED_TRACE(cut ? "key cut" : "key whole");
    if (cut) {
      ASSERT_TRUE(cut_request_key(src));
    }
    const auto four = copies(src, 40000, 40000, 4, true);
    const auto path = scratch("four.pcap");
    write_frames(four, path);
    const auto b = plan_both(path);
    ASSERT_TRUE(b.streamed) << b.streamed.error();
    ASSERT_EQ(b.streamed->connections.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) {
      const auto& c = b.streamed->connections[i];
      EXPECT_EQ(c.read_again, i < 2) << i;
      EXPECT_EQ(c.steps.empty(), i < 2) << i;
    }
    EXPECT_EQ(b.streamed->learning_reads, 2u);
    expect_same(b);
    std::remove(path.c_str());
  }
}

// The MPA Request cut after its fifth octet, its key across two segments: no segment starts with
// the key, so the first read, which learns the connections whose first segment does, passes it
// by; a second read learns it, and the plan is the one of the capture read whole.
TEST(PlanFromFile, RequestKeyCutAcrossSegmentsIsLearnedInOneMoreRead) {
  auto f = read_frames(std::string(IWARP_SOURCE_DIR) + "/pcap_traces/siw/rping_lo.pcap");
  ASSERT_EQ(f.link, DLT_EN10MB);
  ASSERT_TRUE(cut_request_key(f));
  const auto path = scratch("cut_key.pcap");
  write_frames(f, path);
  const auto b = plan_both(path);
  ASSERT_TRUE(b.streamed) << b.streamed.error();
  ASSERT_EQ(b.streamed->connections.size(), 1u);
  EXPECT_TRUE(b.streamed->connections[0].read_again);
  EXPECT_GE(b.streamed->connections[0].setup_segments, 3u);
  EXPECT_EQ(b.streamed->learning_reads, 2u);
  expect_same(b);
  std::remove(path.c_str());
}

// A capture without the handshake whose client segment after the Request comes first: the
// client's stream starts at its lowest sequence number (the Request), not at its first segment,
// where the first read took it to start (as `rnic decode` does); so the connection is decoded
// again in a second read that knows where each stream starts (FileDecoder's start_of), and
// learned in a third: without it the connection would not be iWARP.
TEST(PlanFromFile, StreamWithoutItsSynStartsAtItsLowestSequenceNumber) {
  auto f = read_frames(std::string(IWARP_SOURCE_DIR) + "/pcap_traces/siw/rping_lo.pcap");
  ASSERT_EQ(f.link, DLT_EN10MB);
  std::erase_if(f.frames, [](const auto& fr) { return is_syn(fr.second); });
  const std::uint16_t client = [&] {
    const auto t = tcp_of(f.frames.at(0).second);
    return static_cast<std::uint16_t>(f.frames[0].second[t.tcp] << 8 |
                                      f.frames[0].second[t.tcp + 1]);
  }();
  ASSERT_NE(client, 7174);
  std::vector<std::size_t> client_data;
  for (std::size_t i = 0; i < f.frames.size(); ++i) {
    const auto& d = f.frames[i].second;
    if (from_port(d, client) && d.size() > tcp_of(d).payload) client_data.push_back(i);
  }
  ASSERT_GE(client_data.size(), 2u);
  // The second client segment with data goes first.
  auto moved = f.frames[client_data[1]];
  f.frames.erase(f.frames.begin() + static_cast<std::ptrdiff_t>(client_data[1]));
  f.frames.insert(f.frames.begin(), std::move(moved));
  const auto path = scratch("no_syn.pcap");
  write_frames(f, path);
  const auto b = plan_both(path);
  ASSERT_TRUE(b.streamed) << b.streamed.error();
  ASSERT_EQ(b.streamed->connections.size(), 1u);
  // (decode_file() alone, which starts a direction without its SYN at its first segment, finds
  // no MPA Request.)
  const auto alone = trace::decode_file(path, [](trace::Record&&) {});
  ASSERT_TRUE(alone) << alone.error();
  EXPECT_FALSE(alone->flows.at(0).iwarp);
  // (The first read, a read that decodes it from its starts, a read that learns it.)
  EXPECT_EQ(b.streamed->learning_reads, 3u);
  expect_same(b);
  std::remove(path.c_str());
}

// What the learners hold beyond gaps is bounded for all of them together: they learn side by
// side in one read, so max_held is their total (a connection read whole is learned alone, with
// max_held for itself). Four copies of a connection each missing a client segment (a gap that
// never fills), with max_held twice what one holds beyond it: the capture read whole learns
// every copy whole; read as a stream, copies find the limit reached, each saying so.
TEST(PlanFromFile, WhatLearnersHoldBeyondGapsIsBoundedForAllTogether) {
  const auto src =
      read_frames(std::string(IWARP_SOURCE_DIR) + "/pcap_traces/generated/mpa2_p2p_read_crc.pcap");
  ASSERT_EQ(src.link, DLT_EN10MB);
  // The client's second segment with data is left out; what it sends after is held.
  std::size_t client_data = 0, held = 0;
  Frames one{src.link, {}};
  for (const auto& fr : src.frames) {
    const auto t = tcp_of(fr.second);
    const std::size_t len = fr.second.size() - t.payload;
    if (from_port(fr.second, 40000) && len > 0 && ++client_data == 2) continue;
    if (from_port(fr.second, 40000) && client_data > 2) held += len + trace::kHeldPieceOverhead;
    one.frames.push_back(fr);
  }
  ASSERT_GT(held, 1000u);
  const auto four = copies(one, 40000, 40000, 4, true);
  const auto path = scratch("four_gaps.pcap");
  write_frames(four, path);
  PlanLimits limits;
  limits.max_held = 2 * held;
  auto cap = trace::read_capture(path, {.payloads_in_file = true});
  ASSERT_TRUE(cap) << cap.error();
  const auto whole = make_plan(*cap, limits, StepSource::ReadAgain);
  ASSERT_TRUE(whole) << whole.error();
  for (const auto& c : whole->connections) EXPECT_TRUE(c.limits.empty()) << c.flow;
  const auto streamed = make_plan_from_file(path, limits);
  ASSERT_TRUE(streamed) << streamed.error();
  ASSERT_EQ(streamed->connections.size(), 4u);
  std::size_t reached = 0;
  for (const auto& c : streamed->connections)
    for (const auto& l : c.limits) {
      EXPECT_EQ(l.limit, "kMaxHeldBeyondGap");
      EXPECT_NE(l.text.find("held by all the connections learned in the same read"),
                std::string::npos)
          << l.text;
      ++reached;
    }
  // (Side by side, each holds about half of what it would alone when the total is reached.)
  EXPECT_GE(reached, 2u);
  std::remove(path.c_str());
}

// A capture of the sample conversation (`mss`-octet segments, `bulk` octets of Writes) with the
// responder's MPA Reply moved after the client's `after`-th segment with data (two hosts'
// captures merged with skewed clocks); with `cut` > 0, the MPA Request cut after that many
// octets, its tail moved there too (the Request completes only then).
std::string late_reply(const std::string& name, std::uint16_t mss, std::size_t after,
                       std::uint64_t bulk, std::size_t cut = 0) {
  const auto gen = scratch(name + "_src.pcap");
  trace::GeneratorOptions g;
  g.pcap.mss = mss;
  g.bulk_bytes = bulk;
  EXPECT_TRUE(trace::generate_conversation(gen, g));
  auto f = read_frames(gen);
  std::remove(gen.c_str());
  std::vector<std::pair<pcap_pkthdr, std::vector<u_char>>> moved;
  if (cut > 0) {
    EXPECT_TRUE(cut_request_key(f));  // (cuts after 5 octets: then move the cut)
    for (std::size_t i = 0; i + 1 < f.frames.size(); ++i) {
      auto& a = f.frames[i].second;
      const auto t = tcp_of(a);
      if (!from_port(a, 40000) || a.size() != t.payload + 5) continue;
      // Join the two halves again, then cut after `cut` octets.
      auto& bb = f.frames[i + 1].second;
      const auto tb = tcp_of(bb);
      std::vector<u_char> whole(a.begin(), a.end());
      whole.insert(whole.end(), bb.begin() + static_cast<std::ptrdiff_t>(tb.payload), bb.end());
      auto head = whole, tail = whole;
      head.resize(t.payload + cut);
      tail.erase(tail.begin() + static_cast<std::ptrdiff_t>(t.payload),
                 tail.begin() + static_cast<std::ptrdiff_t>(t.payload + cut));
      put16(head, 16, static_cast<std::uint32_t>(head.size() - 14));
      put16(tail, 16, static_cast<std::uint32_t>(tail.size() - 14));
      put32(tail, t.tcp + 4, get32(whole, t.tcp + 4) + static_cast<std::uint32_t>(cut));
      auto h1 = f.frames[i].first, h2 = f.frames[i + 1].first;
      h1.caplen = h1.len = static_cast<std::uint32_t>(head.size());
      h2.caplen = h2.len = static_cast<std::uint32_t>(tail.size());
      f.frames[i] = {h1, std::move(head)};
      moved.push_back({h2, std::move(tail)});
      f.frames.erase(f.frames.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      break;
    }
    EXPECT_EQ(moved.size(), 1u);
  }
  std::size_t reply = f.frames.size();
  for (std::size_t i = 0; i < f.frames.size() && reply == f.frames.size(); ++i) {
    const auto& d = f.frames[i].second;
    if (d.size() > tcp_of(d).payload && from_port(d, 7174)) reply = i;
  }
  EXPECT_LT(reply, f.frames.size());
  if (reply == f.frames.size()) return "";
  moved.push_back(f.frames[reply]);
  f.frames.erase(f.frames.begin() + static_cast<std::ptrdiff_t>(reply));
  std::size_t client_data = 0, to = 0;
  for (std::size_t i = 0; i < f.frames.size() && to == 0; ++i) {
    const auto& d = f.frames[i].second;
    if (d.size() > tcp_of(d).payload && from_port(d, 40000) && ++client_data == after) to = i;
  }
  EXPECT_GT(to, 0u);
  f.frames.insert(f.frames.begin() + static_cast<std::ptrdiff_t>(to) + 1, moved.begin(),
                  moved.end());
  const auto path = scratch(name + ".pcap");
  write_frames(f, path);
  return path;
}

// A connection whose MPA Reply comes late cannot have its steps counted as they come (which
// segments are only the MPA frames is not known before), and the first read, which does not know
// yet whether the connection can be replayed, holds little before the framing is known. Past
// kHeldBeforeFramingSpeculative octets (1 MiB: 900 segments of 1460) it is learned again in a
// second read; past kMaxSegmentsBeforeFraming segments (4,100 of 256), again with its segments
// kept; both (5,000 of 1460), in a second read and then a third with its segments kept. With the
// Request's tail late too (cut after 18 octets, its key whole), the first read's learner sees
// the Request complete and the 1 MiB passed in the same run of octets, and gives up all the
// same. Each time the plan is the one of the capture read whole.
TEST(PlanFromFile, ALateReplyIsLearnedInAnotherRead) {
  ASSERT_EQ(kHeldBeforeFramingSpeculative, 1u << 20);
  ASSERT_EQ(kMaxSegmentsBeforeFraming, 4096u);
  struct Case {
    std::uint16_t mss;
    std::size_t after;
    std::uint64_t bulk;
    std::size_t cut;
    std::uint64_t reads;
  };
  for (const auto& c : {Case{1460, 900, 2u << 20, 0, 2}, Case{256, 4100, 2u << 20, 0, 2},
                        Case{1460, 5000, 8u << 20, 0, 3}, Case{1460, 800, 2u << 20, 18, 2}}) {
    SCOPED_TRACE(fmt::format("mss {} after {} cut {}", c.mss, c.after, c.cut));
    const auto path = late_reply("late_reply", c.mss, c.after, c.bulk, c.cut);
    ASSERT_FALSE(path.empty());
    const auto b = plan_both(path);
    ASSERT_TRUE(b.streamed) << b.streamed.error();
    ASSERT_EQ(b.streamed->connections.size(), 1u);
    EXPECT_TRUE(b.streamed->connections[0].read_again);
    EXPECT_EQ(b.streamed->learning_reads, c.reads);
    EXPECT_TRUE(b.streamed->connections[0].limits.empty());
    expect_same(b);
    std::remove(path.c_str());
  }
}

// More connections than kLearnedPerRead (70 copies side by side, each frame 70 times): the
// first read learns 64 of them; two are read again within kRescanBudget, and the other 68 keep
// their steps, learned in two more reads, 64 and 4; the plan is the one of the capture read
// whole.
TEST(PlanFromFile, ConnectionsPastTheLearnersOfOneReadAreLearnedInAnother) {
  ASSERT_EQ(kLearnedPerRead, 64u);
  const auto src = read_frames(std::string(IWARP_SOURCE_DIR) + "/pcap_traces/siw/rping_lo.pcap");
  ASSERT_EQ(src.link, DLT_EN10MB);
  const std::uint16_t client = [&] {
    const auto& d = src.frames.at(0).second;
    return static_cast<std::uint16_t>(d[tcp_of(d).tcp] << 8 | d[tcp_of(d).tcp + 1]);
  }();
  const auto many = copies(src, client, 20000, 70, true);
  const auto path = scratch("seventy.pcap");
  write_frames(many, path);
  const auto b = plan_both(path);
  ASSERT_TRUE(b.streamed) << b.streamed.error();
  EXPECT_EQ(b.streamed->connections.size(), 70u);
  EXPECT_EQ(b.streamed->learning_reads, 3u);
  std::size_t again = 0;
  for (const auto& c : b.streamed->connections) again += c.read_again;
  EXPECT_EQ(again, 2u);
  expect_same(b);
  std::remove(path.c_str());
}

// Connections one after the other are learned in one read however many they are: a learner
// stops counting against kLearnedPerRead once its connection has ended (FIN in both directions,
// every octet before it delivered). 100 copies of a connection one after the other: the first
// read learns all 100; within kRescanBudget 19 are read again (the first 19: 90 x (1 + ... + 19)
// frames of 2 x 9,000), and the other 81, whose steps are kept, are learned again in one more
// read (without the accounting: 64, then 17, 3 reads). The plan is the one of the capture read
// whole.
TEST(PlanFromFile, ConnectionsOneAfterTheOtherAreLearnedInOneRead) {
  const auto src = read_frames(std::string(IWARP_SOURCE_DIR) + "/pcap_traces/siw/rping_lo.pcap");
  ASSERT_EQ(src.link, DLT_EN10MB);
  const std::uint16_t client = [&] {
    const auto& d = src.frames.at(0).second;
    return static_cast<std::uint16_t>(d[tcp_of(d).tcp] << 8 | d[tcp_of(d).tcp + 1]);
  }();
  const auto many = copies(src, client, 20000, 100, false);
  const auto path = scratch("hundred.pcap");
  write_frames(many, path);
  ASSERT_EQ(src.frames.size(), 90u);
  const auto b = plan_both(path);
  ASSERT_TRUE(b.streamed) << b.streamed.error();
  EXPECT_EQ(b.streamed->connections.size(), 100u);
  std::size_t again = 0;
  for (const auto& c : b.streamed->connections) again += c.read_again;
  EXPECT_EQ(again, 19u);
  EXPECT_EQ(b.streamed->learning_reads, 2u);
  expect_same(b);
  std::remove(path.c_str());
}

using testing_support::PipeWriter;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A pipe (`rnic replay -`, `rnic replay <(zcat x.pcap.gz)`) is copied into an unnamed file in
// $TMPDIR, which is then read as the capture file: the plan is the one of the file itself, learned
// in as many reads, and nothing is left in the directory.
TEST(PlanFromFile, APipeIsCopiedIntoAnUnnamedFileAndReadAsOne) {
  const auto file = std::string(IWARP_SOURCE_DIR) + "/pcap_traces/siw/rping_lo.pcap";
  const auto fifo = scratch("fifo");
  const auto dir = scratch("tmpdir");
  // $TMPDIR (googletest's TempDir() reads it too), the pipe and the directory are put back
  // however the test ends.
  struct Restore {
    std::string fifo, dir;
    std::optional<std::string> tmpdir;
    ~Restore() {
      if (tmpdir)
        ::setenv("TMPDIR", tmpdir->c_str(), 1);
      else
        ::unsetenv("TMPDIR");
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      std::filesystem::remove(fifo, ec);
    }
  } restore{
      fifo, dir,
      std::getenv("TMPDIR") ? std::optional<std::string>(std::getenv("TMPDIR")) : std::nullopt};
  std::filesystem::create_directories(dir);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ::setenv("TMPDIR", dir.c_str(), 1);
  PipeWriter writer(fifo, slurp(file));
  const auto piped = make_plan_from_file(fifo);
  const auto written = writer.join();
  // (Unnamed: nothing is in $TMPDIR, even while the plan holds the file.)
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  ASSERT_TRUE(piped) << piped.error();
  EXPECT_EQ(written, std::filesystem::file_size(file));
  EXPECT_EQ(piped->path, fifo);
  EXPECT_EQ(piped->learning_reads, 1u);
  const auto direct = make_plan_from_file(file);
  ASSERT_TRUE(direct) << direct.error();
  EXPECT_EQ(plan_facts(*piped), plan_facts(*direct));
  auto json = [](const Plan& p) {
    auto doc = to_json(p, replay(p, {}), std::nullopt, std::nullopt, true);
    doc.erase("file");
    return doc.dump();
  };
  EXPECT_EQ(json(*piped), json(*direct));

  // A directory that cannot hold the copy: one line naming the pipe and the directory.
  ::setenv("TMPDIR", (dir + "/missing").c_str(), 1);
  PipeWriter writer2(fifo, slurp(file));
  const auto refused = make_plan_from_file(fifo);
  writer2.join();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().find('\n'), std::string::npos);
  EXPECT_TRUE(refused.error().starts_with(fifo + ": a pipe is copied into a temporary file"))
      << refused.error();
  EXPECT_NE(refused.error().find(dir + "/missing: No such file or directory"), std::string::npos)
      << refused.error();

  // What is no capture is not copied past its first octets: libpcap says what it is not, and the
  // writer of 8 MiB is left with most of them.
  ::setenv("TMPDIR", dir.c_str(), 1);
  PipeWriter writer3(fifo, std::string(8u << 20, 'x'));
  const auto junk = make_plan_from_file(fifo);
  EXPECT_LT(writer3.join(), 4u << 20);
  ASSERT_FALSE(junk);
  EXPECT_EQ(junk.error(), fifo + ": unknown file format");
}

// `rnic replay --drop` as the file is read: every capture of the corpus with frames taken out
// (a few in the middle, the SYNs, each direction's first segment with data, every tenth
// segment) gives the plan and the replay of the capture read whole with drop_frames(); a frame
// that is no segment is refused in the same line.
TEST(PlanFromFile, FramesDroppedAsTheFileIsReadAreDroppedAsFromTheCaptureReadWhole) {
  std::size_t compared = 0, refused = 0;
  for (const auto& path : corpus()) {
    auto cap = trace::read_capture(path, {.payloads_in_file = true});
    ASSERT_TRUE(cap) << cap.error();
    std::vector<std::uint64_t> syns, firsts, tenth, all;
    for (const auto& f : cap->flows)
      for (int d = 0; d < 2; ++d) {
        bool first = true;
        for (const auto& sg : f.dir[d]) {
          all.push_back(sg.frame);
          if (sg.syn) syns.push_back(sg.frame);
          if (sg.size() > 0 && !sg.syn && std::exchange(first, false)) firsts.push_back(sg.frame);
        }
      }
    std::sort(all.begin(), all.end());
    for (std::size_t k = 5; k < all.size(); k += 10) tenth.push_back(all[k]);
    std::vector<std::uint64_t> middle;
    for (const auto f : {5, 7, 8, 20, 21, 22})
      if (std::binary_search(all.begin(), all.end(), std::uint64_t(f))) middle.push_back(f);
    for (const auto& drop : {middle, syns, firsts, tenth}) {
      if (drop.empty()) continue;
      SCOPED_TRACE(fmt::format("{} without frames {}", path, fmt::join(drop, ",")));
      expect_same(plan_both(path, drop));
      ++compared;
    }
    // A frame that is no kept segment (a pure ACK, or past the end).
    std::uint64_t none = cap->frames + 1;
    for (std::uint64_t f = 1; f <= cap->frames; ++f)
      if (!std::binary_search(all.begin(), all.end(), f)) {
        none = f;
        break;
      }
    const auto b = plan_both(path, {all.front(), none});
    ASSERT_FALSE(b.streamed);
    ASSERT_FALSE(b.whole);
    EXPECT_EQ(b.streamed.error(), b.whole.error());
    EXPECT_NE(b.streamed.error().find(fmt::format("frame {} is no TCP segment", none)),
              std::string::npos);
    ++refused;
  }
  EXPECT_GE(compared, 60u);
  EXPECT_GE(refused, 20u);
}

// A SYN sent again: with the first one taken out the second is the SYN, as in the capture read
// whole; with both taken out the client's stream starts at its lowest sequence number (and the
// flow is noted as starting mid-connection). And a second SYN with another ISN (4 below the
// first): with the first taken out, its ISN is the stream's (the stream then starts 4 octets
// before the MPA Request, which is not replayed; drop_frames() kept the first one's ISN and
// replayed it).
TEST(PlanFromFile, ASynSentAgainIsTheSynOnceTheFirstIsDropped) {
  auto f = read_frames(std::string(IWARP_SOURCE_DIR) + "/pcap_traces/siw/rping_lo.pcap");
  ASSERT_FALSE(f.frames.empty());
  ASSERT_TRUE(is_syn(f.frames[0].second));
  auto other = f;
  f.frames.insert(f.frames.begin() + 1, f.frames[0]);  // frames 1 and 2: the client's SYN
  auto syn = other.frames[0].second;
  put32(syn, tcp_of(syn).tcp + 4, get32(syn, tcp_of(syn).tcp + 4) - 4);
  other.frames.insert(other.frames.begin() + 1, {other.frames[0].first, syn});
  const auto other_path = scratch("syn_other_isn.pcap");
  write_frames(other, other_path);
  {
    SCOPED_TRACE("a second SYN with another ISN, the first dropped");
    const auto b = plan_both(other_path, {1});
    expect_same(b);
    ASSERT_FALSE(b.streamed);
    EXPECT_NE(b.streamed.error().find("no iWARP connection to replay"), std::string::npos)
        << b.streamed.error();
  }
  std::remove(other_path.c_str());
  const auto path = scratch("syn_again.pcap");
  write_frames(f, path);
  for (const std::vector<std::uint64_t>& drop :
       {std::vector<std::uint64_t>{1}, std::vector<std::uint64_t>{2},
        std::vector<std::uint64_t>{1, 2}}) {
    SCOPED_TRACE(fmt::format("without frames {}", fmt::join(drop, ",")));
    const auto b = plan_both(path, drop);
    expect_same(b);
    ASSERT_TRUE(b.streamed) << b.streamed.error();
    const bool no_syn = drop.size() == 2;
    EXPECT_EQ(plan_facts(*b.streamed).find("capture starts mid-connection") != std::string::npos,
              no_syn);
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace iwarp::replay
