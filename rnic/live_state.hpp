// Live state of an emulated RNIC, for `rnic stat PID` (docs/stat.md): what each queue pair,
// completion queue and memory region holds right now, and the counters of every layer, as one
// JSON document. Gathered on the engine thread, so it reads engine state without a race.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mpa/negotiation.hpp"
#include "mpa/segment_receiver.hpp"
#include "rnic/qp_types.hpp"
#include "rnic/segment_input.hpp"

namespace iwarp::rnic {

class CompletionQueue;
class Device;

// One queue pair as QueuePair::live_state() sees it (engine thread).
struct QpLiveState {
  std::uint32_t qp_num = 0;
  QpState state = QpState::Idle;
  std::string error;  // why it left RTS (empty while it has not)
  std::uint32_t pd = 0;
  std::string local, peer;                   // "address:port", empty without a socket (replay)
  std::optional<mpa::ConnectionParams> mpa;  // once connected
  bool initiator = false;
  std::size_t mulpdu = 0;
  std::uint32_t sq_depth = 0, sq_used = 0, rq_depth = 0, rq_used = 0;
  bool srq = false;
  // RFC 5040 §6.3 / RFC 6581: the negotiated ORD/IRD and the Reads (and atomics) using them:
  // ours waiting for their responses, the peer's waiting for ours.
  std::uint32_t ord = 0, ord_used = 0, ird = 0, ird_used = 0;
  std::vector<HoleInfo> holes;
  mpa::SegmentReceiver::Stats segments;
  std::uint64_t fpdus_sent = 0, fpdus_received = 0, bytes_sent = 0, bytes_received = 0;
  std::uint64_t doorbells = 0, tx_batches = 0, direct_reads = 0, posted_inline_batches = 0,
                posted_inline_wrs = 0, inline_handoffs = 0, ooo_placed = 0, released = 0;
  std::uint64_t crc_errors = 0, terminates_sent = 0, terminates_received = 0;
  const CompletionQueue* send_cq = nullptr;
  const CompletionQueue* recv_cq = nullptr;
};

// The document `rnic stat` prints, for `dev` (engine thread; any thread once it has stopped).
// `queries` is how many the stat server has answered, this one included.
std::string live_state_json(Device& dev, std::uint64_t queries);

}  // namespace iwarp::rnic
