// Tasks and batches: the bookkeeping of submitted transfers. Internal to src/engine.
//
// A task moves WAITING -> PENDING -> COMPLETED | FAILED | TIMEOUT | CANCELED exactly once
// (Task::Finish is the only writer of a final state). Its slices may still be with a transport
// for a moment after it ended (a transport completes a slice at most ~50 ms after its deadline,
// and lets nothing of it land after reporting it); meanwhile the task keeps its descriptor
// snapshot, peer link and local pin (so the local memory cannot be unregistered under a late
// READ), and keeps its batch alive through `keep_alive`. The batch's id can be freed at once.
//
// cancelBatch sets Task::canceled; see there for how it meets submission.
//
// Thread contract: Task and Batch are shared between the submitting thread, transport
// completion threads, the deadline timer and peer workers; every mutable field is atomic or
// guarded by the owner's mutex, except the planning fields, which one thread at a time writes
// while no slice of the task is in flight.
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
struct SeriesCounters;

struct Task {
  Batch* batch = nullptr;  // owner; outlives the task
  size_t index = 0;
  TransferRequest request;
  std::chrono::steady_clock::time_point deadline{};

  std::atomic<TransferState> state{TransferState::kWaiting};
  // Bytes of the request's range whose slices a transport confirmed complete, each slice
  // counted once however many attempts carried it (TransferStatus::transferred_bytes).
  std::atomic<uint64_t> transferred{0};
  std::atomic<size_t> slices_left{0};  // slices submitted and not yet completed
  // The size the request is cut into (TransferStatus::slice_size): set by the first plan that
  // builds slices (Impl::SliceSizeFor its transport) and kept by every retry, whatever transport
  // it takes, so that a slice position means the same range on every attempt. 0: not yet.
  std::atomic<uint64_t> slice_size{0};
  // One flag per slice position (slice i covers [i * slice_size, ...) of the request), set by
  // the completion that confirmed it; made by the first plan that builds more than one slice
  // (a single slice's confirmation is `transferred` itself).
  std::unique_ptr<std::atomic<bool>[]> confirmed;

  // Planning fields: written while no slice is in flight, read by completions.
  std::vector<Slice> slices;
  std::shared_ptr<const SegmentDesc> desc;  // the plan's snapshot
  std::shared_ptr<PeerLink> link;
  Transport* transport = nullptr;
  // What the first plan aimed at: a retry may only go to the same target identity.
  uint64_t planned_incarnation = 0;
  uint64_t planned_generation = 0;
  bool refreshed_for_missing_buffer = false;
  PinGuard local_pin;
  // Holds the batch while slices are with a transport or a retry is queued; moved out by the
  // completion that retires the last slice.
  std::shared_ptr<Batch> keep_alive;

  std::atomic<Transport*> carrier{nullptr};  // `transport`, for status readers on other threads
  // The metrics series of the current plan's (transport, peer) (engine_metrics.h), set with
  // `transport`; null before the first plan chose one. Atomic: the deadline timer and
  // cancelBatch read it on other threads; stored with release and loaded with acquire, so that a
  // series a worker just created is seen whole by the thread that ends the task.
  std::atomic<SeriesCounters*> series{nullptr};
  std::atomic<bool> fallback_tried{false};   // another transport was tried after a failure
  std::atomic<uint32_t> retries{0};          // attempts after the first
  std::atomic<uint8_t> file_io{0};  // Slice::io_path of its slices, or-ed (TransferStatus::file_io)
  // Set by cancelBatch. Cancel and submission meet through `canceled` and `slices_left` (both
  // seq_cst): a submitter stores slices_left, then reads canceled, and hands nothing over when
  // it is set; cancel stores canceled, then reads slices_left, and ends the task itself only
  // when it is 0 (else the completion of the last slice ends it). So at least one of them sees
  // the other, and no slice goes to a transport after the task was reported final.
  std::atomic<bool> canceled{false};

  // Figures (TransferStatus), as steady_clock ticks; 0: not yet. submitted_at is written under
  // the batch's mutex before the task is visible; started_at by the first SubmitSlices; ended_at
  // by Finish, before the final state (so a reader that sees the final state sees it).
  Clock::TimePoint::rep submitted_at = 0;
  std::atomic<Clock::TimePoint::rep> started_at{0};
  std::atomic<Clock::TimePoint::rep> ended_at{0};

  Mutex mu;
  Status first_error GUARDED_BY(mu);  // of the current attempt; the final reason once ended
  // Slice::answered of the slice that set first_error: the target answered it (not the link).
  bool first_error_answered GUARDED_BY(mu) = false;

  // Ends the task once at `now`; false when it had already ended. Counts it in its batch, and
  // sets *last_of_batch (when given) to whether it was the batch's last open task: exactly one
  // ending per "every submitted task ended" moment sees true.
  bool Finish(TransferState final_state, const Status& reason,
              Clock::TimePoint now = std::chrono::steady_clock::now(),
              bool* last_of_batch = nullptr);
  TransferStatus Snapshot();
  bool ended() const {
    const TransferState s = state.load();
    return s != TransferState::kWaiting && s != TransferState::kPending;
  }
};

struct Batch : std::enable_shared_from_this<Batch> {
  BatchId id = 0;
  size_t capacity = 0;
  std::deque<Task> tasks;  // stable addresses; grows under mu only

  Mutex mu;
  Status first_error GUARDED_BY(mu);
  std::optional<NotifyMessage> notify GUARDED_BY(mu);  // sent when every task completed
  SegmentId notify_target GUARDED_BY(mu) = 0;
  // The deadline timer's entry for the earliest unfinished task (0: none), and the index below
  // which every task has ended or been expired.
  uint64_t timer_id GUARDED_BY(mu) = 0;
  size_t expire_cursor GUARDED_BY(mu) = 0;
  CondVar ended_cv;  // with mu: notified when the batch is done (waitBatch)

  std::atomic<size_t> submitted{0};
  std::atomic<size_t> completed{0};
  std::atomic<size_t> failed{0};
  std::atomic<uint64_t> transferred{0};
  std::atomic<size_t> ended{0};  // tasks ended; incremented after completed / failed

  BatchStatus Summary();
  bool done() { return ended.load() >= submitted.load(); }  // the one "all ended" test
};

}  // namespace ferry::engine
