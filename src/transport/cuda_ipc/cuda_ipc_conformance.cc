// The cuda-ipc transport in the conformance suite (gpu_conformance_test, label gpu): device
// memory of device 0 on both sides, which the cases set and check only through cuda::Copy. The
// suite runs every side in this one process, where the copier reaches a region at its own
// address without opening an IPC handle (cuda_ipc_copier.h).
#include "transport/conformance/conformance.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#include "transport/cuda_ipc/cuda_memory.h"

namespace ferry {
namespace {

const bool registered_cuda_ipc = conformance::Register({
    .name = "cuda_ipc",
    .transport = "cuda-ipc",
    .make = [] { return std::make_unique<CudaIpcTransport>(CudaIpcTransportOptions{}); },
    .unavailable = []() -> std::string {
      const Status available = cuda::Available();
      return available.ok() ? std::string() : available.message();
    },
    .allocate = [](Transport& /*owner*/, size_t length) -> Result<std::shared_ptr<uint8_t>> {
      ASSIGN_OR_RETURN(void* memory, cuda::AllocateDevice(length, 0));
      return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(memory),
                                      [](uint8_t* p) { cuda::FreeDevice(p); });
    },
    .location = Location::Cuda(0),
    .copy = cuda::Copy,
});

}  // namespace
}  // namespace ferry
