#include "metadata/memory/memory_store.h"

#include <atomic>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "metadata/lease_keeper.h"

namespace ferry {
namespace {

using TimePoint = Clock::TimePoint;

// One delivery queue and thread per watch, so a slow callback never blocks writers and the
// handle's destructor can stop delivery for good by joining the thread.
class MemoryWatch final : public WatchHandle {
 public:
  MemoryWatch(std::string prefix, WatchCallback callback)
      : prefix_(std::move(prefix)), callback_(std::move(callback)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~MemoryWatch() override {
    {
      MutexLock lock(mu_);
      stop_ = true;
      wake_.NotifyAll();
    }
    thread_.join();
  }
  const std::string& prefix() const { return prefix_; }
  void Enqueue(WatchEvent event) {
    MutexLock lock(mu_);
    queue_.push_back(std::move(event));
    wake_.NotifyAll();
  }

 private:
  void Run() {
    for (;;) {
      WatchEvent event;
      {
        MutexLock lock(mu_);
        while (!stop_ && queue_.empty()) {
          wake_.WaitUntil(mu_, std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
        }
        if (stop_) return;
        event = std::move(queue_.front());
        queue_.pop_front();
      }
      callback_(event);
    }
  }

  const std::string prefix_;
  const WatchCallback callback_;
  Mutex mu_;
  CondVar wake_;
  std::deque<WatchEvent> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The shared state behind every client of one name. Thread-safe.
class MemoryBackend {
 public:
  struct Entry {
    std::string value;
    uint64_t lease_owner = 0;  // client id, 0 = no lease
    TimePoint expires{};       // meaningful when lease_owner != 0
  };

  static std::shared_ptr<MemoryBackend> Named(const std::string& name) {
    static Mutex* registry_mu = new Mutex();
    static auto* registry = new std::map<std::string, std::weak_ptr<MemoryBackend>>();
    MutexLock lock(*registry_mu);
    std::shared_ptr<MemoryBackend> backend = (*registry)[name].lock();
    if (backend == nullptr) {
      backend = std::make_shared<MemoryBackend>();
      (*registry)[name] = backend;
    }
    return backend;
  }

  uint64_t NewClientId() { return next_client_.fetch_add(1) + 1; }

  std::optional<std::string> Get(std::string_view key, TimePoint now) {
    MutexLock lock(mu_);
    SweepLocked(now);
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    return it->second.value;
  }

  void Put(std::string_view key, std::string_view value, uint64_t owner, TimePoint expires,
           TimePoint now) {
    MutexLock lock(mu_);
    SweepLocked(now);
    entries_.insert_or_assign(std::string(key), Entry{std::string(value), owner, expires});
    NotifyLocked({WatchEvent::Type::kPut, std::string(key), std::string(value)});
  }

  // Put only while `key` is absent or holds `replaces`; false (nothing written) otherwise.
  bool PutIf(std::string_view key, std::string_view value, std::string_view replaces,
             uint64_t owner, TimePoint expires, TimePoint now) {
    MutexLock lock(mu_);
    SweepLocked(now);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.value != replaces) return false;
    entries_.insert_or_assign(std::string(key), Entry{std::string(value), owner, expires});
    NotifyLocked({WatchEvent::Type::kPut, std::string(key), std::string(value)});
    return true;
  }

  enum class DeleteOutcome { kDeleted, kAbsent, kOther };
  DeleteOutcome DeleteIf(std::string_view key, std::string_view expected, TimePoint now) {
    MutexLock lock(mu_);
    SweepLocked(now);
    auto it = entries_.find(key);
    if (it == entries_.end()) return DeleteOutcome::kAbsent;
    if (it->second.value != expected) return DeleteOutcome::kOther;
    entries_.erase(it);
    NotifyLocked({WatchEvent::Type::kDelete, std::string(key), {}});
    return DeleteOutcome::kDeleted;
  }

  void Delete(std::string_view key, TimePoint now) {
    MutexLock lock(mu_);
    SweepLocked(now);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    entries_.erase(it);
    NotifyLocked({WatchEvent::Type::kDelete, std::string(key), {}});
  }

  std::vector<KeyValue> List(std::string_view prefix, TimePoint now) {
    MutexLock lock(mu_);
    SweepLocked(now);
    std::vector<KeyValue> out;
    for (auto it = entries_.lower_bound(prefix); it != entries_.end(); ++it) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) break;
      out.push_back({it->first, it->second.value});
    }
    return out;
  }

  // Extends the owner's leases; rewrites keys the owner holds that are gone (deleted by someone
  // else; kept for the same contract as the network stores). Returns the owned keys another
  // client now holds with another value (taken over): neither extended nor rewritten.
  std::vector<KeyValue> Refresh(uint64_t owner, const std::vector<KeyValue>& owned,
                                TimePoint expires, TimePoint now) {
    MutexLock lock(mu_);
    SweepLocked(now);
    std::vector<KeyValue> taken;
    for (const KeyValue& kv : owned) {
      auto it = entries_.find(kv.key);
      if (it == entries_.end()) {
        entries_.emplace(kv.key, Entry{kv.value, owner, expires});
        NotifyLocked({WatchEvent::Type::kPut, kv.key, kv.value});
      } else if (it->second.lease_owner == owner) {
        it->second.expires = expires;
      } else if (it->second.value != kv.value) {
        taken.push_back(kv);
      }
    }
    return taken;
  }

  void Sweep(TimePoint now) {
    MutexLock lock(mu_);
    SweepLocked(now);
  }

