// redis://[user:pass@]h:p[/db]: a MetadataStore on one redis server (hiredis, synchronous).
//
// Values are plain strings; leased keys are written with SET ... PX lease_ttl and kept alive by
// a LeaseKeeper (PEXPIRE every lease_ttl/3, SET again when the key is gone, give the key up when
// another writer's value is there: one Lua script per key, EVAL). Conditional writes
// (PutOptions::replaces, DeleteIf, and the destructor's deletes of leased keys) are Lua
// check-and-set / check-and-delete scripts, atomic on the server. Every Put and Delete also
// PUBLISHes "<op> <db> <key>" on channel "ferry:events" (op: "set" or "del"), for watchers on
// servers that refuse CONFIG.
//
// Watch: each watch has its own subscriber connection. It first tries to turn on keyspace
// notifications (CONFIG SET notify-keyspace-events, keeping what the server already had plus
// "K$gxe") and PSUBSCRIBEs __keyspace@<db>__:<prefix>*; then it sees every writer, expiries and
// evictions. When CONFIG is refused (managed redis, ACL), it falls back to SUBSCRIBE
// ferry:events and sees only what ferry clients write: expiries of dead owners' leased keys
// are not reported there (consumers then rely on TTL). The mode is logged when chosen.
// After a lost subscription the watch reconnects (bounded backoff), resubscribes and reports
// kPut for every key under its prefix (deletions missed meanwhile are not reported).
//
// Lease TTLs run on the redis server's clock; StoreOptions::clock is not used.
#pragma once

#include <memory>
#include <string>

#include "common/host_port.h"
#include "ferry/status.h"
#include "metadata/metadata_store.h"

namespace ferry {

struct RedisConfig {
  HostPort server;
  std::string user;      // empty: AUTH <password> (or no AUTH when the password is empty too)
  std::string password;  // empty: no AUTH
  int db = 0;            // SELECTed on every connection
};

// Connects, authenticates and pings once, so a wrong password or an unreachable server fails
// here: kPermissionDenied when redis refuses the credentials, kUnavailable when it cannot be
// reached within options.request_timeout, kInvalidArgument for a non-positive timeout or TTL.
Result<std::unique_ptr<MetadataStore>> CreateRedisStore(const RedisConfig& config,
                                                        const StoreOptions& options);

}  // namespace ferry
