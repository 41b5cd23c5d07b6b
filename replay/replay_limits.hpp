// What a capture may make `rnic replay` allocate. Every size the replay takes from a capture
// (MSNs, Send sizes, MO + length, tagged offsets, Read sizes, counts of STags and requests,
// stream offsets) is checked against one of these before anything is allocated for it, so
// that a small or fuzzed capture cannot ask for gigabytes: a 1.4 KB capture holding one Send
// at MSN 3,000,000 would otherwise need 3,000,000 receive buffers. Each limit says what
// happens past it; docs/replay.md has the same table.
//
// Past a *refusing* limit the connection is not replayed: it is listed with the finding
// (`rnic replay` text: "not replayed: ..."; --json: "skipped" with a "limit" object), the other
// connections are replayed, and when none is left `rnic replay` ends with exit status 2 and
// one line. Nothing of the refused connection is allocated.
#pragma once

#include <cstdint>

namespace iwarp::replay {

// Refusing. One Send-family or Immediate Data message (its highest MO + length, computed in
// 64 bits, so MO + length past 2^32 is caught rather than wrapped) or one RDMA Read (its
// size): the receive buffer or the Read's sink is allocated whole. 256 MiB is far above what
// the tools send (rnic xfer's largest default size is 16 MiB) and well below a machine's RAM.
inline constexpr std::uint64_t kMaxMessageSize = 256ull << 20;

// Refusing. The tagged offsets one STag is used at, [lowest TO, highest TO + length): its
// shadow memory is one zero-filled block of that size. TO + length is computed without wrap
// (a range reaching past 2^64 counts as reaching 2^64).
inline constexpr std::uint64_t kMaxStagSpan = 256ull << 20;

// Refusing. STags shadowed at one endpoint (each is a registration and a region).
inline constexpr std::uint64_t kMaxStags = 65536;

// Refusing. Receive buffers at one endpoint: one is posted per MSN from 1 to the highest MSN
// of a Send or Immediate Data message (MSN selects the receive buffer, RFC 5041 §5.3), so this
// bounds the highest MSN, not the number of Sends the capture holds.
inline constexpr std::uint64_t kMaxReceives = 1ull << 20;

// Refusing. RDMA Reads and atomics one endpoint posts: the highest MSN of its Read and Atomic
// Requests (queue 1), which the plan walks from 1, and the number of answers it received.
inline constexpr std::uint64_t kMaxRequests = 1ull << 20;

// Refusing. Everything the replay allocates for one connection's two endpoints: shadow memory
// of every STag, the receive buffers (a message missing from the capture gets a placeholder
// as large as the largest), atomic result words, and the per-work-request bookkeeping of the
// receive and send queues and completion queues. Connections are replayed one at a time, so
// this bounds the replay's memory beyond the capture itself.
inline constexpr std::uint64_t kMaxConnectionMemory = 1ull << 30;

// Not refusing. Stream offsets (octets after the first of a direction): the learning pass
// reassembles and decodes only the first 1 GiB of each direction. Octets beyond are still
// injected, but nothing is learned from them (their Sends, STags and Reads are unknown, so the
// emulation may find violations there); the connection's report says so.
inline constexpr std::uint64_t kMaxStreamOffset = 1ull << 30;

// Not refusing. Octets the learning pass holds per direction beyond a gap not yet filled, and
// octets held until the MPA Reply fixes their framing (it decodes each direction as it becomes
// contiguous and keeps nothing behind but the last 128 KiB; held octets count
// trace::kHeldPieceOverhead per piece too). Octets that would take it further are still
// injected, but nothing is learned from them; the connection's report says so. A gap the
// network made fills within a TCP window; one the capture made (a frame it dropped) never
// does, and everything after it is held: so the default is kMaxStreamOffset, all the learning
// pass ever learns of a direction (memory grows that far only for such a capture).
// Connections learned in the same read of the file (make_plan_from_file, `rnic replay` of a
// regular file) share it: it bounds what all of them hold together.
inline constexpr std::uint64_t kMaxHeldBeyondGap = kMaxStreamOffset;

// Not refusing. Segments (with data, or FIN or RST) of a connection learned as the file is read
// (make_plan_from_file) held while the lengths of the MPA Request and Reply are not both known:
// whether such a segment holds only the MPA frame (and is not replayed) is not known before, so
// its step cannot be counted. They come first in a connection; past this many, the connection is
// learned again in another read with its steps kept (a record per segment).
inline constexpr std::uint64_t kMaxSegmentsBeforeFraming = 4096;

// Not refusing. Octets a connection's learner holds before the MPA Reply fixes their framing in a
// read that does not know yet whether the connection can be replayed (make_plan_from_file's
// first read; kMaxHeldBeyondGap in all others): past this, it is learned again in another read.
inline constexpr std::uint64_t kHeldBeforeFramingSpeculative = 1ull << 20;

// Not refusing. Connections make_plan_from_file learns in one read of the file: the others are
// learned in further reads, this many at a time (each learner holds up to 2 x 256 KiB behind
// its decoders, and what it learns).
inline constexpr std::uint64_t kLearnedPerRead = 64;

// Bookkeeping estimates per work request the replay creates (receive WR with its SGE and its
// completion slot; send WR slot and its completion slot) and per STag, counted in
// kMaxConnectionMemory.
inline constexpr std::uint64_t kReceiveOverhead = 128;
inline constexpr std::uint64_t kRequestOverhead = 256;
inline constexpr std::uint64_t kStagOverhead = 256;  // per STag: registration, region, maps

// The limits make_plan() applies; tests lower them.
struct PlanLimits {
  std::uint64_t max_message = kMaxMessageSize;
  std::uint64_t max_region = kMaxStagSpan;  // one STag's shadow memory
  std::uint64_t max_stags = kMaxStags;
  std::uint64_t max_receives = kMaxReceives;
  std::uint64_t max_requests = kMaxRequests;
  std::uint64_t max_total = kMaxConnectionMemory;  // all of a connection's memory
  std::uint64_t max_stream = kMaxStreamOffset;
  std::uint64_t max_held = kMaxHeldBeyondGap;
};

}  // namespace iwarp::replay
