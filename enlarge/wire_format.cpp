#include "enlarge/wire_format.hpp"

#include <fmt/format.h>

#include <cstring>

namespace iwarp::enlarge {

namespace {
constexpr std::uint8_t kHelloMagic[4] = {'E', 'N', 'L', 'G'};
}  // namespace

const char* to_string(Mode m) {
  switch (m) {
    case Mode::Enlarge:
      return "enlarge";
    case Mode::Pieces:
      return "pieces";
    case Mode::Rendezvous:
      return "rendezvous";
  }
  return "?";
}

const char* to_string(MsgType t) {
  switch (t) {
    case MsgType::Piece:
      return "Piece";
    case MsgType::EnlargeReq:
      return "EnlargeReq";
    case MsgType::EnlargeAck:
      return "EnlargeAck";
    case MsgType::EnlargeNak:
      return "EnlargeNak";
    case MsgType::Done:
      return "Done";
    case MsgType::Ready:
      return "Ready";
    case MsgType::Release:
      return "Release";
    case MsgType::Credit:
      return "Credit";
    case MsgType::Cycle:
      return "Cycle";
    case MsgType::Bundle:
      return "Bundle";
  }
  return "?";
}

const char* to_string(NakReason r) {
  switch (r) {
    case NakReason::Budget:
      return "registered-memory budget exhausted";
    case NakReason::Register:
      return "registration failed";
    case NakReason::TooLarge:
      return "larger than the receiver's maximum";
  }
  return "?";
}

MsgType Message::type() const {
  // The variant's alternatives are in MsgType order, starting at 1.
  return static_cast<MsgType>(body.index() + 1);
}

std::size_t encoded_size(const Message& m) {
  return std::visit(
      [](const auto& b) -> std::size_t {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, Piece>) return kPieceHeaderBytes + b.data.size();
        if constexpr (std::is_same_v<T, EnlargeReq>) return kHeaderBytes + 4;
        if constexpr (std::is_same_v<T, EnlargeAck>) return kHeaderBytes + 16;
        if constexpr (std::is_same_v<T, EnlargeNak>) return kHeaderBytes + 8;
        if constexpr (std::is_same_v<T, Done>) return kHeaderBytes + 16;
        if constexpr (std::is_same_v<T, Release> || std::is_same_v<T, Cycle> ||
                      std::is_same_v<T, Ready>)
          return kHeaderBytes + 4;
        if constexpr (std::is_same_v<T, Bundle>) {
          std::size_t n = kHeaderBytes;
          for (const auto& inner : b.messages) n += kRecordLengthBytes + encoded_size(inner);
          return n;
        }
        return kHeaderBytes;  // Ready, Credit
      },
      m.body);
}

std::size_t encode(const Message& m, MutableByteSpan out) {
  const std::size_t n = encoded_size(m);
  std::uint8_t* p = out.data();
  p[0] = kVersion;
  p[1] = static_cast<std::uint8_t>(m.type());
  store_be16(p + 2, m.credits);
  store_be32(p + 4, m.seq);
  p += kHeaderBytes;
  std::visit(
      [&](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, Piece>) {
          store_be32(p, b.total);
          store_be32(p + 4, b.offset);
          if (!b.data.empty()) std::memcpy(p + 8, b.data.data(), b.data.size());
        } else if constexpr (std::is_same_v<T, EnlargeReq>) {
          store_be32(p, b.size);
        } else if constexpr (std::is_same_v<T, EnlargeAck>) {
          store_be32(p, b.size);
          store_be32(p + 4, b.stag);
          store_be64(p + 8, b.to);
        } else if constexpr (std::is_same_v<T, EnlargeNak>) {
          p[0] = static_cast<std::uint8_t>(b.reason);
          p[1] = p[2] = p[3] = 0;
          store_be32(p + 4, b.limit);
        } else if constexpr (std::is_same_v<T, Done>) {
          store_be32(p, b.total);
          store_be32(p + 4, b.offset);
          store_be32(p + 8, b.length);
          store_be32(p + 12, b.at);
        } else if constexpr (std::is_same_v<T, Ready>) {
          store_be32(p, b.count);
        } else if constexpr (std::is_same_v<T, Release>) {
          store_be32(p, b.stag);
        } else if constexpr (std::is_same_v<T, Cycle>) {
          store_be32(p, b.count);
        } else if constexpr (std::is_same_v<T, Bundle>) {
          for (const auto& inner : b.messages) {
            const std::size_t len = encoded_size(inner);
            store_be16(p, static_cast<std::uint16_t>(len));
            encode(inner, MutableByteSpan(p + kRecordLengthBytes, len));
            p += kRecordLengthBytes + len;
          }
        }
      },
      m.body);
  return n;
}

