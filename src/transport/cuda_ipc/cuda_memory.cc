#include "transport/cuda_ipc/cuda_memory.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <mutex>

#include "common/log.h"

namespace ferry::cuda {
namespace {

struct Probe {
  Status status;
  int devices = 0;
  // cuMemGetAddressRange from the driver, through the runtime's entry-point lookup (so that
  // nothing links libcuda); null when the driver does not offer it.
  CUresult (*get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
};

const Probe& TheProbe() {
  static const Probe probe = [] {
    Probe p;
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky: leave no error behind for later calls
      const char* cause =
          e == cudaErrorNoDevice ? "no device"
          : (e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary ||
             e == cudaErrorSystemDriverMismatch || e == cudaErrorCallRequiresNewerDriver ||
             e == cudaErrorCompatNotSupportedOnDevice)
              ? "no usable driver"
              : "the runtime failed to start";
      p.status = UnavailableError(std::string("CUDA: ") + cause + " (" + ErrorText(e) + ")");
    } else if (count <= 0) {
      p.status = UnavailableError("CUDA: no device (the runtime sees 0 devices)");
    } else {
      p.devices = count;
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
      if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                           &found) == cudaSuccess &&
          found == cudaDriverEntryPointSuccess && fn != nullptr) {
        p.get_address_range =
            reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr)>(fn);
      } else {
        cudaGetLastError();
      }
    }
    if (p.status.ok()) {
      FERRY_LOG(kInfo) << "CUDA: " << p.devices << " device(s)";
    } else {
      FERRY_LOG(kDebug) << p.status;
    }
    return p;
  }();
  return probe;
}

std::string Where(const void* addr) { return std::to_string(reinterpret_cast<uintptr_t>(addr)); }

}  // namespace

std::string ErrorText(int error) {
  const auto e = static_cast<cudaError_t>(error);
  const char* name = cudaGetErrorName(e);
  const char* text = cudaGetErrorString(e);
  return std::string(name != nullptr ? name : "cudaError?") + ": " +
         (text != nullptr ? text : "unknown error");
}

DeviceGuard::DeviceGuard(int device) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    current = -1;
  }
  // Also when `device` is current already: cudaSetDevice makes its primary context current on
  // this thread, which driver calls (cuMemGetAddressRange) need.
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    cudaGetLastError();
    status_ = UnavailableError("CUDA: cannot select device " + std::to_string(device) + " (" +
                               ErrorText(e) + ")");
    return;
  }
  if (current != device) previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) cudaGetLastError();
}

Status Available() { return TheProbe().status; }

int DeviceCount() { return TheProbe().devices; }

namespace {

// What CUDA says `addr` is: cudaMemoryTypeUnregistered also when it cannot say (an address CUDA
// does not know, on an old driver) or when CUDA is unavailable.
cudaPointerAttributes AttributesOf(const void* addr) {
  cudaPointerAttributes attributes{};
  attributes.type = cudaMemoryTypeUnregistered;
  if (!TheProbe().status.ok() || addr == nullptr) return attributes;
  if (cudaPointerGetAttributes(&attributes, addr) != cudaSuccess) {
    cudaGetLastError();
    attributes = cudaPointerAttributes{};
    attributes.type = cudaMemoryTypeUnregistered;
  }
  return attributes;
}

}  // namespace

std::optional<int> DeviceOf(const void* addr) {
  const cudaPointerAttributes attributes = AttributesOf(addr);
  if (attributes.type != cudaMemoryTypeDevice) return std::nullopt;
  return attributes.device;
}

Result<DeviceAllocation> FindAllocation(const void* addr, uint64_t length) {
  RETURN_IF_ERROR(Available());
  const std::optional<int> device = DeviceOf(addr);
  if (!device.has_value()) {
    return InvalidArgumentError("address " + Where(addr) + " is not CUDA device memory");
  }
  const Probe& probe = TheProbe();
  if (probe.get_address_range == nullptr) {
    return UnavailableError("CUDA: the driver offers no cuMemGetAddressRange");
  }
  // The driver call acts in the current context: make the pointer's device current on this
  // thread meanwhile (cudaSetDevice also initialises its primary context).
  DeviceGuard on_device(*device);
  RETURN_IF_ERROR(on_device.status());
  CUdeviceptr base = 0;
  size_t size = 0;
  if (const CUresult r = probe.get_address_range(&base, &size, reinterpret_cast<CUdeviceptr>(addr));
      r != CUDA_SUCCESS) {
    return InvalidArgumentError("CUDA: cannot find the allocation that holds address " +
                                Where(addr) + " (CUresult " + std::to_string(r) + ")");
  }
  const auto start = reinterpret_cast<uint64_t>(addr);
  if (start < base || start - base > size || length > size - (start - base)) {
    return InvalidArgumentError("range [" + Where(addr) + ", +" + std::to_string(length) +
                                ") leaves its CUDA allocation [" + std::to_string(base) + ", +" +
                                std::to_string(size) + ")");
  }
  return DeviceAllocation{base, size, *device};
}

