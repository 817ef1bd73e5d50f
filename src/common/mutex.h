// Annotated mutexes, so clang's -Wthread-safety can check GUARDED_BY / REQUIRES (STYLE.md 6).
// libstdc++'s std::mutex carries no annotations; these thin wrappers add them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "common/thread_annotations.h"

namespace ferry {

// Exclusive mutex. Thread-safe by definition; not recursive.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Reader/writer mutex. Thread-safe by definition; not recursive.
class CAPABILITY("shared_mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  void LockShared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Scoped exclusive lock on a Mutex or SharedMutex.
template <typename M>
class SCOPED_CAPABILITY LockGuard {
 public:
  explicit LockGuard(M& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~LockGuard() RELEASE() { mu_.Unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  M& mu_;
};
using MutexLock = LockGuard<Mutex>;
using WriterLock = LockGuard<SharedMutex>;

// Scoped shared lock on a SharedMutex.
class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.LockShared(); }
  ~ReaderLock() RELEASE() { mu_.UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Condition variable bound to a Mutex the caller holds. Every wait is bounded by a deadline.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Waits until notified or `deadline`; returns false on timeout. Spurious wake-ups happen:
  // callers re-check their predicate in a loop.
  bool WaitUntil(Mutex& mu, std::chrono::steady_clock::time_point deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool notified = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();  // `mu` stays held, as the annotation says.
    return notified;
  }
  void NotifyAll() { cv_.notify_all(); }
  void NotifyOne() { cv_.notify_one(); }

 private:
  std::condition_variable cv_;
};

}  // namespace ferry
