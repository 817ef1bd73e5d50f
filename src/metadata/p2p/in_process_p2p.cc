#include "metadata/p2p/in_process_p2p.h"

namespace ferry {

void InProcessP2PNetwork::Attach(const HostPort& peer, const P2PStore* store) {
  MutexLock lock(mu_);
  peers_[peer.ToString()] = store;
}

void InProcessP2PNetwork::Detach(const HostPort& peer) {
  MutexLock lock(mu_);
  peers_.erase(peer.ToString());
}

Result<std::string> InProcessP2PNetwork::FetchFromPeer(const HostPort& peer, std::string_view key) {
  MutexLock lock(mu_);
  auto it = peers_.find(peer.ToString());
  if (it == peers_.end()) return UnavailableError("peer " + peer.ToString() + " is not reachable");
  return it->second->GetLocal(key);
}

}  // namespace ferry
