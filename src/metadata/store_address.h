// Connection string -> StoreAddress: the parsing half of store_factory.h, kept apart from the
// plug-ins so that it can be used (and fuzzed, fuzz/store_address_fuzzer.cc) without linking any
// store client. The accepted forms are listed in store_factory.h.
//
// Thread contract: a pure function and a value type.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/host_port.h"
#include "ferry/status.h"

namespace ferry {

struct StoreAddress {
  enum class Kind { kEtcd, kRedis, kHttp, kP2P, kMemory };
  Kind kind = Kind::kMemory;
  std::vector<HostPort> endpoints;  // etcd: one or more; redis/http: exactly one
  std::string user;                 // redis
  std::string password;             // redis
  int db = 0;                       // redis
  std::string path;                 // http: "/metadata"
  std::string name;                 // memory
  friend bool operator==(const StoreAddress&, const StoreAddress&) = default;
};

// Parses a connection string without connecting. InvalidArgument, quoting the string and
// listing the accepted forms, for anything else.
Result<StoreAddress> ParseStoreAddress(std::string_view connection);

}  // namespace ferry
