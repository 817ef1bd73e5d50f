#include "metadata/lease_keeper.h"

#include "common/log.h"

namespace ferry {

LeaseKeeper::LeaseKeeper(std::chrono::milliseconds interval, RefreshFn refresh)
    : interval_(interval), refresh_(std::move(refresh)) {}

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

void LeaseKeeper::Track(std::string_view key, std::string_view value) {
  MutexLock lock(mu_);
  owned_.insert_or_assign(std::string(key), std::string(value));
}

void LeaseKeeper::Forget(std::string_view key) {
  MutexLock lock(mu_);
  if (auto it = owned_.find(key); it != owned_.end()) owned_.erase(it);
}

bool LeaseKeeper::Owns(std::string_view key) const {
  MutexLock lock(mu_);
  return owned_.find(key) != owned_.end();
}

std::vector<KeyValue> LeaseKeeper::Owned() const {
  MutexLock lock(mu_);
  std::vector<KeyValue> out;
  for (const auto& [k, v] : owned_) out.push_back({k, v});
  return out;
}

std::vector<KeyValue> LeaseKeeper::TakeAll() {
  MutexLock lock(mu_);
  std::vector<KeyValue> out;
  for (auto& [k, v] : owned_) out.push_back({k, std::move(v)});
  owned_.clear();
  return out;
}

void LeaseKeeper::RefreshSoon() {
  MutexLock lock(mu_);
  soon_ = true;
  wake_.NotifyAll();
}

void LeaseKeeper::Run() {
  std::string last_error;
  for (;;) {
    {
      MutexLock lock(mu_);
      const auto deadline = std::chrono::steady_clock::now() + interval_;
      while (!stop_ && !soon_ && std::chrono::steady_clock::now() < deadline) {
        wake_.WaitUntil(mu_, deadline);
      }
      if (stop_) return;
      soon_ = false;
    }
    Status s = refresh_(Owned());
    if (!s.ok() && s.ToString() != last_error) {
      FERRY_LOG(kWarn) << "lease refresh failed (will retry every " << interval_.count()
                       << " ms): " << s;
    } else if (s.ok() && !last_error.empty()) {
      FERRY_LOG(kInfo) << "lease refresh recovered";
    }
    last_error = s.ok() ? std::string() : s.ToString();
  }
}

}  // namespace ferry
