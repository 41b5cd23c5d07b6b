#include "rnic/recv_buffer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace iwarp::rnic {

void RecvBuffer::scatter(std::uint64_t mo, ByteSpan src) const {
  std::uint64_t base = 0;
  for (auto sge : sges) {
    if (src.empty()) break;
    if (mo < base + sge.size()) {
      const std::size_t n = std::min<std::size_t>(src.size(), base + sge.size() - mo);
      std::memcpy(sge.data() + (mo - base), src.data(), n);
      src = src.subspan(n);
      mo += n;
    }
    base += sge.size();
  }
}

Result<void> RecvBuffer::too_long(std::uint64_t mo, std::size_t len, Msn msn,
                                  std::uint64_t wr_id) const {
  return fail(Errc::DdpUntaggedTooLong,
              "RFC 5041 §7.2: the message must fit the posted receive buffer",
              fmt::format("Send MSN {} needs at least {} octets, receive WR {} has {}", msn.value(),
                          mo + len, wr_id, capacity));
}

Result<void> unusable_recv_buffer(const RecvWr& wr, STag lkey, RecvBuffer& out) {
  out.sges.clear();
  out.capacity = 0;
  return fail(Errc::DdpLocalCatastrophic, "RFC 5041 §7.2: the receive buffer must be usable",
              fmt::format("receive WR {}: lkey 0x{:08x} is not writable local memory", wr.wr_id,
                          lkey.value()));
}

}  // namespace iwarp::rnic
