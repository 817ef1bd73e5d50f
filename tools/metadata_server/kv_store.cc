#include "metadata_server/kv_store.h"

#include <algorithm>

#include "common/log.h"

namespace ferry::metadata_server {
namespace {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool Expired(const Entry& entry, int64_t now_ms) {
  return entry.expires_unix_ms != 0 && entry.expires_unix_ms <= now_ms;
}

// Removes expired entries from `entries`; returns how many went.
size_t EraseExpired(EntryMap& entries, int64_t now_ms) {
  return std::erase_if(entries, [now_ms](const auto& kv) { return Expired(kv.second, now_ms); });
}

}  // namespace

Result<std::unique_ptr<KvStore>> KvStore::Open(Options options) {
  std::unique_ptr<KvStore> store(new KvStore(std::move(options)));
  const std::string& path = store->options_.data_path;
  if (path.empty()) return store;
  const std::string journal_path = JournalPathFor(path);
  ASSIGN_OR_RETURN(std::optional<std::string> text, ReadFileIfExists(path));
  ASSIGN_OR_RETURN(std::optional<std::string> journal, ReadFileIfExists(journal_path));
  EntryMap entries;
  if (text.has_value()) {
    Result<EntryMap> decoded = DecodeDataFile(*text);
    if (!decoded.ok()) {
      return InvalidArgumentError("corrupt data file " + path + ": " + decoded.status().message() +
                                  " (repair it or move it away; it is never discarded)");
    }
    entries = std::move(*decoded);
  }
  size_t replayed = 0;
  if (journal.has_value() && !text.has_value()) {
    // Only a person removes the data file and keeps the journal: a fresh start replaces it.
    FERRY_LOG(kWarn) << journal_path << " has no data file " << path
                     << " beside it: starting empty, the journal is replaced";
  } else if (journal.has_value()) {
    Result<JournalReplay> replay = ReplayJournal(*journal, JournalSnapshotIdOf(*text), entries);
    if (!replay.ok()) {
      return InvalidArgumentError("corrupt journal " + journal_path + ": " +
                                  replay.status().message() +
                                  " (repair it or move it away; it is never discarded)");
    }
    if (!replay->follows_snapshot) {
      FERRY_LOG(kInfo) << journal_path << " follows an earlier " << path
                       << " (a compaction was cut short): skipped, the data file holds it all";
    }
    if (replay->torn_bytes > 0) {
      FERRY_LOG(kWarn) << journal_path << ": dropped a torn last record (" << replay->torn_bytes
                       << " bytes at offset " << replay->torn_offset
                       << "; a crash during a write that was never acknowledged)";
    }
    replayed = replay->records;
  }
  const size_t expired = EraseExpired(entries, NowUnixMs());
  if (entries.size() > store->options_.max_keys) {
    FERRY_LOG(kWarn) << path << " holds " << entries.size() << " keys, more than --max-keys "
                     << store->options_.max_keys << "; new keys are refused until some go";
  }
  FERRY_LOG(kInfo) << "loaded " << entries.size() << " keys from " << path << " and " << replayed
                   << " journal records (" << expired << " keys expired meanwhile)";
  {
    MutexLock lock(store->mu_);
    store->entries_ = std::move(entries);
  }
  // Folds the journal in (and, for a fresh server, writes both files now, so an unwritable path
  // fails the start).
  MutexLock journal_lock(store->journal_mu_);
  MutexLock write(store->write_mu_);
  RETURN_IF_ERROR(store->CompactLocked());
  return store;
}

std::optional<std::string> KvStore::Get(std::string_view key) const {
  MutexLock lock(mu_);
  const auto it = entries_.find(key);
  if (it == entries_.end() || Expired(it->second, NowUnixMs())) return std::nullopt;
  return it->second.value;
}

Status KvStore::Put(std::string_view key, std::string value, std::chrono::seconds ttl,
                    const Condition& only_if) {
  Ticket ticket;
  {
    MutexLock write(write_mu_);
    const int64_t now = NowUnixMs();
    const int64_t expires =
        ttl.count() > 0 ? now + std::chrono::duration_cast<std::chrono::milliseconds>(ttl).count()
                        : 0;
    Entry entry{std::move(value), expires};
    std::string records;
    if (!options_.data_path.empty()) {
      ASSIGN_OR_RETURN(records, EncodeJournalPut(key, entry));
    }
    std::optional<Entry> previous;
    EntryMap expired;  // erased to make room
    {
      MutexLock lock(mu_);
      auto it = entries_.find(key);
      const bool live = it != entries_.end() && !Expired(it->second, now);
      if (only_if && !only_if(live ? &it->second.value : nullptr)) {
        return AlreadyExistsError("the key holds another value");
      }
      if (!live && entries_.size() >= options_.max_keys) {
        for (auto e = entries_.begin(); e != entries_.end();) {
          if (Expired(e->second, now) && e->first != key) {
            expired.insert(entries_.extract(e++));
          } else {
            ++e;
          }
        }
        if (entries_.size() >= options_.max_keys) {
          entries_.merge(expired);
          return AgainError("the server holds --max-keys " + std::to_string(options_.max_keys) +
                            " keys");
        }
      }
      if (it != entries_.end()) previous = it->second;
      entries_.insert_or_assign(std::string(key), std::move(entry));
    }
    if (options_.data_path.empty()) return Status::Ok();
    std::string deletes;  // in one append with the put, before it
    for (const auto& [k, unused] : expired) {
      Result<std::string> record = EncodeJournalDelete(k);
      if (record.ok()) deletes += *record;  // stored keys are UTF-8: always encodes
    }
    pending_.push_back({.records = deletes + records,
                        .sets_key = true,
                        .key = std::string(key),
                        .previous = std::move(previous),
                        .removed = std::move(expired),
                        .ticket = &ticket});
  }
  return Commit(ticket);
}

Status KvStore::Delete(std::string_view key, const Condition& only_if) {
  Ticket ticket;
  {
    MutexLock write(write_mu_);
    std::string records;
    if (!options_.data_path.empty()) {
      ASSIGN_OR_RETURN(records, EncodeJournalDelete(key));
    }
    Entry previous;
    {
      MutexLock lock(mu_);
      auto it = entries_.find(key);
      if (only_if) {
        if (it == entries_.end() || Expired(it->second, NowUnixMs())) {
          return NotFoundError("no such key");
        }
        if (!only_if(&it->second.value)) return AlreadyExistsError("the key holds another value");
      }
      if (it == entries_.end()) return Status::Ok();
      previous = std::move(it->second);
      entries_.erase(it);
    }
    if (options_.data_path.empty()) return Status::Ok();
    pending_.push_back({.records = std::move(records),
                        .sets_key = true,
                        .key = std::string(key),
                        .previous = std::move(previous),
                        .ticket = &ticket});
  }
  return Commit(ticket);
}

std::vector<std::pair<std::string, std::string>> KvStore::List(std::string_view prefix) const {
  const int64_t now = NowUnixMs();
  std::vector<std::pair<std::string, std::string>> out;
  MutexLock lock(mu_);
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && std::string_view(it->first).substr(0, prefix.size()) == prefix;
       ++it) {
    if (!Expired(it->second, now)) out.emplace_back(it->first, it->second.value);
  }
  return out;
}

