#include "rnic/recv_buffer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace iwarp::rnic {

std::optional<MutableByteSpan> RecvBuffer::contiguous(std::uint64_t mo, std::size_t len) const {
  std::uint64_t base = 0;
  for (auto sge : sges) {
    if (mo >= base && mo + len <= base + sge.size()) return sge.subspan(mo - base, len);
    base += sge.size();
  }
  return std::nullopt;
}

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

Result<void> RecvBuffer::check_fits(std::uint64_t mo, std::size_t len, Msn msn,
                                    std::uint64_t wr_id) const {
  if (mo + len <= capacity) return {};
  return fail(Errc::DdpUntaggedTooLong,
              "RFC 5041 §7.2: the message must fit the posted receive buffer",
              fmt::format("Send MSN {} needs at least {} octets, receive WR {} has {}", msn.value(),
                          mo + len, wr_id, capacity));
}

Result<RecvBuffer> resolve_recv_buffer(const MemoryTable& mem, PdHandle pd, const RecvWr& wr) {
  RecvBuffer b;
  for (const auto& sge : wr.sg_list) {
    if (sge.length == 0) continue;
    auto p = mem.check_local(sge.lkey, pd, sge.addr, sge.length, kLocalWrite);
    if (!p)
      return fail(Errc::DdpLocalCatastrophic, "RFC 5041 §7.2: the receive buffer must be usable",
                  fmt::format("receive WR {}: lkey 0x{:08x} is not writable local memory", wr.wr_id,
                              sge.lkey.value()));
    b.sges.emplace_back(*p, sge.length);
    b.capacity += sge.length;
  }
  return b;
}

}  // namespace iwarp::rnic
