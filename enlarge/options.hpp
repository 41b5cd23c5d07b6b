// What a node running the buffer-enlargement protocol can be told. The protocol's sizes: a
// pre-registered buffer of 100-2,000 bytes, enlarged buffers of 1,000-200,000 bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "enlarge/budget.hpp"
#include "enlarge/wire_format.hpp"
#include "rnic/cm_options.hpp"

namespace iwarp::enlarge {

struct Options {
  // The pre-registered buffer: each receive slot (and send slot) holds one message of at most
  // this many bytes, header included. The protocol's sizes are 100-2,000; 64 at the least (a
  // control message must fit), 1 MiB at the most (the benchmark's static 64 KiB scheme uses
  // 65,536).
  std::uint32_t slot_size = 1024;
  std::uint32_t recv_slots = 4;  // receive slots posted per connection (credits the peer has)
  std::uint32_t send_slots = 4;  // send staging slots per connection
  // Data (a message, or an iovec element) larger than this goes through an enlarged buffer;
  // 0 means "what fits in one slot" (slot_size minus the 16-octet Piece header).
  std::uint32_t threshold = 0;
  std::uint32_t min_enlarged = 1000;  // the smallest buffer an enlargement asks for
  // An enlargement asks for room for this many pieces of the data that needed it (within
  // min/max): the buffer is a ring, so that many RDMA Writes can be in flight at once.
  std::uint32_t depth = 4;
  std::uint32_t max_enlarged = 200000;  // the largest; bigger data goes through it in parts
  // Once enlarged, move the connection's slots into the enlarged buffer and unregister and
  // free the small pre-registered buffer, so an enlarged connection keeps no small buffer.
  bool free_small = false;
  // A sender that has not used its enlarged buffer for this long releases it (the receiver
  // unregisters and frees its side); 0 keeps enlarged buffers for the connection's life.
  std::chrono::milliseconds idle_shrink{0};
  // After a refusal, data above the threshold goes in pieces for this long before asking
  // again.
  std::chrono::milliseconds refusal_backoff{50};
  // The largest message this side accepts; a peer announcing more is a protocol error.
  std::uint32_t max_message = 1u << 30;
  Mode mode = Mode::Enlarge;
  // The per-process registered-memory budget every registration is charged to (null: none).
  std::shared_ptr<Budget> budget;
  // Busy polling: progress() first polls the node's CQs for up to this long, the polling thread
  // running the device's receive path itself (verbs::rnic_set_busy_poll), and blocks on the
  // completion channel only when nothing came; 0 blocks at once (the engine thread receives and
  // the channel wakes this thread). A node that had no completion or connection event for
  // max(2 ms, busy_poll) blocks at once until the next one; each spin polls every
  // connection's CQ: for a few busy connections, not thousands of idle ones.
  std::chrono::microseconds busy_poll{0};
  // Node::create() sets the process's malloc to serve large blocks from a heap it keeps
  // (enlarge/allocator.hpp): without it a stream of messages above 128 KiB can map and fault
  // in every page of every message. false leaves the allocator as the program set it.
  bool tune_malloc = true;
  // MPA options of the connections (CRC, markers, --wire impairments, pcap recording).
  rnic::CmOptions cm;
};

// Checks the sizes; returns what is wrong in words, or an empty string.
std::string validate(const Options& o);

}  // namespace iwarp::enlarge
