#include "transport/cuda_ipc/cuda_ipc_copier.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "common/log.h"
#include "transport/cuda_ipc/cuda_memory.h"

namespace ferry::cuda_ipc {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes, "cudaIpcMemHandle_t changed size");
static_assert(sizeof(cudaUUID_t) == kUuidBytes, "cudaUUID_t changed size");

Status CudaFailed(const std::string& what, cudaError_t e) {
  cudaGetLastError();  // clear a non-sticky error so that it does not show up in later calls
  return InternalError("cuda-ipc: " + what + " failed (" + cuda::ErrorText(e) + ")");
}

// Waits until `event` completed (or failed), polling: yields first, then sleeps doubling from
// 10 us to 1 ms. Logs once when it takes longer than `warn_after`.
cudaError_t WaitEvent(cudaEvent_t event, std::chrono::milliseconds warn_after,
                      const std::string& peer_name) {
  const auto began = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(10);
  bool warned = false;
  for (int spins = 0;; ++spins) {
    const cudaError_t e = cudaEventQuery(event);
    if (e != cudaErrorNotReady) return e;
    if (spins < 64) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    if (!warned && std::chrono::steady_clock::now() - began > warn_after) {
      warned = true;
      FERRY_LOG(kWarn) << "cuda-ipc: copies to " << peer_name << " still running after "
                       << warn_after.count() << " ms; the target's pins stay held until they end";
    }
  }
}

}  // namespace

Result<int> DeviceWithUuid(const std::array<uint8_t, kUuidBytes>& uuid) {
  RETURN_IF_ERROR(cuda::Available());
  for (int d = 0; d < cuda::DeviceCount(); ++d) {
    Result<std::array<uint8_t, kUuidBytes>> mine = UuidOfDevice(d);
    if (mine.ok() && *mine == uuid) return d;
  }
  return UnavailableError("cuda-ipc: the peer's device is not visible in this process (" +
                          std::to_string(cuda::DeviceCount()) +
                          " device(s) here; check CUDA_VISIBLE_DEVICES)");
}

Result<std::array<uint8_t, kUuidBytes>> UuidOfDevice(int device) {
  RETURN_IF_ERROR(cuda::Available());
  // cudaGetDeviceProperties is slow (it reads every property): once per device and process.
  static const std::vector<Result<std::array<uint8_t, kUuidBytes>>> uuids = [] {
    std::vector<Result<std::array<uint8_t, kUuidBytes>>> out;
    for (int d = 0; d < cuda::DeviceCount(); ++d) {
      cudaDeviceProp prop{};
      if (const cudaError_t e = cudaGetDeviceProperties(&prop, d); e != cudaSuccess) {
        out.emplace_back(CudaFailed("cudaGetDeviceProperties(" + std::to_string(d) + ")", e));
        continue;
      }
      std::array<uint8_t, kUuidBytes> uuid{};
      std::memcpy(uuid.data(), &prop.uuid, kUuidBytes);
      out.emplace_back(uuid);
    }
    return out;
  }();
  if (device < 0 || static_cast<size_t>(device) >= uuids.size()) {
    return InvalidArgumentError("cuda-ipc: no device " + std::to_string(device));
  }
  return uuids[static_cast<size_t>(device)];
}

uint64_t ThisProcessToken() {
  static const uint64_t token = [] {
    std::random_device random;
    uint64_t t = 0;
    while (t == 0) t = (uint64_t{random()} << 32) ^ random();
    return t;
  }();
  return token;
}

// ---- IpcMappings ---------------------------------------------------------------------------

std::shared_ptr<IpcMappings> IpcMappings::OfThisProcess() {
  // Leaked on purpose: mappings may be dropped by threads still running at exit.
  static auto* const table = new std::shared_ptr<IpcMappings>(std::make_shared<IpcMappings>());
  return *table;
}

