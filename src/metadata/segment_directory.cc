#include "metadata/segment_directory.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "common/log.h"

namespace ferry {

std::string SegmentDescKey(std::string_view prefix, std::string_view segment) {
  return std::string(prefix) + "/ram/" + std::string(segment);
}

std::string RpcMetaKey(std::string_view prefix, std::string_view segment) {
  return std::string(prefix) + "/rpc_meta/" + std::string(segment);
}

std::string RpcMetaValue(const SegmentDesc& desc) {
  return nlohmann::json{{"ip_or_host_name", desc.rpc.host},
                        {"rpc_port", desc.rpc.port},
                        {"incarnation", desc.incarnation}}
      .dump();
}

namespace {

// The "incarnation" field of a stored descriptor or rpc_meta value; nullopt when it has none.
std::optional<uint64_t> IncarnationOf(const std::string& value) {
  const nlohmann::json doc = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  auto it = doc.find("incarnation");
  if (it == doc.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<uint64_t>();
}

}  // namespace

// ---- SegmentDirectory -------------------------------------------------------------------------

SegmentDirectory::SegmentDirectory(MetadataStore* store, DirectoryOptions options)
    : store_(store),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
      ram_prefix_(SegmentDescKey(options_.prefix, "")),
      store_trouble_("segment directory: metadata store", LogLevel::kWarn, clock_) {}

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
  FetchStart start;
  {
    MutexLock lock(mu_);
    Entry& entry = EntryLocked(name);
    start.generation = entry.generation;
    start.desc = entry.desc;
  }
  const std::shared_ptr<const SegmentDesc> cached = start.desc;
  const std::string what = "segment '" + std::string(name) + "'";
  auto failed = [&](const Status& error) -> Result<SegmentHandle> {
    // The store answered NotFound for a peer we know: the peer itself decides whether it is gone
    // (asked without the lock, as it waits on the peer).
    std::shared_ptr<const SegmentDesc> from_peer;
    if (error.code() == StatusCode::kNotFound && cached != nullptr) from_peer = AskPeer(*cached);
    if (from_peer != nullptr) {
      std::optional<std::string> line;
      {
        MutexLock lock(mu_);
        line = EntryLocked(name).keys_lost.Failed(
            what + ": the metadata store lacks the keys of the live peer",
            error.ToString() + "; incarnation " + std::to_string(cached->incarnation) +
                " answers at " + cached->rpc.host + ":" + std::to_string(cached->rpc.port) +
                ", using the descriptor it serves",
            clock_->Now(), kFailureSummaryEvery);
      }
      if (line.has_value()) FERRY_LOG(kWarn) << *line;
      // Only over the very descriptor the peer was asked about: while it answered, a watch event
      // may have installed another engine that took the name (a newer incarnation), which an
      // older peer's answer must never replace.
      start.peer_answer = true;
      Result<SegmentHandle> installed = Install(name, std::move(from_peer), false, &start);
      if (installed.status().code() == StatusCode::kNotFound) return error;
      return installed;
    }
    MutexLock lock(mu_);
    Entry& entry = EntryLocked(name);
    if (entry.generation != start.generation && entry.desc != nullptr && !entry.stale) {
      return SegmentHandle{entry.id, entry.desc};  // a watch event installed one meanwhile
    }
    if (error.code() == StatusCode::kNotFound) {
      entry.desc.reset();  // the segment is gone; holders keep their snapshots
      entry.stale = true;
      ++entry.generation;
    } else if (allow_cached && entry.desc != nullptr &&
               error.code() == StatusCode::kUnavailable) {
      // The store is down; a descriptor we had is better than none. The data path reports
      // STALE if it is wrong. The store is asked again after cache_ttl, not on every request.
      entry.fetched_at = clock_->Now();
      return SegmentHandle{entry.id, entry.desc};
    }
    return error;
  };

