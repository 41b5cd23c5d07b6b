// The buffer-enlargement protocol's wire format as value types with explicit big-endian
// encode/decode: the hello each side puts in the MPA private data, then the messages. Every
// message travels as one RDMA Send into one of the peer's pre-registered receive slots; bulk
// data travels as an RDMA Write into the peer's enlarged buffer and is announced by a Done.
// The layout is documented in docs/enlarge.md.
//
// Common header (8 octets):
//   0  version (1)   1  type   2-3  credits returned (receive slots reposted since last said)
//   4-7  seq: the message sequence number the control message is about (0 when none)
// A Bundle packs several messages into one Send (one receive slot): records of a 2-octet
// length and a message, whose own credits are 0 (the Bundle's header carries them).
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <variant>
#include <vector>

#include "common/bytes.hpp"

namespace iwarp::enlarge {

// The message header's version: the layout of each message (unchanged by Bundles).
inline constexpr std::uint8_t kVersion = 1;
// The hello's version: 2 adds Bundle (several messages per Send); a version-1 peer would not
// understand one, so a hello of another version is refused.
inline constexpr std::uint8_t kHelloVersion = 2;
inline constexpr std::size_t kHeaderBytes = 8;
// A Piece's fields after the header: total (4), offset (4); its data follows to the end.
inline constexpr std::size_t kPieceHeaderBytes = kHeaderBytes + 8;
// The largest control message (EnlargeAck), so a slot smaller than this cannot work.
inline constexpr std::size_t kMaxControlBytes = kHeaderBytes + 16;

// How data above the threshold travels. Enlarge is the protocol; the other two are the
// schemes it is measured against (rnic enlarge-bench). Both sides announce it in the hello.
enum class Mode : std::uint8_t {
  Enlarge = 0,     // ask the receiver for a larger buffer, keep and reuse it
  Pieces = 1,      // never enlarge: everything in pre-registered-size pieces
  Rendezvous = 2,  // register per message: a buffer of the message's size, freed after it
};
const char* to_string(Mode m);

// The hello each side puts in the MPA private data (RFC 5044 §7.1; 12 octets: "ENLG",
// version, mode, slot size be32, receive slots be16), so each side knows how much the other's
// slots hold and how many credits it starts with.
struct Hello {
  std::uint32_t slot_size = 0;
  std::uint32_t recv_slots = 0;
  Mode mode = Mode::Enlarge;
};
inline constexpr std::size_t kHelloBytes = 12;
// The fewest receive slots a side posts: the sender keeps its last credit for a Credit
// message, and reposts are announced in batches of at least two (options and hellos are
// checked against it).
inline constexpr std::uint32_t kMinRecvSlots = 4;
Bytes encode_hello(const Hello& h);
// Checks the magic, version and mode, and that the announced slots can hold a control message
// and give the credits flow control needs; the error names the field.
std::expected<Hello, std::string> decode_hello(ByteSpan b);

enum class MsgType : std::uint8_t {
  Piece = 1,       // eager data at or below the threshold, copied into a send slot
  EnlargeReq = 2,  // "provision a larger buffer for this connection"
  EnlargeAck = 3,  // provisioned: TO, STag and size of the buffer
  EnlargeNak = 4,  // cannot allocate or register: send in pieces instead
  Done = 5,        // the RDMA Write of a bulk part is complete: copy it out
  Ready = 6,       // Dones copied out: their part of the enlarged buffer may be written again
  Release = 7,     // the sender no longer uses the enlarged buffer: unregister and free it
  Credit = 8,      // receive slots reposted, with nothing else to carry the count
  Cycle = 9,       // "send me this many Credits": receives posted in a buffer being freed
                   // complete only when messages consume them
  Bundle = 10,     // several of the above in one Send: what was queued when a slot was free
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
struct Message;
// Records after the header: be16 length, then a message of that length (not a Bundle, its
// credits 0). At least one record; the records fill the body exactly.
struct Bundle {
  std::vector<Message> messages;
};
// The octets a message adds to a Bundle: its 2-octet length and itself.
inline constexpr std::size_t kRecordLengthBytes = 2;
// The largest message a record holds (its length is 2 octets); a larger one (slots go up to
// 1 MiB) is a Send of its own.
inline constexpr std::size_t kMaxRecordBytes = 0xffff;

using Body = std::variant<Piece, EnlargeReq, EnlargeAck, EnlargeNak, Done, Ready, Release, Credit,
                          Cycle, Bundle>;

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
