// Shared helpers for the tests: building MPA connections as byte streams, and a visitor that
// renders every decoder event as text so that runs can be compared exactly.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include <random>
#include <string>
#include <vector>

#include "ddp/segmentation.hpp"
#include "mpa/connection_decoder.hpp"
#include "mpa/crc32c.hpp"
#include "mpa/fpdu.hpp"

namespace iwarp::test {

// A capture file in the test temp directory, removed afterwards unless the test failed.
struct TempFile {
  explicit TempFile(const std::string& name)
      : path(::testing::TempDir() + "iwarp_" + std::to_string(::getpid()) + "_" + name + ".pcap") {}
  ~TempFile() {
    if (!::testing::Test::HasFailure()) std::remove(path.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  std::string path;
};

// Both directions of one connection: [0] initiator -> responder, [1] back.
struct Streams {
  Bytes dir[2];
  mpa::ConnectionParams params;
  std::size_t messages = 0;
};

// A connection with `n` random messages of random types each way.
inline Streams make_streams(const mpa::Policy& init, const mpa::Policy& resp, std::uint32_t seed,
                            int n = 40, std::size_t mss = 1460, std::size_t max_payload = 5000) {
  Streams s;
  auto neg = mpa::negotiate(init, resp);
  s.params = neg.initiator.params;
  auto req = neg.request.encode(), rep = neg.reply.encode();
  s.dir[0] = req;
  s.dir[1] = rep;
  mpa::FpduEncoder enc[2] = {mpa::FpduEncoder(s.params.framing_to_responder()),
                             mpa::FpduEncoder(s.params.framing_to_initiator())};
  std::size_t mul[2] = {mpa::mulpdu(mss, s.params.markers_to_responder),
                        mpa::mulpdu(mss, s.params.markers_to_initiator)};
  std::uint32_t msn[2][4] = {};
  std::mt19937 gen(seed);
  auto rng = [&] { return static_cast<std::uint32_t>(gen()); };
  for (int i = 0; i < n; ++i) {
    int d = static_cast<int>(rng() % 2);
    Bytes payload(rng() % (max_payload + 1));
    for (auto& b : payload) b = static_cast<std::uint8_t>(rng());
    ddp::Segment whole;
    switch (rng() % 4) {
      case 0:
        whole.hdr =
            ddp::tagged_header(rdmap::Opcode::Write, STag{rng()}, TaggedOffset{rng() % 100000});
        whole.payload = payload;
        break;
      case 1:
        whole.hdr = ddp::untagged_header(rdmap::Opcode::Send, QueueNumber{0}, Msn{++msn[d][0]},
                                         MessageOffset{0});
        whole.payload = payload;
        break;
      case 2:
        whole.hdr = ddp::untagged_header(rdmap::Opcode::ReadRequest, QueueNumber{1},
                                         Msn{++msn[d][1]}, MessageOffset{0});
        whole.body = rdmap::ReadRequest{STag{rng()}, TaggedOffset{rng()}, rng() % 5000, STag{rng()},
                                        TaggedOffset{rng()}};
        break;
      default:
        whole.hdr = ddp::tagged_header(rdmap::Opcode::ReadResponse, STag{rng()}, TaggedOffset{0});
        whole.payload = payload;
        break;
    }
    auto segs = ddp::segment_message(whole, mul[d]);
    for (const auto& seg : *segs) {
      Bytes u;
      ddp::encode_segment(seg, u);
      (void)enc[d].encode(u, s.dir[d]);
    }
    ++s.messages;
  }
  return s;
}

// Renders events (with the DDP parse of each FPDU) as lines.
class Transcript final : public mpa::ConnectionVisitor {
 public:
  std::vector<std::string> lines;
  int errors = 0;
  int fpdus = 0;
  void on_mpa_frame(mpa::Direction d, const mpa::MpaFrame& f, std::uint64_t off,
                    std::size_t len) override {
    lines.push_back(fmt::format("{} frame @{} {} {}", int(d), off, len, mpa::describe(f)));
  }
  void on_negotiated(const mpa::ConnectionParams& p) override {
    lines.push_back("negotiated " + mpa::describe(p));
  }
  void on_fpdu(mpa::Direction d, const mpa::Fpdu& f) override {
    ++fpdus;
    auto seg = ddp::parse_segment(f.ulpdu);
    std::string what;
    if (seg) {
      auto c = checker[int(d)].check(*seg);
      what = ddp::describe(*seg) + fmt::format(" payload-crc {:08x}", mpa::crc32c(seg->payload));
      if (!c) {
        ++errors;
        what += " CHECK " + c.error().to_string();
      }
    } else {
      ++errors;
      what = "SEGMENT " + seg.error().to_string();
    }
    lines.push_back(fmt::format("{} fpdu @{} {} {} m{} {}", int(d), f.offset, f.wire_length,
                                mpa::to_string(f.crc), f.markers, what));
  }
  void on_error(mpa::Direction d, const WireError& e) override {
    ++errors;
    lines.push_back(fmt::format("{} error @{} {}", int(d), e.offset, e.to_string()));
    last_error = e;
  }
  std::optional<WireError> last_error;
  ddp::SegmentChecker checker[2];
};

}  // namespace iwarp::test
