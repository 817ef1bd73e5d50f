#include "engine/staging_copier.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/log.h"

namespace ferry::engine {

using namespace std::chrono_literals;

namespace {
char kBounceTag;  // Slice::task of every slice this copier hands to a transport
}  // namespace

// What the transport carries for one original slice: the same request, from a chunk.
struct StagingCopier::Bounced : Slice {
  Slice* original = nullptr;
  Transport* transport = nullptr;
  std::shared_ptr<PeerLink> link;
  void* chunk = nullptr;
  bool waited = false;  // counted in chunk_waits once
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

void* StagingCopier::TakeChunkLocked(Status* error) {
  if (!free_chunks_.empty()) {
    void* chunk = free_chunks_.back();
    free_chunks_.pop_back();
    return chunk;
  }
  if (all_chunks_.size() >= options_.max_chunks || !chunk_error_.ok()) {
    if (all_chunks_.empty()) *error = chunk_error_;  // none was ever allocated: never will be
    return nullptr;
  }
  Result<void*> chunk = ops_.allocate_pinned(options_.chunk_bytes);
  if (!chunk.ok()) {
    chunk_error_ = chunk.status().WithContext("allocating pinned host memory for staging");
    if (all_chunks_.empty()) *error = chunk_error_;
    return nullptr;  // with chunks in use: wait for one of them
  }
  all_chunks_.push_back(*chunk);
  counters_.chunks = all_chunks_.size();
  return *chunk;
}

void StagingCopier::ReleaseChunk(void* chunk) {
  if (chunk == nullptr) return;
  MutexLock lock(mu_);
  free_chunks_.push_back(chunk);
  --chunks_out_;
  cv_.NotifyAll();
}

void StagingCopier::Finish(Bounced* b, const Status& status) {
  Slice* original = b->original;
  delete b;
  ctx_->CompleteSlice(original, status);
}

void StagingCopier::Run() {
  mu_.Lock();
  for (;;) {
    if (stopping_) break;
    bool worked = false;
    // One unit of each kind per pass: chunk -> device copies free chunks, so they go first.
    if (!copy_backs_.empty()) {
      Bounced* b = copy_backs_.front();
      copy_backs_.pop_front();
      mu_.Unlock();
      CopyBack(b);
      mu_.Lock();
      worked = true;
    }
    if (!waiting_.empty()) {
      Bounced* b = waiting_.front();
      Status error;
      void* chunk = nullptr;
      if (std::chrono::steady_clock::now() >= b->deadline) {
        error = TimeoutError("the slice waited for a staging chunk until the task's deadline");
      } else {
        chunk = TakeChunkLocked(&error);
      }
      if (chunk != nullptr || !error.ok()) {
        waiting_.pop_front();
        if (chunk != nullptr) {
          b->chunk = chunk;
          ++chunks_out_;
          ++counters_.bounced;
        }
        mu_.Unlock();
        if (chunk != nullptr) {
          StartBounce(b);
        } else {
          Finish(b, error);
        }
        mu_.Lock();
        worked = true;
      } else if (!b->waited) {
        b->waited = true;
        ++counters_.chunk_waits;
      }
    }
    if (!copies_.empty()) {
      Copy c = std::move(copies_.front());
      copies_.pop_front();
      mu_.Unlock();
      RunCopy(c);
      mu_.Lock();
      worked = true;
    }
    if (worked) continue;
    // Idle, or the first waiting slice waits for a chunk: until notified or its deadline.
    auto until = std::chrono::steady_clock::now() + 1s;
    if (!waiting_.empty()) until = std::min(until, waiting_.front()->deadline);
    cv_.WaitUntil(mu_, until);
  }
  std::deque<Bounced*> waiting = std::move(waiting_);
  std::deque<Bounced*> copy_backs = std::move(copy_backs_);
  std::deque<Copy> copies = std::move(copies_);
  mu_.Unlock();
  const Status stopped = CanceledError("the engine stopped (staging copier)");
  for (Bounced* b : waiting) Finish(b, stopped);
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
  if (b->op == OpCode::kWrite) {
    Status copied = ops_.copy(b->chunk, reinterpret_cast<const void*>(b->original->local_addr),
                              b->length);
    if (!copied.ok()) {
      ReleaseChunk(std::exchange(b->chunk, nullptr));
      Finish(b, copied.WithContext("staging device memory to host"));
      return;
    }
  }
  b->local_addr = reinterpret_cast<uint64_t>(b->chunk);
  Slice* const one[] = {b};
  // A full transport queue (Again) is retried here, backing off, until the deadline: the pool
  // bounds what this copier has in the transport's hands far below its queue, so this is rare.
  auto pause = 50us;
  for (;;) {
    Status submitted = b->transport->Submit(*b->link, one);
    if (submitted.ok()) return;  // completes through OnTransportDone, perhaps already did
    if (submitted.code() != StatusCode::kAgain ||
        std::chrono::steady_clock::now() >= b->deadline) {
      ReleaseChunk(std::exchange(b->chunk, nullptr));
      Finish(b, submitted.WithContext("submitting to '" + std::string(b->transport->name()) + "'"));
      return;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, 2ms);
  }
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
  Finish(b, status);
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
