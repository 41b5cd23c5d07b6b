// A receive WQE's buffer as the receive engine places into it: the WQE's SGEs resolved to local
// memory, addressed by message offset (RFC 5041 §5.3: the MO of an untagged segment counts
// from the start of the receive buffer, across its SGEs). Used both for Sends read in stream
// order (qp_rx.cpp) and for Sends placed beyond a TCP hole (qp_ooo.cpp).
#pragma once

#include <cstdint>
#include <optional>

#include <boost/container/small_vector.hpp>

#include "common/bytes.hpp"
#include "common/wire_error.hpp"
#include "rnic/memory.hpp"
#include "rnic/work_request.hpp"

namespace iwarp::rnic {

struct RecvBuffer {
  // Zero-length SGEs left out. Up to 4 kept inside (no allocation per message).
  boost::container::small_vector<MutableByteSpan, 4> sges;
  std::uint64_t capacity = 0;  // octets over all SGEs

  // The memory of [mo, mo + len) when one SGE holds all of it (the payload can be read there
  // directly), nullopt when it spans SGEs. (Inline: it runs for every Send segment.)
  std::optional<MutableByteSpan> contiguous(std::uint64_t mo, std::size_t len) const {
    std::uint64_t base = 0;
    for (auto sge : sges) {
      if (mo >= base && mo + len <= base + sge.size()) return sge.subspan(mo - base, len);
      base += sge.size();
    }
    return std::nullopt;
  }
  // Copies `src` into the buffer at message offset `mo`, across SGE boundaries. The range must
  // fit (check_fits).
  void scatter(std::uint64_t mo, ByteSpan src) const;
  // RFC 5041 §7.2: an untagged segment must lie inside the posted receive buffer (otherwise
  // the DDP error "message too long", and the WQE completes with a length error).
  Result<void> check_fits(std::uint64_t mo, std::size_t len, Msn msn, std::uint64_t wr_id) const {
    if (mo + len <= capacity) return {};
    return too_long(mo, len, msn, wr_id);
  }

 private:
  Result<void> too_long(std::uint64_t mo, std::size_t len, Msn msn, std::uint64_t wr_id) const;
};

// The error for a receive WQE whose SGE `lkey` is not writable local memory (`out` emptied).
Result<void> unusable_recv_buffer(const RecvWr& wr, STag lkey, RecvBuffer& out);

// Resolves the SGEs of receive WQE `wr` into `out` (reusing its storage) as memory the QP may
// write (RFC 5041 §7.2: a buffer that is not usable is a local error; `out` is then empty).
// Inline: it runs for every Send.
inline Result<void> resolve_recv_buffer(const MemoryTable& mem, PdHandle pd, const RecvWr& wr,
                                        RecvBuffer& out) {
  out.sges.clear();
  out.capacity = 0;
  for (const auto& sge : wr.sg_list) {
    if (sge.length == 0) continue;
    auto p = mem.check_local(sge.lkey, pd, sge.addr, sge.length, kLocalWrite);
    if (!p) return unusable_recv_buffer(wr, sge.lkey, out);
    out.sges.emplace_back(*p, sge.length);
    out.capacity += sge.length;
  }
  return {};
}

}  // namespace iwarp::rnic
