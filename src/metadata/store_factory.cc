#include "metadata/store_factory.h"

#include "metadata/etcd/etcd_store.h"
#include "metadata/http/http_store.h"
#include "metadata/memory/memory_store.h"
#include "metadata/p2p/p2p_store.h"
#include "metadata/redis/redis_store.h"
#include "metadata/shared_watch.h"

namespace ferry {

Result<std::unique_ptr<MetadataStore>> CreateMetadataStore(std::string_view connection,
                                                           const StoreOptions& options,
                                                           P2PDescriptorSource* p2p) {
  ASSIGN_OR_RETURN(StoreAddress a, ParseStoreAddress(connection));
  // The watches of every client of one etcd or redis in this process share one stream
  // (shared_watch.h): clients with the same connection string and request timeout are
  // interchangeable for watching.
  const std::string share_key =
      std::string(connection) + '\n' + std::to_string(options.request_timeout.count());
  switch (a.kind) {
    case StoreAddress::Kind::kEtcd: {
      ASSIGN_OR_RETURN(std::unique_ptr<MetadataStore> store, CreateEtcdStore(a.endpoints, options));
      return ShareWatches(std::move(store), share_key);
    }
    case StoreAddress::Kind::kRedis: {
      ASSIGN_OR_RETURN(std::unique_ptr<MetadataStore> store,
                       CreateRedisStore(RedisConfig{.server = a.endpoints.front(),
                                                    .user = a.user,
                                                    .password = a.password,
                                                    .db = a.db},
                                        options));
      return ShareWatches(std::move(store), share_key);
    }
    case StoreAddress::Kind::kHttp:
      return CreateHttpStore(a.endpoints.front(), a.path, options);
    case StoreAddress::Kind::kP2P:
      if (p2p == nullptr) {
        return InvalidArgumentError(
            "P2PHANDSHAKE needs the engine's RPC service to fetch descriptors from peers");
      }
      return CreateP2PStore(p2p, options);
    case StoreAddress::Kind::kMemory:
      return CreateMemoryStore(a.name, options);
  }
  return InternalError("unreachable store kind");
}

}  // namespace ferry
