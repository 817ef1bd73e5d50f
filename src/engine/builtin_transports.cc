#include "engine/builtin_transports.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>

#include "common/log.h"
#include "core/location.h"
#include "transport/cxl/cxl_transport.h"
#include "transport/file/file_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
#if FERRY_WITH_RDMA
#include "transport/rdma/rdma_transport.h"
#endif
#if FERRY_WITH_CUDA
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#include "transport/cuda_ipc/cuda_memory.h"
#endif

namespace ferry {

namespace {

#if FERRY_WITH_RDMA
RdmaTransportOptions RdmaOptions(const EngineOptions& options) {
  RdmaTransportOptions o;
  o.provider = options.rdma_provider;
  o.devices = options.rdma_devices;
  o.op_timeout = options.request_timeout;  // each op is further bounded by its slice's deadline
  // FI_HMEM only where this process can have device memory: without it, asking could only
  // change what the provider offers host memory.
#if FERRY_WITH_CUDA
  o.hmem = cuda::Available().ok();
#else
  o.hmem = false;
#endif
  return o;
}
#endif

Result<std::unique_ptr<Transport>> Create(const std::string& name, const EngineOptions& options) {
  if (name == "tcp") {
    // Every transport takes its timeouts from the engine's options.
    TcpTransportOptions o;
    o.io_timeout = options.request_timeout;
    o.idle_timeout = options.idle_link_timeout;
    o.payload_checksum = options.tcp_payload_checksum;
    return CreateTcpTransport(o);
  }
  if (name == "shm") {
    ShmTransportOptions o;
    o.socket_dir = options.shm_dir;
    o.io_timeout = options.request_timeout;
    o.idle_timeout = options.idle_link_timeout;
    // shm copies heap memory with CMA, which Yama's ptrace_scope 1 allows only when asked.
    o.allow_same_user_ptrace = options.allow_same_user_ptrace != Toggle::kOff;
    return CreateShmTransport(o);
  }
  if (name == "cxl") {
    if (options.cxl_window.empty()) {
      return InvalidArgumentError("transport 'cxl' needs a window (EngineOptions::cxl_window)");
    }
    CxlTransportOptions o;
    o.window_path = options.cxl_window;
    o.window_size = options.cxl_window_size;
    o.socket_dir = options.shm_dir;
    o.io_timeout = options.request_timeout;
    o.idle_timeout = options.idle_link_timeout;
    return CreateCxlTransport(o);
  }
  if (name == "file") {
    FileTransportOptions o;
    o.queue_depth = options.file_queue_depth;
    o.direct_io = options.file_direct_io;
    return CreateFileTransport(o);
  }
#if FERRY_WITH_RDMA
  if (name == "rdma") return CreateRdmaTransport(RdmaOptions(options));
#endif
#if FERRY_WITH_CUDA
  if (name == "cuda-ipc") {
    CudaIpcTransportOptions o;
    o.socket_dir = options.shm_dir;
    o.io_timeout = options.request_timeout;
    o.idle_timeout = options.idle_link_timeout;
    return CreateCudaIpcTransport(o);
  }
#endif
  std::string available;
  for (const std::string& n : BuiltinTransportNames())
    available += (available.empty() ? "" : ", ") + n;
  return InvalidArgumentError("unknown transport '" + name + "' (this build has: " + available +
                              ", or auto)");
}

// What "auto" installs here.
std::vector<std::string> AutoTransports(const EngineOptions& options) {
  std::vector<std::string> names = {"tcp", "shm"};
#if FERRY_WITH_CUDA
  // cuda-ipc: only where the runtime sees a device (probed once per process, cached).
  if (Status cuda = cuda::Available(); cuda.ok()) {
    names.insert(names.begin(), "cuda-ipc");
  } else {
    static std::once_flag noted;
    std::call_once(noted, [&] {
      FERRY_LOG(kInfo) << "transport 'cuda-ipc' not installed (no device memory): " << cuda;
    });
  }
#endif
  // file: left out where io_uring cannot work (no kernel support, or a seccomp filter refusing
  // it, as container runtimes may), saying so once per process, not once per engine.
  if (Status uring = FileTransportAvailable(); uring.ok()) {
    names.push_back("file");
  } else {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      FERRY_LOG(kWarn) << "transport 'file' not installed (file buffers unavailable): " << uring;
    });
  }
  if (!options.cxl_window.empty()) names.push_back("cxl");
#if FERRY_WITH_RDMA
  Result<std::string> provider = ProbeRdmaProvider(RdmaOptions(options));
  if (provider.ok()) {
    names.push_back("rdma");
  } else if (!options.rdma_provider.empty()) {
    FERRY_LOG(kWarn) << "rdma not installed: " << provider.status();
  }
#endif
  return names;
}

}  // namespace