size_t KvStore::Size() const {
  const int64_t now = NowUnixMs();
  MutexLock lock(mu_);
  size_t live = 0;
  for (const auto& [key, entry] : entries_) live += Expired(entry, now) ? 0 : 1;
  return live;
}

Result<size_t> KvStore::PurgeExpired() {
  Ticket ticket;
  size_t purged = 0;
  {
    MutexLock write(write_mu_);
    EntryMap expired;
    {
      MutexLock lock(mu_);
      const int64_t now = NowUnixMs();
      for (auto it = entries_.begin(); it != entries_.end();) {
        if (Expired(it->second, now)) {
          auto node = entries_.extract(it++);
          expired.insert(std::move(node));
        } else {
          ++it;
        }
      }
    }
    purged = expired.size();
    if (purged == 0 || options_.data_path.empty()) return purged;
    std::string records;
    for (const auto& [key, unused] : expired) {
      Result<std::string> record = EncodeJournalDelete(key);
      if (record.ok()) records += *record;  // stored keys are UTF-8: always encodes
    }
    pending_.push_back(
        {.records = std::move(records), .removed = std::move(expired), .ticket = &ticket});
  }
  RETURN_IF_ERROR(Commit(ticket));
  return purged;
}

Status KvStore::Compact() {
  if (options_.data_path.empty()) return Status::Ok();
  std::vector<std::pair<Ticket*, Status>> settled;
  Status s = Status::Ok();
  {
    MutexLock journal_lock(journal_mu_);
    MutexLock write(write_mu_);
    s = CompactAndSettle(settled);
  }
  Settle(settled, /*commit_ended=*/false);
  return s;
}

