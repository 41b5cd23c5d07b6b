// The receiving side's message assembly: pieces and copied-out RDMA Write parts of one message
// arrive in order, at exactly the next offset; complete messages are delivered in sequence
// order. Pure bookkeeping, no I/O.
#pragma once

#include <cstdint>
#include <deque>
#include <expected>
#include <optional>
#include <string>

#include "common/bytes.hpp"

namespace iwarp::enlarge {

struct Received {
  std::uint32_t seq = 0;
  Bytes data;
};

class Reassembly {
 public:
  explicit Reassembly(std::uint32_t max_message) : max_message_(max_message) {}

  // Adds `data` at `offset` of message `seq` of `total` bytes. Returns whether this part
  // completed the message, or the peer's protocol error in words.
  std::expected<bool, std::string> add(std::uint32_t seq, std::uint32_t total, std::uint32_t offset,
                                       ByteSpan data);
  // The next message received in full, in order.
  std::optional<Received> pop();

 private:
  struct Partial {
    std::uint32_t seq = 0;
    std::uint32_t total = 0;
    Bytes data;
    std::uint32_t got = 0;
  };
  std::uint32_t max_message_;
  std::optional<Partial> partial_;
  std::uint32_t next_seq_ = 1;
  std::deque<Received> complete_;
};

}  // namespace iwarp::enlarge
