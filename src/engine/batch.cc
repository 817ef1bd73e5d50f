#include "engine/batch.h"

#include <algorithm>

namespace ferry::engine {

bool Task::Finish(TransferState final_state, const Status& reason, Clock::TimePoint now,
                  bool* last_of_batch) {
  // ended_at is the gate: whoever sets it ends the task, and it is in place before any reader
  // can see the final state.
  Clock::TimePoint::rep none = 0;
  if (state.load() != TransferState::kWaiting && state.load() != TransferState::kPending) {
    return false;
  }
  if (!ended_at.compare_exchange_strong(
          none, std::max<Clock::TimePoint::rep>(now.time_since_epoch().count(), 1))) {
    return false;
  }
  // The reason goes in before the final state, so that a reader seeing the state sees it.
  if (final_state != TransferState::kCompleted) {
    {
      MutexLock lock(batch->mu);
      if (batch->first_error.ok()) batch->first_error = reason;
    }
    MutexLock lock(mu);
    first_error = reason;
  }
  state.store(final_state);
  if (final_state == TransferState::kCompleted) {
    batch->completed.fetch_add(1);
  } else {
    batch->failed.fetch_add(1);
  }
  const size_t ended_now = batch->ended.fetch_add(1) + 1;
  if (last_of_batch != nullptr) *last_of_batch = ended_now == batch->submitted.load();
  return true;
}

TransferStatus Task::Snapshot() {
  TransferStatus out;
  out.state = state.load();
  out.transferred_bytes = transferred.load();
  if (Transport* t = carrier.load()) out.transport = std::string(t->name());
  auto at = [](Clock::TimePoint::rep ticks) {
    return Clock::TimePoint(Clock::TimePoint::duration(ticks));
  };
  out.submitted_at = at(submitted_at);
  out.started_at = at(started_at.load(std::memory_order_relaxed));
  if (out.done()) out.ended_at = at(ended_at.load());
  out.retries = retries.load(std::memory_order_relaxed);
  out.slice_size = slice_size.load(std::memory_order_relaxed);
  switch (file_io.load(std::memory_order_relaxed)) {
    case kSliceIoDirect:
      out.file_io = "direct";
      break;
    case kSliceIoBuffered:
      out.file_io = "buffered";
      break;
    case kSliceIoDirect | kSliceIoBuffered:
      out.file_io = "direct+buffered";
      break;
    default:
      break;
  }
  if (out.state != TransferState::kCompleted) {
    MutexLock lock(mu);
    out.reason = first_error;
  }
  return out;
}

BatchStatus Batch::Summary() {
  BatchStatus out;
  out.tasks = submitted.load();
  out.completed = completed.load();
  out.failed = failed.load();
  out.transferred_bytes = transferred.load();
  if (out.completed + out.failed < out.tasks) {
    out.state = TransferState::kPending;
  } else if (out.failed == 0) {
    out.state = TransferState::kCompleted;
  } else {
    out.state = TransferState::kFailed;
  }
  if (out.failed > 0) {
    MutexLock lock(mu);
    out.first_error = first_error;
    if (out.state == TransferState::kFailed && first_error.code() == StatusCode::kTimeout) {
      out.state = TransferState::kTimeout;
    }
    if (out.state == TransferState::kFailed && first_error.code() == StatusCode::kCanceled) {
      out.state = TransferState::kCanceled;
    }
  }
  return out;
}

}  // namespace ferry::engine