Bytes encode(const Message& m) {
  Bytes out(encoded_size(m));
  encode(m, out);
  return out;
}

namespace {
// A Bundle's records: each a be16 length and a message of that length, filling the body.
std::expected<Message, DecodeError> decode_bundle(Message m, ByteSpan body) {
  auto fail = [](std::string w) { return std::unexpected(DecodeError{std::move(w)}); };
  Bundle b;
  std::size_t at = 0;
  while (at < body.size()) {
    const std::size_t off = kHeaderBytes + at;
    if (body.size() - at < kRecordLengthBytes)
      return fail(fmt::format("Bundle record at octet {} is cut inside its length", off));
    const std::size_t len = load_be16(body.data() + at);
    if (len > body.size() - at - kRecordLengthBytes)
      return fail(
          fmt::format("Bundle record at octet {} of {} octets runs past the end", off, len));
    auto inner = decode(body.subspan(at + kRecordLengthBytes, len));
    if (!inner) return fail(fmt::format("Bundle record at octet {}: {}", off, inner.error().what));
    if (inner->type() == MsgType::Bundle)
      return fail(fmt::format("Bundle record at octet {} is a Bundle", off));
    if (inner->credits != 0)
      return fail(fmt::format("Bundle record at octet {} returns {} credits (only the Bundle may)",
                              off, inner->credits));
    b.messages.push_back(std::move(*inner));
    at += kRecordLengthBytes + len;
  }
  if (b.messages.empty()) return fail("Bundle of no messages");
  m.body = std::move(b);
  return m;
}
}  // namespace

std::expected<Message, DecodeError> decode(ByteSpan wire) {
  auto fail = [](std::string w) { return std::unexpected(DecodeError{std::move(w)}); };
  if (wire.size() < kHeaderBytes)
    return fail(fmt::format("message of {} octets is shorter than the {}-octet header", wire.size(),
                            kHeaderBytes));
  ByteReader r(wire);
  const std::uint8_t version = r.u8();
  const std::uint8_t type = r.u8();
  Message m;
  m.credits = r.be16();
  m.seq = r.be32();
  if (version != kVersion)
    return fail(fmt::format("version {} at octet 0 (this side speaks {})", version, kVersion));
  // Fixed-size bodies must be exactly their size: trailing octets mean a framing mismatch.
  auto fixed = [&](std::size_t body) -> bool { return wire.size() == kHeaderBytes + body; };
  auto wrong_size = [&](const char* name, std::size_t body) {
    return fail(
        fmt::format("{} of {} octets (expected {})", name, wire.size(), kHeaderBytes + body));
  };
  switch (static_cast<MsgType>(type)) {
    case MsgType::Piece: {
      if (wire.size() < kPieceHeaderBytes) return wrong_size("Piece", 8);
      Piece p;
      p.total = r.be32();
      p.offset = r.be32();
      p.data = r.rest();
      if (std::uint64_t{p.offset} + p.data.size() > p.total)
        return fail(fmt::format("Piece offset {} + {} data octets runs past total {}", p.offset,
                                p.data.size(), p.total));
      m.body = p;
      return m;
    }
    case MsgType::EnlargeReq:
      if (!fixed(4)) return wrong_size("EnlargeReq", 4);
      m.body = EnlargeReq{r.be32()};
      if (std::get<EnlargeReq>(m.body).size == 0) return fail("EnlargeReq for 0 octets");
      return m;
    case MsgType::EnlargeAck: {
      if (!fixed(16)) return wrong_size("EnlargeAck", 16);
      EnlargeAck a;
      a.size = r.be32();
      a.stag = r.be32();
      a.to = r.be64();
      m.body = a;
      return m;
    }
    case MsgType::EnlargeNak: {
      if (!fixed(8)) return wrong_size("EnlargeNak", 8);
      const std::uint8_t reason = r.u8();
      const ByteSpan zero = r.bytes(3);
      if (reason < 1 || reason > 3)
        return fail(fmt::format("EnlargeNak reason {} at octet 8 is not 1-3", reason));
      // docs/enlarge.md: octets 9-11 are zero (a sender that sets them speaks another layout).
      if (zero[0] != 0 || zero[1] != 0 || zero[2] != 0)
        return fail(fmt::format("EnlargeNak octets 9-11 are {}, not zero", hex(zero)));
      m.body = EnlargeNak{static_cast<NakReason>(reason), r.be32()};
      return m;
    }
    case MsgType::Done: {
      if (!fixed(16)) return wrong_size("Done", 16);
      Done d;
      d.total = r.be32();
      d.offset = r.be32();
      d.length = r.be32();
      d.at = r.be32();
      if (std::uint64_t{d.offset} + d.length > d.total)
        return fail(fmt::format("Done offset {} + length {} runs past total {}", d.offset, d.length,
                                d.total));
      m.body = d;
      return m;
    }
    case MsgType::Ready:
      if (!fixed(4)) return wrong_size("Ready", 4);
      m.body = Ready{r.be32()};
      if (std::get<Ready>(m.body).count == 0) return fail("Ready for 0 Dones");
      return m;
    case MsgType::Release:
      if (!fixed(4)) return wrong_size("Release", 4);
      m.body = Release{r.be32()};
      return m;
    case MsgType::Credit:
      if (!fixed(0)) return wrong_size("Credit", 0);
      m.body = Credit{};
      return m;
    case MsgType::Cycle:
      if (!fixed(4)) return wrong_size("Cycle", 4);
      m.body = Cycle{r.be32()};
      return m;
    case MsgType::Bundle:
      return decode_bundle(std::move(m), wire.subspan(kHeaderBytes));
  }
  return fail(fmt::format("unknown message type {} at octet 1", type));
}

