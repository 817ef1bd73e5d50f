#include "engine/deadline_timer.h"

#include <algorithm>

namespace ferry::engine {

void DeadlineTimer::Start() {
  MutexLock lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Loop(); });
}

void DeadlineTimer::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    changed_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
  MutexLock lock(mu_);
  queue_.clear();
  when_.clear();
}

uint64_t DeadlineTimer::Schedule(TimePoint when, std::function<void()> fn) {
  MutexLock lock(mu_);
  const uint64_t id = next_id_++;
  queue_.emplace(std::make_pair(when, id), std::move(fn));
  when_.emplace(id, when);
  // Wake the thread only when it would sleep past this deadline: most deadlines lie beyond the
  // thread's next wake-up, and a wake-up per batch costs a context switch.
  if (when < wake_at_) changed_.NotifyAll();
  return id;
}

bool DeadlineTimer::Cancel(uint64_t id) {
  MutexLock lock(mu_);
  auto it = when_.find(id);
  if (it == when_.end()) return false;
  queue_.erase({it->second, id});
  when_.erase(it);
  return true;
}

size_t DeadlineTimer::pending() const {
  MutexLock lock(mu_);
  return queue_.size();
}

size_t DeadlineTimer::RunDue() {
  size_t ran = 0;
  for (;;) {
    std::function<void()> fn;
    {
      MutexLock lock(mu_);
      if (queue_.empty() || queue_.begin()->first.first > clock_->Now()) return ran;
      auto first = queue_.begin();
      when_.erase(first->first.second);
      fn = std::move(first->second);
      queue_.erase(first);
    }
    fn();
    ++ran;
  }
}

void DeadlineTimer::Loop() {
  for (;;) {
    {
      MutexLock lock(mu_);
      while (!stopping_) {
        if (!queue_.empty() && queue_.begin()->first.first <= clock_->Now()) break;
        // Start() runs with the real clock, which is steady_clock: wait for the earliest
        // deadline itself, and at most a second (every wait is bounded).
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        if (!queue_.empty()) until = std::min(until, queue_.begin()->first.first);
        wake_at_ = until;
        changed_.WaitUntil(mu_, until);
        wake_at_ = TimePoint::min();  // awake: a new deadline needs no wake-up
      }
      if (stopping_) return;
    }
    RunDue();
  }
}

}  // namespace ferry::engine
