#include "engine/link_cache.h"

#include <vector>

namespace ferry::engine {

Result<std::shared_ptr<PeerLink>> LinkCache::Get(Transport* transport, const SegmentDesc& peer) {
  Key key{peer.name, std::string(transport->name())};
  {
    MutexLock lock(mu_);
    auto it = links_.find(key);
    if (it != links_.end() && it->second.incarnation == peer.incarnation) {
      it->second.last_used = clock_->Now();
      return it->second.link;
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<PeerLink> link, transport->Connect(peer));
  std::shared_ptr<PeerLink> replaced;  // released after the lock
  MutexLock lock(mu_);
  Entry& entry = links_[key];
  if (entry.link == nullptr || entry.incarnation != peer.incarnation) {
    replaced = std::move(entry.link);
    entry.incarnation = peer.incarnation;
    entry.link = std::move(link);
  }
  entry.last_used = clock_->Now();
  return entry.link;
}

Result<std::shared_ptr<PeerLink>> LinkCache::Find(Transport* transport,
                                                  const SegmentDesc& peer) {
  MutexLock lock(mu_);
  auto it = links_.find(Key{peer.name, std::string(transport->name())});
  if (it == links_.end() || it->second.incarnation != peer.incarnation) {
    return NotFoundError("no link of '" + std::string(transport->name()) + "' to '" + peer.name +
                         "' yet");
  }
  it->second.last_used = clock_->Now();
  return it->second.link;
}

void LinkCache::Drop(std::string_view transport, std::string_view peer, uint64_t incarnation) {
  std::shared_ptr<PeerLink> gone;
  MutexLock lock(mu_);
  auto it = links_.find(Key{std::string(peer), std::string(transport)});
  if (it == links_.end()) return;
  if (incarnation != 0 && it->second.incarnation != incarnation) return;
  gone = std::move(it->second.link);
  links_.erase(it);
}

void LinkCache::DropPeer(std::string_view peer) { DropOtherIncarnations(peer, 0); }

void LinkCache::DropOtherIncarnations(std::string_view peer, uint64_t incarnation) {
  std::vector<std::shared_ptr<PeerLink>> gone;
  MutexLock lock(mu_);
  for (auto it = links_.lower_bound(Key{std::string(peer), std::string()});
       it != links_.end() && it->first.first == peer;) {
    if (incarnation == 0 || it->second.incarnation != incarnation) {
      gone.push_back(std::move(it->second.link));
      it = links_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t LinkCache::DropIdle(std::chrono::milliseconds idle) {
  std::vector<std::shared_ptr<PeerLink>> gone;
  MutexLock lock(mu_);
  const Clock::TimePoint now = clock_->Now();
  for (auto it = links_.begin(); it != links_.end();) {
    if (now - it->second.last_used >= idle && it->second.link.use_count() == 1) {
      gone.push_back(std::move(it->second.link));
      it = links_.erase(it);
    } else {
      ++it;
    }
  }
  return gone.size();
}

void LinkCache::Clear() {
  std::map<Key, Entry, std::less<>> gone;
  MutexLock lock(mu_);
  gone.swap(links_);
}

size_t LinkCache::size() const {
  MutexLock lock(mu_);
  return links_.size();
}

}  // namespace ferry::engine
