// RdmaPeerLink: what one initiator knows of one peer: its descriptor (for Exchange), its
// endpoints' addresses inserted in each local domain's address vector, and which local domain
// reaches which of the peer's endpoints (same fabric name).
//
// Thread contract: immutable after Make, except the round-robin counter; Route is thread-safe.
// The destructor removes its address-vector entries (shared entries stay while used); rxm keeps
// the connection of a removed peer, so the domain re-opens its idle initiator endpoint to close
// it (Domain::RemoveAddress). Every in-flight slice holds its link, so it is never destroyed
// under an operation.
#pragma once

#include <rdma/fabric.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/segment_desc.h"
#include "ferry/status.h"
#include "transport/rdma/rdma_runtime.h"
#include "transport/transport.h"

namespace ferry::rdma {

class RdmaPeerLink final : public PeerLink, public std::enable_shared_from_this<RdmaPeerLink> {
 public:
  struct Target {
    size_t endpoint = 0;  // index in the peer's published endpoints (and its keys' rkeys)
    fi_addr_t addr = FI_ADDR_UNSPEC;
    bool virt_addr = false;
  };

  // Decodes peer.transports["rdma"] and inserts the peer's endpoints. InvalidArgument (naming
  // the peer) for a missing or malformed entry; Unavailable when the peer runs another provider
  // or no local domain reaches any of its endpoints.
  static Result<std::shared_ptr<RdmaPeerLink>> Make(std::shared_ptr<Runtime> rt,
                                                    const SegmentDesc& peer);
  ~RdmaPeerLink() override;
  RdmaPeerLink(const RdmaPeerLink&) = delete;
  RdmaPeerLink& operator=(const RdmaPeerLink&) = delete;

  const SegmentDesc& peer() const { return peer_; }
  size_t peer_endpoints() const { return peer_endpoints_; }
  Runtime* runtime() const { return rt_.get(); }

  // Routes `op` (its job's key and local registration set): the first local domain from
  // `preferred` on (cyclically) that reaches the peer, and one of the peer's endpoints it
  // reaches (round-robin). InvalidArgument when that domain needs a local descriptor the local
  // memory lacks (it is not registered with this transport).
  Status Route(Op& op, size_t preferred);

 private:
  RdmaPeerLink(std::shared_ptr<Runtime> rt, SegmentDesc peer, size_t peer_endpoints,
               std::vector<std::vector<Target>> routes);

  const std::shared_ptr<Runtime> rt_;
  const SegmentDesc peer_;
  const size_t peer_endpoints_;
  const std::vector<std::vector<Target>> routes_;  // by local domain index
  std::atomic<uint64_t> next_{0};
};

}  // namespace ferry::rdma
