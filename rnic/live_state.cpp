#include "rnic/live_state.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "rnic/completion_queue.hpp"
#include "rnic/device.hpp"
#include "rnic/queue_pair.hpp"

namespace iwarp::rnic {

namespace {

using json = nlohmann::ordered_json;

// A device with more than this many regions or queue pairs lists this many (the counts say
// how many there are): one answer stays a few megabytes at most.
constexpr std::size_t kMaxListed = 4096;

std::string hex(std::uint64_t v) {
  return fmt::format("0x{:x}", v);
}

json access_names(std::uint32_t a) {
  json out = json::array();
  if (a & kLocalWrite) out.push_back("local_write");
  if (a & kRemoteWrite) out.push_back("remote_write");
  if (a & kRemoteRead) out.push_back("remote_read");
  if (a & kRemoteAtomic) out.push_back("remote_atomic");
  return out;
}

std::string program_name() {
  std::ifstream in("/proc/self/comm");
  std::string s;
  std::getline(in, s);
  return s;
}

// What waits on one hole (rnic/segment_input.hpp HoleInfo), in words a reader can act on.
json hole_json(const HoleInfo& h) {
  json w = {{"sends", h.sends},
            {"send_wr_ids", h.send_wr_ids},
            {"read_responses", h.read_responses},
            {"read_requests", h.read_requests},
            {"writes", h.writes},
            {"placed_fpdus", h.placed_fpdus},
            {"deferred_errors", h.deferred_errors}};
  std::vector<std::string> what;
  if (h.sends) what.push_back(fmt::format("{} Send completion(s)", h.sends));
  if (h.read_responses) what.push_back(fmt::format("{} Read completion(s)", h.read_responses));
  if (h.read_requests) what.push_back(fmt::format("{} Read Request(s) to answer", h.read_requests));
  if (h.deferred_errors) what.push_back(fmt::format("{} Terminate(s)", h.deferred_errors));
  return {
      {"begin", h.hole.begin},
      {"end", h.hole.end},
      {"missing_octets", h.hole.end - h.hole.begin},
      {"waiting", w},
      {"summary", fmt::format("{} FPDU(s) placed beyond it; {}", h.placed_fpdus,
                              what.empty() ? std::string("nothing held back")
                                           : fmt::format("held back: {}", fmt::join(what, ", ")))}};
}

json counters_json(const QpLiveState& q) {
  const auto& sg = q.segments;
  return {
      {"tcp",
       {{"segments", sg.segments},
        {"in_order_segments", sg.in_order_segments},
        {"out_of_order_segments", sg.ooo_segments},
        {"duplicate_segments", sg.duplicate_segments},
        {"dropped_segments", sg.dropped_segments},
        {"holes_opened", sg.holes_opened},
        {"holes_closed", sg.holes_closed}}},
      {"mpa",
       {{"fpdus_sent", q.fpdus_sent},
        {"fpdus_received", q.fpdus_received},
        {"bytes_sent", q.bytes_sent},
        {"bytes_received", q.bytes_received},
        {"crc_errors", q.crc_errors}}},
      {"ddp",
       {{"placed_beyond_hole", q.ooo_placed},
        {"ooo_fpdus_found", sg.ooo_fpdus_found},
        {"deferred_released", q.released}}},
      {"rdmap",
       {{"terminates_sent", q.terminates_sent}, {"terminates_received", q.terminates_received}}},
      {"engine",
       {{"doorbells", q.doorbells},
        {"tx_batches", q.tx_batches},
        {"direct_reads", q.direct_reads},
        {"posted_inline_batches", q.posted_inline_batches},
        {"posted_inline_wrs", q.posted_inline_wrs},
        {"inline_handoffs", q.inline_handoffs}}},
  };
}

json qp_json(const QpLiveState& q, const std::map<const CompletionQueue*, std::string>& cq_ids) {
  json j = {{"qp_num", q.qp_num},
            {"state", std::string(to_string(q.state))},
            {"pd", q.pd},
            {"send_queue", {{"depth", q.sq_depth}, {"used", q.sq_used}}},
            {"recv_queue", {{"depth", q.rq_depth}, {"used", q.rq_used}, {"srq", q.srq}}},
            {"ord", {{"limit", q.ord}, {"in_use", q.ord_used}}},
            {"ird", {{"limit", q.ird}, {"in_use", q.ird_used}}}};
  if (!q.error.empty()) j["error"] = q.error;
  if (!q.local.empty()) j["local"] = q.local;
  if (!q.peer.empty()) j["peer"] = q.peer;
  if (auto it = cq_ids.find(q.send_cq); it != cq_ids.end()) j["send_cq"] = it->second;
  if (auto it = cq_ids.find(q.recv_cq); it != cq_ids.end()) j["recv_cq"] = it->second;
  if (q.mpa) {
    const auto& p = *q.mpa;
    j["role"] = q.initiator ? "initiator" : "responder";
    j["mpa"] = {{"revision", p.revision},
                {"crc", p.crc},
                {"markers_sent", q.initiator ? p.markers_to_responder : p.markers_to_initiator},
                {"markers_received", q.initiator ? p.markers_to_initiator : p.markers_to_responder},
                {"peer_to_peer", p.peer_to_peer},
                {"mulpdu", q.mulpdu}};
  }
  json holes = json::array();
  for (const auto& h : q.holes) holes.push_back(hole_json(h));
  j["holes"] = std::move(holes);
  j["counters"] = counters_json(q);
  return j;
}

}  // namespace

std::string live_state_json(Device& dev, std::uint64_t queries) {
  auto qps = dev.queue_pairs();
  // The kMaxListed lowest QP numbers (the oldest), whatever order the device holds them in.
  std::ranges::sort(qps, {}, [](const auto& q) { return q->qp_num(); });
  std::vector<QpLiveState> states;
  states.reserve(std::min(qps.size(), kMaxListed));
  for (std::size_t i = 0; i < qps.size() && i < kMaxListed; ++i)
    states.push_back(qps[i]->live_state());

  // The completion queues the queue pairs complete into, named cq0, cq1 ... in QP order.
  std::map<const CompletionQueue*, std::string> cq_ids;
  json cqs = json::array();
  for (const auto& q : states)
    for (const CompletionQueue* cq : {q.send_cq, q.recv_cq}) {
      if (!cq || cq_ids.contains(cq)) continue;
      const std::string id = fmt::format("cq{}", cq_ids.size());
      cq_ids.emplace(cq, id);
      const auto st = cq->stats();
      cqs.push_back({{"id", id},
                     {"depth", cq->depth()},
                     {"used", cq->used()},
                     {"overflowed", cq->overflowed()},
                     {"completions", st.completions},
                     {"events", st.events}});
    }

  // The engine's totals: each listed QP's counter, summed (one table, each name once).
  using Counter = std::uint64_t (*)(const QpLiveState&);
  static constexpr std::pair<const char*, Counter> kTotals[] = {
      {"fpdus_sent", [](const QpLiveState& q) { return q.fpdus_sent; }},
      {"fpdus_received", [](const QpLiveState& q) { return q.fpdus_received; }},
      {"bytes_sent", [](const QpLiveState& q) { return q.bytes_sent; }},
      {"bytes_received", [](const QpLiveState& q) { return q.bytes_received; }},
      {"crc_errors", [](const QpLiveState& q) { return q.crc_errors; }},
      {"terminates_sent", [](const QpLiveState& q) { return q.terminates_sent; }},
      {"terminates_received", [](const QpLiveState& q) { return q.terminates_received; }},
      {"placed_beyond_hole", [](const QpLiveState& q) { return q.ooo_placed; }},
      {"deferred_released", [](const QpLiveState& q) { return q.released; }},
      {"doorbells", [](const QpLiveState& q) { return q.doorbells; }},
      {"posted_inline_batches", [](const QpLiveState& q) { return q.posted_inline_batches; }},
      {"open_holes",
       [](const QpLiveState& q) { return static_cast<std::uint64_t>(q.holes.size()); }},
  };
  json qj = json::array();
  json totals = json::object();
  for (const auto& [name, get] : kTotals) {
    std::uint64_t sum = 0;
    for (const auto& q : states) sum += get(q);
    totals[name] = sum;
  }
  for (const auto& q : states) qj.push_back(qp_json(q, cq_ids));

  const auto regions = dev.memory().list();
  json mrs = json::array();
  std::uint64_t registered = 0;
  for (const auto& r : regions) {
    registered += r.length;
    if (mrs.size() >= kMaxListed) continue;
    mrs.push_back({{"stag", hex(r.stag.value())},
                   {"pd", r.pd},
                   {"length", r.length},
                   {"base_to", hex(r.base_to)},
                   {"access", access_names(r.access)},
                   {"valid", r.valid}});
  }

  json doc = {{"pid", static_cast<long>(::getpid())},
              {"program", program_name()},
              {"device", dev.name()},
              {"socket", "@" + dev.stat_address()},
              {"engine",
               {{"running", dev.engine_running()},
                {"queue_pairs", qps.size()},
                {"memory_regions", regions.size()},
                {"registered_bytes", registered},
                {"stat_queries", queries},
                {"totals", totals}}},
              {"queue_pairs", std::move(qj)},
              {"memory_regions", std::move(mrs)},
              {"completion_queues", std::move(cqs)}};
  // Strings come from the process and the system (its name from /proc, which the kernel cuts
  // at 15 octets, possibly inside a UTF-8 sequence; a device name; an error text): invalid
  // UTF-8 is replaced, never thrown (an exception here would stop the engine).
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace iwarp::rnic
