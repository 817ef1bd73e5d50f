// CudaIpcTransport ("cuda-ipc"): moves slices between CUDA device memory of processes on one
// host with CUDA IPC: the initiator opens the target's allocation (cudaIpcOpenMemHandle) and
// copies with cudaMemcpyAsync, over NVLink or PCIe peer access, or within one GPU.
//
// Registration (target side): a region of device memory (location cuda:<n>) is published with a
// key naming the cudaMalloc allocation that holds it (cudaIpcGetMemHandle on the allocation's
// base, which cuMemGetAddressRange finds), the allocation's bounds and the device's UUID
// (cuda_ipc_wire.h). Host memory is not reachable (NotFound: the engine uses another
// transport), nor is device memory that cannot be exported (cudaMallocAsync pools, VMM
// allocations without a legacy IPC handle: NotFound, logged with the CUDA error).
//
// Peers keep an allocation open (once per process: cuda_ipc_copier.h) until their link to this
// engine is dropped or this engine refuses one of their accesses to it as Stale / NotFound; CUDA
// calls cudaFree of an allocation that a peer still has open undefined (in practice the memory
// stays allocated until the peer closes it). After unregistering device memory, an application
// frees it once its peers closed their segment, or accepts that they hold it until their next
// refused access.
//
// Access check: with IPC the initiator writes into the target's memory itself, so the target
// cannot check a copy as it happens; it checks the right to copy instead, exactly as shm and
// cxl do, through the same-host grant channel (transport/samehost/grant_channel.h): before a
// byte moves, every range is pinned by the target's registry (incarnation, generation, window,
// remote access, registered for "cuda-ipc"), directly or through the target's lease table, and
// the pins are released only after the GPU finished the copies (cuda_ipc_copier.h). A region
// being unregistered refuses new pins and its unregister waits for the held ones, so no copy
// of this transport writes a region after its unregister returned. The descriptor alone is
// never trusted: the handle gives access to the whole allocation, the pin to one region of one
// generation.
//
// The queue, workers, grant round trips and deadlines are samehost::CopyEngine's: a slice whose
// deadline passed before its copies were queued completes Timeout, uncopied. A copy queued on
// the GPU cannot be recalled: its slice completes when the GPU finished it (a slice is at most
// a few MiB: microseconds to milliseconds), possibly a little after its deadline, and the pins
// are held until then. The wait is on this transport's own copy workers (polling the batch's
// events), never on an engine thread.
//
// Without CUDA (no driver, no device) Start fails with Unavailable naming the cause (the engine's
// "auto" does not install the transport then).
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

namespace cuda_ipc {
struct Runtime;
}

struct CudaIpcTransportOptions {
  // Where the grant channel's socket lives (a filesystem directory every engine can reach).
  std::string socket_dir = "/dev/shm";
  // Bounds every wait on a peer: connecting to its grant channel and each Acquire.
  std::chrono::milliseconds io_timeout{5000};
  // Threads that queue copies and wait for them, 1..64.
  size_t workers = 4;
  // Slices queued at once; a Submit beyond it gets Again.
  size_t max_queued_slices = 65536;
  // Grant connections unused for this long are closed. 0: kept until the link is dropped.
  std::chrono::milliseconds idle_timeout{0};
};

// Thread contract: thread-safe after Start (see Transport). Stop must not run concurrently with
// Submit (a racing Submit is answered Canceled, nothing queued).
class CudaIpcTransport final : public Transport {
 public:
  explicit CudaIpcTransport(CudaIpcTransportOptions options);
  ~CudaIpcTransport() override;  // Stop()
  CudaIpcTransport(const CudaIpcTransport&) = delete;
  CudaIpcTransport& operator=(const CudaIpcTransport&) = delete;

  std::string_view name() const override { return "cuda-ipc"; }
  // Same host only; device memory only.
  TransportCapabilities capabilities() const override;

  // Unavailable when CUDA is (cuda_memory.h names the cause); then the grant server in
  // socket_dir and the copy workers. Returns the endpoint (cuda_ipc_wire.h). Busy when started
  // or stopped before.
  Result<std::string> Start(TransportContext* ctx, const TransportStartInfo& info) override;
  // Completes queued slices with Canceled, lets the batch being copied finish, joins the
  // workers and stops the grant server (releasing peers' pins). Idempotent; no restart.
  void Stop() override;

  // Device memory of `location` (cuda:<n>): the key. Host memory, or device memory that cannot
  // be exported: NotFound. InvalidArgument when the memory is not of `location`'s device or the
  // range leaves its allocation; Busy before Start.
  Result<std::string> RegisterMemory(uint64_t addr, uint64_t length, const Location& location,
                                     MemoryAccess access) override;
  // Nothing to undo on the exporting side (peers close their mappings themselves): OK.
  Status UnregisterMemory(uint64_t addr, uint64_t length) override;

  // A link to the peer in peer.transports["cuda-ipc"]; InvalidArgument (naming the peer) when
  // missing or malformed. Opens nothing: grant connections and IPC handles open on first use.
  Result<std::shared_ptr<PeerLink>> Connect(const SegmentDesc& peer) override;
  // As CxlTransport::Submit; a slice also fails with Internal naming the CUDA error when its
  // copy fails, Unavailable when the peer's device is not visible here.
  Status Submit(PeerLink& link, std::span<Slice* const> slices) override;

  // cuda-ipc needs no exchange: InvalidArgument.
  Result<std::string> OnExchange(std::string_view payload) override;

  // IPC handles of peers' allocations open in this process now (the table every cuda-ipc
  // transport of the process shares; tests).
  size_t open_mappings() const;

 private:
  const CudaIpcTransportOptions options_;
  Mutex lifecycle_mu_;
  bool stopped_ GUARDED_BY(lifecycle_mu_) = false;
  // Written once under lifecycle_mu_ before started_ turns true; read after started_ is seen.
  std::shared_ptr<cuda_ipc::Runtime> runtime_;
  std::atomic<bool> started_{false};
};

std::unique_ptr<Transport> CreateCudaIpcTransport(CudaIpcTransportOptions options);

}  // namespace ferry
