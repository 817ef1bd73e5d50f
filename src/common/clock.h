// Clock: the injectable time source (DESIGN.md seam), so leases, TTLs and cache expiry can be
// tested without sleeping.
#pragma once

#include <atomic>
#include <chrono>

namespace ferry {

// Thread contract: implementations are thread-safe.
class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;

  // The process-wide real clock (steady_clock). Never null; lives forever.
  static Clock* Real();
};

// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(TimePoint start = TimePoint{}) : now_ns_(start.time_since_epoch().count()) {}
  TimePoint Now() const override {
    return TimePoint(TimePoint::duration(now_ns_.load(std::memory_order_acquire)));
  }
  void Advance(std::chrono::nanoseconds by) {
    now_ns_.fetch_add(by.count(), std::memory_order_acq_rel);
  }

 private:
  std::atomic<TimePoint::rep> now_ns_;
};

}  // namespace ferry
