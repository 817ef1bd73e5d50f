#include "transport/cuda_ipc/cuda_ipc_transport.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "common/log.h"
#include "transport/cuda_ipc/cuda_ipc_copier.h"
#include "transport/cuda_ipc/cuda_ipc_wire.h"
#include "transport/cuda_ipc/cuda_memory.h"
#include "transport/samehost/copy_engine.h"
#include "transport/samehost/grant_channel.h"

namespace ferry {
namespace cuda_ipc {

constexpr size_t kMaxRangesPerAcquire = 4096;  // the grant server's limit per Acquire

// Thread contract: written by Start before it is shared, read-only afterwards; the members are
// thread-safe.
struct Runtime {
  std::shared_ptr<IpcMappings> mappings = IpcMappings::OfThisProcess();
  std::unique_ptr<samehost::GrantServer> grant_server;  // reset by Stop
  std::unique_ptr<samehost::CopyEngine> engine;         // stopped by Stop
};

}  // namespace cuda_ipc

CudaIpcTransport::CudaIpcTransport(CudaIpcTransportOptions options)
    : options_(std::move(options)) {}

CudaIpcTransport::~CudaIpcTransport() { Stop(); }

TransportCapabilities CudaIpcTransport::capabilities() const {
  TransportCapabilities caps;
  caps.reaches_other_hosts = false;
  caps.reaches_device_memory = true;
  // A GPU copy costs a few microseconds to queue: larger slices than the CPU transports'.
  caps.preferred_slice_size = uint64_t{4} << 20;
  return caps;
}

Result<std::string> CudaIpcTransport::Start(TransportContext* ctx, const TransportStartInfo& info) {
  MutexLock lock(lifecycle_mu_);
  if (started_.load() || stopped_)
    return BusyError("cuda-ipc transport already started or stopped");
  if (ctx == nullptr) return InvalidArgumentError("cuda-ipc Start: null context");
  if (options_.socket_dir.empty()) return InvalidArgumentError("cuda-ipc socket_dir is empty");
  RETURN_IF_ERROR(cuda::Available().WithContext("transport 'cuda-ipc'"));
  auto rt = std::make_shared<cuda_ipc::Runtime>();
  samehost::CopyEngineOptions engine_options;
  engine_options.transport = "cuda-ipc";
  engine_options.io_timeout = options_.io_timeout;
  engine_options.workers = options_.workers;
  engine_options.max_queued_slices = options_.max_queued_slices;
  engine_options.max_batch = cuda_ipc::kMaxRangesPerAcquire;
  engine_options.idle_timeout = options_.idle_timeout;
  engine_options.auth_secret = info.auth_secret;
  ASSIGN_OR_RETURN(rt->engine, samehost::CopyEngine::Start(ctx, engine_options));
  samehost::GrantServer::Options grant;
  grant.transport = "cuda-ipc";
  grant.auth_secret = info.auth_secret;
  grant.dir = options_.socket_dir;
  grant.max_ranges_per_acquire = cuda_ipc::kMaxRangesPerAcquire;
  Result<std::unique_ptr<samehost::GrantServer>> server =
      samehost::GrantServer::Start(ctx, std::move(grant));
  if (!server.ok()) {
    rt->engine->Stop();
    return server.status();
  }
  rt->grant_server = std::move(server).value();
  const cuda_ipc::Endpoint endpoint{::getpid(), cuda_ipc::ThisProcessToken(),
                                    rt->grant_server->path()};
  runtime_ = std::move(rt);
  started_.store(true, std::memory_order_release);
  return cuda_ipc::EncodeEndpoint(endpoint);
}

void CudaIpcTransport::Stop() {
  MutexLock lock(lifecycle_mu_);
  if (stopped_) return;
  stopped_ = true;
  if (!started_.load(std::memory_order_acquire)) return;
  runtime_->engine->Stop();
  runtime_->grant_server.reset();  // closes peers' connections, releasing their pins
}

Result<std::string> CudaIpcTransport::RegisterMemory(uint64_t addr, uint64_t length,
                                                     const Location& location,
                                                     MemoryAccess /*access*/) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("cuda-ipc transport not started");
  if (length == 0) return InvalidArgumentError("cuda-ipc RegisterMemory: length 0");
  if (location.kind != Location::Kind::kCuda) {
    return NotFoundError("cuda-ipc reaches CUDA device memory only, not " + location.ToString());
  }
  const auto* ptr = reinterpret_cast<const void*>(addr);  // NOLINT: the caller's region
  ASSIGN_OR_RETURN(const cuda::DeviceAllocation allocation, cuda::FindAllocation(ptr, length));
  if (location.index != Location::kAnyIndex && location.index != allocation.device) {
    return InvalidArgumentError("cuda-ipc: location " + location.ToString() +
                                ", but the memory is on cuda:" + std::to_string(allocation.device));
  }
  cuda::DeviceGuard on_device(allocation.device);  // the caller's thread keeps its device
  RETURN_IF_ERROR(on_device.status());
  cudaIpcMemHandle_t handle;
  if (const cudaError_t e =
          cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(allocation.base));  // NOLINT
      e != cudaSuccess) {
    cudaGetLastError();
    Status unreachable = NotFoundError(
        "cuda-ipc cannot export the allocation that holds this region (cudaIpcGetMemHandle: " +
        cuda::ErrorText(e) + "; memory from cudaMalloc can be exported, pools cannot)");
    FERRY_LOG(kWarn) << unreachable;
    return unreachable;
  }
  cuda_ipc::RegionKey key;
  std::memcpy(key.handle.data(), &handle, cuda_ipc::kIpcHandleBytes);
  ASSIGN_OR_RETURN(key.device_uuid, cuda_ipc::UuidOfDevice(allocation.device));
  key.alloc_base = allocation.base;
  key.alloc_size = allocation.size;
  key.region_addr = addr;
  key.region_length = length;
  return cuda_ipc::EncodeKey(key);
}

