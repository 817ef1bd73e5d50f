// UringQueue: one io_uring ring, fed by the threads that submit and drained by the queue's own
// completion thread. Internal to transport/file.
//
// Submission happens on the caller's thread (Enqueue), under the ring's submission lock: the
// I/O goes to the kernel within the call, with no hand-off to another thread. The queue's
// thread alone reaps completions (the completion ring), and continues or completes each op.
// At most `depth` I/Os are in the kernel (fdatasyncs included); beyond that ops wait in an
// overflow queue, which completions refill the ring from. Each I/O is a read or write on the
// file's O_DIRECT or buffered fd (FileOp::direct, chosen by the transport; an O_DIRECT request
// the kernel refuses with EINVAL is redone buffered). An op completes only when all of its
// bytes moved: a short read or write is continued from where it stopped, never reported done.
// A read that meets the end of the file fails with the reason FileHandle::CheckIntact gives
// (truncated / vanished). ENOSPC, EIO and other errors fail the op with a message naming the
// errno, the file and the offset.
//
// Sync groups: the writes of one group (FileOp::group) are completed together, after one
// IORING_OP_FSYNC (DATASYNC) issued once the last of them landed; a failed write completes at
// once with its error, a failed fdatasync fails the group's landed writes.
//
// Deadlines: an op still waiting for room when its deadline passes completes with Timeout,
// within one tick (kTick) and untouched. An I/O already in the kernel is not recalled: it
// completes with its result (file I/O ends in device time).
//
// Registered files: each file's fds take slots of a sparse registered-file table (when slots are
// free), so that I/Os skip the per-request file lookup; the slots go with the FileHandle.
//
// Thread contract: Enqueue and RegisterFile are thread-safe; `complete` runs on the queue's
// thread, once per op. Stop (also by the destructor) fails what waits for room with Canceled,
// waits for the I/Os in the kernel, joins the thread. Idempotent.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/unique_fd.h"
#include "ferry/status.h"
#include "ferry/types.h"
#include "transport/file/file_handle.h"
#include "transport/transport.h"

struct io_uring;

namespace ferry::file {

struct FileOp;

// The writes of one Submit call to one file that asked for durability.
struct SyncGroup {
  std::shared_ptr<FileHandle> file;
  size_t pending = 0;           // writes not yet landed (queue thread only once enqueued)
  std::vector<FileOp*> landed;  // written, waiting for the fdatasync
};

struct FileOp {
  Slice* slice = nullptr;  // the transport's; completed through `complete`
  std::shared_ptr<FileHandle> file;
  AccessPin pin;  // the local registry's pin, held until the op completes
  OpCode op = OpCode::kRead;
  uint64_t mem = 0;     // memory address of the first byte
  uint64_t offset = 0;  // file offset of the first byte
  uint64_t length = 0;
  uint64_t window_end = 0;           // file offset where the buffer's window ends
  uint64_t done = 0;                 // bytes moved so far
  bool direct = false;               // the next I/O goes O_DIRECT
  uint8_t io_path = 0;               // kSliceIoDirect | kSliceIoBuffered, as it went
  std::shared_ptr<SyncGroup> group;  // set: complete only after the group's fdatasync
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // Set with an error the kernel returned for this op (ENOSPC, EIO, end of file inside the
  // window): a verdict about the request, reported as Slice::answered.
  bool answered = false;
  bool is_sync = false;       // internal: this op is a group's fdatasync
  uint32_t zero_results = 0;  // internal: writes that moved nothing, in a row
};

class UringQueue {
 public:
  using CompleteFn = std::function<void(FileOp* op, const Status& status)>;
  static constexpr std::chrono::milliseconds kTick{20};

  // `depth`: I/Os in the kernel at once, 1..4096. `max_queued`: ops waiting beyond that before
  // Enqueue answers Again. Unavailable when io_uring cannot be set up here (the errno named).
  static Result<std::unique_ptr<UringQueue>> Create(unsigned depth, size_t max_queued,
                                                    CompleteFn complete);
  // Whether Create can work here: sets up a tiny ring, passes one NOP through it, closes it.
  // Unavailable naming
  // the errno (ENOSYS: no io_uring; EPERM: refused, e.g. by a seccomp filter or
  // kernel.io_uring_disabled) or the missing feature. Thread-safe; no thread started.
  static Status Probe();
  ~UringQueue();
  UringQueue(const UringQueue&) = delete;
  UringQueue& operator=(const UringQueue&) = delete;

  // Queues `ops` (all or none): Again when the queue holds max_queued already, Canceled after
  // Stop. On success the queue owns completing them.
  Status Enqueue(std::vector<FileOp*>& ops) EXCLUDES(mu_);
  // Gives `file`'s fds registered-file slots when some are free (best effort).
  void RegisterFile(FileHandle* file);
  void Stop() EXCLUDES(mu_);

 private:
  UringQueue(unsigned depth, size_t max_queued, CompleteFn complete);
  void Run();
  // Puts `op`'s next I/O in the ring (which has room: in_kernel_ < depth_).
  void PrepareLocked(FileOp* op) REQUIRES(mu_);
  // Moves overflow ops into the ring while it has room, then submits.
  void RefillLocked() REQUIRES(mu_);
  // `ops` next I/Os (continuations, fdatasyncs), from the completion thread.
  void Resubmit(std::vector<FileOp*>& ops) EXCLUDES(mu_);
  void OnResult(FileOp* op, int res, std::vector<FileOp*>* again);
  void Finish(FileOp* op, const Status& status, std::vector<FileOp*>* again);
  void ExpireWaiting() EXCLUDES(mu_);

  const unsigned depth_;
  const size_t max_queued_;
  const CompleteFn complete_;
  std::unique_ptr<io_uring> ring_;

  // The submission side of the ring, the overflow queue and the count of I/Os in the kernel.
  Mutex mu_;
  unsigned in_kernel_ GUARDED_BY(mu_) = 0;
  std::deque<FileOp*> waiting_ GUARDED_BY(mu_);   // no room in the ring yet
  std::vector<FileOp*> expired_ GUARDED_BY(mu_);  // found past their deadline by a refill
  bool stopping_ GUARDED_BY(mu_) = false;

  // Shared with the FileHandles that hold slots, which may outlive the queue (ring: null then).
  struct SlotTable {
    Mutex mu;
    io_uring* ring GUARDED_BY(mu) = nullptr;
    std::vector<int> free GUARDED_BY(mu);
  };
  std::shared_ptr<SlotTable> slots_ = std::make_shared<SlotTable>();

  std::thread thread_;
  std::atomic<bool> joined_{false};
};

}  // namespace ferry::file
