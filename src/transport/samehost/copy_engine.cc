#include "transport/samehost/copy_engine.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "common/log.h"
#include "common/mutex.h"
#include "transport/samehost/grant_wire.h"

namespace ferry::samehost {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxWorkers = 64;
// Bounds a wait with nothing due (Stop and new work notify sooner).
constexpr auto kNothingDue = std::chrono::hours(1);
// The copy engine's timer looks at the queue at least this often.
constexpr auto kTimerMaxSleep = std::chrono::seconds(1);
// How long an extra worker (started while every worker was busy) waits for more work.
constexpr auto kExtraWorkerLinger = std::chrono::seconds(1);
// Idle connections kept per peer; more are closed when returned.
constexpr size_t kMaxIdleConnections = 16;

// Orders the copy's loads after the grant: the target's stores before it granted are visible.
// For a window that is not cache-coherent across its users (some pooled CXL memory), this is
// where the source lines would be invalidated.
void FenceBeforeCopy() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// Makes the copy's stores visible before the pins go and the slices complete. memcpy/memmove
// use non-temporal stores for large copies, which only an sfence orders.
void FenceAfterCopy() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
#if defined(__x86_64__) || defined(__i386__)
  _mm_sfence();
#endif
}

// What an engine keeps per peer: where its grant server listens, idle grant connections, and
// the transport's copier. Shared by the peer's links and its queued batches; destroyed (closing
// every connection, destroying the copier) when the last of them goes. Thread-safe.
class PeerChannel {
 public:
  PeerChannel(std::string grant_path, std::string name, std::unique_ptr<PeerCopier> copier,
              GrantAuth auth)
      : grant_path_(std::move(grant_path)),
        name_(std::move(name)),
        copier_(std::move(copier)),
        auth_(std::move(auth)) {}

  const std::string& name() const { return name_; }
  PeerCopier& copier() const { return *copier_; }

  // An idle connection, or nullptr.
  std::unique_ptr<GrantConnection> TakeIdle() {
    MutexLock lock(mu_);
    while (!idle_.empty()) {
      std::unique_ptr<GrantConnection> c = std::move(idle_.back().connection);
      idle_.pop_back();
      if (!c->broken()) return c;
    }
    return nullptr;
  }

  // A new connection the copier accepts as its peer's (PeerCopier::CheckPeer).
  Result<std::unique_ptr<GrantConnection>> Open(Deadline deadline) const {
    ASSIGN_OR_RETURN(std::unique_ptr<GrantConnection> connection,
                     GrantConnection::Connect(grant_path_, deadline, auth_));
    RETURN_IF_ERROR(copier_->CheckPeer(*connection));
    return connection;
  }

  // Gives a connection back for reuse; a broken one (or one past the pool's size) is closed.
  void Return(std::unique_ptr<GrantConnection> connection) {
    if (connection == nullptr || connection->broken()) return;
    MutexLock lock(mu_);
    if (idle_.size() < kMaxIdleConnections) idle_.push_back({std::move(connection), Clock::now()});
  }

  // Closes the connections idle since before `cutoff`; returns how many.
  size_t CloseIdleSince(Clock::time_point cutoff) {
    std::vector<std::unique_ptr<GrantConnection>> closing;  // closed outside the lock
    MutexLock lock(mu_);
    for (auto it = idle_.begin(); it != idle_.end();) {
      if (it->since < cutoff) {
        closing.push_back(std::move(it->connection));
        it = idle_.erase(it);
      } else {
        ++it;
      }
    }
    return closing.size();
  }

 private:
  struct Idle {
    std::unique_ptr<GrantConnection> connection;
    Clock::time_point since;
  };
  const std::string grant_path_;
  const std::string name_;
  const std::unique_ptr<PeerCopier> copier_;
  const GrantAuth auth_;
  Mutex mu_;
  std::vector<Idle> idle_ GUARDED_BY(mu_);
};

// The PeerLink the engine hands out; batches share its channel, so dropping the link with
// slices queued is safe.
class EngineLink final : public PeerLink {
 public:
  EngineLink(const void* owner, std::shared_ptr<PeerChannel> channel)
      : owner_(owner), channel_(std::move(channel)) {}
  const void* owner() const { return owner_; }
  const std::shared_ptr<PeerChannel>& channel() const { return channel_; }

