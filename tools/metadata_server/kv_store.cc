#include "metadata_server/kv_store.h"

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
  ASSIGN_OR_RETURN(std::optional<std::string> text, ReadFileIfExists(path));
  if (!text.has_value()) {
    // A fresh server: write the empty file now, so an unwritable path fails the start.
    MutexLock write(store->write_mu_);
    RETURN_IF_ERROR(store->Persist());
    return store;
  }
  Result<EntryMap> entries = DecodeDataFile(*text);
  if (!entries.ok()) {
    return InvalidArgumentError("corrupt data file " + path + ": " + entries.status().message() +
                                " (repair it or move it away; it is never discarded)");
  }
  const size_t expired = EraseExpired(*entries, NowUnixMs());
  if (entries->size() > store->options_.max_keys) {
    FERRY_LOG(kWarn) << path << " holds " << entries->size() << " keys, more than --max-keys "
                     << store->options_.max_keys << "; new keys are refused until some go";
  }
  FERRY_LOG(kInfo) << "loaded " << entries->size() << " keys from " << path << " (" << expired
                   << " expired meanwhile)";
  MutexLock lock(store->mu_);
  store->entries_ = std::move(*entries);
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
  MutexLock write(write_mu_);
  const int64_t now = NowUnixMs();
  std::optional<Entry> previous;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(key);
    const bool live = it != entries_.end() && !Expired(it->second, now);
    if (only_if && !only_if(live ? &it->second.value : nullptr)) {
      return AlreadyExistsError("the key holds another value");
    }
    if (!live && entries_.size() >= options_.max_keys) {
      EraseExpired(entries_, now);  // makes room; the next Persist records it
      it = entries_.find(key);
      if (entries_.size() >= options_.max_keys) {
        return AgainError("the server holds --max-keys " + std::to_string(options_.max_keys) +
                          " keys");
      }
    }
    if (it != entries_.end()) previous = it->second;
    const int64_t expires =
        ttl.count() > 0 ? now + std::chrono::duration_cast<std::chrono::milliseconds>(ttl).count()
                        : 0;
    entries_.insert_or_assign(std::string(key), Entry{std::move(value), expires});
  }
  Status s = Persist();
  if (!s.ok()) {
    MutexLock lock(mu_);
    if (previous.has_value()) {
      entries_.insert_or_assign(std::string(key), std::move(*previous));
    } else if (auto it = entries_.find(key); it != entries_.end()) {
      entries_.erase(it);
    }
  }
  return s;
}

Status KvStore::Delete(std::string_view key, const Condition& only_if) {
  MutexLock write(write_mu_);
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
  Status s = Persist();
  if (!s.ok()) {
    MutexLock lock(mu_);
    entries_.insert_or_assign(std::string(key), std::move(previous));
  }
  return s;
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
  if (expired.empty()) return size_t{0};
  Status s = Persist();
  if (!s.ok()) {
    MutexLock lock(mu_);
    entries_.merge(expired);
    return s;
  }
  return expired.size();
}

Status KvStore::Persist() {
  if (options_.data_path.empty()) return Status::Ok();
  Result<std::string> bytes = InternalError("unset");
  {
    MutexLock lock(mu_);
    bytes = EncodeDataFile(entries_);
  }
  if (!bytes.ok()) return bytes.status();
  Status s = WriteFileAtomically(options_.data_path, *bytes);
  if (!s.ok()) {
    FERRY_LOG(kError) << "persisting the metadata: " << s;
  }
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
