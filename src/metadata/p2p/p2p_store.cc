#include "metadata/p2p/p2p_store.h"

#include <map>

#include "common/mutex.h"

namespace ferry {
namespace {

class P2PStoreImpl final : public P2PStore {
 public:
  explicit P2PStoreImpl(P2PDescriptorSource* source) : source_(source) {}

  std::string_view scheme() const override { return "p2p"; }

  Result<std::string> GetLocal(std::string_view key) const override {
    MutexLock lock(mu_);
    auto it = local_.find(key);
    if (it == local_.end()) return NotFoundError("no local key '" + std::string(key) + "'");
    return it->second;
  }

  Result<std::string> Get(std::string_view key) override {
    Result<std::string> local = GetLocal(key);
    if (local.ok()) return local;
    ASSIGN_OR_RETURN(HostPort peer, PeerOfKey(key));
    return source_->FetchFromPeer(peer, key);
  }

  // The local table has one writer, this engine; replaces is still honoured, for the contract.
  Status Put(std::string_view key, std::string_view value, const PutOptions& options) override {
    if (key.empty()) return InvalidArgumentError("empty key");
    MutexLock lock(mu_);
    if (options.replaces.has_value()) {
      auto it = local_.find(key);
      if (it != local_.end() && it->second != *options.replaces) {
        return AlreadyExistsError("local key '" + std::string(key) + "' holds another value");
      }
    }
    local_.insert_or_assign(std::string(key), std::string(value));
    return Status::Ok();
  }

  Status DeleteIf(std::string_view key, std::string_view expected) override {
    MutexLock lock(mu_);
    auto it = local_.find(key);
    if (it == local_.end()) return NotFoundError("no local key '" + std::string(key) + "'");
    if (it->second != expected) {
      return AlreadyExistsError("local key '" + std::string(key) + "' holds another value");
    }
    local_.erase(it);
    return Status::Ok();
  }

  Status Delete(std::string_view key) override {
    MutexLock lock(mu_);
    if (auto it = local_.find(key); it != local_.end()) local_.erase(it);
    return Status::Ok();
  }

  Result<std::vector<KeyValue>> List(std::string_view prefix) override {
    MutexLock lock(mu_);
    std::vector<KeyValue> out;
    for (auto it = local_.lower_bound(prefix); it != local_.end(); ++it) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) break;
      out.push_back({it->first, it->second});
    }
    return out;
  }

  Watcher* watcher() override { return nullptr; }
  bool TakenOver(std::string_view) const override { return false; }  // publishes nowhere

  void Abandon() override {}  // nothing is published anywhere but here

 private:
  P2PDescriptorSource* const source_;
  mutable Mutex mu_;
  std::map<std::string, std::string, std::less<>> local_ GUARDED_BY(mu_);
};

}  // namespace

Result<HostPort> PeerOfKey(std::string_view key) {
  const size_t slash = key.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? key : key.substr(slash + 1);
  Result<HostPort> peer = ParseHostPort(name, "P2P segment name");
  if (!peer.ok()) {
    return InvalidArgumentError("with P2PHANDSHAKE, segment names are host:rpc_port; " +
                                peer.status().message());
  }
  return peer;
}

Result<std::unique_ptr<MetadataStore>> CreateP2PStore(P2PDescriptorSource* source,
                                                      const StoreOptions&) {
  if (source == nullptr) return InvalidArgumentError("P2PHANDSHAKE needs a descriptor source");
  return std::unique_ptr<MetadataStore>(new P2PStoreImpl(source));
}

}  // namespace ferry
