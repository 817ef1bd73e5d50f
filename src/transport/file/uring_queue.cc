#include "transport/file/uring_queue.h"

#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/log.h"

namespace ferry::file {

namespace {

constexpr uint64_t kWakeTag = 1;            // user_data of Stop's NOP (ops are pointers, never 1)
constexpr unsigned kRegisteredSlots = 256;  // registered-file table size (two per file)
constexpr uint32_t kMaxZeroWrites = 8;      // writes that move nothing before the op fails

bool PastDeadline(const FileOp& op) { return std::chrono::steady_clock::now() >= op.deadline; }

std::string At(const FileOp& op) {
  return " at offset " + std::to_string(op.offset + op.done) + " (" +
         std::to_string(op.length - op.done) + " bytes left)";
}

Status IoError(const FileOp& op, int err) {
  const char* what = op.is_sync ? "fdatasync of" : op.op == OpCode::kRead ? "reading" : "writing";
  std::string text = FileErrno(op.file->path(), what, err);
  if (!op.is_sync) text += At(op);
  if (err == EBADF && op.op == OpCode::kWrite) {
    return PermissionDeniedError(text + "; the file was opened read-only");
  }
  // ENOSPC, EIO and the rest: the device could not do it (not the request's shape).
  return UnavailableError(std::move(text));
}

}  // namespace

Status UringQueue::Probe() {
  io_uring ring{};
  io_uring_params params{};
  const int rc = io_uring_queue_init_params(2, &ring, &params);
  if (rc < 0) {
    return UnavailableError(std::string("io_uring_queue_init: ") + std::strerror(-rc) +
                            " (io_uring disabled or not supported here)");
  }
  // A filter may allow the setup and refuse io_uring_enter: one NOP goes round trip.
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_nop(sqe);
  const int submitted = io_uring_submit_and_wait(&ring, 1);
  io_uring_queue_exit(&ring);
  if (submitted != 1) {
    return UnavailableError(std::string("io_uring_enter: ") +
                            std::strerror(submitted < 0 ? -submitted : EIO) +
                            " (io_uring disabled or not supported here)");
  }
  if ((params.features & IORING_FEAT_EXT_ARG) == 0) {
    return UnavailableError("io_uring lacks IORING_FEAT_EXT_ARG (Linux >= 5.11 needed)");
  }
  return Status::Ok();
}

Result<std::unique_ptr<UringQueue>> UringQueue::Create(unsigned depth, size_t max_queued,
                                                       CompleteFn complete) {
  if (depth == 0 || depth > 4096) {
    return InvalidArgumentError("file transport queue depth must be 1..4096 (got " +
                                std::to_string(depth) + ")");
  }
  std::unique_ptr<UringQueue> q(new UringQueue(depth, max_queued, std::move(complete)));
  q->ring_ = std::make_unique<io_uring>();
  // Room for `depth` I/Os plus the wake-up NOP of Stop; completions get twice that.
  io_uring_params params{};
  params.flags = IORING_SETUP_CQSIZE;
  params.cq_entries = 2 * (depth + 2);
  const int rc = io_uring_queue_init_params(depth + 2, q->ring_.get(), &params);
  if (rc < 0) {
    q->ring_.reset();
    return UnavailableError(std::string("io_uring_queue_init: ") + std::strerror(-rc) +
                            " (io_uring disabled or not supported here)");
  }
  if ((params.features & IORING_FEAT_EXT_ARG) == 0) {
    // Without it a timed wait would take a submission entry from the completion thread.
    io_uring_queue_exit(q->ring_.get());
    q->ring_.reset();
    return UnavailableError("io_uring lacks IORING_FEAT_EXT_ARG (Linux >= 5.11 needed)");
  }
  if (io_uring_register_files_sparse(q->ring_.get(), kRegisteredSlots) == 0) {
    MutexLock lock(q->slots_->mu);
    q->slots_->ring = q->ring_.get();
    for (int i = static_cast<int>(kRegisteredSlots) - 1; i >= 0; --i) q->slots_->free.push_back(i);
  }
  q->thread_ = std::thread([raw = q.get()] { raw->Run(); });
  return q;
}

UringQueue::UringQueue(unsigned depth, size_t max_queued, CompleteFn complete)
    : depth_(depth), max_queued_(max_queued), complete_(std::move(complete)) {}

UringQueue::~UringQueue() {
  Stop();
  {
    MutexLock lock(slots_->mu);
    slots_->ring = nullptr;
  }
  if (ring_ != nullptr) io_uring_queue_exit(ring_.get());
}

void UringQueue::Stop() {
  {
    MutexLock lock(mu_);
    if (!stopping_ && ring_ != nullptr) {
      stopping_ = true;
      // Wakes the completion thread (the ring keeps two entries beyond depth for this).
      if (io_uring_sqe* sqe = io_uring_get_sqe(ring_.get()); sqe != nullptr) {
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data64(sqe, kWakeTag);
        io_uring_submit(ring_.get());
      }
    }
  }
  if (thread_.joinable() && !joined_.exchange(true)) thread_.join();
}

void UringQueue::RegisterFile(FileHandle* file) {
  std::shared_ptr<SlotTable> table = slots_;
  MutexLock lock(table->mu);
  if (table->ring == nullptr || table->free.size() < 2 || file->buffered_slot() >= 0) return;
  const int buffered = table->free.back();
  table->free.pop_back();
  const int direct = table->free.back();
  table->free.pop_back();
  int fds[2] = {file->buffered_fd(), file->direct_fd()};
  const unsigned count = file->direct_fd() >= 0 ? 2 : 1;
  int slots[2] = {buffered, direct};
  bool ok = true;
  for (unsigned i = 0; i < count; ++i) {
    ok = ok && io_uring_register_files_update(table->ring, static_cast<unsigned>(slots[i]), &fds[i],
                                              1) == 1;
  }
  if (!ok) {
    table->free.push_back(direct);
    table->free.push_back(buffered);
    return;
  }
  file->SetSlots(buffered, count == 2 ? direct : -1, [table, buffered, direct] {
    MutexLock l(table->mu);
    if (table->ring == nullptr) return;
    int none = -1;
    io_uring_register_files_update(table->ring, static_cast<unsigned>(buffered), &none, 1);
    io_uring_register_files_update(table->ring, static_cast<unsigned>(direct), &none, 1);
    table->free.push_back(direct);
    table->free.push_back(buffered);
  });
}

Status UringQueue::Enqueue(std::vector<FileOp*>& ops) {
  MutexLock lock(mu_);
  if (stopping_) return CanceledError("the file transport is stopping");
  const size_t room = depth_ - std::min(in_kernel_, depth_);
  if (!waiting_.empty() && waiting_.size() + ops.size() > max_queued_ + room) {
    return AgainError("the file transport's queue holds " + std::to_string(waiting_.size()) +
                      " requests");
  }
  // Behind what already waits, in order.
  waiting_.insert(waiting_.end(), ops.begin(), ops.end());
  RefillLocked();
  return Status::Ok();
}

void UringQueue::PrepareLocked(FileOp* op) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  // in_kernel_ < depth_ and the ring has depth_ + 2 entries: never null.
  const FileHandle& f = *op->file;
  if (op->is_sync) {
    const int slot = f.buffered_slot();
    io_uring_prep_fsync(sqe, slot >= 0 ? slot : f.buffered_fd(), IORING_FSYNC_DATASYNC);
    if (slot >= 0) sqe->flags |= IOSQE_FIXED_FILE;
  } else {
    const uint64_t left = op->length - op->done;
    // Past a partial direct I/O the rest may be unaligned: it goes buffered.
    if (op->direct && !f.DirectAllowed(op->mem + op->done, op->offset + op->done, left)) {
      op->direct = false;
    }
    const int slot = op->direct ? f.direct_slot() : f.buffered_slot();
    const int fd = slot >= 0 ? slot : (op->direct ? f.direct_fd() : f.buffered_fd());
    // One I/O moves at most 1 GiB; the rest continues as a short completion would.
    const auto len = static_cast<unsigned>(std::min<uint64_t>(left, uint64_t{1} << 30));
    void* mem = reinterpret_cast<void*>(op->mem + op->done);
    if (op->op == OpCode::kRead) {
      io_uring_prep_read(sqe, fd, mem, len, op->offset + op->done);
    } else {
      io_uring_prep_write(sqe, fd, mem, len, op->offset + op->done);
    }
    if (slot >= 0) sqe->flags |= IOSQE_FIXED_FILE;
  }
  io_uring_sqe_set_data(sqe, op);
  ++in_kernel_;
}

