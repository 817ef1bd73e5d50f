#include "metadata/lease_keeper.h"
#include "common/wait_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

namespace ferry {
namespace {

using namespace std::chrono_literals;

TEST(LeaseKeeperTest, RefreshesOwnedKeysPeriodicallyUntilStopped) {
  std::atomic<int> rounds{0};
  std::atomic<size_t> last_size{0};
  LeaseKeeper keeper(20ms, [&](const std::vector<KeyValue>& owned) {
    last_size = owned.size();
    rounds++;
    return rounds % 2 == 0 ? Status::Ok() : UnavailableError("down");  // errors are retried
  });
  keeper.Track("a", "1");
  keeper.Track("b", "2");
  keeper.Track("a", "3");  // replaces
  EXPECT_TRUE(keeper.Owns("a"));
  keeper.Start();
  keeper.Start();  // idempotent
  ASSERT_TRUE(WaitFor([&] { return rounds >= 3; }, 5s));
  EXPECT_EQ(last_size.load(), 2u);
  keeper.Stop();
  const int stopped_at = rounds;
  // A keeper of the same interval started after Stop(): by its third round, the stopped one
  // would have run again had it not stopped.
  std::atomic<int> later_rounds{0};
  LeaseKeeper later(20ms, [&](const std::vector<KeyValue>&) {
    later_rounds++;
    return Status::Ok();
  });
  later.Start();
  ASSERT_TRUE(WaitFor([&] { return later_rounds >= 3; }, 5s));
  later.Stop();
  EXPECT_EQ(rounds.load(), stopped_at);
  keeper.Forget("b");
  std::vector<KeyValue> all = keeper.TakeAll();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], (KeyValue{"a", "3"}));
  EXPECT_TRUE(keeper.Owned().empty());
}

TEST(LeaseKeeperTest, RefreshSoonRunsARoundWithoutWaitingTheInterval) {
  std::atomic<int> rounds{0};
  LeaseKeeper keeper(std::chrono::hours(1), [&](const std::vector<KeyValue>&) {
    rounds++;
    return Status::Ok();
  });
  keeper.Start();
  keeper.RefreshSoon();
  ASSERT_TRUE(WaitFor([&] { return rounds > 0; }, 5s));
  EXPECT_EQ(rounds.load(), 1);
  keeper.Stop();  // returns promptly despite the hour-long interval
}

}  // namespace
}  // namespace ferry
