#include "engine/notification_box.h"

#include <iterator>
#include <string>

namespace ferry::engine {

Status NotificationBox::Push(NotifyMessage message) {
  const uint64_t size = message.name.size() + message.payload.size();
  MutexLock lock(mu_);
  if (messages_.size() >= max_count_ || size > max_bytes_ || bytes_ > max_bytes_ - size) {
    ++refused_;
    return BusyError("the receiver holds " + std::to_string(messages_.size()) +
                     " notifications (" + std::to_string(bytes_) + " bytes) not yet taken; " +
                     "caps are " + std::to_string(max_count_) + " and " +
                     std::to_string(max_bytes_) + " bytes");
  }
  bytes_ += size;
  messages_.push_back(std::move(message));
  return Status::Ok();
}

std::vector<NotifyMessage> NotificationBox::TakeAll() {
  MutexLock lock(mu_);
  std::vector<NotifyMessage> out(std::make_move_iterator(messages_.begin()),
                                 std::make_move_iterator(messages_.end()));
  messages_.clear();
  bytes_ = 0;
  return out;
}

size_t NotificationBox::count() const {
  MutexLock lock(mu_);
  return messages_.size();
}

uint64_t NotificationBox::bytes() const {
  MutexLock lock(mu_);
  return bytes_;
}

uint64_t NotificationBox::refused() const {
  MutexLock lock(mu_);
  return refused_;
}

}  // namespace ferry::engine
