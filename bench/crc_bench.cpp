// CRC32c: ISA-L's crc32_iscsi against the inline SSE4.2 loop, by buffer size. The ratio
// column (printed at the end) is what picks mpa::kCrcSmallThreshold: both run in the same
// process on the same buffers, so machine noise affects them alike.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "mpa/crc32c.hpp"

namespace {

std::vector<std::uint8_t> buffer(std::size_t n) {
  std::vector<std::uint8_t> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(i * 131 + 7);
  return b;
}

void BM_Isal(benchmark::State& st) {
  auto b = buffer(static_cast<std::size_t>(st.range(0)));
  for (auto _ : st) benchmark::DoNotOptimize(iwarp::mpa::crc32c_update_isal(~0u, b));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * st.range(0));
}
void BM_Sse42(benchmark::State& st) {
  auto b = buffer(static_cast<std::size_t>(st.range(0)));
  for (auto _ : st) benchmark::DoNotOptimize(iwarp::mpa::crc32c_update_sse42(~0u, b));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * st.range(0));
}
void BM_Chosen(benchmark::State& st) {
  auto b = buffer(static_cast<std::size_t>(st.range(0)));
  for (auto _ : st) benchmark::DoNotOptimize(iwarp::mpa::crc32c_update(~0u, b));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * st.range(0));
}

#define SIZES ->Arg(16)->Arg(64)->Arg(128)->Arg(256)->Arg(512)->Arg(1442)->Arg(4096)->Arg(65536)
BENCHMARK(BM_Isal) SIZES;
BENCHMARK(BM_Sse42) SIZES;
BENCHMARK(BM_Chosen) SIZES;

// Interleaved timing of both paths, printed as a ratio table.
double time_ns(std::uint32_t (*f)(std::uint32_t, iwarp::ByteSpan),
               const std::vector<std::uint8_t>& b, int reps) {
  auto t0 = std::chrono::steady_clock::now();
  std::uint32_t s = 0;
  for (int i = 0; i < reps; ++i) s ^= f(~0u + static_cast<std::uint32_t>(i & 1), b);
  benchmark::DoNotOptimize(s);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         reps;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  std::printf("\n%8s %12s %12s %10s\n", "bytes", "isal ns", "sse4.2 ns", "isal/sse");
  for (std::size_t n : {16, 64, 128, 160, 192, 224, 256, 512, 1024, 1442, 4096, 65536}) {
    auto b = buffer(n);
    int reps = static_cast<int>(std::max<std::size_t>(2000, 4'000'000 / n));
    double best_i = 1e18, best_s = 1e18;
    for (int k = 0; k < 5; ++k) {
      best_i = std::min(best_i, time_ns(iwarp::mpa::crc32c_update_isal, b, reps));
      best_s = std::min(best_s, time_ns(iwarp::mpa::crc32c_update_sse42, b, reps));
    }
    std::printf("%8zu %12.1f %12.1f %10.2f\n", n, best_i, best_s, best_i / best_s);
  }
  std::printf("chosen threshold: SSE4.2 below %zu bytes, ISA-L from there on\n",
              iwarp::mpa::kCrcSmallThreshold);
  return 0;
}
