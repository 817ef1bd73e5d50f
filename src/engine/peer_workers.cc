#include "engine/peer_workers.h"

#include <algorithm>

namespace ferry::engine {

PeerWorkers::PeerWorkers(PeerWorkersOptions options) : options_(options) {}

Status PeerWorkers::Post(const std::string& key, std::function<void()> job) {
  MutexLock lock(mu_);
  if (stopping_) return CanceledError("the engine is stopping");
  KeyQueue& q = keys_[key];
  if (q.jobs.size() >= options_.max_queued_per_key) {
    if (q.jobs.empty() && !q.running) keys_.erase(key);
    return BusyError("peer '" + key + "' has " + std::to_string(q.jobs.size()) +
                     " jobs queued already");
  }
  q.jobs.push_back(std::move(job));
  ++queued_;
  if (!q.running && q.jobs.size() == 1) ready_.push_back(key);
  ReapLocked();
  if (idle_ == 0 && threads_ < std::max<size_t>(options_.max_threads, 1)) {
    ++threads_;
    std::thread t([this] { Work(); });
    const std::thread::id id = t.get_id();
    pool_.emplace(id, std::move(t));
  } else {
    ready_cv_.NotifyOne();
  }
  return Status::Ok();
}

void PeerWorkers::ReapLocked() {
  for (const std::thread::id& id : exited_) {
    auto it = pool_.find(id);
    if (it == pool_.end()) continue;
    it->second.join();  // it has left Work(): this returns at once
    pool_.erase(it);
  }
  exited_.clear();
}

void PeerWorkers::Work() {
  mu_.Lock();
  for (;;) {
    ++idle_;
    const auto idle_until = std::chrono::steady_clock::now() + options_.idle_exit;
    while (!stopping_ && ready_.empty() && std::chrono::steady_clock::now() < idle_until) {
      ready_cv_.WaitUntil(mu_, idle_until);
    }
    --idle_;
    if (stopping_ || ready_.empty()) break;
    const std::string key = std::move(ready_.front());
    ready_.pop_front();
    KeyQueue& q = keys_[key];
    std::function<void()> job = std::move(q.jobs.front());
    q.jobs.pop_front();
    --queued_;
    q.running = true;
    mu_.Unlock();
    job();
    job = nullptr;  // what it captured goes now, not with the next job
    mu_.Lock();
    KeyQueue& after = keys_[key];
    after.running = false;
    if (!after.jobs.empty()) {
      ready_.push_back(key);  // behind other peers' work: fair
    } else {
      keys_.erase(key);
    }
  }
  --threads_;
  if (!stopping_) exited_.push_back(std::this_thread::get_id());  // Stop joins the rest itself
  mu_.Unlock();
}

void PeerWorkers::Stop() {
  std::map<std::string, KeyQueue> dropped;
  std::map<std::thread::id, std::thread> pool;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    ready_cv_.NotifyAll();
    // Queued jobs are dropped unrun; running ones finish (each is bounded by its own timeout).
    for (auto& [key, q] : keys_) {
      queued_ -= q.jobs.size();
      dropped[key].jobs.swap(q.jobs);
    }
    ready_.clear();
    pool.swap(pool_);
    exited_.clear();
  }
  dropped.clear();  // destroyed without the lock: they may release batches
  for (auto& [id, t] : pool) t.join();
}

size_t PeerWorkers::threads() const {
  MutexLock lock(mu_);
  return threads_;
}

size_t PeerWorkers::queued() const {
  MutexLock lock(mu_);
  return queued_;
}

}  // namespace ferry::engine