  void AddWatch(MemoryWatch* watch) {
    MutexLock lock(mu_);
    watches_.push_back(watch);
  }
  void RemoveWatch(MemoryWatch* watch) {
    MutexLock lock(mu_);
    std::erase(watches_, watch);
  }

 private:
  void SweepLocked(TimePoint now) REQUIRES(mu_) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.lease_owner != 0 && it->second.expires <= now) {
        NotifyLocked({WatchEvent::Type::kDelete, it->first, {}});
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void NotifyLocked(const WatchEvent& event) REQUIRES(mu_) {
    for (MemoryWatch* w : watches_) {
      if (event.key.compare(0, w->prefix().size(), w->prefix()) == 0) w->Enqueue(event);
    }
  }

  std::atomic<uint64_t> next_client_{0};
  Mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_ GUARDED_BY(mu_);
  std::vector<MemoryWatch*> watches_ GUARDED_BY(mu_);
};

// Unregisters itself from the backend before the delivery thread stops.
class RegisteredMemoryWatch final : public WatchHandle {
 public:
  RegisteredMemoryWatch(std::shared_ptr<MemoryBackend> backend, std::string prefix,
                        WatchCallback callback)
      : backend_(std::move(backend)),
        watch_(std::make_unique<MemoryWatch>(std::move(prefix), std::move(callback))) {
    backend_->AddWatch(watch_.get());
  }
  ~RegisteredMemoryWatch() override { backend_->RemoveWatch(watch_.get()); }

 private:
  std::shared_ptr<MemoryBackend> backend_;
  std::unique_ptr<MemoryWatch> watch_;
};

class MemoryStore final : public MetadataStore, public Watcher {
 public:
  MemoryStore(std::shared_ptr<MemoryBackend> backend, const StoreOptions& options)
      : backend_(std::move(backend)),
        options_(options),
        clock_(options.clock != nullptr ? options.clock : Clock::Real()),
        id_(backend_->NewClientId()),
        keeper_(std::max(options.lease_ttl / 3, std::chrono::milliseconds(1)),
                [this](const std::vector<KeyValue>& owned) {
                  for (const KeyValue& kv : backend_->Refresh(
                           id_, owned, clock_->Now() + options_.lease_ttl, clock_->Now())) {
                    keeper_.TakenOver(kv.key, kv.value, "memory store");
                  }
                  return Status::Ok();
                }) {
    keeper_.Start();
  }

  ~MemoryStore() override {
    keeper_.Stop();
    for (const KeyValue& kv : keeper_.TakeAll()) {
      (void)backend_->DeleteIf(kv.key, kv.value, clock_->Now());  // only what is still ours
    }
  }

  std::string_view scheme() const override { return "memory"; }

  Result<std::string> Get(std::string_view key) override {
    std::optional<std::string> value = backend_->Get(key, clock_->Now());
    if (!value) return NotFoundError("no key '" + std::string(key) + "'");
    return std::move(*value);
  }

  Status Put(std::string_view key, std::string_view value, const PutOptions& options) override {
    if (key.empty()) return InvalidArgumentError("empty key");
    const TimePoint now = clock_->Now();
    const uint64_t owner = options.leased ? id_ : 0;
    if (options.replaces.has_value()) {
      if (!backend_->PutIf(key, value, *options.replaces, owner, now + options_.lease_ttl, now)) {
        return AlreadyExistsError("memory store: key '" + std::string(key) +
                                  "' holds another writer's value; not replaced");
      }
    } else {
      backend_->Put(key, value, owner, now + options_.lease_ttl, now);
    }
    if (options.leased) {
      keeper_.Track(key, value);
    } else {
      keeper_.Forget(key);
    }
    return Status::Ok();
  }

  Status Delete(std::string_view key) override {
    keeper_.Forget(key);
    backend_->Delete(key, clock_->Now());
    return Status::Ok();
  }

  Status DeleteIf(std::string_view key, std::string_view expected) override {
    keeper_.Forget(key);
    switch (backend_->DeleteIf(key, expected, clock_->Now())) {
      case MemoryBackend::DeleteOutcome::kDeleted:
        return Status::Ok();
      case MemoryBackend::DeleteOutcome::kAbsent:
        return NotFoundError("memory store: no key '" + std::string(key) + "'");
      case MemoryBackend::DeleteOutcome::kOther:
        break;
    }
    return AlreadyExistsError("memory store: key '" + std::string(key) +
                              "' holds another writer's value; not deleted");
  }

  Result<std::vector<KeyValue>> List(std::string_view prefix) override {
    return backend_->List(prefix, clock_->Now());
  }

  Watcher* watcher() override { return this; }
  bool TakenOver(std::string_view key) const override { return keeper_.WasTakenOver(key); }

  Result<std::unique_ptr<WatchHandle>> Watch(std::string_view prefix,
                                             WatchCallback callback) override {
    if (!callback) return InvalidArgumentError("watch needs a callback");
    backend_->Sweep(clock_->Now());
    return std::unique_ptr<WatchHandle>(
        new RegisteredMemoryWatch(backend_, std::string(prefix), std::move(callback)));
  }

  void Abandon() override {
    keeper_.Stop();
    keeper_.TakeAll();
  }

 private:
  const std::shared_ptr<MemoryBackend> backend_;
  const StoreOptions options_;
  Clock* const clock_;
  const uint64_t id_;
  LeaseKeeper keeper_;
};

}  // namespace

Result<std::unique_ptr<MetadataStore>> CreateMemoryStore(const std::string& name,
                                                         const StoreOptions& options) {
  return std::unique_ptr<MetadataStore>(
      new MemoryStore(MemoryBackend::Named(name.empty() ? "default" : name), options));
}

}  // namespace ferry
