#include "rnic/memory.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace iwarp::rnic {

MemoryTable::MemoryTable(std::uint64_t seed) : rng_(seed) {
  // Like siw: a random first index in [1, 0xFFFFFF], never STag 0.
  next_index_ = static_cast<std::uint32_t>(rng_() % 0xFFFFFE) + 1;
}

PdHandle MemoryTable::alloc_pd() {
  std::lock_guard l(mu_);
  return next_pd_++;
}

STag MemoryTable::register_region(PdHandle pd, void* addr, std::uint64_t length,
                                  std::uint64_t base_to, std::uint32_t access) {
  std::lock_guard l(mu_);
  std::uint32_t index;
  do {
    index = next_index_;
    next_index_ = next_index_ % 0xFFFFFF + 1;
  } while (by_index_.count(index));
  auto key = static_cast<std::uint8_t>(rng_());
  MemoryRegion mr;
  mr.stag = STag::make(index, key);
  mr.pd = pd;
  mr.addr = static_cast<std::uint8_t*>(addr);
  mr.length = length;
  mr.base_to = base_to;
  mr.access = access;
  by_index_[index] = mr;
  return mr.stag;
}

bool MemoryTable::register_region_at(STag stag, PdHandle pd, void* addr, std::uint64_t length,
                                     std::uint64_t base_to, std::uint32_t access) {
  std::lock_guard l(mu_);
  if (stag.index() == 0 || by_index_.count(stag.index())) return false;
  MemoryRegion mr;
  mr.stag = stag;
  mr.pd = pd;
  mr.addr = static_cast<std::uint8_t*>(addr);
  mr.length = length;
  mr.base_to = base_to;
  mr.access = access;
  by_index_[stag.index()] = mr;
  return true;
}

bool MemoryTable::deregister(STag stag) {
  std::lock_guard l(mu_);
  auto it = by_index_.find(stag.index());
  if (it == by_index_.end() || it->second.stag != stag) return false;
  by_index_.erase(it);
  return true;
}

std::optional<MemoryRegion> MemoryTable::take(STag stag) {
  std::lock_guard l(mu_);
  auto it = by_index_.find(stag.index());
  if (it == by_index_.end() || it->second.stag != stag) return std::nullopt;
  MemoryRegion r = it->second;
  by_index_.erase(it);
  return r;
}

bool MemoryTable::invalidate(STag stag, PdHandle pd) {
  std::lock_guard l(mu_);
  auto it = by_index_.find(stag.index());
  if (it == by_index_.end() || it->second.stag != stag || it->second.pd != pd) return false;
  it->second.valid = false;
  return true;
}

std::expected<std::uint8_t*, LocalFault> MemoryTable::check_local(STag lkey, PdHandle pd,
                                                                  std::uint64_t to,
                                                                  std::uint64_t len,
                                                                  std::uint32_t need) const {
  std::lock_guard l(mu_);
  auto it = by_index_.find(lkey.index());
  if (it == by_index_.end() || it->second.stag != lkey || !it->second.valid)
    return std::unexpected(LocalFault::InvalidStag);
  const auto& mr = it->second;
  if (mr.pd != pd) return std::unexpected(LocalFault::PdMismatch);
  if ((mr.access & need) != need) return std::unexpected(LocalFault::AccessRights);
  if (to < mr.base_to || len > mr.length || to - mr.base_to > mr.length - len)
    return std::unexpected(LocalFault::Bounds);
  return mr.addr + (to - mr.base_to);
}

Result<std::uint8_t*> MemoryTable::check_remote(STag stag, PdHandle pd, std::uint64_t to,
                                                std::uint64_t len, std::uint32_t need,
                                                bool layer_ddp) const {
  std::lock_guard l(mu_);
  auto it = by_index_.find(stag.index());
  // RFC 5041 §7.2 has no code for "access rights"; like siw we report it as invalid STag.
  if (it == by_index_.end() || it->second.stag != stag || !it->second.valid)
    return fail(layer_ddp ? Errc::DdpTaggedInvalidStag : Errc::RdmapInvalidStag,
                layer_ddp ? "RFC 5041 §7.2: a tagged segment must name a valid STag"
                          : "RFC 5040 §7.4.1: the STag must be valid",
                fmt::format("STag 0x{:08x}{}", stag.value(),
                            it == by_index_.end()     ? " is not registered"
                            : it->second.stag != stag ? " has a stale key"
                                                      : " was invalidated"));
  const auto& mr = it->second;
  if (mr.pd != pd)
    return fail(layer_ddp ? Errc::DdpTaggedStagNotAssociated : Errc::RdmapStagNotAssociated,
                layer_ddp ? "RFC 5041 §7.2: the STag must belong to this stream's PD"
                          : "RFC 5040 §7.4.1: the STag must be associated with this stream",
                fmt::format("STag 0x{:08x} is in another protection domain", stag.value()));
  if ((mr.access & need) != need)
    return fail(layer_ddp ? Errc::DdpTaggedInvalidStag : Errc::RdmapAccessRights,
                layer_ddp ? "RFC 5041 §7.2 (no access code): the STag must allow remote write"
                          : "RFC 5040 §7.4.1: the STag must grant the requested access",
                fmt::format("STag 0x{:08x} lacks {}", stag.value(),
                            need == kRemoteWrite  ? "REMOTE_WRITE"
                            : need == kRemoteRead ? "REMOTE_READ"
                                                  : "REMOTE_ATOMIC"));
  if (len > 0 && to > ~std::uint64_t{0} - (len - 1))
    return fail(layer_ddp ? Errc::DdpTaggedToWrap : Errc::RdmapToWrap,
                "RFC 5041 §7.2: TO + length must not wrap", fmt::format("TO 0x{:x} + {}", to, len));
  if (to < mr.base_to || len > mr.length || to - mr.base_to > mr.length - len)
    return fail(layer_ddp ? Errc::DdpTaggedBaseBounds : Errc::RdmapBaseBounds,
                "RFC 5041 §7.2 / RFC 5040 §7.4.1: the access must lie inside the region",
                fmt::format("[0x{:x}, +{}) outside [0x{:x}, +{})", to, len, mr.base_to, mr.length));
  return mr.addr + (to - mr.base_to);
}

std::size_t MemoryTable::regions() const {
  std::lock_guard l(mu_);
  return by_index_.size();
}

std::uint64_t MemoryTable::registered_bytes() const {
  std::lock_guard l(mu_);
  std::uint64_t n = 0;
  for (const auto& [i, mr] : by_index_) n += mr.length;
  return n;
}

std::vector<MemoryRegion> MemoryTable::list() const {
  std::vector<MemoryRegion> out;
  {
    std::lock_guard l(mu_);
    out.reserve(by_index_.size());
    for (const auto& [i, mr] : by_index_) out.push_back(mr);
  }
  std::ranges::sort(out, {}, [](const MemoryRegion& r) { return r.stag.value() >> 8; });
  return out;
}

}  // namespace iwarp::rnic
