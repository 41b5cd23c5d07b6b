// Protection domains, memory regions and STags (RFC 5040 §2.1, §5.2; RFC 5041 §5.2).
// An STag is a 24-bit index plus an 8-bit key; the index starts at a random point and keys are
// random, so a peer cannot guess a valid STag. Every local SGE and every remote access is
// checked against validity, protection domain, access rights and bounds, in that order (as
// siw's siw_check_mem does), and each failure maps to the Terminate code RFC 5040/5041 give.
#pragma once

#include <cstdint>
#include <expected>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "common/strong_types.hpp"
#include "common/wire_error.hpp"

namespace iwarp::rnic {

// Access flags, numbered as ibv_access_flags.
enum Access : std::uint32_t {
  kLocalWrite = 1,
  kRemoteWrite = 2,
  kRemoteRead = 4,
  kRemoteAtomic = 8,
};

using PdHandle = std::uint32_t;

struct MemoryRegion {
  STag stag{0};
  PdHandle pd = 0;
  std::uint8_t* addr = nullptr;  // first octet of the registered range
  std::uint64_t length = 0;
  std::uint64_t base_to = 0;  // TO of addr (the virtual address, as verbs use it)
  std::uint32_t access = 0;
  bool valid = true;  // false after local or remote invalidation
};

// Why a local access failed (mapped to ibv_wc_status by the verbs layer).
enum class LocalFault : std::uint8_t { None, InvalidStag, PdMismatch, AccessRights, Bounds };

class MemoryTable {
 public:
  explicit MemoryTable(std::uint64_t seed = std::random_device{}());

  PdHandle alloc_pd();
  // Registers [addr, addr + length) with TO base `base_to`. Returns the STag.
  STag register_region(PdHandle pd, void* addr, std::uint64_t length, std::uint64_t base_to,
                       std::uint32_t access);
  // Registers at a given STag (replay: the STags a capture uses). False when its index is
  // taken.
  bool register_region_at(STag stag, PdHandle pd, void* addr, std::uint64_t length,
                          std::uint64_t base_to, std::uint32_t access);
  bool deregister(STag stag);
  // Removes the region and returns what it was (Device::deregister tells the engine).
  std::optional<MemoryRegion> take(STag stag);
  // Local Invalidate (and the receive side of Send with Invalidate). Fails for an unknown
  // STag, a key mismatch or another PD.
  bool invalidate(STag stag, PdHandle pd);

  // A local SGE: `need` is kLocalWrite for receive buffers and Read sinks, 0 for send data.
  std::expected<std::uint8_t*, LocalFault> check_local(STag lkey, PdHandle pd, std::uint64_t to,
                                                       std::uint64_t len, std::uint32_t need) const;

  // A remote access to [to, to + len): tagged placement (Write, Read Response: kRemoteWrite),
  // Read source (kRemoteRead), atomics (kRemoteAtomic). `layer_ddp` picks the DDP tagged codes
  // (placement of a tagged segment, RFC 5041 §7.2) or the RDMAP protection codes (RFC 5040
  // §7.4.1: Read Request source, atomics).
  Result<std::uint8_t*> check_remote(STag stag, PdHandle pd, std::uint64_t to, std::uint64_t len,
                                     std::uint32_t need, bool layer_ddp) const;

  std::size_t regions() const;
  std::uint64_t registered_bytes() const;
  // Every region registered now, by STag index (`rnic stat`).
  std::vector<MemoryRegion> list() const;

 private:
  mutable std::mutex mu_;
  std::mt19937_64 rng_;
  std::uint32_t next_index_;
  PdHandle next_pd_ = 1;
  std::unordered_map<std::uint32_t, MemoryRegion> by_index_;
};

}  // namespace iwarp::rnic
