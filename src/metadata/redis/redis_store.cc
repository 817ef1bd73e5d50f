#include "metadata/redis/redis_store.h"

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "common/mutex.h"
#include "metadata/lease_keeper.h"
#include "metadata/redis/redis_client.h"
#include "metadata/redis/redis_watch.h"

namespace ferry {
namespace {

using std::chrono::milliseconds;

// Thread contract: thread-safe. Writes (Put, Delete) and lease refresh rounds are serialized
// by write_mu_, so a refresh never resurrects a key that was deleted, or re-Put without a
// lease, while the round was under way.
class RedisStore final : public MetadataStore {
 public:
  RedisStore(std::shared_ptr<redis::RedisClient> client, const StoreOptions& options)
      : client_(client),
        lease_ttl_(options.lease_ttl),
        watcher_(client),
        keeper_(std::max(options.lease_ttl / 3, milliseconds(1)),
                [this](const std::vector<KeyValue>&) { return RefreshLeases(); }) {
    keeper_.Start();
  }

  // Deletes the leased keys (one round trip, bounded by request_timeout) unless Abandon() ran.
  ~RedisStore() override {
    keeper_.Stop();
    std::vector<std::string> keys;
    for (KeyValue& kv : keeper_.TakeAll()) keys.push_back(std::move(kv.key));
    if (keys.empty()) return;
    if (Status s = client_->Del(keys); !s.ok()) {
      FERRY_LOG(kWarn) << "redis: could not delete " << keys.size()
                       << " leased keys on shutdown; they expire within " << lease_ttl_.count()
                       << " ms: " << s;
    }
  }

  std::string_view scheme() const override { return "redis"; }

  Result<std::string> Get(std::string_view key) override {
    if (key.empty()) return InvalidArgumentError("empty key");
    return client_->Get(key);
  }

  Status Put(std::string_view key, std::string_view value, const PutOptions& options) override {
    if (key.empty()) return InvalidArgumentError("empty key");
    MutexLock lock(write_mu_);
    if (!options.leased) {
      keeper_.Forget(key);
      return client_->Set({{std::string(key), std::string(value)}}, milliseconds(0));
    }
    RETURN_IF_ERROR(client_->Set({{std::string(key), std::string(value)}}, lease_ttl_));
    // After Abandon() a leased key is written but left to expire, as a dead owner's would.
    if (!abandoned_) keeper_.Track(key, value);
    return Status::Ok();
  }

  Status Delete(std::string_view key) override {
    if (key.empty()) return InvalidArgumentError("empty key");
    MutexLock lock(write_mu_);
    keeper_.Forget(key);
    return client_->Del({std::string(key)});
  }

  Result<std::vector<KeyValue>> List(std::string_view prefix) override {
    return client_->List(prefix);
  }

  Watcher* watcher() override { return &watcher_; }

  void Abandon() override {
    keeper_.Stop();  // not under write_mu_: a refresh round in progress takes it
    MutexLock lock(write_mu_);
    abandoned_ = true;
    keeper_.TakeAll();
  }

 private:
  // One lease round on the keeper's thread: PEXPIRE every owned key; SET again (with PX) the
  // ones the server no longer has (restarted without persistence, expired during an outage).
  Status RefreshLeases() {
    MutexLock lock(write_mu_);
    const std::vector<KeyValue> owned = keeper_.Owned();
    if (owned.empty()) return Status::Ok();
    std::vector<std::string> keys;
    for (const KeyValue& kv : owned) keys.push_back(kv.key);
    ASSIGN_OR_RETURN(std::vector<bool> alive, client_->Expire(keys, lease_ttl_));
    std::vector<KeyValue> lost;
    for (size_t i = 0; i < owned.size(); ++i) {
      if (!alive[i]) lost.push_back(owned[i]);
    }
    if (lost.empty()) return Status::Ok();
    RETURN_IF_ERROR(client_->Set(lost, lease_ttl_));
    FERRY_LOG(kInfo) << "redis: rewrote " << lost.size() << " leased key(s) the server had lost";
    return Status::Ok();
  }

  const std::shared_ptr<redis::RedisClient> client_;
  const milliseconds lease_ttl_;
  redis::RedisWatcher watcher_;
  Mutex write_mu_;
  bool abandoned_ GUARDED_BY(write_mu_) = false;
  LeaseKeeper keeper_;  // last: its thread calls RefreshLeases, which uses the members above
};

}  // namespace

Result<std::unique_ptr<MetadataStore>> CreateRedisStore(const RedisConfig& config,
                                                        const StoreOptions& options) {
  if (options.request_timeout.count() <= 0 || options.lease_ttl.count() <= 0) {
    return InvalidArgumentError("redis store: request_timeout and lease_ttl must be positive");
  }
  if (config.db < 0) return InvalidArgumentError("redis store: negative database number");
  auto client = std::make_shared<redis::RedisClient>(config, options.request_timeout);
  // Fail here, not at first use, on wrong credentials or an unreachable server.
  RETURN_IF_ERROR(client->Run({"PING"}));
  return std::unique_ptr<MetadataStore>(new RedisStore(std::move(client), options));
}

}  // namespace ferry
