// Target 6: the buffer-enlargement protocol's wire decoder (enlarge/wire_format.hpp).
//
// Input: one received message (what lands in a receive slot).
//
// Checks: a message that decodes encodes back to exactly the same octets, with
// encoded_size() equal to that length and both encode() overloads agreeing; the fields the
// decoder promises to check hold (version, a Piece or Done that stays inside its message,
// non-zero EnlargeReq size and Ready count, a known NAK reason); describe() works; an input
// that fails to decode fails with a message.
#include <variant>

#include "enlarge/wire_format.hpp"
#include "fuzz/fuzz_support.hpp"

using namespace iwarp;
using namespace iwarp::enlarge;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  const ByteSpan wire(data, size);
  auto m = decode(wire);
  if (!m) {
    FUZZ_CHECK(!m.error().what.empty(), "a decode error without words");
    return 0;
  }
  FUZZ_CHECK(size >= kHeaderBytes && data[0] == kVersion, "accepted version %u", data[0]);
  FUZZ_CHECK(static_cast<std::uint8_t>(m->type()) == data[1], "type %u decoded as %u", data[1],
             static_cast<unsigned>(m->type()));
  const std::size_t n = encoded_size(*m);
  FUZZ_CHECK(n == size, "encoded_size %zu for %zu octets (%s)", n, size, describe(*m).c_str());
  const Bytes a = encode(*m);
  Bytes b(n + 3, 0xEE);
  FUZZ_CHECK(encode(*m, b) == n, "encode(span) length");
  FUZZ_CHECK(b[n] == 0xEE && b[n + 1] == 0xEE && b[n + 2] == 0xEE, "encode wrote past its size");
  FUZZ_CHECK(a.size() == size && std::equal(a.begin(), a.end(), data),
             "decode/encode is not the identity (%s)", describe(*m).c_str());
  FUZZ_CHECK(std::equal(a.begin(), a.end(), b.begin()), "the two encode() overloads differ");
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, Piece>) {
          FUZZ_CHECK(std::uint64_t{body.offset} + body.data.size() <= body.total,
                     "Piece past its total");
          FUZZ_CHECK(body.data.data() == data + kPieceHeaderBytes || body.data.empty(),
                     "Piece data does not view the slot");
        } else if constexpr (std::is_same_v<T, Done>) {
          FUZZ_CHECK(std::uint64_t{body.offset} + body.length <= body.total, "Done past total");
        } else if constexpr (std::is_same_v<T, EnlargeReq>) {
          FUZZ_CHECK(body.size > 0, "EnlargeReq for 0");
        } else if constexpr (std::is_same_v<T, Ready>) {
          FUZZ_CHECK(body.count > 0, "Ready for 0");
        } else if constexpr (std::is_same_v<T, EnlargeNak>) {
          const auto r = static_cast<int>(body.reason);
          FUZZ_CHECK(r >= 1 && r <= 3, "NAK reason %d", r);
        }
      },
      m->body);
  (void)describe(*m);
  return 0;
}
