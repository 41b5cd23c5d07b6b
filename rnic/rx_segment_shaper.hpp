// How a live connection's received stream can be turned into TCP segments before the segment
// path sees them. Normally the octets a socket read delivers go in as one in-order segment; a
// shaper (a simulation, such as sim/impaired_wire.hpp) may cut them into other segments and
// present them later, twice or out of order. The receive engine places what arrives beyond a
// hole and holds its completions until the hole closes (qp_ooo.cpp), so a shaper exercises that
// path over a real connection.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "common/bytes.hpp"
#include "common/strong_types.hpp"
#include "mpa/fpdu_reader.hpp"

namespace iwarp::rnic {

// Where a shaper hands a segment: its first octet's sequence number and its octets.
using SegmentSink = std::function<void(TcpSeq seq, ByteSpan payload)>;

class RxSegmentShaper {
 public:
  virtual ~RxSegmentShaper() = default;
  // Octets read from the socket, in stream order; emits the segments due now (maybe none).
  virtual void push(ByteSpan data, const SegmentSink& out) = 0;
  // Emits everything still held back (the stream paused or ended).
  virtual void flush(const SegmentSink& out) = 0;
  // Whether a flush would emit something: the QP then flushes after a short pause.
  virtual bool holding() const = 0;
  // What the receive side goes through, for the log: e.g. "simulated impaired wire (...)".
  virtual std::string describe() const = 0;
};

// What a shaper needs to know of the connection it is made for.
struct RxShaperContext {
  mpa::FramingConfig framing;  // to find FPDU boundaries (RFC 5044 §8 segments start with one)
  std::size_t emss = 1448;     // the connection's effective MSS
  TcpSeq stream_start{0};      // sequence number of the first octet after the MPA frame
};

// Makes the shaper for one QP's receive side (called when the QP enters RTS).
using RxShaperFactory = std::function<std::unique_ptr<RxSegmentShaper>(const RxShaperContext&)>;

}  // namespace iwarp::rnic
