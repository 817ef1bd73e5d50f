// KvStore: the metadata server's keys with their TTLs and limits, written through to the data
// file; ExpirySweeper: the background purge of expired keys.
#pragma once

#include <chrono>
#include <cstddef>
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

namespace ferry::metadata_server {

// Thread contract: thread-safe. Changes are serialized; with a data file each one is on disk
// (WriteFileAtomically) before the call returns OK, and undone when the write fails (a reader may
// see such a change for the moment of the write). Expired keys are never returned, even before
// the sweep removes them. Expiry uses the wall clock, so it survives restarts; a wall-clock jump
// moves expiries with it.
class KvStore {
 public:
  struct Options {
    std::string data_path;  // empty: memory only
    size_t max_keys = 1000000;
  };

  // Loads the data file when it exists, dropping keys that expired meanwhile.
  // Errors: InvalidArgument "corrupt data file <path>: <why>"; Unavailable when it cannot be read.
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

  // Removes expired keys and persists the result when any went. Returns how many went.
  // Errors: Unavailable as for Put (the keys are then kept, still hidden from readers).
  Result<size_t> PurgeExpired();

 private:
  explicit KvStore(Options options) : options_(std::move(options)) {}

  // Writes the current entries to the data file (no-op without one). Caller holds write_mu_.
  Status Persist() REQUIRES(write_mu_) EXCLUDES(mu_);

  const Options options_;
  Mutex write_mu_;  // serializes changes and their file writes; taken before mu_
  mutable Mutex mu_;
  EntryMap entries_ GUARDED_BY(mu_);
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
