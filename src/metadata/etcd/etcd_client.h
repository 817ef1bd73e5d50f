// EtcdClient: unary calls to etcd 3.4's v3 JSON gateway (POST /v3/..., keys and values base64,
// int64 fields as JSON strings) over several endpoints with failover. Private to the etcd
// plug-in: EtcdStore and the watch thread share one.
//
// Failover: a call goes first to the endpoint that answered last; when an endpoint cannot be
// reached, times out, or answers "unavailable" (HTTP 503/504, gRPC UNAVAILABLE/DEADLINE), the same
// request goes to the next one. Each endpoint tried gets `timeout` for connect, send and reply,
// so a call lasts at most endpoints().size() * timeout. All failing -> kUnavailable naming each
// endpoint and why.
//
// Errors, per MetadataStore: kUnavailable (could not ask), kNotFound (etcd answered NOT_FOUND,
// e.g. an unknown lease), kInvalidArgument (etcd refused the request), kInternal (a reply that
// is not what the gateway sends: bad JSON, wrong types, bad base64, over kMaxReplyBytes).
//
// Connections: unary calls reuse kept-alive HTTP connections from a pool per endpoint that every
// EtcdClient of the process shares (a thousand engines in a process need not open a connection
// per request, nor keep one each: etcd accepts and serves a reused connection for a fraction of a
// new one's cost). A call takes an idle connection (or opens one), and gives it back only after
// a complete reply; at most kEtcdIdleConnections idle ones per endpoint are kept, and a pool
// closes them when the last client of its endpoint goes. An idle connection the server closed
// (etcd restarted) is noticed before reuse and dropped; a reused connection that fails before
// any reply arrives is retried once on a new connection to the same endpoint (the request never
// reached etcd, or etcd dropped it unanswered, as a failover to the next endpoint assumes too).
//
// Thread contract: thread-safe; a call holds its connection alone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/host_port.h"
#include "ferry/status.h"
#include "metadata/metadata_store.h"

namespace ferry {

// Idle kept-alive connections kept per endpoint and process (see Connections above).
inline constexpr size_t kEtcdIdleConnections = 16;

class EtcdConnectionPool;

// The largest reply body (or streamed watch message) accepted from etcd.
inline constexpr size_t kMaxEtcdReplyBytes = size_t{32} << 20;

// The range end that selects every key starting with `prefix` (etcd's prefix-end rule): the
// prefix with its last byte below 0xff incremented and everything after it dropped; "\0" (all
// keys) when the prefix is empty or all 0xff.
std::string EtcdPrefixEnd(std::string_view prefix);

// Reads an int64 the gateway sends as a JSON string (or, leniently, a number). An absent field
// is 0 (proto3 omits zero values). Errors: kInternal naming `field`.
Result<int64_t> EtcdInt64Field(const nlohmann::json& object, std::string_view field);

// Reads a base64 bytes field; absent is empty. Errors: kInternal naming `field`.
Result<std::string> EtcdBytesField(const nlohmann::json& object, std::string_view field);

// The status etcd reported in an error reply ({"error","message","code"} from unary calls,
// {"error":{"grpc_code","message"}} inside a stream), tagged with the endpoint.
Status EtcdErrorStatus(const nlohmann::json& reply, int http_status, const HostPort& endpoint);

class EtcdClient {
 public:
  struct RangeReply {
    std::vector<KeyValue> kvs;  // sorted by key
    int64_t revision = 0;       // the store revision the range was read at
  };
  struct Lease {
    int64_t id = 0;
    int64_t ttl_seconds = 0;  // as granted (etcd may raise a small TTL to its minimum)
  };

  // `endpoints` must not be empty.
  EtcdClient(std::vector<HostPort> endpoints, std::chrono::milliseconds timeout);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // Keys in [key, range_end), or exactly `key` when range_end is empty.
  Result<RangeReply> Range(std::string_view key, std::string_view range_end);
  // The store's current revision (a count-only range on `key`).
  Result<int64_t> CurrentRevision(std::string_view key);
  // `lease` 0: no lease.
  Status Put(std::string_view key, std::string_view value, int64_t lease);
  // Deleting an absent key is OK.
  Status Delete(std::string_view key);
  Result<Lease> LeaseGrant(int64_t ttl_seconds);
  // The lease's remaining TTL in seconds; <= 0 means etcd no longer has the lease.
  Result<int64_t> LeaseKeepAlive(int64_t id);
  // Revokes the lease, deleting every key attached to it. An unknown lease is OK.
  Status LeaseRevoke(int64_t id);

  // POSTs `body` to `path` with failover and returns the parsed reply object.
  Result<nlohmann::json> Call(std::string_view path, const nlohmann::json& body);

  const std::vector<HostPort>& endpoints() const { return endpoints_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Index of the endpoint that answered last (where the next call starts).
  size_t preferred() const { return preferred_.load(std::memory_order_relaxed); }
  void set_preferred(size_t index) { preferred_.store(index, std::memory_order_relaxed); }

 private:
  // One attempt on one endpoint. `*try_next` says whether another endpoint may do better.
  Result<nlohmann::json> CallOne(size_t index, std::string_view path, const std::string& body,
                                 bool* try_next);

  const std::vector<HostPort> endpoints_;
  const std::chrono::milliseconds timeout_;
  const std::vector<std::shared_ptr<EtcdConnectionPool>> pools_;  // one per endpoint, shared
  std::atomic<size_t> preferred_{0};
};

}  // namespace ferry
