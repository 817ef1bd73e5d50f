// The CUDA memory-type helper: the only place outside the cuda-ipc transport's copier where
// ferry calls the CUDA runtime, and the seam through which the engine (via
// engine/builtin_transports.h, which holds the build flag's #if) learns about device memory.
// No CUDA header leaves this folder: this header is plain C++.
//
// Availability is probed once per process (cudaGetDeviceCount) and cached, "no CUDA" included:
// without a driver or a device every call here answers at once with Unavailable naming the
// cause ("CUDA: no device (cudaErrorNoDevice: ...)", "CUDA: no usable driver
// (cudaErrorInsufficientDriver: ...)"), and nothing else is asked of the runtime.
//
// Thread contract: every function is thread-safe. Functions that select a device do so on the
// calling thread only (cudaSetDevice is per thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "ferry/status.h"

namespace ferry::cuda {

// Ok when the runtime works and sees at least one device; the cached probe's Unavailable
// otherwise.
Status Available();
// Devices the runtime sees (0 when unavailable).
int DeviceCount();

// The device whose memory `addr` is: its ordinal for device memory (cudaMemoryTypeDevice),
// nullopt for anything else, and nullopt at once when CUDA is unavailable.
//
// Memory kinds, decided here for all of ferry: pinned host memory (cudaHostAlloc,
// cudaMallocHost, cudaHostRegister: cudaMemoryTypeHost) is host memory ("*" reports its NUMA
// node; every CPU transport reaches it). Managed memory (cudaMallocManaged:
// cudaMemoryTypeManaged) is host memory too: the CPU transports reach it with plain loads and
// stores (the driver migrates the pages), while cuda-ipc cannot export it; "cuda:<n>" on it
// is refused (InvalidArgument, naming it managed).
// With a device present, the first call (cudaPointerGetAttributes) initialises CUDA in the
// process: the primary context of the calling thread's current device, also when `addr` is
// host memory ("*" on any buffer asks here first).
std::optional<int> DeviceOf(const void* addr);

// The allocation that holds device memory `addr` (cudaMalloc'd: what cudaIpcGetMemHandle
// exports).
struct DeviceAllocation {
  uint64_t base = 0;
  uint64_t size = 0;
  int device = 0;
};
// Unavailable when CUDA is; InvalidArgument when `addr` is not device memory, or when
// [addr, addr + length) leaves the allocation that holds addr.
Result<DeviceAllocation> FindAllocation(const void* addr, uint64_t length);

// Checks that [addr, addr + length) is memory of device `device` (registration's check of an
// explicit "cuda:<n>"): Unavailable when CUDA is; InvalidArgument naming what the memory is
// otherwise (host memory, another device, a range leaving its allocation).
Status CheckDeviceMemory(const void* addr, uint64_t length, int device);

// A checked, synchronous copy (cudaMemcpyAsync, cudaMemcpyDefault, on the calling thread's
// per-thread stream of the device that holds `dst`, else `src`, then waited for): either side
// may be host or device memory of any device. Returns once the bytes are in place; Internal
// naming the CUDA error when the copy fails, Unavailable when CUDA is.
Status Copy(void* dst, const void* src, size_t length);

// Pinned (page-locked, portable: every device's copies run at full speed from it) host memory of
// `length` bytes, page-aligned (cudaHostAlloc), for the engine's staging chunks: Unavailable
// when CUDA is, or naming the CUDA error when the allocation fails. Freed with FreePinnedHost.
Result<void*> AllocatePinnedHost(size_t length);
void FreePinnedHost(void* addr);

// `length` bytes of device memory on `device` (cudaMalloc, that device made current for the
// call only): Unavailable when CUDA is, or naming the CUDA error. Freed with FreeDevice.
Result<void*> AllocateDevice(size_t length, int device);
void FreeDevice(void* addr);

// "cudaErrorX: description" for a cudaError_t value (an int here, to keep the header plain).
std::string ErrorText(int error);

// Makes `device` current on the calling thread for its lifetime, then makes the device that was
// current before current again: a call on an application's thread (registration, a local copy)
// leaves that thread's CUDA device as it found it. status(): Unavailable when the device could
// not be selected (nothing changed then). Not movable; one thread.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;  // -1: nothing to restore
  Status status_;
};

}  // namespace ferry::cuda
