// The raw TCP baseline of rnic enlarge-bench's speed part: the same message pattern as the
// enlarge schemes (bench_client.hpp), length-prefixed, over one TCP_NODELAY connection on
// 127.0.0.1 to a server thread.
#pragma once

#include <chrono>
#include <expected>
#include <memory>
#include <string>
#include <thread>

#include "bench/bench_client.hpp"

namespace iwarp::bench {

class TcpClient final : public BenchClient {
 public:
  static std::expected<std::unique_ptr<TcpClient>, std::string> start(
      std::chrono::milliseconds timeout);
  ~TcpClient() override;
  std::expected<void, std::string> send(const Bytes& m) override;
  std::expected<Bytes, std::string> recv() override;
  std::string finish() override;

 private:
  TcpClient() = default;
  int fd_ = -1;
  ServerShared shared_;
  std::thread thread_;
};

}  // namespace iwarp::bench
