#include "rpc/worker_pool.h"

#include <exception>
#include <system_error>

#include "common/log.h"

namespace ferry::rpc {

Status WorkerPool::Start() {
  MutexLock lifecycle(lifecycle_mu_);
  {
    MutexLock lock(mu_);
    if (running_) return Status::Ok();
    if (stopped_) return BusyError("worker pool was stopped and cannot restart");
    running_ = true;
  }
  try {
    for (size_t i = 0; i < threads_; ++i) workers_.emplace_back([this] { Run(); });
  } catch (const std::system_error& e) {
    {
      MutexLock lock(mu_);
      stopped_ = true;
    }
    wake_.NotifyAll();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    return InternalError(std::string("cannot start rpc worker thread: ") + e.what());
  }
  return Status::Ok();
}

void WorkerPool::Stop() {
  MutexLock lifecycle(lifecycle_mu_);
  {
    MutexLock lock(mu_);
    stopped_ = true;
    queue_.clear();
  }
  wake_.NotifyAll();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

bool WorkerPool::Submit(Job job) {
  {
    MutexLock lock(mu_);
    if (!running_ || stopped_) return false;
    queue_.push_back(std::move(job));
  }
  wake_.NotifyOne();
  return true;
}

void WorkerPool::Run() {
  for (;;) {
    Job job;
    {
      MutexLock lock(mu_);
      while (!stopped_ && queue_.empty()) {
        wake_.WaitUntil(mu_, std::chrono::steady_clock::now() + std::chrono::seconds(1));
      }
      if (stopped_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      job();
    } catch (const std::exception& e) {
      FERRY_LOG(kError) << "rpc worker job threw: " << e.what();
    } catch (...) {
      FERRY_LOG(kError) << "rpc worker job threw a non-std exception";
    }
  }
}

}  // namespace ferry::rpc
