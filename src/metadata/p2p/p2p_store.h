// P2PHANDSHAKE: no store. Segment names are "host:rpc_port", and a segment's descriptor is asked
// of that peer's own RPC service (DESIGN.md, Contracts).
//
// Contract of the plug-in:
//  - Put/Delete/List act on this engine's own keys only, kept in this process; the engine's
//    RPC service answers peers' GetSegmentDesc from GetLocal().
//  - Get(key) answers an own key locally. Any other key must end in "/<host>:<port>" (the
//    segment name); the value is fetched from that peer through P2PDescriptorSource. A key
//    without such a name is InvalidArgument; an unreachable peer is Unavailable; a peer that
//    answers it has no such key is NotFound.
//  - No watch (watcher() is null) and no leases: a dead peer is simply unreachable, so callers
//    rely on TTL expiry and on STALE from the data path.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/host_port.h"
#include "ferry/status.h"
#include "metadata/metadata_store.h"

namespace ferry {

// Fetches a key from a peer's RPC service. The engine's RPC client implements it; tests use
// InProcessP2PNetwork. Thread contract: thread-safe; every call bounded by the implementation's
// timeout.
class P2PDescriptorSource {
 public:
  virtual ~P2PDescriptorSource() = default;
  virtual Result<std::string> FetchFromPeer(const HostPort& peer, std::string_view key) = 0;
};

// The P2P store, with the one extra call the RPC service needs.
class P2PStore : public MetadataStore {
 public:
  // This engine's own value for `key` (NotFound if it has none).
  virtual Result<std::string> GetLocal(std::string_view key) const = 0;
};

// `source` is borrowed and must outlive the store.
Result<std::unique_ptr<MetadataStore>> CreateP2PStore(P2PDescriptorSource* source,
                                                      const StoreOptions& options);

// The segment name a key ends in ("ferry/ram/10.0.0.7:12345" -> HostPort), or InvalidArgument.
Result<HostPort> PeerOfKey(std::string_view key);

}  // namespace ferry
