// Explanations of the replay timeline (rnic replay --explain): for each event a receive engine
// reported (placement in order or beyond a TCP hole, holes opening and closing, deferred
// completions released, completions, doorbells, Terminates), one plain sentence saying what it
// means in RDMA terms and which RFC rule applies, with the event's values. Built on the
// per-opcode and per-error-code sentences of trace/explain.hpp.
#pragma once

#include <string>

#include "rnic/rx_observer.hpp"

namespace iwarp::replay {

std::string explain_event(const rnic::RxEvent& e);

}  // namespace iwarp::replay
