// ShmTransport ("shm"): moves slices between processes of one host without a network stack
// (DESIGN.md, transport/shm/). The initiator moves the bytes itself, under a grant from the
// target (transport/samehost/grant_channel.h): per batch it pins the remote ranges on the
// target, copies, and releases the pins. Pins of a region the initiator's grant connection
// already leased go through the target's shared lease table (no message); the first batch to a
// region, and every refusal, take a round trip over the grant socket.
//
// Two ways to copy, chosen by the remote buffer's key:
//  - "cma": any registered CPU memory, with process_vm_writev / process_vm_readv into or from
//    the target's pid (cross-memory attach). The kernel allows it when the initiator may ptrace
//    the target: same user and a dumpable target, or CAP_SYS_PTRACE. Linux Yama
//    (kernel.yama.ptrace_scope = 1) further restricts ptrace to descendants, so Start() calls
//    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) to let same-user peers attach to this process
//    when ShmTransportOptions::allow_same_user_ptrace says so (EngineOptions has the
//    consequences). When the kernel refuses (EPERM) the slice fails with PermissionDenied, and a
//    vanished pid (ESRCH) with Unavailable; the engine then falls back to another transport.
//    Before copying, the initiator checks that its grant socket is answered by the pid the peer
//    publishes (SO_PEERCRED): PermissionDenied naming both pids otherwise, nothing copied.
//  - "mapped": memory inside a buffer from AllocateShared (a memfd). The initiator fetches the
//    buffer's fd once over the grant channel (SCM_RIGHTS), maps it MAP_SHARED, caches the mapping
//    per (peer incarnation, buffer id) in the link, and copies with memcpy while the grant is
//    held. The mappings and grant connections of a peer go when its link is dropped.
//
// The queue, workers, grant round trips and deadlines are samehost::CopyEngine's
// (transport/samehost/copy_engine.h): a slice completes Timeout at its deadline, and nothing of
// it is copied afterwards (the target, too, refuses a range whose deadline has passed). A frozen
// target's leased regions stay writable (its table still holds them); other slices to it wait
// for its answer up to their deadline.
//
// Start() publishes "v1:<pid>:<grant socket path>" as SegmentDesc::transports["shm"]. The socket
// is mode 0600, so only the same user (or root) can be granted access.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "transport/transport.h"

namespace ferry {

namespace shm {
struct ShmRuntime;
class SharedAllocations;
}  // namespace shm

struct ShmTransportOptions {
  // Where the grant socket is made (an existing directory; the path must fit a Unix socket).
  std::string socket_dir = "/dev/shm";
  // Bounds every wait on a peer: connecting, a grant round trip, fetching a buffer's fd.
  std::chrono::milliseconds io_timeout{5000};
  // Initiator threads moving bytes, 1..64 (grant connections are pooled per link).
  size_t workers = 2;
  // Slices queued and not yet taken by a worker; Submit returns Again beyond this.
  size_t max_queued_slices = 65536;
  // Grant connections unused for this long are closed (the target's thread for each goes with
  // it). 0: kept until the link is dropped.
  std::chrono::milliseconds idle_timeout{0};
  // Regions this target leases to initiators at once, for pins without a round trip
  // (samehost::GrantServer::Options::lease_table_entries); each grant connection to it maps
  // 8 bytes per entry. 0: every batch pins over the grant socket.
  size_t lease_table_entries = 4096;
  // Start() calls prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY): under Yama ptrace_scope 1, peers
  // of this user may then copy into this process with CMA, and may also ptrace all of it (see
  // EngineOptions::allow_same_user_ptrace, which the engine sets this from). false: no call;
  // peers' CMA copies into this process may be refused, mapped (AllocateShared) buffers still
  // move.
  bool allow_same_user_ptrace = true;
};

// Counters since Start, for tests and diagnostics.
struct ShmTransportStats {
  uint64_t cma_slices = 0;               // slices moved with process_vm_writev/readv
  uint64_t mapped_slices = 0;            // slices moved with memcpy through a mapped shared buffer
  uint64_t failed_slices = 0;            // slices completed with an error (Canceled excluded)
  uint64_t grant_round_trips = 0;        // Acquire calls made by this initiator
  uint64_t table_pinned_slices = 0;      // slices pinned through a target's lease table
  uint64_t fd_fetches = 0;               // shared buffer fds fetched and mapped
  uint64_t mappings_dropped = 0;         // cached mappings dropped after a Stale/NotFound answer
  uint64_t timed_out_slices = 0;         // slices completed with Timeout (their deadline passed)
  uint64_t mappings_alive = 0;           // peer buffers mapped now (all links)
  uint64_t idle_connections_closed = 0;  // grant connections closed by idle_timeout
  // Not a counter: whether Start asked for prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) (whatever
  // the kernel answered: without Yama it is refused, and changes nothing).
  bool same_user_ptrace_requested = false;
};

// Thread contract: thread-safe after Start; Submit may be called from many threads at once.
// Stop must not run concurrently with Submit on the same transport (a Submit racing Stop gets
// Canceled and queues nothing).
class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(ShmTransportOptions options);
  ~ShmTransport() override;  // Stop(), then frees every shared allocation
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  std::string_view name() const override { return "shm"; }
  // {reaches_other_hosts = false, reaches_device_memory = false, allocates_shared_memory = true}
  TransportCapabilities capabilities() const override;

