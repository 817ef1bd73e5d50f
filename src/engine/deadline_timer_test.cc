#include "engine/deadline_timer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace ferry::engine {
namespace {

using namespace std::chrono_literals;

TEST(DeadlineTimerTest, RunsCallbacksInDeadlineOrderOnlyWhenDue) {
  ManualClock clock;
  DeadlineTimer timer(&clock);
  std::vector<int> ran;
  timer.Schedule(clock.Now() + 30ms, [&] { ran.push_back(3); });
  timer.Schedule(clock.Now() + 10ms, [&] { ran.push_back(1); });
  timer.Schedule(clock.Now() + 20ms, [&] { ran.push_back(2); });
  EXPECT_EQ(timer.RunDue(), 0u);
  clock.Advance(20ms);
  EXPECT_EQ(timer.RunDue(), 2u);
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  clock.Advance(10ms);
  EXPECT_EQ(timer.RunDue(), 1u);
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(timer.pending(), 0u);
}

TEST(DeadlineTimerTest, CanceledCallbacksNeverRun) {
  ManualClock clock;
  DeadlineTimer timer(&clock);
  int ran = 0;
  const uint64_t a = timer.Schedule(clock.Now() + 5ms, [&] { ++ran; });
  const uint64_t b = timer.Schedule(clock.Now() + 5ms, [&] { ran += 10; });
  EXPECT_NE(a, b);
  EXPECT_TRUE(timer.Cancel(a));
  EXPECT_FALSE(timer.Cancel(a));
  clock.Advance(5ms);
  EXPECT_EQ(timer.RunDue(), 1u);
  EXPECT_EQ(ran, 10);
  EXPECT_FALSE(timer.Cancel(b));  // already ran
}

TEST(DeadlineTimerTest, CallbacksMayScheduleMore) {
  ManualClock clock;
  DeadlineTimer timer(&clock);
  int ran = 0;
  timer.Schedule(clock.Now(), [&] {
    ++ran;
    timer.Schedule(clock.Now(), [&] { ++ran; });
  });
  EXPECT_EQ(timer.RunDue(), 2u);
  EXPECT_EQ(ran, 2);
}

TEST(DeadlineTimerTest, ThreadRunsADueCallbackWithoutBeingPolled) {
  DeadlineTimer timer(Clock::Real());
  timer.Start();
  Mutex mu;
  CondVar cv;
  bool ran = false;
  const auto when = std::chrono::steady_clock::now() + 20ms;
  std::chrono::steady_clock::time_point at{};
  timer.Schedule(when, [&] {
    MutexLock lock(mu);
    ran = true;
    at = std::chrono::steady_clock::now();
    cv.NotifyAll();
  });
  MutexLock lock(mu);
  const auto bound = std::chrono::steady_clock::now() + 5s;
  while (!ran && std::chrono::steady_clock::now() < bound) cv.WaitUntil(mu, bound);
  ASSERT_TRUE(ran);
  EXPECT_GE(at, when);
}

}  // namespace
}  // namespace ferry::engine
