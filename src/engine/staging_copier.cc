#include "engine/staging_copier.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/log.h"

namespace ferry::engine {

using namespace std::chrono_literals;

namespace {
char kBounceTag;  // Slice::task of every slice this copier hands to a transport
// After a failed pinned allocation, how long until the next try.
constexpr std::chrono::milliseconds kAllocBackoff{100};
}  // namespace

// What the transport carries for one original slice: the same request, from a chunk.
struct StagingCopier::Bounced : Slice {
  Slice* original = nullptr;
  Transport* transport = nullptr;
  std::shared_ptr<PeerLink> link;
  void* chunk = nullptr;
  bool copied = false;    // a WRITE's bytes are in the chunk (kept across a retry)
  uint32_t attempts = 0;  // Submits turned back with Again
  bool waited = false;    // counted in chunk_waits once
};

StagingCopier::StagingCopier(StagingOps ops, StagingOptions options, TransportContext* ctx)
    : ops_(std::move(ops)), options_(options), ctx_(ctx) {
  thread_ = std::thread([this] { Run(); });
}

StagingCopier::~StagingCopier() {
  Stop();
  MutexLock lock(mu_);
  if (chunks_out_ != 0) {
    // A transport still holds a chunk (it was not stopped first): leaking is safer than freeing
    // memory it may still write.
    FERRY_LOG(kWarn) << "staging copier: " << chunks_out_
                     << " pinned chunks still in a transport's hands at exit; not freed";
    return;
  }
  for (void* chunk : all_chunks_) ops_.free_pinned(chunk);
}

void StagingCopier::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

StagingCopier::Counters StagingCopier::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

void StagingCopier::Bounce(Transport* transport, std::shared_ptr<PeerLink> link,
                           std::span<Slice* const> slices) {
  std::vector<Bounced*> made;
  made.reserve(slices.size());
  for (Slice* s : slices) {
    if (s->length > options_.chunk_bytes) {
      ctx_->CompleteSlice(s, InvalidArgumentError(
                                 "a slice of device memory staged through host memory is at most " +
                                 std::to_string(options_.chunk_bytes) + " bytes, not " +
                                 std::to_string(s->length)));
      continue;
    }
    auto* b = new Bounced();
    static_cast<Slice&>(*b) = *s;
    b->task = &kBounceTag;
    b->answered = false;
    b->io_path = 0;
    b->original = s;
    b->transport = transport;
    b->link = link;
    made.push_back(b);
  }
  {
    MutexLock lock(mu_);
    if (!stopping_) {
      for (Bounced* b : made) next_expiry_ = std::min(next_expiry_, b->deadline);
      waiting_.insert(waiting_.end(), made.begin(), made.end());
      cv_.NotifyAll();
      return;
    }
  }
  for (Bounced* b : made) Finish(b, CanceledError("the engine is stopping (staging copier)"));
}

bool StagingCopier::OnTransportDone(Slice* slice, const Status& status) {
  if (slice->task != &kBounceTag) return false;
  auto* b = static_cast<Bounced*>(slice);
  b->original->answered = b->answered;
  b->original->io_path = b->io_path;
  Status result = status;
  if (status.ok() && b->op == OpCode::kRead) {
    MutexLock lock(mu_);
    if (!stopping_) {
      copy_backs_.push_back(b);  // the copier's thread copies chunk -> device, then completes
      cv_.NotifyAll();
      return true;
    }
    result = CanceledError("the engine stopped before the read bytes were copied to the device");
  }
  ReleaseChunk(std::exchange(b->chunk, nullptr));
  Finish(b, result);
  return true;
}

Status StagingCopier::StartCopy(Copy copy) {
  MutexLock lock(mu_);
  if (stopping_) return CanceledError("the engine is stopping (staging copier)");
  if (copies_.size() >= options_.max_copies) {
    return AgainError("the staging copier has " + std::to_string(copies_.size()) +
                      " device copies queued (its limit)");
  }
  copies_.push_back(std::move(copy));
  cv_.NotifyAll();
  return Status::Ok();
}

void StagingCopier::ReleaseChunk(void* chunk) {
  if (chunk == nullptr) return;
  MutexLock lock(mu_);
  free_chunks_.push_back(chunk);
  --chunks_out_;
  cv_.NotifyAll();
}

void StagingCopier::Finish(Bounced* b, const Status& status, bool local) {
  Slice* original = b->original;
  if (local && !status.ok()) original->answered = true;  // not the link's failure
  delete b;
  ctx_->CompleteSlice(original, status);
}

std::vector<StagingCopier::Bounced*> StagingCopier::TakeExpiredLocked(
    std::chrono::steady_clock::time_point now) {
  std::vector<Bounced*> expired;
  next_expiry_ = std::chrono::steady_clock::time_point::max();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Bounced* b = *it;
    if (b->deadline > now) {
      next_expiry_ = std::min(next_expiry_, b->deadline);
      ++it;
      continue;
    }
    if (b->chunk != nullptr) {  // a retrying head: its chunk goes back
      free_chunks_.push_back(std::exchange(b->chunk, nullptr));
      --chunks_out_;
    }
    expired.push_back(b);
    it = waiting_.erase(it);
  }
  return expired;
}

