// CompletionQueue under concurrency: a poll that finds the ring empty takes no lock (its
// counters are atomics changed only under the CQ's mutex), so these tests hold it to what a
// locked poll guaranteed: every completion pushed is taken exactly once, in order per consumer,
// and a consumer that arms the CQ, polls again and then waits on the channel is woken for
// every completion it did not take (no lost wake-up). Meant for TSan too.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "rnic/completion_queue.hpp"

namespace iwarp::rnic {
namespace {

constexpr std::uint64_t kCompletions = 20000;

// Pushes kCompletions completions (wr_id 1, 2, ...) in batches of 1 to 3, never overflowing a
// ring of `depth`, yielding now and then so that the consumers find the ring empty often. Every
// 50th completion goes alone into a ring the consumers have emptied (`taken`: how many they
// took), and waits until it is taken: a consumer that then misses it (a poll that sees it not,
// no event after its arm) is left waiting, and its wait runs out. Stops once `over` (a consumer
// gave up).
void produce(CompletionQueue& cq, std::size_t depth, const std::function<std::uint64_t()>& taken,
             const std::atomic<bool>& over) {
  std::uint64_t next = 1;
  auto drained = [&](std::uint64_t upto) {
    while (taken() < upto && !over.load()) std::this_thread::yield();
  };
  while (next <= kCompletions && !over.load()) {
    std::size_t batch = std::min<std::uint64_t>(1 + next % 3, kCompletions - next + 1);
    const bool alone = next % 50 == 0;
    if (alone) {
      drained(next - 1);
      batch = 1;
    }
    while (cq.used() + batch > depth && !over.load()) std::this_thread::yield();
    Wc wcs[3];
    for (std::size_t i = 0; i < batch; ++i) wcs[i].wr_id = next + i;
    ASSERT_EQ(cq.push(std::span<const Wc>(wcs, batch)), batch);
    next += batch;
    if (alone) drained(next - 1);
    if (next % 7 == 0) std::this_thread::yield();
  }
}

// The verbs pattern of a consumer that blocks: poll; when empty, arm, poll again, and when
// still empty wait for the event (ibv_get_cq_event), acknowledge it and start over. Takes
// completions until `done` says all are taken; returns false when a wait ran out its 10 s (a
// lost wake-up: a completion it did not take and no event for it).
bool arm_and_wait(CompletionQueue& cq, CompletionChannel& ch, std::vector<std::uint64_t>& got,
                  const std::atomic<std::uint64_t>& taken, std::atomic<std::uint64_t>& count) {
  Wc wc[4];
  while (taken.load() + count.load() < kCompletions) {
    int n = cq.poll(wc, false);
    if (n == 0) {
      cq.req_notify(false);
      n = cq.poll(wc, false);
      if (n == 0) {
        if (taken.load() + count.load() >= kCompletions) break;
        if (!ch.wait(std::chrono::seconds(10))) return false;
        cq.ack_events(1);
        continue;
      }
    }
    // (wr_id 0 is no completion to take: the test's wake-up for a waiter left waiting once the
    // spinner took the last ones. Its poll after arming may find it: CI's ASan run did.)
    for (int i = 0; i < n; ++i)
      if (wc[i].wr_id != 0) {
        got.push_back(wc[i].wr_id);
        ++count;
      }
  }
  return true;
}

// One consumer that blocks: every completion arrives, once and in order, and no wait is lost.
TEST(CompletionQueue, AConsumerThatArmsAndWaitsMissesNoCompletion) {
  CompletionChannel ch;
  CompletionQueue cq(16, &ch, nullptr);
  std::vector<std::uint64_t> got;
  const std::atomic<std::uint64_t> none{0};
  std::atomic<std::uint64_t> count{0};
  bool woken = true;
  std::atomic<bool> over{false};
  std::thread consumer([&] {
    woken = arm_and_wait(cq, ch, got, none, count);
    over = true;
  });
  produce(
      cq, 16, [&] { return count.load(); }, over);
  consumer.join();
  EXPECT_TRUE(woken) << "a wait ran out with " << count.load() << " of " << kCompletions
                     << " completions taken";
  ASSERT_EQ(got.size(), kCompletions);
  for (std::uint64_t i = 0; i < kCompletions; ++i) ASSERT_EQ(got[i], i + 1) << "at " << i;
}

// A consumer that spins on the CQ beside one that arms and waits: each completion is taken by
// exactly one of them, each in order, and the waiter is never left waiting.
TEST(CompletionQueue, ASpinnerAndAWaiterTakeEachCompletionOnce) {
  CompletionChannel ch;
  CompletionQueue cq(16, &ch, nullptr);
  std::vector<std::uint64_t> spun, waited;
  std::atomic<std::uint64_t> spun_count{0}, waited_count{0};
  bool woken = true;
  std::atomic<bool> over{false};
  std::thread spinner([&] {
    Wc wc[2];
    while (spun_count.load() + waited_count.load() < kCompletions && !over.load()) {
      const int n = cq.poll(wc, false);
      for (int i = 0; i < n; ++i) spun.push_back(wc[i].wr_id);
      spun_count += static_cast<std::uint64_t>(n);
    }
  });
  std::thread waiter([&] {
    woken = arm_and_wait(cq, ch, waited, spun_count, waited_count);
    if (!woken) over = true;
  });
  produce(
      cq, 16, [&] { return spun_count.load() + waited_count.load(); }, over);
  spinner.join();
  // (The waiter may be waiting for an event no completion will raise: the spinner took the
  // last ones. An event from a completion nobody is left to take ends its wait.)
  while (waited_count.load() + spun_count.load() < kCompletions && !over.load())
    std::this_thread::yield();
  Wc last{};
  last.wr_id = 0;  // (not counted: arm_and_wait takes wr_id 0 for no completion)
  cq.push(last);
  waiter.join();
  EXPECT_TRUE(woken);
  EXPECT_TRUE(std::is_sorted(spun.begin(), spun.end()));
  EXPECT_TRUE(std::is_sorted(waited.begin(), waited.end()));
  std::vector<std::uint64_t> all = spun;
  all.insert(all.end(), waited.begin(), waited.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), kCompletions);
  for (std::uint64_t i = 0; i < kCompletions; ++i) ASSERT_EQ(all[i], i + 1) << "at " << i;
}

}  // namespace
}  // namespace iwarp::rnic
