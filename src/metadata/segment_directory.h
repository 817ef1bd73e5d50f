// SegmentDirectory: the cache of remote SegmentDescs (MISSION.md 4), and SegmentPublisher: the
// local segment's entries in the store.
//
// Keys follow Mooncake's layout: "<prefix>/ram/<segment>" holds the SegmentDesc JSON and
// "<prefix>/rpc_meta/<segment>" holds {"ip_or_host_name": ..., "rpc_port": ...}.
//
// The cache is never the truth. An entry is refreshed:
//  - by watch events, when the store has a watcher (a put replaces, a delete drops);
//  - by age otherwise: an entry older than cache_ttl is fetched again on the next Open;
//  - on demand: Invalidate(name) when the data path met STALE, Sync(name) / SyncAll().
// When the store cannot be asked, or answers NotFound for a peer whose cached incarnation still
// answers (DirectoryOptions::still_alive), Open serves the cached descriptor (not Sync).
// A replacement is an atomic swap of a shared_ptr<const SegmentDesc>: users holding the old
// snapshot keep it, unchanged, for as long as they hold it. A fetched value that fails to decode
// is an error for the caller and leaves the cached snapshot as it was.
// Many threads opening one name cause one fetch (single flight); the others wait for it, bounded
// by fetch_timeout.
//
// Thread contract: every method is thread-safe. The store is borrowed and must outlive the
// directory. The on_replaced callback runs on the thread that installed the new descriptor
// (a caller of Open/Sync or the store's watch thread), without directory locks held.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "core/segment_desc.h"
#include "core/segment_desc_codec.h"
#include "ferry/status.h"
#include "ferry/types.h"
#include "metadata/metadata_store.h"

namespace ferry {

std::string SegmentDescKey(std::string_view prefix, std::string_view segment);
std::string RpcMetaKey(std::string_view prefix, std::string_view segment);
// The rpc_meta value Mooncake's tools read: {"ip_or_host_name": ..., "rpc_port": ...}.
std::string RpcMetaValue(const SegmentDesc& desc);

struct DirectoryOptions {
  std::string prefix = "ferry";
  std::chrono::milliseconds cache_ttl{5000};       // entry age that forces a fetch, without watch
  std::chrono::milliseconds fetch_timeout{10000};  // bound on waiting for another thread's fetch
  Clock* clock = nullptr;                          // null: real clock; borrowed
  DecodeLimits limits;
  // A segment's descriptor was replaced by one with a different incarnation: the peer restarted
  // under the same name. Optional.
  std::function<void(std::string_view name, uint64_t old_incarnation, uint64_t new_incarnation)>
      on_restarted;
  // Asked when the store answers NotFound for a segment whose descriptor is cached: true when
  // the engine of that very descriptor (its incarnation) still answers. The store then lost a
  // live peer's keys (their TTL passed while the store was down, or it restarted without them)
  // and the peer writes them again within its lease refresh: the cached descriptor is served,
  // as when the store is unreachable, instead of failing transfers to a live peer. Runs on the
  // fetching thread, without directory locks held, and should be bounded (an RPC probe).
  // Optional; without it NotFound drops the cached descriptor.
  std::function<bool(const SegmentDesc& cached)> still_alive;
};

struct SegmentHandle {
  SegmentId id = 0;
  std::shared_ptr<const SegmentDesc> desc;  // a snapshot; never null in a returned handle
};

class SegmentDirectory {
 public:
  // Starts watching "<prefix>/ram/" when the store can watch.
  static Result<std::unique_ptr<SegmentDirectory>> Create(MetadataStore* store,
                                                          DirectoryOptions options);
  ~SegmentDirectory();
  SegmentDirectory(const SegmentDirectory&) = delete;
  SegmentDirectory& operator=(const SegmentDirectory&) = delete;

  // The segment's current descriptor: from the cache when fresh, else fetched. The id of a name
  // never changes for the directory's life, even when the peer restarts.
  // Errors: NotFound (no such segment), Unavailable (store unreachable), InvalidArgument (the
  // stored descriptor is malformed), Timeout (another thread's fetch did not finish in time).
  Result<SegmentHandle> Open(std::string_view name);
  // By id, with the same freshness rules as Open.
  Result<SegmentHandle> Get(SegmentId id);
  // The cached descriptor of `id` when it is fresh, without asking the store (the data path's
  // fast path, which must not wait on the network). NotFound for an unknown id; Unavailable
  // when only a fetch (Get) can answer.
  Result<SegmentHandle> Cached(SegmentId id) const;
  // The name an id was opened under. NotFound for an unknown id.
  Result<std::string> Name(SegmentId id) const;
  // Forgets a segment's cached descriptor (its id stays reserved for its name).
  void Close(SegmentId id);

