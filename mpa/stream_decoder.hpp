// Incremental, sans-I/O decoder for one direction of an MPA stream (RFC 5044). Feed it bytes in
// any chunking; it reports the MPA Request/Reply frame, then each FPDU (markers removed, CRC
// checked), or the first error, identically however the bytes were cut.
#pragma once

#include <cstdint>
#include <optional>

#include "common/bytes.hpp"
#include "common/wire_error.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/mpa_frame.hpp"

namespace iwarp::mpa {

enum class CrcStatus : std::uint8_t { NotChecked, Good, Bad };
std::string_view to_string(CrcStatus s);

struct Fpdu {
  std::uint64_t offset = 0;       // stream offset of the FPDU's first octet (a leading marker's)
  std::uint32_t wire_length = 0;  // octets on the wire including markers, pad and CRC
  std::uint16_t ulpdu_length = 0;
  ByteSpan ulpdu;                  // the DDP segment, markers removed; valid during the callback
  std::uint32_t crc_received = 0;  // CRC field value (read least significant octet first)
  std::uint32_t crc_computed = 0;
  CrcStatus crc = CrcStatus::NotChecked;
  std::uint16_t markers = 0;  // markers removed from this FPDU
};

class StreamVisitor {
 public:
  virtual ~StreamVisitor() = default;
  virtual void on_mpa_frame(const MpaFrame& frame, std::uint64_t offset, std::size_t length) = 0;
  virtual void on_fpdu(const Fpdu& fpdu) = 0;
  virtual void on_error(const WireError& error) = 0;
};

struct StreamDecoderOptions {
  // Report FPDUs with a bad CRC and go on (for inspection tools) instead of stopping with
  // Errc::MpaCrcError as a receiver must (RFC 5044 §6.2).
  bool continue_after_bad_crc = false;
  // Octets to hold while the framing is not yet known (the Reply not yet seen).
  std::size_t max_pending = 1u << 20;
};

class StreamDecoder {
 public:
  enum class State : std::uint8_t { ExpectFrame, AwaitFraming, Fpdus, Closed, Failed };

  // A stream that starts with an MPA frame of kind `first`.
  explicit StreamDecoder(FrameKind first, StreamDecoderOptions opts = {});
  // A stream already in Full Operation with known framing (markers counted from octet 0).
  explicit StreamDecoder(FramingConfig framing, StreamDecoderOptions opts = {});

  // Fixes this direction's framing after the MPA exchange; Full Operation (and the marker
  // phase) starts right after the frame. Buffered octets are decoded on the next feed().
  void set_framing(FramingConfig framing);
  // After a rejecting Reply no FPDU may follow on this stream.
  void close();

  void feed(ByteSpan data, StreamVisitor& v);

  State state() const { return state_; }
  std::uint64_t consumed() const { return consumed_; }  // octets fully decoded
  std::size_t pending() const { return pending_.size(); }
  const std::optional<FramingConfig>& framing() const { return framing_; }
  std::uint64_t full_operation_start() const { return origin_; }

 private:
  // Decodes one unit at the start of `in`; returns octets consumed, 0 if more are needed.
  std::size_t step(ByteSpan in, StreamVisitor& v);
  std::size_t step_frame(ByteSpan in, StreamVisitor& v);
  std::size_t step_fpdu(ByteSpan in, StreamVisitor& v);
  void fail_with(WireError e, StreamVisitor& v);
  std::size_t drain(ByteSpan in, StreamVisitor& v);

  StreamDecoderOptions opts_;
  State state_;
  FrameKind first_kind_ = FrameKind::Request;
  std::optional<FramingConfig> framing_;
  std::uint64_t consumed_ = 0;  // stream offset of pending_[0]
  std::uint64_t origin_ = 0;    // stream offset where Full Operation starts
  Bytes pending_;
  Bytes scratch_;  // ULPDU with markers removed
};

}  // namespace iwarp::mpa
