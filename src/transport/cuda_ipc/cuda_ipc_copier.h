// How cuda-ipc moves the bytes of granted slices (samehost::PeerCopier), and the per-process
// table of opened IPC handles the copiers share.
//
// A peer's allocation is opened once per process (cudaIpcOpenMemHandle with
// cudaIpcMemLazyEnablePeerAccess, on the local device whose UUID the key names), however many
// regions of it are registered and however many links use it; IpcMappings counts its users and
// closes it (cudaIpcCloseMemHandle) when the last one lets go: the copier of a link (dropped
// when the peer's incarnation changes), or the copier's cache entry that a target's Stale /
// NotFound answer evicts (the target unregistered it, and may free it). The table is one per
// process (IpcMappings::OfThisProcess), shared by every cuda-ipc transport in it (several
// engines in one process), so each handle is opened once per process whatever the CUDA
// version's rules on opening a handle twice. A region of this very process (the endpoint's pid
// and process token are ours: two engines in one process) is used at its own address: CUDA
// cannot open a handle in the process that exported it. The token keeps a process of another
// pid namespace that has our pid (two containers' pid 1) from being taken for this one.
//
// Copy runs on a CopyEngine worker with the target's pins held: it queues one cudaMemcpyAsync
// per slice on this peer's stream of the remote allocation's device (non-blocking streams, made
// on first use), records an event on each stream it used, and polls the events (cudaEventQuery,
// backing off from yields to 1 ms sleeps) until the GPU finished every copy. Only then does it
// return, so the engine releases the pins only once no byte of the batch can still land: a
// target's unregister (which waits for its pins) never returns while one of these copies runs.
//
// Thread contract: thread-safe; several workers call Copy at once (each with its own slices).
// Check, Copy and Refused run on the copy engine's workers (this transport's own threads) and
// select CUDA devices on them freely; what may run on an application's thread (closing a
// mapping, destroying a copier's streams) restores that thread's device (cuda::DeviceGuard).
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "transport/cuda_ipc/cuda_ipc_wire.h"
#include "transport/samehost/copy_engine.h"

namespace ferry::cuda_ipc {

// An opened allocation of a peer, valid while this object lives (IpcMappings::Open).
struct Mapping {
  uint8_t* base = nullptr;  // the allocation's first byte in this process
  int device = 0;           // the local ordinal of the allocation's device
};

// Every IPC handle this process opened, with its users. Thread contract: thread-safe.
class IpcMappings : public std::enable_shared_from_this<IpcMappings> {
 public:
  // The table of this process (made on first use, never destroyed).
  static std::shared_ptr<IpcMappings> OfThisProcess();
  // The allocation `key` names, opened now or shared with its other users; closed when the last
  // returned pointer goes. Unavailable when no local device has the key's UUID or CUDA is
  // unavailable; Internal naming the CUDA error when the open fails.
  Result<std::shared_ptr<const Mapping>> Open(const RegionKey& key);
  // Handles open now (tests).
  size_t open_count() const;

 private:
  struct Entry {
    Mapping mapping;
    size_t users = 0;
  };
  void Close(const std::array<uint8_t, kIpcHandleBytes>& handle);

  mutable Mutex mu_;
  std::map<std::array<uint8_t, kIpcHandleBytes>, Entry> open_ GUARDED_BY(mu_);
};

// Random, drawn once per process (Endpoint::process_token).
uint64_t ThisProcessToken();

// The local ordinal of the device with `uuid`; Unavailable when none has it.
Result<int> DeviceWithUuid(const std::array<uint8_t, kUuidBytes>& uuid);
// The UUID of local device `device`.
Result<std::array<uint8_t, kUuidBytes>> UuidOfDevice(int device);

struct CopierOptions {
  // How long one batch's copies may run before a warning is logged (they are waited for
  // regardless: the pins must outlive the copies).
  std::chrono::milliseconds slow_copy_warning{5000};
};

class CudaIpcCopier final : public samehost::PeerCopier {
 public:
  CudaIpcCopier(std::shared_ptr<IpcMappings> mappings, Endpoint peer, std::string peer_name,
                CopierOptions options = {});
  ~CudaIpcCopier() override;  // destroys the streams; drops its mappings
  CudaIpcCopier(const CudaIpcCopier&) = delete;
  CudaIpcCopier& operator=(const CudaIpcCopier&) = delete;

  // The key decodes and the remote range lies in its region; the local address is not null.
  // InvalidArgument otherwise (the target's pin remains the authoritative check).
  Status Check(const Slice& slice) override;
  // The grant connection is answered by the pid the peer published (when the kernel names it).
  Status CheckPeer(const samehost::GrantConnection& connection) override;
  void Copy(std::span<Slice* const> granted, std::span<Status> results) override;
  // Stale / NotFound: forget the mapping of that allocation (the target may free it).
  void Refused(const Slice& slice, const Status& answer) override;

 private:
  Result<std::shared_ptr<const Mapping>> MappingFor(const RegionKey& key);
  // This peer's stream on `device` (made on first use; an opaque cudaStream_t).
  Result<void*> StreamFor(int device);

  const std::shared_ptr<IpcMappings> mappings_;
  const Endpoint peer_;
  const std::string peer_name_;
  const CopierOptions options_;
  const bool same_process_;
  Mutex mu_;
  std::map<std::array<uint8_t, kIpcHandleBytes>, std::shared_ptr<const Mapping>> cache_
      GUARDED_BY(mu_);
  std::map<int, void*> streams_ GUARDED_BY(mu_);  // device -> cudaStream_t
};

}  // namespace ferry::cuda_ipc
