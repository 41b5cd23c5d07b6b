// A receive WQE's buffer as the receive engine places into it: the WQE's SGEs resolved to local
// memory, addressed by message offset (RFC 5041 §5.3: the MO of an untagged segment counts
// from the start of the receive buffer, across its SGEs). Used both for Sends read in stream
// order (qp_rx.cpp) and for Sends placed beyond a TCP hole (qp_ooo.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/bytes.hpp"
#include "common/wire_error.hpp"
#include "rnic/memory.hpp"
#include "rnic/work_request.hpp"

namespace iwarp::rnic {

struct RecvBuffer {
  std::vector<MutableByteSpan> sges;  // zero-length SGEs left out
  std::uint64_t capacity = 0;         // octets over all SGEs

  // The memory of [mo, mo + len) when one SGE holds all of it (the payload can be read there
  // directly), nullopt when it spans SGEs.
  std::optional<MutableByteSpan> contiguous(std::uint64_t mo, std::size_t len) const;
  // Copies `src` into the buffer at message offset `mo`, across SGE boundaries. The range must
  // fit (check_fits).
  void scatter(std::uint64_t mo, ByteSpan src) const;
  // RFC 5041 §7.2: an untagged segment must lie inside the posted receive buffer (otherwise
  // the DDP error "message too long", and the WQE completes with a length error).
  Result<void> check_fits(std::uint64_t mo, std::size_t len, Msn msn, std::uint64_t wr_id) const;
};

// Resolves the SGEs of receive WQE `wr` to memory the QP may write (RFC 5041 §7.2: a buffer
// that is not usable is a local error).
Result<RecvBuffer> resolve_recv_buffer(const MemoryTable& mem, PdHandle pd, const RecvWr& wr);

}  // namespace iwarp::rnic
