// InProcessP2PNetwork: the P2P plug-in's test double. It stands in for the engines' RPC services
// inside one process: each P2P store is attached under the host:port it would serve on, and
// FetchFromPeer answers from that store's GetLocal. A detached (or never attached) peer is
// Unavailable, as a dead process would be.
//
// Thread contract: thread-safe.
#pragma once

#include <map>
#include <string>

#include "common/host_port.h"
#include "common/mutex.h"
#include "metadata/p2p/p2p_store.h"

namespace ferry {

class InProcessP2PNetwork final : public P2PDescriptorSource {
 public:
  // `store` is borrowed until Detach(peer).
  void Attach(const HostPort& peer, const P2PStore* store);
  void Detach(const HostPort& peer);
  Result<std::string> FetchFromPeer(const HostPort& peer, std::string_view key) override;

 private:
  Mutex mu_;
  std::map<std::string, const P2PStore*> peers_ GUARDED_BY(mu_);
};

}  // namespace ferry
