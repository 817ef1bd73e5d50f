// MetadataStore: the seam between ferry and the place segment descriptors are published
// (DESIGN.md, Seams). Control plane only: descriptors, never payload.
//
// Results keep "not there" and "could not ask" apart (STYLE.md 1):
//   kNotFound     the store answered: no such key
//   kUnavailable  the store could not be reached or did not answer in time
//   kInvalidArgument / kInternal  a malformed request or reply
// Every call is bounded by StoreOptions::request_timeout; none blocks forever.
//
// Leases: Put(..., {.leased = true}) ties the key to this client. The client keeps it alive in
// the background (etcd lease keep-alive, redis PEXPIRE, HTTP re-PUT with a TTL) and, when the
// store lost it (restart, expiry during a partition), writes it again once the store answers.
// When the owner process dies, nothing refreshes the key and it vanishes within lease_ttl.
// Destroying the store client deletes its leased keys (clean shutdown) unless Abandon() ran.
// A leased key is kept only while it holds the value this client wrote: when another writer
// replaced it (another engine took the name over), the refresh neither extends nor rewrites it,
// and the client forgets the key, logging that once; the destructor deletes only keys that
// still hold this client's values (DeleteIf).
//
// Watch is optional: stores that can push changes return a non-null watcher().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/status.h"

namespace ferry {

class Clock;

struct StoreOptions {
  std::chrono::milliseconds request_timeout{3000};  // bound on every network round trip
  std::chrono::milliseconds lease_ttl{10000};       // leased keys vanish this long after death
  Clock* clock = nullptr;                           // null: the real clock (borrowed, outlives)
};

struct PutOptions {
  bool leased = false;  // tie the key to this client's lease (see above)
  // Compare-and-set, for keys an owner must not take from another writer: when set, the key is
  // written only while it is absent or holds exactly *replaces (the value this writer wrote
  // last, or one it decided to replace); "" writes an absent key only. When the key holds
  // anything else nothing is written and Put fails with kAlreadyExists. The compare and the
  // write are one atomic step in the store, except on an HTTP server without ferry's
  // conditional requests (see http_store.h).
  std::optional<std::string> replaces;
};

struct KeyValue {
  std::string key;
  std::string value;
  friend bool operator==(const KeyValue&, const KeyValue&) = default;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  std::string key;
  std::string value;  // empty for kDelete
};

// A live watch. Destroying it stops delivery; after the destructor returns the callback is not
// running and will not run again. Thread contract: destroy from any thread except from inside
// its own callback.
class WatchHandle {
 public:
  virtual ~WatchHandle() = default;
};

// Called on the store's watch thread, one event at a time, in store order. It must not block for
// long; it may call the store. `resynced` events: after a reconnect that could not resume from
// the last revision, the store reports that with a kPut of every key under the prefix, so the
// consumer never misses a change (it may see one twice).
using WatchCallback = std::function<void(const WatchEvent&)>;

class Watcher {
 public:
  virtual ~Watcher() = default;
  // Starts delivering events for keys under `prefix`. Reconnects and resumes by itself.
  virtual Result<std::unique_ptr<WatchHandle>> Watch(std::string_view prefix,
                                                     WatchCallback callback) = 0;
};

// Thread contract: every method is thread-safe.
class MetadataStore {
 public:
  virtual ~MetadataStore() = default;

  // "etcd", "redis", "http", "p2p", "memory".
  virtual std::string_view scheme() const = 0;

  virtual Result<std::string> Get(std::string_view key) = 0;
  virtual Status Put(std::string_view key, std::string_view value, const PutOptions& options) = 0;
  Status Put(std::string_view key, std::string_view value) { return Put(key, value, PutOptions{}); }
  // Deleting an absent key is OK. Also forgets the key's lease, if it had one.
  virtual Status Delete(std::string_view key) = 0;
  // Deletes `key` only while it holds exactly `expected` (compare-and-delete: an owner removing
  // its own entry never removes the entry of whoever took the key over). Also forgets the key's
  // lease, whatever the outcome. Ok: deleted. kNotFound: the key is absent. kAlreadyExists: it
  // holds another value, left in place. kUnavailable: the store could not be asked. Atomic as
  // PutOptions::replaces is.
  virtual Status DeleteIf(std::string_view key, std::string_view expected) = 0;
  // Every key starting with `prefix`, sorted by key.
  virtual Result<std::vector<KeyValue>> List(std::string_view prefix) = 0;

  // Null when the store cannot push changes (then callers fall back to TTL expiry).
  virtual Watcher* watcher() = 0;

  // Whether this client found `key`, which it had written leased, holding another writer's
  // value since (its name was taken over; see Leases above), with no Put of it by this client
  // since. Local and cheap: what the lease refresh saw, no round trip. A client that never saw
  // it (the takeover came after its last refresh) answers false.
  virtual bool TakenOver(std::string_view key) const = 0;

  // Simulates a crash for tests and for fast exits: stops refreshing leases and forgets the
  // leased keys without deleting them, so they expire as if this process had died.
  virtual void Abandon() = 0;
};

}  // namespace ferry
