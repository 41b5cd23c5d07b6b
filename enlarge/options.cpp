#include "enlarge/options.hpp"

#include <fmt/format.h>

namespace iwarp::enlarge {

std::string validate(const Options& o) {
  if (o.slot_size < 64 || o.slot_size > (1u << 20))
    return fmt::format("slot size {} is outside 64 B-1 MiB (the protocol's sizes: 100-2,000)",
                       o.slot_size);
  if (o.recv_slots < kMinRecvSlots || o.recv_slots > 1024)
    return fmt::format("{} receive slots: 4-1024 (credits need at least 4)", o.recv_slots);
  if (o.send_slots < 2 || o.send_slots > 1024)
    return fmt::format("{} send slots: 2-1024", o.send_slots);
  if (o.min_enlarged == 0 || o.min_enlarged > o.max_enlarged)
    return fmt::format("enlarged sizes {}-{}: need 0 < min <= max", o.min_enlarged, o.max_enlarged);
  if (o.depth < 1 || o.depth > 64) return fmt::format("depth {}: 1-64", o.depth);
  if (o.free_small && o.mode != Mode::Enlarge)
    return "freeing the small buffer goes with the enlarge mode only";
  return "";
}

}  // namespace iwarp::enlarge