Bytes encode_hello(const Hello& h) {
  Bytes b(kHelloBytes, 0);
  std::memcpy(b.data(), kHelloMagic, 4);
  b[4] = kHelloVersion;
  b[5] = static_cast<std::uint8_t>(h.mode);
  store_be32(b.data() + 6, h.slot_size);
  store_be16(b.data() + 10, static_cast<std::uint16_t>(h.recv_slots));
  return b;
}

std::expected<Hello, std::string> decode_hello(ByteSpan b) {
  if (b.size() < kHelloBytes || std::memcmp(b.data(), kHelloMagic, 4) != 0)
    return std::unexpected(fmt::format(
        "private data of {} octets is not a buffer-enlargement hello (\"ENLG\" + 8 octets)",
        b.size()));
  ByteReader r(b);
  r.skip(sizeof kHelloMagic);  // checked above
  const std::uint8_t version = r.u8();
  const std::uint8_t mode = r.u8();
  if (version != kHelloVersion)
    return std::unexpected(
        fmt::format("hello version {} (this side speaks {})", version, kHelloVersion));
  if (mode > static_cast<std::uint8_t>(Mode::Rendezvous))
    return std::unexpected(fmt::format("hello mode {} is not 0-2", mode));
  Hello h;
  h.mode = static_cast<Mode>(mode);
  h.slot_size = r.be32();
  h.recv_slots = r.be16();
  // A slot must hold the largest control message and a Piece of at least one octet.
  if (h.slot_size < kPieceHeaderBytes + 1 || h.slot_size < kMaxControlBytes ||
      h.recv_slots < kMinRecvSlots)
    return std::unexpected(fmt::format("hello slot size {} / {} receive slots is too small",
                                       h.slot_size, h.recv_slots));
  return h;
}

std::string describe(const Message& m) {
  std::string body = std::visit(
      [](const auto& b) -> std::string {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, Piece>)
          return fmt::format(" total={} offset={} len={}", b.total, b.offset, b.data.size());
        if constexpr (std::is_same_v<T, EnlargeReq>) return fmt::format(" size={}", b.size);
        if constexpr (std::is_same_v<T, EnlargeAck>)
          return fmt::format(" size={} stag={:#010x} to={:#x}", b.size, b.stag, b.to);
        if constexpr (std::is_same_v<T, EnlargeNak>)
          return fmt::format(" reason=\"{}\" limit={}", to_string(b.reason), b.limit);
        if constexpr (std::is_same_v<T, Done>)
          return fmt::format(" total={} offset={} len={} at={}", b.total, b.offset, b.length, b.at);
        if constexpr (std::is_same_v<T, Ready>) return fmt::format(" count={}", b.count);
        if constexpr (std::is_same_v<T, Release>) return fmt::format(" stag={:#010x}", b.stag);
        if constexpr (std::is_same_v<T, Cycle>) return fmt::format(" count={}", b.count);
        if constexpr (std::is_same_v<T, Bundle>) {
          std::string s = fmt::format(" of {}:", b.messages.size());
          for (const auto& inner : b.messages) s += " [" + describe(inner) + "]";
          return s;
        }
        return "";
      },
      m.body);
  return fmt::format("{} seq={}{} credits={}", to_string(m.type()), m.seq, body, m.credits);
}

}  // namespace iwarp::enlarge
