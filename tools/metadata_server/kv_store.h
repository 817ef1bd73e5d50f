// KvStore: the metadata server's keys with their TTLs and limits, written through to the data
// file and its journal; ExpirySweeper: the background purge of expired keys.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "ferry/status.h"
#include "metadata_server/data_file.h"
#include "metadata_server/journal.h"

namespace ferry::metadata_server {

// Persistence (with a data file): the data file is a snapshot (data_file.h) and
// <data>.journal (journal.h) holds every change made since, one record per change. A change is
// appended and fdatasynced before the call returns OK (a lease re-PUT of an unchanged value is
// journaled too: its expiry moved), and undone when that fails (a reader may see such a change
// for the moment of the write). Concurrent changes share one append and one fdatasync (group
// commit, see Commit). Once the journal passes max(journal_compact_bytes, the snapshot's size)
// it is compacted: a new snapshot of every key, then an empty journal (journal.h says why a
// crash at any step loses nothing). Open replays the journal after the snapshot and compacts;
// so does Compact at a clean stop, leaving the data file complete by itself (what the previous
// release reads: it ignores the journal). After a failed append or compaction the journal is not
// trusted: the next commit compacts instead of appending, and its changes fail (undone) while
// that fails. A change answered Unavailable may still be found after a crash when the disk
// failed mid-write (as with a failed directory fsync before).
//
// Thread contract: thread-safe. Changes are serialized. Expired keys are never returned, even
// before the sweep removes them. Expiry uses the wall clock, so it survives restarts; a
// wall-clock jump moves expiries with it.
class KvStore {
 public:
  struct Options {
    std::string data_path;  // empty: memory only
    size_t max_keys = 1000000;
    uint64_t journal_compact_bytes = uint64_t{4} << 20;  // see the class comment
  };

  // Loads the data file when it exists and replays its journal, dropping keys that expired
  // meanwhile and a torn journal tail (a crash mid-append), then compacts.
  // Errors: InvalidArgument "corrupt data file <path>: <why>" or "corrupt journal <path>: at
  // offset N: <why>" (both files are then left as they are); Unavailable when they cannot be
  // read or written.
  static Result<std::unique_ptr<KvStore>> Open(Options options);

  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  // The value of a live key, or nullopt.
  std::optional<std::string> Get(std::string_view key) const;

  // A condition on a key's live value (null: absent or expired), checked under the store's lock
  // together with the change it guards (conditional requests, http_conditional.h).
  using Condition = std::function<bool(const std::string* current)>;

  // Stores `value` under `key`. ttl zero: the key never expires; otherwise it expires `ttl` from
  // now (a later Put replaces the TTL, a Put without TTL removes it). With `only_if`, nothing
  // changes unless it holds for the current value.
  // Errors: AlreadyExists when `only_if` refused; Again when `key` is new and max_keys live keys
  // are held; Unavailable when the data file could not be written (the store keeps its previous
  // state).
  Status Put(std::string_view key, std::string value, std::chrono::seconds ttl,
             const Condition& only_if = nullptr);

  // Removes `key`; OK when it is absent. With `only_if`: NotFound when it is absent, and
  // AlreadyExists (kept) when the condition refuses its value. Errors: Unavailable as for Put.
  Status Delete(std::string_view key, const Condition& only_if = nullptr);

  // Live keys starting with `prefix`, with their values, sorted by key.
  std::vector<std::pair<std::string, std::string>> List(std::string_view prefix) const;

  // Number of live keys.
  size_t Size() const;

  // Removes expired keys and journals their deletion when any went. Returns how many went.
  // Errors: Unavailable as for Put (the keys are then kept, still hidden from readers).
  Result<size_t> PurgeExpired();

  // Writes a snapshot of every key and empties the journal (no-op without a data file); for a
  // clean stop. Errors: Unavailable as for Put (the keys stay as they are; the next change
  // retries).
  Status Compact();

 private:
  explicit KvStore(Options options) : options_(std::move(options)) {}

