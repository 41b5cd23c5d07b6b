#include "replay/stream_ranges.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>

#include "trace/trace_decoder.hpp"

namespace iwarp::replay {

namespace {

// One range being filled: its octets, and which of them a segment has carried so far.
struct Fill {
  const StreamRange* range = nullptr;
  Bytes octets;
  std::vector<bool> have;
};

// A direction of a connection read again: its ranges by offset, and a segment whose stream
// offset is known, from which the next ones' are taken.
struct DirectionFill {
  std::vector<std::size_t> fills;      // indices into the fills, by range offset
  std::vector<std::uint64_t> offsets;  // their offsets, in that order
  std::uint64_t longest = 0;           // the longest of them
  std::int64_t ref_offset = 0;
  TcpSeq ref_seq;
};

struct ConnectionFill {
  const ConnectionPlan* cp = nullptr;
  DirectionFill dir[2];
};

// Hands each segment of the connections read again to the ranges it overlaps; stops the read
// once every range is filled or the last of their connections' segments has gone by.
class RangeSink final : public trace::SegmentSink {
 public:
  RangeSink(std::map<std::size_t, ConnectionFill>& conns, std::vector<Fill>& fills,
            std::uint64_t missing, std::uint64_t last_frame)
      : conns_(conns), fills_(fills), missing_(missing), last_frame_(last_frame) {}

  void on_segment(std::size_t flow, trace::TcpFlow&, int dir,
                  const trace::SegmentView& v) override {
    seen_ = v.frame;
    const auto it = conns_.find(flow);
    if (it == conns_.end() || v.payload.empty()) return;
    const ConnectionPlan& cp = *it->second.cp;
    // The segments the replay injects (StepStream) and the setup ones (the MPA frames).
    if (v.frame > cp.last_frame ||
        std::binary_search(cp.left_out.begin(), cp.left_out.end(), v.frame))
      return;
    DirectionFill& df = it->second.dir[dir];
    // Its stream offset: the 32-bit difference from a segment whose offset is known (RFC 9293
    // §3.4's sequence space wraps at 2^32), which moves up to a segment at most the decoder's
    // reassembly window ahead of it (trace::kDefaultWindow: further, the decoder drops it too).
    // So offsets past 2 GiB are counted as the decoder counts them, and a garbage segment far
    // ahead moves nothing.
    const std::int64_t at = df.ref_offset + (v.seq - df.ref_seq);
    if (at > df.ref_offset &&
        at - df.ref_offset <= static_cast<std::int64_t>(trace::kDefaultWindow)) {
      df.ref_offset = at;
      df.ref_seq = v.seq;
    }
    const std::int64_t end = at + static_cast<std::int64_t>(v.payload.size());
    if (end <= 0 || df.fills.empty()) return;
    // The renumbering of Atomic Responses patches some octets: the replay injects them patched.
    const auto& pm = cp.patches[dir];
    // The ranges that can overlap [at, end): those starting after at - longest, before end.
    const auto first = static_cast<std::uint64_t>(
        std::max<std::int64_t>(0, at - static_cast<std::int64_t>(df.longest) + 1));
    for (auto k = static_cast<std::size_t>(std::ranges::lower_bound(df.offsets, first) -
                                           df.offsets.begin());
         k < df.fills.size(); ++k) {
      Fill& f = fills_[df.fills[k]];
      const auto lo = static_cast<std::int64_t>(f.range->offset);
      if (lo >= end) break;  // (by offset)
      const std::int64_t hi = lo + f.range->length;
      const std::int64_t from = std::max(lo, at), to = std::min(hi, end);
      for (std::int64_t o = from; o < to; ++o) {
        const auto n = static_cast<std::size_t>(o - lo);
        if (f.have[n]) continue;  // an earlier segment carried it
        const auto p = pm.empty() ? pm.end() : pm.find(static_cast<std::uint64_t>(o));
        f.octets[n] = p != pm.end() ? p->second : v.payload[static_cast<std::size_t>(o - at)];
        f.have[n] = true;
        --missing_;
      }
    }
  }
  bool done() const override { return missing_ == 0 || seen_ >= last_frame_; }