  Result<std::string> value = store_->Get(SegmentDescKey(options_.prefix, name));
  if (!value.ok()) {
    const Status error = value.status().WithContext(what);
    if (error.code() == StatusCode::kUnavailable) {
      store_trouble_.Failed(error.ToString() +
                            (allow_cached && cached != nullptr ? "; using the cached descriptor"
                                                               : ""));
    } else {
      store_trouble_.Succeeded();  // it answered
    }
    return failed(error);
  }
  store_trouble_.Succeeded();
  Result<SegmentDesc> decoded = DecodeSegmentDesc(*value, options_.limits);
  if (!decoded.ok()) {
    return failed(decoded.status().WithContext(what + ": stored descriptor rejected"));
  }
  if (decoded->name != name) {
    return failed(InvalidArgumentError(what + ": stored descriptor names segment '" +
                                       decoded->name + "'"));
  }
  return Install(name, std::make_shared<const SegmentDesc>(std::move(decoded).value()),
                 /*from_store=*/true, &start);
}

std::shared_ptr<const SegmentDesc> SegmentDirectory::AskPeer(const SegmentDesc& cached) {
  if (!options_.ask_peer) return nullptr;
  Result<std::string> answer = options_.ask_peer(cached);
  if (!answer.ok()) {
    FERRY_LOG(kDebug) << "segment '" << cached.name << "' is not in the store and its peer does "
                      << "not answer: " << answer.status();
    return nullptr;
  }
  Result<SegmentDesc> decoded = DecodeSegmentDesc(*answer, options_.limits);
  if (!decoded.ok() || decoded->name != cached.name ||
      decoded->incarnation != cached.incarnation) {
    FERRY_LOG(kDebug) << "segment '" << cached.name << "' is not in the store and its endpoint "
                      << "answers as another segment or incarnation";
    return nullptr;
  }
  return std::make_shared<const SegmentDesc>(std::move(decoded).value());
}

Result<SegmentHandle> SegmentDirectory::Install(std::string_view name,
                                                std::shared_ptr<const SegmentDesc> desc,
                                                bool from_store, const FetchStart* start) {
  uint64_t old_incarnation = 0;
  SegmentHandle handle;
  std::optional<std::string> keys_back;
  {
    MutexLock lock(mu_);
    Entry& entry = EntryLocked(name);
    if (start != nullptr) {
      // The entry may have changed while this fetch was out. A store value yields only to a
      // fresh descriptor installed meanwhile (a watch event); a peer's answer vouches only for
      // the very descriptor it was asked about, so it yields to any change.
      const bool changed = entry.generation != start->generation;
      const bool keep_current = start->peer_answer
                                    ? changed || entry.desc != start->desc
                                    : changed && entry.desc != nullptr && !entry.stale;
      if (keep_current) {
        if (entry.desc == nullptr) {
          return NotFoundError("segment '" + std::string(name) + "' was dropped meanwhile");
        }
        return SegmentHandle{entry.id, entry.desc};
      }
    }
    if (entry.desc != nullptr) old_incarnation = entry.desc->incarnation;
    if (entry.desc == nullptr || *entry.desc != *desc) {
      entry.desc = std::move(desc);  // the atomic swap: holders of the old pointer keep it
    }
    entry.fetched_at = clock_->Now();
    entry.stale = false;
    if (from_store) {
      keys_back = entry.keys_lost.Succeeded(
          "segment '" + std::string(name) + "': the metadata store lacks the keys of the live peer",
          clock_->Now());
    }
    ++entry.generation;
    fetched_.NotifyAll();
    handle = SegmentHandle{entry.id, entry.desc};
  }
  if (keys_back.has_value()) FERRY_LOG(kInfo) << *keys_back;
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
      // The store dropped the keys; whether the peer is gone is the peer's to say. The next use
      // fetches, and that fetch asks the peer (see Fetch); the descriptor stays until then.
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
  Install(name, std::make_shared<const SegmentDesc>(std::move(decoded).value()),
          /*from_store=*/true)
      .status()
      .IgnoreError();  // unconditional: never fails
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
    DeleteOwnedLocked(SegmentDescKey(prefix_, published_name_)).IgnoreError();
    DeleteOwnedLocked(RpcMetaKey(prefix_, published_name_)).IgnoreError();
  }
  if (published_name_ != desc.name) {
    written_.clear();
    attempted_.clear();
  }
  const std::string meta_key = RpcMetaKey(prefix_, desc.name);
  const std::string desc_key = SegmentDescKey(prefix_, desc.name);
  if (LostLocked(desc.name)) {
    // Even into an absent key: the store may have lost the new holder's entry for a moment
    // (restarted without data; the holder stopped), and writing ours would take the name back.
    return AlreadyExistsError("segment name '" + desc.name +
                              "' was taken over by another engine; not publishing under it "
                              "(this engine keeps serving its current peers; a new engine "
                              "init claims the name again)");
  }
  // rpc_meta first: a peer that sees the descriptor can always find the endpoint. A value the
  // store already holds from us is not written again (the store client keeps leased keys alive
  // and rewrites them after a store restart): rpc_meta goes once per incarnation, and
  // Mooncake's HTTP server refuses a second PUT of it.
  for (const auto& [key, value] : {std::pair<const std::string&, const std::string&>{meta_key, rpc_meta},
                                   {desc_key, json}}) {
    auto it = written_.find(key);
    if (it != written_.end() && it->second == value && attempted_.count(key) == 0) continue;
    RETURN_IF_ERROR(PutOwnedLocked(desc.name, desc.incarnation, key, value));
    ++writes_;
  }
  published_name_ = desc.name;
  ++publishes_;
  if (encoded != nullptr) *encoded = json;
  return Status::Ok();
}

void SegmentPublisher::AllowReplacing(std::string key, std::string value) {
  MutexLock lock(mu_);
  {
    // A new claim: a name lost before is this publisher's to write again.
    MutexLock lost(lost_mu_);
    if (!lost_name_.empty() && (key == SegmentDescKey(prefix_, lost_name_) ||
                                key == RpcMetaKey(prefix_, lost_name_))) {
      lost_name_.clear();
    }
  }
  replaceable_.insert_or_assign(std::move(key), std::move(value));
}

bool SegmentPublisher::taken_over(std::string_view name) const {
  if (name.empty()) return false;
  {
    MutexLock lost(lost_mu_);
    if (lost_name_ == name) return true;
  }
  return store_->TakenOver(SegmentDescKey(prefix_, name)) ||
         store_->TakenOver(RpcMetaKey(prefix_, name));
}

