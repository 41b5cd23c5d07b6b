// rnic replay: every capture in pcap_traces/ replayed through two emulated endpoints, in capture
// order and in seeded disorders that must end in the same CQEs and shadow memory; the netem
// capture's holes; a capture with a segment lost; Terminates; captures that cannot be replayed;
// and the command line.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "replay/replay_plan.hpp"
#include "replay/replay_report.hpp"
#include "replay/replayer.hpp"
#include "trace/pcap_reader.hpp"

namespace iwarp::replay {
namespace {

namespace fs = std::filesystem;

std::string source(const std::string& rel) {
  return std::string(IWARP_SOURCE_DIR) + "/" + rel;
}

Plan plan_of(const std::string& path) {
  auto cap = trace::read_capture(path);
  EXPECT_TRUE(cap) << (cap ? "" : cap.error());
  if (!cap) return {};
  auto plan = make_plan(*cap);
  EXPECT_TRUE(plan) << (plan ? "" : plan.error());
  return plan ? std::move(*plan) : Plan{};
}

// `strong`: a disorder for short traces, where the default rates may leave all in order.
ReplayResult run(const Plan& plan, std::optional<std::uint64_t> seed = std::nullopt,
                 bool strong = false) {
  ReplayOptions o;
  o.keep_memory = true;
  if (seed) {
    Permutation p;
    p.wire.seed = *seed;
    if (strong) {
      p.wire.reorder = 0.9;
      p.wire.dup = 0.5;
      p.split = 0.5;
    }
    o.permutation = p;
  }
  return replay(plan, o);
}

std::string wc_line(const rnic::Wc& w) {
  return fmt::format("{:x} {} {} {} {:x} {:x} {:x} {:x}", w.wr_id, rnic::to_string(w.opcode),
                     rnic::to_string(w.status), w.byte_len, w.imm_data, w.wc_flags, w.vendor_err,
                     w.invalidated_rkey.value());
}

// The two replays end with the same CQEs, in the same order, and byte-identical memory.
void expect_identical(const ConnectionResult& a, const ConnectionResult& b,
                      const std::string& what) {
  EXPECT_TRUE(compare(a, b).empty())
      << what << ": " << fmt::format("{}", fmt::join(compare(a, b), "; "));
  for (int s = 0; s < 2; ++s) {
    std::vector<std::string> ca, cb;
    for (const auto& w : a.ep[s].send_cqes) ca.push_back("S " + wc_line(w));
    for (const auto& w : a.ep[s].recv_cqes) ca.push_back("R " + wc_line(w));
    for (const auto& w : b.ep[s].send_cqes) cb.push_back("S " + wc_line(w));
    for (const auto& w : b.ep[s].recv_cqes) cb.push_back("R " + wc_line(w));
    EXPECT_EQ(ca, cb) << what << " endpoint " << s;
    ASSERT_EQ(a.ep[s].memory.size(), b.ep[s].memory.size()) << what;
    for (std::size_t r = 0; r < a.ep[s].memory.size(); ++r)
      EXPECT_TRUE(a.ep[s].memory[r].bytes == b.ep[s].memory[r].bytes)
          << what << " endpoint " << s << " region " << a.ep[s].memory[r].kind << " STag 0x"
          << std::hex << a.ep[s].memory[r].stag.value();
  }
}

std::vector<std::string> replayable_traces() {
  std::vector<std::string> out;
  for (const char* dir : {"pcap_traces/siw", "pcap_traces/generated"})
    for (const auto& e : fs::directory_iterator(source(dir)))
      if (e.path().extension() == ".pcap" && e.path().filename() != "hostnet_eth0.pcap")
        out.push_back(fs::relative(e.path(), source("")).string());
  std::sort(out.begin(), out.end());
  return out;
}

class ReplayTrace : public ::testing::TestWithParam<std::string> {};

// Capture order: no Terminate or violation the trace does not hold; every Terminate the trace
// holds reaches its receiver with its cause; the receivers' CQEs account for every message.
TEST_P(ReplayTrace, ReplaysWithoutViolationsTheTraceDoesNotHold) {
  const Plan plan = plan_of(source(GetParam()));
  ASSERT_FALSE(plan.connections.empty());
  const auto r = run(plan);
  ASSERT_EQ(r.connections.size(), plan.connections.size());
  EXPECT_EQ(r.unexpected, 0u) << format_text(plan, r, std::nullopt, std::nullopt, {});
  for (std::size_t i = 0; i < plan.connections.size(); ++i) {
    const auto& cp = plan.connections[i];
    const auto& cr = r.connections[i];
    for (const auto& t : cp.terminates) {
      const Side to = t.from == Side::Initiator ? Side::Responder : Side::Initiator;
      bool received = false;
      for (const auto& f : cr.terminates_received)
        received |= f.side == to &&
                    f.text.find(describe_term(t.layer, t.etype, t.ecode)) != std::string::npos;
      EXPECT_TRUE(received) << GetParam() << ": " << t.text << " not reported as received";
    }
    for (int s = 0; s < 2; ++s) {
      // One receive completion per Send or Immediate Data message the capture holds whole
      // (unless a Terminate ended the queue pair first).
      std::uint64_t whole = 0, ok = 0;
      for (const auto& rp : cp.ep[s].recvs) whole += rp.complete && !rp.rtr;  // an RTR: no CQE
      for (const auto& w : cr.ep[s].recv_cqes) ok += w.status == rnic::WcStatus::Success;
      if (cr.counts.terminates_received + cr.counts.terminates_sent == 0) {
        EXPECT_EQ(ok, whole) << GetParam() << " c" << cp.flow << " " << to_string(Side(s));
      }
      std::uint64_t answered = 0, done = 0;
      for (const auto& rd : cp.ep[s].reads) answered += rd.answered;
      for (const auto& w : cr.ep[s].send_cqes)
        done += w.status == rnic::WcStatus::Success && w.opcode == rnic::WcOpcode::RdmaRead;
      EXPECT_EQ(done, answered) << GetParam() << " c" << cp.flow << " " << to_string(Side(s));
    }
    // Holes seen in capture order close again unless the capture lost the octets.
    if (cr.cut_short.empty()) {
      EXPECT_EQ(cr.counts.holes_opened, cr.counts.holes_closed) << GetParam();
      EXPECT_TRUE(cr.ep[0].holes_open.empty() && cr.ep[1].holes_open.empty()) << GetParam();
    }
  }
}

// Seeded disorders (held-back segments arriving late, duplicates, overlapping retransmissions,
// segments re-cut into overlapping pieces) end exactly where capture order ends.
TEST_P(ReplayTrace, PermutationsEndWithIdenticalMemoryAndCqes) {
  const Plan plan = plan_of(source(GetParam()));
  ASSERT_FALSE(plan.connections.empty());
  std::uint64_t segments = 0;
  for (const auto& c : plan.connections) segments = std::max(segments, c.segments());
  // Short traces get a stronger disorder, so that every trace is really permuted.
  const bool strong = segments < 20;
  const auto base = run(plan);
  std::uint64_t disordered = 0, held = 0;
  for (std::uint64_t seed : {1, 2, 3}) {
    const auto p = run(plan, seed, strong);
    EXPECT_EQ(p.unexpected, 0u) << GetParam() << " seed " << seed;
    ASSERT_EQ(p.connections.size(), base.connections.size());
    for (std::size_t i = 0; i < p.connections.size(); ++i) {
      expect_identical(base.connections[i], p.connections[i],
                       fmt::format("{} c{} seed {}", GetParam(), plan.connections[i].flow, seed));
      const auto& c = p.connections[i];
      disordered += c.disorder[0].held + c.disorder[1].held + c.disorder[0].duplicated +
                    c.disorder[1].duplicated + c.split;
      held += c.disorder[0].held + c.disorder[1].held;
      EXPECT_EQ(c.counts.holes_opened - c.counts.holes_closed,
                base.connections[i].counts.holes_opened - base.connections[i].counts.holes_closed)
          << GetParam() << " seed " << seed << ": holes left open differ";
    }
  }
  // The disorders did something wherever there was something to disorder.
  if (segments >= 2) {
    EXPECT_GT(disordered, 0u) << GetParam() << ": the permutations did nothing (" << segments
                              << " segments)";
    EXPECT_GT(held, 0u) << GetParam() << ": no segment arrived out of order (" << segments
                        << " segments)";
  }
}

INSTANTIATE_TEST_SUITE_P(Replay, ReplayTrace, ::testing::ValuesIn(replayable_traces()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param;
                           for (auto& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// What the learning pass takes from rping: STags with the tagged offsets used, Send sizes, the
// responder's ten 64-octet RDMA Reads; and what the replay makes of it.
TEST(ReplayPlan, LearnsStagsSendSizesAndReadsFromRping) {
  const Plan plan = plan_of(source("pcap_traces/siw/rping_lo.pcap"));
  ASSERT_EQ(plan.connections.size(), 1u);
  const auto& cp = plan.connections[0];
  EXPECT_EQ(cp.mpa_length[0], 24u);
  EXPECT_EQ(cp.mpa_length[1], 24u);
  const auto& i = cp.ep[index(Side::Initiator)];
  const auto& r = cp.ep[index(Side::Responder)];
  ASSERT_EQ(r.reads.size(), 10u);
  for (const auto& rd : r.reads) {
    EXPECT_EQ(rd.request.size, 64u);
    EXPECT_EQ(rd.request.sink_stag, STag{0x448d5300});
    EXPECT_EQ(rd.request.src_stag, STag{0xd945ad00});
    EXPECT_TRUE(rd.answered);
  }
  EXPECT_TRUE(i.reads.empty());
  ASSERT_EQ(i.recvs.size(), 20u);
  ASSERT_EQ(r.recvs.size(), 20u);
  for (const auto& rp : i.recvs) EXPECT_EQ(rp.size, 16u);
  // The initiator is read from (0xd945ad00) and written (0xbe918b00); the responder's sink.
  std::set<std::uint32_t> istags, rstags;
  for (const auto& g : i.regions) istags.insert(g.stag.value());
  for (const auto& g : r.regions) rstags.insert(g.stag.value());
  EXPECT_EQ(istags, (std::set<std::uint32_t>{0xd945ad00, 0xbe918b00}));
  EXPECT_EQ(rstags, (std::set<std::uint32_t>{0x448d5300}));
  for (const auto& g : r.regions) EXPECT_EQ(g.end_to - g.begin_to, 64u);

  const auto res = run(plan);
  const auto& cr = res.connections[0];
  EXPECT_EQ(cr.unexpected(), 0u);
  ASSERT_EQ(cr.ep[index(Side::Responder)].send_cqes.size(), 10u);
  for (const auto& w : cr.ep[index(Side::Responder)].send_cqes) {
    EXPECT_EQ(w.opcode, rnic::WcOpcode::RdmaRead);
    EXPECT_EQ(w.status, rnic::WcStatus::Success);
    EXPECT_EQ(w.byte_len, 64u);
  }
  ASSERT_EQ(cr.ep[index(Side::Initiator)].recv_cqes.size(), 20u);
  for (std::size_t k = 0; k < 20; ++k) {
    const auto& w = cr.ep[index(Side::Initiator)].recv_cqes[k];
    EXPECT_EQ(w.wr_id, k + 1) << "receives complete in MSN order";
    EXPECT_EQ(w.byte_len, 16u);
  }
  EXPECT_EQ(cr.counts.doorbells, 10u);  // the initiator's read queue, once per Read Request
  EXPECT_TRUE(cr.cut_short.empty());
  // The responder's sink holds what the last Read Response carried.
  const auto& mem = cr.ep[index(Side::Responder)].memory;
  ASSERT_FALSE(mem.empty());
  EXPECT_EQ(mem[0].stag, STag{0x448d5300});
  EXPECT_GT(mem[0].nonzero, 0u);
}

// The capture netem reordered: holes open and close, FPDUs are placed beyond them, and the
// completions they hold are released when they close, after those placements.
TEST(ReplayNetem, HolesOpenCloseAndReleaseDeferredCompletions) {
  const Plan plan = plan_of(source("pcap_traces/siw/netem_reorder.pcap"));
  ASSERT_EQ(plan.connections.size(), 3u);
  const auto base = run(plan);
  EXPECT_EQ(base.unexpected, 0u);
  EXPECT_GT(base.totals.holes_opened, 0u);
  EXPECT_EQ(base.totals.holes_opened, base.totals.holes_closed);
  EXPECT_GT(base.totals.placed_beyond_hole, 0u);
  EXPECT_GT(base.totals.releases, 0u);
  EXPECT_GT(base.totals.duplicates, 0u);  // its retransmissions

  std::uint64_t released_completions = 0;
  bool placed_then_released = false;
  for (std::uint64_t seed : {1, 2, 3, 4}) {
    const auto p = run(plan, seed);
    EXPECT_EQ(p.unexpected, 0u) << "seed " << seed;
    EXPECT_EQ(p.totals.holes_opened, p.totals.holes_closed) << "seed " << seed;
    EXPECT_GE(p.totals.holes_opened, base.totals.holes_opened) << "seed " << seed;
    released_completions += p.totals.released_sends + p.totals.released_read_responses;
    for (std::size_t i = 0; i < p.connections.size(); ++i) {
      const auto& c = p.connections[i];
      expect_identical(base.connections[i], c, fmt::format("netem c{} seed {}", i, seed));
      EXPECT_TRUE(c.ep[0].holes_open.empty() && c.ep[1].holes_open.empty());
      // A Send completion released when a hole closed, and the FPDU it completes was placed
      // beyond that hole before it closed.
      const auto& tl = c.timeline;
      for (std::size_t k = 0; k < tl.size(); ++k) {
        const auto& e = tl[k].event;
        if (e.kind != rnic::RxEvent::Kind::Released || e.sends == 0) continue;
        for (std::size_t j = 0; j < k; ++j)
          placed_then_released |= tl[j].side == tl[k].side &&
                                  tl[j].event.kind == rnic::RxEvent::Kind::Placed &&
                                  tl[j].event.beyond_hole && tl[j].event.offset >= e.end &&
                                  tl[j].event.text.find("Send") != std::string::npos;
      }
    }
  }
  EXPECT_GT(released_completions, 0u);
  EXPECT_TRUE(placed_then_released);
}

// Loss: a segment the capture lacks leaves a hole that never closes; the replay says so, and
// what arrived beyond it is learned and placed; nothing crashes.
TEST(ReplayLoss, DroppedSegmentLeavesAHoleReportedAsCutShort) {
  auto cap = trace::read_capture(source("pcap_traces/siw/rping_lo.pcap"));
  ASSERT_TRUE(cap);
  // Frame 30 is the responder's Send MSN 6 to the initiator.
  auto dropped = drop_frames(*cap, {30});
  ASSERT_TRUE(dropped) << dropped.error();
  EXPECT_EQ(*dropped, 1u);
  auto plan = make_plan(*cap);
  ASSERT_TRUE(plan) << plan.error();
  const auto& cp = plan->connections.at(0);
  // Beyond the gap the plan still knows the responder's Reads and the initiator's Sends.
  EXPECT_EQ(cp.ep[index(Side::Responder)].reads.size(), 10u);
  EXPECT_EQ(cp.ep[index(Side::Initiator)].recvs.size(), 20u);
  EXPECT_FALSE(cp.ep[index(Side::Initiator)].recvs[5].seen);  // MSN 6 is not in the capture

  const auto r = run(*plan);
  const auto& c = r.connections.at(0);
  EXPECT_EQ(r.unexpected, 0u) << format_text(*plan, r, std::nullopt, std::nullopt, {});
  ASSERT_EQ(c.ep[index(Side::Initiator)].holes_open.size(), 1u);
  EXPECT_EQ(c.ep[index(Side::Initiator)].holes_open[0].hole.begin, 608u);  // Full Operation offset
  EXPECT_GT(c.counts.holes_opened, c.counts.holes_closed);
  // What arrived beyond it was placed, its completions held: Sends MSN 7-20, and the Read
  // Requests among the FPDUs after the hole wait for their doorbell.
  const auto& hole = c.ep[index(Side::Initiator)].holes_open[0];
  EXPECT_GT(hole.placed_fpdus, 20u);
  EXPECT_EQ(hole.sends, 14u);
  EXPECT_GT(hole.read_requests, 0u);
  EXPECT_GT(c.counts.placed_beyond_hole, 20u);
  bool reported = false;
  for (const auto& s : c.cut_short)
    reported |= s.find("hole never closed at I") != std::string::npos;
  EXPECT_TRUE(reported);
  // Sends before the hole completed, none after it; the other direction is whole.
  EXPECT_EQ(c.ep[index(Side::Initiator)].recv_cqes.size(), 5u);
  EXPECT_EQ(c.ep[index(Side::Responder)].recv_cqes.size(), 20u);
  const std::string text = format_text(*plan, r, std::nullopt, std::nullopt, {});
  EXPECT_NE(text.find("exchange cut short"), std::string::npos);

  // The same loss in the bulk RDMA Write connection of the netem capture.
  auto cap2 = trace::read_capture(source("pcap_traces/siw/netem_reorder.pcap"));
  ASSERT_TRUE(cap2);
  // A data segment of the initiator's Writes that nothing else in the capture carries again.
  const auto& segs = cap2->flows.at(2).dir[0];
  std::vector<std::uint64_t> lonely;
  for (const auto& s : segs) {
    if (s.payload.size() < 1000) continue;
    bool again = false;
    for (const auto& o : segs)
      again |= o.frame != s.frame && !o.payload.empty() &&
               o.seq < s.seq + static_cast<std::uint32_t>(s.payload.size()) &&
               s.seq < o.seq + static_cast<std::uint32_t>(o.payload.size());
    if (!again) lonely.push_back(s.frame);
  }
  ASSERT_GT(lonely.size(), 100u);
  ASSERT_TRUE(drop_frames(*cap2, {lonely[lonely.size() / 2]}));
  auto plan2 = make_plan(*cap2);
  ASSERT_TRUE(plan2) << plan2.error();
  const auto r2 = run(*plan2);
  EXPECT_EQ(r2.unexpected, 0u);
  const auto& c2 = r2.connections.at(2);
  EXPECT_FALSE(c2.ep[index(Side::Responder)].holes_open.empty());
  EXPECT_FALSE(c2.cut_short.empty());
  // And a disorder of the lossy capture ends where its capture order ends.
  expect_identical(c2, run(*plan2, 5).connections.at(2), "netem with a loss, seed 5");
}

// A Terminate the trace holds is reported with its cause; when it names an STag the sender
// never had, the emulation of that sender finds the same violation.
TEST(ReplayTerminate, TraceTerminatesAreReportedWithTheirCause) {
  {
    const Plan plan = plan_of(source("pcap_traces/siw/hostpeer_eth0_terminate.pcap"));
    const auto r = run(plan);
    const auto& c = r.connections.at(0);
    EXPECT_EQ(r.unexpected, 0u);
    ASSERT_EQ(c.terminates_received.size(), 1u);
    EXPECT_EQ(c.terminates_received[0].side, Side::Initiator);
    EXPECT_NE(c.terminates_received[0].text.find("DDP tagged: invalid STag"), std::string::npos);
    EXPECT_NE(c.terminates_received[0].why.find("0xdeadbe00"), std::string::npos);
    EXPECT_NE(c.terminates_received[0].text.find("siw's bit-field layout"), std::string::npos);
    ASSERT_EQ(c.terminates_sent.size(), 1u);
    EXPECT_EQ(c.terminates_sent[0].side, Side::Responder);
    EXPECT_TRUE(c.terminates_sent[0].expected) << c.terminates_sent[0].why;
    EXPECT_TRUE(c.not_reproduced.empty());
  }
  {
    // The generated traces end with the responder's Terminate about a Write the trace does
    // not hold: received with its cause, and said not to be reproducible.
    const Plan plan = plan_of(source("pcap_traces/generated/mpa2_crc.pcap"));
    const auto r = run(plan);
    const auto& c = r.connections.at(0);
    EXPECT_EQ(r.unexpected, 0u);
    ASSERT_EQ(c.terminates_received.size(), 1u);
    EXPECT_NE(c.terminates_received[0].text.find("invalid STag"), std::string::npos);
    EXPECT_EQ(c.terminates_sent.size(), 0u);
    EXPECT_EQ(c.not_reproduced.size(), 1u);
  }
}

// Atomics: the captured responses carry the original requester's identifiers (100-102); the
// emulated requester numbers its own, so they are renumbered and complete with the captured
// original values.
TEST(ReplayAtomics, CapturedAtomicResponsesCompleteTheEmulatedRequests) {
  for (const char* f :
       {"pcap_traces/generated/mpa2_crc.pcap", "pcap_traces/generated/mpa1_crc_markers.pcap"}) {
    const Plan plan = plan_of(source(f));
    const auto& cp = plan.connections.at(0);
    ASSERT_EQ(cp.ep[index(Side::Initiator)].atomics.size(), 3u) << f;
    EXPECT_EQ(cp.ep[index(Side::Initiator)].atomics[0].request.request_id, 100u);
    const auto r = run(plan);
    const auto& ep = r.connections.at(0).ep[index(Side::Initiator)];
    std::vector<rnic::WcOpcode> ops;
    for (const auto& w : ep.send_cqes) {
      EXPECT_EQ(w.status, rnic::WcStatus::Success) << f;
      ops.push_back(w.opcode);
    }
    EXPECT_EQ(ops, (std::vector<rnic::WcOpcode>{rnic::WcOpcode::FetchAdd, rnic::WcOpcode::CompSwap,
                                                rnic::WcOpcode::CompSwap}))
        << f;
    const RegionImage* results = nullptr;
    for (const auto& m : ep.memory)
      if (m.kind == "atomic results") results = &m;
    ASSERT_NE(results, nullptr);
    ASSERT_GE(results->bytes.size(), 24u);
    for (std::size_t k = 0; k < 3; ++k) {
      std::uint64_t v;
      std::memcpy(&v, results->bytes.data() + 8 * k, 8);
      EXPECT_EQ(v, 0x42u) << f << " atomic " << k;  // the original value the capture carries
    }
  }
}

// Connections that cannot be replayed are named with the reason; a capture with none fails in
// one line.
TEST(ReplayInput, ConnectionsThatCannotBeReplayedAreNamedWithTheReason) {
  {
    const Plan plan = plan_of(source("pcap_traces/siw/siw_accept_race_stall.pcap"));
    ASSERT_EQ(plan.connections.size(), 1u);
    ASSERT_EQ(plan.skipped.size(), 1u);
    EXPECT_NE(plan.skipped[0].reason.find("rejected by the responder"), std::string::npos);
  }
  {
    const Plan plan = plan_of(source("pcap_traces/siw/siw_accept_race_stall_badstag.pcap"));
    ASSERT_EQ(plan.connections.size(), 1u);
    ASSERT_EQ(plan.skipped.size(), 1u);
    EXPECT_EQ(plan.skipped[0].reason, "not iWARP: no data exchanged");
  }
  {
    const Plan plan = plan_of(source("pcap_traces/siw/hostpeer_hostlo.pcap"));
    EXPECT_EQ(plan.connections.size(), 3u);
    ASSERT_EQ(plan.skipped.size(), 3u);
    for (const auto& s : plan.skipped)
      EXPECT_NE(s.reason.find("the MPA Reply is not in the capture"), std::string::npos);
  }
  {
    auto cap = trace::read_capture(source("pcap_traces/siw/hostnet_eth0.pcap"));
    ASSERT_TRUE(cap);
    auto plan = make_plan(*cap);
    ASSERT_FALSE(plan);
    EXPECT_NE(plan.error().find("hostnet_eth0.pcap: no iWARP connection to replay"),
              std::string::npos);
    EXPECT_NE(plan.error().find("does not start with \"MPA ID Req Frame\""), std::string::npos);
    EXPECT_EQ(plan.error().find('\n'), std::string::npos);
  }
  {
    // A capture that starts after the MPA exchange: named as such.
    auto cap = trace::read_capture(source("pcap_traces/siw/rping_lo.pcap"));
    ASSERT_TRUE(cap);
    std::vector<std::uint64_t> early;
    for (const auto& d : cap->flows[0].dir)
      for (const auto& s : d)
        if (s.frame <= 7) early.push_back(s.frame);
    ASSERT_TRUE(drop_frames(*cap, early));
    auto plan = make_plan(*cap);
    ASSERT_FALSE(plan);
    EXPECT_NE(plan.error().find("c0 10.0.2.15:"), std::string::npos) << plan.error();
    EXPECT_NE(plan.error().find("no MPA exchange in the capture"), std::string::npos)
        << plan.error();
  }
  {
    auto cap = trace::read_capture(source("pcap_traces/siw/rping_lo.pcap"));
    ASSERT_TRUE(cap);
    auto d = drop_frames(*cap, {3});
    ASSERT_FALSE(d);
    EXPECT_NE(d.error().find("frame 3 is no TCP segment"), std::string::npos);
  }
}

// The command line: a JSON document for tools, a permuted replay checked against capture
// order, and one line for input it cannot use.
struct Run {
  int status = -1;
  std::string out, err;
};

Run rnic(const std::string& args) {
  const std::string base = ::testing::TempDir() + "replay_cli_" + std::to_string(::getpid());
  const std::string cmd = fmt::format("{} {} >{}.out 2>{}.err", IWARP_RNIC_BIN, args, base, base);
  Run r;
  const int st = std::system(cmd.c_str());
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream o(base + ".out"), e(base + ".err");
  std::stringstream so, se;
  so << o.rdbuf();
  se << e.rdbuf();
  r.out = so.str();
  r.err = se.str();
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

TEST(ReplayCli, JsonDocumentAndExitStatus) {
  const auto r = rnic("replay --json --no-progress " + source("pcap_traces/siw/rping_lo.pcap"));
  ASSERT_EQ(r.status, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["exit_status"], 0);
  EXPECT_EQ(doc["unexpected"], 0);
  ASSERT_EQ(doc["connections"].size(), 1u);
  const auto& c = doc["connections"][0];
  EXPECT_EQ(c["endpoints"]["R"]["send_cqes"].size(), 10u);
  EXPECT_EQ(c["endpoints"]["R"]["send_cqes"][0]["opcode"], "RDMA_READ");
  EXPECT_EQ(c["endpoints"]["I"]["recv_cqes"].size(), 20u);
  EXPECT_EQ(c["complete"], true);
  EXPECT_FALSE(c["timeline"].empty());
  EXPECT_EQ(c["timeline"][0]["event"], "placed");

  const auto t =
      rnic("replay --json --no-progress " + source("pcap_traces/siw/hostpeer_eth0_terminate.pcap"));
  ASSERT_EQ(t.status, 0) << t.err;
  auto tdoc = nlohmann::json::parse(t.out);
  ASSERT_EQ(tdoc["connections"][0]["terminates_received"].size(), 1u);
  EXPECT_EQ(tdoc["connections"][0]["trace_terminates"][0]["from"], "R");
  EXPECT_EQ(tdoc["connections"][0]["trace_terminates"][0]["ecode"], 0);

  const auto p =
      rnic("replay --json --quiet --permute 7 " + source("pcap_traces/siw/siw_crc_on.pcap"));
  ASSERT_EQ(p.status, 0) << p.err;
  auto pdoc = nlohmann::json::parse(p.out);
  EXPECT_EQ(pdoc["permutation_check"]["identical"], true);
  EXPECT_FALSE(pdoc["connections"][0].contains("timeline"));

  const auto txt = rnic("replay --drop 30 " + source("pcap_traces/siw/rping_lo.pcap"));
  EXPECT_EQ(txt.status, 0) << txt.err;
  EXPECT_NE(txt.out.find("a hole never closed at I"), std::string::npos) << txt.out;
  EXPECT_NE(txt.out.find("timeline ("), std::string::npos);
}

TEST(ReplayCli, UnusableInputIsOneLineAndStatusTwo) {
  const std::string dir = ::testing::TempDir();
  const std::string notpcap = dir + "replay_not_a_capture_" + std::to_string(::getpid()) + ".pcap";
  std::ofstream(notpcap) << "this is not a capture\n";
  for (const std::string& f : {std::string("/nonexistent/dir/x.pcap"), notpcap,
                               source("pcap_traces/siw/hostnet_eth0.pcap")}) {
    const auto r = rnic("replay " + f);
    EXPECT_EQ(r.status, 2) << f;
    EXPECT_TRUE(r.out.empty()) << r.out;
    ASSERT_FALSE(r.err.empty()) << f;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.err.starts_with("rnic replay: ")) << r.err;
    EXPECT_NE(r.err.find(f), std::string::npos) << r.err;
  }
  std::remove(notpcap.c_str());
  const auto bad =
      rnic("replay --reorder 2 --permute 1 " + source("pcap_traces/siw/rping_lo.pcap"));
  EXPECT_EQ(bad.status, 2);
  const auto needs = rnic("replay --reorder 0.5 " + source("pcap_traces/siw/rping_lo.pcap"));
  EXPECT_EQ(needs.status, 2);
  const auto drop = rnic("replay --drop 3 " + source("pcap_traces/siw/rping_lo.pcap"));
  EXPECT_EQ(drop.status, 2);
  EXPECT_NE(drop.err.find("frame 3 is no TCP segment"), std::string::npos);
}

// A capture truncated in the middle of a frame: the readable part is replayed, the damage is
// reported and the exchange is cut short.
TEST(ReplayInput, TruncatedCaptureIsReplayedAsFarAsItGoes) {
  const std::string path =
      ::testing::TempDir() + "replay_truncated_" + std::to_string(::getpid()) + ".pcap";
  {
    std::ifstream in(source("pcap_traces/siw/rping_lo.pcap"), std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(path, std::ios::binary) << all.substr(0, 5000);
  }
  const Plan plan = plan_of(path);
  std::remove(path.c_str());
  ASSERT_EQ(plan.connections.size(), 1u);
  ASSERT_FALSE(plan.problems.empty());
  EXPECT_NE(plan.problems[0].find("truncated"), std::string::npos);
  const auto r = run(plan);
  EXPECT_EQ(r.unexpected, 0u);
  EXPECT_FALSE(r.connections[0].cut_short.empty());
  const std::string text = format_text(plan, r, std::nullopt, std::nullopt, {});
  EXPECT_NE(text.find("capture problem: frame"), std::string::npos);
}

}  // namespace
}  // namespace iwarp::replay
