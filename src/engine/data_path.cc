// The data path of TransferEngine::Impl: batches, planning, slices, completions, deadlines,
// STALE retries and notifications.
#include <cstring>
#include <span>
#include <thread>

#include "common/log.h"
#include "engine/engine_impl.h"
#include "rpc/messages.h"

namespace ferry {

using engine::Batch;
using engine::Task;
using namespace std::chrono_literals;

// ---- batches -------------------------------------------------------------------------------

Result<BatchId> TransferEngine::Impl::AllocateBatch(size_t capacity) {
  if (capacity == 0) return InvalidArgumentError("a batch needs room for at least one task");
  auto batch = std::make_unique<Batch>();
  batch->capacity = capacity;
  MutexLock lock(batches_mu_);
  batch->id = next_batch_++;
  const BatchId id = batch->id;
  batches_.emplace(id, std::move(batch));
  return id;
}

Batch* TransferEngine::Impl::FindBatch(BatchId id) {
  MutexLock lock(batches_mu_);
  auto it = batches_.find(id);
  return it == batches_.end() ? nullptr : it->second.get();
}

Status TransferEngine::Impl::FreeBatch(BatchId id) {
  // A task reports its end a moment before its last slice is retired (CompleteSlice); a batch
  // that reports done is freed once that moment has passed, with a short bound.
  const auto deadline = std::chrono::steady_clock::now() + 1s;
  for (;;) {
    {
      MutexLock lock(batches_mu_);
      auto it = batches_.find(id);
      if (it == batches_.end()) return NotFoundError("no batch " + std::to_string(id));
      Batch& batch = *it->second;
      if (batch.Summary().state == TransferState::kPending) {
        return BusyError("batch " + std::to_string(id) + " still has transfers in flight");
      }
      if (batch.slices_in_flight.load() == 0) {
        batches_.erase(it);
        return Status::Ok();
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return BusyError("batch " + std::to_string(id) +
                       " ended, but its transport has not released it yet");
    }
    std::this_thread::sleep_for(50us);
  }
}

Result<TransferStatus> TransferEngine::Impl::TaskStatus(BatchId id, size_t task) {
  Batch* batch = FindBatch(id);
  if (batch == nullptr) return NotFoundError("no batch " + std::to_string(id));
  MutexLock lock(batch->mu);
  if (task >= batch->tasks.size()) {
    return NotFoundError("batch " + std::to_string(id) + " has no task " + std::to_string(task));
  }
  return batch->tasks[task].Snapshot();
}

Result<BatchStatus> TransferEngine::Impl::Summary(BatchId id) {
  Batch* batch = FindBatch(id);
  if (batch == nullptr) return NotFoundError("no batch " + std::to_string(id));
  return batch->Summary();
}

Status TransferEngine::Impl::Submit(BatchId id, const std::vector<TransferRequest>& requests,
                                    const NotifyMessage* notify) {
  Batch* batch = FindBatch(id);
  if (batch == nullptr) return NotFoundError("no batch " + std::to_string(id));
  for (size_t i = 0; i < requests.size(); ++i) {
    const TransferRequest& r = requests[i];
    if (r.source == nullptr && r.length > 0) {
      return InvalidArgumentError("request " + std::to_string(i) + ": null source");
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
    const auto deadline = std::chrono::steady_clock::now() + options_.task_timeout;
    for (const TransferRequest& r : requests) {
      Task& task = batch->tasks.emplace_back();
      task.batch = batch;
      task.index = batch->tasks.size() - 1;
      task.request = r;
      task.deadline = deadline;
      fresh.push_back(&task);
    }
    if (notify != nullptr && !requests.empty()) {
      batch->notify = *notify;
      batch->notify_target = requests[0].target_id;
    }
    batch->submitted.fetch_add(requests.size());
  }
  // Plan every task first, then hand each transport one Submit per peer link with the slices
  // of all the tasks it carries: same-host transports pay one access grant per Submit.
  std::vector<Task*> moving;
  for (Task* task : fresh) {
    if (PlanAndFinishEarly(task)) moving.push_back(task);
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

// ---- planning ------------------------------------------------------------------------------

void TransferEngine::Impl::StartTask(Task* task) {
  if (PlanAndFinishEarly(task)) SubmitSlices(std::span<Task* const>(&task, 1));
}

bool TransferEngine::Impl::PlanAndFinishEarly(Task* task) {
  task->state.store(TransferState::kPending);
  Status planned = PlanTask(task);
  if (!planned.ok()) {
    task->local_pin.Release();
    task->Finish(TransferState::kFailed, planned);
    QueueNotifyIfDone(task->batch);
    return false;
  }
  if (task->slices.empty()) {  // done in place (own segment or zero bytes)
    task->local_pin.Release();
    task->batch->transferred.fetch_add(task->transferred.load());
    task->Finish(TransferState::kCompleted, Status::Ok());
    QueueNotifyIfDone(task->batch);
    return false;
  }
  return true;
}

Status TransferEngine::Impl::PlanTask(Task* task) {
  const TransferRequest& r = task->request;
  task->slices.clear();
  task->transferred.store(0);
  {
    MutexLock lock(task->mu);
    task->first_error = Status::Ok();
  }
  const uint64_t local = reinterpret_cast<uint64_t>(r.source);
  if (!task->local_pin.held() && r.length > 0) {
    Result<PinGuard> pin = registry_->Pin(local, r.length);
    if (!pin.ok()) return pin.status().WithContext("local buffer of the request");
    task->local_pin = std::move(pin).value();
  }
  ASSIGN_OR_RETURN(SegmentHandle target, directory_->Get(r.target_id));
  task->desc = target.desc;
  const SegmentDesc& desc = *task->desc;
  if (desc.name == name_ && desc.incarnation == incarnation_) return LocalCopy(task);
  if (r.length == 0) return Status::Ok();

  const BufferDesc* buffer = desc.FindCovering(r.target_offset, r.length);
  if (buffer == nullptr && !task->stale_retried.exchange(true)) {
    // The cache may predate the peer's registration: refresh once before refusing.
    if (directory_->Sync(desc.name).ok()) return PlanTask(task);
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
  Status last = UnavailableError("no transport connected");
  for (const std::string& name : order) {
    Transport* transport = FindTransport(name);
    Result<std::shared_ptr<PeerLink>> link = GetLink(transport, desc);
    if (!link.ok()) {
      policy_->ReportFailure(name, desc.name);
      last = link.status();
      continue;
    }
    task->transport = transport;
    task->carrier.store(transport);
    task->link = std::move(link).value();
    const std::string_view key = buffer->keys.at(name);
    for (uint64_t done = 0; done < r.length; done += options_.slice_size) {
      Slice slice;
      slice.op = r.opcode;
      slice.local_addr = local + done;
      slice.remote_addr = r.target_offset + done;
      slice.length = std::min<uint64_t>(options_.slice_size, r.length - done);
      slice.remote_generation = buffer->generation;
      slice.peer_incarnation = desc.incarnation;
      slice.remote_key = key;
      slice.task = task;
      task->slices.push_back(slice);
    }
    return Status::Ok();
  }
  return last;
}

Status TransferEngine::Impl::LocalCopy(Task* task) {
  const TransferRequest& r = task->request;
  if (r.length == 0) return Status::Ok();
  ASSIGN_OR_RETURN(PinGuard target, registry_->Pin(r.target_offset, r.length));
  char* local = static_cast<char*>(r.source);
  char* remote = reinterpret_cast<char*>(r.target_offset);
  if (r.opcode == OpCode::kWrite) {
    std::memmove(remote, local, r.length);
  } else {
    std::memmove(local, remote, r.length);
  }
  task->transferred.store(r.length);
  return Status::Ok();
}

Result<std::shared_ptr<PeerLink>> TransferEngine::Impl::GetLink(Transport* transport,
                                                                const SegmentDesc& peer) {
  const std::string key = std::string(transport->name()) + "|" + peer.name;
  {
    MutexLock lock(links_mu_);
    auto it = links_.find(key);
    if (it != links_.end() && it->second.incarnation == peer.incarnation) return it->second.link;
  }
  ASSIGN_OR_RETURN(std::shared_ptr<PeerLink> link, transport->Connect(peer));
  MutexLock lock(links_mu_);
  LinkEntry& entry = links_[key];
  if (entry.link == nullptr || entry.incarnation != peer.incarnation) {
    entry = {peer.incarnation, link};  // a new incarnation gets a new link
  }
  return entry.link;
}

void TransferEngine::Impl::DropLink(std::string_view transport, std::string_view peer) {
  MutexLock lock(links_mu_);
  links_.erase(std::string(transport) + "|" + std::string(peer));
}

// ---- slices and completions ----------------------------------------------------------------

void TransferEngine::Impl::SubmitSlices(std::span<Task* const> tasks) {
  // Chunks keep one huge submission within the transport's queue bound; back-pressure (Again)
  // is retried until the earliest deadline. Slices that could not be queued complete here with
  // the error, so the accounting is the same as for slices that failed in flight. Every task's
  // count is set before the first Submit: completions may run at once, on other threads.
  constexpr size_t kChunk = 1024;
  Transport* transport = tasks.front()->transport;
  PeerLink& link = *tasks.front()->link;
  auto deadline = tasks.front()->deadline;
  std::vector<Slice*> slices;
  for (Task* task : tasks) {
    for (Slice& s : task->slices) slices.push_back(&s);
    task->slices_left.store(task->slices.size());
    task->batch->slices_in_flight.fetch_add(task->slices.size());
    deadline = std::min(deadline, task->deadline);
  }
  for (size_t next = 0; next < slices.size();) {
    const std::span<Slice* const> chunk(slices.data() + next,
                                        std::min(kChunk, slices.size() - next));
    Status s = transport->Submit(link, chunk);
    while (s.code() == StatusCode::kAgain && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(100us);
      s = transport->Submit(link, chunk);
    }
    if (!s.ok()) {
      const Status error = s.WithContext("submitting to '" + std::string(transport->name()) + "'");
      for (size_t i = next; i < slices.size(); ++i) CompleteSlice(slices[i], error);
      return;
    }
    next += chunk.size();
  }
}

void TransferEngine::Impl::CompleteSlice(Slice* slice, const Status& status) {
  Task* task = static_cast<Task*>(slice->task);
  Batch* batch = task->batch;
  if (status.ok()) {
    task->transferred.fetch_add(slice->length);
  } else {
    MutexLock lock(task->mu);
    if (task->first_error.ok()) task->first_error = status;
  }
  if (task->slices_left.fetch_sub(1) == 1) OnAllSlicesDone(task);
  // Last: once this reaches zero the batch (and the task) may be freed.
  batch->slices_in_flight.fetch_sub(1);
}

void TransferEngine::Impl::OnAllSlicesDone(Task* task) {
  Status error;
  {
    MutexLock lock(task->mu);
    error = task->first_error;
  }
  const std::string transport(task->transport->name());
  const std::string peer = task->desc->name;
  if (error.ok()) {
    policy_->ReportSuccess(transport, peer);
    EndAttempt(task);
    if (task->Finish(TransferState::kCompleted, Status::Ok())) {
      task->batch->transferred.fetch_add(task->transferred.load());
    }
    QueueNotifyIfDone(task->batch);
    return;
  }
  // A failure of the transport rather than of the request: avoid that link for a while.
  const StatusCode code = error.code();
  const bool transport_failed = code == StatusCode::kUnavailable || code == StatusCode::kTimeout ||
                                code == StatusCode::kPermissionDenied ||
                                code == StatusCode::kInternal;
  if (transport_failed) {
    policy_->ReportFailure(transport, peer);
    DropLink(transport, peer);  // re-established on next use
  }
  const bool pending = task->state.load() == TransferState::kPending;
  const bool maybe_outdated = code == StatusCode::kStale || code == StatusCode::kUnavailable;
  if (pending && maybe_outdated && !task->stale_retried.exchange(true)) {
    // Planned against an old descriptor (STALE), or the peer was unreachable, perhaps because
    // it restarted elsewhere: refresh the descriptor once and plan again (progress thread).
    directory_->Invalidate(peer);
    QueueRetry(task);
    return;
  }
  if (pending && transport_failed && CanFallBack(task)) {
    QueueRetry(task);  // the failed transport is cooling down: another one goes first now
    return;
  }
  EndAttempt(task);
  task->Finish(TransferState::kFailed, error);
  QueueNotifyIfDone(task->batch);
}

void TransferEngine::Impl::QueueRetry(Task* task) {
  task->batch->slices_in_flight.fetch_add(1);  // keeps the batch alive until retried
  MutexLock lock(progress_mu_);
  retries_.push_back(task);
  progress_cv_.NotifyAll();
}

bool TransferEngine::Impl::CanFallBack(Task* task) {
  if (task->fallback_tried.load() || task->desc == nullptr) return false;
  const TransferRequest& r = task->request;
  const BufferDesc* buffer = task->desc->FindCovering(r.target_offset, r.length);
  if (buffer == nullptr) return false;
  return TransportsFor(*task, *buffer).size() > 1;
}

std::vector<std::string> TransferEngine::Impl::TransportsFor(const Task& task,
                                                             const BufferDesc& buffer) {
  std::vector<std::string> order = policy_->Order(buffer, candidates_, SameHost(*task.desc),
                                                  task.desc->name, task.request.transport);
  // Both sides must have registered their memory with it (the local region may lie outside a
  // cxl window, say).
  task.local_pin.RetainBound(&order);
  return order;
}

void TransferEngine::Impl::EndAttempt(Task* task) {
  task->local_pin.Release();
  task->link.reset();
}

void TransferEngine::Impl::QueueNotifyIfDone(Batch* batch) {
  const BatchStatus summary = batch->Summary();
  if (summary.state != TransferState::kCompleted) return;
  {
    MutexLock lock(batch->mu);
    if (!batch->notify.has_value()) return;
  }
  MutexLock lock(progress_mu_);
  if (std::find(notify_ready_.begin(), notify_ready_.end(), batch) == notify_ready_.end()) {
    batch->slices_in_flight.fetch_add(1);  // keeps the batch until the notification is out
    notify_ready_.push_back(batch);
  }
  progress_cv_.NotifyAll();
}

void TransferEngine::Impl::RetryTask(Task* task) {
  const bool can_fall_back = CanFallBack(task);  // needs the local pin EndAttempt releases
  EndAttempt(task);
  if (task->state.load() != TransferState::kPending) return;  // timed out meanwhile
  Status error;
  {
    MutexLock lock(task->mu);
    error = task->first_error;
  }
  if (error.code() == StatusCode::kUnavailable && !task->fallback_tried.load()) {
    // A new incarnation is worth another try; the same one is down for this transport, and
    // only another transport may still reach it.
    const uint64_t planned = task->desc->incarnation;
    Status synced = directory_->Sync(task->desc->name);
    Result<SegmentHandle> now = directory_->Get(task->request.target_id);
    const bool restarted = synced.ok() && now.ok() && now->desc->incarnation != planned;
    if (!restarted && !can_fall_back) {
      task->Finish(TransferState::kFailed, error);
      QueueNotifyIfDone(task->batch);
      return;
    }
  }
  if (error.code() != StatusCode::kStale) task->fallback_tried.store(true);
  StartTask(task);
}

// ---- the progress thread -------------------------------------------------------------------

void TransferEngine::Impl::ProgressLoop() {
  for (;;) {
    std::deque<Task*> retries;
    std::deque<Batch*> notifies;
    {
      MutexLock lock(progress_mu_);
      if (retries_.empty() && notify_ready_.empty() && !stopping_) {
        progress_cv_.WaitUntil(progress_mu_, std::chrono::steady_clock::now() + 20ms);
      }
      if (stopping_) return;
      retries.swap(retries_);
      notifies.swap(notify_ready_);
    }
    for (Task* task : retries) {
      Batch* batch = task->batch;
      RetryTask(task);
      batch->slices_in_flight.fetch_sub(1);
    }
    for (Batch* batch : notifies) {
      std::optional<NotifyMessage> notify;
      SegmentId target = 0;
      {
        MutexLock lock(batch->mu);
        notify.swap(batch->notify);
        target = batch->notify_target;
      }
      if (notify.has_value()) {
        Status s = SendNotify(target, *notify);
        if (!s.ok()) FERRY_LOG(kWarn) << "notification after batch " << batch->id << ": " << s;
      }
      batch->slices_in_flight.fetch_sub(1);
    }
    ExpireTasks();
  }
}

void TransferEngine::Impl::ExpireTasks() {
  const auto now = std::chrono::steady_clock::now();
  // batches_mu_ keeps FreeBatch away while tasks are looked at; Finish takes batch->mu itself,
  // so the expired tasks are collected first.
  MutexLock lock(batches_mu_);
  for (auto& [id, batch] : batches_) {
    if (batch->Summary().state != TransferState::kPending) continue;
    std::vector<Task*> expired;
    {
      MutexLock batch_lock(batch->mu);
      for (Task& task : batch->tasks) {
        if (task.state.load() == TransferState::kPending && task.deadline <= now) {
          expired.push_back(&task);
        }
      }
    }
    for (Task* task : expired) {
      task->Finish(TransferState::kTimeout,
                   TimeoutError("task did not complete within " +
                                std::to_string(options_.task_timeout.count()) + " ms"));
    }
  }
}

}  // namespace ferry
