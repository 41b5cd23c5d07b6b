// The registered memory of one connection: the small pre-registered buffer of receive and
// send slots, the enlarged buffers, and which of them each role uses now. A buffer no role
// names any more is retired and unregistered and freed once its last posted receive, Send or
// RDMA Write has completed. Every registration is charged to the options' budget.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "enlarge/options.hpp"
#include "enlarge/stats.hpp"
#include "verbs_shim/verbs.hpp"

namespace iwarp::enlarge {

class Buffers {
 public:
  struct Region {
    std::uint32_t rid = 0;
    std::unique_ptr<std::uint8_t[]> mem;
    std::size_t bytes = 0;
    // Two registrations of one allocation: the data area (remote write only on a receiver's
    // enlarged buffer) and the slots (local only), so an STag given to the peer never covers
    // posted receives or staged Sends.
    verbs::ibv_mr* data_mr = nullptr;
    verbs::ibv_mr* slot_mr = nullptr;
    std::size_t data_bytes = 0;  // bulk data area at the start
    std::uint32_t slots = 0;     // slot_size each, after the data area
    std::vector<std::uint32_t> free_slots;
    std::uint32_t busy = 0;         // slots posted or in flight, and RDMA Writes from it
    std::uint32_t recv_posted = 0;  // of those, receives posted (consumed only by messages)
    bool retired = false;           // no new use; freed once busy drops to 0
    bool small = false;             // the connection's original small buffer
    std::uint8_t* slot(std::uint32_t i) {
      return mem.get() + data_bytes + std::size_t{i} * slot_size;
    }
    std::uint32_t slot_size = 0;
  };

  Buffers(const Options& opts, Stats& stats) : opts_(opts), stats_(stats) {}
  void set_pd(verbs::ibv_pd* pd) { pd_ = pd; }

  // Each buffer registered or freed, in words (the connection's timeline).
  std::function<void(const std::string&)> on_event;
  // A buffer is retired with receives still posted in it: they complete only when the peer's
  // messages consume them (the connection asks the peer for that many).
  std::function<void(std::uint32_t posted)> on_retire_with_receives;

  // The buffer now used by each role (0: none).
  std::uint32_t rx_slots = 0;  // where receive slots are posted from
  std::uint32_t tx_slots = 0;  // where send slots are taken from
  std::uint32_t rx_bulk = 0;   // the enlarged receive buffer
  std::uint32_t tx_bulk = 0;   // the sender's own larger buffer

  Region* get(std::uint32_t rid);
  const Region* get(std::uint32_t rid) const;
  // Allocates and registers `data_bytes` of data area and `slots` slots; nullptr and `why`
  // when the budget or the registration refuses.
  Region* add(std::size_t data_bytes, std::uint32_t slots, bool remote_write, std::string* why);
  // A small buffer of the connection's receive and send slots.
  Region* add_small(std::string* why);
  // Unregisters and frees `r` once retired and no longer busy.
  void maybe_free(Region* r);
  // A buffer no role names any more is retired.
  void release_if_unused(std::uint32_t rid);
  // With free_small: the first enlarged buffer takes the slots from the small buffer.
  void adopt_slots(Region* n);
  // The slots live in `old`, which is going: moves them to another buffer.
  void relocate_slots_from(std::uint32_t old);
  // The enlarged buffer a role used is given up: slots move, and the buffer is retired.
  void drop_role(std::uint32_t* role);
  // `n` takes over `role` (rx_bulk or tx_bulk) and, with free_small, the slots; the buffer the
  // role named before is retired once unused. True when there was one.
  bool replace_role(std::uint32_t* role, Region* n);

  bool all_idle() const;  // nothing posted or in flight from any buffer
  void deregister_all();  // unregisters and frees everything, roles included
  bool small_registered() const;

  // Registrations made outside the buffers (a Rendezvous source registered in place).
  void count_registration(std::uint64_t bytes);
  void count_deregistration(std::uint64_t bytes) { registered_ -= bytes; }
  std::uint64_t registered() const { return registered_; }

 private:
  void retire(Region* r);
  void deregister(Region& r);
  void event(const std::string& what) {
    if (on_event) on_event(what);
  }

  const Options& opts_;
  Stats& stats_;
  verbs::ibv_pd* pd_ = nullptr;
  std::map<std::uint32_t, std::unique_ptr<Region>> regions_;
  std::uint32_t next_rid_ = 1;
  std::uint64_t registered_ = 0;
};

}  // namespace iwarp::enlarge
