// The shm transport in the conformance suite, twice: over heap memory (process_vm_writev/readv,
// "cma" keys) and over its own shared allocations (memcpy through a mapping, "mapped" keys).
#include "transport/conformance/conformance.h"
#include "transport/shm/shm_transport.h"

namespace ferry {
namespace {

std::unique_ptr<Transport> MakeShm() {
  ShmTransportOptions options;
  options.io_timeout = std::chrono::milliseconds(5000);
  return CreateShmTransport(options);
}

const bool registered_cma = conformance::Register({
    .name = "shm",
    .transport = "shm",
    .make = MakeShm,
});

const bool registered_mapped = conformance::Register({
    .name = "shm_managed",
    .transport = "shm",
    .make = MakeShm,
    .allocate = [](Transport& owner, size_t length) -> Result<std::shared_ptr<uint8_t>> {
      ASSIGN_OR_RETURN(void* memory, owner.AllocateShared(length, Location::Cpu()));
      return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(memory),
                                      [&owner](uint8_t* p) { owner.FreeShared(p).IgnoreError(); });
    },
});

}  // namespace
}  // namespace ferry
