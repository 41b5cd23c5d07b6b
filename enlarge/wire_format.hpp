// The buffer-enlargement protocol's messages (seeds 000-002) as value types with explicit
// big-endian encode/decode. Every message travels as one RDMA Send into one of the peer's
// pre-registered receive slots; bulk data travels as an RDMA Write into the peer's enlarged
// buffer and is announced by a Done. The layout is documented in docs/enlarge.md.
//
// Common header (8 octets):
//   0  version (1)   1  type   2-3  credits returned (receive slots reposted since last said)
//   4-7  seq: the message sequence number the control message is about (0 when none)
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <variant>

#include "common/bytes.hpp"

namespace iwarp::enlarge {

inline constexpr std::uint8_t kVersion = 1;
inline constexpr std::size_t kHeaderBytes = 8;
// A Piece's fields after the header: total (4), offset (4); its data follows to the end.
inline constexpr std::size_t kPieceHeaderBytes = kHeaderBytes + 8;
// The largest control message (EnlargeAck), so a slot smaller than this cannot work.
inline constexpr std::size_t kMaxControlBytes = kHeaderBytes + 16;

enum class MsgType : std::uint8_t {
  Piece = 1,       // eager data copied into the pre-registered buffer (claims 000/3: below)
  EnlargeReq = 2,  // "provision a larger buffer for this connection" (000/2, 001/1)
  EnlargeAck = 3,  // provisioned: TO, STag and size of the buffer (000/16, 001/2, 001/21)
  EnlargeNak = 4,  // cannot allocate or register: send in pieces instead
  Done = 5,        // the RDMA Write of a bulk part is complete: copy it out (000/19)
  Ready = 6,       // Dones copied out: their part of the enlarged buffer may be written again
  Release = 7,     // the sender no longer uses the enlarged buffer: unregister and free it
  Credit = 8,      // receive slots reposted, with nothing else to carry the count
  Cycle = 9,       // "send me this many Credits": receives posted in a buffer being freed
                   // complete only when messages consume them
};
const char* to_string(MsgType t);

enum class NakReason : std::uint8_t { Budget = 1, Register = 2, TooLarge = 3 };
const char* to_string(NakReason r);

struct Piece {
  std::uint32_t total = 0;   // the whole message's length
  std::uint32_t offset = 0;  // where this piece's data goes in the message
  ByteSpan data;             // views the received slot (decode) or the source (encode)
};
struct EnlargeReq {
  std::uint32_t size = 0;  // bytes wanted
};
struct EnlargeAck {
  std::uint32_t size = 0;  // bytes provisioned
  std::uint32_t stag = 0;
  std::uint64_t to = 0;  // tagged offset of the buffer's first octet
};
struct EnlargeNak {
  NakReason reason = NakReason::Budget;
  std::uint32_t limit = 0;  // the most the receiver could provision now (0: nothing)
};
struct Done {
  std::uint32_t total = 0;   // the whole message's length
  std::uint32_t offset = 0;  // where the written bytes go in the message
  std::uint32_t length = 0;  // bytes written
  std::uint32_t at = 0;      // where in the enlarged buffer they were written
};
struct Ready {
  std::uint32_t count = 1;  // Dones copied out (the oldest first): their space is free again
};
struct Release {
  std::uint32_t stag = 0;
};
struct Credit {};
struct Cycle {
  std::uint32_t count = 0;
};

using Body =
    std::variant<Piece, EnlargeReq, EnlargeAck, EnlargeNak, Done, Ready, Release, Credit, Cycle>;

struct Message {
  std::uint16_t credits = 0;
  std::uint32_t seq = 0;
  Body body;
  MsgType type() const;
};

// Bytes `m` takes on the wire.
std::size_t encoded_size(const Message& m);
// Writes `m` into `out` (at least encoded_size(m) octets). Returns the octets written.
std::size_t encode(const Message& m, MutableByteSpan out);
Bytes encode(const Message& m);

// What was wrong with received bytes, in words that name the field and the offending value.
struct DecodeError {
  std::string what;
};
std::expected<Message, DecodeError> decode(ByteSpan wire);

// One line for logs and timelines: "Piece seq=3 total=70000 offset=0 len=1000 credits=2".
std::string describe(const Message& m);

}  // namespace iwarp::enlarge
