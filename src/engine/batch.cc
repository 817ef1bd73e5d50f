#include "engine/batch.h"

namespace ferry::engine {

bool Task::Finish(TransferState final_state, const Status& reason) {
  TransferState current = state.load();
  do {
    if (current != TransferState::kWaiting && current != TransferState::kPending) return false;
  } while (!state.compare_exchange_weak(current, final_state));
  if (final_state == TransferState::kCompleted) {
    batch->completed.fetch_add(1);
  } else {
    {
      MutexLock lock(batch->mu);
      if (batch->first_error.ok()) batch->first_error = reason;
    }
    {
      MutexLock lock(mu);
      first_error = reason;
    }
    batch->failed.fetch_add(1);
  }
  return true;
}

TransferStatus Task::Snapshot() {
  TransferStatus out;
  out.state = state.load();
  out.transferred_bytes = transferred.load();
  if (Transport* t = carrier.load()) out.transport = std::string(t->name());
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
    if (first_error.code() == StatusCode::kTimeout && out.state == TransferState::kFailed) {
      out.state = TransferState::kTimeout;
    }
  }
  return out;
}

}  // namespace ferry::engine
