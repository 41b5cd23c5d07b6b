// Shared by connection.cpp, connection_send.cpp and connection_receive.cpp only.
#pragma once

#include <cstdint>

#include "common/log.hpp"

namespace iwarp::enlarge::detail {

// A work request's wr_id: its kind in the top byte, then the buffer's id and the slot index
// (a Rendezvous Write carries the key of its registered source instead).
inline constexpr std::uint64_t kRecv = 1, kSend = 2, kWrite = 3, kRdvWrite = 4;
inline std::uint64_t make_wr_id(std::uint64_t kind, std::uint32_t rid, std::uint32_t slot) {
  return kind << 56 | std::uint64_t{rid} << 16 | slot;
}
inline std::uint64_t make_rdv_wr_id(std::uint64_t key) {
  return kRdvWrite << 56 | key;
}
inline std::uint64_t wr_kind(std::uint64_t id) {
  return id >> 56;
}
inline std::uint32_t wr_rid(std::uint64_t id) {
  return static_cast<std::uint32_t>((id >> 16) & 0xffffffffffULL);
}
inline std::uint32_t wr_slot(std::uint64_t id) {
  return static_cast<std::uint32_t>(id & 0xffff);
}
inline std::uint64_t wr_rdv_key(std::uint64_t id) {
  return id & ((1ULL << 56) - 1);
}

// The largest buffer a Rendezvous receiver registers for one message.
inline constexpr std::uint32_t kMaxRendezvous = 256u << 20;

inline spdlog::logger& lg() {
  return log::layer("enlarge");
}

}  // namespace iwarp::enlarge::detail
