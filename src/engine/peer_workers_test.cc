#include "engine/peer_workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace ferry::engine {
namespace {

using namespace std::chrono_literals;

// A latch a job can block on, released by the test.
struct Gate {
  Mutex mu;
  CondVar cv;
  bool open = false;
  int entered = 0;
  void Enter() {
    MutexLock lock(mu);
    ++entered;
    cv.NotifyAll();
    const auto bound = std::chrono::steady_clock::now() + 10s;
    while (!open && std::chrono::steady_clock::now() < bound) cv.WaitUntil(mu, bound);
  }
  void Open() {
    MutexLock lock(mu);
    open = true;
    cv.NotifyAll();
  }
  bool WaitEntered(int n) {
    MutexLock lock(mu);
    const auto bound = std::chrono::steady_clock::now() + 10s;
    while (entered < n && std::chrono::steady_clock::now() < bound) cv.WaitUntil(mu, bound);
    return entered >= n;
  }
};

TEST(PeerWorkersTest, ABlockedPeerDelaysOnlyItsOwnJobs) {
  PeerWorkers workers({.max_threads = 4});
  Gate frozen;
  Gate done;
  std::atomic<int> frozen_later{0};
  ASSERT_TRUE(workers.Post("b", [&] { frozen.Enter(); }).ok());
  ASSERT_TRUE(workers.Post("b", [&] { frozen_later.fetch_add(1); }).ok());
  ASSERT_TRUE(frozen.WaitEntered(1));
  // Peer c's jobs all run while b's first job is stuck.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(workers.Post("c", [&] { MutexLock lock(done.mu); ++done.entered; done.cv.NotifyAll(); }).ok());
  }
  ASSERT_TRUE(done.WaitEntered(100));
  EXPECT_EQ(frozen_later.load(), 0);  // b's second job waits behind its first
  frozen.Open();
  workers.Stop();
}

TEST(PeerWorkersTest, JobsOfOneKeyRunInOrderOneAtATime) {
  PeerWorkers workers({.max_threads = 8});
  Mutex mu;
  std::vector<int> order;
  std::atomic<int> running{0};
  std::atomic<int> overlap{0};
  Gate all;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(workers
                    .Post("k",
                          [&, i] {
                            if (running.fetch_add(1) != 0) overlap.fetch_add(1);
                            {
                              MutexLock lock(mu);
                              order.push_back(i);
                            }
                            running.fetch_sub(1);
                            MutexLock lock(all.mu);
                            ++all.entered;
                            all.cv.NotifyAll();
                          })
                    .ok());
  }
  ASSERT_TRUE(all.WaitEntered(200));
  EXPECT_EQ(overlap.load(), 0);
  MutexLock lock(mu);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(order[i], i);
}

TEST(PeerWorkersTest, QueueBoundGivesBusyAndStopDropsQueuedJobs) {
  PeerWorkers workers({.max_threads = 1, .max_queued_per_key = 2});
  Gate gate;
  ASSERT_TRUE(workers.Post("p", [&] { gate.Enter(); }).ok());
  ASSERT_TRUE(gate.WaitEntered(1));
  auto token = std::make_shared<int>(7);
  std::weak_ptr<int> watch = token;
  ASSERT_TRUE(workers.Post("p", [t = token] {}).ok());
  ASSERT_TRUE(workers.Post("p", [t = token] {}).ok());
  token.reset();
  EXPECT_EQ(workers.Post("p", [] {}).code(), StatusCode::kBusy);
  gate.Open();
  workers.Stop();
  EXPECT_TRUE(watch.expired());  // queued jobs (and what they held) are gone
  EXPECT_EQ(workers.Post("p", [] {}).code(), StatusCode::kCanceled);
}

TEST(PeerWorkersTest, IdleThreadsExit) {
  PeerWorkers workers({.max_threads = 4, .idle_exit = 20ms});
  Gate gate;
  ASSERT_TRUE(workers.Post("a", [&] { MutexLock lock(gate.mu); ++gate.entered; gate.cv.NotifyAll(); }).ok());
  ASSERT_TRUE(gate.WaitEntered(1));
  EXPECT_GE(workers.threads(), 1u);
  const auto bound = std::chrono::steady_clock::now() + 5s;
  while (workers.threads() > 0 && std::chrono::steady_clock::now() < bound) {
    std::this_thread::yield();
  }
  EXPECT_EQ(workers.threads(), 0u);
}

}  // namespace
}  // namespace ferry::engine
