#include "sim/impaired_wire.hpp"

#include <fmt/format.h>

#include <charconv>

namespace iwarp::sim {

std::string WireImpairment::describe() const {
  std::string s = fmt::format("reorder={},dup={},delay={},seed={}", reorder, dup, delay, seed);
  if (mss) s += fmt::format(",mss={}", mss);
  return s;
}

std::expected<WireImpairment, std::string> parse_wire_impairment(std::string_view spec) {
  WireImpairment w;
  if (spec.empty()) return std::unexpected("empty (expected e.g. reorder=0.3,dup=0.05)");
  while (!spec.empty()) {
    const auto comma = spec.find(',');
    const auto item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos)
      return std::unexpected(fmt::format("'{}' is not key=value", item));
    const auto key = item.substr(0, eq), val = item.substr(eq + 1);
    auto prob = [&](double& out) -> std::expected<void, std::string> {
      double d = 0;
      auto [p, ec] = std::from_chars(val.data(), val.data() + val.size(), d);
      if (ec != std::errc{} || p != val.data() + val.size() || !(d >= 0 && d <= 1))
        return std::unexpected(
            fmt::format("{}={}: expected a probability between 0 and 1", key, val));
      out = d;
      return {};
    };
    auto integer = [&](std::uint64_t& out, std::uint64_t lo,
                       std::uint64_t hi) -> std::expected<void, std::string> {
      std::uint64_t n = 0;
      auto [p, ec] = std::from_chars(val.data(), val.data() + val.size(), n);
      if (ec != std::errc{} || p != val.data() + val.size() || n < lo || n > hi)
        return std::unexpected(
            fmt::format("{}={}: expected an integer from {} to {}", key, val, lo, hi));
      out = n;
      return {};
    };
    std::expected<void, std::string> r;
    std::uint64_t n = 0;
    if (key == "reorder") {
      r = prob(w.reorder);
    } else if (key == "dup") {
      r = prob(w.dup);
    } else if (key == "delay") {
      r = integer(n, 1, 1000);
      w.delay = static_cast<unsigned>(n);
    } else if (key == "seed") {
      r = integer(n, 0, ~std::uint64_t{0});
      w.seed = n;
    } else if (key == "mss") {
      r = integer(n, 64, 65535);
      w.mss = n;
    } else {
      return std::unexpected(
          fmt::format("unknown key '{}' (known: reorder, dup, delay, seed, mss)", key));
    }
    if (!r) return std::unexpected(r.error());
  }
  return w;
}

bool SegmentDisorder::chance(double p) {
  if (p <= 0) return false;
  return std::uniform_real_distribution<double>(0, 1)(rng_) < p;
}

void SegmentDisorder::push(WireSegment s, const SegmentOut& out) {
  ++stats_.segments;
  // Segments held long enough arrive now (a retransmission after later data got through).
  auto release_due = [&] {
    for (auto it = held_.begin(); it != held_.end();) {
      if (it->due == 0) {
        auto seg = std::move(it->seg);
        it = held_.erase(it);
        out(std::move(seg));
      } else {
        ++it;
      }
    }
  };
  if (chance(w_.reorder)) {
    ++stats_.held;
    const unsigned due = 1 + static_cast<unsigned>(rng_() % std::max(1u, w_.delay));  // delay 0 = 1
    held_.push_back(Held{std::move(s), due});
    return;
  }
  const bool twice = chance(w_.dup);
  WireSegment copy;
  if (twice) copy = s;
  out(std::move(s));
  for (auto& h : held_) --h.due;
  release_due();
  if (twice) {
    if (copy.payload.size() >= 2 && (rng_() & 1)) {
      // An overlapping retransmission: the tail of this segment again, later.
      ++stats_.overlapped;
      const std::size_t cut = 1 + rng_() % (copy.payload.size() - 1);
      copy.payload.erase(copy.payload.begin(), copy.payload.begin() + static_cast<long>(cut));
      copy.seq += static_cast<std::uint32_t>(cut);
    } else {
      ++stats_.duplicated;
    }
    held_.push_back(
        Held{std::move(copy), 1 + static_cast<unsigned>(rng_() % std::max(1u, w_.delay))});
  }
}

void SegmentDisorder::flush(const SegmentOut& out) {
  while (!held_.empty()) {
    auto seg = std::move(held_.front().seg);
    held_.pop_front();
    out(std::move(seg));
  }
}

