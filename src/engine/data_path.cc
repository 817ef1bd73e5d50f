// The data path of TransferEngine::Impl: submission, planning, slices, completions, retries and
// deadlines. The rule it keeps (DESIGN.md, Generations): a request is never re-aimed. A task is
// planned against one (incarnation, generation) of its target; a retry may take another
// transport or a new connection to that same target, never another incarnation or generation:
// those end the task FAILED with Stale, and only the cache is refreshed for the next request.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <thread>

#include "common/log.h"
#include "engine/builtin_transports.h"
#include "engine/engine_impl.h"

namespace ferry {

using engine::Batch;
using engine::Task;
using namespace std::chrono_literals;

namespace {

// Attempts after the first, for failures where the target's identity is unchanged.
constexpr uint32_t kMaxRetries = 3;

// Codes that, unless the target answered them (Slice::answered), mean the link or the transport
// failed: cool-down, the link dropped, a retry. Answered, they are the target's verdict.
bool TransportFailure(StatusCode code) {
  return code == StatusCode::kUnavailable || code == StatusCode::kTimeout ||
         code == StatusCode::kPermissionDenied || code == StatusCode::kInternal;
}

Status StaleReason(const Status& error, std::string_view peer) {
  return StaleError("segment '" + std::string(peer) +
                    "' restarted or re-registered the target region since this request was " +
                    "planned, so it was not retried (re-open the segment and re-read its " +
                    "buffers): " + error.message());
}

}  // namespace

// ---- batches -------------------------------------------------------------------------------

Status TransferEngine::Impl::FreeBatch(BatchId id) {
  return batches_.Free(id, [this](Batch& batch) {
    MutexLock lock(batch.mu);
    if (batch.timer_id != 0) timer_.Cancel(std::exchange(batch.timer_id, 0));
  });
}

Result<TransferStatus> TransferEngine::Impl::TaskStatus(BatchId id, size_t task) {
  ASSIGN_OR_RETURN(BatchPtr batch, batches_.Find(id));
  Task* t = nullptr;
  {
    MutexLock lock(batch->mu);
    if (task >= batch->tasks.size()) {
      return NotFoundError("batch " + std::to_string(id) + " has no task " + std::to_string(task));
    }
    t = &batch->tasks[task];
  }
  return t->Snapshot();
}

Result<BatchStatus> TransferEngine::Impl::Summary(BatchId id) {
  ASSIGN_OR_RETURN(BatchPtr batch, batches_.Find(id));
  return batch->Summary();
}

Result<BatchStatus> TransferEngine::Impl::WaitBatch(BatchId id, std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(BatchPtr batch, batches_.Find(id));
  const auto until = std::chrono::steady_clock::now() + timeout;
  {
    MutexLock lock(batch->mu);
    while (!batch->done() && std::chrono::steady_clock::now() < until) {
      batch->ended_cv.WaitUntil(batch->mu, until);
    }
  }
  if (!batch->done()) {
    return TimeoutError("batch " + std::to_string(id) + " still has transfers in flight after " +
                        std::to_string(timeout.count()) + " ms");
  }
  return batch->Summary();
}

Status TransferEngine::Impl::CancelBatch(BatchId id) {
  ASSIGN_OR_RETURN(BatchPtr batch, batches_.Find(id));
  std::vector<Task*> open;
  {
    MutexLock lock(batch->mu);
    for (Task& task : batch->tasks) {
      if (!task.ended()) open.push_back(&task);
    }
  }
  const Status reason = CanceledError("batch " + std::to_string(id) +
                                      " was canceled before the task went to a transport");
  for (Task* task : open) {
    // See Task::canceled: a task with slices out is ended by the completion of its last one.
    task->canceled.store(true);
    if (task->slices_left.load() == 0) EndTask(task, TransferState::kCanceled, reason);
  }
  return Status::Ok();
}

Status TransferEngine::Impl::Submit(BatchId id, const std::vector<TransferRequest>& requests,
                                    const NotifyMessage* notify) {
  ASSIGN_OR_RETURN(BatchPtr batch, batches_.Find(id));
  for (size_t i = 0; i < requests.size(); ++i) {
    const TransferRequest& r = requests[i];
    if (r.source == nullptr && r.length > 0) {
      return InvalidArgumentError("request " + std::to_string(i) + ": null source");
    }
    if (r.opcode != OpCode::kRead && r.opcode != OpCode::kWrite) {
      return InvalidArgumentError("request " + std::to_string(i) + ": unknown opcode");
    }
    if (notify != nullptr && r.target_id != requests[0].target_id) {
      return InvalidArgumentError("a notification follows requests to one segment only");
    }
  }
  std::vector<Task*> fresh;
  {
    MutexLock lock(batch->mu);
    if (notify != nullptr && batch->notify.has_value()) {
      return BusyError("batch " + std::to_string(id) + " already carries a notification");
    }
    if (batch->tasks.size() + requests.size() > batch->capacity) {
      return AgainError("batch " + std::to_string(id) + " has room for " +
                        std::to_string(batch->capacity - batch->tasks.size()) +
                        " more tasks, not " + std::to_string(requests.size()));
    }
    if (requests.empty()) return Status::Ok();
    const auto now = clock_->Now();
    const auto deadline = now + options_.task_timeout;
    const size_t first = batch->tasks.size();
    for (const TransferRequest& r : requests) {
      Task& task = batch->tasks.emplace_back();
      task.batch = batch.get();
      task.index = batch->tasks.size() - 1;
      task.request = r;
      task.deadline = deadline;
      task.submitted_at = now.time_since_epoch().count();
      task.state.store(TransferState::kPending);
      fresh.push_back(&task);
    }
    if (notify != nullptr) {
      batch->notify = *notify;
      batch->notify_target = requests[0].target_id;
    }
    batch->submitted.fetch_add(requests.size());
    if (batch->timer_id == 0) ArmTimerLocked(batch.get(), first);
  }
  // Plan every task first, then hand each transport one Submit per peer link with the slices
  // of all the tasks it carries: same-host transports pay one access grant per Submit.
  std::vector<Task*> moving;
  for (Task* task : fresh) {
    switch (PlanOrEnd(task, /*may_block=*/false)) {
      case Plan::kReady:
        task->keep_alive = batch;
        moving.push_back(task);
        break;
      case Plan::kDeferred:
        DeferPlan(batch, task);
        break;
      case Plan::kEnded:
        break;
    }
  }
  std::stable_sort(moving.begin(), moving.end(), [](const Task* a, const Task* b) {
    return std::less<>()(a->link.get(), b->link.get());
  });
  for (size_t begin = 0; begin < moving.size();) {
    size_t end = begin + 1;
    while (end < moving.size() && moving[end]->link == moving[begin]->link) ++end;
    SubmitSlices(std::span<Task* const>(moving.data() + begin, end - begin));
    begin = end;
  }
  return Status::Ok();
}

// ---- deadlines -----------------------------------------------------------------------------

void TransferEngine::Impl::ArmTimerLocked(Batch* batch, size_t first_open) {
  batch->expire_cursor = std::max(batch->expire_cursor, first_open);
  if (batch->expire_cursor >= batch->tasks.size()) return;
  std::weak_ptr<Batch> weak = batch->weak_from_this();
  batch->timer_id = timer_.Schedule(batch->tasks[batch->expire_cursor].deadline,
                                    [this, weak] { ExpireDue(weak); });
}

void TransferEngine::Impl::ExpireDue(const std::weak_ptr<Batch>& weak) {
  // On the timer thread: no call on a peer, only state changes. Tasks are in submission order,
  // so their deadlines never decrease: the walk stops at the first open task not yet due.
  BatchPtr batch = weak.lock();
  if (batch == nullptr) return;
  std::vector<Task*> expired;
  {
    MutexLock lock(batch->mu);
    batch->timer_id = 0;
    const auto now = clock_->Now();
    size_t& cursor = batch->expire_cursor;
    while (cursor < batch->tasks.size()) {
      Task& task = batch->tasks[cursor];
      if (!task.ended()) {
        if (task.deadline > now) break;
        expired.push_back(&task);
      }
      ++cursor;
    }
    ArmTimerLocked(batch.get(), cursor);
  }
  for (Task* task : expired) {
    EndTask(task, TransferState::kTimeout,
            TimeoutError("task did not complete within " +
                         std::to_string(options_.task_timeout.count()) + " ms"));
  }
}

// ---- planning ------------------------------------------------------------------------------

std::string TransferEngine::Impl::PeerKey(SegmentId id) const {
  Result<std::string> name = directory_->Name(id);
  return name.ok() ? *name : "#" + std::to_string(id);
}

void TransferEngine::Impl::DeferPlan(const BatchPtr& batch, Task* task) {
  Status posted = workers_->Post(PeerKey(task->request.target_id), [this, batch, task] {
    if (task->ended()) {  // expired while it waited
      ReleaseAttempt(task);
      return;
    }
    if (PlanOrEnd(task, /*may_block=*/true) != Plan::kReady) return;
    task->keep_alive = batch;
    SubmitSlices(std::span<Task* const>(&task, 1));
  });
  if (!posted.ok()) EndTask(task, TransferState::kFailed, posted);
}

TransferEngine::Impl::Plan TransferEngine::Impl::PlanOrEnd(Task* task, bool may_block) {
  bool deferred = false;
  Status planned = PlanTask(task, may_block, &deferred);
  if (deferred) return Plan::kDeferred;
  if (!planned.ok()) {
    ReleaseAttempt(task);
    const bool canceled = planned.code() == StatusCode::kCanceled && task->canceled.load();
    EndTask(task, canceled ? TransferState::kCanceled : TransferState::kFailed, planned);
    return Plan::kEnded;
  }
  if (task->slices.empty()) {  // done in place (own segment or zero bytes)
    ReleaseAttempt(task);
    task->batch->transferred.fetch_add(task->transferred.load());
    EndTask(task, TransferState::kCompleted, Status::Ok());
    return Plan::kEnded;
  }
  return Plan::kReady;
}

Status TransferEngine::Impl::PlanTask(Task* task, bool may_block, bool* deferred) {
  const TransferRequest& r = task->request;
  task->slices.clear();
  {
    // Only an open task starts a new attempt: once ended (cancelBatch or the deadline got here
    // first, setting ended_at before taking mu) first_error is its final reason and stays.
    MutexLock lock(task->mu);
    if (task->ended_at.load() != 0) {
      return CanceledError("the task ended (" + std::string(TransferStateName(task->state.load())) +
                           ") before it was planned");
    }
    task->first_error = Status::Ok();
    task->first_error_answered = false;
  }
  // A zero-length request is checked like any other (its local address inside a registered
  // region, its target address inside a published remote-accessible buffer, a transport that
  // reaches it) and then completes in place, moving no byte.
  const uint64_t local = reinterpret_cast<uint64_t>(r.source);
  if (!task->local_pin.held()) {
    Result<PinGuard> pin = registry_->Pin(local, r.length);
    if (!pin.ok()) return pin.status().WithContext("local buffer of the request");
    task->local_pin = std::move(pin).value();
  }
  if (task->local_pin.is_file()) {
    return InvalidArgumentError("the local side of a request must be memory, and " +
                                std::to_string(local) + " lies in a file buffer");
  }
  Result<SegmentHandle> target =
      may_block ? directory_->Get(r.target_id) : directory_->Cached(r.target_id);
  if (!may_block && target.status().code() == StatusCode::kUnavailable) {
    *deferred = true;
    return target.status();
  }
  if (!target.ok()) return target.status();
  task->desc = target->desc;
  const SegmentDesc& desc = *task->desc;
  const BufferDesc* own_file = nullptr;  // a file buffer of this engine: not a memcpy
  if (desc.name == name_ && desc.incarnation == incarnation_) {
    own_file = desc.FindCovering(r.target_offset, r.length);
    if (own_file != nullptr && !own_file->file.has_value()) own_file = nullptr;
  }
  if (desc.name == name_ && desc.incarnation == incarnation_ && own_file == nullptr) {
    if (task->series.load(std::memory_order_acquire) == nullptr) {
      task->series.store(counters_->Series("local", name_), std::memory_order_release);
    }
    bool file_target = false;
    Status copied = LocalCopy(task, &file_target);
    if (!file_target) return copied;
    // A file buffer registered after this cached descriptor was made: refresh it once.
    if (!may_block) {
      *deferred = true;
      return Status::Ok();
    }
    if (task->refreshed_for_missing_buffer) return copied;
    task->refreshed_for_missing_buffer = true;
    RETURN_IF_ERROR(directory_->Sync(desc.name));
    return PlanTask(task, may_block, deferred);
  }

  const BufferDesc* buffer = desc.FindCovering(r.target_offset, r.length);
  if (buffer == nullptr && !task->refreshed_for_missing_buffer) {
    // The cache may predate the peer's registration: refresh once before refusing (on the
    // peer's worker, and no more often than the peer's refresh backoff allows).
    if (!may_block) {
      *deferred = true;
      return Status::Ok();
    }
    task->refreshed_for_missing_buffer = true;
    if (health_->AllowRefresh(desc.name) && directory_->Sync(desc.name).ok()) {
      return PlanTask(task, may_block, deferred);
    }
  }
  if (buffer == nullptr) {
    return InvalidArgumentError(
        "[" + std::to_string(r.target_offset) + ", +" + std::to_string(r.length) +
        ") lies outside every registered buffer of segment '" + desc.name + "'");
  }
  if (!buffer->remote_accessible) {
    return PermissionDeniedError("the target buffer of segment '" + desc.name +
                                 "' is not remote-accessible");
  }
  if (task->planned_incarnation != 0 && (desc.incarnation != task->planned_incarnation ||
                                         buffer->generation != task->planned_generation)) {
    return StaleReason(StaleError("planned against incarnation " +
                                  std::to_string(task->planned_incarnation) + " generation " +
                                  std::to_string(task->planned_generation) + ", now " +
                                  std::to_string(desc.incarnation) + " generation " +
                                  std::to_string(buffer->generation)),
                       desc.name);
  }
  const std::vector<std::string> order = TransportsFor(*task, *buffer);
  if (order.empty() && !r.transport.empty()) {
    return UnavailableError("transport '" + r.transport + "' does not reach segment '" + desc.name +
                            "' (not installed on both sides, the buffer is not " +
                            "registered with it, or it works on one host only)");
  }
  if (order.empty()) {
    return UnavailableError("no transport reaches segment '" + desc.name +
                            "': none of its buffer's transports is installed here");
  }
  if (r.length == 0) return Status::Ok();  // checked; nothing to move
  Status last = UnavailableError("no transport connected");
  for (const std::string& name : order) {
    Transport* transport = FindTransport(name);
    Result<std::shared_ptr<PeerLink>> link = links_.Find(transport, desc);
    if (!link.ok() && !may_block) {
      *deferred = true;  // connecting may wait on the peer
      return Status::Ok();
    }
    if (!link.ok()) link = links_.Get(transport, desc);
    if (!link.ok()) {
      policy_->ReportFailure(name, desc.name);
      last = link.status();
      continue;
    }
    task->transport = transport;
    task->carrier.store(transport);
    // The series lookup takes the counters' lock: once per task and transport, never per slice.
    if (const engine::SeriesCounters* series = task->series.load(std::memory_order_acquire);
        series == nullptr || series->transport != name) {
      task->series.store(counters_->Series(name, desc.name), std::memory_order_release);
    }
    task->link = std::move(link).value();
    task->planned_incarnation = desc.incarnation;
    task->planned_generation = buffer->generation;
    const std::string_view key = buffer->keys.at(name);
    // The first plan's size stays for every retry (Task::slice_size): it is valid for every
    // installed transport (slice_sizes_), so a fallback needs no other.
    uint64_t slice_size = task->slice_size.load(std::memory_order_relaxed);
    if (slice_size == 0) {
      slice_size = SliceSizeFor(transport);
      // Device memory as the local side may go through the staging copier's chunks (a retry may
      // fall back to tcp), so its slices fit one.
      if (stager_ != nullptr && task->local_pin.location().is_device()) {
        slice_size = std::min(slice_size, stager_->chunk_bytes());
      }
      task->slice_size.store(slice_size, std::memory_order_relaxed);
    }
    const uint64_t slice_count = (r.length + slice_size - 1) / slice_size;
    if (task->confirmed == nullptr && slice_count > 1) {  // one slice: `transferred` says it
      task->confirmed = std::make_unique<std::atomic<bool>[]>(slice_count);
    }
    for (uint64_t done = 0; done < r.length; done += slice_size) {
      Slice slice;
      slice.op = r.opcode;
      slice.local_addr = local + done;
      slice.remote_addr = r.target_offset + done;
      slice.length = std::min<uint64_t>(slice_size, r.length - done);
      slice.remote_generation = buffer->generation;
      slice.peer_incarnation = desc.incarnation;
      slice.remote_key = key;
      slice.deadline = task->deadline;
      slice.task = task;
      slice.sync = r.sync;
      task->slices.push_back(slice);
    }
    return Status::Ok();
  }
  return last;
}

Status TransferEngine::Impl::LocalCopy(Task* task, bool* file_target) {
  const TransferRequest& r = task->request;
  // Checked even when empty: the target range must lie in one registered region.
  ASSIGN_OR_RETURN(PinGuard target, registry_->Pin(r.target_offset, r.length));
  if (target.is_file()) {  // never memmove: the file transport carries it
    *file_target = true;
    return NotFoundError(
        "the target is a file buffer of this engine that its cached descriptor does not show");
  }
  if (r.length == 0) return Status::Ok();
  // The copy is a slice in flight for cancelBatch (see Task::canceled).
  task->slices_left.store(1);
  if (task->canceled.load()) {
    task->slices_left.store(0);
    return CanceledError("batch " + std::to_string(task->batch->id) +
                         " was canceled before the copy");
  }
  char* local = static_cast<char*>(r.source);
  char* remote = reinterpret_cast<char*>(r.target_offset);
  // memmove between host buffers; a checked cudaMemcpy when either side is device memory.
  const bool device = target.location().is_device();
  Status copied = r.opcode == OpCode::kWrite ? CopyLocalMemory(remote, local, r.length, device)
                                             : CopyLocalMemory(local, remote, r.length, device);
  if (!copied.ok()) {
    task->slices_left.store(0);
    return copied;
  }
  task->transferred.store(r.length);
  task->slices_left.store(0);
  if (engine::SeriesCounters* series = task->series.load(std::memory_order_acquire)) {
    series->slices_handed.fetch_add(1, std::memory_order_relaxed);
    series->RecordSlice(r.opcode, r.length, true);
  }
  return Status::Ok();
}

std::vector<std::string> TransferEngine::Impl::TransportsFor(const Task& task,
                                                             const BufferDesc& buffer) {
  std::vector<std::string> order = policy_->Order(buffer, candidates_, SameHost(*task.desc),
                                                  task.desc->name, task.request.transport);
  // Both sides must have registered their memory with it (the local region may lie outside a
  // cxl window, say). A file transport registers no memory: it reaches the local side through
  // the task's pin.
  if (!buffer.file.has_value()) {
    task.local_pin.RetainBound(&order);
    return order;
  }
  // A file buffer: a file transport when the file is visible here (Reaches; this engine's own
  // file always), else through the owner (tcp; never through tcp to this engine itself).
  std::vector<std::string> bound = order;
  task.local_pin.RetainBound(&bound);
  const bool own = task.desc->incarnation == incarnation_;
  std::erase_if(order, [&](const std::string& name) {
    for (const engine::Candidate& c : candidates_) {
      if (c.name != name) continue;
      if (c.file_buffers) return !FindTransport(name)->Reaches(*task.desc, buffer);
      return own || std::find(bound.begin(), bound.end(), name) == bound.end();
    }
    return true;
  });
  return order;
}

bool TransferEngine::Impl::CanFallBack(Task* task) {
  if (task->fallback_tried.load() || task->desc == nullptr) return false;
  const TransferRequest& r = task->request;
  const BufferDesc* buffer = task->desc->FindCovering(r.target_offset, r.length);
  if (buffer == nullptr) return false;
  return TransportsFor(*task, *buffer).size() > 1;
}

// ---- slices and completions ----------------------------------------------------------------

namespace {

// Slices a full transport queue turned back, handed over on the peer's worker as room frees.
// Whatever is still here when it goes (the deadline passed, the engine stops) completes with
// an error, so every slice completes exactly once.
constexpr size_t kChunk = 1024;  // slices per Transport::Submit call

struct Backlog {
  TransportContext* ctx = nullptr;
  Transport* transport = nullptr;
  std::shared_ptr<PeerLink> link;
  std::vector<Slice*> slices;
  size_t next = 0;
  std::chrono::steady_clock::time_point deadline{};
  Status leftover_error = CanceledError("the engine stopped before the slice was handed over");

