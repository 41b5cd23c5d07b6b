// Flow control of one connection: every message goes as one Send into one of the peer's
// posted receive slots, so the peer's posted slots are this side's credits. Credits come
// back in every message's header (and in a Credit message when nothing else goes); this side
// counts the slots it reposted and has not announced yet. Sends are staged in a fixed number
// of local send slots, which bounds the Sends in flight.
#pragma once

#include <algorithm>
#include <cstdint>

namespace iwarp::enlarge {

class Credits {
 public:
  explicit Credits(std::uint32_t send_slots = 0) : send_slots_(send_slots) {}

  // The peer's hello says how many receive slots it posted before the first message.
  void start(std::uint32_t peer_recv_slots) { peer_slots_ = peer_recv_slots; }
  // A received message returned `n` of the peer's slots. The peer returns only slots this
  // side's Sends consumed: more than are outstanding (sent and not returned) is refused
  // (false, nothing counted), or this side would send past the slots the peer posted.
  bool returned(std::uint32_t n) {
    if (n > outstanding_) return false;
    outstanding_ -= n;
    peer_slots_ += n;
    return true;
  }
  std::uint32_t outstanding() const { return outstanding_; }
  // The last credit is kept for a Credit message (one that returns credits), so two sides that
  // both ran out can always tell each other they reposted.
  bool allow(bool is_credit) const { return peer_slots_ >= (is_credit ? 1u : 2u); }
  std::uint32_t peer_slots() const { return peer_slots_; }

  // What the next message's header carries back (a 16-bit field).
  std::uint16_t to_carry() const {
    return static_cast<std::uint16_t>(std::min<std::uint32_t>(unannounced_, 0xffff));
  }
  // A Send that carried `carried` credits back was posted into one of the peer's slots.
  void sent(std::uint16_t carried) {
    reserve();
    carried_back(carried);
  }
  // A Send being filled takes one of the peer's slots now; the credits it carries back are
  // counted when it is posted (it carries all that are unannounced by then).
  void reserve() {
    peer_slots_--;
    outstanding_++;
  }
  void carried_back(std::uint16_t carried) { unannounced_ -= carried; }
  // This side reposted one of its receive slots.
  void reposted() { unannounced_++; }
  std::uint32_t unannounced() const { return unannounced_; }

  // Local send staging slots: at most `send_slots` Sends in flight, counted from when a Send
  // starts being filled (its slot is taken) until it completes or goes back unused.
  bool send_slot_free() const { return sends_in_flight_ < send_slots_; }
  void send_started() { sends_in_flight_++; }
  void send_completed() { sends_in_flight_--; }
  std::uint32_t sends_in_flight() const { return sends_in_flight_; }

 private:
  std::uint32_t send_slots_;
  std::uint32_t peer_slots_ = 0;   // receive slots the peer has posted for this side
  std::uint32_t outstanding_ = 0;  // of this side's Sends, those whose slots are not returned
  std::uint32_t unannounced_ = 0;  // this side's slots reposted since it last said so
  std::uint32_t sends_in_flight_ = 0;
};

}  // namespace iwarp::enlarge