Status CheckDeviceMemory(const void* addr, uint64_t length, int device) {
  RETURN_IF_ERROR(Available());
  if (device < 0 || device >= DeviceCount()) {
    return InvalidArgumentError("location cuda:" + std::to_string(device) + ": this process sees " +
                                std::to_string(DeviceCount()) + " CUDA device(s)");
  }
  const std::optional<int> actual = DeviceOf(addr);
  if (!actual.has_value()) {
    const cudaMemoryType type = AttributesOf(addr).type;
    return InvalidArgumentError(
        "location cuda:" + std::to_string(device) + ", but address " + Where(addr) + " is " +
        (type == cudaMemoryTypeManaged
             ? "CUDA managed memory, which ferry treats as host memory (register it as \"cpu\" "
               "or \"*\")"
         : type == cudaMemoryTypeHost ? "pinned host memory, not CUDA device memory"
                                      : "host memory, not CUDA device memory"));
  }
  if (*actual != device) {
    return InvalidArgumentError("location cuda:" + std::to_string(device) + ", but address " +
                                Where(addr) + " is memory of cuda:" + std::to_string(*actual));
  }
  return FindAllocation(addr, length).status();
}

Result<void*> AllocatePinnedHost(size_t length) {
  RETURN_IF_ERROR(Available());
  void* addr = nullptr;
  if (const cudaError_t e = cudaHostAlloc(&addr, length, cudaHostAllocPortable); e != cudaSuccess) {
    cudaGetLastError();
    return UnavailableError("cudaHostAlloc of " + std::to_string(length) + " bytes failed (" +
                            ErrorText(e) + ")");
  }
  return addr;
}

namespace {
// A release that cannot be undone: its error is logged and cleared, never returned.
void WarnIfFailed(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  FERRY_LOG(kWarn) << call << ": " << ErrorText(e);
}
}  // namespace

void FreePinnedHost(void* addr) {
  if (addr != nullptr) WarnIfFailed(cudaFreeHost(addr), "cudaFreeHost");
}

Result<void*> AllocateDevice(size_t length, int device) {
  RETURN_IF_ERROR(Available());
  DeviceGuard on_device(device);
  RETURN_IF_ERROR(on_device.status());
  void* addr = nullptr;
  if (const cudaError_t e = cudaMalloc(&addr, length); e != cudaSuccess) {
    cudaGetLastError();
    return UnavailableError("cudaMalloc of " + std::to_string(length) + " bytes on cuda:" +
                            std::to_string(device) + " failed (" + ErrorText(e) + ")");
  }
  return addr;
}

void FreeDevice(void* addr) {
  if (addr != nullptr) WarnIfFailed(cudaFree(addr), "cudaFree");
}

Status Copy(void* dst, const void* src, size_t length) {
  RETURN_IF_ERROR(Available());
  if (length == 0) return Status::Ok();
  // cudaMemcpy returns before a device-to-device copy is done: copy on this thread's stream of
  // a device that holds one side, and wait for that stream.
  const std::optional<int> device = DeviceOf(dst).has_value() ? DeviceOf(dst) : DeviceOf(src);
  auto failed = [&](const char* call, cudaError_t e) {
    cudaGetLastError();
    return InternalError(std::string(call) + " of " + std::to_string(length) + " bytes from " +
                         Where(src) + " to " + Where(dst) + " failed (" + ErrorText(e) + ")");
  };
  std::optional<DeviceGuard> on_device;
  if (device.has_value()) {
    on_device.emplace(*device);
    RETURN_IF_ERROR(on_device->status());
  }
  if (const cudaError_t e =
          cudaMemcpyAsync(dst, src, length, cudaMemcpyDefault, cudaStreamPerThread);
      e != cudaSuccess) {
    return failed("cudaMemcpyAsync", e);
  }
  if (const cudaError_t e = cudaStreamSynchronize(cudaStreamPerThread); e != cudaSuccess) {
    return failed("cudaMemcpy (waiting for it)", e);
  }
  return Status::Ok();
}

}  // namespace ferry::cuda
