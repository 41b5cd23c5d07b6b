#include "mpa/stream_decoder.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common/log.hpp"
#include "mpa/crc32c.hpp"

namespace iwarp::mpa {

namespace {
spdlog::logger& logger() {
  static spdlog::logger& l = log::layer("mpa");
  return l;
}
}  // namespace

std::string_view to_string(CrcStatus s) {
  switch (s) {
    case CrcStatus::NotChecked:
      return "absent";
    case CrcStatus::Good:
      return "good";
    case CrcStatus::Bad:
      return "bad";
  }
  return "?";
}

StreamDecoder::StreamDecoder(FrameKind first, StreamDecoderOptions opts)
    : opts_(opts), state_(State::ExpectFrame), first_kind_(first) {}

StreamDecoder::StreamDecoder(FramingConfig framing, StreamDecoderOptions opts)
    : opts_(opts), state_(State::Fpdus), framing_(framing) {}

void StreamDecoder::set_framing(FramingConfig framing) {
  framing_ = framing;
  if (state_ == State::AwaitFraming) state_ = State::Fpdus;
}

void StreamDecoder::close() {
  if (state_ == State::AwaitFraming || state_ == State::Fpdus) state_ = State::Closed;
}

void StreamDecoder::fail_with(WireError e, StreamVisitor& v) {
  logger().debug("stream failed at offset {}: {}", e.offset, e.to_string());
  state_ = State::Failed;
  v.on_error(e);
}

void StreamDecoder::feed(ByteSpan data, StreamVisitor& v) {
  if (state_ == State::Failed) return;
  if (pending_.empty()) {
    // Fast path: decode straight from the caller's buffer, keep only an incomplete tail.
    std::size_t used = drain(data, v);
    if (state_ != State::Failed)
      pending_.assign(data.begin() + static_cast<std::ptrdiff_t>(used), data.end());
  } else {
    pending_.insert(pending_.end(), data.begin(), data.end());
    std::size_t used = drain(pending_, v);
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(used));
  }
  if (state_ == State::Failed) {
    pending_.clear();
    return;
  }
  if (state_ == State::AwaitFraming && pending_.size() > opts_.max_pending) {
    fail_with(
        WireError{
            Errc::MpaBadReqRep, "RFC 5044 §7.1: FPDUs follow only a completed MPA exchange",
            fmt::format("{} octets arrived before the MPA framing was settled", pending_.size()),
            consumed_},
        v);
    pending_.clear();
  }
}

// Decodes as many whole units from `in` as possible; returns the octets used.
std::size_t StreamDecoder::drain(ByteSpan in, StreamVisitor& v) {
  std::size_t used = 0;
  while (state_ != State::Failed && used < in.size()) {
    std::size_t n = step(in.subspan(used), v);
    if (n == 0) break;
    used += n;
    consumed_ += n;
  }
  return used;
}

std::size_t StreamDecoder::step(ByteSpan in, StreamVisitor& v) {
  switch (state_) {
    case State::ExpectFrame:
      return step_frame(in, v);
    case State::Fpdus:
      return step_fpdu(in, v);
    case State::Closed:
      fail_with(
          WireError{Errc::MpaBadReqRep, "RFC 5044 §7.1: a rejected connection carries no FPDUs",
                    fmt::format("{} octets after a rejecting Reply", in.size()), consumed_},
          v);
      return 0;
    case State::AwaitFraming:
    case State::Failed:
      return 0;
  }
  return 0;
}

std::size_t StreamDecoder::step_frame(ByteSpan in, StreamVisitor& v) {
  const auto key = first_kind_ == FrameKind::Request ? kRequestKey : kReplyKey;
  // Reject a wrong key as soon as its octets are in, rather than wait for a whole header or,
  // once the header is in, for the PD_Length octets a frame that is no MPA frame claims (a
  // stream fed in one piece and in several must fail alike).
  for (std::size_t i = 0; i < in.size() && i < kKeySize; ++i)
    if (in[i] != static_cast<std::uint8_t>(key[i])) {
      const auto other = first_kind_ == FrameKind::Request ? kReplyKey : kRequestKey;
      const bool swapped =
          in.size() >= kKeySize && std::equal(other.begin(), other.end(), in.begin());
      fail_with(
          WireError{Errc::MpaBadReqRep, "RFC 5044 §7.1: frame must start with the MPA key",
                    swapped ? fmt::format("expected \"{}\", got \"{}\"", key, other)
                            : fmt::format("expected \"{}\", got {}", key, hex(in.first(i + 1))),
                    consumed_},
          v);
      return 0;
    }
  if (in.size() < kFrameHeaderSize) return 0;
  const std::size_t size = *frame_size_from_header(in);
  // An over-long PD_Length is reported at once (decode_frame checks it before the length).
  if (size - kFrameHeaderSize <= kMaxPrivateData && in.size() < size) return 0;
  auto r = decode_frame(in.first(std::min(size, in.size())), first_kind_);
  if (!r) {
    auto e = r.error();
    e.offset = consumed_;
    fail_with(e, v);
    return 0;
  }
  origin_ = consumed_ + size;
  if (r->reject)
    state_ = State::Closed;
  else
    state_ = framing_ ? State::Fpdus : State::AwaitFraming;
  // After the state, so that what the visitor decides on this frame (set_framing(), or close()
  // when the peer's Reply already rejected the connection) holds for the octets that follow.
  v.on_mpa_frame(*r, consumed_, size);
  return size;
}

