// StagingCopier: moves bytes between host memory and memory the CPU must not touch (device
// memory) for the transports that reach such memory only through staging
// (TransportCapabilities::stages_device_memory: tcp). Both ends of a transfer go through it:
//
//   Initiator (Bounce): a slice whose local side is device memory is carried by the transport
//   from a pinned host chunk of this copier's pool instead. A WRITE's bytes are copied device ->
//   chunk, then the slice goes to the transport; a READ goes to the transport at once and its
//   bytes are copied chunk -> device once the transport completed it. One copy runs at a time,
//   on this copier's thread, so the copy of one chunk overlaps the sending of the previous one
//   (the transport's own threads send). The pool is bounded: slices wait, in order, for a chunk.
//   The original slice completes through the context exactly once, after its bytes are in place,
//   carrying the transport's Slice::answered and io_path.
//
//   Target (StartCopy): a transport's target that staged an access to device memory
//   (TransportContext::StartStagedIo) has its bytes copied between its staging and the device
//   here, with the access's pin held until the copy ended.
//
// Deadlines: a slice that waits for a chunk (wherever it is in the queue), or whose READ bytes
// arrived, past its deadline completes Timeout and copies nothing into the device; a target copy
// past its deadline ends Timeout without copying. A full transport queue (Again) puts the slice
// back at the head of the queue, retried after a back-off; the thread never sleeps on it.
// Failures of this side's own (a device copy, pinned memory that cannot be had: Again) are
// marked Slice::answered: they say nothing about the link, so the engine neither retries nor
// drops it. The copies themselves are the injected ops (the engine's: checked
// cudaMemcpy and pinned host memory from engine/builtin_transports.h), so this class holds no
// vendor call and its tests run on any machine.
//
// Thread contract: thread-safe. Stop() (also the destructor) completes what waits with Canceled
// and joins the thread; slices still in a transport's hands complete when it lets them go. The
// engine stops the copier before its transports and destroys it after them (the chunks are
// freed then).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "ferry/status.h"
#include "transport/transport.h"

namespace ferry::engine {

struct StagingOps {
  // Copies `length` bytes; either side may be device memory. Returns once they are in place.
  std::function<Status(void* dst, const void* src, size_t length)> copy;
  // Pinned (page-locked) host memory of `length` bytes, page-aligned, and its release.
  std::function<Result<void*>(size_t length)> allocate_pinned;
  std::function<void(void*)> free_pinned;
};

struct StagingOptions {
  uint64_t chunk_bytes = uint64_t{4} << 20;  // a bounced slice is at most this long
  size_t max_chunks = 16;                    // allocated on demand, kept until the copier goes
  size_t max_copies = 1024;                  // target copies queued at once (beyond: Again)
  // Whether a waiting slice's task was canceled (the engine's cancelBatch): such a slice is
  // completed Canceled, never handed to the transport. Unset: none is.
  std::function<bool(const Slice*)> canceled;
};

class StagingCopier {
 public:
  StagingCopier(StagingOps ops, StagingOptions options, TransportContext* ctx);
  ~StagingCopier();
  StagingCopier(const StagingCopier&) = delete;
  StagingCopier& operator=(const StagingCopier&) = delete;

  uint64_t chunk_bytes() const { return options_.chunk_bytes; }

  // Hands `slices` to `transport` on `link` through pinned chunks (see above). Each slice must
  // be at most chunk_bytes() long (else it completes InvalidArgument). Never blocks on a copy
  // or a chunk; every slice ends in exactly one ctx->CompleteSlice.
  void Bounce(Transport* transport, std::shared_ptr<PeerLink> link, std::span<Slice* const> slices);
  // The engine's CompleteSlice first asks here: true when `slice` is one this copier handed to a
  // transport (it is then finished here), false for any other slice.
  bool OnTransportDone(Slice* slice, const Status& status);

  // A target-side copy of `length` bytes from `src` to `dst`, `pin` held until it ended.
  struct Copy {
    void* dst = nullptr;
    const void* src = nullptr;
    uint64_t length = 0;
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    AccessPin pin;
    std::function<void(const Status&)> done;  // exactly once, on the copier's thread
  };
  // Queues `copy`: Ok, and `done` runs once the copy ended; Again when max_copies are queued,
  // Canceled once stopped (`done` never runs on an error return).
  Status StartCopy(Copy copy);

  void Stop();

  struct Counters {
    uint64_t bounced = 0;        // slices carried from a chunk
    uint64_t target_copies = 0;  // StartCopy copies done
    uint64_t chunk_waits = 0;    // slices that waited for a free chunk
    uint64_t chunks = 0;         // chunks allocated (pinned bytes: chunks * chunk_bytes)
  };
  Counters counters() const;

 private:
  struct Bounced;

  void Run();
  // On the copier's thread, without the lock: one unit of work.
  void CopyBack(Bounced* b);
  void RunCopy(Copy& c);
  void StartBounce(Bounced* b);
  // Removes the waiting slices whose deadline passed (releasing a retrying one's chunk) and
  // recomputes next_expiry_.
  std::vector<Bounced*> TakeExpiredLocked(std::chrono::steady_clock::time_point now) REQUIRES(mu_);
  // The head of waiting_ moves on (a chunk, a retry, an allocation, or its failure); false
  // when it must wait. Called with mu_ held; may drop and retake it.
  bool ServeFirstWaitingLocked(std::chrono::steady_clock::time_point now) REQUIRES(mu_);
  void ReleaseChunk(void* chunk);
  // Completes the original slice of `b` with `status` and frees `b` (its chunk already
  // released). `local`: a failure of this side's own, not the link's (Slice::answered).
  void Finish(Bounced* b, const Status& status, bool local = false);

  const StagingOps ops_;
  const StagingOptions options_;
  TransportContext* const ctx_;

  mutable Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::deque<Bounced*> waiting_ GUARDED_BY(mu_);     // slices waiting for a chunk, in order
  std::deque<Bounced*> copy_backs_ GUARDED_BY(mu_);  // READs whose bytes arrived in their chunk
  std::deque<Copy> copies_ GUARDED_BY(mu_);          // target copies
  std::vector<void*> free_chunks_ GUARDED_BY(mu_);
  std::vector<void*> all_chunks_ GUARDED_BY(mu_);
  size_t chunks_out_ GUARDED_BY(mu_) = 0;  // chunks a bounced slice holds
  // The last failed allocation and when: retried after kAllocBackoff; meanwhile, with no chunk
  // at all, waiting slices fail with it at once.
  Status alloc_error_ GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point alloc_failed_at_ GUARDED_BY(mu_);
  // The earliest deadline in waiting_ (or earlier: a scan then recomputes it).
  std::chrono::steady_clock::time_point next_expiry_ GUARDED_BY(mu_) =
      std::chrono::steady_clock::time_point::max();
  // When the head of waiting_, turned back by a full transport queue, is tried again.
  std::chrono::steady_clock::time_point retry_at_ GUARDED_BY(mu_);
  Counters counters_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace ferry::engine
