// SegmentDirectory: the cache of remote SegmentDescs (MISSION.md 4), and SegmentPublisher: the
// local segment's entries in the store.
//
// Keys follow Mooncake's layout: "<prefix>/ram/<segment>" holds the SegmentDesc JSON and
// "<prefix>/rpc_meta/<segment>" holds {"ip_or_host_name": ..., "rpc_port": ..., "incarnation": N}.
//
// The cache is never the truth. An entry is refreshed:
//  - by watch events, when the store has a watcher (a put replaces; a delete marks the entry
//    for a fetch, which decides as below);
//  - by age otherwise: an entry older than cache_ttl is fetched again on the next Open;
//  - on demand: Invalidate(name) when the data path met STALE, Sync(name) / SyncAll().
// The peer, not the store, decides whether a peer is gone. When the store answers NotFound for
// a segment whose descriptor is cached (on every fetch: cache expiry, Sync, a delete event), the
// directory asks the peer itself (DirectoryOptions::ask_peer): when the very incarnation it has
// cached answers, the descriptor that peer serves is installed and the store's NotFound is not
// an error; a peer that does not answer, or answers as another incarnation, is gone (NotFound).
// When the store cannot be asked at all, Open serves the cached descriptor and asks the store
// again only after cache_ttl; Sync reports Unavailable and keeps the cached descriptor.
// Store trouble is logged in bounded lines (common/failure_log.h): one when it starts, a summary
// every 10 s while it lasts, one when it ends; once per episode and segment for lost keys.
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
#include "common/failure_log.h"
#include "common/mutex.h"
#include "core/segment_desc.h"
#include "core/segment_desc_codec.h"
#include "ferry/status.h"
#include "ferry/types.h"
#include "metadata/metadata_store.h"

namespace ferry {

std::string SegmentDescKey(std::string_view prefix, std::string_view segment);
std::string RpcMetaKey(std::string_view prefix, std::string_view segment);
// The rpc_meta value Mooncake's tools read: {"ip_or_host_name": ..., "rpc_port": ...}, plus the
// engine's incarnation (Mooncake's readers ignore it), so that the values of two incarnations
// at the same endpoint differ: an owner's compare-and-delete or lease refresh never mistakes a
// successor's entry for its own.
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
  // Asked when the store answers NotFound for a segment whose descriptor is cached: the
  // descriptor JSON the engine at the cached descriptor's RPC endpoint serves for itself now
  // (the engine's GetSegmentDesc RPC), or an error when it does not answer. The store then lost
  // a live peer's keys (their TTL passed while the store was down, it restarted without them,
  // a delete event) and the peer writes them again at its next lease round. The answer counts
  // only when it decodes and names the cached segment and incarnation; anything else (no
  // answer, another incarnation) leaves the store's NotFound standing and drops the entry.
  // Runs on the fetching thread, without directory locks held, and must be bounded (an RPC with
  // a timeout). Optional; without it NotFound drops the cached descriptor.
  std::function<Result<std::string>(const SegmentDesc& cached)> ask_peer;
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

