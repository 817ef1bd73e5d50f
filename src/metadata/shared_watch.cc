#include "metadata/shared_watch.h"

#include <map>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace ferry {
namespace {

// One shared stream: the store's watch of a prefix, and the watchers it feeds.
class Stream {
 public:
  struct Subscriber {
    explicit Subscriber(WatchCallback cb) : callback(std::move(cb)) {}
    Mutex mu;  // held while its callback runs, so that removal waits for it
    bool removed GUARDED_BY(mu) = false;
    const WatchCallback callback;
  };

  ~Stream() { watch_.reset(); }  // first: after this, Dispatch is not running

  // Starts the store's watch of `prefix` (the stream's events go to Dispatch).
  Status Start(Watcher* watcher, std::string_view prefix) {
    ASSIGN_OR_RETURN(watch_, watcher->Watch(prefix, [this](const WatchEvent& e) { Dispatch(e); }));
    return Status::Ok();
  }

  std::shared_ptr<Subscriber> Add(WatchCallback callback) {
    auto sub = std::make_shared<Subscriber>(std::move(callback));
    MutexLock lock(mu_);
    subscribers_.push_back(sub);
    return sub;
  }

  void Remove(const std::shared_ptr<Subscriber>& sub) {
    {
      MutexLock lock(sub->mu);  // waits for a callback of it in progress
      sub->removed = true;
    }
    MutexLock lock(mu_);
    std::erase(subscribers_, sub);
  }

 private:
  void Dispatch(const WatchEvent& event) {
    std::vector<std::shared_ptr<Subscriber>> subs;
    {
      MutexLock lock(mu_);
      subs = subscribers_;
    }
    for (const auto& sub : subs) {
      MutexLock lock(sub->mu);
      if (!sub->removed) sub->callback(event);
    }
  }

  Mutex mu_;
  std::vector<std::shared_ptr<Subscriber>> subscribers_ GUARDED_BY(mu_);
  std::unique_ptr<WatchHandle> watch_;
};

// The process's streams by share key and prefix. A stream lives while a handle holds it. A slot
// serializes the starts of its key's stream (two watchers of one prefix never start two streams)
// without holding the registry lock across the store call, so that a store that is slow to
// answer delays neither the watches of other keys nor any handle's destruction.
struct Registry {
  struct Slot {
    Mutex start_mu;                // held while this key's stream starts
    std::weak_ptr<Stream> stream;  // guarded by Registry::mu
  };
  Mutex mu;
  // A slot is dropped once its stream is gone and no Watch holds it (use_count() == 1).
  std::map<std::string, std::shared_ptr<Slot>> slots GUARDED_BY(mu);
};

Registry& Streams() {
  static Registry* registry = new Registry();  // never destroyed: handles may outlive main
  return *registry;
}

class SharedHandle final : public WatchHandle {
 public:
  SharedHandle(std::shared_ptr<Stream> stream, std::shared_ptr<Stream::Subscriber> sub)
      : stream_(std::move(stream)), sub_(std::move(sub)) {}
  ~SharedHandle() override {
    stream_->Remove(sub_);
    // The last handle of a stream destroys it here, which stops the store's watch and joins its
    // thread (never this thread: a callback never destroys its own handle, and while any
    // callback of the stream runs, its own handle holds the stream). No lock of ours is held.
    stream_.reset();
  }

 private:
  std::shared_ptr<Stream> stream_;
  std::shared_ptr<Stream::Subscriber> sub_;
};

class SharedWatchStore final : public MetadataStore, public Watcher {
 public:
  SharedWatchStore(std::unique_ptr<MetadataStore> inner, std::string share_key)
      : inner_(std::move(inner)), share_key_(std::move(share_key)) {}

  std::string_view scheme() const override { return inner_->scheme(); }
  Result<std::string> Get(std::string_view key) override { return inner_->Get(key); }
  Status Put(std::string_view key, std::string_view value, const PutOptions& options) override {
    return inner_->Put(key, value, options);
  }
  using MetadataStore::Put;
  Status Delete(std::string_view key) override { return inner_->Delete(key); }
  Status DeleteIf(std::string_view key, std::string_view expected) override {
    return inner_->DeleteIf(key, expected);
  }
  Result<std::vector<KeyValue>> List(std::string_view prefix) override {
    return inner_->List(prefix);
  }
  Watcher* watcher() override { return this; }
  bool TakenOver(std::string_view key) const override { return inner_->TakenOver(key); }
  void Abandon() override { inner_->Abandon(); }

  Result<std::unique_ptr<WatchHandle>> Watch(std::string_view prefix,
                                             WatchCallback callback) override {
    if (!callback)
      return InvalidArgumentError("watch of '" + std::string(prefix) + "': no callback");
    const std::string key = share_key_ + '\n' + std::string(prefix);
    Registry& r = Streams();
    std::shared_ptr<Registry::Slot> slot;
    std::shared_ptr<Stream> stream;
    {
      MutexLock lock(r.mu);
      for (auto it = r.slots.begin(); it != r.slots.end();) {  // drop dead slots
        const bool dead = it->second.use_count() == 1 && it->second->stream.expired();
        it = dead ? r.slots.erase(it) : std::next(it);
      }
      std::shared_ptr<Registry::Slot>& entry = r.slots[key];
      if (entry == nullptr) entry = std::make_shared<Registry::Slot>();
      slot = entry;
      stream = slot->stream.lock();
    }
    if (stream == nullptr) {
      // Held while the stream starts (one bounded store call): a concurrent Watch of this key
      // waits and then joins the stream started here.
      MutexLock start(slot->start_mu);
      {
        MutexLock lock(r.mu);
        stream = slot->stream.lock();
      }
      if (stream == nullptr) {
        stream = std::make_shared<Stream>();
        RETURN_IF_ERROR(stream->Start(inner_->watcher(), prefix));
        MutexLock lock(r.mu);
        slot->stream = stream;
      }
    }
    std::shared_ptr<Stream::Subscriber> sub = stream->Add(std::move(callback));
    return std::unique_ptr<WatchHandle>(new SharedHandle(std::move(stream), std::move(sub)));
  }

 private:
  const std::unique_ptr<MetadataStore> inner_;
  const std::string share_key_;
};

}  // namespace

std::unique_ptr<MetadataStore> ShareWatches(std::unique_ptr<MetadataStore> store,
                                            std::string share_key) {
  if (store == nullptr || store->watcher() == nullptr) return store;
  return std::make_unique<SharedWatchStore>(std::move(store), std::move(share_key));
}

size_t SharedWatchStreams() {
  Registry& r = Streams();
  MutexLock lock(r.mu);
  size_t n = 0;
  for (const auto& [key, slot] : r.slots) n += slot->stream.expired() ? 0 : 1;
  return n;
}

}  // namespace ferry