void UringQueue::RefillLocked() {
  while (!waiting_.empty() && in_kernel_ < depth_) {
    FileOp* op = waiting_.front();
    waiting_.pop_front();
    if (op->done == 0 && !op->is_sync && PastDeadline(*op)) {
      expired_.push_back(op);  // completed by the completion thread, outside mu_
      continue;
    }
    PrepareLocked(op);
  }
  io_uring_submit(ring_.get());
}

void UringQueue::Resubmit(std::vector<FileOp*>& ops) {
  MutexLock lock(mu_);
  // Continuations go first: they hold bytes already moved.
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) waiting_.push_front(*it);
  ops.clear();
  RefillLocked();
}

void UringQueue::Finish(FileOp* op, const Status& status, std::vector<FileOp*>* again) {
  if (op->group != nullptr && !op->is_sync) {
    SyncGroup& g = *op->group;
    --g.pending;
    if (status.ok()) {
      g.landed.push_back(op);
    } else {
      complete_(op, status);
    }
    if (g.pending == 0 && !g.landed.empty()) {
      auto* sync = new FileOp();
      sync->is_sync = true;
      sync->file = g.file;
      sync->group = op->group;
      again->push_back(sync);
    }
    return;
  }
  if (op->is_sync) {
    std::shared_ptr<SyncGroup> g = std::move(op->group);
    for (FileOp* w : g->landed) {
      w->answered = op->answered;
      complete_(w, status);
    }
    g->landed.clear();
    delete op;
    return;
  }
  complete_(op, status);
}