 private:
  std::map<std::size_t, ConnectionFill>& conns_;
  std::vector<Fill>& fills_;
  std::uint64_t missing_;
  std::uint64_t last_frame_;
  std::uint64_t seen_ = 0;
};

const ConnectionPlan* plan_of(const Plan& plan, std::size_t flow) {
  for (const auto& c : plan.connections)
    if (c.flow == flow) return &c;
  return nullptr;
}

}  // namespace

std::vector<Bytes> stream_ranges(const Plan& plan, std::span<const StreamRange> ranges) {
  std::uint64_t total = 0;
  for (const auto& r : ranges) total += r.length;
  if (total > kMaxRangeOctets)
    throw std::length_error(
        fmt::format("{} octets of stream asked for at once, more than kMaxRangeOctets ({})", total,
                    kMaxRangeOctets));
  std::vector<Bytes> out(ranges.size());

  // Connections whose steps are kept: from their steps.
  std::map<const ConnectionPlan*, StreamOctets> kept;
  std::optional<trace::PayloadReader> reader;
  // Connections read again, per capture file (one for a plan learned from a file).
  std::map<const trace::CaptureFile*, std::map<std::size_t, ConnectionFill>> again;
  std::vector<Fill> fills;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const auto& r = ranges[i];
    const ConnectionPlan* cp = plan_of(plan, r.flow);
    if (!cp || r.length == 0) continue;
    if (!cp->read_again) {
      auto it = kept.find(cp);
      if (it == kept.end()) it = kept.try_emplace(cp, *cp).first;
      if (cp->file && !reader) reader.emplace(cp->file);
      out[i] = it->second.get(r.dir, r.offset, r.length, reader ? &*reader : nullptr);
      continue;
    }
    if (!cp->file)
      throw trace::CaptureChanged(
          "internal error: a connection whose steps are read again has no capture file");
    auto& conn = again[cp->file.get()][cp->flow];
    if (!conn.cp) {
      conn.cp = cp;
      for (int d = 0; d < 2; ++d) conn.dir[d].ref_seq = cp->stream_seq[d];
    }
    conn.dir[index(r.dir)].fills.push_back(fills.size());
    fills.push_back(Fill{&r, Bytes(r.length), std::vector<bool>(r.length, false)});
  }
  if (again.empty()) return out;

  // Which fill answers which range.
  std::vector<std::size_t> fill_of(ranges.size(), SIZE_MAX);
  for (std::size_t k = 0; k < fills.size(); ++k)
    fill_of[static_cast<std::size_t>(fills[k].range - ranges.data())] = k;
  for (auto& [file, conns] : again) {
    std::uint64_t missing = 0, last = 0;
    for (auto& [flow, conn] : conns) {
      for (auto& df : conn.dir) {
        std::ranges::sort(df.fills, {}, [&](std::size_t k) { return fills[k].range->offset; });
        for (auto k : df.fills) {
          missing += fills[k].range->length;
          df.offsets.push_back(fills[k].range->offset);
          df.longest = std::max<std::uint64_t>(df.longest, fills[k].range->length);
        }
      }
      last = std::max(last, conn.cp->last_frame);
    }
    RangeSink sink(conns, fills, missing, last);
    if (auto r = trace::rescan_capture(*file, sink); !r) throw trace::CaptureChanged(r.error());
  }
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (fill_of[i] == SIZE_MAX) continue;
    const Fill& f = fills[fill_of[i]];
    const auto n = static_cast<std::size_t>(std::ranges::find(f.have, false) - f.have.begin());
    out[i].assign(f.octets.begin(), f.octets.begin() + static_cast<std::ptrdiff_t>(n));
  }
  return out;
}

}  // namespace iwarp::replay