  // Starts the grant server and the workers; returns "v1:<pid>:<socket path>". InvalidArgument
  // for bad options; PermissionDenied / Unavailable when the socket cannot be made; Busy when
  // started or stopped before.
  Result<std::string> Start(TransportContext* ctx, const TransportStartInfo& info) override;
  // Completes every queued slice with Canceled, lets the workers finish the batch in hand
  // (bounded by io_timeout and the slices' deadlines), joins them and stops the grant server: it
  // refuses new grants and waits up to io_timeout for peers to release the pins they hold (they may
  // be copying into this process) before dropping the rest. Idempotent; a stopped transport does
  // not restart.
  void Stop() override;

  // CPU memory only: NotFound ("not reachable by this transport") for device memory. Memory
  // wholly inside one AllocateShared buffer gets a "mapped:..." key, any other a "cma" key.
  // Works before Start. Every peer access is granted by this process's grant server through
  // PinRemoteAccess, which refuses a kLocal region, so `access` needs no state here.
  Result<std::string> RegisterMemory(uint64_t addr, uint64_t length, const Location& location,
                                     MemoryAccess access) override;
  Status UnregisterMemory(uint64_t addr, uint64_t length) override;

  // A memfd of `length` bytes (> 0) mapped MAP_SHARED, zero-filled. Huge pages (MFD_HUGETLB)
  // when `length` is a multiple of 2 MiB and the kernel has them reserved, else normal pages
  // with MADV_HUGEPAGE. `location` must be cpu, cpu:<n> or detect (no NUMA binding is applied);
  // device locations are InvalidArgument. Unavailable when the kernel refuses the memory.
  Result<void*> AllocateShared(size_t length, const Location& location) override;
  // Unmaps and closes what AllocateShared returned at `addr`; NotFound for any other address.
  // Peers that mapped it keep their mapping of the (orphaned) file, never of reused memory.
  Status FreeShared(void* addr) override;

  // A link to the peer's "shm" bytes (pid and grant socket). InvalidArgument (naming the peer)
  // when they are missing or malformed; Busy before Start; Canceled after Stop. Connects
  // nothing: grant connections open on first use (a pool per link, one per busy worker).
  Result<std::shared_ptr<PeerLink>> Connect(const SegmentDesc& peer) override;
  // Queues slices for `link`'s peer. InvalidArgument (nothing queued) for a foreign link, a null
  // slice, a bad op, or more slices than max_queued_slices; Again when the queue cannot take them
  // all; Canceled after Stop. Otherwise OK; each slice completes exactly once through the
  // context, after its bytes moved (the slices of one call share grant round trips, at most
  // 1024 ranges each), or with Timeout by its deadline. A zero-length slice completes Ok and
  // touches nothing.
  Status Submit(PeerLink& link, std::span<Slice* const> slices) override;

  // shm needs no exchange: InvalidArgument.
  Result<std::string> OnExchange(std::string_view payload) override;

  ShmTransportStats stats() const;
  // stats()' counters by name (not mappings_alive, a gauge).
  std::vector<std::pair<std::string, uint64_t>> Counters() const override;
  const ShmTransportOptions& options() const { return options_; }

 private:
  const ShmTransportOptions options_;
  const std::unique_ptr<shm::SharedAllocations> allocations_;
  Mutex lifecycle_mu_;
  bool stopped_ GUARDED_BY(lifecycle_mu_) = false;
  // Written once under lifecycle_mu_ before started_ turns true; read after started_ is seen.
  std::shared_ptr<shm::ShmRuntime> runtime_;
  std::atomic<bool> started_{false};
};

// The factory the transport list uses.
std::unique_ptr<Transport> CreateShmTransport(ShmTransportOptions options);

}  // namespace ferry
