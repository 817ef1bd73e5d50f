#include "transport/rdma/recovery.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <tuple>
#include <utility>

#include "common/log.h"
#include "transport/rdma/fabric_domain.h"
#include "transport/rdma/rdma_peer_link.h"

namespace ferry::rdma {
namespace {

constexpr auto kMaxExchangeTimeout = std::chrono::milliseconds(5000);
// A retry waits this long, doubled per further failure: rxm resets a broken connection on its
// next connection-management pass (every 10 ms by default), and fails sends until then.
constexpr auto kRetryBackoff = std::chrono::milliseconds(20);
constexpr int kMaxBackoffShift = 4;

}  // namespace

Recovery::~Recovery() { Stop(); }

void Recovery::Start() {
  MutexLock lifecycle(lifecycle_mu_);
  {
    MutexLock lock(mu_);
    if (running_ || stopping_) return;
    running_ = true;
  }
  thread_ = std::thread([this] { Loop(); });
}

bool Recovery::Push(std::unique_ptr<Op>& op, const Status& error) {
  {
    MutexLock lock(mu_);
    if (!running_ || stopping_) return false;
    queue_.push_back(Failure{std::move(op), error});
  }
  cv_.NotifyOne();
  return true;
}

void Recovery::Stop() {
  MutexLock lifecycle(lifecycle_mu_);
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
  std::vector<Failure> left;
  {
    MutexLock lock(mu_);
    left.swap(queue_);
  }
  for (Failure& f : left) FinishOp(std::move(f.op), CanceledError("rdma transport stopped"));
}

void Recovery::Loop() {
  while (true) {
    std::vector<Failure> batch;
    {
      MutexLock lock(mu_);
      while (queue_.empty() && !stopping_) {
        cv_.WaitUntil(mu_, Clock::now() + std::chrono::milliseconds(500));
      }
      if (stopping_) return;
      batch.swap(queue_);
    }
    Resolve(batch);
  }
}

void Recovery::Resolve(std::vector<Failure>& batch) {
  std::map<RdmaPeerLink*, std::vector<Failure*>> by_peer;
  const Clock::time_point now = Clock::now();
  for (Failure& f : batch) {
    if (f.op->job->deadline <= now) {  // not worth asking: the slice is over
      const Status timeout = OpTimeout(*f.op, now, /*posted=*/true);
      FinishOp(std::move(f.op),
               TimeoutError(timeout.message() + "; it had failed: " + f.error.message()));
      continue;
    }
    by_peer[f.op->job->link.get()].push_back(&f);
  }
  for (auto& [link, failures] : by_peer) {
    // An Exchange carries at most kMaxChecks checks.
    for (size_t at = 0; at < failures.size(); at += kMaxChecks) {
      std::vector<Failure*> chunk(failures.begin() + static_cast<std::ptrdiff_t>(at),
                                  failures.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                         failures.size(), at + kMaxChecks)));
      ResolvePeer(*link, chunk);
    }
  }
}

void Recovery::ResolvePeer(RdmaPeerLink& link, std::vector<Failure*>& failures) {
  // One check per (registration, incarnation, generation), with the range of its first failure.
  using CheckKey = std::tuple<uint64_t, uint64_t, uint64_t>;
  std::map<CheckKey, size_t> index;
  std::vector<AccessCheck> checks;
  std::vector<size_t> check_of(failures.size());
  for (size_t i = 0; i < failures.size(); ++i) {
    const Op& op = *failures[i]->op;
    const Slice& slice = *op.job->slice;
    const CheckKey key{op.job->key.id, slice.peer_incarnation, slice.remote_generation};
    auto [it, added] = index.emplace(key, checks.size());
    if (added) {
      checks.push_back(AccessCheck{op.job->key.id, op.remote_addr, op.length,
                                   slice.peer_incarnation, slice.remote_generation});
    }
    check_of[i] = it->second;
  }
  rt_->counters.checks.fetch_add(checks.size(), std::memory_order_relaxed);
  // Asking the peer waits no longer than the earliest deadline among the failures (at least
  // 1 ms): a frozen peer then ends those slices in Timeout at their deadline.
  auto timeout = std::min<std::chrono::milliseconds>(rt_->options.op_timeout, kMaxExchangeTimeout);
  const Clock::time_point asked = Clock::now();
  for (const Failure* f : failures) {
    if (f->op->job->deadline == Clock::time_point::max()) continue;
    timeout = std::min(
        timeout,
        std::max(std::chrono::milliseconds(1),
                 std::chrono::ceil<std::chrono::milliseconds>(f->op->job->deadline - asked)));
  }
  Result<std::string> reply =
      rt_->ctx->Exchange(link.peer(), "rdma", EncodeCheckRequest(checks), timeout);
  Result<std::vector<Status>> results = reply.ok() ? DecodeCheckReply(*reply, checks.size())
                                                   : Result<std::vector<Status>>(reply.status());
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < failures.size(); ++i) {
    Failure& f = *failures[i];
    if (!results.ok() && f.op->job->deadline <= now) {
      const Status timed_out = OpTimeout(*f.op, now, /*posted=*/true);
      FinishOp(std::move(f.op),
               TimeoutError(timed_out.message() + "; it had failed: " + f.error.message() +
                            "; the access check: " + results.status().ToString()));
      continue;
    }
    if (!results.ok()) {
      FinishOp(
          std::move(f.op),
          UnavailableError(f.error.message() + "; segment '" + link.peer().name +
                           "' did not answer an access check: " + results.status().ToString()));
      continue;
    }
    const Status& verdict = (*results)[check_of[i]];
    if (!verdict.ok()) {
      FinishOp(std::move(f.op), verdict.WithContext("rdma: segment '" + link.peer().name + "'"));
      continue;
    }
    Retry(f);
  }
}

void Recovery::Retry(Failure& failure) {
  Op& op = *failure.op;
  if (op.failures > rt_->options.max_retries) {
    Status error = failure.error.WithContext("after " + std::to_string(op.failures) + " attempts");
    FinishOp(std::move(failure.op), error);
    return;
  }
  const Status routed = op.job->link->Route(op, op.domain + 1);
  if (!routed.ok()) {
    FinishOp(std::move(failure.op), routed);
    return;
  }
  const int shift = std::clamp(op.failures - 1, 0, kMaxBackoffShift);
  op.not_before = Clock::now() + kRetryBackoff * (1 << shift);
  rt_->counters.retries.fetch_add(1, std::memory_order_relaxed);
  std::vector<std::unique_ptr<Op>> one;
  one.push_back(std::move(failure.op));
  Domain& domain = *rt_->domains[one.front()->domain];
  if (!domain.Enqueue(one))
    FinishOp(std::move(one.front()), CanceledError("rdma transport stopped"));
}

}  // namespace ferry::rdma
