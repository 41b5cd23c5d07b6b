// bench/rnic_bench, run several times in a row with tiny settings: every run ends with exit
// status 0 and its table. It used to free memory the RNIC could still write: the RDMA Write
// target as soon as the client's send completions came (TCP had taken the data; the server's
// engine was still placing it), and the buffers of receives it left posted (the next run's
// first messages landed in freed memory); and it never deregistered a region. glibc then
// aborted in free about one run in three, or a run hung on a queue pair in error.
//
// The binary: IWARP_RNIC_BENCH_BIN when tests/CMakeLists.txt defines it, else build/bench/
// rnic_bench next to IWARP_RNIC_BIN (build/rnic). A build without the benchmarks
// (-DIWARP_BUILD_BENCH=OFF, as the ASan build) defines IWARP_RNIC_BENCH_BUILT=0, and this test
// is not compiled there; where it is compiled, a missing binary is a failure, not a skip.
// Until tests/CMakeLists.txt defines IWARP_RNIC_BENCH_BUILT, a sanitizer build (which
// scripts/test.sh configures without the benchmarks) does not compile it either.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/sanitizers.hpp"

#if defined(IWARP_RNIC_BENCH_BUILT)
#define IWARP_TEST_RNIC_BENCH IWARP_RNIC_BENCH_BUILT
#elif IWARP_TEST_ASAN || IWARP_TEST_TSAN
#define IWARP_TEST_RNIC_BENCH 0
#else
#define IWARP_TEST_RNIC_BENCH 1
#endif

#if IWARP_TEST_RNIC_BENCH

namespace {

namespace fs = std::filesystem;

std::string bench_path() {
#ifdef IWARP_RNIC_BENCH_BIN
  return IWARP_RNIC_BENCH_BIN;
#else
  return (fs::path(IWARP_RNIC_BIN).parent_path() / "bench" / "rnic_bench").string();
#endif
}

struct Run {
  int status = -1;  // exit status; -1: killed at the deadline; -2: killed by a signal
  int signal = 0;
  std::string output;
};

Run run_bench(const std::vector<std::string>& args, std::chrono::seconds deadline) {
  const std::string out =
      ::testing::TempDir() + "rnic_bench_regress_" + std::to_string(::getpid()) + ".out";
  std::vector<std::string> argv_s{bench_path()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  Run r;
  int st = 0;
  for (;;) {
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      if (WIFEXITED(st)) {
        r.status = WEXITSTATUS(st);
      } else {
        r.status = -2;
        r.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
      }
      break;
    }
    if (std::chrono::steady_clock::now() - t0 > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  std::remove(out.c_str());
  return r;
}

TEST(RnicBench, RunsCleanlyManyTimesInARow) {
  const std::string path = bench_path();
  ASSERT_TRUE(fs::exists(path))
      << "rnic_bench is not built at " << path
      << " (it is part of the default build: cmake --build <build dir> --target rnic_bench; a "
         "build configured with -DIWARP_BUILD_BENCH=OFF must define IWARP_RNIC_BENCH_BUILT=0 "
         "for unit_tests, see tests/CMakeLists.txt)";
  // Small enough for a shared 2-core machine, large enough that a 1 MiB Write target is its
  // own mapping (freeing it early unmaps memory the server's engine is writing), with two runs
  // per measurement (a receive left posted by the first takes the second's messages).
  const std::vector<std::string> args{"--reps",     "3",   "--mib",       "4",
                                      "--messages", "256", "--pingpongs", "200"};
  // 20 runs, as issue 12 asks: at the old one-in-three failure rate, 20 clean runs in a row
  // happen by chance once in about 3,300 (6 would still pass one time in eleven).
  for (int i = 0; i < 20; ++i) {
    const auto r = run_bench(args, std::chrono::seconds(120));
    ASSERT_EQ(r.status, 0) << "run " << i + 1 << (r.status == -1 ? " hung (killed)" : "")
                           << (r.signal ? " died of signal " + std::to_string(r.signal) : "")
                           << ":\n"
                           << r.output;
    EXPECT_NE(r.output.find("bulk, 1024 KiB RDMA Writes vs writes"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("64-octet ping-pong round trip"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("ratio: rnic relative to raw TCP"), std::string::npos) << r.output;
  }
}

}  // namespace

#endif
