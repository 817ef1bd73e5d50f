#include "metadata/segment_directory.h"

#include <nlohmann/json.hpp>

#include "common/log.h"

namespace ferry {

std::string SegmentDescKey(std::string_view prefix, std::string_view segment) {
  return std::string(prefix) + "/ram/" + std::string(segment);
}

std::string RpcMetaKey(std::string_view prefix, std::string_view segment) {
  return std::string(prefix) + "/rpc_meta/" + std::string(segment);
}

std::string RpcMetaValue(const SegmentDesc& desc) {
  return nlohmann::json{{"ip_or_host_name", desc.rpc.host}, {"rpc_port", desc.rpc.port}}.dump();
}

// ---- SegmentDirectory -------------------------------------------------------------------------

SegmentDirectory::SegmentDirectory(MetadataStore* store, DirectoryOptions options)
    : store_(store),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      ram_prefix_(SegmentDescKey(options_.prefix, "")) {}

Result<std::unique_ptr<SegmentDirectory>> SegmentDirectory::Create(MetadataStore* store,
                                                                   DirectoryOptions options) {
  if (store == nullptr) return InvalidArgumentError("segment directory needs a metadata store");
  if (options.prefix.empty()) return InvalidArgumentError("empty metadata key prefix");
  std::unique_ptr<SegmentDirectory> dir(new SegmentDirectory(store, std::move(options)));
  if (Watcher* watcher = store->watcher()) {
    SegmentDirectory* self = dir.get();
    ASSIGN_OR_RETURN(dir->watch_, watcher->Watch(dir->ram_prefix_, [self](const WatchEvent& e) {
      self->OnWatchEvent(e);
    }));
  }
  return dir;
}

SegmentDirectory::~SegmentDirectory() { watch_.reset(); }

SegmentDirectory::Entry& SegmentDirectory::EntryLocked(std::string_view name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    Entry entry;
    entry.id = next_id_++;
    entry.name = std::string(name);
    names_.emplace(entry.id, entry.name);
    it = entries_.emplace(std::string(name), std::move(entry)).first;
  }
  return it->second;
}

bool SegmentDirectory::FreshLocked(const Entry& entry) const {
  if (entry.desc == nullptr || entry.stale) return false;
  if (watch_ != nullptr) return true;  // watch events keep it current
  return clock_->Now() - entry.fetched_at < options_.cache_ttl;
}

Result<SegmentHandle> SegmentDirectory::Open(std::string_view name) {
  if (name.empty()) return InvalidArgumentError("empty segment name");
  return OpenEntry(name, /*force=*/false);
}

Result<SegmentHandle> SegmentDirectory::Get(SegmentId id) {
  std::string name;
  {
    MutexLock lock(mu_);
    auto it = names_.find(id);
    if (it == names_.end()) return NotFoundError("no segment with id " + std::to_string(id));
    name = it->second;
  }
  return OpenEntry(name, /*force=*/false);
}

Result<SegmentHandle> SegmentDirectory::Cached(SegmentId id) const {
  MutexLock lock(mu_);
  auto it = names_.find(id);
  if (it == names_.end()) return NotFoundError("no segment with id " + std::to_string(id));
  const Entry& entry = entries_.find(it->second)->second;
  if (!FreshLocked(entry) || entry.fetching) {
    return UnavailableError("segment '" + it->second + "' needs a fetch");
  }
  return SegmentHandle{entry.id, entry.desc};
}

Result<std::string> SegmentDirectory::Name(SegmentId id) const {
  MutexLock lock(mu_);
  auto it = names_.find(id);
  if (it == names_.end()) return NotFoundError("no segment with id " + std::to_string(id));
  return it->second;
}

void SegmentDirectory::Close(SegmentId id) {
  MutexLock lock(mu_);
  auto it = names_.find(id);
  if (it == names_.end()) return;
  Entry& entry = entries_.at(it->second);
  entry.desc.reset();
  entry.stale = true;
  ++entry.generation;
}

