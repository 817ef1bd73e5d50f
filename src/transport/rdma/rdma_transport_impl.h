// RdmaTransport: the Transport behind CreateRdmaTransport (see rdma_transport.h).
//
// Start opens every chosen domain (rdma/fabric_domain.h): a target endpoint whose address is
// published, an initiator endpoint and a progress thread each; plus one Recovery thread.
// RegisterMemory registers an MR per domain (remote rights only for a remote-accessible
// region); the key bytes carry the registration's id, base, length and one rkey per domain.
// Submit validates each slice against its key (range, peer incarnation, local registration),
// splits it into operations no longer than the provider's max_msg_size, routes them (to a domain
// near the local memory's NUMA node when the topology says so, else round-robin) and queues
// them; the domain's progress thread posts them.
//
// Access-check contract (one-sided RMA: the target's CPU does not see accesses):
//   - a range outside the key's registered range fails at the initiator (InvalidArgument) and
//     nothing is posted; an incarnation other than the link's fails Stale;
//   - UnregisterMemory closes the MRs, so an old key is dead at the provider: an access with it
//     completes with an error at the initiator, which asks the target (Exchange, see
//     rdma/recovery.h) and reports Stale; the target's memory is unchanged;
//   - nothing lands after UnregisterMemory returns (on software providers it also re-opens the
//     target endpoint at the same address, dropping transfers accepted before the close);
//   - the generation of a live key is checked only when an access fails (a re-registration
//     gets a new key, so a live key implies its generation);
//   - a local-only region (MemoryAccess::kLocal) has MRs without remote rights: the provider
//     refuses an access with its key (even one a peer crafted: the engine never publishes it),
//     and the access check that follows answers PermissionDenied. Nothing moves.
// Deadlines: see rdma_transport.h (what rdma promises, and the one-sided WRITE it cannot).
//
// Thread contract: thread-safe after Start (see Transport). Submit never blocks on a peer.
// Slices complete (TransportContext::CompleteSlice) on the domains' progress threads and the
// recovery thread, or on the caller's thread for a Submit racing Stop (Canceled); a completion
// callback may Submit again but must not call UnregisterMemory (which waits for that thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/transport.h"

namespace ferry {

namespace rdma {
struct Runtime;
struct Op;
class RdmaPeerLink;
}  // namespace rdma

// Counters since Start, for tests and diagnostics.
struct RdmaTransportStats {
  uint64_t posted = 0;             // operations handed to the provider
  uint64_t retries = 0;            // operations re-posted after an error
  uint64_t endpoint_rebuilds = 0;  // initiator endpoints re-opened after an error or a hang
  // idle initiator endpoints re-opened to close the connections of peers no link uses any more
  uint64_t idle_releases = 0;
  uint64_t target_rebuilds = 0;  // target endpoints re-opened by UnregisterMemory
  uint64_t timeouts = 0;         // operations failed for want of a completion or a connection
  uint64_t stale = 0;            // slices completed Stale
  uint64_t checks = 0;           // access checks asked of peers
  uint64_t device_registrations = 0;  // device memory registered with the provider (FI_HMEM)
  // device memory refused with NotFound although FI_HMEM is in use: this libfabric cannot
  // register that device's memory (the first refusal is logged with the provider's error)
  uint64_t device_refusals = 0;
  // Not a counter: the domains were opened with FI_HMEM (device memory registered with the
  // provider and moved by it); fixed at Start.
  bool hmem = false;
  // Now, not a counter: peer addresses in the domains' address vectors. A link's entries go
  // when the last shared_ptr to it (the engine's and its in-flight slices') is dropped.
  uint64_t peer_addresses = 0;
};

class RdmaTransport final : public Transport {
 public:
  explicit RdmaTransport(RdmaTransportOptions options);
  ~RdmaTransport() override;  // Stop()
  RdmaTransport(const RdmaTransport&) = delete;
  RdmaTransport& operator=(const RdmaTransport&) = delete;

