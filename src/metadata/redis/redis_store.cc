#include "metadata/redis/redis_store.h"

#include <hiredis/hiredis.h>

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

// Compare-and-set, run by redis atomically (EVAL): SET KEYS[1] ARGV[1] (PX ARGV[3] when it is
// not "0") only while the key is absent or holds ARGV[2]; then PUBLISH ARGV[5] on ARGV[4]
// (pcall: a server whose ACL forbids PUBLISH costs fallback watchers an event, not the write).
// Returns 1 when written, 0 when another value is there.
constexpr std::string_view kPutIfScript = R"lua(
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[2] then return 0 end
if ARGV[3] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.pcall('PUBLISH', ARGV[4], ARGV[5])
return 1
)lua";

// Compare-and-delete: DEL KEYS[1] only while it holds ARGV[1], then PUBLISH ARGV[3] on ARGV[2].
// Returns 1 when deleted, 0 when another value is there, -1 when absent.
constexpr std::string_view kDeleteIfScript = R"lua(
local v = redis.call('GET', KEYS[1])
if not v then return -1 end
if v ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.pcall('PUBLISH', ARGV[2], ARGV[3])
return 1
)lua";

// One lease refresh of one key: PEXPIRE KEYS[1] ARGV[2] while it holds ARGV[1] (returns 1);
// SET it again with PX when it is gone, and PUBLISH ARGV[4] on ARGV[3] (returns 2); leave it
// alone when another value is there (returns 0: taken over).
constexpr std::string_view kRefreshScript = R"lua(
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.pcall('PUBLISH', ARGV[3], ARGV[4])
return 2
)lua";

// The integer reply of one of the scripts above; Internal for anything else.
Result<long long> ScriptResult(const redisReply& reply, std::string_view what,
                               const HostPort& server) {
  if (reply.type == REDIS_REPLY_ERROR) return redis::ErrorReplyStatus(reply, what, server);
  if (reply.type != REDIS_REPLY_INTEGER) {
    return InternalError("redis " + server.ToString() + ": " + std::string(what) +
                         " answered with reply type " + std::to_string(reply.type));
  }
  return reply.integer;
}

// Thread contract: thread-safe. Writes (Put, Delete) and lease refresh rounds are serialized
// by write_mu_, so a refresh never resurrects a key that was deleted, or re-Put without a
// lease, while the round was under way.
class RedisStore final : public MetadataStore {
 public:
  RedisStore(std::shared_ptr<redis::RedisClient> client, const StoreOptions& options)
      : client_(client),
        lease_ttl_(options.lease_ttl),
        watcher_(client),
        keeper_(
            std::max(options.lease_ttl / 3, milliseconds(1)),
            [this](const std::vector<KeyValue>&) { return RefreshLeases(); },
            "redis " + client->config().server.ToString()) {
    keeper_.Start();
  }

