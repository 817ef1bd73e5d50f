// NotificationBox: notifications received from peers, kept until getNotifies takes them.
// Bounded by count and bytes, so that nothing a peer sends grows memory without bound: past
// either cap Push refuses (Busy), and the sender's sendNotify fails with that Busy.
//
// Thread contract: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "common/mutex.h"
#include "ferry/status.h"
#include "ferry/transfer_engine.h"

namespace ferry::engine {

class NotificationBox {
 public:
  // A cap of 0 refuses every notification.
  NotificationBox(size_t max_count, uint64_t max_bytes)
      : max_count_(max_count), max_bytes_(max_bytes) {}

  // Keeps `message` (its bytes: name + payload). Busy, keeping nothing, past a cap.
  Status Push(NotifyMessage message);
  // Every message kept, in arrival order; the box is empty afterwards.
  std::vector<NotifyMessage> TakeAll();

  size_t count() const;
  uint64_t bytes() const;
  uint64_t refused() const;

 private:
  const size_t max_count_;
  const uint64_t max_bytes_;
  mutable Mutex mu_;
  std::deque<NotifyMessage> messages_ GUARDED_BY(mu_);
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  uint64_t refused_ GUARDED_BY(mu_) = 0;
};

}  // namespace ferry::engine
