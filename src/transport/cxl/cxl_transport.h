// CxlTransport: moves slices through a shared memory window that every engine on the host maps
// (DESIGN.md, transport/cxl/): a CXL memory DAX device (/dev/daxX.Y) or any mappable file
// (e.g. one in /dev/shm), named by CxlTransportOptions::window_path.
//
// Buffers registered inside the window are published as window offsets (cxl_wire.h); memory
// outside it is not reachable by cxl (RegisterMemory answers NotFound and the engine uses
// another transport). A transfer is a memcpy within this process's mapping of the window plus
// a fence. The target checks and pins every range before a byte moves through the same-host
// grant channel (transport/samehost/grant_channel.h): per Submit the initiator pins the ranges
// of regions its grant connection already leased through the target's shared lease table, asks
// for the others in one Acquire (per 4096), copies the granted ones, fences, then releases.
// The queue, workers, grant round trips and deadlines are samehost::CopyEngine's: a slice
// completes Timeout at its deadline and nothing of it is copied afterwards.
//
// AllocateShared hands out buffers inside the window (first fit, coordinated with the other
// engines that map it through byte-range locks on the window file, see cxl_allocator.h), so
// the engine's managed buffers can live where cxl reaches them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "transport/transport.h"

namespace ferry {

namespace cxl {
struct CxlRuntime;
struct WindowState;
}  // namespace cxl

struct CxlTransportOptions {
  // DAX device or file to map. Empty: the transport is not usable (Start fails with
  // InvalidArgument saying so).
  std::string window_path;
  // Bytes to map; 0: the file's/device's size. A regular file shorter than this is grown
  // (ftruncate); a DAX device never is. Every engine must map the same size (Connect checks).
  uint64_t window_size = 0;
  // Where the grant channel's socket lives (a filesystem directory every engine can reach).
  std::string socket_dir = "/dev/shm";
  // Bounds every wait on a peer: connecting to its grant channel and each Acquire.
  std::chrono::milliseconds io_timeout{5000};
  // Threads that copy, 1..64.
  size_t workers = 2;
  // Slices queued at once; a Submit beyond it gets Again, and one call with more slices than
  // this is InvalidArgument (it could never fit).
  size_t max_queued_slices = 65536;
  // Grant connections unused for this long are closed. 0: kept until the link is dropped.
  std::chrono::milliseconds idle_timeout{0};
};

// Thread contract: thread-safe after Start (see Transport). Stop must not run concurrently with
// Submit on the same transport (a racing Submit is answered Canceled, nothing queued).
class CxlTransport final : public Transport {
 public:
  explicit CxlTransport(CxlTransportOptions options);
  ~CxlTransport() override;  // Stop(), then unmaps the window (once no allocation holds it)
  CxlTransport(const CxlTransport&) = delete;
  CxlTransport& operator=(const CxlTransport&) = delete;

  std::string_view name() const override { return "cxl"; }
  // Same host only; host memory only; allocates shared memory.
  TransportCapabilities capabilities() const override;

  // Maps the window (see CxlWindow::Open for the errors), starts the grant server in
  // socket_dir and the workers. Returns the endpoint bytes (cxl_wire.h): the window's identity,
  // this mapping's base and the grant socket path. InvalidArgument for bad options; Busy when
  // started or stopped before.
  Result<std::string> Start(TransportContext* ctx, const TransportStartInfo& info) override;
  // Completes every queued slice with Canceled, lets a batch being copied finish (bounded by
  // io_timeout and the slices' deadlines), joins the workers and stops the grant server (releasing
  // peers' pins). The mapping stays until destruction, so allocations stay valid. Idempotent; no
  // restart.
  void Stop() override;

  // Inside this process's mapping of the window: the key (window offset and length). Outside
  // it, even partly, or device memory: NotFound. InvalidArgument for length 0; Busy before
  // Start. Every peer access is granted by this process's grant server through
  // PinRemoteAccess, which refuses a kLocal region, so `access` needs no state here.
  Result<std::string> RegisterMemory(uint64_t addr, uint64_t length, const Location& location,
                                     MemoryAccess access) override;
  // Nothing to undo (the target checks accesses against the registry): OK.
  Status UnregisterMemory(uint64_t addr, uint64_t length) override;

  // `length` bytes inside the window (see CxlAllocator::Allocate for the errors); host memory
  // only (InvalidArgument for a device location); Busy before Start. Valid until FreeShared or
  // the transport's destruction.
  Result<void*> AllocateShared(size_t length, const Location& location) override;
  // NotFound when `addr` is not an allocation of this transport.
  Status FreeShared(void* addr) override;

  // A link to the peer in peer.transports["cxl"]. InvalidArgument (naming the peer) when it is
  // missing or malformed; Unavailable "peer maps another cxl window" when the peer's window is
  // not ours (other file or size); Busy before Start; Canceled after Stop. Opens no connection:
  // grant connections open on first use.
  Result<std::shared_ptr<PeerLink>> Connect(const SegmentDesc& peer) override;
  // Queues the slices as one batch. InvalidArgument (nothing queued) for a foreign link, a null
  // slice, a bad op, or more slices than max_queued_slices; Again when the queue
  // cannot take them all; Canceled after Stop; Busy before Start. Each queued slice completes
  // exactly once: OK at once for a length of 0 (nothing moves); InvalidArgument when its local
  // range is outside this window or its remote range outside its key; the target's refusal (Stale,
  // NotFound, PermissionDenied...); Unavailable / Timeout when the target's grant channel cannot be
  // reached; Timeout by the slice's deadline; Canceled by Stop.
  Status Submit(PeerLink& link, std::span<Slice* const> slices) override;

  // cxl needs no exchange: InvalidArgument.
  Result<std::string> OnExchange(std::string_view payload) override;

  // This transport's mapping of the window (nullptr before Start) and its size (0 before
  // Start). Callers may carve buffers out of it themselves; AllocateShared is the shared way.
  void* window_base() const;
  uint64_t window_size() const;
  // The mapping and its allocator, shared: holding it keeps the mapping alive after this
  // transport is destroyed (for allocations whose owner outlives it). nullptr before Start.
  std::shared_ptr<cxl::WindowState> window_state() const;

 private:
  const CxlTransportOptions options_;
  Mutex lifecycle_mu_;
  bool stopped_ GUARDED_BY(lifecycle_mu_) = false;
  // Written once under lifecycle_mu_ before started_ turns true; read after started_ is seen.
  std::shared_ptr<cxl::CxlRuntime> runtime_;
  std::atomic<bool> started_{false};
};

// The factory the transport list uses.
std::unique_ptr<Transport> CreateCxlTransport(CxlTransportOptions options);

}  // namespace ferry