// Finds FPDU ends in the stream (an FpduReader without placement).
class StreamCutter::Bounds : public mpa::FpduSink {
 public:
  explicit Bounds(std::deque<std::uint64_t>& ends) : ends_(ends) {}
  MutableByteSpan on_fpdu_head(const mpa::FpduHead&) override { return {}; }
  void on_fpdu_end(const mpa::FpduTrailer& t) override {
    ends_.push_back(t.offset + t.wire_length);
  }
  void on_framing_error(const WireError&) override {}

 private:
  std::deque<std::uint64_t>& ends_;
};

StreamCutter::StreamCutter(mpa::FramingConfig cfg, std::size_t mss, TcpSeq start)
    : cfg_(cfg), mss_(std::max<std::size_t>(mss, 64)), next_(start) {
  // Only the boundaries matter here: no CRC.
  scan_.emplace(mpa::FramingConfig{false, cfg.markers});
  bounds_ = std::make_shared<Bounds>(fpdu_ends_);
}

void StreamCutter::push(ByteSpan data, const SegmentOut& out) {
  pending_.insert(pending_.end(), data.begin(), data.end());
  if (!scan_->failed()) scan_->feed(data, *bounds_);
  emit_ready(out, false);
}

void StreamCutter::flush(const SegmentOut& out) {
  emit_ready(out, true);
}

void StreamCutter::emit_ready(const SegmentOut& out, bool all) {
  std::size_t used = 0;
  auto emit = [&](std::size_t n) {
    WireSegment s{next_, Bytes(pending_.begin() + static_cast<long>(used),
                               pending_.begin() + static_cast<long>(used + n))};
    next_ += static_cast<std::uint32_t>(n);
    pos_ += n;
    used += n;
    out(std::move(s));
  };
  while (used < pending_.size()) {
    while (!fpdu_ends_.empty() && fpdu_ends_.front() <= pos_) fpdu_ends_.pop_front();
    // RFC 5044 §8: as many whole FPDUs as fit in one segment.
    std::size_t take = 0;
    for (auto e : fpdu_ends_) {
      if (e - pos_ > mss_) break;
      take = static_cast<std::size_t>(e - pos_);
    }
    if (take == 0) {
      const std::size_t have = pending_.size() - used;
      if (have >= mss_ || scan_->failed())
        take = std::min(have, mss_);  // an FPDU larger than a segment: cut it at the MSS
      else if (all)
        take = have;
      else
        break;  // the rest of this FPDU is still coming
    }
    emit(take);
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(used));
}

void ImpairedWire::push(ByteSpan data, const SegmentOut& out) {
  cutter_.push(data, [&](WireSegment s) { disorder_.push(std::move(s), out); });
}

void ImpairedWire::flush(const SegmentOut& out) {
  cutter_.flush([&](WireSegment s) { disorder_.push(std::move(s), out); });
  disorder_.flush(out);
}

namespace {

// The simulated wire behind the engine's shaper interface.
class ImpairedWireShaper final : public rnic::RxSegmentShaper {
 public:
  ImpairedWireShaper(const WireImpairment& w, const rnic::RxShaperContext& c)
      : w_(w), mss_(w.mss ? w.mss : c.emss), wire_(w, c.framing, c.emss, c.stream_start) {}
  void push(ByteSpan data, const rnic::SegmentSink& out) override {
    wire_.push(data, [&](WireSegment s) { out(s.seq, s.payload); });
  }
  void flush(const rnic::SegmentSink& out) override {
    wire_.flush([&](WireSegment s) { out(s.seq, s.payload); });
  }
  bool holding() const override { return wire_.holding(); }
  std::string describe() const override {
    return fmt::format("simulated impaired wire ({}, MSS {})", w_.describe(), mss_);
  }

 private:
  WireImpairment w_;
  std::size_t mss_;
  ImpairedWire wire_;
};

}  // namespace

rnic::RxShaperFactory impaired_wire_shaper(const WireImpairment& w) {
  return [w](const rnic::RxShaperContext& c) -> std::unique_ptr<rnic::RxSegmentShaper> {
    return std::make_unique<ImpairedWireShaper>(w, c);
  };
}

}  // namespace iwarp::sim
