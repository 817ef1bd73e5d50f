// The transports compiled into this build (DESIGN.md: one file holds every #if).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/staging_copier.h"
#include "ferry/options.h"
#include "ferry/status.h"
#include "transport/transport.h"

namespace ferry {

// Names of the transports this build has, in priority order.
std::vector<std::string> BuiltinTransportNames();

// Creates the transports `options.transports` names, configured from `options`. {"auto"}: tcp,
// shm and file, cxl when options.cxl_window is set, rdma when options.rdma_provider is set or a
// hardware provider is found, cuda-ipc when CUDA is compiled in and the runtime sees a device.
// "cuda-ipc" named explicitly without a device fails the engine's start with Unavailable. An
// unknown name is InvalidArgument listing the available ones; options.allow_same_user_ptrace on
// without shm among them is InvalidArgument.
Result<std::vector<std::unique_ptr<Transport>>> CreateBuiltinTransports(
    const EngineOptions& options);

// Device memory as this build reaches it (CUDA when compiled in: transport/cuda_ipc/
// cuda_memory.h; the runtime is probed once per process and "no CUDA" cached). Thread-safe.
//
// Where `addr` lives, for location "*": cuda:<n> for CUDA device memory, else the host's NUMA
// node (DetectHostLocation, with its errors).
Result<Location> DetectMemoryLocation(const void* addr);
// Checks an explicit location against the memory: for a device location, [addr, addr + length) is
// memory of that device (one allocation); Unavailable naming the cause when the build or machine
// has no such device ("CUDA: no device (cudaErrorNoDevice: ...)"); InvalidArgument when the memory
// is something else. A host location is refused (InvalidArgument) only for memory that is
// known to be a device's.
Status CheckMemoryLocation(const void* addr, uint64_t length, const Location& location);
// Copies `length` bytes between two buffers of this process, either of which may be device
// memory (`device_involved`: a side's registered location is a device): a checked, synchronous
// cudaMemcpy then (also when a pointer turns out to be device memory the caller did not know
// of), memmove for host memory. Returns once the bytes are in place.
Status CopyLocalMemory(void* dst, const void* src, size_t length, bool device_involved);

// The copies and pinned host memory of engine::StagingCopier for this build's device memory
// (checked cudaMemcpy, cudaHostAlloc): Unavailable naming the cause when the build or machine
// has no device, and then no device memory can be registered either.
Result<engine::StagingOps> DeviceStagingOps();
// `length` bytes of memory of the device `location` names (cudaMalloc for cuda:<n>), and its
// release: Unavailable naming the cause when the build or machine has no such device,
// InvalidArgument for a location that is not one device's.
Result<void*> AllocateDeviceMemory(size_t length, const Location& location);
void FreeDeviceMemory(void* addr);

}  // namespace ferry
