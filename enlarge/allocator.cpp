#include "enlarge/allocator.hpp"

#include <fmt/format.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace iwarp::enlarge {

const AllocatorTuning& keep_large_blocks_in_heap() {
  static const AllocatorTuning t = [] {
    AllocatorTuning r;
    if (const char* env = std::getenv("GLIBC_TUNABLES"); env && std::strstr(env, "glibc.malloc.")) {
      r.left_to_user = true;
      r.text = fmt::format("malloc: left as GLIBC_TUNABLES sets it ({})", env);
      return r;
    }
    // mallopt() answers 1 when it took the value. Setting either turns glibc's dynamic
    // threshold off, so both are set: the mmap threshold alone would still trim, the trim
    // threshold alone would map every block above 128 KiB.
    const int mmap_ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapBlockLimit));
    const int trim_ok = mallopt(M_TRIM_THRESHOLD, static_cast<int>(kHeapTrimThreshold));
    r.applied = mmap_ok == 1 && trim_ok == 1;
    r.text = r.applied ? fmt::format(
                             "malloc: blocks up to {} MiB from the heap, up to {} MiB of free "
                             "heap kept mapped (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD)",
                             kHeapBlockLimit >> 20, kHeapTrimThreshold >> 20)
                       : fmt::format(
                             "malloc: mallopt() refused (M_MMAP_THRESHOLD {}, M_TRIM_THRESHOLD "
                             "{}): not glibc's allocator, or not its values; large messages "
                             "may map and fault in their pages one by one",
                             mmap_ok, trim_ok);
    return r;
  }();
  return t;
}

}  // namespace iwarp::enlarge