 private:
  const void* const owner_;
  const std::shared_ptr<PeerChannel> channel_;
};

// Up to max_batch slices of one Submit, for one peer.
struct Job {
  std::shared_ptr<PeerChannel> channel;
  std::vector<Slice*> slices;
  Deadline earliest = Deadline::max();  // the earliest deadline among `slices`
};

Deadline EarliestOf(const std::vector<Slice*>& slices) {
  Deadline earliest = Deadline::max();
  for (const Slice* s : slices) earliest = std::min(earliest, s->deadline);
  return earliest;
}

// One batch on a worker: every slice's result until it completes.
class BatchRun {
 public:
  BatchRun(const CopyEngineOptions& options, std::atomic<uint64_t>* round_trips,
           std::atomic<uint64_t>* opened, std::atomic<uint64_t>* table_pinned, PeerChannel& peer,
           std::span<Slice* const> slices)
      : options_(options),
        round_trips_(round_trips),
        opened_(opened),
        table_pinned_(table_pinned),
        peer_(peer),
        slices_(slices),
        results_(slices.size()) {}

  // Moves what can be moved; results() holds every slice's status afterwards.
  void Run() {
    const auto now = Clock::now();
    std::vector<size_t> pending;
    for (size_t i = 0; i < slices_.size(); ++i) {
      const Slice& s = *slices_[i];
      if (s.length == 0) continue;  // moves nothing, so needs no grant: Ok
      if (s.deadline <= now) {
        results_[i] = TimeoutError("the deadline passed before the grant was asked");
        continue;
      }
      Status checked = peer_.copier().Check(s);
      if (!checked.ok()) {
        results_[i] = std::move(checked);
        continue;
      }
      pending.push_back(i);
    }
    const Deadline io_deadline = now + options_.io_timeout;
    // Each round either decides every pending slice or times out at least the one with the
    // earliest deadline, so this ends.
    while (!pending.empty()) pending = AcquireAndCopy(pending, io_deadline);
  }

  std::vector<Status>& results() { return results_; }

 private:
  std::string Context() const { return options_.transport + " peer " + peer_.name(); }

  static RangeRequest RangeOf(const Slice& s) {
    return {s.remote_addr, s.length, s.peer_incarnation, s.remote_generation, s.deadline};
  }

  // Pins `pending` (through the connection's lease table where it can, one grant round trip
  // for the rest), then the copies. Returns the slices still to ask for (the round trip ran
  // out at an earlier slice's deadline, not theirs).
  std::vector<size_t> AcquireAndCopy(const std::vector<size_t>& pending, Deadline io_deadline) {
    Deadline earliest = Deadline::max();
    for (size_t i : pending) earliest = std::min(earliest, slices_[i]->deadline);
    const Deadline bound = std::min(io_deadline, earliest);
    std::unique_ptr<GrantConnection> connection;
    std::vector<Slice*> granted;
    std::vector<size_t> granted_index;
    std::vector<size_t> asked;
    std::vector<Status> answers;
    const Status pinned =
        Pin(pending, bound, &connection, &granted, &granted_index, &asked, &answers);
    if (!pinned.ok()) return RoundTripFailed(pending, pinned, bound < io_deadline);

    for (size_t k = 0; k < asked.size(); ++k) {
      const size_t i = asked[k];
      if (answers[k].ok()) {
        granted.push_back(slices_[i]);
        granted_index.push_back(i);
      } else {
        peer_.copier().Refused(*slices_[i], answers[k]);
        results_[i] = answers[k].WithContext(Context() + " refused access");
      }
    }
    if (!granted.empty()) {
      peer_.copier().PrepareCopies(granted, *connection, bound);
      if (connection->broken()) {
        // The target dropped the pins with the connection: copying now would be unguarded.
        const auto now = Clock::now();
        for (size_t i : granted_index) {
          results_[i] =
              slices_[i]->deadline <= now
                  ? TimeoutError("the deadline passed before the copy")
                  : UnavailableError(Context() + ": grant connection broke before the copy");
        }
        return {};
      }
      CopyInTime(granted, granted_index);
    }
    // A failed Release means the connection broke; the target released the pins itself then.
    if (connection->Release().ok()) peer_.Return(std::move(connection));
    return {};
  }

