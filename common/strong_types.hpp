// Strong types for the protocol's numbers, so an STag can never be passed where a tagged offset
// or an MSN is expected, and sequence numbers compare with serial arithmetic.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>

namespace iwarp {

template <class Tag, class Rep>
class StrongValue {
 public:
  using rep = Rep;
  constexpr StrongValue() = default;
  constexpr explicit StrongValue(Rep v) : v_(v) {}
  constexpr Rep value() const { return v_; }
  friend constexpr bool operator==(StrongValue, StrongValue) = default;
  friend constexpr auto operator<=>(StrongValue, StrongValue) = default;

 private:
  Rep v_{};
};

// RFC 5040 §2.1 / RFC 5041 §3: a Steering Tag names a tagged buffer. Like siw we split it into
// a 24-bit index (upper bits) and an 8-bit key (lower bits) that changes on re-registration.
struct STagTag;
class STag : public StrongValue<STagTag, std::uint32_t> {
 public:
  using StrongValue::StrongValue;
  constexpr std::uint32_t index() const { return value() >> 8; }
  constexpr std::uint8_t key() const { return static_cast<std::uint8_t>(value() & 0xff); }
  static constexpr STag make(std::uint32_t index, std::uint8_t key) {
    return STag{(index << 8) | key};
  }
};

struct TaggedOffsetTag;
using TaggedOffset = StrongValue<TaggedOffsetTag, std::uint64_t>;  // RFC 5041 §5.2 TO
struct QueueNumberTag;
using QueueNumber = StrongValue<QueueNumberTag, std::uint32_t>;  // RFC 5041 §5.3 QN
struct MessageOffsetTag;
using MessageOffset = StrongValue<MessageOffsetTag, std::uint32_t>;  // RFC 5041 §5.3 MO

// RFC 5041 §5.3: the MSN starts at 1 on each queue and wraps modulo 2^32.
struct MsnTag;
class Msn : public StrongValue<MsnTag, std::uint32_t> {
 public:
  using StrongValue::StrongValue;
  constexpr Msn next() const { return Msn{value() + 1}; }
  // How many MSNs this one lies past `earlier`, modulo 2^32 (an MSN before `earlier` gives a
  // large number).
  constexpr std::uint32_t since(Msn earlier) const { return value() - earlier.value(); }
};

// A TCP sequence number with RFC 1982 serial-number comparison (RFC 793 §3.3).
class TcpSeq {
 public:
  constexpr TcpSeq() = default;
  constexpr explicit TcpSeq(std::uint32_t v) : v_(v) {}
  constexpr std::uint32_t value() const { return v_; }
  constexpr TcpSeq operator+(std::uint32_t n) const { return TcpSeq{v_ + n}; }
  constexpr TcpSeq& operator+=(std::uint32_t n) {
    v_ += n;
    return *this;
  }
  // Signed distance a - b, meaningful while |a - b| < 2^31.
  friend constexpr std::int32_t operator-(TcpSeq a, TcpSeq b) {
    return static_cast<std::int32_t>(a.v_ - b.v_);
  }
  friend constexpr bool operator==(TcpSeq, TcpSeq) = default;
  friend constexpr bool operator<(TcpSeq a, TcpSeq b) { return (a - b) < 0; }
  friend constexpr bool operator>(TcpSeq a, TcpSeq b) { return (a - b) > 0; }
  friend constexpr bool operator<=(TcpSeq a, TcpSeq b) { return (a - b) <= 0; }
  friend constexpr bool operator>=(TcpSeq a, TcpSeq b) { return (a - b) >= 0; }

 private:
  std::uint32_t v_ = 0;
};

}  // namespace iwarp

template <class Tag, class Rep>
struct std::hash<iwarp::StrongValue<Tag, Rep>> {
  std::size_t operator()(iwarp::StrongValue<Tag, Rep> v) const noexcept {
    return std::hash<Rep>{}(v.value());
  }
};
template <>
struct std::hash<iwarp::STag> {
  std::size_t operator()(iwarp::STag v) const noexcept {
    return std::hash<std::uint32_t>{}(v.value());
  }
};
