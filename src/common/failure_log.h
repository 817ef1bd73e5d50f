// Bounded logs for something that fails and recovers (a peer, a metadata store, a lease): one
// line when a streak of failures starts, then one summary per `summary_every` while it lasts
// (how many failures since the previous line, and the latest), and one line when it ends. A
// store that is down for an hour under heavy traffic writes a few hundred lines, not millions.
//
//   FailureStreak  the decision and the text, for owners that keep many (PeerHealth, one per
//                  peer) under their own lock. Not thread-safe.
//   FailureLog     one streak with its own lock, writing the lines through the log facade.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/log.h"
#include "common/mutex.h"

namespace ferry {

inline constexpr std::chrono::milliseconds kFailureSummaryEvery{10000};

// Lines, with `subject` naming what fails ("transfers to segment 'b' over tcp",
// "http metadata server h:p/m"):
//   "<subject> failing: <detail>"
//   "<subject> still failing: <n> more failures in the last <s> s; latest: <detail>"
//   "<subject> recovered after <n> failures in <s> s"
// Thread contract: thread-compatible (the owner serializes calls).
class FailureStreak {
 public:
  // A failure at `now`, `detail` saying what happened. The line to log, if one is due.
  std::optional<std::string> Failed(std::string_view subject, std::string_view detail,
                                    Clock::TimePoint now, std::chrono::milliseconds summary_every);
  // A success at `now`. The recovery line when a streak was under way (which it ends).
  std::optional<std::string> Succeeded(std::string_view subject, Clock::TimePoint now);
  bool failing() const { return failing_; }

 private:
  bool failing_ = false;
  uint64_t since_line_ = 0;  // failures since the last line, not counting the one it reported
  uint64_t total_ = 0;       // failures in this streak
  Clock::TimePoint began_{};
  Clock::TimePoint last_line_{};
};

// Thread contract: thread-safe; logs without holding its lock. `clock` is borrowed (null: the
// real clock).
class FailureLog {
 public:
  explicit FailureLog(std::string subject, LogLevel level = LogLevel::kWarn,
                      Clock* clock = nullptr,
                      std::chrono::milliseconds summary_every = kFailureSummaryEvery);
  FailureLog(const FailureLog&) = delete;
  FailureLog& operator=(const FailureLog&) = delete;

  void Failed(std::string_view detail) EXCLUDES(mu_);
  // Logs the recovery (at info) when a streak was under way; otherwise nothing.
  void Succeeded() EXCLUDES(mu_);
  bool failing() const EXCLUDES(mu_);
  // Lines written so far (tests).
  uint64_t lines() const EXCLUDES(mu_);

 private:
  void Write(LogLevel level, const std::string& line);

  const std::string subject_;
  const LogLevel level_;
  Clock* const clock_;
  const std::chrono::milliseconds summary_every_;
  mutable Mutex mu_;
  FailureStreak streak_ GUARDED_BY(mu_);
  uint64_t lines_ GUARDED_BY(mu_) = 0;
};

}  // namespace ferry