std::vector<std::string> BuiltinTransportNames() {
  return {
#if FERRY_WITH_CUDA
    "cuda-ipc",
#endif
        "cxl", "shm", "file",
#if FERRY_WITH_RDMA
        "rdma",
#endif
        "tcp"
  };
}

Result<Location> DetectMemoryLocation(const void* addr) {
#if FERRY_WITH_CUDA
  if (std::optional<int> device = cuda::DeviceOf(addr); device.has_value()) {
    return Location{Location::Kind::kCuda, *device};
  }
#endif
  return DetectHostLocation(addr);
}

Status CheckMemoryLocation(const void* addr, uint64_t length, const Location& location) {
#if FERRY_WITH_CUDA
  if (location.is_host()) {
    // Host transports would memcpy into it: device memory named "cpu" is refused.
    if (std::optional<int> device = cuda::DeviceOf(addr); device.has_value()) {
      return InvalidArgumentError("location " + location.ToString() + ", but address " +
                                  std::to_string(reinterpret_cast<uintptr_t>(addr)) +
                                  " is memory of cuda:" + std::to_string(*device));
    }
  }
#endif
  if (!location.is_device()) return Status::Ok();
#if FERRY_WITH_CUDA
  if (location.kind == Location::Kind::kCuda) {
    if (location.index == Location::kAnyIndex) {
      return InvalidArgumentError("location 'cuda' needs a device index (cuda:<n>)");
    }
    return cuda::CheckDeviceMemory(addr, length, location.index);
  }
#else
  (void)addr;
  (void)length;
  if (location.kind == Location::Kind::kCuda) {
    return UnavailableError("location " + location.ToString() +
                            ": this build of ferry has no CUDA support (built with "
                            "FERRY_WITH_CUDA=OFF or without the CUDA toolkit)");
  }
#endif
  return UnavailableError("location " + location.ToString() +
                          ": this build of ferry does not reach that kind of device memory");
}

Status CopyLocalMemory(void* dst, const void* src, size_t length, bool device_involved) {
#if FERRY_WITH_CUDA
  if (length > 0 && cuda::Available().ok() &&
      (device_involved || cuda::DeviceOf(dst).has_value() || cuda::DeviceOf(src).has_value())) {
    return cuda::Copy(dst, src, length);
  }
#endif
  if (device_involved) {
    return UnavailableError("a local copy involves device memory, out of reach here");
  }
  std::memmove(dst, src, length);
  return Status::Ok();
}

Result<void*> AllocateDeviceMemory(size_t length, const Location& location) {
  if (location.kind != Location::Kind::kCuda || location.index == Location::kAnyIndex) {
    return InvalidArgumentError("device memory is allocated on one device (cuda:<n>), not '" +
                                location.ToString() + "'");
  }
#if FERRY_WITH_CUDA
  return cuda::AllocateDevice(length, location.index);
#else
  (void)length;
  return UnavailableError("location " + location.ToString() +
                          ": this build of ferry has no CUDA support (built with "
                          "FERRY_WITH_CUDA=OFF or without the CUDA toolkit)");
#endif
}

void FreeDeviceMemory(void* addr) {
#if FERRY_WITH_CUDA
  cuda::FreeDevice(addr);
#else
  (void)addr;
#endif
}

Result<engine::StagingOps> DeviceStagingOps() {
#if FERRY_WITH_CUDA
  RETURN_IF_ERROR(cuda::Available());
  engine::StagingOps ops;
  ops.copy = [](void* dst, const void* src, size_t length) { return cuda::Copy(dst, src, length); };
  ops.allocate_pinned = [](size_t length) { return cuda::AllocatePinnedHost(length); };
  ops.free_pinned = [](void* addr) { cuda::FreePinnedHost(addr); };
  return ops;
#else
  return UnavailableError("this build of ferry has no CUDA support");
#endif
}

Result<std::vector<std::unique_ptr<Transport>>> CreateBuiltinTransports(
    const EngineOptions& options) {
  std::vector<std::string> wanted = options.transports;
  if (wanted.empty() || (wanted.size() == 1 && wanted[0] == "auto")) {
    wanted = AutoTransports(options);
  }
  std::vector<std::unique_ptr<Transport>> out;
  for (const std::string& name : wanted) {
    for (const auto& t : out) {
      if (t->name() == name) return InvalidArgumentError("transport '" + name + "' named twice");
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, Create(name, options));
    out.push_back(std::move(transport));
  }
  if (options.allow_same_user_ptrace == Toggle::kOn &&
      std::find(wanted.begin(), wanted.end(), "shm") == wanted.end()) {
    return InvalidArgumentError(
        "allow_same_user_ptrace is on, but only the shm transport (its process_vm_* copies) "
        "needs it, and it is not installed");
  }
  return out;
}

}  // namespace ferry
