// Both directions of one MPA connection, decoded passively (from a capture, a replay or a
// tap): pairs the Request with the Reply, derives each direction's framing from them
// (RFC 5044 §7.1) and then decodes FPDUs on both streams.
#pragma once

#include <array>
#include <optional>

#include "mpa/negotiation.hpp"
#include "mpa/stream_decoder.hpp"

namespace iwarp::mpa {

enum class Direction : std::uint8_t { FromInitiator = 0, FromResponder = 1 };
std::string_view to_string(Direction d);

class ConnectionVisitor {
 public:
  virtual ~ConnectionVisitor() = default;
  virtual void on_mpa_frame(Direction d, const MpaFrame& frame, std::uint64_t offset,
                            std::size_t length) = 0;
  // Both frames seen and accepted: the framing each way is now fixed.
  virtual void on_negotiated(const ConnectionParams& params) = 0;
  virtual void on_fpdu(Direction d, const Fpdu& fpdu) = 0;
  virtual void on_error(Direction d, const WireError& error) = 0;
};

class ConnectionDecoder {
 public:
  explicit ConnectionDecoder(StreamDecoderOptions opts = {});

  void feed(Direction d, ByteSpan data, ConnectionVisitor& v);

  const std::optional<MpaFrame>& request() const { return request_; }
  const std::optional<MpaFrame>& reply() const { return reply_; }
  const std::optional<ConnectionParams>& params() const { return params_; }
  const StreamDecoder& stream(Direction d) const { return streams_[static_cast<int>(d)]; }

 private:
  class Forwarder;
  void on_frame(Direction d, const MpaFrame& f, ConnectionVisitor& v);

  std::array<StreamDecoder, 2> streams_;
  std::optional<MpaFrame> request_, reply_;
  std::optional<ConnectionParams> params_;
};

}  // namespace iwarp::mpa
