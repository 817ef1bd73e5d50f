// LeaseKeeper: the background half of a store client's leases, shared by the plug-ins.
// It remembers the leased keys with their values and, every `interval`, hands them to the
// store's refresh function, which keeps them alive and rewrites whichever the store lost
// (after a restart or an expiry). The store decides how: etcd keep-alive, redis PEXPIRE, HTTP
// re-PUT.
//
// Thread contract: thread-safe. Owns one thread between Start() and Stop() (both idempotent).
// The refresh function runs on that thread only, never concurrently with itself.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "ferry/status.h"
#include "metadata/metadata_store.h"

namespace ferry {

class LeaseKeeper {
 public:
  // Keeps `owned` alive; an error is logged (once per change of error) and retried next round.
  using RefreshFn = std::function<Status(const std::vector<KeyValue>& owned)>;

  LeaseKeeper(std::chrono::milliseconds interval, RefreshFn refresh);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  void Start();
  void Stop();

  void Track(std::string_view key, std::string_view value);
  void Forget(std::string_view key);
  bool Owns(std::string_view key) const;
  std::vector<KeyValue> Owned() const;
  // Forgets every key (Abandon and clean shutdown).
  std::vector<KeyValue> TakeAll();
  // Runs a refresh round now instead of at the next interval (e.g. the store came back).
  void RefreshSoon();

 private:
  void Run();

  const std::chrono::milliseconds interval_;
  const RefreshFn refresh_;
  mutable Mutex mu_;
  CondVar wake_;
  std::map<std::string, std::string, std::less<>> owned_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  bool soon_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // started/joined by Start/Stop under start_mu_
  Mutex start_mu_;
};

}  // namespace ferry