Result<std::shared_ptr<const Mapping>> IpcMappings::Open(const RegionKey& key) {
  ASSIGN_OR_RETURN(const int device, DeviceWithUuid(key.device_uuid));
  MutexLock lock(mu_);
  auto it = open_.find(key.handle);
  if (it == open_.end()) {
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      return CudaFailed("cudaSetDevice(" + std::to_string(device) + ")", e);
    }
    cudaIpcMemHandle_t handle;
    std::memcpy(&handle, key.handle.data(), kIpcHandleBytes);
    void* base = nullptr;
    if (const cudaError_t e = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
        e != cudaSuccess) {
      return CudaFailed("cudaIpcOpenMemHandle of the peer's allocation of " +
                            std::to_string(key.alloc_size) + " bytes",
                        e);
    }
    it = open_.emplace(key.handle, Entry{Mapping{static_cast<uint8_t*>(base), device}, 0}).first;
  }
  ++it->second.users;
  std::shared_ptr<IpcMappings> self = shared_from_this();
  const std::array<uint8_t, kIpcHandleBytes> handle = key.handle;
  return std::shared_ptr<const Mapping>(new Mapping(it->second.mapping),
                                        [self, handle](const Mapping* m) {
                                          self->Close(handle);
                                          delete m;
                                        });
}

void IpcMappings::Close(const std::array<uint8_t, kIpcHandleBytes>& handle) {
  MutexLock lock(mu_);
  auto it = open_.find(handle);
  if (it == open_.end() || --it->second.users > 0) return;
  // Any thread may drop the last user (a link dropped by an application's call): keep its device.
  cuda::DeviceGuard on_device(it->second.mapping.device);
  if (!on_device.status().ok() || cudaIpcCloseMemHandle(it->second.mapping.base) != cudaSuccess) {
    const cudaError_t e = cudaGetLastError();
    FERRY_LOG(kWarn) << "cuda-ipc: closing a peer's allocation failed (" << cuda::ErrorText(e)
                     << ")";
  }
  open_.erase(it);
}

size_t IpcMappings::open_count() const {
  MutexLock lock(mu_);
  return open_.size();
}

// ---- CudaIpcCopier -------------------------------------------------------------------------

CudaIpcCopier::CudaIpcCopier(std::shared_ptr<IpcMappings> mappings, Endpoint peer,
                             std::string peer_name, CopierOptions options)
    : mappings_(std::move(mappings)),
      peer_(std::move(peer)),
      peer_name_(std::move(peer_name)),
      options_(options),
      same_process_(peer_.pid == ::getpid() && peer_.process_token == ThisProcessToken()) {}

CudaIpcCopier::~CudaIpcCopier() {
  MutexLock lock(mu_);
  for (auto& [device, stream] : streams_) {
    cuda::DeviceGuard on_device(device);  // may run on an application's thread
    if (!on_device.status().ok() ||
        cudaStreamDestroy(static_cast<cudaStream_t>(stream)) != cudaSuccess) {
      cudaGetLastError();
    }
  }
  cache_.clear();  // the mappings close once no Copy holds them
}

Status CudaIpcCopier::Check(const Slice& slice) {
  ASSIGN_OR_RETURN(const RegionKey key, DecodeKey(slice.remote_key));
  RETURN_IF_ERROR(key.OffsetOf(slice.remote_addr, slice.length).status());
  if (slice.local_addr == 0) return InvalidArgumentError("cuda-ipc: null local address");
  return Status::Ok();
}

Status CudaIpcCopier::CheckPeer(const samehost::GrantConnection& connection) {
  const pid_t granting = connection.peer_pid();
  if (granting != 0 && granting != peer_.pid) {
    return PermissionDeniedError("cuda-ipc: " + peer_name_ + " publishes pid " +
                                 std::to_string(peer_.pid) + ", but pid " +
                                 std::to_string(granting) + " answers its grant channel");
  }
  return Status::Ok();
}

Result<std::shared_ptr<const Mapping>> CudaIpcCopier::MappingFor(const RegionKey& key) {
  if (same_process_) {
    // Our own allocation: its address is valid here as it is.
    ASSIGN_OR_RETURN(const int device, DeviceWithUuid(key.device_uuid));
    return std::make_shared<const Mapping>(
        Mapping{reinterpret_cast<uint8_t*>(key.alloc_base), device});  // NOLINT
  }
  {
    MutexLock lock(mu_);
    if (auto it = cache_.find(key.handle); it != cache_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const Mapping> opened, mappings_->Open(key));
  MutexLock lock(mu_);
  auto [it, inserted] = cache_.emplace(key.handle, opened);
  return it->second;  // a racing worker's insert wins; ours then just drops its user count
}

Result<void*> CudaIpcCopier::StreamFor(int device) {
  MutexLock lock(mu_);
  if (auto it = streams_.find(device); it != streams_.end()) return it->second;
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return CudaFailed("cudaSetDevice(" + std::to_string(device) + ")", e);
  }
  cudaStream_t stream = nullptr;
  if (const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return CudaFailed("cudaStreamCreateWithFlags", e);
  }
  streams_.emplace(device, stream);
  return static_cast<void*>(stream);
}

