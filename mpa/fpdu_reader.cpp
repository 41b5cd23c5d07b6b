#include "mpa/fpdu_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace iwarp::mpa {

void FpduReader::begin_fpdu() {
  in_fpdu_ = true;
  fpdu_start_ = pos_;
  crc_ = Crc32c{};
  len_have_ = 0;
}

void FpduReader::advance(ByteSpan wire) {
  if (cfg_.crc) crc_.update(wire);
  pos_ += wire.size();
}

void FpduReader::fail(WireError e, FpduSink& sink) {
  state_ = State::Failed;
  e.offset = fpdu_start_;
  sink.on_framing_error(e);
}

std::size_t FpduReader::take_marker(ByteSpan in, FpduSink& sink) {
  const std::size_t n = std::min(in.size(), kMarkerSize - marker_have_);
  std::memcpy(marker_ + marker_have_, in.data(), n);
  marker_have_ += n;
  if (cfg_.crc) crc_.update(in.first(n));
  pos_ += n;
  if (marker_have_ < kMarkerSize) return n;
  marker_have_ = 0;
  // RFC 5044 §5: Reserved(16) zero, FPDUPTR(16) = octets back to the FPDU's first octet.
  const std::uint64_t at = pos_ - kMarkerSize;
  const std::uint16_t rsvd = load_be16(marker_);
  const std::uint16_t ptr = load_be16(marker_ + 2);
  if (rsvd != 0 || ptr != at - fpdu_start_)
    fail(WireError{Errc::MpaMarkerError,
                   "RFC 5044 §5: a marker's FPDUPTR points back to its FPDU's first octet",
                   fmt::format("marker at stream offset {}: reserved 0x{:04x} FPDUPTR {}, "
                               "expected 0 and {}",
                               at, rsvd, ptr, at - fpdu_start_)},
         sink);
  return n;
}

MutableByteSpan FpduReader::direct_window() const {
  if (state_ != State::Rest || dest_.empty() || marker_have_ != 0) return {};
  std::size_t n = rest_need_ - rest_have_;
  if (cfg_.markers) {
    if (is_marker_position(pos_)) return {};
    n = std::min<std::size_t>(n, octets_to_next_marker(pos_));
  }
  return dest_.subspan(rest_have_, n);
}

bool FpduReader::drop_destination() {
  if (dest_.empty()) return false;
  dest_ = {};
  return true;
}

void FpduReader::commit_direct(std::size_t n, FpduSink& sink) {
  advance(ByteSpan(dest_.data() + rest_have_, n));
  rest_have_ += n;
  if (rest_have_ == rest_need_) {
    trailer_need_ = pad_length(ulpdu_len_) + kCrcSize;
    trailer_have_ = 0;
    state_ = State::Trailer;
  }
  (void)sink;
}

bool FpduReader::skip_fpdu(std::uint64_t offset, std::uint32_t wire_length) {
  if (state_ != State::Length || in_fpdu_ || marker_have_ != 0 || pos_ != offset) return false;
  pos_ += wire_length;
  ++fpdus_;
  return true;
}

void FpduReader::after_head(FpduSink& sink) {
  FpduHead h{fpdu_start_, ulpdu_len_, ByteSpan(head_, head_have_)};
  rest_need_ = ulpdu_len_ - head_have_;
  rest_have_ = 0;
  dest_ = sink.on_fpdu_head(h);
  if (!dest_.empty() && dest_.size() != rest_need_) dest_ = {};
  if (rest_need_ > 0) {
    state_ = State::Rest;
  } else {
    trailer_need_ = pad_length(ulpdu_len_) + kCrcSize;
    trailer_have_ = 0;
    state_ = State::Trailer;
  }
}

