#include "common/failure_log.h"

#include <gtest/gtest.h>

#include "common/connect_error.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

TEST(FailureStreakTest, FirstFailureThenSummariesThenRecovery) {
  ManualClock clock;
  FailureStreak streak;
  std::optional<std::string> line = streak.Failed("store s", "refused", clock.Now(), 10s);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line, "store s failing: refused");
  for (int i = 0; i < 1000; ++i) {
    clock.Advance(1ms);
    EXPECT_FALSE(streak.Failed("store s", "refused", clock.Now(), 10s).has_value());
  }
  clock.Advance(9s);
  line = streak.Failed("store s", "timed out", clock.Now(), 10s);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line, "store s still failing: 1001 more failures in the last 10.0 s; latest: timed out");
  EXPECT_FALSE(streak.Failed("store s", "refused", clock.Now(), 10s).has_value());
  clock.Advance(500ms);
  line = streak.Succeeded("store s", clock.Now());
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(*line, "store s recovered after 1003 failures in 10.5 s");
  EXPECT_FALSE(streak.failing());
  EXPECT_FALSE(streak.Succeeded("store s", clock.Now()).has_value());  // healthy: silent
  // A new streak starts with its own first line.
  EXPECT_TRUE(streak.Failed("store s", "refused", clock.Now(), 10s).has_value());
}

TEST(FailureLogTest, CountsItsLines) {
  ManualClock clock;
  FailureLog log("thing", LogLevel::kDebug, &clock, 1s);
  for (int i = 0; i < 100; ++i) log.Failed("down");
  EXPECT_TRUE(log.failing());
  EXPECT_EQ(log.lines(), 1u);
  clock.Advance(1s);
  log.Failed("down");
  EXPECT_EQ(log.lines(), 2u);
  log.Succeeded();
  log.Succeeded();
  EXPECT_EQ(log.lines(), 3u);
  EXPECT_FALSE(log.failing());
}

TEST(ConnectErrorTest, NamesWhatHappened) {
  EXPECT_EQ(ConnectErrnoText(ECONNREFUSED), "connection refused");
  EXPECT_EQ(ConnectErrnoText(EHOSTUNREACH), "no route to host");
  EXPECT_EQ(MillisText(1500us), "2 ms");
  // A name that cannot resolve (RFC 6761 reserves .invalid).
  const std::string dns = DiagnoseConnect({"no-such-host.invalid", 80}, 2000ms);
  EXPECT_EQ(dns.rfind("cannot resolve 'no-such-host.invalid': ", 0), 0u) << dns;
}

}  // namespace
}  // namespace ferry
