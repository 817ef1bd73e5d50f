// WaitFor: how tests wait on an event (STYLE.md 18): poll the condition itself, with a bound,
// never sleep and hope. The short pause between checks is part of a bounded wait.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace ferry {

// True once `done()` holds, checked every `poll` for at most `limit`; false if it never did.
inline bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds limit,
                    std::chrono::milliseconds poll = std::chrono::milliseconds(1)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(poll);
  }
  return done();
}

}  // namespace ferry