Status KvStore::Commit(Ticket& ticket) {
  {
    MutexLock commit(commit_mu_);
    while (!ticket.done && committing_) {
      committed_.WaitUntil(commit_mu_, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    }
    if (ticket.done) return ticket.result;
    committing_ = true;
  }
  std::vector<std::pair<Ticket*, Status>> settled;
  {
    MutexLock journal_lock(journal_mu_);
    std::vector<PendingChange> batch;
    bool compact = false;
    {
      MutexLock write(write_mu_);
      compact = journal_ == nullptr;
      if (compact) {
        CompactAndSettle(settled).IgnoreError();  // each ticket says how it went
      } else {
        batch.swap(pending_);
      }
    }
    if (!compact && !batch.empty()) {
      std::string bytes;
      for (const PendingChange& change : batch) bytes += change.records;
      Status s = journal_->Append(bytes);
      if (!s.ok()) {
        FERRY_LOG(kError) << "persisting the metadata: " << s;
        journal_.reset();  // the next commit compacts
        MutexLock write(write_mu_);
        UndoChanges(pending_, s, settled);  // queued after the batch: newer, undone first
        pending_.clear();
        UndoChanges(batch, s, settled);
      } else {
        for (const PendingChange& change : batch) settled.emplace_back(change.ticket, s);
        if (journal_->size() > std::max(options_.journal_compact_bytes, snapshot_bytes_)) {
          MutexLock write(write_mu_);
          // The batch is on disk already: a failed compaction fails only what was queued since.
          if (Status c = CompactAndSettle(settled); !c.ok()) {
            FERRY_LOG(kWarn) << "compacting the metadata journal failed: " << c;
          }
        }
      }
    }
  }
  Settle(settled, /*commit_ended=*/true);
  // Normally settled above; else by a Compact that took the change first. Nothing touches the
  // ticket once it is done, so it may then go.
  MutexLock commit(commit_mu_);
  while (!ticket.done) {
    committed_.WaitUntil(commit_mu_, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  }
  return ticket.result;
}

Status KvStore::CompactAndSettle(std::vector<std::pair<Ticket*, Status>>& settled) {
  Status s = CompactLocked();  // the snapshot holds every queued change
  if (s.ok()) {
    for (const PendingChange& change : pending_) settled.emplace_back(change.ticket, s);
  } else {
    UndoChanges(pending_, s, settled);
  }
  pending_.clear();
  return s;
}

void KvStore::UndoChanges(std::vector<PendingChange>& changes, const Status& why,
                          std::vector<std::pair<Ticket*, Status>>& settled) {
  MutexLock lock(mu_);
  for (auto change = changes.rbegin(); change != changes.rend(); ++change) {
    if (change->sets_key && change->previous.has_value()) {
      entries_.insert_or_assign(change->key, std::move(*change->previous));
    } else if (change->sets_key) {
      if (auto it = entries_.find(change->key); it != entries_.end()) entries_.erase(it);
    }
    entries_.merge(change->removed);
    settled.emplace_back(change->ticket, why);
  }
}

void KvStore::Settle(const std::vector<std::pair<Ticket*, Status>>& settled, bool commit_ended) {
  MutexLock commit(commit_mu_);
  for (const auto& [ticket, result] : settled) {
    ticket->done = true;
    ticket->result = result;
  }
  if (commit_ended) committing_ = false;
  committed_.NotifyAll();
}

Status KvStore::CompactLocked() {
  // Not appended to again until a new journal follows the new snapshot: once the snapshot is
  // replaced, the old journal's records would be skipped at the next load.
  journal_.reset();
  Result<std::string> bytes = InternalError("unset");
  {
    MutexLock lock(mu_);
    bytes = EncodeDataFile(entries_);
  }
  if (!bytes.ok()) return bytes.status();
  Status s = WriteFileAtomically(options_.data_path, *bytes);
  if (s.ok()) {
    Result<std::unique_ptr<JournalWriter>> journal =
        JournalWriter::Create(JournalPathFor(options_.data_path), JournalSnapshotIdOf(*bytes));
    if (journal.ok()) {
      journal_ = std::move(*journal);
      snapshot_bytes_ = bytes->size();
      return Status::Ok();
    }
    s = journal.status();
  }
  FERRY_LOG(kError) << "persisting the metadata: " << s;
  return s;
}

ExpirySweeper::ExpirySweeper(KvStore& store, std::chrono::milliseconds interval)
    : store_(store), interval_(interval) {}

ExpirySweeper::~ExpirySweeper() { Stop(); }

void ExpirySweeper::Start() {
  MutexLock start(start_mu_);
  if (thread_.joinable()) return;
  {
    MutexLock lock(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Run(); });
}

void ExpirySweeper::Stop() {
  MutexLock start(start_mu_);
  {
    MutexLock lock(mu_);
    stop_ = true;
    wake_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

void ExpirySweeper::Run() {
  bool failing = false;
  for (;;) {
    {
      MutexLock lock(mu_);
      const auto deadline = std::chrono::steady_clock::now() + interval_;
      while (!stop_ && std::chrono::steady_clock::now() < deadline) wake_.WaitUntil(mu_, deadline);
      if (stop_) return;
    }
    Result<size_t> purged = store_.PurgeExpired();
    if (!purged.ok() && !failing) {
      FERRY_LOG(kWarn) << "purging expired keys failed (retrying): " << purged.status();
    } else if (purged.ok() && *purged > 0) {
      FERRY_LOG(kDebug) << "purged " << *purged << " expired keys";
    }
    failing = !purged.ok();
  }
}

}  // namespace ferry::metadata_server