Status CudaIpcTransport::UnregisterMemory(uint64_t /*addr*/, uint64_t /*length*/) {
  return Status::Ok();
}

Result<std::shared_ptr<PeerLink>> CudaIpcTransport::Connect(const SegmentDesc& peer) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("cuda-ipc transport not started");
  const std::string peer_name = "segment '" + peer.name + "'";
  const auto it = peer.transports.find("cuda-ipc");
  if (it == peer.transports.end()) {
    return InvalidArgumentError(peer_name + " publishes no cuda-ipc endpoint");
  }
  Result<cuda_ipc::Endpoint> endpoint = cuda_ipc::DecodeEndpoint(it->second);
  if (!endpoint.ok()) return endpoint.status().WithContext(peer_name);
  std::string grant_path = endpoint->grant_path;
  cuda_ipc::CopierOptions copier_options;
  copier_options.slow_copy_warning = options_.io_timeout;
  return runtime_->engine->MakeLink(
      std::move(grant_path), peer_name,
      std::make_unique<cuda_ipc::CudaIpcCopier>(runtime_->mappings, std::move(endpoint).value(),
                                                peer_name, copier_options));
}

Status CudaIpcTransport::Submit(PeerLink& link, std::span<Slice* const> slices) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("cuda-ipc transport not started");
  return runtime_->engine->Submit(link, slices);
}

Result<std::string> CudaIpcTransport::OnExchange(std::string_view /*payload*/) {
  return InvalidArgumentError("cuda-ipc uses no exchange");
}

size_t CudaIpcTransport::open_mappings() const {
  if (!started_.load(std::memory_order_acquire)) return 0;
  return runtime_->mappings->open_count();
}

std::unique_ptr<Transport> CreateCudaIpcTransport(CudaIpcTransportOptions options) {
  return std::make_unique<CudaIpcTransport>(std::move(options));
}

}  // namespace ferry
