// DeadlineTimer: runs short callbacks at their deadlines, on a thread of its own, so that
// deadlines are kept by a timer and never by a scan (issue: one slow peer never delays another).
// A callback must not block: it may finish tasks and post work elsewhere, never call a peer.
//
// Thread contract: thread-safe. Callbacks run on the timer thread (or on the caller of RunDue),
// one at a time, without the timer's lock held; they may Schedule and Cancel.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/clock.h"
#include "common/mutex.h"

namespace ferry::engine {

class DeadlineTimer {
 public:
  using TimePoint = Clock::TimePoint;

  // `clock` is borrowed for the timer's life. With Clock::Real(), Start() runs a thread that
  // sleeps until the earliest deadline; with another clock, tests call RunDue() themselves.
  explicit DeadlineTimer(Clock* clock) : clock_(clock) {}
  ~DeadlineTimer() { Stop(); }
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Starts the timer thread. Idempotent.
  void Start();
  // Joins the thread; callbacks not yet due never run. Idempotent.
  void Stop();

  // `fn` runs once `when` has passed (at once on the next turn when it already has). Returns an
  // id for Cancel; never 0.
  uint64_t Schedule(TimePoint when, std::function<void()> fn);
  // Forgets a callback that has not started. False when it already ran, runs, or never was.
  bool Cancel(uint64_t id);

  // Runs every callback due at clock->Now(); returns how many ran.
  size_t RunDue();
  // Callbacks waiting (tests, stats).
  size_t pending() const;

 private:
  void Loop();

  Clock* const clock_;
  mutable Mutex mu_;
  CondVar changed_;
  std::map<std::pair<TimePoint, uint64_t>, std::function<void()>> queue_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, TimePoint> when_ GUARDED_BY(mu_);  // id -> its key's time
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  bool stopping_ GUARDED_BY(mu_) = false;
  // When the sleeping thread wakes next; min() while it is awake (it then looks at the queue
  // before sleeping again), max() before Start.
  TimePoint wake_at_ GUARDED_BY(mu_) = TimePoint::max();
  std::thread thread_;
};

}  // namespace ferry::engine
