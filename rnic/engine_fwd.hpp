// The engine's objects by name only, for headers that hold them through pointers (the verbs
// APIs' handles): whoever includes this does not compile the engine or Boost.Asio. The .cpp
// files that use them include rnic/device.hpp, rnic/queue_pair.hpp, rnic/connection_manager.hpp.
#pragma once

namespace iwarp::rnic {
class Device;              // rnic/device.hpp
class QueuePair;           // rnic/queue_pair.hpp
class SharedReceiveQueue;  // rnic/queue_pair.hpp
class WireTap;             // rnic/queue_pair.hpp
class CmId;                // rnic/connection_manager.hpp
struct TapInfo;            // rnic/connection_manager.hpp
}  // namespace iwarp::rnic