  // Copies the granted slices whose deadline has not passed; the others complete Timeout.
  void CopyInTime(const std::vector<Slice*>& granted, const std::vector<size_t>& granted_index) {
    const auto now = Clock::now();
    std::vector<Slice*> copy;
    std::vector<size_t> copy_index;
    for (size_t k = 0; k < granted.size(); ++k) {
      if (granted[k]->deadline <= now) {
        results_[granted_index[k]] = TimeoutError("the deadline passed before the copy");
      } else {
        copy.push_back(granted[k]);
        copy_index.push_back(granted_index[k]);
      }
    }
    if (copy.empty()) return;
    std::vector<Status> copied(copy.size());
    FenceBeforeCopy();
    peer_.copier().Copy(copy, copied);
    FenceAfterCopy();
    for (size_t k = 0; k < copy.size(); ++k) results_[copy_index[k]] = std::move(copied[k]);
  }

  // Pins the slices of `pending` on an idle connection when there is one, else (or when that
  // one turns out dead: the server went away since) on a new one; *connection holds the one
  // used. Each slice is pinned through the connection's lease table when it can be (TryPin;
  // into *granted), or else asked for with one Acquire (into *asked, answered in *answers). A
  // non-Ok status: the round trip failed, and the connection's pins (of both kinds) are void.
  Status Pin(const std::vector<size_t>& pending, Deadline bound,
             std::unique_ptr<GrantConnection>* connection, std::vector<Slice*>* granted,
             std::vector<size_t>* granted_index, std::vector<size_t>* asked,
             std::vector<Status>* answers) {
    *connection = peer_.TakeIdle();
    for (;;) {
      const bool idle = *connection != nullptr;
      if (!idle) {
        Result<std::unique_ptr<GrantConnection>> fresh = peer_.Open(bound);
        if (!fresh.ok()) return fresh.status();
        opened_->fetch_add(1, std::memory_order_relaxed);
        *connection = std::move(fresh).value();
      }
      granted->clear();
      granted_index->clear();
      asked->clear();
      std::vector<RangeRequest> ranges;
      for (size_t i : pending) {
        const RangeRequest range = RangeOf(*slices_[i]);
        if ((*connection)->TryPin(range)) {
          granted->push_back(slices_[i]);
          granted_index->push_back(i);
        } else {
          asked->push_back(i);
          ranges.push_back(range);
        }
      }
      table_pinned_->fetch_add(granted->size(), std::memory_order_relaxed);
      if (ranges.empty()) return Status::Ok();
      round_trips_->fetch_add(1, std::memory_order_relaxed);
      const Status s = (*connection)->Acquire(ranges, answers, bound);
      if (s.ok() || !idle || s.code() != StatusCode::kUnavailable || !(*connection)->broken()) {
        return s;
      }
      connection->reset();  // the idle one was dead: all of them again on a new one
    }
  }

  // The round trip failed with `why` (the connection, if any, is closed: the target drops
  // whatever it pinned for it). When it ran out at a slice deadline (`deadline_bound`), the
  // slices past their deadline complete Timeout and the others are returned to be asked again.
  std::vector<size_t> RoundTripFailed(const std::vector<size_t>& pending, const Status& why,
                                      bool deadline_bound) {
    std::vector<size_t> again;
    const auto now = Clock::now();
    for (size_t i : pending) {
      if (why.code() == StatusCode::kTimeout && deadline_bound) {
        if (slices_[i]->deadline <= now) {
          results_[i] =
              TimeoutError("the deadline passed waiting for " + Context() + " to grant access");
        } else {
          again.push_back(i);
        }
      } else {
        results_[i] = why.WithContext(Context());
      }
    }
    return again;
  }

  const CopyEngineOptions& options_;
  std::atomic<uint64_t>* const round_trips_;
  std::atomic<uint64_t>* const opened_;
  std::atomic<uint64_t>* const table_pinned_;
  PeerChannel& peer_;
  const std::span<Slice* const> slices_;
  std::vector<Status> results_;
};

// Thread contract: see CopyEngine.
class CopyEngineImpl final : public CopyEngine {
 public:
  CopyEngineImpl(TransportContext* ctx, CopyEngineOptions options)
      : ctx_(ctx), options_(std::move(options)) {}
  ~CopyEngineImpl() override { Stop(); }

