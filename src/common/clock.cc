#include "common/clock.h"

namespace ferry {
namespace {

class RealClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* clock = new RealClock();  // never destroyed: usable during shutdown
  return clock;
}

}  // namespace ferry
