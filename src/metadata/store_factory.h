// Connection string -> MetadataStore (the forms users of Mooncake-style engines already write):
//
//   etcd://h:p[,h2:p2,...]       etcd v3 through its JSON gateway; several endpoints fail over
//   h:p[,h2:p2,...]              the same (a bare endpoint list means etcd)
//   redis://[user:pass@]h:p[/db] redis
//   http://h:p/path              a Mooncake-compatible HTTP metadata server (GET/PUT/DELETE ?key=)
//   P2PHANDSHAKE                 no store: descriptors come from each peer's own RPC service
//   memory://[name]              in-process store shared by every client of the same name (tests)
//
// Anything else is InvalidArgument listing these forms.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/host_port.h"
#include "ferry/status.h"
#include "metadata/metadata_store.h"

namespace ferry {

class P2PDescriptorSource;

struct StoreAddress {
  enum class Kind { kEtcd, kRedis, kHttp, kP2P, kMemory };
  Kind kind = Kind::kMemory;
  std::vector<HostPort> endpoints;  // etcd: one or more; redis/http: exactly one
  std::string user;                 // redis
  std::string password;             // redis
  int db = 0;                       // redis
  std::string path;                 // http: "/metadata"
  std::string name;                 // memory
};

// Parses a connection string without connecting.
Result<StoreAddress> ParseStoreAddress(std::string_view connection);

// Parses and connects. `p2p` serves P2PHANDSHAKE lookups (borrowed; must outlive the store);
// it may be null for every other form.
Result<std::unique_ptr<MetadataStore>> CreateMetadataStore(std::string_view connection,
                                                           const StoreOptions& options,
                                                           P2PDescriptorSource* p2p = nullptr);

}  // namespace ferry