  ~Backlog() {
    for (size_t i = next; i < slices.size(); ++i) ctx->CompleteSlice(slices[i], leftover_error);
  }
};

Status CanceledBeforeHandOver() {
  return CanceledError("the batch was canceled before the slice went to a transport");
}

// Completes, never hands over, the slices still waiting in `b` whose task was canceled.
void DropCanceled(Backlog& b) {
  std::vector<Slice*> dropped;
  auto kept = b.slices.begin() + static_cast<std::ptrdiff_t>(b.next);
  for (auto it = kept; it != b.slices.end(); ++it) {
    if (static_cast<Task*>((*it)->task)->canceled.load()) {
      dropped.push_back(*it);
    } else {
      *kept++ = *it;
    }
  }
  b.slices.erase(kept, b.slices.end());
  for (Slice* s : dropped) b.ctx->CompleteSlice(s, CanceledBeforeHandOver());
}

}  // namespace

void TransferEngine::Impl::SubmitSlices(std::span<Task* const> tasks) {
  // Chunks keep one huge submission within the transport's queue bound. Every task's count is
  // set before the first Submit: completions may run at once, on other threads.
  auto backlog = std::make_shared<Backlog>();
  backlog->ctx = this;
  backlog->transport = tasks.front()->transport;
  backlog->link = tasks.front()->link;
  backlog->deadline = tasks.front()->deadline;
  for (Task* task : tasks) {
    task->slices_left.store(task->slices.size());
    backlog->deadline = std::min(backlog->deadline, task->deadline);
    if (engine::SeriesCounters* series = task->series.load(std::memory_order_acquire)) {
      series->slices_handed.fetch_add(task->slices.size(), std::memory_order_relaxed);
    }
  }
  // Counts first, then the cancel flags (Task::canceled): a canceled task's slices are
  // completed here, never handed over.
  const Clock::TimePoint::rep now = clock_->Now().time_since_epoch().count();
  std::vector<Task*> withheld;
  // Device memory as the local side of a transport that does not reach it goes through the
  // staging copier's pinned chunks (staging_copier.h), never to the transport at its address.
  const bool host_only = !backlog->transport->capabilities().reaches_device_memory;
  std::vector<Slice*> bounced;
  std::vector<Slice*> unreachable;
  for (Task* task : tasks) {
    if (task->canceled.load()) {
      withheld.push_back(task);
      continue;
    }
    std::vector<Slice*>* to = &backlog->slices;
    if (host_only && task->local_pin.location().is_device()) {
      to = stager_ != nullptr ? &bounced : &unreachable;
    }
    for (Slice& s : task->slices) to->push_back(&s);
    if (task->started_at.load(std::memory_order_relaxed) == 0) {
      task->started_at.store(now, std::memory_order_relaxed);  // one attempt at a time
    }
  }
  for (Task* task : withheld) {
    for (Slice& s : task->slices) CompleteSlice(&s, CanceledBeforeHandOver());
  }
  for (Slice* s : unreachable) {
    s->answered = true;  // this side's limit, not the link's failure: no retry, no cool-down
    CompleteSlice(s, UnavailableError("transport '" + std::string(backlog->transport->name()) +
                                      "' does not reach device memory, and this engine has no "
                                      "staging copier for it"));
  }
  if (!bounced.empty()) stager_->Bounce(backlog->transport, backlog->link, bounced);
  if (backlog->slices.empty()) return;
  auto hand_over = [](Backlog& b) -> Status {
    while (b.next < b.slices.size()) {
      const std::span<Slice* const> chunk(b.slices.data() + b.next,
                                          std::min(kChunk, b.slices.size() - b.next));
      Status s = b.transport->Submit(*b.link, chunk);
      if (!s.ok()) return s;
      b.next += chunk.size();
    }
    return Status::Ok();
  };
  Status s = hand_over(*backlog);
  if (s.ok()) return;
  if (s.code() != StatusCode::kAgain) {
    backlog->leftover_error =
        s.WithContext("submitting to '" + std::string(backlog->transport->name()) + "'");
    return;  // ~Backlog completes what was not handed over
  }
  // The transport's queue is full: the rest waits on the peer's worker, not on the caller.
  const std::string peer = tasks.front()->desc->name;
  Status posted = workers_->Post(peer, [backlog, hand_over] {
    auto pause = 50us;
    for (;;) {
      DropCanceled(*backlog);
      Status again = hand_over(*backlog);
      if (again.ok()) return;
      if (again.code() != StatusCode::kAgain) {
        backlog->leftover_error = again;
        return;
      }
      if (std::chrono::steady_clock::now() >= backlog->deadline) {
        backlog->leftover_error = TimeoutError("the transport's queue stayed full until the "
                                               "deadline");
        return;
      }
      std::this_thread::sleep_for(pause);  // back-off on a full queue, on this peer's worker
      pause = std::min<std::chrono::microseconds>(pause * 2, 2ms);
    }
  });
  if (!posted.ok()) backlog->leftover_error = posted;
}

void TransferEngine::Impl::CompleteSlice(Slice* slice, const Status& status) {
  if (CompleteFileIo(slice, status)) return;  // the owner's side of a file access over tcp
  // A slice the staging copier carried from a chunk: it completes the original, after its copy.
  if (stager_ != nullptr && stager_->OnTransportDone(slice, status)) return;
  Task* task = static_cast<Task*>(slice->task);
  if (slice->io_path != 0) task->file_io.fetch_or(slice->io_path, std::memory_order_relaxed);
  // Lock-free and allocation-free (engine_metrics.h); before slices_left lets the task go.
  if (engine::SeriesCounters* series = task->series.load(std::memory_order_acquire)) {
    series->RecordSlice(slice->op, slice->length, status.ok());
  }
  if (status.ok()) {
    // Counted once per slice position: a retry re-sends every slice of the request.
    if (task->confirmed == nullptr) {  // a single slice (no allocation on the small-block path)
      uint64_t none = 0;
      task->transferred.compare_exchange_strong(none, slice->length);
    } else {
      const uint64_t position = (slice->remote_addr - task->request.target_offset) /
                                task->slice_size.load(std::memory_order_relaxed);
      if (!task->confirmed[position].exchange(true)) task->transferred.fetch_add(slice->length);
    }
  } else {
    MutexLock lock(task->mu);
    if (task->first_error.ok()) {
      task->first_error = status;
      task->first_error_answered = slice->answered;
    }
  }
  if (task->slices_left.fetch_sub(1) == 1) {
    // Last slice of the attempt: the batch stays alive through `keep` until this returns.
    BatchPtr keep = std::move(task->keep_alive);
    OnAllSlicesDone(task);
  }
}

void TransferEngine::Impl::OnAllSlicesDone(Task* task) {
  Status error;
  bool answered = false;  // Slice::answered: the target's verdict, the link is fine
  {
    MutexLock lock(task->mu);
    error = task->first_error;
    answered = task->first_error_answered;
  }
  const std::string transport(task->transport->name());
  const std::string peer = task->desc->name;
  if (task->ended()) {  // expired (TIMEOUT) while its slices were out: nothing more to do
    ReleaseAttempt(task);
    return;
  }
  if (!error.ok() && task->canceled.load()) {  // canceled while out: no retry, nothing more
    ReleaseAttempt(task);
    const std::string batch = "batch " + std::to_string(task->batch->id) + " was canceled";
    EndTask(task, TransferState::kCanceled,
            error.code() == StatusCode::kCanceled  // withheld, never handed over
                ? CanceledError(batch + ": " + error.message())
                : CanceledError(batch + " while the task was in flight (" + error.message() +
                                ")"));
    return;
  }
  if (error.ok()) {
    policy_->ReportSuccess(transport, peer);
    health_->ReportSuccess(peer);
    ReleaseAttempt(task);
    task->batch->transferred.fetch_add(task->transferred.load());
    EndTask(task, TransferState::kCompleted, Status::Ok());
    return;
  }
  const StatusCode code = error.code();
  // An error the target answered (Slice::answered: a refusal, its file I/O failing with ENOSPC
  // or EIO) says nothing about the link: no cool-down, the link stays for the other requests on
  // it, and no retry (the same request would get the same answer). Stale and an expired
  // deadline keep their own endings below.
  if (TransportFailure(code) && !answered) {
    policy_->ReportFailure(transport, peer);
    links_.Drop(transport, peer, task->desc->incarnation);  // re-established on next use
  }
  health_->ReportFailure(peer, error, transport);
  if (code == StatusCode::kStale) {
    // The target's identity changed under the plan: refresh the cache for the next request,
    // never retry this one.
    if (engine::SeriesCounters* series = task->series.load(std::memory_order_acquire)) {
      series->stale_refreshes.fetch_add(1, std::memory_order_relaxed);
    }
    if (health_->AllowRefresh(peer)) directory_->Invalidate(peer);
    ReleaseAttempt(task);
    EndTask(task, TransferState::kFailed, StaleReason(error, peer));
    return;
  }
  const bool before_deadline = clock_->Now() < task->deadline;
  if (code == StatusCode::kTimeout && (!before_deadline || answered)) {
    ReleaseAttempt(task);
    EndTask(task, TransferState::kTimeout, error);
    return;
  }
  if (TransportFailure(code) && !answered && before_deadline &&
      task->retries.load() < kMaxRetries) {
    task->retries.fetch_add(1);
    // Counted on the failed attempt's series (the retry may plan another transport), and only
    // once the retry is on its way.
    engine::SeriesCounters* series = task->series.load(std::memory_order_acquire);
    BatchPtr batch = task->batch->shared_from_this();
    Status posted = workers_->Post(peer, [this, batch, task, error] { RetryTask(task, error); });
    if (posted.ok()) {
      if (series != nullptr) series->retries.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    error = error.WithContext(posted.message());
  }
  ReleaseAttempt(task);
  EndTask(task, TransferState::kFailed, error);
}

void TransferEngine::Impl::RetryTask(Task* task, Status error) {
  // On the peer's worker. The link of the failed attempt goes; the local pin stays.
  const bool can_fall_back = CanFallBack(task);
  task->link.reset();
  if (task->ended()) {
    ReleaseAttempt(task);
    return;
  }
  const std::string peer = task->desc->name;
  if (error.code() == StatusCode::kUnavailable && health_->AllowRefresh(peer)) {
    // Unreachable: perhaps it restarted. A new incarnation ends the task Stale (never
    // re-aimed); an unreachable store leaves the cached descriptor, and the plan below decides.
    directory_->Sync(peer).IgnoreError();
  }
  if (can_fall_back) {
    task->fallback_tried.store(true);
    if (engine::SeriesCounters* series = task->series.load(std::memory_order_acquire)) {
      series->fallbacks.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (PlanOrEnd(task, /*may_block=*/true) != Plan::kReady) return;
  task->keep_alive = task->batch->shared_from_this();
  SubmitSlices(std::span<Task* const>(&task, 1));
}

void TransferEngine::Impl::ReleaseAttempt(Task* task) {
  task->local_pin.Release();
  task->link.reset();
}

void TransferEngine::Impl::EndTask(Task* task, TransferState state, const Status& reason) {
  bool last = false;
  const Clock::TimePoint now = clock_->Now();
  if (!task->Finish(state, reason, now, &last)) return;
  // Every caller holds the batch (so the task) alive through this call.
  engine::SeriesCounters* series = task->series.load(std::memory_order_acquire);
  if (series == nullptr) {  // ended before a plan chose a transport (a failure path)
    // A segment id this engine does not know gets no label of its own (never "#<id>"): ids
    // are the caller's, and labels stay names of segments.
    Result<std::string> peer = directory_->Name(task->request.target_id);
    series = counters_->Series(kNoTransport, peer.ok() ? std::string_view(*peer) : kOtherPeer);
  }
  const StatusCode code = state == TransferState::kCompleted ? StatusCode::kOk
                          : reason.ok()                      ? StatusCode::kInternal
                                                             : reason.code();
  series->RecordTaskEnd(code,
                        now - Clock::TimePoint(Clock::TimePoint::duration(task->submitted_at)));
  if (last) AfterBatchEnded(task->batch);
}

void TransferEngine::Impl::AfterBatchEnded(Batch* batch) {
  std::optional<NotifyMessage> notify;
  SegmentId target = 0;
  {
    MutexLock lock(batch->mu);
    // The "last task ended" moment was seen outside mu: a submitTransfer into this batch may
    // have added tasks since (seeing the timer armed, it armed none). Then those tasks are open,
    // the timer is theirs, and the last of them to end comes here again.
    if (batch->ended.load() != batch->submitted.load()) return;
    batch->ended_cv.NotifyAll();
    if (batch->timer_id != 0) timer_.Cancel(std::exchange(batch->timer_id, 0));
    if (batch->completed.load() == batch->submitted.load()) {
      notify.swap(batch->notify);
      target = batch->notify_target;
    }
  }
  // Non-blocking: at the counter's (unreachable) limit the reader is already woken.
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t written = ::write(completion_fd_.get(), &one, sizeof(one));
  if (!notify.has_value()) return;
  // The notification goes after its data, on the target's worker (never on a completion or
  // timer thread).
  BatchPtr keep = batch->shared_from_this();
  const BatchId id = batch->id;
  const std::string peer = PeerKey(target);
  Status posted = workers_->Post(peer, [this, keep, id, target, peer, n = *notify] {
    Status s = SendNotify(target, n);
    // Logged (boundedly) as the peer's failure; the batch itself completed.
    if (!s.ok()) {
      health_->ReportFailure(peer, s.WithContext("notification after batch " + std::to_string(id)));
    }
  });
  if (!posted.ok()) {
    counters_->notifications().send_failures.fetch_add(1, std::memory_order_relaxed);
    health_->ReportFailure(peer, posted.WithContext("notification after batch " + std::to_string(id)));
  }
}

void TransferEngine::Impl::SweepIdleLinks() {
  if (options_.idle_link_timeout.count() <= 0) return;
  Status posted = workers_->Post("~links", [this] {
    links_.DropIdle(options_.idle_link_timeout);
    rpc_client_->CloseExpiredConnections();
  });
  posted.IgnoreError();  // stopping
  timer_.Schedule(clock_->Now() + std::max<std::chrono::milliseconds>(
                                      options_.idle_link_timeout / 2, 100ms),
                  [this] { SweepIdleLinks(); });
}

}  // namespace ferry
