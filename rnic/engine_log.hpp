#pragma once
// The engine's logger (layer "rnic": --log rnic=debug), shared by the queue pair's sources.
#include "common/log.hpp"

namespace iwarp::rnic {

inline spdlog::logger& logger() {
  return log::layer("rnic");
}

}  // namespace iwarp::rnic