  // Fetches now, whatever the cache holds.
  Status Sync(std::string_view name);
  // Fetches every cached segment; returns the first error, after trying them all.
  Status SyncAll();
  // Marks the cached descriptor stale: the next Open fetches.
  void Invalidate(std::string_view name);

  // Counters, for tests and stats.
  uint64_t fetches() const;
  bool watching() const { return watch_ != nullptr; }

 private:
  struct Entry {
    SegmentId id = 0;
    std::string name;
    std::shared_ptr<const SegmentDesc> desc;
    Clock::TimePoint fetched_at{};
    bool stale = true;
    bool fetching = false;    // one thread is fetching this name
    uint64_t fetch_seq = 0;   // bumped when a fetch finishes
    Status last_error;        // result of the last finished fetch, shared with its waiters
    uint64_t generation = 0;  // bumped by each install and invalidation
    bool serving_cached = false;  // a fetch failed and the cached descriptor was served (logged)
  };

  SegmentDirectory(MetadataStore* store, DirectoryOptions options);
  Entry& EntryLocked(std::string_view name) REQUIRES(mu_);
  bool FreshLocked(const Entry& entry) const REQUIRES(mu_);
  // Returns the fresh cached descriptor, or fetches it as the single flight for `name` (or
  // shares the result of the flight already in the air). `force` skips the cache.
  Result<SegmentHandle> OpenEntry(std::string_view name, bool force) EXCLUDES(mu_);
  // Reads, decodes and installs `name`'s descriptor. Called by the single flight only. With
  // `allow_cached`, an unreachable store returns the cached descriptor, if any, instead.
  Result<SegmentHandle> Fetch(std::string_view name, bool allow_cached) EXCLUDES(mu_);
  // Installs `desc` for `name` if it differs; reports a restart. Returns the handle.
  SegmentHandle Install(std::string_view name, std::shared_ptr<const SegmentDesc> desc)
      EXCLUDES(mu_);
  void OnWatchEvent(const WatchEvent& event);

  MetadataStore* const store_;
  const DirectoryOptions options_;
  Clock* const clock_;
  const std::string ram_prefix_;  // "<prefix>/ram/"

  mutable Mutex mu_;
  CondVar fetched_;  // a fetch finished
  std::map<std::string, Entry, std::less<>> entries_ GUARDED_BY(mu_);
  std::map<SegmentId, std::string> names_ GUARDED_BY(mu_);
  SegmentId next_id_ GUARDED_BY(mu_) = 1;
  uint64_t fetches_ GUARDED_BY(mu_) = 0;

  std::unique_ptr<WatchHandle> watch_;  // last member: stopped first on destruction
};

// Publishes the local segment: the descriptor and rpc_meta entries, leased so that they vanish
// when this process dies, and rewritten by the store client when the store comes back.
// Thread contract: thread-safe (calls serialize). The store is borrowed and outlives it.
class SegmentPublisher {
 public:
  SegmentPublisher(MetadataStore* store, std::string prefix);

  // Validates, encodes and writes both entries, each only when its value differs from what
  // this publisher last wrote (rpc_meta is therefore written once per incarnation). A desc that
  // fails ValidateSegmentDesc is InvalidArgument and nothing is written. Calls serialize, so
  // the store ends up holding the value of the last call.
  // On success, `*encoded` (when given) receives the descriptor JSON that was written.
  Status Publish(const SegmentDesc& desc, std::string* encoded = nullptr);
  // Deletes both entries of the last published segment (clean shutdown).
  Status Remove();
  uint64_t publishes() const;
  uint64_t writes() const;  // Puts issued (unchanged values skipped)

 private:
  MetadataStore* const store_;
  const std::string prefix_;
  mutable Mutex mu_;
  std::string published_name_ GUARDED_BY(mu_);
  uint64_t publishes_ GUARDED_BY(mu_) = 0;
  uint64_t writes_ GUARDED_BY(mu_) = 0;
  std::map<std::string, std::string> written_ GUARDED_BY(mu_);  // key -> value last Put
};

}  // namespace ferry
