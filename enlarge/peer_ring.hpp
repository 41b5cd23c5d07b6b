// The sender's view of the receiver's enlarged buffer: a ring of written chunks that await the
// receiver's Ready (oldest first). Chunks go at successive offsets and each Ready frees the
// oldest, so several RDMA Writes can be in flight at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

namespace iwarp::enlarge {

class PeerRing {
 public:
  // Where a chunk of `n` bytes goes in the peer's buffer of `size` bytes, if it fits now: after
  // the newest chunk, or at the start when the end is too short and the start is free.
  bool place(std::size_t n, std::size_t size, std::uint32_t* at) const {
    if (chunks_.empty()) {
      *at = 0;
      return n <= size;
    }
    const std::size_t oldest = chunks_.front().at;
    if (head_ > oldest) {  // free: [head, size) and [0, oldest)
      if (head_ + n <= size) {
        *at = head_;
        return true;
      }
      *at = 0;
      return n <= oldest;
    }
    *at = head_;  // wrapped: free [head, oldest)
    return head_ + n <= oldest;
  }
  void push(std::uint32_t at, std::uint32_t len) {
    chunks_.push_back(Chunk{at, len});
    head_ = at + len;
  }
  // A Ready for the `n` oldest chunks; false when fewer are unanswered.
  bool answer(std::size_t n) {
    if (n > chunks_.size()) return false;
    chunks_.erase(chunks_.begin(), chunks_.begin() + static_cast<std::ptrdiff_t>(n));
    return true;
  }
  // A new peer buffer: writing starts at its beginning.
  void restart() { head_ = 0; }
  bool empty() const { return chunks_.empty(); }
  std::size_t unanswered() const { return chunks_.size(); }

 private:
  struct Chunk {
    std::uint32_t at = 0, len = 0;
  };
  std::deque<Chunk> chunks_;
  std::uint32_t head_ = 0;  // where the newest chunk ends
};

}  // namespace iwarp::enlarge
