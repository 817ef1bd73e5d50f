// ProcessShared<T>: one T per key in a process, alive while someone holds it. Get(key, make)
// returns the live T of `key`, or makes one with make() when none is alive; the T goes when its
// last holder drops it, and a later Get makes a new one. Used for what the clients of one store in
// a process share (the etcd plug-in's lease and connection pools).
//
// Thread contract: thread-safe. make() runs under the registry's lock: keep it cheap (no I/O).
// A ProcessShared is meant to be a never-destroyed static, since holders may outlive main.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"

namespace ferry {

template <typename T>
class ProcessShared {
 public:
  template <typename Make>
  std::shared_ptr<T> Get(const std::string& key, Make make) {
    MutexLock lock(mu_);
    std::erase_if(live_, [](const auto& entry) { return entry.second.expired(); });
    std::weak_ptr<T>& slot = live_[key];
    std::shared_ptr<T> t = slot.lock();
    if (t == nullptr) {
      t = make();
      slot = t;
    }
    return t;
  }

 private:
  Mutex mu_;
  std::map<std::string, std::weak_ptr<T>> live_ GUARDED_BY(mu_);
};

}  // namespace ferry