  // Where a change's caller learns its outcome. Set by the committing thread and read by the
  // caller, both under commit_mu_.
  struct Ticket {
    bool done = false;
    Status result = Status::Ok();
  };
  // A change applied to entries_ and not yet on disk: its framed journal records, what undoes
  // it, and its caller's ticket.
  struct PendingChange {
    std::string records;
    bool sets_key = false;          // false: only `removed` (a purge)
    std::string key;                // with sets_key: restored to `previous` on undo
    std::optional<Entry> previous;  // nullopt: absent before
    EntryMap removed;               // expired entries the change removed, put back on undo
    Ticket* ticket = nullptr;
  };

  // Group commit: the caller of a change queues it (under write_mu_, right after applying it)
  // and waits in Commit. The first waiter finding no commit running becomes the committer: it
  // takes every queued change, appends their records with one write and one fdatasync (or
  // compacts, which writes them all too: when the journal is not trusted or has grown past its
  // bound), sets their tickets and wakes their callers; changes queued meanwhile go in the
  // next batch. When the write fails, the batch and every change queued after it are undone,
  // newest first, and fail with the error.
  Status Commit(Ticket& ticket) EXCLUDES(commit_mu_, journal_mu_, write_mu_, mu_);
  // Compacts, which commits every queued change (or, failing, undoes them). Returns how the
  // compaction went and adds the tickets it settled to `settled`.
  Status CompactAndSettle(std::vector<std::pair<Ticket*, Status>>& settled)
      REQUIRES(journal_mu_, write_mu_) EXCLUDES(mu_);
  // Undoes `changes`, newest first, and adds their tickets to `settled` with `why`.
  void UndoChanges(std::vector<PendingChange>& changes, const Status& why,
                   std::vector<std::pair<Ticket*, Status>>& settled) REQUIRES(write_mu_)
      EXCLUDES(mu_);
  // Publishes `settled` outcomes to their callers; with `commit_ended`, also that the calling
  // committer is done.
  void Settle(const std::vector<std::pair<Ticket*, Status>>& settled, bool commit_ended)
      EXCLUDES(commit_mu_);
  // Writes the snapshot, then a fresh journal following it. Leaves journal_ null on failure.
  Status CompactLocked() REQUIRES(journal_mu_, write_mu_) EXCLUDES(mu_);

  const Options options_;
  // Lock order: journal_mu_, write_mu_, mu_; commit_mu_ is taken alone or after journal_mu_.
  Mutex journal_mu_;  // held by the committing thread while it writes the journal or compacts
  Mutex write_mu_;    // serializes changes (apply and queue)
  mutable Mutex mu_;
  EntryMap entries_ GUARDED_BY(mu_);
  std::vector<PendingChange> pending_ GUARDED_BY(write_mu_);        // applied, not yet on disk
  std::unique_ptr<JournalWriter> journal_ GUARDED_BY(journal_mu_);  // null: compact next
  uint64_t snapshot_bytes_ GUARDED_BY(journal_mu_) = 0;
  Mutex commit_mu_;
  CondVar committed_;                               // a commit ended
  bool committing_ GUARDED_BY(commit_mu_) = false;  // a thread is committing
};

// Purges expired keys of a KvStore every `interval` on its own thread.
// Thread contract: thread-safe; Start and Stop are idempotent. `store` is borrowed and must
// outlive the sweeper.
class ExpirySweeper {
 public:
  ExpirySweeper(KvStore& store, std::chrono::milliseconds interval);
  ~ExpirySweeper();  // Stop()
  ExpirySweeper(const ExpirySweeper&) = delete;
  ExpirySweeper& operator=(const ExpirySweeper&) = delete;

  void Start();
  void Stop();

 private:
  void Run();

  KvStore& store_;
  const std::chrono::milliseconds interval_;
  Mutex start_mu_;  // guards thread_ (Start/Stop)
  std::thread thread_;
  Mutex mu_;
  CondVar wake_;
  bool stop_ GUARDED_BY(mu_) = false;
};

}  // namespace ferry::metadata_server