Result<SegmentHandle> SegmentDirectory::OpenEntry(std::string_view name, bool force) {
  const auto deadline = std::chrono::steady_clock::now() + options_.fetch_timeout;
  auto wait_for_fetch = [&](Entry* entry) REQUIRES(mu_) -> Status {
    const uint64_t seq = entry->fetch_seq;
    while (entry->fetching && entry->fetch_seq == seq) {
      if (!fetched_.WaitUntil(mu_, deadline) && std::chrono::steady_clock::now() >= deadline) {
        return TimeoutError("waited " + std::to_string(options_.fetch_timeout.count()) +
                            " ms for another fetch of segment '" + std::string(name) + "'");
      }
    }
    return Status::Ok();
  };
  {
    MutexLock lock(mu_);
    Entry* entry = &EntryLocked(name);  // entries are never erased, so the pointer stays valid
    if (!force && FreshLocked(*entry)) return SegmentHandle{entry->id, entry->desc};
    if (entry->fetching) {
      // Another thread is fetching this name: share its result instead of asking again.
      RETURN_IF_ERROR(wait_for_fetch(entry));
      if (!force) {
        if (!entry->last_error.ok()) return entry->last_error;
        if (entry->desc != nullptr) return SegmentHandle{entry->id, entry->desc};
      }
      while (entry->fetching) RETURN_IF_ERROR(wait_for_fetch(entry));
    }
    entry->fetching = true;
    ++fetches_;
  }
  Result<SegmentHandle> result = Fetch(name, /*allow_cached=*/!force);
  MutexLock lock(mu_);
  Entry& entry = EntryLocked(name);
  entry.fetching = false;
  ++entry.fetch_seq;
  entry.last_error = result.status();
  fetched_.NotifyAll();
  return result;
}

Result<SegmentHandle> SegmentDirectory::Fetch(std::string_view name, bool allow_cached) {
  uint64_t generation_at_start = 0;
  {
    MutexLock lock(mu_);
    generation_at_start = EntryLocked(name).generation;
  }
  auto failed = [&](const Status& error) -> Result<SegmentHandle> {
    // The store lost the keys of a peer that is still there (see DirectoryOptions::still_alive):
    // asked without the lock, as it waits on the peer.
    bool alive = false;
    if (allow_cached && error.code() == StatusCode::kNotFound && options_.still_alive) {
      std::shared_ptr<const SegmentDesc> cached;
      {
        MutexLock lock(mu_);
        cached = EntryLocked(name).desc;
      }
      alive = cached != nullptr && options_.still_alive(*cached);
    }
    MutexLock lock(mu_);
    Entry& entry = EntryLocked(name);
    if (error.code() == StatusCode::kNotFound && !alive) {
      entry.desc.reset();  // the segment is gone; holders keep their snapshots
      entry.stale = true;
      ++entry.generation;
    } else if (allow_cached && entry.desc != nullptr &&
               (alive || error.code() == StatusCode::kUnavailable)) {
      // The store is down, or lost the keys of a live peer; a descriptor we had is better than
      // none. The data path reports STALE if it is wrong. Said once per outage and name, not
      // once per fetch.
      if (!entry.serving_cached) {
        entry.serving_cached = true;
        FERRY_LOG(kWarn) << "segment '" << name << "': "
                         << (alive ? "store lost the keys of the live peer"
                                   : "store unavailable")
                         << ", using cached descriptor: " << error;
      }
      return SegmentHandle{entry.id, entry.desc};
    }
    return error;
  };

  Result<std::string> value = store_->Get(SegmentDescKey(options_.prefix, name));
  if (!value.ok()) {
    return failed(value.status().WithContext("segment '" + std::string(name) + "'"));
  }
  Result<SegmentDesc> decoded = DecodeSegmentDesc(*value, options_.limits);
  if (!decoded.ok()) {
    return failed(decoded.status().WithContext("segment '" + std::string(name) +
                                               "': stored descriptor rejected"));
  }
  if (decoded->name != name) {
    return failed(InvalidArgumentError("segment '" + std::string(name) +
                                       "': stored descriptor names segment '" + decoded->name +
                                       "'"));
  }
  {
    MutexLock lock(mu_);
    Entry& entry = EntryLocked(name);
    if (entry.generation != generation_at_start && entry.desc != nullptr && !entry.stale) {
      return SegmentHandle{entry.id, entry.desc};  // a watch event installed a newer one meanwhile
    }
  }
  return Install(name, std::make_shared<const SegmentDesc>(std::move(decoded).value()));
}

SegmentHandle SegmentDirectory::Install(std::string_view name,
                                        std::shared_ptr<const SegmentDesc> desc) {
  uint64_t old_incarnation = 0;
  SegmentHandle handle;
  {
    MutexLock lock(mu_);
    Entry& entry = EntryLocked(name);
    if (entry.desc != nullptr) old_incarnation = entry.desc->incarnation;
    if (entry.desc == nullptr || *entry.desc != *desc) {
      entry.desc = std::move(desc);  // the atomic swap: holders of the old pointer keep it
    }
    entry.fetched_at = clock_->Now();
    entry.stale = false;
    entry.serving_cached = false;
    ++entry.generation;
    fetched_.NotifyAll();
    handle = SegmentHandle{entry.id, entry.desc};
  }
  if (old_incarnation != 0 && old_incarnation != handle.desc->incarnation) {
    FERRY_LOG(kInfo) << "segment '" << name << "' restarted: incarnation " << old_incarnation
                     << " -> " << handle.desc->incarnation;
    if (options_.on_restarted)
      options_.on_restarted(name, old_incarnation, handle.desc->incarnation);
  }
  return handle;
}

