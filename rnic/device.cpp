#include "rnic/device.hpp"

#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
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
    engine_running_ = false;
  });
}

void Device::attach(std::weak_ptr<MemoryUser> user) {
  std::lock_guard l(users_mu_);
  std::erase_if(users_, [](const auto& w) { return w.expired(); });
  users_.push_back(std::move(user));
}

bool Device::revoke_now(STag stag) {
  auto r = memory_.take(stag);
  if (!r) return false;
  std::vector<std::shared_ptr<MemoryUser>> live;
  {
    std::lock_guard l(users_mu_);
    for (const auto& w : users_)
      if (auto u = w.lock()) live.push_back(std::move(u));
  }
  for (const auto& u : live) u->revoke(*r);
  return true;
}

bool Device::deregister(STag stag) {
  // On the engine thread (a callback) or once the engine has stopped, nothing else can be
  // touching the region: revoke at once.
  if (on_engine_thread() || !engine_running_) return revoke_now(stag);
  auto done = std::make_shared<std::promise<bool>>();
  auto result = done->get_future();
  boost::asio::post(io_, [this, stag, done] { done->set_value(revoke_now(stag)); });
  while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    // The engine stopped (device shutting down) before it ran the revocation: nothing runs
    // on it any more, so the region can go from here.
    if (!engine_running_) {
      if (result.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready) break;
      return revoke_now(stag);
    }
  }
  return result.get();
}

Device::~Device() {
  work_.reset();
  io_.stop();
  if (engine_.joinable()) engine_.join();
}

}  // namespace iwarp::rnic
