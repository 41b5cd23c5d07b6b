// The emulated RNIC: one engine thread running a Boost.Asio event loop that does all transmit,
// receive and connection work for the device's queue pairs, plus the device's protection
// domains and memory regions. Applications talk to it from any thread; posting a work request
// rings a doorbell that wakes the engine.
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "rnic/memory.hpp"

namespace iwarp::rnic {

struct DeviceLimits {
  std::uint32_t max_qp_wr = 16384;
  std::uint32_t max_sge = 16;
  std::uint32_t max_inline_data = 256;
  std::uint32_t max_cqe = 1u << 20;
  std::uint16_t max_ird = 128;
  std::uint16_t max_ord = 128;
};

class Device {
 public:
  explicit Device(std::string name = "rnic0", std::uint64_t seed = 0);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::string& name() const { return name_; }
  boost::asio::io_context& io() { return io_; }
  MemoryTable& memory() { return memory_; }
  const DeviceLimits& limits() const { return limits_; }
  std::uint32_t next_qp_num() { return next_qp_num_++; }
  bool on_engine_thread() const { return std::this_thread::get_id() == engine_.get_id(); }

 private:
  std::string name_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  MemoryTable memory_;
  DeviceLimits limits_;
  std::atomic<std::uint32_t> next_qp_num_{1};
  std::thread engine_;
};

}  // namespace iwarp::rnic