void FpduReader::finish(FpduSink& sink) {
  const std::size_t pad = trailer_need_ - kCrcSize;
  FpduTrailer t;
  t.offset = fpdu_start_;
  t.wire_length = static_cast<std::uint32_t>(pos_ - fpdu_start_);
  t.crc_received = load_le32(trailer_ + pad);
  if (cfg_.crc) {
    t.crc_computed = crc_.value();
    t.crc = t.crc_received == t.crc_computed ? CrcStatus::Good : CrcStatus::Bad;
  }
  in_fpdu_ = false;
  state_ = State::Length;
  ++fpdus_;
  sink.on_fpdu_end(t);
  if (t.crc == CrcStatus::Bad)
    fail(WireError{Errc::MpaCrcError,
                   "RFC 5044 §6.2: the CRC must match the FPDU (length, ULPDU, pad, markers)",
                   fmt::format("FPDU at stream offset {}: CRC 0x{:08x}, computed 0x{:08x}",
                               t.offset, t.crc_received, t.crc_computed)},
         sink);
}

void FpduReader::feed(ByteSpan in, FpduSink& sink) {
  while (!in.empty() && state_ != State::Failed) {
    if (!in_fpdu_) begin_fpdu();
    // RFC 5044 §5: a marker stands before any octet of the FPDU that falls at a marker
    // position, except inside the CRC (FPDUs and markers are 4-octet aligned, so never there).
    const bool in_crc = state_ == State::Trailer && trailer_have_ + kCrcSize > trailer_need_;
    if (marker_have_ != 0 || (at_marker() && !in_crc)) {
      in = in.subspan(take_marker(in, sink));
      continue;
    }
    switch (state_) {
      case State::Length: {
        const std::size_t n = std::min(in.size(), kUlpduLengthSize - len_have_);
        std::memcpy(len_ + len_have_, in.data(), n);
        len_have_ += n;
        advance(in.first(n));
        in = in.subspan(n);
        if (len_have_ == kUlpduLengthSize) {
          ulpdu_len_ = load_be16(len_);
          head_need_ = std::min<std::size_t>(ulpdu_len_, kFpduHeadSize);
          head_have_ = 0;
          state_ = State::Head;
          if (head_need_ == 0) after_head(sink);
        }
        break;
      }
      case State::Head: {
        std::size_t n = std::min(in.size(), head_need_ - head_have_);
        if (cfg_.markers) n = std::min<std::size_t>(n, octets_to_next_marker(pos_));
        std::memcpy(head_ + head_have_, in.data(), n);
        head_have_ += n;
        advance(in.first(n));
        in = in.subspan(n);
        if (head_have_ == head_need_) after_head(sink);
        break;
      }
      case State::Rest: {
        std::size_t n = std::min(in.size(), rest_need_ - rest_have_);
        if (cfg_.markers) n = std::min<std::size_t>(n, octets_to_next_marker(pos_));
        if (!dest_.empty()) std::memcpy(dest_.data() + rest_have_, in.data(), n);
        rest_have_ += n;
        advance(in.first(n));
        in = in.subspan(n);
        if (rest_have_ == rest_need_) {
          trailer_need_ = pad_length(ulpdu_len_) + kCrcSize;
          trailer_have_ = 0;
          state_ = State::Trailer;
        }
        break;
      }
      case State::Trailer: {
        const std::size_t pad = trailer_need_ - kCrcSize;
        std::size_t n = std::min(in.size(), trailer_need_ - trailer_have_);
        if (trailer_have_ < pad) n = std::min(n, pad - trailer_have_);
        if (cfg_.markers && trailer_have_ < pad)
          n = std::min<std::size_t>(n, octets_to_next_marker(pos_));
        std::memcpy(trailer_ + trailer_have_, in.data(), n);
        // The CRC covers the pad but not itself.
        if (trailer_have_ < pad)
          advance(in.first(n));
        else
          pos_ += n;
        trailer_have_ += n;
        in = in.subspan(n);
        if (trailer_have_ == trailer_need_) finish(sink);
        break;
      }
      case State::Failed:
        return;
    }
  }
}

}  // namespace iwarp::mpa
