// WorkerPool: a fixed set of threads running submitted jobs in FIFO order. The RPC server runs
// its handlers here so the I/O loop never waits on one.
//
// Thread contract: thread-safe. Owns its threads between Start() and Stop(), both idempotent;
// a stopped pool does not restart.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "ferry/status.h"

namespace ferry::rpc {

class WorkerPool {
 public:
  using Job = std::function<void()>;

  explicit WorkerPool(size_t threads) : threads_(threads == 0 ? 1 : threads) {}
  ~WorkerPool() { Stop(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Starts the threads. Internal when the OS refuses a thread (the ones started are stopped).
  Status Start();

  // Drops queued jobs that have not started, then waits for running ones to return (a job is
  // never interrupted, so the wait is as long as the longest running job).
  void Stop();

  // Queues `job`; false (and the job is dropped) once Stop() has begun or before Start().
  // A job must not throw; one that does is caught and logged.
  bool Submit(Job job);

 private:
  void Run();

  const size_t threads_;
  Mutex mu_;
  CondVar wake_;
  std::deque<Job> queue_ GUARDED_BY(mu_);
  bool running_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;  // written by Start/Stop only, under lifecycle_mu_
  Mutex lifecycle_mu_;
};

}  // namespace ferry::rpc
