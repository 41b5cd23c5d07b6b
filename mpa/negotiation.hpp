// The MPA connection-setup decision (RFC 5044 §7.1, RFC 6581): from each side's policy and the
// frames exchanged, the agreed connection parameters or the exact reason to reject/terminate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/wire_error.hpp"
#include "mpa/fpdu.hpp"
#include "mpa/mpa_frame.hpp"

namespace iwarp::mpa {

// RFC 5044 §7.1 C flag: if either side sets C, CRC is used in both directions.
enum class CrcPolicy : std::uint8_t {
  Required,  // send C=1: CRC is then on for the connection
  Optional,  // send C=0, follow the peer
  Off,       // send C=0 and refuse a peer that demands CRC (like siw's mpa_crc_strict)
};
// RFC 5044 §7.1 M flag: per direction; M in a frame asks the peer to send markers.
enum class MarkerPolicy : std::uint8_t {
  Required,  // send M=1 (receive markers) and send markers if asked
  Optional,  // send M=0, send markers if asked
  Off,       // send M=0 and refuse a peer that asks for markers (siw's behaviour)
};

std::string_view to_string(CrcPolicy p);
std::string_view to_string(MarkerPolicy p);

struct Policy {
  std::uint8_t revision = 2;  // highest MPA revision spoken (1 or 2)
  CrcPolicy crc = CrcPolicy::Optional;
  MarkerPolicy markers = MarkerPolicy::Off;
  std::uint16_t ird = 16;       // inbound RDMA Read queue depth we offer
  std::uint16_t ord = 16;       // outbound RDMA Reads we want outstanding
  bool peer_to_peer = false;    // RFC 6581 P2P: initiator sends an RTR; responder accepts one
  RtrMask rtr = kAllRtr;        // RTR message types supported
  bool strict_ird_ord = false;  // refuse (0x06) rather than lower ORD to the peer's IRD
};

struct ConnectionParams {
  std::uint8_t revision = 1;
  bool enhanced = false;
  bool crc = false;
  bool markers_to_responder = false;  // initiator -> responder stream carries markers
  bool markers_to_initiator = false;  // responder -> initiator stream carries markers
  // RFC 6581 §6: the final values each side uses (ORD never above the peer's IRD).
  std::uint16_t initiator_ird = 0, initiator_ord = 0;
  std::uint16_t responder_ird = 0, responder_ord = 0;
  bool peer_to_peer = false;
  RtrType rtr = RtrType::None;  // the one RTR message the initiator sends first

  FramingConfig framing_to_responder() const { return {crc, markers_to_responder}; }
  FramingConfig framing_to_initiator() const { return {crc, markers_to_initiator}; }
  friend bool operator==(const ConnectionParams&, const ConnectionParams&) = default;
};

// What became of a connection attempt as one side sees it.
struct Outcome {
  enum class Kind : std::uint8_t {
    Established,  // both agree on `params`
    Rejected,     // the responder answered R=1 (error says why when we decided it)
    Terminated,   // the initiator found the Reply unacceptable and must send Terminate
  };
  Kind kind = Kind::Established;
  ConnectionParams params;
  std::optional<WireError> error;
};
std::string_view to_string(Outcome::Kind k);

// Builds the initiator's MPA Request.
MpaFrame make_request(const Policy& initiator, ByteSpan private_data = {});

// The responder's decision on a Request: the Reply to send, and the outcome.
struct ResponderDecision {
  MpaFrame reply;
  Outcome outcome;
};
ResponderDecision respond(const Policy& responder, const MpaFrame& request,
                          ByteSpan private_data = {});

// A Reply that rejects on the ULP's behalf (rdma_reject) with private data.
MpaFrame make_reject(const MpaFrame& request, ByteSpan private_data = {});

// The initiator's verdict on the Reply it received.
Outcome finish_initiator(const Policy& initiator, const MpaFrame& request, const MpaFrame& reply);

// Framing each direction uses once both frames are known (used by passive decoders too):
// C from either frame; markers toward the sender of a frame whose M was set.
ConnectionParams params_from_frames(const MpaFrame& request, const MpaFrame& reply);

// Both sides' views of one exchange, for tests and `rnic negotiate`.
struct Negotiation {
  MpaFrame request;
  MpaFrame reply;
  Outcome responder;
  Outcome initiator;
};
Negotiation negotiate(const Policy& initiator, const Policy& responder);

std::string describe(const ConnectionParams& p);

}  // namespace iwarp::mpa
