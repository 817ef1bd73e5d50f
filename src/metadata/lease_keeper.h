// LeaseKeeper: the background half of a store client's leases, shared by the plug-ins.
// It remembers the leased keys with their values and, every `interval`, hands them to the
// store's refresh function, which keeps them alive and rewrites whichever the store lost
// (after a restart or an expiry). The store decides how: etcd keep-alive, redis PEXPIRE, HTTP
// re-PUT. While rounds fail (the store is down) they are retried every kLeaseRetryWhileFailing
// (or `interval`, when shorter), so that keys the store lost are written again within that much
// of its return, not a whole interval later. Failures are logged in bounded lines
// (common/failure_log.h): when they start, every 10 s while they last, when they end.
//
// Thread contract: thread-safe. Owns one thread between Start() and Stop() (both idempotent).
// The refresh function runs on that thread only, never concurrently with itself.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/failure_log.h"
#include "common/mutex.h"
#include "ferry/status.h"
#include "metadata/metadata_store.h"

namespace ferry {

inline constexpr std::chrono::milliseconds kLeaseRetryWhileFailing{200};

// The leased keys of one store client with the values it wrote, and the keys it lost to another
// writer (MetadataStore::TakenOver). The bookkeeping half of LeaseKeeper, also held alone by a
// client whose rounds another object runs (the etcd clients of a process share one lease).
// Thread contract: thread-safe.
class LeasedKeys {
 public:
  // Also ends a loss WasTakenOver reports: the client wrote the key again.
  void Track(std::string_view key, std::string_view value);
  void Forget(std::string_view key);
  bool Owns(std::string_view key) const;
  // Whether `key` is tracked with exactly `value`.
  bool OwnsWith(std::string_view key, std::string_view value) const;
  std::vector<KeyValue> Owned() const;
  bool empty() const;
  // Forgets every key (Abandon and clean shutdown).
  std::vector<KeyValue> TakeAll();
  // The store found `key` holding another writer's value (its name was taken over): forgets the
  // key if it is still tracked with `value` (a Put since then keeps it), and logs that once, at
  // warn, naming `where` (the store). Returns true when it forgot the key. Refresh functions
  // call it for every owned key the store reports taken over.
  bool TakenOver(std::string_view key, std::string_view value, std::string_view where);
  // Whether TakenOver forgot `key` and no Track of it came since: this client lost the key to
  // another writer (MetadataStore::TakenOver). Remembered for the client's life, one entry per
  // key it once tracked.
  bool WasTakenOver(std::string_view key) const;

 private:
  mutable Mutex mu_;
  std::map<std::string, std::string, std::less<>> owned_ GUARDED_BY(mu_);
  std::set<std::string, std::less<>> lost_ GUARDED_BY(mu_);  // see WasTakenOver
};

class LeaseKeeper : public LeasedKeys {
 public:
  // Keeps `owned` alive; an error is logged (bounded, see above) and retried soon.
  using RefreshFn = std::function<Status(const std::vector<KeyValue>& owned)>;

  // `store` names the store in log lines ("http metadata server h:p/path").
  LeaseKeeper(std::chrono::milliseconds interval, RefreshFn refresh,
              std::string store = "metadata store");
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  void Start();
  void Stop();

  // Runs a refresh round now instead of at the next interval (e.g. the store came back).
  void RefreshSoon();

 private:
  void Run();

  const std::chrono::milliseconds interval_;
  const std::chrono::milliseconds retry_interval_;  // while rounds fail
  const RefreshFn refresh_;
  FailureLog failures_;
  mutable Mutex mu_;
  CondVar wake_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool soon_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // started/joined by Start/Stop under start_mu_
  Mutex start_mu_;
};

}  // namespace ferry