Status SegmentDirectory::Sync(std::string_view name) {
  if (name.empty()) return InvalidArgumentError("empty segment name");
  return OpenEntry(name, /*force=*/true).status();
}

Status SegmentDirectory::SyncAll() {
  std::vector<std::string> names;
  {
    MutexLock lock(mu_);
    for (const auto& [name, entry] : entries_) {
      if (entry.desc != nullptr || !entry.stale) names.push_back(name);
    }
  }
  Status first;
  for (const std::string& name : names) {
    Status s = Sync(name);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

void SegmentDirectory::Invalidate(std::string_view name) {
  MutexLock lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  it->second.stale = true;
  ++it->second.generation;
}

uint64_t SegmentDirectory::fetches() const {
  MutexLock lock(mu_);
  return fetches_;
}

void SegmentDirectory::OnWatchEvent(const WatchEvent& event) {
  if (event.key.compare(0, ram_prefix_.size(), ram_prefix_) != 0) return;
  const std::string name = event.key.substr(ram_prefix_.size());
  {
    MutexLock lock(mu_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return;  // never opened here: nothing cached to refresh
    if (event.type == WatchEvent::Type::kDelete) {
      it->second.desc.reset();
      it->second.stale = true;
      ++it->second.generation;
      return;
    }
  }
  Result<SegmentDesc> decoded = DecodeSegmentDesc(event.value, options_.limits);
  if (!decoded.ok() || decoded->name != name) {
    FERRY_LOG(kWarn) << "segment '" << name << "': ignoring a malformed descriptor update: "
                     << (decoded.ok() ? "it names another segment" : decoded.status().ToString());
    return;
  }
  Install(name, std::make_shared<const SegmentDesc>(std::move(decoded).value()));
}

// ---- SegmentPublisher -------------------------------------------------------------------------

SegmentPublisher::SegmentPublisher(MetadataStore* store, std::string prefix)
    : store_(store), prefix_(std::move(prefix)) {}

Status SegmentPublisher::Publish(const SegmentDesc& desc, std::string* encoded) {
  RETURN_IF_ERROR(
      ValidateSegmentDesc(desc).WithContext("not publishing segment '" + desc.name + "'"));
  const std::string json = EncodeSegmentDesc(desc);
  const std::string rpc_meta = RpcMetaValue(desc);
  MutexLock lock(mu_);
  if (!published_name_.empty() && published_name_ != desc.name) {
    store_->Delete(SegmentDescKey(prefix_, published_name_)).IgnoreError();
    store_->Delete(RpcMetaKey(prefix_, published_name_)).IgnoreError();
  }
  if (published_name_ != desc.name) written_.clear();
  // rpc_meta first: a peer that sees the descriptor can always find the endpoint. A value the
  // store already holds from us is not written again (the store client keeps leased keys alive
  // and rewrites them after a store restart): rpc_meta goes once per incarnation, and
  // Mooncake's HTTP server refuses a second PUT of it.
  const std::string meta_key = RpcMetaKey(prefix_, desc.name);
  const std::string desc_key = SegmentDescKey(prefix_, desc.name);
  for (const auto& [key, value] : {std::pair<const std::string&, const std::string&>{meta_key, rpc_meta},
                                   {desc_key, json}}) {
    auto it = written_.find(key);
    if (it != written_.end() && it->second == value) continue;
    written_.erase(key);  // unknown until the Put answers
    RETURN_IF_ERROR(store_->Put(key, value, {.leased = true}));
    written_[key] = value;
    ++writes_;
  }
  published_name_ = desc.name;
  ++publishes_;
  if (encoded != nullptr) *encoded = json;
  return Status::Ok();
}

Status SegmentPublisher::Remove() {
  MutexLock lock(mu_);
  if (published_name_.empty()) return Status::Ok();
  Status a = store_->Delete(SegmentDescKey(prefix_, published_name_));
  Status b = store_->Delete(RpcMetaKey(prefix_, published_name_));
  published_name_.clear();
  written_.clear();
  return a.ok() ? b : a;
}

uint64_t SegmentPublisher::publishes() const {
  MutexLock lock(mu_);
  return publishes_;
}

uint64_t SegmentPublisher::writes() const {
  MutexLock lock(mu_);
  return writes_;
}

}  // namespace ferry