  std::string_view name() const override { return "rdma"; }
  // preferred_slice_size follows the provider chosen at Start (rdma::PreferredSliceSize; before
  // Start: a NIC's); no max_slice_size (Submit splits a slice at the provider's max_msg_size).
  // reaches_device_memory: the domains were opened with FI_HMEM (decided at Start; false
  // before).
  TransportCapabilities capabilities() const override;

  // Opens the provider's domains and starts their threads. IP-addressed providers (tcp;ofi_rxm)
  // bind their endpoints to info.bind_host, or for a wildcard to info.advertise_host (libfabric
  // publishes where an endpoint listens), each endpoint (target and initiator: both listen) at
  // the first free port of info.ports when it is bounded. InvalidArgument for bad options or
  // bind host; Unavailable when no provider or domain fits (the reason says which) or the port
  // range is exhausted (naming it); Busy when started or stopped before.
  Result<std::string> Start(TransportContext* ctx, const TransportStartInfo& info) override;
  // Completes every queued and in-flight slice with Canceled, closes the endpoints and joins
  // every thread. Registrations stay valid for UnregisterMemory. Idempotent.
  void Stop() override;

  // Host memory, and device memory with FI_HMEM (NotFound without it, or when libfabric has no
  // support for the device's interface: the engine plans that memory elsewhere; see
  // rdma_transport.h). Busy before Start; AlreadyExists for a
  // range registered already; Unavailable when the provider refuses the registration. A kLocal
  // region's MRs have local rights only (the source or destination of this process's RMA, which
  // FI_MR_LOCAL providers need a descriptor for): a peer's RMA with its key fails at the
  // provider, and the access check Recovery then asks for answers PermissionDenied.
  Result<std::string> RegisterMemory(uint64_t addr, uint64_t length, const Location& location,
                                     MemoryAccess access) override;
  // Waits (up to op_timeout) for local slices using the range to complete, then closes its MRs
  // (see the access-check contract above). NotFound for a range not registered; Timeout when
  // local slices still used it (the MRs are closed anyway).
  Status UnregisterMemory(uint64_t addr, uint64_t length) override;

  // A link to the endpoints in peer.transports["rdma"] (see RdmaPeerLink::Make). Busy before
  // Start; Canceled after Stop. Slices hold their link until they complete; when the last
  // reference goes (the engine's, once no slice uses it), the peer's address-vector entries are
  // removed at once and its connections close when the domain is next idle (rdma_peer_link.h).
  Result<std::shared_ptr<PeerLink>> Connect(const SegmentDesc& peer) override;
  // Queues slices on `link`. InvalidArgument (nothing queued) for a foreign link, a null slice
  // or more slices than the queue holds; Again when the queue cannot take them all; Canceled
  // after Stop. Otherwise OK, and each slice completes exactly once through the context: a bad
  // op, key, range or local memory, or an incarnation mismatch, completes it with that error.
  Status Submit(PeerLink& link, std::span<Slice* const> slices) override;

  // Answers access checks (rdma_wire.h) from peers' Recovery. InvalidArgument for a malformed
  // payload; Busy before Start; Canceled after Stop.
  Result<std::string> OnExchange(std::string_view payload) override;

  RdmaTransportStats stats() const;
  // stats()' counters by name (not peer_addresses, a gauge).
  std::vector<std::pair<std::string, uint64_t>> Counters() const override;
  // The provider chosen at Start ("" before).
  std::string provider() const;

 private:
  // Turns `slice` into operations for `by_domain` (one immediate operation carrying the error
  // when the slice is invalid, or OK when it is empty).
  void Prepare(rdma::RdmaPeerLink& link, Slice* slice,
               std::vector<std::vector<std::unique_ptr<rdma::Op>>>& by_domain);

  const RdmaTransportOptions options_;
  Mutex lifecycle_mu_;
  bool stopped_ GUARDED_BY(lifecycle_mu_) = false;
  // Written once under lifecycle_mu_ before started_ turns true; read after started_ is seen.
  std::shared_ptr<rdma::Runtime> runtime_;
  std::atomic<bool> started_{false};
};

}  // namespace ferry