bool SegmentPublisher::LostLocked(const std::string& name) {
  if (name.empty()) return false;
  {
    MutexLock lost(lost_mu_);
    if (lost_name_ == name) return true;
  }
  if (name != published_name_) return false;  // never written: nothing of ours to lose
  // The store's lease refresh found another engine's value under a key we wrote (and gave the
  // key up). A key AllowReplacing named since is ours to write again (a new claim).
  for (const std::string& key : {SegmentDescKey(prefix_, name), RpcMetaKey(prefix_, name)}) {
    if (replaceable_.count(key) == 0 && store_->TakenOver(key)) {
      MarkLostLocked(name, "the metadata store's lease refresh found another engine's value "
                           "under '" + key + "'");
      return true;
    }
  }
  return false;
}

void SegmentPublisher::MarkLostLocked(const std::string& name, const std::string& why) {
  {
    MutexLock lost(lost_mu_);
    if (lost_name_ == name) return;
    lost_name_ = name;
  }
  for (const std::string& key : {SegmentDescKey(prefix_, name), RpcMetaKey(prefix_, name)}) {
    written_.erase(key);
    attempted_.erase(key);
    replaceable_.erase(key);
  }
  FERRY_LOG(kWarn) << "segment name '" << name << "' was taken over by another engine (" << why
                   << "): this engine no longer publishes under it; its current peers keep "
                      "working with it";
}

Status SegmentPublisher::PutOwnedLocked(const std::string& name, uint64_t incarnation,
                                        const std::string& key, const std::string& value) {
  // The values `key` may hold that are ours to replace; each also allows an absent key.
  std::vector<std::string> ours;
  for (const auto* held : {&written_, &attempted_, &replaceable_}) {
    if (auto it = held->find(key); it != held->end()) ours.push_back(it->second);
  }
  if (ours.empty()) ours.emplace_back();  // "": an absent key only
  Status s;
  for (const std::string& replaces : ours) {
    s = store_->Put(key, value, {.leased = true, .replaces = replaces});
    if (s.code() != StatusCode::kAlreadyExists) break;
  }
  if (s.code() == StatusCode::kAlreadyExists) {
    // Another value is there. One of ours all the same (an earlier write that failed without an
    // answer, then landed) carries our incarnation: replace it. Anything else is another
    // engine's.
    Result<std::string> held = store_->Get(key);
    if (held.ok() && IncarnationOf(*held) == incarnation) {
      s = store_->Put(key, value, {.leased = true, .replaces = *held});
    } else if (!held.ok() && held.status().code() != StatusCode::kNotFound) {
      attempted_[key] = value;
      return held.status().WithContext("checking who holds '" + key + "'");
    }
  }
  if (s.code() == StatusCode::kAlreadyExists) {
    const bool held_before = written_.count(key) > 0 || attempted_.count(key) > 0;
    MarkLostLocked(name, "a conditional write of '" + key + "' found another engine's value");
    if (held_before) {
      return AlreadyExistsError("segment name '" + name +
                                "' was taken over by another engine; not overwriting its entry: " +
                                s.message());
    }
    return AlreadyExistsError("segment '" + name +
                              "' is held by another engine (it published under this name, or "
                              "took it over); not overwriting its entry: " +
                              s.message());
  }
  if (!s.ok()) {
    attempted_[key] = value;  // it may have landed: ours to replace or delete later
    return s;
  }
  written_[key] = value;
  attempted_.erase(key);
  replaceable_.erase(key);
  return Status::Ok();
}

Status SegmentPublisher::DeleteOwnedLocked(const std::string& key) {
  std::vector<std::string> ours;
  for (const auto* held : {&written_, &attempted_}) {
    if (auto it = held->find(key); it != held->end()) ours.push_back(it->second);
  }
  Status s;
  for (const std::string& expected : ours) {
    s = store_->DeleteIf(key, expected);
    if (s.ok() || s.code() == StatusCode::kNotFound) return Status::Ok();
    if (s.code() != StatusCode::kAlreadyExists) return s;
  }
  if (s.code() == StatusCode::kAlreadyExists) {
    FERRY_LOG(kInfo) << "leaving '" << key << "' in place: another engine holds it now";
  }
  return s;
}

Status SegmentPublisher::Remove() {
  MutexLock lock(mu_);
  if (published_name_.empty()) return Status::Ok();
  Status a;
  Status b;
  if (!LostLocked(published_name_)) {
    // The descriptor first: when another engine holds it, the rpc_meta entry is that engine's
    // too (it may even read the same, an engine restarted in place), and is left alone.
    a = DeleteOwnedLocked(SegmentDescKey(prefix_, published_name_));
    if (a.code() == StatusCode::kAlreadyExists) {
      a = Status::Ok();
    } else {
      b = DeleteOwnedLocked(RpcMetaKey(prefix_, published_name_));
      if (b.code() == StatusCode::kAlreadyExists) b = Status::Ok();
    }
  }
  published_name_.clear();
  written_.clear();
  attempted_.clear();
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
