#include "engine/peer_health.h"

#include <gtest/gtest.h>

namespace ferry::engine {
namespace {

using namespace std::chrono_literals;

TEST(PeerHealthTest, AFailingPeerLogsOnceThenSummariesThenRecovery) {
  ManualClock clock;
  PeerHealth health(&clock, {.summary_every = 10s});
  for (int i = 0; i < 10000; ++i) health.ReportFailure("b", UnavailableError("down"));
  EXPECT_EQ(health.lines_logged(), 1u);
  clock.Advance(10s);
  health.ReportFailure("b", UnavailableError("down"));
  EXPECT_EQ(health.lines_logged(), 2u);
  for (int i = 0; i < 100; ++i) health.ReportFailure("b", UnavailableError("down"));
  EXPECT_EQ(health.lines_logged(), 2u);
  health.ReportSuccess("b");
  EXPECT_EQ(health.lines_logged(), 3u);
  health.ReportSuccess("b");  // healthy already: silent
  EXPECT_EQ(health.lines_logged(), 3u);
  EXPECT_EQ(health.failures_seen(), 10101u);
}

TEST(PeerHealthTest, RefreshesBackOffPerPeer) {
  ManualClock clock;
  PeerHealth health(&clock, {.min_backoff = 50ms, .max_backoff = 200ms});
  EXPECT_TRUE(health.AllowRefresh("b"));
  EXPECT_FALSE(health.AllowRefresh("b"));
  EXPECT_TRUE(health.AllowRefresh("c"));  // another peer has its own backoff
  clock.Advance(50ms);
  EXPECT_TRUE(health.AllowRefresh("b"));  // next wait: 100 ms
  clock.Advance(60ms);
  EXPECT_FALSE(health.AllowRefresh("b"));
  clock.Advance(40ms);
  EXPECT_TRUE(health.AllowRefresh("b"));  // next: 200 ms (the cap)
  clock.Advance(200ms);
  EXPECT_TRUE(health.AllowRefresh("b"));
  clock.Advance(199ms);
  EXPECT_FALSE(health.AllowRefresh("b"));
  health.ReportFailure("b", UnavailableError("down"));
  health.ReportSuccess("b");  // recovery resets the backoff
  EXPECT_TRUE(health.AllowRefresh("b"));
}

}  // namespace
}  // namespace ferry::engine
