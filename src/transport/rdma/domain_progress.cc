// Domain's progress thread: posting, completions, timeouts, endpoint re-opening and waiting.
#include <poll.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "common/log.h"
#include "transport/rdma/fabric_domain.h"
#include "transport/rdma/provider_scope.h"
#include "transport/rdma/recovery.h"

namespace ferry::rdma {
namespace {

constexpr size_t kCqBatch = 32;
constexpr auto kCheckEvery = std::chrono::milliseconds(5);
constexpr auto kReopenEvery = std::chrono::milliseconds(100);
// How long the progress thread leaves re-opening a closed target endpoint to the caller that
// closed it before trying itself.
constexpr auto kTargetHandover = std::chrono::seconds(5);

int Millis(Clock::duration d) {
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

}  // namespace

void Domain::Loop() {
  while (Intake()) {
    const Clock::time_point now = Clock::now();
    bool progressed = PollInitiator(now);
    progressed = PollTarget() || progressed;
    MaybeRebuildInitiator(now);
    progressed = PostPending(now) || progressed;
    if (now >= next_check_) CheckDeadlines(now);
    if (!progressed) Wait(now);
  }
  Shutdown();
}

bool Domain::Intake() {
  std::vector<std::unique_ptr<Op>> incoming;
  std::vector<std::shared_ptr<MrClose>> closes;
  bool stop = false;
  std::unique_ptr<Endpoint> fresh_initiator;
  std::unique_ptr<Endpoint> fresh_target;
  {
    MutexLock lock(mu_);
    incoming.swap(incoming_);
    closes.swap(closes_);
    stop = stop_requested_;
    fresh_initiator.swap(fresh_initiator_);
    fresh_target.swap(fresh_target_);
    if (opener_done_) {
      opener_done_ = false;
      opening_ = false;
      if (!fresh_initiator) reopen_at_ = Clock::now() + kReopenEvery;
    }
  }
  if (fresh_initiator && !initiator_) initiator_ = std::move(fresh_initiator);
  if (fresh_target && !target_) target_ = std::move(fresh_target);
  if (!closes.empty()) RunCloses(closes, /*drop_target=*/!stop);
  for (auto& op : incoming) {
    if (op->immediate) {
      const Status preset = op->preset;
      FinishOp(std::move(op), preset);
    } else {
      const fi_addr_t dest = op->dest;
      next_pending_deadline_ = std::min(next_pending_deadline_, op->job->deadline);
      pending_[dest].ops.push_back(std::move(op));
    }
  }
  return !stop;
}

void Domain::RunCloses(std::vector<std::shared_ptr<MrClose>>& closes, bool drop_target) {
  bool closed_any = false;
  for (auto& close : closes) {
    for (fid_mr* mr : close->mrs) {
      if (mr == nullptr) continue;
      ProviderScope scope;
      const int rc = fi_close(&mr->fid);
      if (rc != 0) FERRY_LOG(kWarn) << FiErrorText("rdma: closing a memory region", rc);
      closed_any = true;
    }
  }
  // Software RMA: a write whose header the provider accepted before the close may still be
  // streaming in. Closing the target endpoint drops every such transfer (the initiators see an
  // error and resolve it); the caller opens a new one at the same address. No connection to the
  // target endpoint means no transfer in progress: nothing to drop.
  bool target_closed = false;
  if (drop_target && closed_any && target_ && rt_->rebuild_target_on_unregister &&
      MayHaveConnections(address_)) {
    ProviderScope scope;
    target_.reset();
    target_closed = true;
    target_reopen_at_ = Clock::now() + kTargetHandover;  // then this thread tries itself
  }
  for (auto& close : closes) {
    MutexLock lock(close->mu);
    close->done = true;
    close->target_closed = std::exchange(target_closed, false);
    close->cv.NotifyAll();
  }
}

bool Domain::PollInitiator(Clock::time_point now) {
  if (!initiator_) return false;
  bool any = false;
  fi_cq_entry entries[kCqBatch];
  for (int round = 0; round < 8; ++round) {
    ssize_t n;
    {
      ProviderScope scope;
      n = fi_cq_read(initiator_->cq(), entries, kCqBatch);
    }
    if (n > 0) {
      any = true;
      for (ssize_t i = 0; i < n; ++i) Completed(static_cast<Op*>(entries[i].op_context));
      if (static_cast<size_t>(n) < kCqBatch) break;
      continue;
    }
    if (n == -FI_EAVAIL) {
      any = true;
      ReadError(now);
      continue;
    }
    if (n != -FI_EAGAIN) {
      FERRY_LOG(kWarn) << FiErrorText("rdma: fi_cq_read on " + name_, static_cast<int>(n))
                       << " (re-opening the endpoint)";
      reopen_ = true;
    }
    break;
  }
  return any;
}

bool Domain::PollTarget() {
  if (!target_) return false;
  // Nothing is expected here (remote accesses raise no events without FI_RMA_EVENT); reading
  // drives the provider's progress for accesses from peers.
  fi_cq_entry entries[kCqBatch];
  ssize_t n;
  {
    ProviderScope scope;
    n = fi_cq_read(target_->cq(), entries, kCqBatch);
  }
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    ProviderScope scope;
    if (fi_cq_readerr(target_->cq(), &err, 0) > 0) {
      FERRY_LOG(kDebug) << FiErrorText("rdma: target endpoint event on " + name_, err.err);
    }
    return true;
  }
  return n > 0;
}

void Domain::ReadError(Clock::time_point now) {
  fi_cq_err_entry err{};
  ssize_t rc;
  std::string detail;
  {
    ProviderScope scope;
    rc = fi_cq_readerr(initiator_->cq(), &err, 0);
    if (rc > 0 && err.prov_errno != 0) {
      const char* text = fi_cq_strerror(initiator_->cq(), err.prov_errno, err.err_data, nullptr, 0);
      if (text != nullptr) detail = text;
    }
  }
  if (rc <= 0) return;
  std::string why = FiErrorText("completion", err.err);
  if (!detail.empty()) why += " [" + detail + "]";
  Failed(static_cast<Op*>(err.op_context), why, now);
}

void Domain::Completed(Op* raw) {
  if (inflight_.erase(raw) == 0) {
    FERRY_LOG(kError) << "rdma: a completion for an operation not in flight on " << name_;
    return;
  }
  FinishOp(std::unique_ptr<Op>(raw), Status::Ok());
}

void Domain::Failed(Op* raw, const std::string& why, Clock::time_point now) {
  if (raw == nullptr || inflight_.erase(raw) == 0) {
    FERRY_LOG(kWarn) << "rdma: an error for no operation in flight on " << name_ << ": " << why;
    return;
  }
  std::unique_ptr<Op> op(raw);
  if (op->deadline <= now) {  // op_timeout or the slice's deadline: no retry
    const Status timeout = OpTimeout(*op, now, /*posted=*/true);
    FinishOp(std::move(op), timeout);
    return;
  }
  // A retry that fails again suggests the connection state is stuck (rxm does not always
  // recover from a connection broken while being set up): start afresh.
  if (++op->failures >= 2) reopen_ = true;
  Status error = UnavailableError("rdma: " + DescribeOp(*op) + " failed on " + name_ + ": " + why);
  if (rt_->stopping.load() || !rt_->recovery->Push(op, error)) {
    FinishOp(std::move(op), CanceledError("rdma transport stopped"));
  }
}

bool Domain::PostPending(Clock::time_point now) {
  if (!initiator_ || reopen_ || pending_.empty()) return false;
  bool posted = false;
  // Start after the peer served first last time, so no peer starves the others.
  auto it = pending_.upper_bound(next_peer_);
  for (size_t visited = 0, n = pending_.size(); visited < n && inflight_.size() < cap_; ++visited) {
    if (it == pending_.end()) it = pending_.begin();
    next_peer_ = it->first;
    PostQueue(it->second, now, &posted);
    it = it->second.ops.empty() ? pending_.erase(it) : std::next(it);
  }
  return posted;
}

bool Domain::PostQueue(PeerQueue& queue, Clock::time_point now, bool* posted) {
  while (!queue.ops.empty() && inflight_.size() < cap_ && !reopen_) {
    Op* op = queue.ops.front().get();
    if (op->job->deadline <= now) {  // never handed to the provider: nothing of it can land
      std::unique_ptr<Op> expired = std::move(queue.ops.front());
      queue.ops.pop_front();
      const Status timeout = OpTimeout(*expired, now, /*posted=*/false);
      FinishOp(std::move(expired), timeout);
      continue;
    }
    if (op->not_before > now) return true;  // a retry waiting for the connection to reset
    const ssize_t rc = Post(*op);
    if (rc == -FI_EAGAIN) {  // no resources now, or the connection is being set up
      if (queue.blocked_since == Clock::time_point{}) queue.blocked_since = now;
      return false;
    }
    queue.ops.front().release();
    queue.ops.pop_front();
    op->deadline = std::min(now + rt_->options.op_timeout, op->job->deadline);
    inflight_.insert(op);
    if (rc != 0) {
      Failed(op,
             FiErrorText(op->opcode == OpCode::kWrite ? "fi_writemsg" : "fi_readmsg",
                         static_cast<int>(rc)),
             now);
      continue;
    }
    queue.blocked_since = {};
    *posted = true;
    rt_->counters.posted.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

ssize_t Domain::Post(Op& op) {
  iovec iov{reinterpret_cast<void*>(op.local_addr), op.length};  // NOLINT
  void* desc = op.desc;
  fi_rma_iov rma{op.wire_addr, op.length, op.rkey};
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.desc = &desc;
  msg.iov_count = 1;
  msg.addr = op.dest;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  msg.context = &op;
  ProviderScope scope;
  if (op.opcode == OpCode::kWrite) {
    return fi_writemsg(initiator_->ep(), &msg, FI_COMPLETION | write_flags_);
  }
  return fi_readmsg(initiator_->ep(), &msg, FI_COMPLETION);
}

void Domain::MaybeRebuildInitiator(Clock::time_point now) {
  if (!target_ && now >= target_reopen_at_ && !address_.empty()) {
    Result<std::unique_ptr<Endpoint>> target = OpenTarget();
    if (target.ok()) {
      target_ = std::move(target).value();
    } else {
      target_reopen_at_ = now + kReopenEvery;
    }
  }
  if (initiator_ && !reopen_ && inflight_.empty() && pending_.empty() &&
      released_peers_.exchange(0) > 0) {
    // rxm keeps a connection per peer in the endpoint after fi_av_remove: closing the idle
    // endpoint frees those of peers no link uses any more (and costs no operation).
    rt_->counters.idle_releases.fetch_add(1, std::memory_order_relaxed);
    initiator_->CloseEndpoint();
    DrainClosedInitiator(now, /*canceling=*/false);
    initiator_.reset();
    reopen_idle_ = true;
  }
  if (initiator_ && !reopen_) return;
  if (initiator_) {
    rt_->counters.endpoint_rebuilds.fetch_add(1, std::memory_order_relaxed);
    initiator_->CloseEndpoint();
    DrainClosedInitiator(now, /*canceling=*/false);
    initiator_.reset();
    reopen_ = false;
    last_reopen_ = now;
  }
  if (opening_ || now < reopen_at_ || (pending_.empty() && !reopen_idle_)) return;
  reopen_idle_ = false;
  // Opening takes long with rxm: a helper thread does it, so progress and timeouts go on.
  if (opener_.joinable()) opener_.join();  // finished: opening_ was cleared by its result
  opening_ = true;
  opener_ = std::thread([this] {
    Result<std::unique_ptr<Endpoint>> opened = OpenEndpoint(2 * cap_ + 64, "initiator endpoint");
    if (!opened.ok()) {
      FERRY_LOG(kWarn) << "rdma: re-opening the initiator endpoint of " << name_
                       << " failed: " << opened.status() << " (retrying)";
    }
    {
      MutexLock lock(mu_);
      if (opened.ok()) fresh_initiator_ = std::move(opened).value();
      opener_done_ = true;
    }
    Wake();
  });
}

void Domain::DrainClosedInitiator(Clock::time_point now, bool canceling) {
  // The endpoint is closed: whatever the queue still holds is final, and the provider holds no
  // other operation. Errors here are the close's flush, not the operations' fault.
  fi_cq_entry entries[kCqBatch];
  while (true) {
    ssize_t n;
    {
      ProviderScope scope;
      n = fi_cq_read(initiator_->cq(), entries, kCqBatch);
    }
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) Completed(static_cast<Op*>(entries[i].op_context));
      continue;
    }
    if (n != -FI_EAVAIL) break;
    fi_cq_err_entry err{};
    ssize_t rc;
    {
      ProviderScope scope;
      rc = fi_cq_readerr(initiator_->cq(), &err, 0);
    }
    if (rc <= 0) break;
  }
  const std::vector<Op*> left(inflight_.begin(), inflight_.end());
  inflight_.clear();
  for (Op* raw : left) {
    std::unique_ptr<Op> op(raw);
    if (canceling) {
      FinishOp(std::move(op), CanceledError("rdma transport stopped"));
    } else if (op->deadline <= now) {
      // The endpoint is closed: the provider will not touch the op's buffer any more.
      const Status timeout = OpTimeout(*op, now, /*posted=*/true);
      FinishOp(std::move(op), timeout);
    } else {
      const fi_addr_t dest = op->dest;
      next_pending_deadline_ = std::min(next_pending_deadline_, op->job->deadline);
      pending_[dest].ops.push_front(std::move(op));  // posted again on the new endpoint
    }
  }
}

void Domain::ExpireQueued(Clock::time_point now) {
  next_pending_deadline_ = Clock::time_point::max();
  for (auto it = pending_.begin(); it != pending_.end();) {
    std::deque<std::unique_ptr<Op>>& ops = it->second.ops;
    std::deque<std::unique_ptr<Op>> kept;
    for (auto& op : ops) {
      if (op->job->deadline <= now) {
        const Status timeout = OpTimeout(*op, now, /*posted=*/false);
        FinishOp(std::move(op), timeout);
      } else {
        next_pending_deadline_ = std::min(next_pending_deadline_, op->job->deadline);
        kept.push_back(std::move(op));
      }
    }
    ops.swap(kept);
    it = ops.empty() ? pending_.erase(it) : std::next(it);
  }
}

void Domain::CheckDeadlines(Clock::time_point now) {
  next_check_ = now + kCheckEvery;
  if (now >= next_pending_deadline_) ExpireQueued(now);
  for (Op* op : inflight_) {
    if (now >= op->deadline) {  // hung: only closing the endpoint gets the operation back
      reopen_ = true;
      break;
    }
  }
  const bool postable = initiator_ && !reopen_;
  // A peer refusing posts for a third of op_timeout is likely a connection attempt rxm lost
  // (it never gives up on one): re-open the endpoint, at most once per such period.
  const auto stuck = rt_->options.op_timeout / 3;
  for (auto it = pending_.begin(); it != pending_.end();) {
    PeerQueue& queue = it->second;
    if (!postable && queue.blocked_since == Clock::time_point{}) queue.blocked_since = now;
    if (postable && queue.blocked_since != Clock::time_point{} &&
        now - queue.blocked_since >= stuck && now - last_reopen_ >= stuck) {
      reopen_ = true;
    }
    if (queue.blocked_since == Clock::time_point{} ||
        now - queue.blocked_since < rt_->options.op_timeout) {
      ++it;
      continue;
    }
    // Nothing could be posted to this peer for op_timeout: it is unreachable.
    for (auto& op : queue.ops) {
      rt_->counters.timeouts.fetch_add(1, std::memory_order_relaxed);
      Status unreachable = UnavailableError(
          "rdma: " + DescribeOp(*op) + " could not be posted within op_timeout (" +
          std::to_string(rt_->options.op_timeout.count()) + " ms): the peer is unreachable");
      FinishOp(std::move(op), unreachable);
    }
    it = pending_.erase(it);
  }
}

void Domain::Wait(Clock::time_point now) {
  int timeout_ms = 200;
  const bool can_post = initiator_ && !reopen_ && inflight_.size() < cap_;
  if (!pending_.empty() && can_post) {
    timeout_ms = 1;  // operations waiting on -FI_EAGAIN (a connection being set up)
  } else if (!inflight_.empty() || !pending_.empty() || reopen_ || !target_) {
    timeout_ms = std::max(1, std::min(Millis(next_check_ - now), Millis(kCheckEvery)));
  }
  fid* fids[2];
  pollfd fds[3];
  int nfids = 0;
  int nfds = 0;
  bool all_waitable = true;
  for (Endpoint* ep : {initiator_.get(), target_.get()}) {
    if (ep == nullptr) continue;
    if (ep->wait_fd() < 0) {
      all_waitable = false;
      continue;
    }
    fids[nfids++] = &ep->cq()->fid;
    fds[nfds++] = pollfd{ep->wait_fd(), POLLIN, 0};
  }
  if (!all_waitable) timeout_ms = (inflight_.empty() && pending_.empty()) ? 1 : 0;
  fds[nfds++] = pollfd{wake_fd_, POLLIN, 0};
  sleeping_.store(true);
  {
    MutexLock lock(mu_);
    if (!incoming_.empty() || !closes_.empty() || stop_requested_) {
      sleeping_.store(false);
      return;
    }
  }
  int rc = FI_SUCCESS;
  if (nfids > 0) {
    ProviderScope scope;
    rc = fi_trywait(fabric_, fids, nfids);
  }
  if (rc == FI_SUCCESS) {
    if (timeout_ms == 0) {
      std::this_thread::yield();
    } else if (poll(fds, static_cast<nfds_t>(nfds), timeout_ms) > 0 &&
               (fds[nfds - 1].revents & POLLIN) != 0) {
      uint64_t count = 0;
      (void)read(wake_fd_, &count, sizeof(count));
    }
  }
  sleeping_.store(false);
}

void Domain::Shutdown() {
  if (opener_.joinable()) opener_.join();  // bounded by one endpoint open
  std::vector<std::unique_ptr<Op>> incoming;
  std::vector<std::shared_ptr<MrClose>> closes;
  {
    MutexLock lock(mu_);
    stopped_ = true;
    incoming.swap(incoming_);
    closes.swap(closes_);
  }
  RunCloses(closes, /*drop_target=*/false);
  for (auto& op : incoming) {
    const Status status = op->immediate ? op->preset : CanceledError("rdma transport stopped");
    FinishOp(std::move(op), status);
  }
  if (initiator_) {
    initiator_->CloseEndpoint();
    DrainClosedInitiator(Clock::now(), /*canceling=*/true);
    initiator_.reset();
  } else {
    std::unordered_set<Op*> left;
    left.swap(inflight_);
    for (Op* raw : left) {
      FinishOp(std::unique_ptr<Op>(raw), CanceledError("rdma transport stopped"));
    }
  }
  target_.reset();
  for (auto& [dest, queue] : pending_) {
    for (auto& op : queue.ops) FinishOp(std::move(op), CanceledError("rdma transport stopped"));
  }
  pending_.clear();
}

}  // namespace ferry::rdma