  Status StartThreads() {
    try {
      MutexLock lock(mu_);
      for (size_t i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Work(); });
      timer_ = std::thread([this] { Time(); });
    } catch (const std::system_error& e) {
      Stop();
      return InternalError(options_.transport + " copy engine thread: " + e.what());
    }
    return Status::Ok();
  }

  void Stop() override {
    MutexLock stop_lock(stop_mu_);
    std::deque<Job> canceled;
    {
      MutexLock lock(mu_);
      if (stopping_ && workers_.empty() && !timer_.joinable()) return;
      stopping_ = true;
      canceled.swap(queue_);
      queued_slices_ = 0;
      work_cv_.NotifyAll();
      timer_cv_.NotifyAll();
    }
    const Status why = CanceledError(options_.transport + " transport stopped");
    for (Job& job : canceled) {
      for (Slice* s : job.slices) ctx_->CompleteSlice(s, why);
    }
    std::vector<std::thread> workers;
    {
      MutexLock lock(mu_);
      workers.swap(workers_);
      exited_.clear();
    }
    for (std::thread& t : workers) t.join();
    if (timer_.joinable()) timer_.join();
  }

  Result<std::shared_ptr<PeerLink>> MakeLink(std::string grant_path, std::string peer_name,
                                             std::unique_ptr<PeerCopier> copier) override {
    if (copier == nullptr) return InvalidArgumentError("copy engine: null copier");
    auto channel = std::shared_ptr<PeerChannel>(
        new PeerChannel(std::move(grant_path), std::move(peer_name), std::move(copier),
                        GrantAuth{options_.auth_secret, options_.transport}));
    {
      MutexLock lock(mu_);
      if (stopping_) return CanceledError(options_.transport + " transport stopped");
      if (options_.idle_timeout.count() > 0) {
        std::erase_if(channels_, [](const std::weak_ptr<PeerChannel>& c) { return c.expired(); });
        channels_.push_back(channel);
      }
    }
    return std::shared_ptr<PeerLink>(std::make_shared<EngineLink>(this, std::move(channel)));
  }

  Status Submit(PeerLink& link, std::span<Slice* const> slices) override {
    const std::string& name = options_.transport;
    auto* ours = dynamic_cast<EngineLink*>(&link);
    if (ours == nullptr || ours->owner() != this) {
      return InvalidArgumentError(name + " Submit: link was not made by this transport");
    }
    if (slices.size() > options_.max_queued_slices) {
      return InvalidArgumentError(name + " Submit: " + std::to_string(slices.size()) +
                                  " slices exceed max_queued_slices");
    }
    for (const Slice* s : slices) {
      if (s == nullptr) return InvalidArgumentError(name + " Submit: null slice");
      if (s->op != OpCode::kRead && s->op != OpCode::kWrite) {
        return InvalidArgumentError(name + " Submit: bad op");
      }
    }
    if (slices.empty()) return Status::Ok();
    MutexLock lock(mu_);
    if (stopping_) return CanceledError(name + " transport stopped");
    if (slices.size() > options_.max_queued_slices - queued_slices_) {
      return AgainError(name + " queue full (" + std::to_string(queued_slices_) + " of " +
                        std::to_string(options_.max_queued_slices) + " slices queued)");
    }
    for (size_t i = 0; i < slices.size(); i += options_.max_batch) {
      const size_t n = std::min(options_.max_batch, slices.size() - i);
      Job job{ours->channel(), {slices.begin() + i, slices.begin() + i + n}, {}};
      job.earliest = EarliestOf(job.slices);
      if (job.earliest < timer_due_) timer_cv_.NotifyOne();
      queue_.push_back(std::move(job));
    }
    queued_slices_ += slices.size();
    work_cv_.NotifyAll();
    MaybeGrowLocked();
    return Status::Ok();
  }

  CopyEngineStats stats() const override {
    CopyEngineStats out;
    out.grant_round_trips = round_trips_.load(std::memory_order_relaxed);
    out.table_pinned_slices = table_pinned_.load(std::memory_order_relaxed);
    out.failed_slices = failed_.load(std::memory_order_relaxed);
    out.timed_out_slices = timed_out_.load(std::memory_order_relaxed);
    out.connections_opened = opened_.load(std::memory_order_relaxed);
    out.idle_connections_closed = idle_closed_.load(std::memory_order_relaxed);
    return out;
  }

 private:
  // Per-peer isolation: a peer holds at most `workers` workers at once, and when every worker
  // is busy (say, with a peer that never answers its grants) while a job of another peer waits,
  // an extra worker starts for it (up to kMaxWorkers); an extra worker leaves again once no job
  // it may take has been queued for kExtraWorkerLinger.
  size_t PerPeerLimitLocked() const REQUIRES(mu_) { return options_.workers; }

  // The first queued job whose peer has room for another worker; queue_.end() when none.
  std::deque<Job>::iterator EligibleLocked() REQUIRES(mu_) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      auto busy = busy_.find(it->channel.get());
      if (busy == busy_.end() || busy->second < PerPeerLimitLocked()) return it;
    }
    return queue_.end();
  }

  // Starts an extra worker when a job could run and no worker is free to take it.
  void MaybeGrowLocked() REQUIRES(mu_) {
    for (const std::thread::id& id : exited_) {
      for (auto it = workers_.begin(); it != workers_.end(); ++it) {
        if (it->get_id() == id) {
          it->join();  // it has left Work(): this returns at once
          workers_.erase(it);
          break;
        }
      }
    }
    exited_.clear();
    if (stopping_ || idle_workers_ > 0 || workers_.size() >= kMaxWorkers) return;
    if (EligibleLocked() == queue_.end()) return;
    try {
      workers_.emplace_back([this] { Work(/*extra=*/true); });
    } catch (const std::system_error&) {
      // The base workers carry on; the job waits for one of them.
    }
  }

  // A worker: takes batches until Stop (which completes what is still queued). An extra worker
  // returns as soon as no job it may take is queued.
  void Work(bool extra = false) {
    for (;;) {
      Job job;
      {
        MutexLock lock(mu_);
        auto it = EligibleLocked();
        const auto linger_until = Clock::now() + kExtraWorkerLinger;
        while (it == queue_.end() && !stopping_) {
          if (extra && Clock::now() >= linger_until) {
            exited_.push_back(std::this_thread::get_id());
            return;
          }
          ++idle_workers_;
          (void)work_cv_.WaitUntil(mu_, extra ? linger_until : Clock::now() + kNothingDue);
          --idle_workers_;
          it = EligibleLocked();
        }
        if (stopping_) return;
        job = std::move(*it);
        queue_.erase(it);
        queued_slices_ -= job.slices.size();
        ++busy_[job.channel.get()];
        MaybeGrowLocked();
      }
      BatchRun run(options_, &round_trips_, &opened_, &table_pinned_, *job.channel, job.slices);
      run.Run();
      Complete(job.slices, run.results());
      MutexLock lock(mu_);
      auto busy = busy_.find(job.channel.get());
      if (--busy->second == 0) busy_.erase(busy);
      work_cv_.NotifyAll();  // a job of this peer may have become eligible
    }
  }

  void Complete(std::span<Slice* const> slices, std::span<const Status> results) {
    for (size_t i = 0; i < slices.size(); ++i) {
      const Status& s = results[i];
      if (!s.ok() && s.code() != StatusCode::kCanceled) {
        failed_.fetch_add(1, std::memory_order_relaxed);
      }
      if (s.code() == StatusCode::kTimeout) timed_out_.fetch_add(1, std::memory_order_relaxed);
      ctx_->CompleteSlice(slices[i], s);
    }
  }

  // The timer: completes queued slices whose deadline passed (Timeout) and closes idle grant
  // connections, waking when the next of either is due.
  void Time() {
    const auto idle = options_.idle_timeout;
    const auto sweep_period = std::max<Clock::duration>(idle / 2, std::chrono::milliseconds(1));
    auto next_sweep = idle.count() > 0 ? Clock::now() + sweep_period : Clock::time_point::max();
    for (;;) {
      std::vector<Slice*> expired;
      std::vector<std::shared_ptr<PeerChannel>> sweep;
      {
        MutexLock lock(mu_);
        if (stopping_) return;
        const auto now = Clock::now();
        Deadline due = next_sweep;
        for (auto it = queue_.begin(); it != queue_.end();) {
          if (it->earliest <= now) {
            TakeExpired(&*it, now, &expired);
            if (it->slices.empty()) {
              it = queue_.erase(it);
              continue;
            }
          }
          due = std::min(due, it->earliest);
          ++it;
        }
        queued_slices_ -= expired.size();
        if (now >= next_sweep) {
          for (const std::weak_ptr<PeerChannel>& c : channels_) {
            if (std::shared_ptr<PeerChannel> live = c.lock()) sweep.push_back(std::move(live));
          }
          std::erase_if(channels_, [](const std::weak_ptr<PeerChannel>& c) { return c.expired(); });
          next_sweep = now + sweep_period;
          due = std::min(due, next_sweep);
        }
        if (expired.empty() && sweep.empty()) {
          // At most a second: a job whose deadline lies beyond the timer's next wake-up then
          // needs no wake-up of its own (one per batch would cost a context switch each).
          timer_due_ = std::min(due, now + kTimerMaxSleep);
          (void)timer_cv_.WaitUntil(mu_, timer_due_);
          continue;
        }
      }
      std::vector<Status> late(expired.size(), TimeoutError("the deadline passed while queued in " +
                                                            options_.transport));
      Complete(expired, late);
      const auto cutoff = Clock::now() - idle;
      for (const std::shared_ptr<PeerChannel>& c : sweep) {
        idle_closed_.fetch_add(c->CloseIdleSince(cutoff), std::memory_order_relaxed);
      }
    }
  }

  // Moves the slices of `job` whose deadline is at or before `now` to `expired`.
  static void TakeExpired(Job* job, Clock::time_point now, std::vector<Slice*>* expired) {
    std::vector<Slice*> keep;
    for (Slice* s : job->slices) {
      if (s->deadline <= now) {
        expired->push_back(s);
      } else {
        keep.push_back(s);
      }
    }
    job->slices = std::move(keep);
    job->earliest = EarliestOf(job->slices);
  }

  TransportContext* const ctx_;
  const CopyEngineOptions options_;
  std::atomic<uint64_t> round_trips_{0};
  std::atomic<uint64_t> table_pinned_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> timed_out_{0};
  std::atomic<uint64_t> opened_{0};
  std::atomic<uint64_t> idle_closed_{0};

  Mutex stop_mu_;  // serializes Stop
  // Written by StartThreads before the engine is shared, then only by Stop (under stop_mu_).
  std::thread timer_;

  Mutex mu_;
  std::vector<std::thread> workers_ GUARDED_BY(mu_);
  std::vector<std::thread::id> exited_ GUARDED_BY(mu_);  // extra workers gone, to join
  std::map<const PeerChannel*, size_t> busy_ GUARDED_BY(mu_);  // workers per peer now
  size_t idle_workers_ GUARDED_BY(mu_) = 0;
  CondVar work_cv_;   // new work, or Stop
  CondVar timer_cv_;  // an earlier deadline queued, or Stop
  std::deque<Job> queue_ GUARDED_BY(mu_);
  size_t queued_slices_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  Deadline timer_due_ GUARDED_BY(mu_) = Deadline::max();              // when the timer wakes next
  std::vector<std::weak_ptr<PeerChannel>> channels_ GUARDED_BY(mu_);  // idle_timeout > 0 only
};