bool StagingCopier::ServeFirstWaitingLocked(std::chrono::steady_clock::time_point now) {
  Bounced* b = waiting_.front();
  // Canceled (as the engine's backlog does), or past its deadline (asked now, not at the pass's
  // start: the slice may have come in since): it ends here, never handed over.
  Status dropped;
  if (options_.canceled && options_.canceled(b->original)) {
    dropped = CanceledError("the batch was canceled before the slice went to a transport");
  } else if (std::chrono::steady_clock::now() >= b->deadline) {
    dropped = TimeoutError("the slice waited for a staging chunk until the task's deadline");
  }
  if (!dropped.ok()) {
    waiting_.pop_front();
    if (b->chunk != nullptr) {
      free_chunks_.push_back(std::exchange(b->chunk, nullptr));
      --chunks_out_;
    }
    mu_.Unlock();
    Finish(b, dropped);
    mu_.Lock();
    return true;
  }
  if (b->chunk != nullptr) {  // turned back by a full transport queue: retried when due
    if (now < retry_at_) return false;
    waiting_.pop_front();
    mu_.Unlock();
    StartBounce(b);
    mu_.Lock();
    return true;
  }
  if (!free_chunks_.empty()) {
    b->chunk = free_chunks_.back();
    free_chunks_.pop_back();
    ++chunks_out_;
    ++counters_.bounced;
    waiting_.pop_front();
    mu_.Unlock();
    StartBounce(b);
    mu_.Lock();
    return true;
  }
  const bool backing_off = !alloc_error_.ok() && now < alloc_failed_at_ + kAllocBackoff;
  if (all_chunks_.size() < options_.max_chunks && !backing_off) {
    // Allocated without the lock (cudaHostAlloc is slow, and the first call makes the CUDA
    // context): completions and target copies go on meanwhile. Only this thread allocates.
    mu_.Unlock();
    Result<void*> chunk = ops_.allocate_pinned(options_.chunk_bytes);
    mu_.Lock();
    if (chunk.ok()) {
      all_chunks_.push_back(*chunk);
      free_chunks_.push_back(*chunk);
      counters_.chunks = all_chunks_.size();
      alloc_error_ = Status::Ok();
    } else {
      alloc_error_ =
          AgainError("allocating " + std::to_string(options_.chunk_bytes) +
                     " bytes of pinned host memory for staging: " + chunk.status().message());
      alloc_failed_at_ = std::chrono::steady_clock::now();
    }
    return true;  // the next pass takes the chunk, or fails or waits below
  }
  if (all_chunks_.empty() && !alloc_error_.ok()) {
    // No chunk exists to wait for: fail at once rather than at the deadline.
    waiting_.pop_front();
    const Status error = alloc_error_;
    mu_.Unlock();
    Finish(b, error, /*local=*/true);
    mu_.Lock();
    return true;
  }
  if (!b->waited) {  // every chunk is out: wait for one (ReleaseChunk wakes this thread)
    b->waited = true;
    ++counters_.chunk_waits;
  }
  return false;
}