  // Fetches now, whatever the cache holds. Unavailable when the store cannot be asked (the cached
  // descriptor stays); on the store's NotFound the peer is asked as described above.
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
    // The store lacks this live peer's keys: the peer's own descriptor is served (logged once
    // when it starts, in summaries while it lasts, and when the store has them again).
    FailureStreak keys_lost;
  };

  SegmentDirectory(MetadataStore* store, DirectoryOptions options);
  Entry& EntryLocked(std::string_view name) REQUIRES(mu_);
  bool FreshLocked(const Entry& entry) const REQUIRES(mu_);
  // Returns the fresh cached descriptor, or fetches it as the single flight for `name` (or
  // shares the result of the flight already in the air). `force` skips the cache.
  Result<SegmentHandle> OpenEntry(std::string_view name, bool force) EXCLUDES(mu_);
  // Reads, decodes and installs `name`'s descriptor. Called by the single flight only. With
  // `allow_cached`, an unreachable store returns the cached descriptor, if any, instead. A
  // NotFound for a cached segment asks the peer (DirectoryOptions::ask_peer).
  Result<SegmentHandle> Fetch(std::string_view name, bool allow_cached) EXCLUDES(mu_);
  // The descriptor the live peer of `cached` serves for itself, when it is that very
  // incarnation; else null. Without directory locks held (it waits on the peer).
  std::shared_ptr<const SegmentDesc> AskPeer(const SegmentDesc& cached) EXCLUDES(mu_);
  // What a fetch found in the entry when it began, for an install it makes later (Fetch).
  struct FetchStart {
    uint64_t generation = 0;
    std::shared_ptr<const SegmentDesc> desc;  // the cached descriptor, if any
    bool peer_answer = false;  // installing the peer's own answer (AskPeer), not the store's
  };
  // Installs `desc` for `name` if it differs; reports a restart. Returns the handle.
  // `from_store`: it came from the store (which therefore has the peer's keys again).
  // With `start`, the check and the install are one step under mu_: when the entry changed
  // since the fetch began (another install, a close, an invalidation), a store value is not
  // installed over a fresh descriptor installed meanwhile, and a peer's answer is not installed
  // at all (it vouches only for the descriptor it was asked about); the entry's current
  // descriptor is returned instead, or NotFound when it has none.
  Result<SegmentHandle> Install(std::string_view name, std::shared_ptr<const SegmentDesc> desc,
                                bool from_store, const FetchStart* start = nullptr) EXCLUDES(mu_);
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
  FailureLog store_trouble_;  // the store could not be asked; cached descriptors served

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
  // Names are owned: an entry is written only while it is absent, holds what this publisher
  // wrote (a value carrying desc.incarnation), or holds a value AllowReplacing named
  // (PutOptions::replaces). An entry holding anything else belongs to another engine:
  // AlreadyExists, and nothing more is written.
  // A name once lost stays lost: when another engine took it over (a Put met its value, or the
  // store's lease refresh did: MetadataStore::TakenOver), this publisher forgets that it ever
  // wrote the name and every later Publish under it fails AlreadyExists ("... was taken over by
  // another engine") without writing, even while the store lacks the key (it restarted without
  // data, the new holder stopped): only a new AllowReplacing (a new claim) writes it again.
  // Logged once, at warn.
  // On success, `*encoded` (when given) receives the descriptor JSON that was written.
  Status Publish(const SegmentDesc& desc, std::string* encoded = nullptr);
  // Lets the next write of `key` replace `value`, which the caller found there and decided to
  // take over (its engine is dead, or the caller was told to take the name over).
  void AllowReplacing(std::string key, std::string value);
  // Whether another engine took `name` over from this publisher (see Publish). Also checks what
  // the store's lease refresh saw, so it turns true without a Publish. Local: never waits on the
  // store nor on a Publish in progress (an RPC handler may ask).
  bool taken_over(std::string_view name) const;
  // Deletes both entries of the last published segment (clean shutdown), each only while it
  // holds what this publisher wrote (MetadataStore::DeleteIf); rpc_meta only when the
  // descriptor was not found holding another engine's value (that engine's rpc_meta is next to
  // it). An entry another engine holds now is left in place (logged at info). Errors: the
  // store's, when it could not be asked.
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
  // The name `lost_name_` was taken over by another engine (see Publish); empty: not lost.
  // Its own lock, never held while asking the store: taken_over() must not wait on a Publish.
  mutable Mutex lost_mu_;  // taken after mu_ where both are held
  std::string lost_name_ GUARDED_BY(lost_mu_);
  // Writes `value` under `key` if the key is absent or holds one of our values (below, or one
  // carrying `incarnation`). AlreadyExists (and the name marked lost) otherwise.
  Status PutOwnedLocked(const std::string& name, uint64_t incarnation, const std::string& key,
                        const std::string& value) REQUIRES(mu_);
  // Deletes `key` if it holds one of our values. Ok when deleted or absent; AlreadyExists when
  // another engine's value is there (left in place, logged); the store's error otherwise.
  Status DeleteOwnedLocked(const std::string& key) REQUIRES(mu_);
  // Whether `name` is lost, or the store saw another engine's value under one of its keys (then
  // marks it lost). `name` is the published one.
  bool LostLocked(const std::string& name) REQUIRES(mu_);
  // Marks `name` lost: forgets every value we wrote for it; logs once.
  void MarkLostLocked(const std::string& name, const std::string& why) REQUIRES(mu_);

  std::map<std::string, std::string> written_ GUARDED_BY(mu_);  // key -> value last Put
  // key -> value of a later Put that failed without an answer (it may have landed).
  std::map<std::string, std::string> attempted_ GUARDED_BY(mu_);
  // key -> another engine's value the next Put may replace (AllowReplacing).
  std::map<std::string, std::string> replaceable_ GUARDED_BY(mu_);
};

}  // namespace ferry
