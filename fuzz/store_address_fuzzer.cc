// Fuzzes the metadata connection-string parser (metadata/store_address.h): P2PHANDSHAKE,
// etcd://, a bare endpoint list, redis://, http:// and memory://. It only parses; nothing is
// connected.
//
// Input: the connection string.
// Contracts checked, beyond "no crash, no UB, no leak": a refusal is InvalidArgument that quotes
// the string; an accepted address keeps each form's rules (endpoint counts, ports 1..65535,
// hosts without separators, redis db 0..15, an http path without query or fragment); and the
// address written back as a connection string (the canonical form) parses to the same address.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "metadata/store_address.h"

namespace ferry {
namespace {

std::string Join(const std::vector<HostPort>& endpoints) {
  std::string out;
  for (const HostPort& hp : endpoints) {
    if (!out.empty()) out += ",";
    out += hp.ToString();
  }
  return out;
}

// The connection string that names `a`.
std::string Format(const StoreAddress& a) {
  switch (a.kind) {
    case StoreAddress::Kind::kEtcd:
      return "etcd://" + Join(a.endpoints);
    case StoreAddress::Kind::kRedis: {
      std::string auth;
      if (!a.user.empty() || a.password.find(':') != std::string::npos) {
        auth = a.user + ":" + a.password + "@";
      } else if (!a.password.empty()) {
        auth = a.password + "@";
      }
      return "redis://" + auth + Join(a.endpoints) + "/" + std::to_string(a.db);
    }
    case StoreAddress::Kind::kHttp:
      return "http://" + Join(a.endpoints) + a.path;
    case StoreAddress::Kind::kP2P:
      return "P2PHANDSHAKE";
    case StoreAddress::Kind::kMemory:
      return "memory://" + a.name;
  }
  return "";
}

void CheckRules(const StoreAddress& a) {
  for (const HostPort& hp : a.endpoints) {
    FUZZ_CHECK(!hp.host.empty() && hp.port > 0, "empty host or port 0");
    FUZZ_CHECK(hp.host.find_first_of(",/@ ") == std::string::npos, "separator in a host");
  }
  switch (a.kind) {
    case StoreAddress::Kind::kEtcd:
      FUZZ_CHECK(!a.endpoints.empty(), "etcd without endpoints");
      break;
    case StoreAddress::Kind::kRedis:
      FUZZ_CHECK(a.endpoints.size() == 1 && a.db >= 0 && a.db <= 15, "redis address rules");
      break;
    case StoreAddress::Kind::kHttp:
      FUZZ_CHECK(a.endpoints.size() == 1, "http with other than one endpoint");
      FUZZ_CHECK(a.path.size() > 1 && a.path[0] == '/', "http path");
      FUZZ_CHECK(a.path.find_first_of("?# ") == std::string::npos, "query or fragment in path");
      break;
    case StoreAddress::Kind::kP2P:
    case StoreAddress::Kind::kMemory:
      FUZZ_CHECK(a.endpoints.empty(), "endpoints on a store without a server");
      break;
  }
}

}  // namespace
}  // namespace ferry

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry;
  const std::string_view connection = fuzz::AsText(data, size);
  Result<StoreAddress> a = ParseStoreAddress(connection);
  if (!a.ok()) {
    FUZZ_CHECK(a.status().code() == StatusCode::kInvalidArgument, a.status().ToString());
    FUZZ_CHECK(a.status().message().find(connection) != std::string::npos,
               "the error does not quote the string");
    return 0;
  }
  CheckRules(*a);
  const std::string canonical = Format(*a);
  Result<StoreAddress> again = ParseStoreAddress(canonical);
  FUZZ_CHECK(again.ok(), canonical + ": " + again.status().ToString());
  FUZZ_CHECK(*again == *a, "'" + canonical + "' parses to another address");
  return 0;
}
