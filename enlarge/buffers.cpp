#include "enlarge/buffers.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace iwarp::enlarge {

using namespace iwarp::verbs;

Buffers::Region* Buffers::get(std::uint32_t rid) {
  auto it = regions_.find(rid);
  return it == regions_.end() ? nullptr : it->second.get();
}

const Buffers::Region* Buffers::get(std::uint32_t rid) const {
  auto it = regions_.find(rid);
  return it == regions_.end() ? nullptr : it->second.get();
}

Buffers::Region* Buffers::add(std::size_t data_bytes, std::uint32_t slots, bool remote_write,
                              std::string* why) {
  const std::size_t bytes = data_bytes + std::size_t{slots} * opts_.slot_size;
  if (opts_.budget && !opts_.budget->try_charge(bytes)) {
    *why = fmt::format("registering {} bytes would pass the budget ({} of {} used)", bytes,
                       opts_.budget->used(), opts_.budget->limit());
    return nullptr;
  }
  auto r = std::make_unique<Region>();
  r->rid = next_rid_++;
  r->mem = std::make_unique_for_overwrite<std::uint8_t[]>(bytes);
  r->bytes = bytes;
  r->data_bytes = data_bytes;
  r->slots = slots;
  r->slot_size = opts_.slot_size;
  // A receiver's enlarged buffer takes the peer's RDMA Writes; everything else is local.
  if (data_bytes)
    r->data_mr = ibv_reg_mr(pd_, r->mem.get(), data_bytes,
                            IBV_ACCESS_LOCAL_WRITE | (remote_write ? IBV_ACCESS_REMOTE_WRITE : 0));
  if (slots)
    r->slot_mr =
        ibv_reg_mr(pd_, r->mem.get() + data_bytes, bytes - data_bytes, IBV_ACCESS_LOCAL_WRITE);
  if ((data_bytes && !r->data_mr) || (slots && !r->slot_mr)) {
    *why = fmt::format("ibv_reg_mr of {} bytes failed: {}", bytes, ibv_last_error());
    if (r->data_mr) ibv_dereg_mr(r->data_mr);
    if (r->slot_mr) ibv_dereg_mr(r->slot_mr);
    if (opts_.budget) opts_.budget->release(bytes);
    return nullptr;
  }
  for (std::uint32_t i = slots; i-- > 0;) r->free_slots.push_back(i);
  count_registration(bytes);
  auto* raw = r.get();
  regions_.emplace(raw->rid, std::move(r));
  return raw;
}

Buffers::Region* Buffers::add_small(std::string* why) {
  auto* s = add(0, opts_.recv_slots + opts_.send_slots, false, why);
  if (s) s->small = true;
  return s;
}

void Buffers::count_registration(std::uint64_t bytes) {
  registered_ += bytes;
  stats_.registrations++;
  stats_.peak_registered = std::max(stats_.peak_registered, registered_);
}

void Buffers::retire(Region* r) {
  r->retired = true;
  // Posted receives cannot be taken back: they complete only as the peer's messages consume
  // them (receives complete in the order they were posted).
  if (r->recv_posted > 0 && on_retire_with_receives) on_retire_with_receives(r->recv_posted);
  maybe_free(r);
}

void Buffers::deregister(Region& r) {
  if (r.data_mr) ibv_dereg_mr(r.data_mr);
  if (r.slot_mr) ibv_dereg_mr(r.slot_mr);
  r.data_mr = r.slot_mr = nullptr;
  if (opts_.budget) opts_.budget->release(r.bytes);
  registered_ -= r.bytes;
}

void Buffers::maybe_free(Region* r) {
  if (!r->retired || r->busy != 0) return;
  deregister(*r);
  stats_.deregistrations++;
  if (r->small) stats_.small_freed++;
  event(fmt::format("unregistered and freed the {} of {} bytes",
                    r->small ? "small buffer" : "enlarged buffer", r->bytes));
  regions_.erase(r->rid);
}

void Buffers::release_if_unused(std::uint32_t rid) {
  if (rid == 0 || rid == rx_slots || rid == tx_slots || rid == rx_bulk || rid == tx_bulk) return;
  if (auto* r = get(rid); r && !r->retired) retire(r);
}

// free_small: the first enlarged buffer takes the connection's slots, and the small buffer is
// unregistered and freed once its posted receives have completed.
void Buffers::adopt_slots(Region* n) {
  if (!opts_.free_small || n->slots == 0) return;
  for (auto* role : {&rx_slots, &tx_slots}) {
    auto* cur = get(*role);
    if (cur && cur->small) {
      const std::uint32_t old = *role;
      *role = n->rid;
      release_if_unused(old);
    }
  }
}

bool Buffers::replace_role(std::uint32_t* role, Region* n) {
  const std::uint32_t old = *role;
  *role = n->rid;
  adopt_slots(n);
  if (!old) return false;
  relocate_slots_from(old);
  release_if_unused(old);
  return true;
}

// To another enlarged buffer that has slots, or to a new small buffer (an idle connection
// shrinks back).
void Buffers::relocate_slots_from(std::uint32_t old) {
  if (rx_slots != old && tx_slots != old) return;
  std::uint32_t target = 0;
  for (std::uint32_t rid : {rx_bulk, tx_bulk})
    if (rid && rid != old && get(rid)->slots > 0) target = rid;
  if (!target) {
    std::string why;
    auto* s = add_small(&why);
    if (!s) {
      event("keeps its slots in the enlarged buffer: " + why);
      return;
    }
    target = s->rid;
    event(fmt::format("registered a new small buffer of {} bytes", s->bytes));
  }
  if (rx_slots == old) rx_slots = target;
  if (tx_slots == old) tx_slots = target;
}

void Buffers::drop_role(std::uint32_t* role) {
  const std::uint32_t old = *role;
  *role = 0;
  relocate_slots_from(old);
  release_if_unused(old);
}

bool Buffers::all_idle() const {
  return std::ranges::all_of(regions_, [](const auto& kv) { return kv.second->busy == 0; });
}

void Buffers::deregister_all() {
  for (auto& [rid, r] : regions_) deregister(*r);
  regions_.clear();
  rx_slots = tx_slots = rx_bulk = tx_bulk = 0;
}

bool Buffers::small_registered() const {
  return std::ranges::any_of(regions_, [](const auto& kv) { return kv.second->small; });
}

}  // namespace iwarp::enlarge
