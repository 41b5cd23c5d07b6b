#include "rnic/device.hpp"

#include <random>

#include "common/log.hpp"

namespace iwarp::rnic {

Device::Device(std::string name, std::uint64_t seed)
    : name_(std::move(name)),
      work_(boost::asio::make_work_guard(io_)),
      memory_(seed ? seed : std::random_device{}()) {
  engine_ = std::thread([this] {
    try {
      io_.run();
    } catch (const std::exception& e) {
      log::layer("rnic").critical("{}: engine stopped by an exception: {}", name_, e.what());
    }
  });
}

Device::~Device() {
  work_.reset();
  io_.stop();
  if (engine_.joinable()) engine_.join();
}

}  // namespace iwarp::rnic
