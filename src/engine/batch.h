// Tasks and batches: the bookkeeping of submitted transfers. Internal to src/engine.
//
// A task moves WAITING -> PENDING -> COMPLETED | FAILED | TIMEOUT | CANCELED exactly once
// (Task::Finish is the only writer of a final state). Its slices may still be in flight after a
// TIMEOUT; the task keeps its descriptor snapshot, peer link and local pin until the last slice
// completes, and its batch cannot be freed before that.
//
// Thread contract: Task and Batch are shared between the submitting thread, transport
// completion threads and the engine's progress thread; every mutable field is atomic or
// guarded by the owner's mutex.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "core/segment_desc.h"
#include "ferry/transfer_engine.h"
#include "registry/local_registry.h"
#include "transport/transport.h"

namespace ferry::engine {

struct Batch;

struct Task {
  Batch* batch = nullptr;  // owner; outlives the task
  size_t index = 0;
  TransferRequest request;
  std::chrono::steady_clock::time_point deadline{};

  std::atomic<TransferState> state{TransferState::kWaiting};
  std::atomic<uint64_t> transferred{0};
  std::atomic<size_t> slices_left{0};  // slices submitted and not yet completed
  std::atomic<bool> stale_retried{false};

  // Written while no slice is in flight (planning), read by completions.
  std::vector<Slice> slices;
  std::shared_ptr<const SegmentDesc> desc;  // the plan's snapshot
  std::shared_ptr<PeerLink> link;
  Transport* transport = nullptr;
  std::atomic<Transport*> carrier{nullptr};  // `transport`, for status readers on other threads
  std::atomic<bool> fallback_tried{false};   // another transport was tried after a failure
  PinGuard local_pin;

  Mutex mu;
  Status first_error GUARDED_BY(mu);  // of the current attempt

  // Ends the task once; false when it had already ended.
  bool Finish(TransferState final_state, const Status& reason);
  TransferStatus Snapshot();
};

struct Batch {
  BatchId id = 0;
  size_t capacity = 0;
  std::deque<Task> tasks;  // stable addresses; grows under mu only

  Mutex mu;
  Status first_error GUARDED_BY(mu);
  std::optional<NotifyMessage> notify GUARDED_BY(mu);  // sent when every task completed
  SegmentId notify_target GUARDED_BY(mu) = 0;

  std::atomic<size_t> submitted{0};
  std::atomic<size_t> completed{0};
  std::atomic<size_t> failed{0};
  std::atomic<uint64_t> transferred{0};
  std::atomic<size_t> slices_in_flight{0};  // freeBatchID waits for zero

  BatchStatus Summary();
};

}  // namespace ferry::engine