  // Deletes the leased keys that still hold this client's values (one round trip, bounded by
  // request_timeout) unless Abandon() ran.
  ~RedisStore() override {
    keeper_.Stop();
    const std::vector<KeyValue> owned = keeper_.TakeAll();
    if (owned.empty()) return;
    std::vector<std::string> messages;
    messages.reserve(owned.size());  // `commands` holds views into these
    std::vector<redis::Args> commands;
    for (const KeyValue& kv : owned) {
      messages.push_back(client_->EventMessage("del", kv.key));
      commands.push_back({"EVAL", kDeleteIfScript, "1", kv.key, kv.value, redis::kEventsChannel,
                          messages.back()});
    }
    Result<std::vector<redis::Reply>> replies = client_->RunAll(commands);
    if (!replies.ok()) {
      FERRY_LOG(kWarn) << "redis: could not delete " << owned.size()
                       << " leased keys on shutdown; they expire within " << lease_ttl_.count()
                       << " ms: " << replies.status();
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
    const milliseconds ttl = options.leased ? lease_ttl_ : milliseconds(0);
    if (options.replaces.has_value()) {
      RETURN_IF_ERROR(PutIf(key, value, *options.replaces, ttl));
    } else {
      RETURN_IF_ERROR(client_->Set({{std::string(key), std::string(value)}}, ttl));
    }
    if (!options.leased) {
      keeper_.Forget(key);
      return Status::Ok();
    }
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

  Status DeleteIf(std::string_view key, std::string_view expected) override {
    if (key.empty()) return InvalidArgumentError("empty key");
    MutexLock lock(write_mu_);
    keeper_.Forget(key);
    const std::string message = client_->EventMessage("del", key);
    ASSIGN_OR_RETURN(redis::Reply reply, client_->Run({"EVAL", kDeleteIfScript, "1", key, expected,
                                                       redis::kEventsChannel, message}));
    ASSIGN_OR_RETURN(long long result, ScriptResult(*reply, "EVAL (delete-if)", server()));
    if (result == 1) return Status::Ok();
    if (result < 0) {
      return NotFoundError("redis " + server().ToString() + ": no key '" + std::string(key) + "'");
    }
    return AlreadyExistsError("redis " + server().ToString() + ": key '" + std::string(key) +
                              "' holds another writer's value; not deleted");
  }

  Result<std::vector<KeyValue>> List(std::string_view prefix) override {
    return client_->List(prefix);
  }

  Watcher* watcher() override { return &watcher_; }
  bool TakenOver(std::string_view key) const override { return keeper_.WasTakenOver(key); }

  void Abandon() override {
    keeper_.Stop();  // not under write_mu_: a refresh round in progress takes it
    MutexLock lock(write_mu_);
    abandoned_ = true;
    keeper_.TakeAll();
  }

 private:
  const HostPort& server() const { return client_->config().server; }

  // SET only while `key` is absent or holds `replaces` (kPutIfScript); ttl 0: no expiry.
  Status PutIf(std::string_view key, std::string_view value, std::string_view replaces,
               milliseconds ttl) REQUIRES(write_mu_) {
    const std::string ttl_text = std::to_string(ttl.count());
    const std::string message = client_->EventMessage("set", key);
    ASSIGN_OR_RETURN(redis::Reply reply,
                     client_->Run({"EVAL", kPutIfScript, "1", key, value, replaces, ttl_text,
                                   redis::kEventsChannel, message}));
    ASSIGN_OR_RETURN(long long result, ScriptResult(*reply, "EVAL (put-if)", server()));
    if (result == 1) return Status::Ok();
    return AlreadyExistsError("redis " + server().ToString() + ": key '" + std::string(key) +
                              "' holds another writer's value; not replaced");
  }

  // One lease round on the keeper's thread, one round trip (kRefreshScript per key): PEXPIRE
  // every owned key that still holds our value; SET again (with PX) the ones the server no
  // longer has (restarted without persistence, expired during an outage); give up the ones
  // another writer holds now (taken over).
  Status RefreshLeases() {
    MutexLock lock(write_mu_);
    const std::vector<KeyValue> owned = keeper_.Owned();
    if (owned.empty()) return Status::Ok();
    const std::string ttl_text = std::to_string(lease_ttl_.count());
    std::vector<std::string> messages;
    messages.reserve(owned.size());  // `commands` holds views into these
    std::vector<redis::Args> commands;
    for (const KeyValue& kv : owned) {
      messages.push_back(client_->EventMessage("set", kv.key));
      commands.push_back({"EVAL", kRefreshScript, "1", kv.key, kv.value, ttl_text,
                          redis::kEventsChannel, messages.back()});
    }
    ASSIGN_OR_RETURN(std::vector<redis::Reply> replies, client_->RunAll(commands));
    size_t rewritten = 0;
    for (size_t i = 0; i < owned.size(); ++i) {
      ASSIGN_OR_RETURN(long long result, ScriptResult(*replies[i], "EVAL (refresh)", server()));
      if (result == 0) keeper_.TakenOver(owned[i].key, owned[i].value, "redis");
      if (result == 2) ++rewritten;
    }
    if (rewritten > 0) {
      FERRY_LOG(kInfo) << "redis: rewrote " << rewritten << " leased key(s) the server had lost";
    }
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
