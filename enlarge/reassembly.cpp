#include "enlarge/reassembly.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace iwarp::enlarge {

std::expected<bool, std::string> Reassembly::add(std::uint32_t seq, std::uint32_t total,
                                                 std::uint32_t offset, ByteSpan data) {
  if (!partial_) {
    if (seq != next_seq_)
      return std::unexpected(fmt::format("message seq {} where {} was next", seq, next_seq_));
    if (offset != 0)
      return std::unexpected(fmt::format("message seq {} starts at offset {}", seq, offset));
    if (total > max_message_)
      return std::unexpected(fmt::format("message seq {} of {} bytes: this side takes at most {}",
                                         seq, total, max_message_));
    partial_ = Partial{};
    partial_->seq = seq;
    partial_->total = total;
    // Grows with the data that arrives, so an announced total alone allocates little.
    partial_->data.reserve(std::min<std::uint32_t>(total, 1u << 20));
  } else if (partial_->seq != seq || partial_->total != total || offset != partial_->got) {
    return std::unexpected(fmt::format(
        "part of seq {} (total {}, offset {}) while seq {} (total {}) expects offset {}", seq,
        total, offset, partial_->seq, partial_->total, partial_->got));
  }
  // Parts arrive at exactly the next offset (checked above), so they append.
  partial_->data.insert(partial_->data.end(), data.begin(), data.end());
  partial_->got += static_cast<std::uint32_t>(data.size());
  if (partial_->got != total) return false;
  complete_.push_back(Received{partial_->seq, std::move(partial_->data)});
  partial_.reset();
  next_seq_++;
  return true;
}

std::optional<Received> Reassembly::pop() {
  if (complete_.empty()) return std::nullopt;
  Received r = std::move(complete_.front());
  complete_.pop_front();
  return r;
}

}  // namespace iwarp::enlarge
