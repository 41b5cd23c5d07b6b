#include "tools/explain_printer.hpp"

#include <fmt/format.h>

#include <iostream>
#include <mutex>

#include "replay/replay_explain.hpp"
#include "replay/replayer.hpp"

namespace iwarp::tools {

namespace {

using namespace verbs;

std::mutex& out_mutex() {
  static std::mutex m;
  return m;
}

std::uint8_t rdmap_opcode(const verbs::OneWr& wr) {
  const bool se = wr.flags & IBV_SEND_SOLICITED;
  switch (wr.op) {
    case IBV_WR_RDMA_WRITE:
      return 0x0;
    case IBV_WR_RDMA_READ:
      return 0x1;
    case IBV_WR_SEND_WITH_INV:
      return se ? 0x6 : 0x4;
    case IBV_WR_RDMA_WRITE_WITH_IMM:  // the Write, then Immediate Data (RFC 7306 §4.3)
    case IBV_WR_SEND_WITH_IMM:
      return se ? 0x9 : 0x8;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return 0xA;
    default:
      return se ? 0x5 : 0x3;
  }
}

}  // namespace

using namespace verbs;

void print_lines(std::string_view text, std::ostream& out) {
  std::lock_guard l(out_mutex());
  out << text << std::endl;
}

trace::PostedWork posted_work(const verbs::OneWr& wr) {
  const auto op = rdmap_opcode(wr);
  const bool atomic = op == 0xA;
  return {.opcode = op,
          .length = atomic ? 8u : wr.len,
          .stag = wr.rkey,
          .to = op == 0x0 || op == 0x1 || atomic ? wr.remote_addr : 0};
}

ExplainPrinter::ExplainPrinter(std::string side) : prefix_(side.empty() ? "" : side + ": ") {}

void ExplainPrinter::print(const std::string& line, const std::string& why) {
  print_lines(fmt::format("{}{}\n{:>{}}why: {}", prefix_, line, "", prefix_.size() + 2, why));
}

void ExplainPrinter::on_event(const rnic::RxEvent& e) {
  std::string what(replay::event_name(e.kind));
  if (e.beyond_hole && e.kind != rnic::RxEvent::Kind::Deferred &&
      e.kind != rnic::RxEvent::Kind::DeferredError)
    what += " beyond-hole";
  print(fmt::format("rx {} {}", what, e.text), replay::explain_event(e));
}

void ExplainPrinter::posted(const verbs::OneWr& wr) {
  const auto w = posted_work(wr);
  std::string line = fmt::format("post {}, {} octets", rdmap::opcode_name(w.opcode), w.length);
  if (w.opcode == 0x0 || w.opcode == 0x1 || w.opcode == 0xA)
    line += fmt::format(", peer STag 0x{:08x} TO 0x{:x}", w.stag, w.to);
  else if (w.opcode == 0x4 || w.opcode == 0x6)
    line += fmt::format(", invalidating STag 0x{:08x}", w.stag);
  print(line, trace::explain_posted(w));
}

void ExplainPrinter::completed(const verbs::OneWr& wr, const verbs::ibv_wc& wc) {
  const auto w = posted_work(wr);
  print(fmt::format("cqe {} {}", rdmap::opcode_name(w.opcode), ibv_wc_status_str(wc.status)),
        trace::explain_work_completion(w, wc.status == IBV_WC_SUCCESS));
}

std::shared_ptr<ExplainPrinter> make_explainer(bool explain, verbs::EndpointOptions& eo,
                                               std::string side) {
  if (!explain) return nullptr;
  auto p = std::make_shared<ExplainPrinter>(std::move(side));
  eo.cm.rx_observer = p;
  return p;
}

}  // namespace iwarp::tools
