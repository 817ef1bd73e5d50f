// P2PHANDSHAKE over ferry's RPC: asks the peer's RpcServer for a key (GetSegmentDesc).
#pragma once

#include <chrono>

#include "metadata/p2p/p2p_store.h"

namespace ferry {

class RpcClient;

// Thread contract: thread-safe. `client` is borrowed and outlives this.
class RpcDescriptorSource final : public P2PDescriptorSource {
 public:
  RpcDescriptorSource(RpcClient* client, std::chrono::milliseconds timeout)
      : client_(client), timeout_(timeout) {}
  Result<std::string> FetchFromPeer(const HostPort& peer, std::string_view key) override;

 private:
  RpcClient* const client_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace ferry
