#include "metadata/lease_keeper.h"

#include <algorithm>

#include "common/log.h"

namespace ferry {

void LeasedKeys::Track(std::string_view key, std::string_view value) {
  MutexLock lock(mu_);
  owned_.insert_or_assign(std::string(key), std::string(value));
  if (auto it = lost_.find(key); it != lost_.end()) lost_.erase(it);
}

void LeasedKeys::Forget(std::string_view key) {
  MutexLock lock(mu_);
  if (auto it = owned_.find(key); it != owned_.end()) owned_.erase(it);
}

bool LeasedKeys::Owns(std::string_view key) const {
  MutexLock lock(mu_);
  return owned_.find(key) != owned_.end();
}

bool LeasedKeys::OwnsWith(std::string_view key, std::string_view value) const {
  MutexLock lock(mu_);
  auto it = owned_.find(key);
  return it != owned_.end() && it->second == value;
}

bool LeasedKeys::empty() const {
  MutexLock lock(mu_);
  return owned_.empty();
}

std::vector<KeyValue> LeasedKeys::Owned() const {
  MutexLock lock(mu_);
  std::vector<KeyValue> out;
  for (const auto& [k, v] : owned_) out.push_back({k, v});
  return out;
}

std::vector<KeyValue> LeasedKeys::TakeAll() {
  MutexLock lock(mu_);
  std::vector<KeyValue> out;
  for (auto& [k, v] : owned_) out.push_back({k, std::move(v)});
  owned_.clear();
  return out;
}

bool LeasedKeys::TakenOver(std::string_view key, std::string_view value, std::string_view where) {
  {
    MutexLock lock(mu_);
    auto it = owned_.find(key);
    if (it == owned_.end() || it->second != value) return false;
    owned_.erase(it);
    lost_.emplace(key);
  }
  FERRY_LOG(kWarn) << where << ": leased key '" << key
                   << "' now holds another writer's value (its name was taken over by another "
                      "engine); no longer refreshing it, and leaving it to its new owner";
  return true;
}

bool LeasedKeys::WasTakenOver(std::string_view key) const {
  MutexLock lock(mu_);
  return lost_.find(key) != lost_.end();
}

LeaseKeeper::LeaseKeeper(std::chrono::milliseconds interval, RefreshFn refresh, std::string store)
    : interval_(interval),
      retry_interval_(std::min(interval, kLeaseRetryWhileFailing)),
      refresh_(std::move(refresh)),
      failures_("lease refresh on " + store) {}

LeaseKeeper::~LeaseKeeper() { Stop(); }

void LeaseKeeper::Start() {
  MutexLock start(start_mu_);
  if (thread_.joinable()) return;
  {
    MutexLock lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Run(); });
}

void LeaseKeeper::Stop() {
  MutexLock start(start_mu_);
  {
    MutexLock lock(mu_);
    stop_ = true;
    wake_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

void LeaseKeeper::RefreshSoon() {
  MutexLock lock(mu_);
  soon_ = true;
  wake_.NotifyAll();
}

void LeaseKeeper::Run() {
  bool failing = false;
  for (;;) {
    {
      MutexLock lock(mu_);
      const auto deadline =
          std::chrono::steady_clock::now() + (failing ? retry_interval_ : interval_);
      while (!stop_ && !soon_ && std::chrono::steady_clock::now() < deadline) {
        wake_.WaitUntil(mu_, deadline);
      }
      if (stop_) return;
      soon_ = false;
    }
    Status s = refresh_(Owned());
    failing = !s.ok();
    if (failing) {
      failures_.Failed(s.ToString() + " (retrying every " +
                       std::to_string(retry_interval_.count()) + " ms)");
    } else {
      failures_.Succeeded();
    }
  }
}

}  // namespace ferry
