// The process's allocator and large messages. glibc's malloc serves a block above
// M_MMAP_THRESHOLD (128 KiB at first, raised to the largest mapped block freed) with mmap, and
// gives the top of a heap back to the kernel once more than M_TRIM_THRESHOLD is free there
// (128 KiB at first, twice the mmap threshold once that was raised). A stream of large messages
// (the buffers a program posts, the one this library assembles for each message it receives) then
// maps, faults in page by page and unmaps every message: with four 1 MiB messages in flight through
// a 4 MB enlarged ring that was 150,000 page faults and a sixth of the throughput
// (docs/enlarge-bench.md). Message libraries over RDMA set the same knobs for the same reason
// (MVAPICH2 and Open MPI's memory hooks keep freed memory mapped).
#pragma once

#include <cstddef>
#include <string>

namespace iwarp::enlarge {

// Blocks up to this size come from the heap, not from mmap of their own.
inline constexpr std::size_t kHeapBlockLimit = 32u << 20;  // glibc's largest M_MMAP_THRESHOLD
// This much free memory at the top of a heap stays mapped before it is given back.
inline constexpr std::size_t kHeapTrimThreshold = 64u << 20;

struct AllocatorTuning {
  bool applied = false;       // both mallopt() calls took effect
  bool left_to_user = false;  // GLIBC_TUNABLES sets malloc: no mallopt() call was made
  std::string text;           // what was done, or why nothing was, in one line
};

// Sets M_MMAP_THRESHOLD and M_TRIM_THRESHOLD of the process (once: later calls return the
// first call's answer). Leaves malloc alone when GLIBC_TUNABLES sets any glibc.malloc tunable
// (the user chose). Under ASan's allocator mallopt() refuses and the answer says so; TSan's
// lets glibc's mallopt() answer, which then tunes nothing that allocates.
const AllocatorTuning& keep_large_blocks_in_heap();

}  // namespace iwarp::enlarge