void StagingCopier::Run() {
  mu_.Lock();
  while (!stopping_) {
    const auto now = std::chrono::steady_clock::now();
    bool worked = false;
    if (now >= next_expiry_) {
      std::vector<Bounced*> expired = TakeExpiredLocked(now);
      if (!expired.empty()) {
        cv_.NotifyAll();  // chunks may have come back
        mu_.Unlock();
        for (Bounced* b : expired) {
          Finish(b, TimeoutError("the slice waited for a staging chunk until the task's deadline"));
        }
        mu_.Lock();
        worked = true;
      }
    }
    // One unit of each kind per pass: chunk -> device copies free chunks, so they go first.
    if (!copy_backs_.empty()) {
      Bounced* b = copy_backs_.front();
      copy_backs_.pop_front();
      mu_.Unlock();
      CopyBack(b);
      mu_.Lock();
      worked = true;
    }
    if (!waiting_.empty() && ServeFirstWaitingLocked(now)) worked = true;
    if (!copies_.empty()) {
      Copy c = std::move(copies_.front());
      copies_.pop_front();
      mu_.Unlock();
      RunCopy(c);
      mu_.Lock();
      worked = true;
    }
    if (worked) continue;
    // Idle, or the head waits (for a chunk, a retry, the allocation back-off): until notified,
    // the earliest deadline in the queue, or the head's next try.
    auto until = now + std::chrono::seconds(1);
    until = std::min(until, next_expiry_);
    if (!waiting_.empty()) {
      if (waiting_.front()->chunk != nullptr) until = std::min(until, retry_at_);
      if (!alloc_error_.ok()) until = std::min(until, alloc_failed_at_ + kAllocBackoff);
    }
    cv_.WaitUntil(mu_, until);
  }
  std::deque<Bounced*> waiting = std::move(waiting_);
  std::deque<Bounced*> copy_backs = std::move(copy_backs_);
  std::deque<Copy> copies = std::move(copies_);
  mu_.Unlock();
  const Status stopped = CanceledError("the engine stopped (staging copier)");
  for (Bounced* b : waiting) {
    ReleaseChunk(std::exchange(b->chunk, nullptr));  // a retrying head holds one
    Finish(b, stopped);
  }
  for (Bounced* b : copy_backs) {
    ReleaseChunk(std::exchange(b->chunk, nullptr));
    Finish(b, stopped);
  }
  for (Copy& c : copies) {
    c.pin.Release();
    c.done(stopped);
  }
}

void StagingCopier::StartBounce(Bounced* b) {
  if (b->op == OpCode::kWrite && !b->copied) {
    Status copied =
        ops_.copy(b->chunk, reinterpret_cast<const void*>(b->original->local_addr), b->length);
    if (!copied.ok()) {
      ReleaseChunk(std::exchange(b->chunk, nullptr));
      Finish(b, copied.WithContext("staging device memory to host"), /*local=*/true);
      return;
    }
    b->copied = true;
    if (std::chrono::steady_clock::now() >= b->deadline) {  // the copy took it past the deadline
      ReleaseChunk(std::exchange(b->chunk, nullptr));
      Finish(b, TimeoutError("the task's deadline passed while its bytes were staged"));
      return;
    }
  }
  b->local_addr = reinterpret_cast<uint64_t>(b->chunk);
  Slice* const one[] = {b};
  // Held across Submit: a completion inside it frees `b` (and its references) at once.
  Transport* const transport = b->transport;
  const std::shared_ptr<PeerLink> link = b->link;
  Status submitted = transport->Submit(*link, one);
  if (submitted.ok()) return;  // completes through OnTransportDone, perhaps already did
  const auto now = std::chrono::steady_clock::now();
  if (submitted.code() == StatusCode::kAgain && now < b->deadline) {
    // A full queue: back at the head, keeping its chunk (and a WRITE's copied bytes), tried
    // again after a back-off; the thread serves everything else meanwhile.
    MutexLock lock(mu_);
    if (!stopping_) {
      const auto pause = std::min<std::chrono::microseconds>(
          std::chrono::microseconds(int64_t{50} << std::min<uint32_t>(b->attempts, 6)),
          std::chrono::milliseconds(2));
      ++b->attempts;
      retry_at_ = now + pause;
      next_expiry_ = std::min(next_expiry_, b->deadline);
      waiting_.push_front(b);
      return;
    }
    submitted = CanceledError("the engine stopped while the transport's queue was full");
  }
  ReleaseChunk(std::exchange(b->chunk, nullptr));
  Finish(b, submitted.WithContext("submitting to '" + std::string(transport->name()) + "'"));
}

void StagingCopier::CopyBack(Bounced* b) {
  Status status;
  if (std::chrono::steady_clock::now() >= b->deadline) {
    status = TimeoutError(
        "the read's bytes arrived after the task's deadline; they were not copied to the device");
  } else {
    status = ops_.copy(reinterpret_cast<void*>(b->original->local_addr), b->chunk, b->length);
    if (!status.ok()) status = status.WithContext("staging host memory to the device");
  }
  ReleaseChunk(std::exchange(b->chunk, nullptr));
  Finish(b, status, /*local=*/true);
}

void StagingCopier::RunCopy(Copy& c) {
  Status status;
  if (std::chrono::steady_clock::now() >= c.deadline) {
    status = TimeoutError("the access's deadline passed before its device copy began");
  } else {
    status = ops_.copy(c.dst, c.src, c.length);
    if (!status.ok()) status = status.WithContext("device memory access through staging");
  }
  {
    MutexLock lock(mu_);
    ++counters_.target_copies;
  }
  c.pin.Release();  // the access ended: an unregister waiting on it may go on
  c.done(status);
}

}  // namespace ferry::engine
