// PeerWorkers: runs the engine's slow work (retries, descriptor refreshes, notifications,
// submissions a full transport queue turned back) keyed by peer, so that a frozen or dead peer
// delays only its own work. Jobs of one key run in submission order, one at a time; jobs of
// different keys run in parallel on a pool that grows on demand up to `max_threads` and whose
// threads exit after `idle_exit` without work.
//
// Thread contract: thread-safe. Jobs run on pool threads without the pool's lock held and may
// Post more work. Stop() (or destruction) waits for running jobs, drops queued ones unrun
// (destroying them, which releases what they captured), and joins every thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "ferry/status.h"

namespace ferry::engine {

struct PeerWorkersOptions {
  size_t max_threads = 32;                      // pool bound, >= 1
  size_t max_queued_per_key = 1 << 16;          // Post beyond it: Busy
  std::chrono::milliseconds idle_exit{2000};   // an idle thread exits after this
};

class PeerWorkers {
 public:
  explicit PeerWorkers(PeerWorkersOptions options);
  ~PeerWorkers() { Stop(); }
  PeerWorkers(const PeerWorkers&) = delete;
  PeerWorkers& operator=(const PeerWorkers&) = delete;

  // Queues `job` behind the other jobs of `key`. Busy when `key` already holds
  // max_queued_per_key jobs; Canceled after Stop. The job is destroyed unrun in both cases.
  Status Post(const std::string& key, std::function<void()> job);
  void Stop();

  size_t threads() const;  // pool threads alive now
  size_t queued() const;   // jobs waiting, all keys

 private:
  struct KeyQueue {
    std::deque<std::function<void()>> jobs;
    bool running = false;
  };
  void Work();
  void ReapLocked() REQUIRES(mu_);

  const PeerWorkersOptions options_;
  mutable Mutex mu_;
  CondVar ready_cv_;
  std::map<std::string, KeyQueue> keys_ GUARDED_BY(mu_);
  std::deque<std::string> ready_ GUARDED_BY(mu_);  // keys with jobs and none running
  size_t threads_ GUARDED_BY(mu_) = 0;
  size_t idle_ GUARDED_BY(mu_) = 0;
  size_t queued_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::map<std::thread::id, std::thread> pool_ GUARDED_BY(mu_);
  std::vector<std::thread::id> exited_ GUARDED_BY(mu_);  // to join
};

}  // namespace ferry::engine