void UringQueue::OnResult(FileOp* op, int res, std::vector<FileOp*>* again) {
  // An error from here on is the kernel's answer to this op: a verdict about the request.
  if (op->is_sync) {
    op->answered = res < 0;
    Finish(op, res < 0 ? IoError(*op, -res) : Status::Ok(), again);
    return;
  }
  if (res < 0) {
    const int err = -res;
    if (err == EAGAIN || err == EINTR) {
      again->push_back(op);
      return;
    }
    if (err == EINVAL && op->direct) {  // the file system refused this O_DIRECT shape
      op->direct = false;
      again->push_back(op);
      return;
    }
    op->answered = true;
    Finish(op, IoError(*op, err), again);
    return;
  }
  if (res == 0) {
    if (op->op == OpCode::kRead) {
      // End of file inside the window: the file shrank (or went) under the transfer.
      Status why = op->file->CheckIntact(op->window_end);
      if (why.ok()) {
        why = InvalidArgumentError("file '" + op->file->path() + "' ended" + At(*op) +
                                   ", inside its window");
      }
      op->answered = true;
      Finish(op, why, again);
      return;
    }
    if (++op->zero_results > kMaxZeroWrites) {
      op->answered = true;
      Finish(op,
             UnavailableError("writing file '" + op->file->path() + "' moved no bytes" + At(*op)),
             again);
      return;
    }
    again->push_back(op);
    return;
  }
  op->zero_results = 0;
  // The path the bytes took (an O_DIRECT attempt refused with EINVAL moved none: not counted).
  op->io_path |= op->direct ? kSliceIoDirect : kSliceIoBuffered;
  op->done += static_cast<uint64_t>(res);
  if (op->done < op->length) {  // short: continue from where it stopped
    again->push_back(op);
    return;
  }
  Finish(op, Status::Ok(), again);
}

