// RDMAP opcodes (RFC 5040 §4.2, RFC 7306 §4) and the table that drives header size, buffer
// model, queue number and delivery for each, like siw's iwarp_pktinfo[]: the receive engine
// dispatches on the message family and the delivery columns, never on the raw opcode.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace iwarp::rdmap {

enum class Opcode : std::uint8_t {
  Write = 0x0,
  ReadRequest = 0x1,
  ReadResponse = 0x2,
  Send = 0x3,
  SendInvalidate = 0x4,
  SendSe = 0x5,
  SendSeInvalidate = 0x6,
  Terminate = 0x7,
  ImmediateData = 0x8,    // RFC 7306 §4.3
  ImmediateDataSe = 0x9,  // RFC 7306 §4.3
  AtomicRequest = 0xA,    // RFC 7306 §4.2
  AtomicResponse = 0xB,   // RFC 7306 §4.2
};

inline constexpr std::uint8_t kMaxOpcode = 0xB;

// RFC 5040 §5.1 / RFC 7306 §8: the untagged DDP queues RDMAP uses.
inline constexpr std::uint32_t kQnSend = 0;        // Send family and Immediate Data
inline constexpr std::uint32_t kQnReadReq = 1;     // RDMA Read Request and Atomic Request
inline constexpr std::uint32_t kQnTerminate = 2;   // Terminate
inline constexpr std::uint32_t kQnAtomicResp = 3;  // Atomic Response
inline constexpr std::uint32_t kQueueCount = 4;

// The kind of RDMAP message an opcode belongs to: the variants of one message (Send, Send with
// SE, with Invalidate ...) share a family and are delivered by the same code.
enum class MessageFamily : std::uint8_t {
  Write,           // RFC 5040 §4.3: tagged, placed at the STag and TO, no local completion
  ReadRequest,     // RFC 5040 §4.4: queued for a Read Response
  ReadResponse,    // RFC 5040 §4.5: tagged, placed into the Read's sink, completes the Read WR
  Send,            // RFC 5040 §4.6 / §4.7: untagged, placed into a receive WQE at its MO
  Terminate,       // RFC 5040 §4.8
  ImmediateData,   // RFC 7306 §4.3: consumes a receive WQE, carries no payload
  AtomicRequest,   // RFC 7306 §4.2.1
  AtomicResponse,  // RFC 7306 §4.2.2
};

struct OpcodeInfo {
  Opcode opcode;
  std::string_view name;    // as tshark prints it where it knows the opcode
  bool tagged;              // tagged buffer model (RFC 5041 §4)
  std::uint32_t qn;         // untagged queue number (meaningless when tagged)
  std::uint16_t body_size;  // RDMAP header octets after the DDP header
  bool payload;             // carries ULP payload after the body
  bool single_segment;      // must be one DDP segment with L=1
  bool solicited;           // Solicited Event variant
  bool invalidate;          // carries an STag to invalidate in RsvdULP
  MessageFamily family;
};

// Table lookup; nullopt for opcodes no RFC defines.
const OpcodeInfo* opcode_info(std::uint8_t op);
std::string_view opcode_name(std::uint8_t op);

inline constexpr std::uint16_t kReadRequestBodySize = 28;     // RFC 5040 §4.4
inline constexpr std::uint16_t kAtomicRequestBodySize = 52;   // RFC 7306 §4.2.1
inline constexpr std::uint16_t kAtomicResponseBodySize = 12;  // RFC 7306 §4.2.2
inline constexpr std::uint16_t kImmediateDataSize = 8;        // RFC 7306 §4.3
inline constexpr std::uint16_t kTerminateControlSize = 4;     // RFC 5040 §4.8

}  // namespace iwarp::rdmap