void CudaIpcCopier::Copy(std::span<Slice* const> granted, std::span<Status> results) {
  // What this batch queued on each device's stream; the mappings stay held until the GPU is done.
  struct Queued {
    int device = 0;
    cudaStream_t stream = nullptr;
    std::vector<size_t> slices;
  };
  std::vector<Queued> queued;
  std::vector<std::shared_ptr<const Mapping>> held;
  for (size_t k = 0; k < granted.size(); ++k) {
    const Slice& s = *granted[k];
    Result<RegionKey> key = DecodeKey(s.remote_key);  // passed Check
    Result<uint64_t> offset =
        key.ok() ? key->OffsetOf(s.remote_addr, s.length) : Result<uint64_t>(key.status());
    if (!offset.ok()) {
      results[k] = offset.status();
      continue;
    }
    Result<std::shared_ptr<const Mapping>> mapping = MappingFor(*key);
    if (!mapping.ok()) {
      results[k] = mapping.status().WithContext(peer_name_);
      continue;
    }
    const int device = (*mapping)->device;
    Result<void*> stream = StreamFor(device);
    if (!stream.ok()) {
      results[k] = stream.status();
      continue;
    }
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      results[k] = CudaFailed("cudaSetDevice(" + std::to_string(device) + ")", e);
      continue;
    }
    uint8_t* remote = (*mapping)->base + *offset;
    auto* local = reinterpret_cast<uint8_t*>(s.local_addr);  // NOLINT: the engine's pinned region
    auto* st = static_cast<cudaStream_t>(*stream);
    const cudaError_t e = s.op == OpCode::kWrite
                              ? cudaMemcpyAsync(remote, local, s.length, cudaMemcpyDefault, st)
                              : cudaMemcpyAsync(local, remote, s.length, cudaMemcpyDefault, st);
    if (e != cudaSuccess) {
      results[k] = CudaFailed("cudaMemcpyAsync of " + std::to_string(s.length) + " bytes", e);
      continue;
    }
    held.push_back(*std::move(mapping));
    auto q = std::find_if(queued.begin(), queued.end(),
                          [&](const Queued& x) { return x.device == device; });
    if (q == queued.end()) q = queued.insert(queued.end(), Queued{device, st, {}});
    q->slices.push_back(k);
  }
  // One event per stream used; each slice's result is its stream's.
  for (Queued& q : queued) {
    Status outcome = Status::Ok();
    cudaEvent_t event = nullptr;
    cudaError_t e = cudaSetDevice(q.device);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(event, q.stream);
    if (e == cudaSuccess) {
      e = WaitEvent(event, options_.slow_copy_warning, peer_name_);
      if (e != cudaSuccess) outcome = CudaFailed("copying to/from " + peer_name_, e);
    } else {
      outcome = CudaFailed("cudaEventCreate/Record", e);
      // The copies are queued but cannot be waited for by event: wait for the whole stream.
      if (const cudaError_t s = cudaStreamSynchronize(q.stream); s != cudaSuccess) {
        outcome = CudaFailed("copying to/from " + peer_name_ + " (cudaStreamSynchronize)", s);
      }
    }
    if (event != nullptr) cudaEventDestroy(event);
    for (size_t k : q.slices) results[k] = outcome;
  }
}

void CudaIpcCopier::Refused(const Slice& slice, const Status& answer) {
  if (same_process_) return;
  if (answer.code() != StatusCode::kStale && answer.code() != StatusCode::kNotFound) return;
  Result<RegionKey> key = DecodeKey(slice.remote_key);
  if (!key.ok()) return;
  MutexLock lock(mu_);
  cache_.erase(key->handle);  // closed once the last Copy using it is done
}

}  // namespace ferry::cuda_ipc