void UringQueue::ExpireWaiting() {
  std::vector<FileOp*> expired;
  {
    MutexLock lock(mu_);
    expired.swap(expired_);
    auto kept = waiting_.begin();
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      // Only ops that have not started (a continuation holds bytes already moved: it finishes).
      if ((*it)->done == 0 && !(*it)->is_sync && PastDeadline(**it)) {
        expired.push_back(*it);
      } else {
        *kept++ = *it;
      }
    }
    waiting_.erase(kept, waiting_.end());
  }
  std::vector<FileOp*> again;
  for (FileOp* op : expired) {
    Finish(op, TimeoutError("the file I/O was still waiting for room at its deadline"), &again);
  }
  if (!again.empty()) Resubmit(again);
}

void UringQueue::Run() {
  io_uring* ring = ring_.get();
  auto next_tick = std::chrono::steady_clock::now() + kTick;
  std::vector<FileOp*> again;
  std::vector<std::pair<FileOp*, int>> results;  // of one reap
  for (;;) {
    __kernel_timespec ts{};
    const auto wait = std::max(next_tick - std::chrono::steady_clock::now(),
                               std::chrono::steady_clock::duration::zero());
    ts.tv_nsec = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
    io_uring_cqe* cqe = nullptr;
    // A timed wait with IORING_FEAT_EXT_ARG submits nothing: the submission side stays the
    // submitters' (under mu_).
    const int rc = io_uring_wait_cqe_timeout(ring, &cqe, &ts);
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN) {
      FERRY_LOG(kWarn) << "file transport: io_uring_wait_cqe: " << std::strerror(-rc);
    }
    unsigned head = 0;
    unsigned seen = 0;
    results.clear();
    io_uring_for_each_cqe(ring, head, cqe) {
      ++seen;
      const uint64_t data = io_uring_cqe_get_data64(cqe);
      if (data != kWakeTag) results.emplace_back(reinterpret_cast<FileOp*>(data), cqe->res);
    }
    io_uring_cq_advance(ring, seen);
    const auto finished = static_cast<unsigned>(results.size());
    if (finished > 0) {
      // Taken before touching the ops: what a submitter wrote into an op before it released
      // mu_ (and submitted) is visible here by the lock too, not only through the kernel's
      // rings, which ThreadSanitizer cannot see.
      MutexLock lock(mu_);
      in_kernel_ -= finished;
    }
    for (const auto& [op, res] : results) OnResult(op, res, &again);
    bool stopping = false;
    bool idle = false;
    bool expired_empty = true;
    {
      MutexLock lock(mu_);
      for (auto it = again.rbegin(); it != again.rend(); ++it) waiting_.push_front(*it);
      again.clear();
      stopping = stopping_;
      if (stopping) {
        // Nothing new starts; what has bytes moved (continuations, fdatasyncs) still finishes.
        auto kept = waiting_.begin();
        for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
          if ((*it)->done == 0 && !(*it)->is_sync) {
            again.push_back(*it);
          } else {
            *kept++ = *it;
          }
        }
        waiting_.erase(kept, waiting_.end());
      }
      // Also when entries stayed in the submission ring (a submit the kernel refused for the
      // moment, EAGAIN/EBUSY): they are counted in the kernel, so Stop would wait on them.
      if (finished > 0 || !waiting_.empty() || io_uring_sq_ready(ring) > 0) RefillLocked();
      idle = in_kernel_ == 0 && waiting_.empty();
      expired_empty = expired_.empty();
    }
    if (!again.empty()) {  // canceled at stop
      std::vector<FileOp*> canceled;
      canceled.swap(again);
      for (FileOp* op : canceled) {
        Finish(op, CanceledError("the file transport stopped before the I/O started"), &again);
      }
      if (!again.empty()) Resubmit(again);
      continue;
    }
    if (stopping && idle && expired_empty) break;
    if (!expired_empty || std::chrono::steady_clock::now() >= next_tick) {
      ExpireWaiting();
      next_tick = std::chrono::steady_clock::now() + kTick;
    }
  }
}

}  // namespace ferry::file
