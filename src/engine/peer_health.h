// PeerHealth: keeps a failing peer's noise bounded. Per peer it decides
//  - which failures are logged (common/failure_log.h): the first one when the peer starts
//    failing, then one summary per `summary_every` while it keeps failing (with the count since
//    the last line), and one line when it recovers;
//  - whether its descriptor may be re-fetched now: refreshes back off exponentially from
//    `min_backoff` to `max_backoff` while the peer keeps failing, instead of running once per
//    failed task; a success resets both.
//
// Thread contract: thread-safe. Logs through the log facade, never holding its lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/failure_log.h"
#include "common/mutex.h"
#include "ferry/status.h"

namespace ferry::engine {

struct PeerHealthOptions {
  std::chrono::milliseconds summary_every = kFailureSummaryEvery;
  std::chrono::milliseconds min_backoff{50};
  std::chrono::milliseconds max_backoff{5000};
  size_t max_peers = 4096;  // peers remembered; healthy ones are forgotten first
};

class PeerHealth {
 public:
  // `clock` is borrowed for the object's life.
  PeerHealth(Clock* clock, PeerHealthOptions options) : clock_(clock), options_(options) {}

  // A task to `peer` failed with `error` (over `transport`, when one carried it). Logs at most as
  // described above, at warn: "transfers to segment '<peer>' over <transport> failing: ...".
  void ReportFailure(std::string_view peer, const Status& error, std::string_view transport = {});
  // A task to `peer` completed; logs the recovery once when it had been failing.
  void ReportSuccess(std::string_view peer);
  // True (and the backoff advances) when `peer`'s descriptor may be re-fetched now.
  bool AllowRefresh(std::string_view peer);
  void Forget(std::string_view peer);

  // Log lines written and failures seen, all peers (tests).
  uint64_t lines_logged() const;
  uint64_t failures_seen() const;

 private:
  struct State {
    FailureStreak streak;
    std::chrono::milliseconds backoff{0};
    Clock::TimePoint next_refresh{};
  };
  State& StateLocked(std::string_view peer) REQUIRES(mu_);

  Clock* const clock_;
  const PeerHealthOptions options_;
  mutable Mutex mu_;
  std::map<std::string, State, std::less<>> peers_ GUARDED_BY(mu_);
  uint64_t lines_ GUARDED_BY(mu_) = 0;
  uint64_t failures_ GUARDED_BY(mu_) = 0;
};

}  // namespace ferry::engine