std::size_t StreamDecoder::step_fpdu(ByteSpan in, StreamVisitor& v) {
  const FramingConfig cfg = *framing_;
  const std::uint64_t pos = consumed_ - origin_;  // position in Full Operation
  std::size_t hdr_at = 0;
  if (cfg.markers && is_marker_position(pos)) hdr_at = kMarkerSize;
  if (in.size() < hdr_at + kUlpduLengthSize) return 0;

  auto marker_error = [&](std::uint64_t at, std::string detail) {
    fail_with(WireError{Errc::MpaMarkerError,
                        "RFC 5044 §5: a marker's FPDUPTR points back to its FPDU's first octet",
                        std::move(detail), consumed_ + at},
              v);
    return std::size_t{0};
  };

  const std::uint16_t ulpdu_len = load_be16(in.data() + hdr_at);
  const std::size_t logical = fpdu_length(ulpdu_len);
  MarkedLength ml{logical, 0};
  if (cfg.markers) ml = marked_length(pos, logical);
  if (in.size() < ml.wire) return 0;

  ByteSpan wire = in.first(ml.wire);
  Fpdu f;
  f.offset = consumed_;
  f.wire_length = static_cast<std::uint32_t>(ml.wire);
  f.ulpdu_length = ulpdu_len;
  f.markers = static_cast<std::uint16_t>(ml.markers);

  if (!cfg.markers) {
    f.ulpdu = wire.subspan(kUlpduLengthSize, ulpdu_len);
  } else {
    // Walk the FPDU, check each marker and copy the rest out.
    scratch_.clear();
    scratch_.reserve(logical);
    std::uint64_t p = pos;
    std::size_t i = 0;
    while (i < ml.wire) {
      // Markers stand before every logical octet at a marker position (marked_length()).
      if (is_marker_position(p) && scratch_.size() < logical) {
        std::uint16_t rsvd = load_be16(wire.data() + i);
        std::uint16_t ptr = load_be16(wire.data() + i + 2);
        if (rsvd != 0)
          return marker_error(i, fmt::format("marker reserved field 0x{:04x}, must be 0", rsvd));
        if (ptr != i)
          return marker_error(
              i, fmt::format("FPDUPTR {} but the FPDU starts {} octets before", ptr, i));
        i += kMarkerSize;
        p += kMarkerSize;
        continue;
      }
      std::size_t run = std::min<std::size_t>(ml.wire - i, octets_to_next_marker(p));
      scratch_.insert(scratch_.end(), wire.begin() + static_cast<std::ptrdiff_t>(i),
                      wire.begin() + static_cast<std::ptrdiff_t>(i + run));
      i += run;
      p += run;
    }
    f.ulpdu = ByteSpan(scratch_).subspan(kUlpduLengthSize, ulpdu_len);
  }

  f.crc_received = load_le32(wire.data() + ml.wire - kCrcSize);
  if (cfg.crc) {
    f.crc_computed = crc32c(wire.first(ml.wire - kCrcSize));
    f.crc = f.crc_computed == f.crc_received ? CrcStatus::Good : CrcStatus::Bad;
    if (f.crc == CrcStatus::Bad && !opts_.continue_after_bad_crc) {
      fail_with(
          WireError{
              Errc::MpaCrcError,
              "RFC 5044 §6.2: the CRC must match the FPDU (length, ULPDU, pad, markers)",
              fmt::format("received 0x{:08x}, computed 0x{:08x}", f.crc_received, f.crc_computed),
              consumed_},
          v);
      return 0;
    }
  }
  logger().trace("FPDU @{} ulpdu {} wire {} crc {} markers {}", f.offset, f.ulpdu_length,
                 f.wire_length, to_string(f.crc), f.markers);
  v.on_fpdu(f);
  return ml.wire;
}

}  // namespace iwarp::mpa
