#include "metadata/p2p/rpc_descriptor_source.h"

#include "rpc/messages.h"
#include "rpc/rpc_client.h"

namespace ferry {

Result<std::string> RpcDescriptorSource::FetchFromPeer(const HostPort& peer, std::string_view key) {
  return client_->Call(peer, ToWire(RpcType::kGetSegmentDesc), PackGetSegmentDescRequest(key),
                       timeout_);
}

}  // namespace ferry
