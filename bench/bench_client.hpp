// The client side of one speed-part connection of rnic enlarge-bench, whatever carries it (an
// enlarge node, raw TCP). Its server runs in a thread of this process.
//
// Message pattern (every scheme and TCP alike): the first byte says what the server does with
// a message. 'E': echo it back at the same size; 'D': data, nothing; 'L': the last of a stream,
// answer with an 8-byte acknowledgement; 'Q': the run is over.
#pragma once

#include <atomic>
#include <expected>
#include <string>

#include "common/bytes.hpp"

namespace iwarp::bench {

class BenchClient {
 public:
  virtual ~BenchClient() = default;
  virtual std::expected<void, std::string> send(const Bytes& m) = 0;
  virtual std::expected<Bytes, std::string> recv() = 0;
  // Sends 'Q', waits for the server thread. Returns the server's error, if any.
  virtual std::string finish() = 0;
};

// What a client shares with its server thread.
struct ServerShared {
  std::atomic<bool> stop{false};
  std::string error;  // read after join
};

}  // namespace iwarp::bench
