// Target 5: the capture reader (trace/pcap_reader.hpp, through libpcap), the capture decoder
// and the replay planner (replay/replay_plan.hpp) on arbitrary files; optionally the replay
// itself (replay/replayer.hpp).
//
// Input: a whole pcap or pcapng file. It is handed to libpcap as /proc/self/fd/N of a memfd
// (no file on disk). A classic pcap whose header's thiszone field (octets 8-11, which readers
// ignore) has bit 0 set is also replayed through two emulated RNICs when its plan is small.
//
// Checks: nothing crashes, leaks or hangs; a plan is consistent with the capture and its
// limits: steps in capture order, segment offsets matching their sequence numbers, work
// requests pointing at existing reads/atomics, receive buffers in MSN order, shadow memory
// within PlanLimits; dropping frames from a capture and planning again works too; the steps
// made as the file is read again (StepSource::ReadAgain) are the ones a plan keeps.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>

#include "fuzz/fuzz_support.hpp"
#include "replay/replay_plan.hpp"
#include "replay/replayer.hpp"
#include "trace/pcap_reader.hpp"
#include "trace/trace_decoder.hpp"

using namespace iwarp;
using iwarp::fuzz::Input;

namespace {

// Small limits, so that no input makes the planner (or the replay) allocate much. Set field by
// field: the limits a version of replay/ has differ.
template <class L>
L small_limits() {
  L l{};
  l.max_region = 1u << 20;
  l.max_total = 4u << 20;
  if constexpr (requires { l.max_message; }) l.max_message = 1u << 20;
  if constexpr (requires { l.max_stags; }) l.max_stags = 256;
  if constexpr (requires { l.max_receives; }) l.max_receives = 4096;
  if constexpr (requires { l.max_requests; }) l.max_requests = 4096;
  return l;
}
const replay::PlanLimits kLimits = small_limits<replay::PlanLimits>();

void check_plan(const replay::Plan& plan) {
  for (const auto& c : plan.connections) {
    std::uint64_t shadow = 0;
    for (int s = 0; s < 2; ++s) {
      const auto& ep = c.ep[s];
      for (const auto& r : ep.regions) {
        FUZZ_CHECK(r.begin_to <= r.end_to, "region 0x%08x [%llx, %llx)", r.stag.value(),
                   (unsigned long long)r.begin_to, (unsigned long long)r.end_to);
        FUZZ_CHECK(r.end_to - r.begin_to <= kLimits.max_region,
                   "region 0x%08x of %llu octets beyond max_region", r.stag.value(),
                   (unsigned long long)(r.end_to - r.begin_to));
      }
      shadow += ep.shadow_bytes();
      for (std::size_t i = 0; i < ep.recvs.size(); ++i)
        FUZZ_CHECK(ep.recvs[i].msn == i + 1, "receive %zu has MSN %u", i, ep.recvs[i].msn);
    }
    FUZZ_CHECK(shadow <= kLimits.max_total, "connection c%zu: %llu octets of shadow memory", c.flow,
               (unsigned long long)shadow);
    std::uint64_t last = 0;
    for (const auto& st : c.steps) {
      // Segments and FINs in capture order (a post goes in before the segment it precedes,
      // labelled with the frame of its request, which may be another one).
      if (st.kind == replay::Step::Kind::Segment || st.kind == replay::Step::Kind::Fin) {
        FUZZ_CHECK(st.frame >= last, "step for frame %llu after frame %llu",
                   (unsigned long long)st.frame, (unsigned long long)last);
        last = st.frame;
      }
      const int d = replay::index(st.dir);
      switch (st.kind) {
        case replay::Step::Kind::Segment: {
          // A segment that starts before the stream (its first octets precede the MPA frame)
          // has offset 0; any other has the offset of its first octet.
          const std::int64_t rel = st.seq - c.stream_seq[d];
          FUZZ_CHECK(rel < 0
                         ? st.offset == 0
                         : static_cast<std::uint32_t>(rel) == static_cast<std::uint32_t>(st.offset),
                     "segment of frame %llu: offset %llu, seq - stream start %lld",
                     (unsigned long long)st.frame, (unsigned long long)st.offset, (long long)rel);
          break;
        }
        case replay::Step::Kind::PostRead:
          FUZZ_CHECK(st.item < c.ep[replay::index(st.side)].reads.size(), "read %zu of %zu",
                     st.item, c.ep[replay::index(st.side)].reads.size());
          break;
        case replay::Step::Kind::PostAtomic:
          FUZZ_CHECK(st.item < c.ep[replay::index(st.side)].atomics.size(), "atomic %zu of %zu",
                     st.item, c.ep[replay::index(st.side)].atomics.size());
          break;
        case replay::Step::Kind::Fin:
          break;
      }
    }
  }
}

// The steps each connection of `again` (a StepSource::ReadAgain plan) makes as its file is read
// again are the ones `kept` (a Kept plan of the same capture) holds, one for one.
void check_read_again(const replay::Plan& kept, const replay::Plan& again) {
  FUZZ_CHECK(kept.connections.size() == again.connections.size(), "%zu connections against %zu",
             kept.connections.size(), again.connections.size());
  for (std::size_t i = 0; i < kept.connections.size(); ++i) {
    const auto &a = kept.connections[i], &b = again.connections[i];
    if (!b.read_again) continue;
    FUZZ_CHECK(b.steps.empty() && b.step_count == a.steps.size(), "c%zu: %llu steps against %zu",
               a.flow, (unsigned long long)b.step_count, a.steps.size());
    std::optional<trace::PayloadReader> reader;
    if (a.file) reader.emplace(a.file);
    std::size_t k = 0;
    try {
      replay::read_steps_again(b, [&](replay::Step&& y, ByteSpan payload) {
        FUZZ_CHECK(k < a.steps.size(), "c%zu: more steps read again", a.flow);
        const auto& x = a.steps[k++];
        FUZZ_CHECK(x.kind == y.kind && x.dir == y.dir && x.side == y.side && x.frame == y.frame &&
                       x.time_us == y.time_us && x.seq == y.seq && x.offset == y.offset &&
                       x.item == y.item,
                   "c%zu step %zu (frame %llu) differs when read again", a.flow, k,
                   (unsigned long long)x.frame);
        if (x.kind == replay::Step::Kind::Segment)
          FUZZ_CHECK(
              a.payload_of(x, reader ? &*reader : nullptr) == Bytes(payload.begin(), payload.end()),
              "c%zu step %zu (frame %llu): payload differs when read again", a.flow, k,
              (unsigned long long)x.frame);
      });
    } catch (const trace::CaptureChanged& e) {
      FUZZ_CHECK(false, "c%zu read again: %s", a.flow, e.what());
    }
    FUZZ_CHECK(k == a.steps.size(), "c%zu: %zu steps read again of %zu", a.flow, k, a.steps.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::quiet_logs();
  static const int fd = memfd_create("fuzz.pcap", 0);
  FUZZ_CHECK(fd >= 0, "memfd_create");
  FUZZ_CHECK(ftruncate(fd, 0) == 0, "ftruncate");
  FUZZ_CHECK(pwrite(fd, data, size, 0) == static_cast<ssize_t>(size), "pwrite");
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);

  auto cap = trace::read_capture(path);
  if (!cap) return 0;
  FUZZ_CHECK(cap->non_tcp_frames <= cap->frames, "%llu non-TCP of %llu frames",
             (unsigned long long)cap->non_tcp_frames, (unsigned long long)cap->frames);
  for (const auto& f : cap->flows)
    for (const auto& dir : f.dir)
      for (const auto& s : dir)
        FUZZ_CHECK(s.frame >= 1 && s.frame <= cap->frames, "segment of frame %llu of %llu",
                   (unsigned long long)s.frame, (unsigned long long)cap->frames);

  // The same capture with its payloads left in the file (rnic replay's way): every payload is
  // found there, octet for octet the one held in memory.
  auto on_disk = trace::read_capture(path, {.payloads_in_file = true});
  FUZZ_CHECK(on_disk.has_value(), "read with payloads_in_file failed: %s",
             on_disk ? "" : on_disk.error().c_str());
  FUZZ_CHECK(on_disk->flows.size() == cap->flows.size(), "flows differ");
  {
    std::optional<trace::PayloadReader> reader;
    if (on_disk->file) reader.emplace(on_disk->file);
    for (std::size_t i = 0; i < cap->flows.size(); ++i)
      for (int d = 0; d < 2; ++d) {
        const auto &a = cap->flows[i].dir[d], &b = on_disk->flows[i].dir[d];
        FUZZ_CHECK(a.size() == b.size(), "segments differ");
        for (std::size_t k = 0; k < a.size(); ++k) {
          FUZZ_CHECK(a[k].size() == b[k].size(), "payload length differs at frame %llu",
                     (unsigned long long)a[k].frame);
          if (!b[k].in_file()) continue;
          FUZZ_CHECK(reader.has_value(), "a payload in a file but no file");
          const auto p = reader->payload(b[k]);
          FUZZ_CHECK(std::equal(p.begin(), p.end(), a[k].payload.begin(), a[k].payload.end()),
                     "payload of frame %llu read back differs", (unsigned long long)a[k].frame);
        }
      }
  }

  auto plan = replay::make_plan(*cap, kLimits);
  if (plan) check_plan(*plan);

  // rnic replay's way: the steps made as the file is read again are the ones a plan keeps.
  {
    auto kept = replay::make_plan(*on_disk, kLimits);
    auto again = replay::make_plan(*on_disk, kLimits, replay::StepSource::ReadAgain);
    FUZZ_CHECK(kept.has_value() == again.has_value(), "a plan only one way");
    if (kept) check_read_again(*kept, *again);
  }

  // rnic replay's way with a regular file: the plan learned as the file is read, not held. Its
  // steps read again must be the ones it counted (read_steps_again checks their number and
  // digest, and throws CaptureChanged otherwise). (It need not be the plan above: its decoder
  // ends a connection once both directions have, as `rnic decode` does.)
  if (on_disk->file) {
    std::expected<replay::Plan, std::string> streamed = std::unexpected(std::string());
    try {
      streamed = replay::make_plan_from_file(path, kLimits);
    } catch (const trace::CaptureChanged& e) {
      FUZZ_CHECK(false, "planned from the file: %s", e.what());
    }
    if (streamed) {
      check_plan(*streamed);
      for (const auto& c : streamed->connections) {
        if (!c.read_again) continue;
        std::uint64_t n = 0;
        try {
          replay::read_steps_again(c, [&](replay::Step&&, ByteSpan) { ++n; });
        } catch (const trace::CaptureChanged& e) {
          FUZZ_CHECK(false, "c%zu of the plan from the file, read again: %s", c.flow, e.what());
        }
        FUZZ_CHECK(n == c.step_count, "c%zu: %llu steps read again of %llu", c.flow,
                   (unsigned long long)n, (unsigned long long)c.step_count);
      }
    }
  }

  // Lose the first few frames, as `rnic replay --drop` does, and plan again.
  trace::Capture less = *cap;
  std::vector<std::uint64_t> frames;
  for (std::uint64_t f = 1; f <= std::min<std::uint64_t>(cap->frames, 6); f += 2)
    frames.push_back(f);
  if (replay::drop_frames(less, frames))
    if (auto p2 = replay::make_plan(less, kLimits)) check_plan(*p2);

  // The replay itself, for small plans whose file asks for it.
  const bool classic = size >= 24 && (data[0] == 0xd4 || data[0] == 0xa1 || data[0] == 0x4d);
  const bool replay_it = classic && ((data[8] | data[11]) & 1);
  // Small: the replay allocates every receive buffer and Read sink the plan names (in the
  // version fuzzed first, sizes a capture gives were not limited: see fuzz/README.md).
  auto small = [](const replay::Plan& p) {
    if (p.total_steps() > 300 || p.connections.size() > 2) return false;
    for (const auto& c : p.connections)
      for (const auto& ep : c.ep) {
        std::uint64_t bytes = ep.shadow_bytes();
        for (const auto& r : ep.recvs) bytes += r.size;
        for (const auto& r : ep.reads) bytes += r.request.size;
        if (bytes > (1u << 20) || ep.recvs.size() + ep.reads.size() + ep.atomics.size() > 256)
          return false;
      }
    return true;
  };
  if (plan && replay_it && small(*plan)) {
    replay::ReplayOptions opts;
    (void)replay::replay(*plan, opts);
    opts.permutation = replay::Permutation{};
    opts.permutation->wire.seed = size;
    (void)replay::replay(*plan, opts);
  }
  return 0;
}
