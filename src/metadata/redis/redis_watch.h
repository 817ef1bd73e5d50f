// Internal to the redis plug-in: Watch(prefix) on a dedicated subscriber connection per watch,
// through keyspace notifications or, where CONFIG is refused, ferry's own "ferry:events"
// channel (see redis_store.h for the user-visible behaviour).
#pragma once

#include <memory>
#include <string_view>

#include "ferry/status.h"
#include "metadata/metadata_store.h"
#include "metadata/redis/redis_client.h"

namespace ferry::redis {

// Thread contract: thread-safe. Every watch it starts owns one thread and one connection and
// shares `client` (for GET and resync), so a WatchHandle may outlive the store.
class RedisWatcher final : public Watcher {
 public:
  explicit RedisWatcher(std::shared_ptr<RedisClient> client) : client_(std::move(client)) {}

  // Subscribes before returning, so every change made after it returns is reported:
  // kUnavailable (or kPermissionDenied) when the subscription cannot be set up;
  // kInvalidArgument for an empty callback.
  Result<std::unique_ptr<WatchHandle>> Watch(std::string_view prefix,
                                             WatchCallback callback) override;

 private:
  const std::shared_ptr<RedisClient> client_;
};

}  // namespace ferry::redis
