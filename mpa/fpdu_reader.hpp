// The receive side of one MPA direction in Full Operation (RFC 5044 §4-§6), sans I/O and built
// for direct placement: the reader hands the upper layer the first octets of each ULPDU (enough
// for any DDP/RDMAP header), the upper layer answers where the rest of the ULPDU belongs, and the
// reader then moves payload octets straight there: from a fed buffer, or (direct_window()) by
// letting the transport read the socket into the target memory itself. Markers are removed and
// checked on the way, and the CRC is computed over exactly the octets RFC 5044 §6.2 names.
#pragma once

#include <cstdint>
#include <optional>

#include "common/bytes.hpp"
#include "common/wire_error.hpp"
#include "mpa/crc32c.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/stream_decoder.hpp"

namespace iwarp::mpa {

// Octets of a ULPDU handed over before placement: an untagged DDP header (18) plus the largest
// RDMAP body (Atomic Request, 52), rounded up.
inline constexpr std::size_t kFpduHeadSize = 72;

struct FpduHead {
  std::uint64_t offset = 0;  // stream offset of the FPDU (from the start of Full Operation)
  std::uint16_t ulpdu_length = 0;
  ByteSpan head;  // the first min(ulpdu_length, kFpduHeadSize) octets of the ULPDU
};

struct FpduTrailer {
  std::uint64_t offset = 0;
  std::uint32_t wire_length = 0;
  CrcStatus crc = CrcStatus::NotChecked;
  std::uint32_t crc_received = 0, crc_computed = 0;
};

class FpduSink {
 public:
  virtual ~FpduSink() = default;
  // A new FPDU. Returns where the remaining ulpdu_length - head.size() octets go: a span of
  // exactly that size, or an empty span to discard them (they still count for the CRC).
  virtual MutableByteSpan on_fpdu_head(const FpduHead& h) = 0;
  // The FPDU's pad and CRC have arrived. With a bad CRC the reader has stopped.
  virtual void on_fpdu_end(const FpduTrailer& t) = 0;
  // Framing lost (marker mismatch) or the CRC failed; the reader has stopped.
  virtual void on_framing_error(const WireError& e) = 0;
};

class FpduReader {
 public:
  explicit FpduReader(FramingConfig cfg) : cfg_(cfg) {}

  // Consumes every octet of `in` (unless the reader stops on an error).
  void feed(ByteSpan in, FpduSink& sink);

  // Where the transport may read raw stream octets directly: the next run of placed payload up
  // to the end of the ULPDU or the next marker. Empty unless the reader is in such a run.
  MutableByteSpan direct_window() const;
  // `n` octets were read into direct_window().
  void commit_direct(std::size_t n, FpduSink& sink);

  // The in-order point reached an FPDU already placed from beyond a TCP hole (see
  // SegmentReceiver): its `wire_length` octets count for the stream position and the markers
  // but are not read again. False, and nothing changes, unless the reader stands between FPDUs
  // exactly at `offset`.
  bool skip_fpdu(std::uint64_t offset, std::uint32_t wire_length);

  // The memory the rest of the current ULPDU was to go to is no longer the reader's to write
  // (its receive WR was flushed, its region deregistered): the rest is read and discarded (it
  // still counts for the CRC and the markers). True when a destination was dropped.
  bool drop_destination();
  // The span the rest of the current ULPDU goes to (empty between FPDUs or when discarding).
  MutableByteSpan destination() const { return state_ == State::Rest ? dest_ : MutableByteSpan{}; }

  bool failed() const { return state_ == State::Failed; }
  std::uint64_t position() const { return pos_; }
  std::uint64_t fpdus() const { return fpdus_; }
  const FramingConfig& config() const { return cfg_; }

 private:
  enum class State : std::uint8_t { Length, Head, Rest, Trailer, Failed };

  // Collects (part of) the marker due at pos_; returns octets consumed from `in`.
  bool at_marker() const { return cfg_.markers && is_marker_position(pos_); }
  std::size_t take_marker(ByteSpan in, FpduSink& sink);
  void begin_fpdu();
  void advance(ByteSpan wire);  // CRC and position over octets of the current FPDU
  void after_head(FpduSink& sink);
  void finish(FpduSink& sink);
  void fail(WireError e, FpduSink& sink);

  FramingConfig cfg_;
  State state_ = State::Length;
  std::uint64_t pos_ = 0;         // stream position (markers counted from 0)
  std::uint64_t fpdu_start_ = 0;  // position of the current FPDU's first octet
  bool in_fpdu_ = false;
  Crc32c crc_;
  std::uint8_t marker_[kMarkerSize]{};
  std::size_t marker_have_ = 0;
  std::uint8_t len_[kUlpduLengthSize]{};
  std::size_t len_have_ = 0;
  std::uint16_t ulpdu_len_ = 0;
  std::uint8_t head_[kFpduHeadSize]{};
  std::size_t head_need_ = 0, head_have_ = 0;
  MutableByteSpan dest_;  // placement target of the rest (empty: discard)
  std::size_t rest_need_ = 0, rest_have_ = 0;
  std::uint8_t trailer_[3 + kCrcSize]{};
  std::size_t trailer_need_ = 0, trailer_have_ = 0;
  std::uint64_t fpdus_ = 0;
};

}  // namespace iwarp::mpa