Status Validate(const CopyEngineOptions& o) {
  const std::string& n = o.transport;
  if (n.empty()) return InvalidArgumentError("copy engine: no transport name");
  if (o.io_timeout.count() <= 0) return InvalidArgumentError(n + " io_timeout must be > 0");
  if (o.workers < 1 || o.workers > kMaxWorkers) {
    return InvalidArgumentError(n + " workers must be 1.." + std::to_string(kMaxWorkers));
  }
  if (o.max_queued_slices < 1) return InvalidArgumentError(n + " max_queued_slices must be > 0");
  if (o.max_batch < 1 || o.max_batch > wire::kMaxRanges) {
    return InvalidArgumentError(n + " max_batch must be 1.." + std::to_string(wire::kMaxRanges));
  }
  if (o.idle_timeout.count() < 0) return InvalidArgumentError(n + " idle_timeout must be >= 0");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<CopyEngine>> CopyEngine::Start(TransportContext* ctx,
                                                      CopyEngineOptions options) {
  if (ctx == nullptr) return InvalidArgumentError("copy engine: null context");
  RETURN_IF_ERROR(Validate(options));
  auto engine = std::make_unique<CopyEngineImpl>(ctx, std::move(options));
  RETURN_IF_ERROR(engine->StartThreads());
  return std::unique_ptr<CopyEngine>(std::move(engine));
}

}  // namespace ferry::samehost
