// What a connection of the buffer-enlargement protocol has done, for tests, the demo and the
// benchmark.
#pragma once

#include <cstdint>

namespace iwarp::enlarge {

struct Stats {
  std::uint64_t messages_sent = 0, messages_received = 0;
  std::uint64_t bytes_sent = 0, bytes_received = 0;
  std::uint64_t pieces_sent = 0, pieces_received = 0;
  std::uint64_t bulk_writes = 0, bulk_bytes = 0;  // RDMA Writes into the peer's buffer
  std::uint64_t most_writes_unanswered = 0;       // the ring's deepest: Writes awaiting Ready
  std::uint64_t enlarge_requests = 0;             // EnlargeReq sent
  std::uint64_t enlargements = 0;                 // EnlargeAck received (sender side)
  std::uint64_t refusals = 0;                     // EnlargeNak received
  std::uint64_t releases_sent = 0;                // idle shrink (sender side)
  std::uint64_t buffers_provisioned = 0;          // receiver side: enlarged buffers made
  std::uint64_t buffers_freed = 0;                // receiver side: enlarged buffers freed
  std::uint64_t refusals_sent = 0;                // receiver side: EnlargeNak sent
  std::uint64_t small_freed = 0;                  // small buffers unregistered and freed
  std::uint64_t credit_messages = 0;              // standalone Credit Sends
  std::uint64_t sends = 0;            // Sends posted (each into one of the peer's slots)
  std::uint64_t bundles = 0;          // of those, Bundles (several messages in one Send)
  std::uint64_t sends_received = 0;   // receive slots consumed by the peer's Sends
  std::uint64_t dones_received = 0;   // Done notifications received (receiver side)
  std::uint64_t readys_received = 0;  // Ready messages received (sender side)
  std::uint64_t registrations = 0, deregistrations = 0;
  std::uint64_t peak_registered = 0;
};

}  // namespace iwarp::enlarge
