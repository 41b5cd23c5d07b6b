// --explain on the live programs (rnic ping, xfer, demo): each event this side's receive
// engine reports, and the work requests the program itself posts and sees complete, printed as
// they happen, each followed by an indented sentence "why: ..." from the one sentence table
// (trace/explain.hpp per opcode, replay/replay_explain.hpp per receive-engine event).
//
// The engine's thread and the program's own thread both print: every line goes through
// print_lines(), which writes it whole under one lock, so lines never mix mid-line.
#pragma once

#include <iostream>
#include <memory>
#include <string>
#include <string_view>

#include "rnic/rx_observer.hpp"
#include "trace/explain.hpp"
#include "verbs_shim/endpoint.hpp"

namespace iwarp::tools {

// Writes `text` and a newline to `out` (stdout) and flushes, under the lock the printers share.
void print_lines(std::string_view text, std::ostream& out = std::cout);

// The RDMAP message a posted work request goes out as (IBV_WR_SEND -> Send, ...).
trace::PostedWork posted_work(const verbs::OneWr& wr);

class ExplainPrinter : public rnic::RxObserver {
 public:
  // `side` starts each event line ("client: rx placed ..."); empty when something else labels
  // the lines (rnic demo's parent prefixes each child's lines with its name).
  explicit ExplainPrinter(std::string side);

  // A receive-engine event (engine thread): "<side>: rx <kind> <what>", then its sentence.
  void on_event(const rnic::RxEvent& e) override;
  // The program posted `wr`: "<side>: post <message>, <n> octets ...", then its sentence.
  void posted(const verbs::OneWr& wr);
  // `wr`'s completion arrived on the send CQ: "<side>: cqe <message> <status>", then its sentence.
  void completed(const verbs::OneWr& wr, const verbs::ibv_wc& wc);

 private:
  void print(const std::string& line, const std::string& why);
  std::string prefix_;  // "client: " or ""
};

// With --explain: a printer for `side` (also handed to the QPs as their rx observer), else null.
std::shared_ptr<ExplainPrinter> make_explainer(bool explain, verbs::EndpointOptions& eo,
                                               std::string side);

}  // namespace iwarp::tools
