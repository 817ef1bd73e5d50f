#include "metadata/store_address.h"

#include <charconv>

namespace ferry {
namespace {

constexpr std::string_view kForms =
    "accepted: etcd://host:port[,host:port...], host:port[,...] (etcd), "
    "redis://[user:password@]host:port[/db], http://host:port/path, P2PHANDSHAKE, memory://[name]";

Status Bad(std::string_view connection, std::string_view why) {
  return InvalidArgumentError("metadata connection string '" + std::string(connection) +
                              "': " + std::string(why) + " (" + std::string(kForms) + ")");
}

Result<std::vector<HostPort>> ParseEndpointList(std::string_view list,
                                                std::string_view connection) {
  std::vector<HostPort> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    Result<HostPort> hp = ParseHostPort(list.substr(pos, comma - pos), "etcd endpoint");
    if (!hp.ok()) return Bad(connection, hp.status().message());
    out.push_back(*hp);
    pos = comma + 1;
  }
  return out;
}

Result<StoreAddress> ParseRedis(std::string_view rest, std::string_view connection) {
  StoreAddress a;
  a.kind = StoreAddress::Kind::kRedis;
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view auth = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = auth.find(':');
    if (colon == std::string_view::npos) {
      a.password = std::string(auth);  // redis://password@host:port
    } else {
      a.user = std::string(auth.substr(0, colon));
      a.password = std::string(auth.substr(colon + 1));
    }
  }
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    auto [ptr, ec] = std::from_chars(db.data(), db.data() + db.size(), a.db);
    if (db.empty() || ec != std::errc() || ptr != db.data() + db.size() || a.db < 0 || a.db > 15) {
      return Bad(connection, "redis database must be 0..15");
    }
    rest = rest.substr(0, slash);
  }
  Result<HostPort> hp = ParseHostPort(rest, "redis server");
  if (!hp.ok()) return Bad(connection, hp.status().message());
  a.endpoints.push_back(*hp);
  return a;
}

}  // namespace

Result<StoreAddress> ParseStoreAddress(std::string_view connection) {
  if (connection.empty()) return Bad(connection, "empty");
  if (connection == "P2PHANDSHAKE") return StoreAddress{.kind = StoreAddress::Kind::kP2P};
  const size_t sep = connection.find("://");
  if (sep == std::string_view::npos) {
    // A bare endpoint list means etcd.
    ASSIGN_OR_RETURN(std::vector<HostPort> endpoints, ParseEndpointList(connection, connection));
    return StoreAddress{.kind = StoreAddress::Kind::kEtcd, .endpoints = std::move(endpoints)};
  }
  const std::string_view scheme = connection.substr(0, sep);
  const std::string_view rest = connection.substr(sep + 3);
  if (scheme == "etcd") {
    if (rest.empty()) return Bad(connection, "no etcd endpoint");
    ASSIGN_OR_RETURN(std::vector<HostPort> endpoints, ParseEndpointList(rest, connection));
    return StoreAddress{.kind = StoreAddress::Kind::kEtcd, .endpoints = std::move(endpoints)};
  }
  if (scheme == "redis") return ParseRedis(rest, connection);
  if (scheme == "http") {
    const size_t slash = rest.find('/');
    if (slash == std::string_view::npos || slash + 1 == rest.size()) {
      return Bad(connection, "an http store needs a path, e.g. http://host:8080/metadata");
    }
    Result<HostPort> hp = ParseHostPort(rest.substr(0, slash), "http server");
    if (!hp.ok()) return Bad(connection, hp.status().message());
    std::string path(rest.substr(slash));
    if (path.find_first_of("?# ") != std::string::npos) {
      return Bad(connection, "the http path may not hold a query, fragment or space");
    }
    return StoreAddress{.kind = StoreAddress::Kind::kHttp, .endpoints = {*hp}, .path = path};
  }
  if (scheme == "memory") {
    if (rest.find_first_of("/?# ") != std::string_view::npos) {
      return Bad(connection, "a memory store name may not hold '/', '?', '#' or spaces");
    }
    return StoreAddress{.kind = StoreAddress::Kind::kMemory, .name = std::string(rest)};
  }
  return Bad(connection, "unknown scheme '" + std::string(scheme) + "'");
}

}  // namespace ferry
