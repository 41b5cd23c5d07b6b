// Byte spans and explicit big-endian access. Wire bytes are never overlaid with structs:
// every multi-octet field is read and written here, with its byte order spelled out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace iwarp {

using Bytes = std::vector<std::uint8_t>;
using ByteSpan = std::span<const std::uint8_t>;
using MutableByteSpan = std::span<std::uint8_t>;

constexpr std::uint16_t load_be16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>((p[0] << 8) | p[1]);
}
constexpr std::uint32_t load_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}
constexpr std::uint64_t load_be64(const std::uint8_t* p) {
  return (std::uint64_t{load_be32(p)} << 32) | load_be32(p + 4);
}
constexpr std::uint32_t load_le32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) |
         (std::uint32_t{p[3]} << 24);
}
constexpr void store_be16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}
constexpr void store_be32(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 24);
  p[1] = static_cast<std::uint8_t>(v >> 16);
  p[2] = static_cast<std::uint8_t>(v >> 8);
  p[3] = static_cast<std::uint8_t>(v);
}
constexpr void store_be64(std::uint8_t* p, std::uint64_t v) {
  store_be32(p, static_cast<std::uint32_t>(v >> 32));
  store_be32(p + 4, static_cast<std::uint32_t>(v));
}
constexpr void store_le32(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
  p[2] = static_cast<std::uint8_t>(v >> 16);
  p[3] = static_cast<std::uint8_t>(v >> 24);
}

// Bounds-checked cursor over received bytes. A read past the end returns zero and latches
// !ok(); callers check ok() once after a run of reads.
class ByteReader {
 public:
  explicit ByteReader(ByteSpan data) : data_(data) {}

  std::uint8_t u8() { return take(1) ? data_[pos_ - 1] : 0; }
  std::uint16_t be16() { return take(2) ? load_be16(&data_[pos_ - 2]) : 0; }
  std::uint32_t be32() { return take(4) ? load_be32(&data_[pos_ - 4]) : 0; }
  std::uint64_t be64() { return take(8) ? load_be64(&data_[pos_ - 8]) : 0; }
  ByteSpan bytes(std::size_t n) { return take(n) ? data_.subspan(pos_ - n, n) : ByteSpan{}; }
  void skip(std::size_t n) { take(n); }

  bool ok() const { return ok_; }
  std::size_t position() const { return pos_; }
  std::size_t remaining() const { return data_.size() - pos_; }
  ByteSpan rest() const { return data_.subspan(pos_); }

 private:
  bool take(std::size_t n) {
    if (!ok_ || n > data_.size() - pos_) {
      ok_ = false;
      return false;
    }
    pos_ += n;
    return true;
  }
  ByteSpan data_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

// Appends big-endian fields to a growing buffer.
class ByteWriter {
 public:
  explicit ByteWriter(Bytes& out) : out_(out) {}
  void u8(std::uint8_t v) { out_.push_back(v); }
  void be16(std::uint16_t v) {
    grow(2, [&](std::uint8_t* p) { store_be16(p, v); });
  }
  void be32(std::uint32_t v) {
    grow(4, [&](std::uint8_t* p) { store_be32(p, v); });
  }
  void be64(std::uint64_t v) {
    grow(8, [&](std::uint8_t* p) { store_be64(p, v); });
  }
  void bytes(ByteSpan b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void zeros(std::size_t n) { out_.insert(out_.end(), n, 0); }
  std::size_t size() const { return out_.size(); }

 private:
  template <class F>
  void grow(std::size_t n, F&& f) {
    out_.resize(out_.size() + n);
    f(out_.data() + out_.size() - n);
  }
  Bytes& out_;
};

inline ByteSpan as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// "de ad be ef" style dump of at most max_bytes octets, for logs and error messages.
std::string hex(ByteSpan b, std::size_t max_bytes = 64);

}  // namespace iwarp
